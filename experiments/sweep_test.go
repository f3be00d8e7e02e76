package experiments_test

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
)

func TestSweepGrid(t *testing.T) {
	s, err := experiments.ParseSweep([]string{"workload.queries=10,20,30", "seed=1,2"})
	require.NoError(t, err)
	pts := s.Points()
	require.Len(t, pts, 6)
	assert.Equal(t, []string{"workload.queries=10", "seed=1"}, pts[0].Assign)
	assert.Equal(t, []string{"workload.queries=10", "seed=2"}, pts[1].Assign)
	assert.Equal(t, []string{"workload.queries=30", "seed=2"}, pts[5].Assign)

	// Shards cover the grid exactly once, for any number of shards.
	for n := 1; n <= 7; n++ {
		seen := map[int]int{}
		for i := 1; i <= n; i++ {
			for _, p := range experiments.Shard(pts, i, n) {
				seen[p.Index]++
			}
		}
		require.Len(t, seen, len(pts), "n=%d", n)
		for idx, c := range seen {
			require.Equal(t, 1, c, "point %d with n=%d", idx, n)
		}
	}
	for _, bad := range [][]string{{"seed"}, {"seed="}, {"seed=1,,2"}, {"seed=1", "seed=2"}} {
		_, err := experiments.ParseSweep(bad)
		assert.Error(t, err, "%v", bad)
	}
	for _, bad := range []string{"0/2", "3/2", "1", "a/b"} {
		_, _, err := experiments.ParseShard(bad, os.Getenv)
		assert.Error(t, err, bad)
	}
}

// --shard auto reads a Slurm job array's or a Kubernetes Indexed Job's environment.
func TestAutoShard(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		flag string
		env  map[string]string
		i, n int
		err  string
	}{
		{"auto", map[string]string{"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, 3, 4, ""},
		{"auto", map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, 1, 4, ""},
		{"auto", map[string]string{"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, 0, 0, "not a shard of a contiguous array"},
		{"auto/5", map[string]string{"JOB_COMPLETION_INDEX": "4"}, 5, 5, ""},
		{"auto", map[string]string{"JOB_COMPLETION_INDEX": "0", "MOSAIC_SHARDS": "2"}, 1, 2, ""},
		{"auto", map[string]string{"JOB_COMPLETION_INDEX": "2"}, 0, 0, "needs the number of shards"},
		{"auto/2", map[string]string{"JOB_COMPLETION_INDEX": "2"}, 0, 0, "0 <= index < N"},
		{"auto", map[string]string{"JOB_COMPLETION_INDEX": "x"}, 0, 0, "not an integer"},
		{"auto", nil, 0, 0, "neither SLURM_ARRAY_TASK_ID"},
	} {
		i, n, err := experiments.ParseShard(tc.flag, env(tc.env))
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%v", tc.env)
			continue
		}
		require.NoError(t, err, "%v", tc.env)
		assert.Equal(t, []int{tc.i, tc.n}, []int{i, n}, "%v", tc.env)
	}
}

func TestSweepRunAndMerge(t *testing.T) {
	load := func() (*experiments.Experiment, error) { return experiments.Parse("exp.toml", []byte(moa)) }
	s, err := experiments.ParseSweep([]string{"workload.queries=20,30", "workload.routing.skew=2,8"})
	require.NoError(t, err)
	ctx := context.Background()
	full := t.TempDir()
	require.NoError(t, experiments.RunSweep(ctx, load, s, 1, 1, nil, full, experiments.RunInfo{}, experiments.HostInfo{}, nil))
	recs := readCSV(t, filepath.Join(full, "summary.csv"))
	assert.Equal(t, []string{"workload.queries", "workload.routing.skew", "point", "experiment"}, recs[0][:4])
	require.Len(t, recs, 1+4*2, "4 points x 2 policies")
	assert.Equal(t, []string{"20", "2"}, recs[1][:2])
	assert.Equal(t, []string{"30", "8"}, recs[8][:2])
	// Each point's own folder holds the full results, and the queries were really swept.
	for _, p := range s.Points() {
		_, err := os.Stat(filepath.Join(full, p.Name, "calls.csv"))
		require.NoError(t, err)
	}
	col := indexOf(recs[0], "queries")
	assert.Equal(t, "20", recs[1][col])
	assert.Equal(t, "30", recs[8][col])

	// Two shards merged give the same combined summary; a missing shard is an error.
	a, b, merged := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, experiments.RunSweep(ctx, load, s, 1, 2, []string{"seed=3"}, a, experiments.RunInfo{}, experiments.HostInfo{}, nil))
	require.NoError(t, experiments.RunSweep(ctx, load, s, 2, 2, []string{"seed=3"}, b, experiments.RunInfo{}, experiments.HostInfo{}, nil))
	require.NoError(t, experiments.Merge([]string{b, a}, merged))
	// (the overrides are only recorded here: load ignores them)
	assert.Equal(t, recs, readCSV(t, filepath.Join(merged, "summary.csv")))
	// A shard run with other overrides is refused, naming them.
	c := t.TempDir()
	require.NoError(t, experiments.RunSweep(ctx, load, s, 2, 2, []string{"seed=4"}, c, experiments.RunInfo{}, experiments.HostInfo{}, nil))
	err = experiments.Merge([]string{a, c}, t.TempDir())
	assert.ErrorContains(t, err, "overrides [seed=4]")
	err = experiments.Merge([]string{a}, t.TempDir())
	assert.ErrorContains(t, err, "2 of the grid's 4 points are missing")
	err = experiments.Merge([]string{a, a}, t.TempDir())
	assert.ErrorContains(t, err, "is in both")
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return recs
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}
