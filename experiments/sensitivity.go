package experiments

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/results"
)

// Assumption is one input of an experiment moved to the ends of its plausible range, for a
// sensitivity analysis: Low and High are the variants' settings (key=value, as --set takes
// them), and LowLabel and HighLabel describe them.
type Assumption struct {
	Name                string
	Low, High           []string
	LowLabel, HighLabel string
}

// Plausible ranges of the assumptions behind the paper comparison (docs/reproduction.md gives
// the evidence for each).
const (
	// Reasoning experts' output length: the per-dataset means rest on one or two comparable
	// measurements each (MMLU-Pro only on the paper's pooled ~3,000), so x0.67 to x1.5.
	reasoningLow, reasoningHigh = 0.67, 1.5
	// Instruction experts' output: the measured body without runaway loops against the
	// measured mean with greedy loops is about x2 either way.
	instructionLow, instructionHigh = 0.5, 2.0
	// The aggregator's output: the paper's pooled 2,696 / 1,064 tokens, not per dataset.
	aggregatorLow, aggregatorHigh = 0.5, 2.0
)

// Assumptions returns the assumptions of a MoA experiment that a sensitivity analysis varies:
// the reasoning experts' output length (experts with forward_tokens: their reasoning is
// stripped), the instruction experts' (the other experts), the aggregator's, the routing skew,
// the model load time and the engine's max_num_seqs. Those the experiment does not have (no
// reasoning expert, no aggregator of its own length) are left out.
func (e *Experiment) Assumptions() ([]Assumption, error) {
	w := e.Workload
	if w.Kind != KindMoA || w.Trace != "" || w.Answers != "" {
		return nil, fmt.Errorf("%s: a sensitivity analysis needs a generated kind = \"moa\" workload", e.File())
	}
	experts := w.Experts
	if len(experts) == 0 {
		for _, m := range e.Models {
			experts = append(experts, m.Name)
		}
	}
	var out []Assumption
	scaleModels := func(name string, reasoning bool, lo, hi float64) error {
		var low, high []string
		for i, m := range e.Models {
			if !slices.Contains(experts, m.Name) || (m.ForwardTokens != nil) != reasoning || m.OutputTokens == nil {
				continue
			}
			l, err := e.scaleDist(modelKey(i, "output_tokens"), m.OutputTokens, lo)
			if err != nil {
				return err
			}
			h, err := e.scaleDist(modelKey(i, "output_tokens"), m.OutputTokens, hi)
			if err != nil {
				return err
			}
			low, high = append(low, l...), append(high, h...)
		}
		if len(low) > 0 {
			out = append(out, Assumption{Name: name, Low: low, High: high, LowLabel: fmt.Sprintf("x%g", lo), HighLabel: fmt.Sprintf("x%g", hi)})
		}
		return nil
	}
	if err := scaleModels("reasoning output length", true, reasoningLow, reasoningHigh); err != nil {
		return nil, err
	}
	if err := scaleModels("instruction output length", false, instructionLow, instructionHigh); err != nil {
		return nil, err
	}
	if d := w.Aggregator.OutputTokens; w.Aggregator.Model != "" && d != nil {
		low, err := e.scaleDist("workload.aggregator.output_tokens", d, aggregatorLow)
		if err != nil {
			return nil, err
		}
		high, err := e.scaleDist("workload.aggregator.output_tokens", d, aggregatorHigh)
		if err != nil {
			return nil, err
		}
		out = append(out, Assumption{Name: "aggregator output length", Low: low, High: high,
			LowLabel: fmt.Sprintf("x%g", aggregatorLow), HighLabel: fmt.Sprintf("x%g", aggregatorHigh)})
	}
	switch w.Routing.Method {
	case RoutingSymbolicMoE:
		// The keyword layer's extremes (Symbolic-MoE's keywords are not published): few,
		// specific keywords give a mild skew, many shared ones an extreme one.
		out = append(out, Assumption{Name: "routing skew",
			Low:      []string{"workload.routing.keywords=2", "workload.routing.vocabulary=150", "workload.routing.shared=0"},
			High:     []string{"workload.routing.keywords=4", "workload.routing.shared=0.5"},
			LowLabel: "2 of 150 keywords", HighLabel: "4 keywords, 50% shared"})
	default:
		skew := max(1, w.Routing.Skew)
		out = append(out, Assumption{Name: "routing skew",
			Low:  []string{"workload.routing.skew=" + strconv.FormatFloat(max(1, skew/3), 'g', 6, 64)},
			High: []string{"workload.routing.skew=" + strconv.FormatFloat(skew*3, 'g', 6, 64)}, LowLabel: "skew /3", HighLabel: "skew x3"})
	}
	out = append(out, Assumption{Name: "model load time",
		Low:      []string{"engine.load_gbps=4", "engine.startup_s=10"},
		High:     []string{"engine.load_gbps=1", "engine.startup_s=60"},
		LowLabel: "4 GB/s+10 s", HighLabel: "1 GB/s+60 s"})
	out = append(out, Assumption{Name: "max_num_seqs", Low: []string{"engine.max_num_seqs=128"}, High: []string{"engine.max_num_seqs=512"},
		LowLabel: "128", HighLabel: "512"})
	return out, nil
}

// scaleDist returns the assignments that scale a length distribution by f: a lognormal's mean,
// median and p99 (those it is given by), a fixed value, a uniform's bounds or an empirical's
// scale; never beyond its max.
func (e *Experiment) scaleDist(key string, d *Dist, f float64) ([]string, error) {
	num := func(k string, v float64) string { return key + "." + k + "=" + strconv.FormatFloat(v, 'g', 6, 64) }
	capped := func(v float64) float64 {
		if d.Max > 0 {
			return min(v, float64(d.Max))
		}
		return v
	}
	switch strings.ToLower(d.Dist) {
	case "lognormal":
		var out []string
		for _, k := range []struct {
			name string
			v    float64
		}{{"mean", d.Mean}, {"median", d.Median}, {"p99", d.P99}} {
			if e.has(key + "." + k.name) {
				out = append(out, num(k.name, capped(k.v*f)))
			}
		}
		return out, nil
	case "fixed":
		return []string{fmt.Sprintf("%s.value=%d", key, max(1, int(math.Round(capped(float64(d.Value)*f)))))}, nil
	case "uniform":
		return []string{fmt.Sprintf("%s.min=%d", key, max(1, int(math.Round(float64(d.Min)*f)))),
			fmt.Sprintf("%s.max=%d", key, max(1, int(math.Round(float64(d.Max)*f))))}, nil
	case "empirical":
		s := d.Scale
		if s == 0 {
			s = 1
		}
		return []string{num("scale", s*f)}, nil
	}
	return nil, e.errorf(key+".dist", "cannot scale distribution %q", d.Dist)
}

// SensitivityPoints returns the sweep points of a sensitivity analysis over seeds 1..seeds: the
// base experiment and, per assumption, its low and high variant, each for every seed (common
// seeds, so that differences are not seed noise). sides[i] names point i's assumption and side.
func SensitivityPoints(as []Assumption, seeds int) (pts []Point, sides []results.SensitivityRow) {
	for s := 1; s <= seeds; s++ {
		seed := fmt.Sprintf("seed=%d", s)
		add := func(a Assumption, side, setting string, assign []string) {
			name := fmt.Sprintf("%04d_%s_%s_seed=%d", len(pts), unsafeChars.ReplaceAllString(strings.ReplaceAll(a.Name, " ", "-"), "_"), side, s)
			if side == "base" {
				name = fmt.Sprintf("%04d_base_seed=%d", len(pts), s)
			}
			pts = append(pts, Point{Index: len(pts), Name: name, Assign: append([]string{seed}, assign...)})
			sides = append(sides, results.SensitivityRow{Assumption: a.Name, Side: side, Setting: setting, Seed: uint64(s)})
		}
		add(Assumption{}, "base", "as in the file", nil)
		for _, a := range as {
			add(a, "low", a.LowLabel, a.Low)
			add(a, "high", a.HighLabel, a.High)
		}
	}
	return pts, sides
}

// RunSensitivity simulates the sensitivity points of an experiment into dir and returns one row
// per point with the policy's (label) speedups; paperE2E (NaN when unknown) is carried into
// every row.
func RunSensitivity(ctx context.Context, load SweepLoader, as []Assumption, seeds int, policy, dir string, paperE2E float64,
	info RunInfo, host HostInfo, progress func(done, total int)) ([]results.SensitivityRow, error) {
	base, err := load()
	if err != nil {
		return nil, err
	}
	pts, sides := SensitivityPoints(as, seeds)
	// Every variant must resolve before any runs.
	for _, p := range pts {
		e, err := load()
		if err != nil {
			return nil, err
		}
		for _, a := range p.Assign {
			if err := e.Set(a); err != nil {
				return nil, fmt.Errorf("sensitivity point %s: %w", p.Name, err)
			}
		}
		if _, err := e.Resolve(); err != nil {
			return nil, fmt.Errorf("sensitivity point %s: %w", p.Name, err)
		}
	}
	rows, err := RunPoints(ctx, load, pts, dir, info, host, progress)
	if err != nil {
		return nil, err
	}
	out := make([]results.SensitivityRow, len(pts))
	for i, rs := range rows {
		j := slices.IndexFunc(rs, func(r results.SummaryRow) bool { return r.Policy == policy })
		if j < 0 {
			return nil, fmt.Errorf("sensitivity point %s: the experiment has no policy labelled %q", pts[i].Name, policy)
		}
		r := sides[i]
		r.Experiment, r.PaperE2E = base.Name, paperE2E
		r.SpeedupExpert, r.SpeedupAggregator, r.SpeedupE2E = rs[j].SpeedupExpert, rs[j].SpeedupAggregator, rs[j].SpeedupE2E
		out[i] = r
	}
	return out, nil
}
