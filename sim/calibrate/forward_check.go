package calibrate

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/sim"
)

// ForwardSets reads forward-pass profiles of GPU g (ReadForward) and groups their points by
// model shape (model, TP), in the order the shapes first appear. A point's model is its model
// column unless model names one for all (which must then agree with a column naming a catalog
// model); its tensor-parallel degree is its tp column, or tp (> 0) for points without one,
// else 1. A gpu column naming another catalog GPU than g is an error. Errors name the file,
// the line and the command line's flag (--model, --tp, --gpu) that disagrees with it.
func ForwardSets(paths []string, cat *sim.Catalog, g *sim.GPU, model string, tp int) ([]ForwardSet, error) {
	var sets []ForwardSet
	for _, path := range paths {
		points, err := ReadForward(path)
		if err != nil {
			return nil, err
		}
		for _, p := range points {
			m, deg, err := forwardShape(path, p, cat, g, model, tp)
			if err != nil {
				return nil, err
			}
			i := slices.IndexFunc(sets, func(s ForwardSet) bool { return s.Model == m && s.TP == deg })
			if i < 0 {
				sets = append(sets, ForwardSet{Model: m, TP: deg})
				i = len(sets) - 1
			}
			sets[i].Points = append(sets[i].Points, p)
		}
	}
	return sets, nil
}

// forwardShape is the catalog model and tensor-parallel degree of point p of file path.
func forwardShape(path string, p ForwardPoint, cat *sim.Catalog, g *sim.GPU, model string, tp int) (*sim.Model, int, error) {
	if p.GPU != "" {
		if pg, err := cat.GPU(p.GPU); err == nil && pg != g {
			return nil, 0, fmt.Errorf("%s:%d: column \"gpu\" is %s, but --gpu %s", path, p.Line, pg.Name, g.Name)
		}
	}
	var m *sim.Model
	var err error
	switch {
	case model != "":
		if m, err = cat.Model(model); err != nil {
			return nil, 0, err
		}
		if p.Model != "" {
			if pm, err := cat.Model(p.Model); err == nil && pm != m {
				return nil, 0, fmt.Errorf("%s:%d: column \"model\" is %s, but --model %s", path, p.Line, pm.ID, m.ID)
			}
		}
	case p.Model == "":
		return nil, 0, fmt.Errorf("%s:%d: column \"model\" is empty: give --model", path, p.Line)
	default:
		if m, err = cat.Model(p.Model); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: column \"model\": %w (or give --model)", path, p.Line, err)
		}
	}
	deg := max(p.TP, 1)
	if tp > 0 {
		if p.TP != 0 && p.TP != tp {
			return nil, 0, fmt.Errorf("%s:%d: column \"tp\" is %d, but --tp %d", path, p.Line, p.TP, tp)
		}
		deg = tp
	}
	if err := sim.ValidTP(m, deg); err != nil {
		return nil, 0, fmt.Errorf("%s:%d: %s at TP %d: %w", path, p.Line, m.ID, deg, err)
	}
	return m, deg, nil
}

// ForwardOptions configures CheckForward.
type ForwardOptions struct {
	// Fit fits the GPU's efficiencies (FitForward) on the points before predicting them.
	Fit bool
	// Holdout leaves points out of the fit and reports them apart (keys ForwardHoldoutKeys;
	// L is the context).
	Holdout *Holdout
	// FitOptions chooses the coefficients fitted (ForwardFittable).
	FitOptions FitOptions
}

// ForwardRow is one point's prediction with its shape and set.
type ForwardRow struct {
	ForwardPrediction
	Model *sim.Model
	TP    int
	// Set is "-" without a fit, else "held-out" or "fitted".
	Set string
}

// ForwardGroup is a set of forward predictions that share a key.
type ForwardGroup struct {
	Key   string
	Preds []ForwardPrediction
}

// ForwardCheck is the outcome of CheckForward.
type ForwardCheck struct {
	GPU *sim.GPU
	// Points is the number of points; Fitted the number a fit saw.
	Points, Fitted int
	// Fit is the fit's outcome; nil without one.
	Fit *FitResult
	// Rows are every point's prediction, shape by shape.
	Rows []ForwardRow
	// Groups are the predictions by shape and phase ("Meta-Llama-3-8B TP 1 decode"), by shape
	// when there are several, and with a hold-out by shape, phase and set and by set; sorted by
	// key.
	Groups []ForwardGroup
}

// HeldOutMAPE is the error on the held-out points (percent) and their number (0 without a
// fit or a hold-out).
func (f *ForwardCheck) HeldOutMAPE() (float64, int) {
	sum, n := 0.0, 0
	for _, r := range f.Rows {
		if r.Set == "held-out" {
			sum += math.Abs(r.ErrorPct())
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

// CheckForward compares the cost model's GPU part (roofline terms, no engine overheads, no
// all-reduce: PredictForward) on GPU g with forward-pass points. With opts.Fit it first fits
// g's efficiencies on the points opts.Holdout leaves, from prof's coefficients, and sets them
// in prof; else it predicts with prof's. A hold-out that leaves nothing to fit or nothing to
// predict is an *OptionError.
func CheckForward(sets []ForwardSet, g *sim.GPU, prof *sim.Profile, opts ForwardOptions) (*ForwardCheck, error) {
	if opts.Holdout != nil && !slices.Contains(ForwardHoldoutKeys, opts.Holdout.Key) {
		return nil, optionErrorf("--holdout with --forward takes B (batch size), L (context length), model or tp")
	}
	f := &ForwardCheck{GPU: g}
	held := func(s ForwardSet, p ForwardPoint) bool {
		return opts.Holdout.matchesShape(s.Model, s.TP, p.Batch, p.Context)
	}
	for _, s := range sets {
		f.Points += len(s.Points)
	}
	coef := prof.For(g)
	if opts.Fit {
		fr, err := f.fit(sets, held, coef, opts)
		if err != nil {
			return nil, err
		}
		coef = fr.Coef
		prof.Set(g.Name, coef)
	}
	groups := map[string][]ForwardPrediction{}
	add := func(k string, p ForwardPrediction) { groups[k] = append(groups[k], p) }
	for _, s := range sets {
		cm, err := sim.NewCostModel(s.Model, g, coef, sim.WithTP(s.TP))
		if err != nil {
			return nil, err
		}
		shape := fmt.Sprintf("%s TP %d", s.Model.ID, s.TP)
		for _, p := range PredictForward(s.Points, cm) {
			st := setLabel(opts.Fit, held(s, p.ForwardPoint))
			f.Rows = append(f.Rows, ForwardRow{ForwardPrediction: p, Model: s.Model, TP: s.TP, Set: st})
			add(shape+" "+p.Phase, p)
			if len(sets) > 1 {
				add(shape, p)
			}
			if opts.Holdout != nil {
				add(shape+" "+p.Phase+" "+st, p)
				add(st, p)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		f.Groups = append(f.Groups, ForwardGroup{Key: k, Preds: groups[k]})
	}
	return f, nil
}

// fit fits g's efficiencies on the points held leaves.
func (f *ForwardCheck) fit(sets []ForwardSet, held func(ForwardSet, ForwardPoint) bool, start sim.Coefficients, opts ForwardOptions) (FitResult, error) {
	var fitSets []ForwardSet
	for _, s := range sets {
		fs := ForwardSet{Model: s.Model, TP: s.TP}
		for _, p := range s.Points {
			if !held(s, p) {
				fs.Points = append(fs.Points, p)
			}
		}
		f.Fitted += len(fs.Points)
		fitSets = append(fitSets, fs)
	}
	if f.Fitted == 0 || (opts.Holdout != nil && f.Fitted == f.Points) {
		return FitResult{}, optionErrorf("--holdout %s leaves no points to fit or none to predict", opts.Holdout.String())
	}
	fr, err := FitForward(fitSets, f.GPU, start, opts.FitOptions)
	if err != nil {
		return FitResult{}, err
	}
	f.Fit = &fr
	if b := AtBounds(fr.Coef); len(b) > 0 {
		slog.Warn("fitted coefficients at the edge of their range: the points do not constrain them", "gpu", f.GPU.Name, "coefficients", strings.Join(b, ", "))
	}
	return fr, nil
}

// Predictions are every row's prediction, in the rows' order.
func (f *ForwardCheck) Predictions() []ForwardPrediction {
	out := make([]ForwardPrediction, len(f.Rows))
	for i, r := range f.Rows {
		out[i] = r.ForwardPrediction
	}
	return out
}

// MAPE is the mean absolute percentage error over every point.
func (f *ForwardCheck) MAPE() float64 { return ForwardMAPE(f.Predictions()) }

// ProfileNote is what a profile written from the fit says it was fitted on, given the
// profiles' paths: the GPU, the files and the number of points, and that the engine
// overheads are the starting profile's.
func (f *ForwardCheck) ProfileNote(paths []string) []string {
	var files []string
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	return []string{
		fmt.Sprintf("%s's efficiencies fitted on forward passes (tools/profile_forward.py: %s; %d points);", f.GPU.Name, strings.Join(files, ", "), f.Points),
		"the engine overheads are the starting profile's: a bare forward pass does not measure them.",
	}
}
