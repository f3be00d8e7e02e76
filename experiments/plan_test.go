package experiments_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/policies/solver"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// The paper-size plan (MMLU-Pro, 6 experts x 4 workers) is a golden file: a change of the cost
// model, the profile or the solver that moves it shows up here. Solve times are masked, and
// so is whether the plan was reused from an earlier test's identical problem.
func TestPaperPlanGolden(t *testing.T) {
	if _, ok := dataset.File("workloads/moa_questions.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the paper plan test", dataset.Env)
	}
	e, err := experiments.Load("paper/mmlu-pro.toml")
	require.NoError(t, err)
	r, err := e.Resolve()
	require.NoError(t, err)
	plans, err := r.PlanPreview(context.Background(), "mosaic")
	require.NoError(t, err)
	require.Len(t, plans, 2)
	ex, ag := plans[0], plans[1]
	require.NotNil(t, ag)
	assert.Equal(t, 0, ex.Layer)
	assert.Equal(t, 1, ag.Layer)
	assert.Positive(t, ag.Start, "the aggregator stage is planned at its barrier")
	assert.Equal(t, solver.Optimal, ex.Plan.Status)
	assert.Equal(t, solver.MethodExact, ex.Plan.Method, "the paper's size is proved optimal by the exact search")
	assert.LessOrEqual(t, ex.Plan.LowerBound, ex.Plan.Makespan)
	var b bytes.Buffer
	require.NoError(t, experiments.WritePlan(&b, ex, r.Hardware()))
	require.NoError(t, experiments.WritePlan(&b, ag, r.Hardware()))
	got := regexp.MustCompile(`in [0-9.]+(µs|ms|s)( \(reused[^)]*\))?`).ReplaceAll(b.Bytes(), []byte("in <time>"))
	path := filepath.Join("testdata", "mmlu-pro-plan.txt")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "rerun with -update after a deliberate change")
}

func TestPlanPreviewErrors(t *testing.T) {
	r, err := resolve(t, moa)
	require.NoError(t, err)
	_, err = r.PlanPreview(context.Background(), "")
	assert.ErrorContains(t, err, `no policy "mosaic" in the experiment`)
	_, err = r.PlanPreview(context.Background(), "round-robin")
	assert.ErrorContains(t, err, "only mosaic does")
	// Served online, mosaic places models as the run goes: an error, not a panic.
	e, err := experiments.Load("examples/online-moa.toml")
	require.NoError(t, err)
	require.NoError(t, e.Set("workload.queries=50"))
	r, err = e.Resolve()
	require.NoError(t, err)
	_, err = r.PlanPreview(context.Background(), "")
	assert.ErrorContains(t, err, `policy "mosaic" serves queries arriving over time here`)
}
