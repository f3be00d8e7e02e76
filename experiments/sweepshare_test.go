package experiments_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
)

// sharedExp is a small MoA experiment that reads data files (a question list, and a CSV
// column as an empirical output distribution) and runs a baseline, a planning policy (which
// profiles serving curves) and an online one: what a sweep's points share.
const sharedExp = `name = "shared"
seed = 5

[cluster]
gpu = "A100-80GB"
workers = 2

[[model]]
name = "R"
arch = "qwenr1"
output_tokens = { dist = "lognormal", mean = 700, p99 = 3000, max = 8192 }
forward_tokens = { dist = "fixed", value = 100 }
accuracy = 0.6

[[model]]
name = "I1"
arch = "qwen2.5-7b"
output_tokens = { dist = "empirical", file = "lengths.csv", column = "tokens", scale = 2 }
accuracy = 0.5

[[model]]
name = "I2"
arch = "llama-3-8b"
output_tokens = { dist = "lognormal", mean = 100, p99 = 600, max = 2048 }
accuracy = 0.5

[workload]
kind = "moa"
questions = "questions.csv"
queries = 40
tokens_per_word = 1.3
template_tokens = 40
experts_per_query = 3
routing = { skew = 4 }
votes = { options = 4, error_correlation = 0.5 }

[workload.aggregator]
model = "R"
output_tokens = { dist = "lognormal", mean = 1500, p99 = 6000, max = 8192 }
accuracy = 0.4
disagreement_scale = 0.4

[aggregation]
threshold = 1.0

[[policy]]
name = "round-robin"
threshold = 2.0

[[policy]]
name = "mosaic"

[[policy]]
name = "online"

[[policy]]
name = "round-robin"
label = "round-robin+skip"

[[policy]]
name = "mosaic"
label = "mosaic+exit"
early_exit = { agreement = 1.0, min_finished = 2 }

[[policy]]
name = "online"
label = "online-t2/3"
threshold = 0.6667

[[policy]]
name = "online"
label = "online-dynamic"
dynamic_threshold = { high = 1.0, low = 0.6667, backlog = 8, budget = 0.2 }
`

// writeSharedExp writes the experiment and its data files into a folder and returns the
// experiment's path.
func writeSharedExp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var qs strings.Builder
	qs.WriteString("dataset,index,category,question_chars,question_words,gold\n")
	for i := range 50 {
		fmt.Fprintf(&qs, "toy,%d,%s,%d,%d,%c\n", i, []string{"math", "law", "bio"}[i%3], 300+17*i, 40+3*i, 'A'+rune(i%4))
	}
	var ls strings.Builder
	ls.WriteString("tokens\n")
	for i := range 200 {
		fmt.Fprintf(&ls, "%d\n", 20+(i*37)%400)
	}
	for name, data := range map[string]string{"exp.toml": sharedExp, "questions.csv": qs.String(), "lengths.csv": ls.String()} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	return filepath.Join(dir, "exp.toml")
}

// A sweep's points share workloads, data files, serving profiles and the runs of policies
// that simulate alike, and each point's results are byte for byte those of the same variant
// run alone through the plain path (Resolve, Simulate, WriteDir): every point's files, and the
// combined summary's rows.
func TestSweepSharesAndMatchesPlainRuns(t *testing.T) {
	path := writeSharedExp(t)
	load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
	s, err := experiments.ParseSweep([]string{"aggregation.threshold=0.6,0.6667,0.8,1.0,2.0", "cluster.workers=2,3", "seed=1,2"})
	require.NoError(t, err)
	ctx := context.Background()
	info, host := experiments.RunInfo{Version: "test"}, experiments.HostInfo{}

	sw, err := experiments.NewSweeper(load)
	require.NoError(t, err)
	require.NoError(t, sw.Check(s.Points()))
	assert.Equal(t, experiments.SweepStats{Workloads: 2, Reused: 18}, sw.Stats(), "checked: one workload per seed")
	swept := t.TempDir()
	require.NoError(t, sw.RunSweep(ctx, s, 1, 1, nil, swept, info, host, nil))
	// Each of the 4 clusters and seeds (run groups) simulates, with 3 experts a query, the
	// thresholds {0.6, 0.6667} (2:1 majorities skip), {0.8, 1.0} (unanimous ones) and 2.0
	// (never): round-robin (2.0) once, round-robin+skip twice more (at 2.0 it is round-robin),
	// mosaic, mosaic+exit and online three times each (online-t2/3 is online at 0.6667),
	// online-dynamic once: 13 of the 5 x 7 policies' runs.
	assert.Equal(t, experiments.SweepStats{Workloads: 2, Reused: 18, Runs: 20 * 7, Simulated: 4 * 13}, sw.Stats(), "run: one workload per seed")

	summary := readCSV(t, filepath.Join(swept, "summary.csv"))
	require.Len(t, summary, 1+20*7, "20 points x 7 policies")
	first := indexOf(summary[0], "experiment")
	alone := t.TempDir()
	row := 1
	for _, p := range s.Points() {
		e, err := experiments.Load(path)
		require.NoError(t, err)
		for _, a := range p.Assign {
			require.NoError(t, e.Set(a))
		}
		r, err := e.Resolve()
		require.NoError(t, err)
		run, err := r.Simulate(ctx, nil)
		require.NoError(t, err)
		dir := filepath.Join(alone, p.Name)
		require.NoError(t, run.WriteDir(dir, info, host))
		for _, f := range []string{"summary.csv", "calls.csv", "queries.csv", "workers.csv", "run.json"} {
			want, err := os.ReadFile(filepath.Join(dir, f))
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(swept, p.Name, f))
			require.NoError(t, err)
			require.True(t, string(want) == string(got), "point %s: %s differs from the point run alone", p.Name, f)
		}
		for _, want := range readCSV(t, filepath.Join(dir, "summary.csv"))[1:] {
			assert.Equal(t, p.Name, summary[row][first-1])
			assert.Equal(t, want, summary[row][first:], "combined summary, point %s", p.Name)
			row++
		}
	}
}

// A workload is shared only between points whose inputs to it are equal: another value of a
// key that builds it (the aggregator's output, the question list's tokens per word) gives
// another workload, a key that does not (the threshold, the cluster) does not.
func TestSweepSharesOnlyEqualWorkloads(t *testing.T) {
	path := writeSharedExp(t)
	load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
	for _, tc := range []struct {
		sweep     []string
		workloads int
	}{
		{[]string{"cluster.workers=1,2,3", "engine.max_num_seqs=64,128"}, 1},
		{[]string{"workload.tokens_per_word=1.3,1.4", "aggregation.threshold=0.6667,1.0"}, 2},
		{[]string{"workload.aggregator.disagreement_scale=0.4,0.5", "model[1].output_tokens.scale=2,3"}, 4},
		{[]string{"seed=1,2,3"}, 3},
	} {
		s, err := experiments.ParseSweep(tc.sweep)
		require.NoError(t, err)
		sw, err := experiments.NewSweeper(load)
		require.NoError(t, err)
		require.NoError(t, sw.Check(s.Points()), "%v", tc.sweep)
		n := len(s.Points())
		assert.Equal(t, experiments.SweepStats{Workloads: tc.workloads, Reused: n - tc.workloads}, sw.Stats(), "%v", tc.sweep)
	}
}

// A point's error names the point, from the check as from the run.
func TestSweepPointErrors(t *testing.T) {
	path := writeSharedExp(t)
	load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
	s, err := experiments.ParseSweep([]string{"seed=1,2", "workload.experts_per_query=3,9"})
	require.NoError(t, err)
	sw, err := experiments.NewSweeper(load)
	require.NoError(t, err)
	err = sw.Check(s.Points())
	assert.ErrorContains(t, err, "sweep point 0001_seed=1__workload.experts_per_query=9: --set workload.experts_per_query: k = 9 is larger than the expert pool (3 experts)")
	_, err = sw.Variant(experiments.Point{Name: "x", Assign: []string{"workload.nope=1"}})
	assert.ErrorContains(t, err, `unknown key "nope"`)
}

// Clone copies every table: setting or resolving the copy leaves the original as it was, and
// the two share no pointer, slice or map.
func TestExperimentClone(t *testing.T) {
	e, err := experiments.Load(writeSharedExp(t))
	require.NoError(t, err)
	require.NoError(t, e.Set("workload.routing.skew=6"))
	c := e.Clone()
	require.Equal(t, e, c)
	assertNoAliasing(t, reflect.ValueOf(e).Elem(), reflect.ValueOf(c).Elem(), "Experiment")
	require.NoError(t, c.Set("model[0].output_tokens.mean=900"))
	require.NoError(t, c.Set("model[0].accuracy=0.7"))
	require.NoError(t, c.Set("workload.aggregator.accuracy=0.1"))
	_, err = c.Resolve()
	require.NoError(t, err)
	assert.Equal(t, 700.0, e.Models[0].OutputTokens.Mean)
	assert.Equal(t, 0.6, *e.Models[0].Accuracy)
	assert.Equal(t, 0.4, *e.Workload.Aggregator.Accuracy)
	// The original's overrides are its own: a key set on the copy is not set on it.
	r, err := e.Resolve()
	require.NoError(t, err)
	assert.Equal(t, 2, r.NumWorkers())
}

// assertNoAliasing fails where a and b (equal values) share the memory of a pointer, slice
// or map, exported fields only (the file's key positions are shared on purpose).
func assertNoAliasing(t *testing.T, a, b reflect.Value, at string) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if !a.IsNil() {
			assert.NotEqual(t, a.Pointer(), b.Pointer(), "%s shares a pointer", at)
			assertNoAliasing(t, a.Elem(), b.Elem(), at)
		}
	case reflect.Slice:
		if a.Len() > 0 {
			assert.NotEqual(t, a.Pointer(), b.Pointer(), "%s shares a slice", at)
		}
		for i := range a.Len() {
			assertNoAliasing(t, a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", at, i))
		}
	case reflect.Map:
		if a.Len() > 0 {
			assert.NotEqual(t, a.Pointer(), b.Pointer(), "%s shares a map", at)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				assertNoAliasing(t, a.Field(i), b.Field(i), at+"."+a.Type().Field(i).Name)
			}
		}
	}
}
