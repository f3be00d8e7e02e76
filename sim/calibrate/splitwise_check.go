package calibrate

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/mosaic-sched/mosaic/sim"
)

// CheckIterations fits each GPU's coefficients on part of its iteration points (FitIterations,
// from prof's coefficients for the GPU) and predicts the rest. Without a hold-out it leaves one
// tensor-parallel degree out at a time: for each of the GPU's degrees in increasing order, the
// others are fitted and that one predicted. With one (keys IterationHoldoutKeys) the points it
// leaves are fitted and those it holds out predicted. It returns the predicted points, GPU by
// GPU in the order of their first point, fold by fold, and logs each fit on slog's default
// logger. A split that leaves nothing to fit or to predict is an *OptionError.
func CheckIterations(cases []IterationCase, prof *sim.Profile, held *Holdout, opts FitOptions) ([]IterationPrediction, error) {
	if held != nil && !slices.Contains(IterationHoldoutKeys, held.Key) {
		return nil, optionErrorf("--holdout with --splitwise takes tp, B or model")
	}
	var gpus []*sim.GPU
	byGPU := map[*sim.GPU][]IterationCase{}
	for _, c := range cases {
		if _, ok := byGPU[c.GPU]; !ok {
			gpus = append(gpus, c.GPU)
		}
		byGPU[c.GPU] = append(byGPU[c.GPU], c)
	}
	var all []IterationPrediction
	for _, g := range gpus {
		for _, fold := range iterationFolds(byGPU[g], held) {
			ps, err := checkIterationFold(g, byGPU[g], fold, prof, held, opts)
			if err != nil {
				return nil, err
			}
			all = append(all, ps...)
		}
	}
	return all, nil
}

// iterationFolds are the tensor-parallel degrees left out in turn, in increasing order; with a
// hold-out, a single fold (0).
func iterationFolds(cases []IterationCase, held *Holdout) []int {
	if held != nil {
		return []int{0}
	}
	var folds []int
	for _, c := range cases {
		if !slices.Contains(folds, c.TP) {
			folds = append(folds, c.TP)
		}
	}
	sort.Ints(folds)
	return folds
}

// checkIterationFold fits GPU g on the cases the fold (or the hold-out) leaves and predicts
// the others.
func checkIterationFold(g *sim.GPU, cases []IterationCase, fold int, prof *sim.Profile, held *Holdout, opts FitOptions) ([]IterationPrediction, error) {
	var fitCases, test []IterationCase
	for _, c := range cases {
		if (held == nil && c.TP == fold) || held.matchesShape(c.Model, c.TP, c.Batch, 0) {
			test = append(test, c)
		} else {
			fitCases = append(fitCases, c)
		}
	}
	if len(fitCases) == 0 || len(test) == 0 {
		return nil, optionErrorf("%s: the split leaves no rows to fit or none to predict", g.Name)
	}
	fr, err := FitIterations(fitCases, prof.For(g), opts)
	if err != nil {
		return nil, err
	}
	slog.Info("fitted", "gpu", g.Name, "held_out_tp", fold, "rows", len(fitCases), "mape_pct", fmt.Sprintf("%.2f", fr.MAPE),
		"compute_eff", fmt.Sprintf("%.3f", fr.Coef.ComputeEfficiency), "memory_eff", fmt.Sprintf("%.3f", fr.Coef.MemoryEfficiency),
		"iter_ms", fmt.Sprintf("%.2f", fr.Coef.IterationOverheadMS), "allreduce_us", fmt.Sprintf("%.1f", fr.Coef.AllReduceUS),
		"hop_us", fmt.Sprintf("%.2f", fr.Coef.AllReduceHopUS), "link_eff", fmt.Sprintf("%.3f", fr.Coef.LinkEfficiency),
		"floor_ms", fmt.Sprintf("%.2f", fr.Coef.LaunchFloorMS))
	out := make([]IterationPrediction, 0, len(test))
	for _, c := range test {
		p, err := PredictIteration(c, fr.Coef)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// IterationGroup is a set of iteration predictions that share a key.
type IterationGroup struct {
	Key   string
	Preds []IterationPrediction
}

// IterationGroups groups iteration predictions by GPU, tensor-parallel degree and kind
// ("H100-80GB TP4 prompt") and by GPU and degree ("H100-80GB TP4"), sorted by key.
func IterationGroups(ps []IterationPrediction) []IterationGroup {
	groups := map[string][]IterationPrediction{}
	var keys []string
	for _, p := range ps {
		for _, k := range []string{fmt.Sprintf("%s TP%d %s", p.GPU.Name, p.TP, p.Kind), fmt.Sprintf("%s TP%d", p.GPU.Name, p.TP)} {
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], p)
		}
	}
	sort.Strings(keys)
	out := make([]IterationGroup, len(keys))
	for i, k := range keys {
		out[i] = IterationGroup{Key: k, Preds: groups[k]}
	}
	return out
}
