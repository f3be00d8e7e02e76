package calibrate

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// ServingRow is one published measurement of an inference engine serving requests at a steady
// state (an MLPerf Server run, a serving benchmark at fixed concurrency): how many sequences
// one engine replica held in flight, how fast prompts arrived, their mean lengths, and the
// measured mean time per output token. The engine's per-iteration CPU overheads are fitted to
// such rows (FitServing), since the time per output token of a steady state is one engine
// iteration: every running sequence decodes one token while chunked prefill feeds the
// arriving prompts in.
type ServingRow struct {
	Line int
	// ID names the row; Source says where it was published.
	ID, Source string
	GPU        string
	Model      string
	// WeightBytes and KVBytes are the bytes per weight and per KV-cache element (1: FP8, 2:
	// BF16), replacing the catalog model's.
	WeightBytes, KVBytes int
	TP                   int
	// InFlight is the mean number of sequences one replica holds (Little's law on the published
	// completion rate and mean latency, or the published concurrency).
	InFlight float64
	// PromptsPerS is the rate at which prompts reach one replica, per second.
	PromptsPerS float64
	// InputTokens and OutputTokens are the mean prompt and output lengths.
	InputTokens, OutputTokens float64
	// TPOTMS is the measured mean time per output token, milliseconds.
	TPOTMS float64
	// Set is "fit" (the fit uses it) or "check" (compared only).
	Set string
}

var servingColumns = []string{"id", "source", "gpu", "model", "weight_bytes", "kv_bytes", "tp", "in_flight",
	"prompts_per_s", "input_tokens", "output_tokens", "tpot_ms", "set"}

// ReadServing reads a CSV of published steady-state serving measurements (the columns of
// ServingRow; lines starting with # are comments, where the provenance goes). Errors name the
// file, line and column.
func ReadServing(path string) ([]ServingRow, error) {
	cr, err := csvx.Open(path, csvx.Options{TrimHeader: true, Comment: '#', Positions: true, HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	defer cr.Close()
	if err := cr.Require("(not a serving-measurement file?)", servingColumns...); err != nil {
		return nil, err
	}
	var out []ServingRow
	for cr.Next() {
		r := ServingRow{Line: cr.Line(), ID: cr.Str("id"), Source: cr.Str("source"), GPU: cr.Str("gpu"), Model: cr.Str("model"),
			WeightBytes: cr.Int("weight_bytes"), KVBytes: cr.Int("kv_bytes"), TP: cr.Int("tp"),
			InFlight: cr.Float("in_flight"), PromptsPerS: cr.Float("prompts_per_s"),
			InputTokens: cr.Float("input_tokens"), OutputTokens: cr.Float("output_tokens"),
			TPOTMS: cr.Float("tpot_ms"), Set: strings.TrimSpace(cr.Str("set"))}
		switch {
		case r.WeightBytes != 1 && r.WeightBytes != 2:
			cr.Failf("weight_bytes", "want 1 (FP8) or 2 (BF16), got %d", r.WeightBytes)
		case r.KVBytes != 1 && r.KVBytes != 2:
			cr.Failf("kv_bytes", "want 1 (FP8) or 2 (BF16), got %d", r.KVBytes)
		case r.TP <= 0:
			cr.Failf("tp", "want a positive tensor-parallel degree, got %d", r.TP)
		case !(r.InFlight >= 1):
			cr.Failf("in_flight", "want at least one sequence in flight, got %g", r.InFlight)
		case !(r.PromptsPerS >= 0):
			cr.Failf("prompts_per_s", "want a non-negative rate, got %g", r.PromptsPerS)
		case !(r.InputTokens >= 1) || !(r.OutputTokens >= 1):
			cr.Failf("input_tokens", "want mean lengths of at least one token, got %g and %g", r.InputTokens, r.OutputTokens)
		case !(r.TPOTMS > 0):
			cr.Failf("tpot_ms", "want a positive time per output token, got %g", r.TPOTMS)
		case r.Set != "fit" && r.Set != "check":
			cr.Failf("set", `want "fit" or "check", got %q`, r.Set)
		}
		out = append(out, r)
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rows", path)
	}
	return out, nil
}

// servingCase is a row bound to its cost model (overheads zero: they are the fit's unknowns)
// and to the overheads its GPU's profile gives.
type servingCase struct {
	row     ServingRow
	cm      *sim.CostModel
	profile Overheads
}

// Overheads are an engine's CPU overheads per iteration and per sequence, milliseconds.
type Overheads struct {
	IterationMS, PerSeqMS float64
}

// steadyStep is the iteration time of a steady state with overheads o_iter (fixed, seconds)
// and o_seq (per sequence, seconds): N sequences decode at the mean context of a running
// sequence (prompt plus half the output) while chunked prefill takes in the prompts that
// arrive during the step, p = rate * input * step tokens (each attending to half its prompt
// on average). The step depends on p and p on the step; the fixed point is found by
// iteration, and an error says the GPU cannot keep up with the prompts at any step time.
func (c servingCase) steadyStep(oIter, oSeq float64) (float64, error) {
	r := c.row
	n := r.InFlight
	ctx := r.InputTokens + r.OutputTokens/2
	batch := func(p float64) sim.Batch {
		return sim.Batch{
			Tokens:         int(math.Round(n + p)),
			AttentionPairs: n*(ctx+1) + p*(r.InputTokens/2),
			KVTokens:       n*(ctx+1) + p,
			Seqs:           int(math.Round(n)),
			Sampled:        int(math.Round(n)),
		}
	}
	step := c.cm.IterationSeconds(batch(0)) + oIter + oSeq*n
	for range 200 {
		p := r.PromptsPerS * r.InputTokens * step
		next := c.cm.IterationSeconds(batch(p)) + oIter + oSeq*n
		if math.Abs(next-step) < 1e-9 {
			return next, nil
		}
		if next > 10*step+1 {
			return 0, fmt.Errorf("row %s (line %d): no steady step: the GPU cannot prefill %.0f prompts/s of %.0f tokens beside %.0f decoding sequences",
				r.ID, r.Line, r.PromptsPerS, r.InputTokens, n)
		}
		step = next
	}
	return 0, fmt.Errorf("row %s (line %d): the steady step did not converge in 200 iterations (last %.3f ms)", r.ID, r.Line, step*1e3)
}

// ServingPrediction is one row's predicted step beside its measurement.
type ServingPrediction struct {
	Row ServingRow
	// StepMS is the predicted time per output token; GPUMS its part on the GPU (no overheads).
	StepMS, GPUMS float64
}

// ErrorPct is the prediction's signed error relative to the measurement, percent.
func (p ServingPrediction) ErrorPct() float64 { return 100 * (p.StepMS - p.Row.TPOTMS) / p.Row.TPOTMS }

// ServingFit is the engine overheads fitted to serving rows.
type ServingFit struct {
	// IterationMS and PerSeqMS are the fitted overheads, milliseconds.
	IterationMS, PerSeqMS float64
	// Profile holds every row predicted with its GPU's profile overheads (before the fit);
	// Fitted every row predicted with the fit; HeldOut every fit row predicted by a fit on the
	// other fit rows (leave one out), in the rows' order.
	Profile, Fitted, HeldOut []ServingPrediction
}

// servingCases binds each row to a cost model of its GPU, model (with the row's precisions)
// and tensor-parallel degree, with prof's coefficients for the GPU and no engine overheads.
func servingCases(cat *sim.Catalog, prof *sim.Profile, rows []ServingRow) ([]servingCase, error) {
	out := make([]servingCase, len(rows))
	for i, r := range rows {
		g, err := cat.GPU(r.GPU)
		if err != nil {
			return nil, fmt.Errorf("row %s (line %d): %w", r.ID, r.Line, err)
		}
		base, err := cat.Model(r.Model)
		if err != nil {
			return nil, fmt.Errorf("row %s (line %d): %w", r.ID, r.Line, err)
		}
		m := *base
		m.DtypeBytes, m.KVDtypeBytes = r.WeightBytes, r.KVBytes
		coef := prof.For(g)
		own := Overheads{coef.IterationOverheadMS, coef.PerSeqOverheadMS}
		coef.IterationOverheadMS, coef.PerSeqOverheadMS = 0, 0
		cm, err := sim.NewCostModel(&m, g, coef, sim.WithTP(r.TP))
		if err != nil {
			return nil, fmt.Errorf("row %s (line %d): %w", r.ID, r.Line, err)
		}
		out[i] = servingCase{row: r, cm: cm, profile: own}
	}
	return out, nil
}

// PredictServing predicts each row's step with engine overheads o, or with the overheads of
// each row's GPU in prof when o is nil.
func PredictServing(cat *sim.Catalog, prof *sim.Profile, rows []ServingRow, o *Overheads) ([]ServingPrediction, error) {
	cases, err := servingCases(cat, prof, rows)
	if err != nil {
		return nil, err
	}
	return predictCases(cases, o)
}

func predictCases(cases []servingCase, o *Overheads) ([]ServingPrediction, error) {
	out := make([]ServingPrediction, len(cases))
	for i, c := range cases {
		use := c.profile
		if o != nil {
			use = *o
		}
		step, err := c.steadyStep(use.IterationMS/1e3, use.PerSeqMS/1e3)
		if err != nil {
			return nil, err
		}
		gpu, err := c.steadyStep(0, 0)
		if err != nil {
			return nil, err
		}
		out[i] = ServingPrediction{Row: c.row, StepMS: step * 1e3, GPUMS: gpu * 1e3}
	}
	return out, nil
}

// The fit's search box, milliseconds: no published V1 overhead comes near these bounds.
const (
	maxIterationMS = 50
	maxPerSeqMS    = 1
)

// FitServing fits the engine's per-iteration and per-sequence overheads (both non-negative) to
// the rows marked "fit", minimising the sum of squared relative errors of the predicted time
// per output token, and predicts every row with the profile's overheads and with the fit, and
// every fit row with a fit on the others. The GPU part of each step is the cost model's with prof's coefficients.
func FitServing(cat *sim.Catalog, prof *sim.Profile, rows []ServingRow) (ServingFit, error) {
	cases, err := servingCases(cat, prof, rows)
	if err != nil {
		return ServingFit{}, err
	}
	var fitIdx []int
	for i, r := range rows {
		if r.Set == "fit" {
			fitIdx = append(fitIdx, i)
		}
	}
	if len(fitIdx) < 2 {
		return ServingFit{}, errors.New("calibrate: fitting two overheads needs at least two rows marked fit")
	}
	pick := func(idx []int) []servingCase {
		out := make([]servingCase, len(idx))
		for i, j := range idx {
			out[i] = cases[j]
		}
		return out
	}
	it, seq, err := fitOverheads(pick(fitIdx))
	if err != nil {
		return ServingFit{}, err
	}
	fit := ServingFit{IterationMS: it, PerSeqMS: seq}
	if fit.Profile, err = predictCases(cases, nil); err != nil {
		return ServingFit{}, err
	}
	if fit.Fitted, err = predictCases(cases, &Overheads{it, seq}); err != nil {
		return ServingFit{}, err
	}
	for k, j := range fitIdx {
		rest := append(append([]int(nil), fitIdx[:k]...), fitIdx[k+1:]...)
		it, seq, err := fitOverheads(pick(rest))
		if err != nil {
			return ServingFit{}, err
		}
		p, err := predictCases(cases[j:j+1], &Overheads{it, seq})
		if err != nil {
			return ServingFit{}, err
		}
		fit.HeldOut = append(fit.HeldOut, p[0])
	}
	return fit, nil
}

// fitOverheads searches the box [0, maxIterationMS] x [0, maxPerSeqMS] on a grid, then on
// finer grids around the best point, for the overheads with the least sum of squared relative
// errors. With one row the two overheads are not told apart: the search keeps the smallest
// per-sequence overhead of the best fits it meets (the grid's order).
func fitOverheads(cases []servingCase) (iterMS, perSeqMS float64, err error) {
	loss := func(it, seq float64) float64 {
		var s float64
		for _, c := range cases {
			step, err := c.steadyStep(it/1e3, seq/1e3)
			if err != nil {
				return math.Inf(1)
			}
			e := (step*1e3 - c.row.TPOTMS) / c.row.TPOTMS
			s += e * e
		}
		return s
	}
	const n = 20
	loI, hiI, loS, hiS := 0.0, float64(maxIterationMS), 0.0, float64(maxPerSeqMS)
	best, bi, bs := math.Inf(1), 0.0, 0.0
	for range 8 {
		for a := 0; a <= n; a++ {
			it := loI + (hiI-loI)*float64(a)/n
			for b := 0; b <= n; b++ {
				seq := loS + (hiS-loS)*float64(b)/n
				if l := loss(it, seq); l < best {
					best, bi, bs = l, it, seq
				}
			}
		}
		wI, wS := (hiI-loI)/n, (hiS-loS)/n
		loI, hiI = max(bi-2*wI, 0), bi+2*wI
		loS, hiS = max(bs-2*wS, 0), bs+2*wS
	}
	if math.IsInf(best, 1) {
		return 0, 0, errors.New("calibrate: no overheads give every fit row a steady step")
	}
	return bi, bs, nil
}
