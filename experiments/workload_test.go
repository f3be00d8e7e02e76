package experiments_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

const moa = `name = "moa-small"
seed = 11

[cluster]
gpu = "A100-80GB"
workers = 2

[[model]]
name = "R"
arch = "qwenr1"
output_tokens = { dist = "lognormal", mean = 800, p99 = 4000, max = 8192 }
forward_tokens = { dist = "fixed", value = 100 }
accuracy = 0.6

[[model]]
name = "I1"
arch = "qwen2.5-7b"
output_tokens = { dist = "lognormal", mean = 100, p99 = 600, max = 2048 }
accuracy = 0.5

[[model]]
name = "I2"
arch = "llama-3-8b"
output_tokens = { dist = "lognormal", mean = 100, p99 = 600, max = 2048 }
accuracy = 0.5

[workload]
kind = "moa"
queries = 60
prompt_tokens = { dist = "uniform", min = 50, max = 300 }
experts_per_query = 2
routing = { skew = 4 }
votes = { options = 4, error_correlation = 0.5 }
aggregator = { model = "R", accuracy = 0.4 }

[aggregation]
threshold = 1.0

[[policy]]
name = "round-robin"
threshold = 2.0

[[policy]]
name = "data-parallel"
`

func simulate(t *testing.T, src string) *experiments.Run {
	t.Helper()
	r, err := resolve(t, src)
	require.NoError(t, err)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	return run
}

func TestMoARuns(t *testing.T) {
	run := simulate(t, moa)
	require.Len(t, run.Summaries, 2)
	rr, dp := run.Summaries[0], run.Summaries[1]
	assert.Equal(t, 1.0, rr.SpeedupE2E)
	assert.Equal(t, 120, rr.ExpertCalls)
	assert.Equal(t, 60, rr.AggregatorCalls+rr.AggregatorSkipped)
	assert.Equal(t, 0, rr.AggregatorSkipped, "the baseline never skips")
	assert.Equal(t, "never-skip", rr.Rule)
	assert.Equal(t, 60, dp.AggregatorCalls+dp.AggregatorSkipped)
	assert.InDelta(t, rr.E2ES/dp.E2ES, dp.SpeedupE2E, 1e-9)
	assert.Equal(t, 3*2, dp.ModelLoads, "data-parallel loads every model on both workers")
}

// The same seed writes byte-identical result files.
func TestMoAFilesDeterministic(t *testing.T) {
	write := func(dir string) {
		run := simulate(t, moa)
		require.NoError(t, run.WriteDir(dir, experiments.RunInfo{Version: "test"}, experiments.HostInfo{}))
	}
	a, b := t.TempDir(), t.TempDir()
	write(a)
	write(b)
	for _, f := range []string{"summary.csv", "calls.csv", "queries.csv", "workers.csv", "run.json"} {
		da, err := os.ReadFile(filepath.Join(a, f))
		require.NoError(t, err)
		db, err := os.ReadFile(filepath.Join(b, f))
		require.NoError(t, err)
		assert.Equal(t, string(da), string(db), f)
		assert.NotEmpty(t, da)
	}
	head, err := os.ReadFile(filepath.Join(a, "calls.csv"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(head), strings.Join(results.CallHeader, ",")+"\n"))
}

func TestBadMoAExperiments(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"k larger than the pool", "experts_per_query = 2", "experts_per_query = 4", "exp.toml:31: workload.experts_per_query: k = 4 is larger than the expert pool (3 experts)"},
		{"aggregator not a model", `model = "R", accuracy`, `model = "Judge", accuracy`, `exp.toml:34: workload.aggregator.model: aggregator "Judge" is not a [[model]]`},
		{"expert not a model", "experts_per_query = 2", "experts_per_query = 2\nexperts = [\"R\", \"X\"]", `workload.experts: expert "X" is not a [[model]]`},
		{"unknown policy", `name = "data-parallel"`, `name = "random"`, `exp.toml:44: policy[1].name: unknown policy "random" (known: atlas, data-parallel, mosaic, online, pipeline, plas, round-robin)`},
		{"missing accuracy", "accuracy = 0.6\n", "", "exp.toml:8: model[0].accuracy: missing"},
		{"missing trace", "queries = 60\nprompt_tokens = { dist = \"uniform\", min = 50, max = 300 }\nexperts_per_query = 2\nrouting = { skew = 4 }\nvotes = { options = 4, error_correlation = 0.5 }\naggregator = { model = \"R\", accuracy = 0.4 }", "trace = \"nope.jsonl\"", "exp.toml:29: workload.trace: stat nope.jsonl: no such file"},
		{"generator key with a trace", "queries = 60", "trace = \"nope.jsonl\"", "exp.toml:30: workload.prompt_tokens: does not apply to a workload read from a trace file (workload.trace)"},
		{"key of another kind", "experts_per_query = 2", "experts_per_query = 2\nlayers = 3", `exp.toml:32: workload.layers: does not apply to workload kind "moa" (its keys: kind, experts, experts_per_query, routing, trace, answers, queries`},
		{"a key of moa in a layered workload", `kind = "moa"`, `kind = "layered"`, `exp.toml:31: workload.experts_per_query: does not apply to workload kind "layered"`},
		{"unknown kind", `kind = "moa"`, `kind = "moe"`, `exp.toml:28: workload.kind: unknown workload kind "moe"`},
		{"no policy", "[[policy]]\nname = \"round-robin\"\nthreshold = 2.0\n\n[[policy]]\nname = \"data-parallel\"\n", "", "exp.toml: policy: missing"},
		{"bad threshold", "threshold = 1.0", "threshold = -1.0", "exp.toml:37: aggregation.threshold: must be positive"},
		{"misspelt routing key", "routing = { skew = 4 }", "routing = { skwe = 4 }", "exp.toml:32: workload.routing.skwe: unknown key"},
		{"too long for the model", "arch = \"llama-3-8b\"\noutput_tokens = { dist = \"lognormal\", mean = 100, p99 = 600, max = 2048 }", "arch = \"llama-3-8b\"\noutput_tokens = { dist = \"lognormal\", mean = 100, p99 = 600, max = 9000 }", "exp.toml:24: model[2].output_tokens: max 9000 leaves no room for a prompt in meta-llama/Meta-Llama-3-8B's max_model_len 8192 (want at most 8191)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, moa, tc.from)
			_, err := resolve(t, strings.Replace(moa, tc.from, tc.to, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A workload file with a malformed line is an error naming the file and the line.
func TestMalformedTraceLine(t *testing.T) {
	r, err := resolve(t, moa)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "w.jsonl")
	var b strings.Builder
	require.NoError(t, traces.WriteJSONL(&b, r.Graph.Workload))
	lines := strings.Split(b.String(), "\n")
	lines[2] = `{"id": 2, "oops": true}`
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
	src := strings.Replace(moa, "queries = 60\nprompt_tokens = { dist = \"uniform\", min = 50, max = 300 }\nexperts_per_query = 2\nrouting = { skew = 4 }\nvotes = { options = 4, error_correlation = 0.5 }\naggregator = { model = \"R\", accuracy = 0.4 }", "trace = \"w.jsonl\"", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exp.toml"), []byte(src), 0o644))
	e, err := experiments.Load(filepath.Join(dir, "exp.toml"))
	require.NoError(t, err)
	_, err = e.Resolve()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "workload.trace: "+path+":3:")

	// The intact file round-trips into the same results as the generated workload.
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	e, err = experiments.Load(filepath.Join(dir, "exp.toml"))
	require.NoError(t, err)
	rt, err := e.Resolve()
	require.NoError(t, err)
	gen, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	fromFile, err := rt.Simulate(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, fromFile.Summaries, len(gen.Summaries))
	for i := range gen.Summaries {
		assert.Equal(t, gen.Summaries[i].Record(), fromFile.Summaries[i].Record(), "as written to summary.csv")
	}
}

// The paper experiments resolve, run and show the baselines' signatures: round-robin's
// straggler and data-parallel's W-fold loads.
func TestPaperExperiments(t *testing.T) {
	if _, ok := dataset.File("workloads/moa_questions.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the paper experiments", dataset.Env)
	}
	for _, name := range []string{"gpqa", "mmlu-pro", "medmcqa"} {
		t.Run(name, func(t *testing.T) {
			e, err := experiments.Load(filepath.Join("paper", name+".toml"))
			require.NoError(t, err)
			r, err := e.Resolve()
			require.NoError(t, err)
			run, err := r.Simulate(context.Background(), nil)
			require.NoError(t, err)
			rr, dp := run.Summaries[0], run.Summaries[1]
			assert.Equal(t, "round-robin", rr.Policy)
			assert.Equal(t, 4*rr.ModelLoads, dp.ModelLoads, "data-parallel pays every load on every worker")
			busy := map[int]float64{}
			for _, w := range experiments.WorkerRows(run.Results[:1]) {
				if w.Kind == "busy" {
					busy[w.Worker] += w.EndS - w.StartS
				}
			}
			maxB, minB := 0.0, 1e18
			for _, b := range busy {
				maxB, minB = max(maxB, b), min(minB, b)
			}
			assert.Greater(t, maxB, 3*minB, "round-robin straggler: %v", busy)
		})
	}
}

// Early exit can cancel every call a mosaic worker was dealt of a model before the worker
// reaches it (here QwenR1's... calls of a lightly routed expert, with the sensitivity run's
// extreme routing skew): the worker passes over that model instead of waiting for a call of
// it to finish, and every query completes.
func TestMosaicEarlyExitCancelsAWholeModel(t *testing.T) {
	if _, ok := dataset.File("workloads/moa_questions.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the paper experiments", dataset.Env)
	}
	e, err := experiments.Load(filepath.Join("paper", "mmlu-pro.toml"))
	require.NoError(t, err)
	for _, s := range []string{"workload.routing.keywords=4", "workload.routing.shared=0.5", "seed=2"} {
		require.NoError(t, e.Set(s))
	}
	r, err := e.Resolve()
	require.NoError(t, err)
	r.Graph.Policies = slices.DeleteFunc(r.Graph.Policies, func(p experiments.ResolvedPolicy) bool { return p.Label != "mosaic+exit" })
	require.Len(t, r.Graph.Policies, 1)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	s := run.Summaries[0]
	assert.Equal(t, len(r.Graph.Workload.Queries), s.Queries)
	assert.Positive(t, s.CancelledCalls)
}

// Output lengths can come from a column of a real trace.
func TestEmpiricalLengths(t *testing.T) {
	if _, ok := dataset.File("traces/azure_conv_2023.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the empirical-length test", dataset.Env)
	}
	src := strings.Replace(moa, `output_tokens = { dist = "lognormal", mean = 100, p99 = 600, max = 2048 }
accuracy = 0.5

[[model]]
name = "I2"`, `output_tokens = { dist = "empirical", file = "data:traces/azure_conv_2023.csv", column = "GeneratedTokens", max = 2048 }
accuracy = 0.5

[[model]]
name = "I2"`, 1)
	require.NotEqual(t, moa, src)
	r, err := resolve(t, src)
	require.NoError(t, err)
	out := r.Models[1].Output
	require.IsType(t, &traces.Empirical{}, out)
	assert.LessOrEqual(t, out.Max(), 2048)
	_, err = resolve(t, strings.Replace(src, `column = "GeneratedTokens"`, `column = "Generated"`, 1))
	assert.ErrorContains(t, err, `model[1].output_tokens: `)
	assert.ErrorContains(t, err, `no column "Generated"`)
}

// Explicit zeros, negatives and out-of-range numbers are errors naming their key, never
// silent defaults; values set on the command line are blamed on the override.
func TestNoSilentDefaults(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"zero workers", "workers = 2", "workers = 0", "exp.toml:6: cluster.workers: must be positive, got 0"},
		{"negative seed", "seed = 11", "seed = -1", "exp.toml:2: seed: must not be negative, got -1"},
		{"zero max_num_seqs", "workers = 2", "workers = 2\n[engine]\nmax_num_seqs = 0", "exp.toml:8: engine.max_num_seqs: must be positive, got 0"},
		{"negative skew", "routing = { skew = 4 }", "routing = { skew = -1 }", "exp.toml:32: workload.routing.skew: must be in [0, 1e+09], got -1"},
		{"one option", "votes = { options = 4,", "votes = { options = 1,", "exp.toml:33: workload.votes.options: must be in [2, 26]"},
		{"negative template", "experts_per_query = 2", "experts_per_query = 2\ntemplate_tokens = -5", "exp.toml:32: workload.template_tokens: must be in [0, 1e+06], got -5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, moa, tc.from)
			_, err := resolve(t, strings.Replace(moa, tc.from, tc.to, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	e, err := experiments.Parse("exp.toml", []byte(moa))
	require.NoError(t, err)
	require.NoError(t, e.Set("workload.queries=-3"))
	_, err = e.Resolve()
	assert.EqualError(t, err, "--set workload.queries: must be positive without a question list, got -3")
	assert.ErrorContains(t, e.Set("model.arch=x"), `"model" is a list: name an element, e.g. model[0]`)
}

// The answer model per vote pattern and Symbolic-MoE routing, through the experiment file.
func TestPatternAnswersAndKeywordRouting(t *testing.T) {
	src := strings.Replace(moa, "routing = { skew = 4 }", `routing = { method = "symbolic-moe", validation = 120 }`, 1)
	src = strings.Replace(src, `aggregator = { model = "R", accuracy = 0.4 }`,
		`aggregator = { model = "R", rescue_majority = 0.1, fit_accuracy_change = { t1 = 0.5, t2_3 = 0.5 } }`, 1)
	src = strings.Replace(src, `votes = { options = 4, error_correlation = 0.5 }`, `votes = { options = 4, error_correlation = 0.5, unanimous = 0.55 }`, 1)
	r, err := resolve(t, src)
	require.NoError(t, err)
	s := traces.Stats(r.Graph.Workload)
	assert.Greater(t, s.SelectionRatio, 1.0)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, run.Summaries, 2)

	for _, tc := range []struct{ name, from, to, want string }{
		{"patterns with the simple model", "rescue_majority = 0.1", "rescue_majority = 0.1, keep_majority = 0.9",
			"workload.aggregator.rescue_majority: cannot be combined with workload.aggregator.keep_majority"},
		{"pattern out of range", "rescue_majority = 0.1", "rescue_majority = 1.1", "workload.aggregator.rescue_majority: must be in [0, 1], got 1.1"},
		{"half a fit", "t1 = 0.5, t2_3 = 0.5", "t1 = 0.5", "workload.aggregator.fit_accuracy_change: needs both t1 and t2_3"},
		{"unreachable fit", "t1 = 0.5, t2_3 = 0.5", "t1 = 95, t2_3 = 95", "the accuracy change at T = 1"},
		{"skew with symbolic-moe", "validation = 120 }", "validation = 120, skew = 3 }", `workload.routing.skew: does not apply to method = "symbolic-moe"`},
		{"no validation set", `method = "symbolic-moe", validation = 120`, `method = "symbolic-moe"`, "workload.routing.validation: missing"},
		{"keyword key without the method", `method = "symbolic-moe", validation = 120`, `validation = 120`, `workload.routing.validation: is a key of method = "symbolic-moe" routing`},
		{"unknown method", `method = "symbolic-moe"`, `method = "oracle"`, `workload.routing.method: unknown routing method "oracle"`},
		{"bad shared", "validation = 120 }", "validation = 120, shared = 2 }", "workload.routing.shared: must be a probability in [0, 1], got 2"},
		{"unknown category", "accuracy = 0.6\n", "accuracy = 0.6\naccuracy_by_category = { law = 0.3 }\n", `model[0].accuracy_by_category: "law" is not a category of the workload's questions (they have: general)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, src, tc.from)
			_, err := resolve(t, strings.Replace(src, tc.from, tc.to, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Lognormal lengths by median and sigma or mean and sigma, with a cap spike; bad combinations
// name their key.
func TestLogNormalKeys(t *testing.T) {
	from := `output_tokens = { dist = "lognormal", mean = 100, p99 = 600, max = 2048 }
accuracy = 0.5

[[model]]
name = "I2"`
	with := func(dist string) string {
		require.Contains(t, moa, from)
		return strings.Replace(moa, from, "output_tokens = "+dist+"\naccuracy = 0.5\n\n[[model]]\nname = \"I2\"", 1)
	}
	r, err := resolve(t, with(`{ dist = "lognormal", median = 81, sigma = 0.745, cap_share = 0.02, max = 2048 }`))
	require.NoError(t, err)
	l := r.Models[1].Output.(*traces.LogNormal)
	assert.InDelta(t, math.Log(81), l.Mu, 1e-12)
	assert.Equal(t, 0.02, l.CapShare)
	r, err = resolve(t, with(`{ dist = "lognormal", mean = 100, sigma = 0.8, max = 2048 }`))
	require.NoError(t, err)
	assert.InDelta(t, 100, r.Models[1].Output.Mean(), 1e-9)
	for _, tc := range []struct{ dist, want string }{
		{`{ dist = "lognormal", mean = 100, p99 = 600, sigma = 0.8, max = 2048 }`, "model[1].output_tokens.p99: give a lognormal by mean and p99, or by sigma"},
		{`{ dist = "lognormal", median = 80, max = 2048 }`, "model[1].output_tokens.median: needs sigma"},
		{`{ dist = "lognormal", mean = 100, median = 80, sigma = 0.8, max = 2048 }`, "model[1].output_tokens.median: give sigma with either mean or median"},
		{`{ dist = "lognormal", median = 80, sigma = 0.8, cap_share = 1.5, max = 2048 }`, "cap share must be in [0, 1)"},
		{`{ dist = "fixed", value = 80, sigma = 0.8 }`, "model[1].output_tokens.sigma: only a lognormal distribution takes sigma"},
	} {
		_, err := resolve(t, with(tc.dist))
		require.Error(t, err, tc.dist)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// Model loads can be set: weight bytes / load_gbps + startup_s.
func TestLoadTimeKeys(t *testing.T) {
	r, err := resolve(t, moa+"\n[engine]\nload_gbps = 1\nstartup_s = 60\n")
	require.NoError(t, err)
	m := r.Models[0]
	assert.InDelta(t, m.Cost.Model.WeightBytes()/1e9+60, m.Cost.LoadTime().Seconds(), 1e-6)
	_, err = resolve(t, moa+"\n[engine]\nload_gbps = 0\n")
	assert.ErrorContains(t, err, "engine.load_gbps: must be positive, got 0")
	_, err = resolve(t, moa+"\n[engine]\nstartup_s = -1\n")
	assert.ErrorContains(t, err, "engine.startup_s: must not be negative, got -1")
}

// A policy's early_exit: cancelled calls in the summary and calls.csv, and clear key errors.
func TestEarlyExitKey(t *testing.T) {
	src := strings.Replace(moa, "[[policy]]\nname = \"data-parallel\"\n", "[[policy]]\nname = \"data-parallel\"\nearly_exit = { agreement = 1.0 }\n", 1)
	src = strings.Replace(src, "experts_per_query = 2", "experts_per_query = 3", 1)
	run := simulate(t, src)
	require.Len(t, run.Summaries, 2)
	dp := run.Summaries[1]
	assert.Equal(t, "skip C>=1, exit a=1 n=2", dp.Rule)
	assert.Positive(t, dp.CancelledCalls)
	cancelled := 0
	for _, c := range experiments.CallRows(run.Results) {
		if c.Status == "cancelled" {
			cancelled++
			assert.Equal(t, "data-parallel", c.Policy)
		}
	}
	assert.Equal(t, dp.CancelledCalls, cancelled)
	for _, tc := range []struct{ from, to, want string }{
		{"early_exit = { agreement = 1.0 }", "early_exit = { min_finished = 2 }", "policy[1].early_exit.agreement: missing"},
		{"early_exit = { agreement = 1.0 }", "early_exit = { agreement = 1.5 }", "policy[1].early_exit.agreement: early exit: agreement must be in (0, 1], got 1.5"},
		{"early_exit = { agreement = 1.0 }", "early_exit = { agreement = 1.0, min_finished = 0 }", "policy[1].early_exit.min_finished: early exit: min_finished must be at least 1"},
	} {
		_, err := resolve(t, strings.Replace(src, tc.from, tc.to, 1))
		assert.ErrorContains(t, err, tc.want)
	}
}

// Every registered policy is described for `mosaic catalog policies`.
func TestPoliciesDocumented(t *testing.T) {
	docs := experiments.Policies()
	require.NotEmpty(t, docs)
	for _, d := range docs {
		assert.NotEmpty(t, d.Summary, d.Name)
	}
}
