package calibrate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// IterationKind says which iteration time a Splitwise point measures.
type IterationKind string

// The two iteration times of Splitwise's performance model.
const (
	// Prompt is the prefill of a whole batch: B prompts of P tokens in one iteration.
	Prompt IterationKind = "prompt"
	// Token is one decode iteration of B sequences, averaged over T output tokens generated
	// after prompts of P tokens.
	Token IterationKind = "token"
)

// IterationPoint is a measured iteration time of one model on a tensor-parallel group: the
// median over the repeats of a configuration in Splitwise's performance-model file
// (columns model, hardware, prompt_size, batch_size, token_size, prompt_time, token_time,
// tensor_parallel; times in milliseconds).
type IterationPoint struct {
	Line     int // first line of the configuration in the file
	Model    string
	Hardware string
	TP       int
	Prompt   int // P, prompt tokens per sequence
	Batch    int // B, sequences
	Tokens   int // T, output tokens per sequence (0 for a prompt point)
	Kind     IterationKind
	Seconds  float64 // median measured iteration time
	Repeats  int
}

var splitwiseHeader = []string{"model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "tensor_parallel"}

// ReadSplitwise reads a Splitwise performance-model CSV and returns, in file order, a prompt
// point per (model, hardware, TP, P, B) (the median of its repeats over every T) and a token
// point per configuration (the median of its repeats).
func ReadSplitwise(path string) ([]IterationPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading iteration times: %w", err)
	}
	defer f.Close()
	return ParseSplitwise(path, f)
}

// ParseSplitwise parses Splitwise's performance-model format; errors name the file, line and
// column.
func ParseSplitwise(path string, r io.Reader) ([]IterationPoint, error) {
	cr, err := csvx.NewReader(path, r, csvx.Options{TrimHeader: true, HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	if err := cr.Require("(want "+strings.Join(splitwiseHeader, ",")+")", splitwiseHeader...); err != nil {
		return nil, err
	}
	type key struct {
		model, hw              string
		tp, prompt, batch, tok int
	}
	type acc struct {
		line           int
		prompt, tokens []float64
	}
	groups := map[key]*acc{}
	var order []key
	for cr.Next() {
		line := cr.Line()
		ints := map[string]int{}
		for _, c := range []string{"prompt_size", "batch_size", "token_size", "tensor_parallel"} {
			v, err := strconv.Atoi(strings.TrimSpace(cr.Str(c)))
			if err != nil || v <= 0 {
				return nil, cr.Errorf(-1, "column %q: want a positive integer, got %q", c, cr.Str(c))
			}
			ints[c] = v
		}
		times := map[string]float64{}
		for _, c := range []string{"prompt_time", "token_time"} {
			v, err := strconv.ParseFloat(strings.TrimSpace(cr.Str(c)), 64)
			if err != nil || !(v > 0) {
				return nil, cr.Errorf(-1, "column %q: want a positive number of milliseconds, got %q", c, cr.Str(c))
			}
			times[c] = v / 1e3
		}
		k := key{strings.TrimSpace(cr.Str("model")), strings.TrimSpace(cr.Str("hardware")),
			ints["tensor_parallel"], ints["prompt_size"], ints["batch_size"], ints["token_size"]}
		// The prompt time does not depend on the output length: pool its repeats over T.
		pk := k
		pk.tok = 0
		for _, kk := range []key{pk, k} {
			if _, ok := groups[kk]; !ok {
				groups[kk] = &acc{line: line}
				order = append(order, kk)
			}
		}
		groups[pk].prompt = append(groups[pk].prompt, times["prompt_time"])
		groups[k].tokens = append(groups[k].tokens, times["token_time"])
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	var out []IterationPoint
	for _, k := range order {
		g := groups[k]
		p := IterationPoint{Line: g.line, Model: k.model, Hardware: k.hw, TP: k.tp, Prompt: k.prompt,
			Batch: k.batch, Tokens: k.tok}
		if k.tok == 0 {
			p.Kind, p.Seconds, p.Repeats = Prompt, median(g.prompt), len(g.prompt)
		} else {
			p.Kind, p.Seconds, p.Repeats = Token, median(g.tokens), len(g.tokens)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rows", path)
	}
	return out, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// IterationCase is an iteration point bound to catalog entries.
type IterationCase struct {
	IterationPoint
	GPU   *sim.GPU
	Model *sim.Model
}

// SelectIterations binds points to the catalog. Points whose model or hardware the catalog
// does not know are skipped and counted, and so are configurations whose prompt time is not
// monotone in the batch: a whole-batch prefill of twice the sequences cannot take less time
// than half of them, so such a run did not prefill its whole batch at once (Splitwise's
// TP2 rows at B = 64, whose batch does not fit two 80 GB GPUs beside the 70B weights, are
// such runs). models, when not empty, keeps only those catalog models.
func SelectIterations(points []IterationPoint, cat *sim.Catalog, models []string) ([]IterationCase, map[string]int, error) {
	skipped := map[string]int{}
	var keep []*sim.Model
	for _, name := range models {
		m, err := cat.Model(name)
		if err != nil {
			return nil, skipped, err
		}
		keep = append(keep, m)
	}
	// Prompt times by configuration without the batch, to check monotonicity.
	type cfg struct {
		model, hw         string
		tp, prompt, batch int
	}
	promptAt := map[cfg]float64{}
	for _, p := range points {
		if p.Kind == Prompt {
			k := cfg{p.Model, p.Hardware, p.TP, p.Prompt, p.Batch}
			if v, ok := promptAt[k]; !ok || p.Seconds < v {
				promptAt[k] = p.Seconds
			}
		}
	}
	var out []IterationCase
	for _, p := range points {
		m, err := cat.Model(p.Model)
		if err != nil {
			skipped["model not in the catalog: "+p.Model]++
			continue
		}
		if len(keep) > 0 && !slices.Contains(keep, m) {
			continue
		}
		g, err := cat.GPU(p.Hardware)
		if err != nil {
			skipped["hardware not in the catalog: "+p.Hardware]++
			continue
		}
		if err := sim.ValidTP(m, p.TP); err != nil {
			skipped[err.Error()]++
			continue
		}
		if p.Batch%2 == 0 {
			if half, ok := promptAt[cfg{p.Model, p.Hardware, p.TP, p.Prompt, p.Batch / 2}]; ok &&
				promptAt[cfg{p.Model, p.Hardware, p.TP, p.Prompt, p.Batch}] < half {
				skipped[fmt.Sprintf("prompt time below that of half the batch (%s TP%d B=%d): the batch was not prefilled at once", p.Hardware, p.TP, p.Batch)]++
				continue
			}
		}
		out = append(out, IterationCase{IterationPoint: p, GPU: g, Model: m})
	}
	if len(out) == 0 {
		return nil, skipped, errors.New("no iteration points match the selection")
	}
	return out, skipped, nil
}

// IterationPrediction is the cost model's iteration time for a case.
type IterationPrediction struct {
	IterationCase
	Predicted float64 // seconds
}

// ErrorPct is the signed relative error of the prediction, in percent.
func (p IterationPrediction) ErrorPct() float64 { return 100 * (p.Predicted - p.Seconds) / p.Seconds }

// PredictIteration returns the cost model's time for one iteration point: for a prompt point
// one iteration prefilling B prompts of P tokens; for a token point the mean of the T decode
// iterations of B sequences whose contexts grow from P+1 to P+T.
func PredictIteration(c IterationCase, coef sim.Coefficients) (IterationPrediction, error) {
	cm, err := sim.NewCostModel(c.Model, c.GPU, coef, sim.WithTP(c.TP))
	if err != nil {
		return IterationPrediction{}, fmt.Errorf("line %d: %w", c.Line, err)
	}
	p := IterationPrediction{IterationCase: c}
	b, n := float64(c.Batch), float64(c.Prompt)
	switch c.Kind {
	case Prompt:
		p.Predicted = cm.IterationSeconds(sim.Batch{Tokens: c.Batch * c.Prompt, AttentionPairs: b * n * (n + 1) / 2,
			KVTokens: b * n, Seqs: c.Batch, Sampled: c.Batch})
	case Token:
		sum := 0.0
		for t := 1; t <= c.Tokens; t++ {
			ctx := b * (n + float64(t))
			sum += cm.IterationSeconds(sim.Batch{Tokens: c.Batch, AttentionPairs: ctx, KVTokens: ctx, Seqs: c.Batch, Sampled: c.Batch})
		}
		p.Predicted = sum / float64(c.Tokens)
	default:
		return p, fmt.Errorf("line %d: unknown iteration kind %q", c.Line, c.Kind)
	}
	return p, nil
}

// PredictIterations predicts every case with per-GPU coefficients from prof.
func PredictIterations(cases []IterationCase, prof *sim.Profile) ([]IterationPrediction, error) {
	out := make([]IterationPrediction, 0, len(cases))
	for _, c := range cases {
		p, err := PredictIteration(c, prof.For(c.GPU))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// IterationMAPE is the mean absolute percentage error of iteration predictions.
func IterationMAPE(ps []IterationPrediction) float64 {
	if len(ps) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, p := range ps {
		s += math.Abs(p.ErrorPct())
	}
	return s / float64(len(ps))
}

// IterationFitParams are the coefficients FitIterations varies: iteration times constrain the
// efficiencies, the overheads and the all-reduce latencies, not the memory reserves.
var IterationFitParams = []string{"compute_efficiency", "memory_efficiency", "attention_efficiency",
	"iteration_overhead_ms", "per_seq_overhead_ms", "allreduce_us", "allreduce_hop_us", "link_efficiency"}

// FitIterations fits one GPU's coefficients to iteration points (all on that GPU), minimising
// the mean absolute percentage error of PredictIteration, from start. It varies
// IterationFitParams (without the all-reduce's when every point ran on one GPU), or opts.Only
// when given, and opts.Also beside them.
func FitIterations(cases []IterationCase, start sim.Coefficients, opts FitOptions) (FitResult, error) {
	if len(cases) == 0 {
		return FitResult{}, errors.New("calibrate: nothing to fit")
	}
	for _, c := range cases {
		if c.GPU != cases[0].GPU {
			return FitResult{}, fmt.Errorf("calibrate: points span GPUs %s and %s; fit one GPU at a time", cases[0].GPU.Name, c.GPU.Name)
		}
	}
	names := IterationFitParams
	if !slices.ContainsFunc(cases, func(c IterationCase) bool { return c.TP > 1 }) {
		names = names[:5]
	}
	return minimizeNamed(names, opts, start, func(coef sim.Coefficients) float64 {
		s := 0.0
		for _, c := range cases {
			p, err := PredictIteration(c, coef)
			if err != nil {
				return math.Inf(1)
			}
			s += math.Abs(p.ErrorPct())
		}
		return s / float64(len(cases))
	})
}
