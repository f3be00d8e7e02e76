package placement_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

var archs = []string{"llamar1", "qwenr1", "gemma-2-9b", "exaone", "glm-4-9b", "qwen2.5-7b"}

// expertProblem builds the expert-stage problem of n experts on w A100-80GB workers: the
// experts cycle through the six MOSAIC architectures, the first two of every six are reasoning
// models (mean 3,000 output tokens) and the rest instruction models (mean 200); demand falls
// geometrically, 92x from the first expert to the last, over 6,300 calls (MMLU-Pro's).
func expertProblem(tb testing.TB, n, w int) solver.Problem {
	tb.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("A100-80GB")
	require.NoError(tb, err)
	var infos []policies.ModelInfo
	var demand []placement.Demand
	weights, total := make([]float64, n), 0.0
	for i := range weights {
		weights[i] = math.Pow(92, -float64(i)/float64(n-1))
		total += weights[i]
	}
	for i := 0; i < n; i++ {
		arch, err := cat.Model(archs[i%len(archs)])
		require.NoError(tb, err)
		cm, err := sim.NewCostModel(arch, g, sim.DefaultProfile().For(g))
		require.NoError(tb, err)
		ec, err := sim.DefaultEngine().WithKVCache(cm, 0.9)
		require.NoError(tb, err)
		var out traces.LengthDist
		if i%6 < 2 {
			out, err = traces.NewLogNormal(3000, 16000, 1, 32768)
		} else {
			out, err = traces.NewLogNormal(200, 1000, 1, 4096)
		}
		require.NoError(tb, err)
		name := fmt.Sprintf("E%02d", i)
		infos = append(infos, policies.ModelInfo{Name: name, Arch: arch, Cost: cm, Output: out, Memory: 0.9, LoadTime: cm.LoadTime(),
			Engine: ec})
		demand = append(demand, placement.Demand{Model: name, Calls: max(1, int(6300*weights[i]/total)), Prompt: 250})
	}
	sp, err := placement.PlanStage(context.Background(), infos, nil, demand, w, nil, nil, 10*time.Second)
	require.NoError(tb, err)
	return sp.Problem
}

func benchSolve(b *testing.B, n, w int, limit time.Duration) {
	p := expertProblem(b, n, w)
	p.TimeLimit = limit
	var plan *solver.Plan
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A time limit of its own in every iteration: Solve keeps the plans of the problems it
		// solved, by their content (the time limit included), so that each iteration solves.
		p.TimeLimit = limit + time.Duration(i)
		var err error
		plan, err = solver.Solve(context.Background(), p)
		require.NoError(b, err)
	}
	b.ReportMetric(100*plan.Gap, "gap-%")
	b.ReportMetric(plan.Makespan, "makespan-s")
	b.ReportMetric(plan.LowerBound, "bound-s")
	if plan.Status == solver.Optimal {
		b.ReportMetric(1, "optimal")
	} else {
		b.ReportMetric(0, "optimal")
	}
}

// BenchmarkSolvePaperSize: 6 experts x 4 workers (target: proven optimal in < 200 ms).
func BenchmarkSolvePaperSize(b *testing.B) { benchSolve(b, 6, 4, 10*time.Second) }

// BenchmarkSolve16x8: 16 experts x 8 workers (target: within 2% of the bound in < 10 s). The
// planner's benchmarks on the example experiments' own stages are in policies/solver.
func BenchmarkSolve16x8(b *testing.B) { benchSolve(b, 16, 8, 2*time.Second) }
