package calibrate

import (
	"errors"
	"fmt"
	"math"
	"sort"

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
	numParams
)

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
		}
	}
	return c
}

func pack(c sim.Coefficients, free []int) []float64 {
	all := [numParams]float64{
		logit(c.ComputeEfficiency), logit(c.MemoryEfficiency), logit(c.AttentionEfficiency),
		math.Log(math.Max(c.IterationOverheadMS, 1e-3)), math.Log(math.Max(c.PerSeqOverheadMS, 1e-4)),
		logit(math.Min(math.Max(c.ReserveGiB, 0.05), maxReserveGiB-0.05) / maxReserveGiB),
	}
	x := make([]float64, len(free))
	for i, p := range free {
		x[i] = all[p]
	}
	return x
}

// maxReserveGiB bounds the fitted non-KV memory reserve.
const maxReserveGiB = 16

func logistic(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// AtBounds names the fitted coefficients that ended at the edge of their range, which the
// measurements then do not constrain (an efficiency of 1, a reserve of 16 GiB).
func AtBounds(c sim.Coefficients) []string {
	var out []string
	for name, v := range map[string]float64{"compute_efficiency": c.ComputeEfficiency, "memory_efficiency": c.MemoryEfficiency,
		"attention_efficiency": c.AttentionEfficiency} {
		if v > 0.99 {
			out = append(out, name)
		}
	}
	if c.ReserveGiB > maxReserveGiB-0.1 {
		out = append(out, "reserve_gib")
	}
	sort.Strings(out)
	return out
}
func logit(p float64) float64 {
	p = math.Min(math.Max(p, 1e-3), 1-1e-3)
	return math.Log(p / (1 - p))
}

// FitOptions says which coefficients Fit keeps as given.
type FitOptions struct {
	// KeepCompute and KeepMemory keep the linear layers' compute and memory efficiencies, for
	// example when they were fitted on operator-level measurements (FitOperators).
	KeepCompute, KeepMemory bool
}

// Fit finds the coefficients of one GPU that minimise the mean absolute percentage error of the
// simulated latencies of cases (all measured on that GPU), starting from start. It fits the
// efficiencies, the two overheads and the memory reserve; load bandwidth and start-up time are
// kept from start. Nelder-Mead is restarted from its optimum until it stops improving.
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
	var free []int
	if !opts.KeepCompute {
		free = append(free, pCompute)
	}
	if !opts.KeepMemory {
		free = append(free, pMemory)
	}
	free = append(free, pAttention, pIterOverhead, pSeqOverhead, pReserve)
	evals := 0
	objective := func(x []float64) float64 {
		evals++
		coef := unpack(x, free, start)
		s := 0.0
		for _, c := range cases {
			p, err := Predict(c, coef)
			if err != nil {
				return math.Inf(1) // coefficients that leave no KV cache
			}
			s += math.Abs(p.ErrorPct())
		}
		return s / float64(len(cases))
	}
	x := pack(start, free)
	best := objective(x)
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
