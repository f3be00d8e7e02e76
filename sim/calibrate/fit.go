package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/optimize"

	"github.com/mosaic-sched/mosaic/sim"
)

// FitResult is the outcome of Fit.
type FitResult struct {
	Coef        sim.Coefficients
	MAPE        float64 // in percent, on the cases fitted
	Evaluations int
}

// Parameter indexes of the fit, in an unconstrained space: efficiencies through a logistic
// function, overheads and the memory reserve through exp.
const (
	pCompute = iota
	pMemory
	pAttention
	pIterOverhead
	pSeqOverhead
	pReserve
	pAllReduce
	pHop
	pTPReserve
	pLink
	pFloor
	pAttCompute
	pV1
	pLayer
	numParams
)

// paramNames are the profile keys of the fitted coefficients, by parameter index.
var paramNames = [numParams]string{"compute_efficiency", "memory_efficiency", "attention_efficiency",
	"iteration_overhead_ms", "per_seq_overhead_ms", "reserve_gib", "allreduce_us", "allreduce_hop_us", "tp_reserve_gib", "link_efficiency", "launch_floor_ms", "attention_compute_efficiency", "paged_attention_v1_factor", "layer_latency_us"}

func unpack(x []float64, free []int, base sim.Coefficients) sim.Coefficients {
	c := base
	for i, p := range free {
		switch p {
		case pCompute:
			c.ComputeEfficiency = logistic(x[i])
		case pMemory:
			c.MemoryEfficiency = logistic(x[i])
		case pAttention:
			c.AttentionEfficiency = logistic(x[i])
		case pIterOverhead:
			c.IterationOverheadMS = math.Exp(x[i])
		case pSeqOverhead:
			c.PerSeqOverheadMS = math.Exp(x[i])
		case pReserve:
			c.ReserveGiB = maxReserveGiB * logistic(x[i])
		case pAllReduce:
			c.AllReduceUS = math.Exp(x[i])
		case pHop:
			c.AllReduceHopUS = math.Exp(x[i])
		case pTPReserve:
			c.TPReserveGiB = maxReserveGiB * logistic(x[i])
		case pLink:
			c.LinkEfficiency = logistic(x[i])
		case pFloor:
			c.LaunchFloorMS = math.Exp(x[i])
		case pAttCompute:
			c.AttentionComputeEfficiency = logistic(x[i])
		case pV1:
			c.PagedAttentionV1Factor = 1 + math.Exp(x[i]) // V1 is never faster than V2
		case pLayer:
			c.LayerLatencyUS = math.Exp(x[i])
		}
	}
	return c
}

func pack(c sim.Coefficients, free []int) []float64 {
	all := [numParams]float64{
		logit(c.ComputeEfficiency), logit(c.MemoryEfficiency), logit(c.AttentionEfficiency),
		math.Log(math.Max(c.IterationOverheadMS, 1e-3)), math.Log(math.Max(c.PerSeqOverheadMS, 1e-4)),
		logit(math.Min(math.Max(c.ReserveGiB, 0.05), maxReserveGiB-0.05) / maxReserveGiB),
		math.Log(math.Max(c.AllReduceUS, 0.1)), math.Log(math.Max(c.AllReduceHopUS, 0.1)),
		logit(math.Min(math.Max(c.TPReserveGiB, 0.05), maxReserveGiB-0.05) / maxReserveGiB),
		logit(c.LinkEfficiency),
		math.Log(math.Max(c.LaunchFloorMS, minFloorMS)),
		logit(attComputeEfficiency(c)),
		math.Log(math.Max(c.PagedAttentionV1Factor-1, 1e-3)), // from about 1: V1 as fast as V2
		math.Log(math.Max(c.LayerLatencyUS, 0.1)),            // from 0.1 us a layer: about none
	}
	x := make([]float64, len(free))
	for i, p := range free {
		x[i] = all[p]
	}
	return x
}

// attComputeEfficiency is the attention compute efficiency c gives the cost model.
func attComputeEfficiency(c sim.Coefficients) float64 {
	if c.AttentionComputeEfficiency > 0 {
		return c.AttentionComputeEfficiency
	}
	return c.AttentionEfficiency
}

// maxReserveGiB bounds the fitted non-KV memory reserve.
const maxReserveGiB = 16

// minFloorMS is where a fitted launch floor starts: 1 us, below any iteration's GPU part, so
// no floor at all in effect.
const minFloorMS = 1e-3

func logistic(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// AtBounds names the fitted coefficients that ended at the edge of their range, which the
// measurements then do not constrain (an efficiency of 1, a reserve of 16 GiB).
func AtBounds(c sim.Coefficients) []string {
	var out []string
	for name, v := range map[string]float64{"compute_efficiency": c.ComputeEfficiency, "memory_efficiency": c.MemoryEfficiency,
		"attention_efficiency": c.AttentionEfficiency, "attention_compute_efficiency": c.AttentionComputeEfficiency} {
		if v > 0.99 {
			out = append(out, name)
		}
	}
	if c.ReserveGiB > maxReserveGiB-0.1 {
		out = append(out, "reserve_gib")
	}
	if c.TPReserveGiB > maxReserveGiB-0.1 {
		out = append(out, "tp_reserve_gib")
	}
	sort.Strings(out)
	return out
}

// logit is the inverse of logistic, its argument clamped to [1e-6, 1-1e-3]: efficiencies far
// below peak (an attention compute roof at 0.05%) keep their value, one at 1 starts where
// Nelder-Mead can still move.
func logit(p float64) float64 {
	p = math.Min(math.Max(p, 1e-6), 1-1e-3)
	return math.Log(p / (1 - p))
}

// FitOptions says which coefficients Fit keeps as given.
type FitOptions struct {
	// KeepCompute and KeepMemory keep the linear layers' compute and memory efficiencies, for
	// example when they were fitted on operator-level measurements (FitOperators).
	KeepCompute, KeepMemory bool
	// Only, when not empty, names the only coefficients to fit (profile keys, see
	// FittableCoefficients); the others are kept.
	Only []string
	// Also names coefficients to fit beside the default set or Only, e.g. launch_floor_ms
	// or attention_compute_efficiency, which the default set leaves as given.
	Also []string
}

// FittableCoefficients lists the profile keys Fit can fit.
func FittableCoefficients() []string { return append([]string(nil), paramNames[:]...) }

// freeParams returns the parameters a fit varies.
func (o FitOptions) freeParams(cases []Case) ([]int, error) {
	var free []int
	if len(o.Only) > 0 {
		free, err := addNamed(free, o.Only)
		if err != nil {
			return nil, err
		}
		return addNamed(free, o.Also)
	}
	if !o.KeepCompute {
		free = append(free, pCompute)
	}
	if !o.KeepMemory {
		free = append(free, pMemory)
	}
	free = append(free, pAttention, pIterOverhead, pSeqOverhead, pReserve)
	if n := tpDegrees(cases); n > 0 {
		free = append(free, pAllReduce)
		// One degree's all-reduces constrain only a_ar + 2(TP-1)*a_hop: their split, which
		// decides every other degree, is left to the data of two or more.
		if n > 1 {
			free = append(free, pHop)
		}
		free = append(free, pTPReserve)
	}
	return addNamed(free, o.Also)
}

// addNamed adds the parameters of the profile keys names to free, each once.
func addNamed(free []int, names []string) ([]int, error) {
	for _, name := range names {
		i := slices.Index(paramNames[:], name)
		if i < 0 {
			return nil, fmt.Errorf("calibrate: cannot fit %q (fittable: %s)", name, strings.Join(paramNames[:], ", "))
		}
		if !slices.Contains(free, i) {
			free = append(free, i)
		}
	}
	return free, nil
}

// tpDegrees counts the distinct tensor-parallel degrees above 1 among cases.
func tpDegrees(cases []Case) int {
	var seen []int
	for _, c := range cases {
		if c.TP > 1 && !slices.Contains(seen, c.TP) {
			seen = append(seen, c.TP)
		}
	}
	return len(seen)
}

// Fit finds the coefficients of one GPU that minimise the mean absolute percentage error of the
// simulated latencies of cases (all measured on that GPU), starting from start. It fits the
// efficiencies, the two overheads, the memory reserve and, when some cases ran on several
// GPUs, the all-reduce latency and the tensor-parallel memory reserve (and the all-reduce's
// per-step latency when the cases span two or more degrees); load bandwidth, start-up time
// and link efficiency are kept from start. Nelder-Mead is restarted from its optimum until it stops improving.
func Fit(cases []Case, start sim.Coefficients, opts FitOptions) (FitResult, error) {
	if len(cases) == 0 {
		return FitResult{}, errors.New("calibrate: nothing to fit")
	}
	gpu := cases[0].GPU
	for _, c := range cases {
		if c.GPU != gpu {
			return FitResult{}, fmt.Errorf("calibrate: cases span GPUs %s and %s; fit one GPU at a time", gpu.Name, c.GPU.Name)
		}
	}
	free, err := opts.freeParams(cases)
	if err != nil {
		return FitResult{}, err
	}
	return minimize(free, start, func(coef sim.Coefficients) float64 {
		s := 0.0
		for _, c := range cases {
			p, err := Predict(c, coef)
			if err != nil {
				return math.Inf(1) // coefficients that leave no KV cache
			}
			s += math.Abs(p.ErrorPct())
		}
		return s / float64(len(cases))
	})
}

// minimizeNamed minimises mape over the coefficients names (profile keys), or opts.Only when
// given, with opts.Also beside them, from start.
func minimizeNamed(names []string, opts FitOptions, start sim.Coefficients, mape func(sim.Coefficients) float64) (FitResult, error) {
	if len(opts.Only) > 0 {
		names = opts.Only
	}
	free, err := FitOptions{Only: names, Also: opts.Also}.freeParams(nil)
	if err != nil {
		return FitResult{}, err
	}
	return minimize(free, start, mape)
}

// minimize finds the free coefficients that minimise mape (a mean absolute percentage error),
// starting from start: a grid scan of the tensor-parallel memory reserve when it is free, then
// Nelder-Mead, restarted from its optimum until it stops improving.
func minimize(free []int, start sim.Coefficients, mape func(sim.Coefficients) float64) (FitResult, error) {
	evals := 0
	objective := func(x []float64) float64 {
		evals++
		return mape(unpack(x, free, start))
	}
	x := pack(start, free)
	best := objective(x)
	// The tensor-parallel memory reserve moves the KV capacity, and latency jumps where
	// preemption starts: the objective is a staircase in it that Nelder-Mead cannot climb, so
	// scan it on a grid first. A launch floor below every iteration's GPU part changes
	// nothing: the objective is flat there, so scan it too (0.1 to 100 ms, 10% apart); and
	// the attention compute efficiency, which may sit orders of magnitude below the other
	// efficiencies (0.05% to 100%, 25% apart); and the PagedAttention V1 factor (1 to 8, 10%
	// apart), which only the largest decode batches see.
	scan := func(p int, from, to float64, next func(v float64) float64, packed func(v float64) float64) {
		i := slices.Index(free, p)
		if i < 0 {
			return
		}
		for v := from; v < to; v = next(v) {
			try := slices.Clone(x)
			try[i] = packed(v)
			if f := objective(try); f < best {
				x, best = try, f
			}
		}
	}
	scan(pTPReserve, 0.25, maxReserveGiB, func(gib float64) float64 { return gib + 0.25 }, func(gib float64) float64 {
		c := start
		c.TPReserveGiB = gib
		return pack(c, []int{pTPReserve})[0]
	})
	scan(pFloor, 0.1, 100, func(ms float64) float64 { return ms * 1.1 }, math.Log)
	scan(pAttCompute, 5e-4, 1, func(eff float64) float64 { return eff * 1.25 }, logit)
	scan(pV1, 1.05, 8, func(f float64) float64 { return f * 1.1 }, func(f float64) float64 { return math.Log(f - 1) })
	for round := 0; round < 6; round++ {
		res, err := optimize.Minimize(optimize.Problem{Func: objective}, x,
			&optimize.Settings{FuncEvaluations: 3000, Converger: &optimize.FunctionConverge{Absolute: 1e-4, Iterations: 200}},
			&optimize.NelderMead{})
		if err != nil && res == nil {
			return FitResult{}, fmt.Errorf("calibrate: fitting: %w", err)
		}
		if res.F >= best-1e-3 {
			if res.F < best {
				x, best = res.X, res.F
			}
			break
		}
		x, best = res.X, res.F
	}
	return FitResult{Coef: unpack(x, free, start), MAPE: best, Evaluations: evals}, nil
}
