package experiments_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/results"
)

// streamCase is an example experiment with overrides, simulated held and streamed.
type streamCase struct {
	file string
	sets []string
	// data says the experiment reads the shared data.
	data bool
}

// TestStreamedRunMatchesHeld simulates online workloads both ways, held (Resolve, Simulate,
// WriteInto) and streamed (ResolveSim, Sim.Run into the folder, WriteInto), and requires the
// same bytes in every results file and the same printed table: a few thousand online MoA
// queries under every policy (the mosaic policy's plan checks included), an agent program
// with tool steps and bursty arrivals, and Faster-MoA's tree with early exit and overlap
// (whose worker intervals wait for the end of the run).
func TestStreamedRunMatchesHeld(t *testing.T) {
	for _, tc := range []streamCase{
		{file: "examples/online-moa.toml", sets: []string{"workload.queries=3000", "workload.arrival_rate=1"}},
		{file: "examples/agent-dag.toml", sets: []string{"workload.queries=1500"}},
		{file: "examples/faster-moa.toml", sets: []string{"workload.queries=60"}, data: true},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			if _, ok := dataset.File("workloads/llmthinkbench_output_tokens.csv"); tc.data && !ok {
				t.Skipf("shared data not found: set %s", dataset.Env)
			}
			held, heldTable := simulateHeld(t, tc)
			streamed, streamedTable := simulateStreamed(t, tc)
			require.Equal(t, heldTable, streamedTable, "the printed table")
			for _, name := range []string{"summary.csv", "calls.csv", "queries.csv", "workers.csv", "run.json", "host.json"} {
				want, err := os.ReadFile(filepath.Join(held, name))
				require.NoError(t, err)
				got, err := os.ReadFile(filepath.Join(streamed, name))
				require.NoError(t, err)
				require.True(t, bytes.Equal(want, got), "%s differs (%d bytes held, %d streamed)", name, len(want), len(got))
			}
			left, err := filepath.Glob(filepath.Join(streamed, ".*.tmp"))
			require.NoError(t, err)
			require.Empty(t, left, "temporary files left behind")
		})
	}
}

// load reads a test case's experiment with its overrides.
func load(t *testing.T, tc streamCase) *experiments.Experiment {
	t.Helper()
	e, err := experiments.Load(tc.file)
	require.NoError(t, err)
	for _, s := range tc.sets {
		require.NoError(t, e.Set(s))
	}
	return e
}

// table prints a run's comparison and plan checks.
func table(t *testing.T, run *experiments.Run, layers int) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, run.WriteTable(&b))
	require.NoError(t, experiments.WritePlanChecks(&b, run.PlanChecks(), layers))
	return b.String()
}

var (
	testInfo = experiments.RunInfo{Version: "test", Commit: "test"}
	testHost = experiments.HostInfo{Host: "test"}
)

func simulateHeld(t *testing.T, tc streamCase) (string, string) {
	t.Helper()
	r, err := load(t, tc).Resolve()
	require.NoError(t, err)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, run.WriteDir(dir, testInfo, testHost))
	return dir, table(t, run, r.Graph.Workload.Layers())
}

func simulateStreamed(t *testing.T, tc streamCase) (string, string) {
	t.Helper()
	s, err := load(t, tc).ResolveSim()
	require.NoError(t, err)
	require.True(t, s.Streamed(), "the workload streams")
	dir := t.TempDir()
	d, err := results.Open(dir, "test")
	require.NoError(t, err)
	defer d.Close()
	run, err := s.Run(context.Background(), nil, d)
	require.NoError(t, err)
	require.NoError(t, run.WriteInto(d, testInfo, testHost))
	return dir, table(t, run, s.Graph.Workload.Layers())
}

// TestResolveSimHolds: what does not stream resolves whole, as Resolve does: an offline
// batch, and a MoA workload whose vote model is calibrated over every query.
func TestResolveSimHolds(t *testing.T) {
	for _, tc := range []streamCase{
		{file: "examples/online-moa.toml", sets: []string{"workload.arrival_rate=0", "workload.queries=600"}},
		{file: "examples/online-moa.toml", sets: []string{"workload.votes.unanimous=0.4"}},
		{file: "examples/online-moa.toml", sets: []string{"workload.queries=1"}},
	} {
		s, err := load(t, tc).ResolveSim()
		require.NoError(t, err)
		require.False(t, s.Streamed(), "%v", tc.sets)
		require.Len(t, s.Graph.Workload.Queries, s.Workload.Queries, "%v: the whole workload", tc.sets)
	}
}

// TestStreamedRunChecksLengths: a streamed call too long for its engine fails the run with
// Resolve's error, when it is drawn.
func TestStreamedRunChecksLengths(t *testing.T) {
	tc := streamCase{file: "examples/online-moa.toml", sets: []string{"workload.queries=400", "workload.arrival_rate=5",
		"workload.prompt_tokens.max=200000", "workload.prompt_tokens.p99=150000", "workload.prompt_tokens.mean=20000"}}
	_, want := load(t, tc).Resolve()
	require.Error(t, want)
	s, err := load(t, tc).ResolveSim()
	require.NoError(t, err, "one query of the cut workload fits")
	_, err = s.Run(context.Background(), nil, nil)
	require.ErrorContains(t, err, want.Error())
}
