package solver_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/policies/solver"
)

// stageProblems caches the placement problems of experiment files, by file and overrides.
var stageProblems sync.Map // string -> []solver.Problem

// stagePlans returns the placement problems the mosaic policy solves when it runs the
// experiment (file relative to experiments/, with --set overrides), stage by stage: exactly
// the problems of `mosaic plan`.
func stagePlans(b *testing.B, file string, sets ...string) []solver.Problem {
	b.Helper()
	key := file
	for _, s := range sets {
		key += " " + s
	}
	if ps, ok := stageProblems.Load(key); ok {
		return ps.([]solver.Problem)
	}
	e, err := experiments.Load("../../experiments/" + file)
	require.NoError(b, err)
	for _, s := range sets {
		require.NoError(b, e.Set(s))
	}
	r, err := e.Resolve()
	require.NoError(b, err)
	plans, err := r.PlanPreview(context.Background(), "mosaic")
	require.NoError(b, err)
	var ps []solver.Problem
	for _, sp := range plans {
		if sp != nil && sp.Plan != nil {
			ps = append(ps, sp.Problem)
		}
	}
	stageProblems.Store(key, ps)
	return ps
}

// benchPlan solves a stage's problem of an experiment (0: its expert stage) afresh in every
// iteration (not from Solve's memo), reporting the plan's gap to its lower bound, its
// makespan and bound, and whether it is proved optimal.
func benchPlan(b *testing.B, stage int, file string, sets ...string) {
	p := stagePlans(b, file, sets...)[stage]
	var plan *solver.Plan
	for b.Loop() {
		var err error
		plan, err = solver.SolveUncached(context.Background(), p)
		require.NoError(b, err)
	}
	b.ReportMetric(100*plan.Gap, "gap-%")
	b.ReportMetric(plan.Makespan, "makespan-s")
	b.ReportMetric(plan.LowerBound, "bound-s")
	optimal := 0.0
	if plan.Status == solver.Optimal {
		optimal = 1
	}
	b.ReportMetric(optimal, "optimal")
}

func needData(b *testing.B, file string) {
	if _, ok := dataset.File(file); !ok {
		b.Skipf("shared data not found: set %s", dataset.Env)
	}
}

// BenchmarkPlan16x8 plans the expert stage of experiments/examples/scale-16x8.toml: 16
// workers, 8 models (target: within 1% of the bound in under 1 s).
func BenchmarkPlan16x8(b *testing.B) { benchPlan(b, 0, "examples/scale-16x8.toml") }

// BenchmarkPlan32x12 plans the expert stage of experiments/examples/scale-32x12.toml: 32
// workers, 12 models (target: within 1% of the bound in under 1 s).
func BenchmarkPlan32x12(b *testing.B) { benchPlan(b, 0, "examples/scale-32x12.toml") }

// BenchmarkPlanAggregator32 plans the aggregator stage of scale-32x12.toml: one model on 32
// workers that hold it or are loading it (preloads and offsets: unlike workers).
func BenchmarkPlanAggregator32(b *testing.B) { benchPlan(b, 1, "examples/scale-32x12.toml") }

// BenchmarkPlanPaperSize plans MMLU-Pro's expert stage (experiments/paper/mmlu-pro.toml): 6
// models on 4 workers, proved optimal by the exact search.
func BenchmarkPlanPaperSize(b *testing.B) {
	needData(b, "workloads/moa_questions.csv")
	benchPlan(b, 0, "paper/mmlu-pro.toml")
}

// BenchmarkPlanGPQA16 and BenchmarkPlanGPQA32 plan GPQA's expert stage
// (experiments/paper/gpqa.toml) on 16 and 32 workers.
func BenchmarkPlanGPQA16(b *testing.B) {
	needData(b, "workloads/moa_questions.csv")
	benchPlan(b, 0, "paper/gpqa.toml", "cluster.workers=16")
}

// BenchmarkPlanGPQA32: see BenchmarkPlanGPQA16.
func BenchmarkPlanGPQA32(b *testing.B) {
	needData(b, "workloads/moa_questions.csv")
	benchPlan(b, 0, "paper/gpqa.toml", "cluster.workers=32")
}
