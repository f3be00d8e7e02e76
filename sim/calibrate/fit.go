package calibrate

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/optimize"

	"github.com/mosaic-sched/mosaic/sim"
)

// FitResult is the outcome of Fit.
type FitResult struct {
	Coef        sim.Coefficients
	MAPE        float64 // in percent, on the cases fitted
	Evaluations int
}

// The fitted parameters, in an unconstrained space: efficiencies through a logistic function,
// overheads and the memory reserve through exp.
func unpack(x []float64, base sim.Coefficients) sim.Coefficients {
	c := base
	c.ComputeEfficiency = logistic(x[0])
	c.MemoryEfficiency = logistic(x[1])
	c.AttentionEfficiency = logistic(x[2])
	c.IterationOverheadMS = math.Exp(x[3])
	c.PerSeqOverheadMS = math.Exp(x[4])
	c.ReserveGiB = math.Exp(x[5])
	return c
}

func pack(c sim.Coefficients) []float64 {
	return []float64{
		logit(c.ComputeEfficiency), logit(c.MemoryEfficiency), logit(c.AttentionEfficiency),
		math.Log(math.Max(c.IterationOverheadMS, 1e-3)), math.Log(math.Max(c.PerSeqOverheadMS, 1e-4)),
		math.Log(math.Max(c.ReserveGiB, 0.05)),
	}
}

func logistic(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func logit(p float64) float64 {
	p = math.Min(math.Max(p, 1e-3), 1-1e-3)
	return math.Log(p / (1 - p))
}

// Fit finds the coefficients of one GPU that minimise the mean absolute percentage error of the
// simulated latencies of cases (all measured on that GPU), starting from start. It fits the
// three efficiencies, the two overheads and the memory reserve; load bandwidth and start-up time
// are kept from start. Nelder-Mead is restarted from its optimum until it stops improving.
func Fit(cases []Case, start sim.Coefficients) (FitResult, error) {
	if len(cases) == 0 {
		return FitResult{}, errors.New("calibrate: nothing to fit")
	}
	gpu := cases[0].GPU
	for _, c := range cases {
		if c.GPU != gpu {
			return FitResult{}, fmt.Errorf("calibrate: cases span GPUs %s and %s; fit one GPU at a time", gpu.Name, c.GPU.Name)
		}
	}
	evals := 0
	objective := func(x []float64) float64 {
		evals++
		coef := unpack(x, start)
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
	x := pack(start)
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
	return FitResult{Coef: unpack(x, start), MAPE: best, Evaluations: evals}, nil
}
