package experiments_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// Every example experiment resolves and its policies complete a small run of it.
func TestExamplesRun(t *testing.T) {
	if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the example experiments", dataset.Env)
	}
	files, err := filepath.Glob("examples/*.toml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 6)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			e, err := experiments.Load(f)
			require.NoError(t, err)
			if e.Workload.Kind != "" && e.Workload.Kind != "batch" && e.Workload.Answers == "" && e.Workload.Trace == "" {
				require.NoError(t, e.Set("workload.queries=40"))
			}
			r, err := e.Resolve()
			require.NoError(t, err)
			if r.Graph == nil {
				_, err := r.RunBatch()
				require.NoError(t, err)
				return
			}
			run, err := r.Simulate(context.Background(), nil)
			require.NoError(t, err)
			for _, s := range run.Summaries {
				assert.Equal(t, len(r.Graph.Workload.Queries), s.Queries, s.Policy)
				assert.Positive(t, s.E2ES, s.Policy)
			}
		})
	}
}

// The shapes the kinds generate from the example files.
func TestGraphKinds(t *testing.T) {
	if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the example experiments", dataset.Env)
	}
	for _, tc := range []struct {
		file           string
		calls, layers  int
		gated, tools   int
		online, answer bool
	}{
		{"examples/layered-moa.toml", 19, 4, 0, 0, false, false},
		{"examples/tree-moa.toml", 13, 3, 1, 0, false, true},
		{"examples/agent-dag.toml", 11, 5, 0, 4, true, false},
		{"examples/online-moa.toml", 4, 2, 1, 0, true, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			e, err := experiments.Load(tc.file)
			require.NoError(t, err)
			require.NoError(t, e.Set("workload.queries=30"))
			r, err := e.Resolve()
			require.NoError(t, err)
			wl := r.Graph.Workload
			assert.Equal(t, tc.layers, wl.Layers())
			q := wl.Queries[len(wl.Queries)-1]
			assert.Len(t, q.Calls, tc.calls)
			gated, tools := 0, 0
			for _, c := range q.Calls {
				if c.Gate {
					gated++
				}
				if c.IsTool() {
					tools++
				}
			}
			assert.Equal(t, tc.gated, gated)
			assert.Equal(t, tc.tools, tools)
			assert.Equal(t, tc.online, q.Arrival > 0)
			assert.Equal(t, tc.answer, q.Gold != "")
		})
	}
}

const layered = `name = "l"
[cluster]
gpu = "A100-80GB"
workers = 2
[[model]]
name = "A"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 100 }
[[model]]
name = "B"
arch = "qwen2.5-7b"
output_tokens = { dist = "fixed", value = 50 }
[workload]
kind = "layered"
queries = 20
prompt_tokens = { dist = "fixed", value = 40 }
layers = 2
proposers = ["A", "B"]
aggregator = { model = "A" }
[[policy]]
name = "round-robin"
`

// A key of another kind, or of a table the kind does not use, is an error naming the key and
// its line; so are the kinds' own bad values.
func TestGraphKindErrors(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"moa key in layered", `layers = 2`, "layers = 2\nexperts_per_query = 3", `exp.toml:18: workload.experts_per_query: does not apply to workload kind "layered"`},
		{"calibration target in layered", `layers = 2`, "layers = 2\nvotes = { unanimous = 0.4 }", `exp.toml:18: workload.votes.unanimous: does not apply to workload kind "layered" (its votes keys: options, error_correlation, difficulty)`},
		{"tree key in layered", `layers = 2`, "layers = 2\nshape = [2, 1]", `exp.toml:18: workload.shape: does not apply`},
		{"no layers", `layers = 2`, `layers = 0`, `exp.toml:17: workload.layers: must be at least 1`},
		{"unknown proposer", `proposers = ["A", "B"]`, `proposers = ["A", "C"]`, `exp.toml:18: workload.proposers: model "C" is not a [[model]] of the experiment`},
		{"unknown gate", `layers = 2`, "layers = 2\ngate = \"some\"", `exp.toml:18: workload.gate: unknown gate "some" (known: final, all, none)`},
		{"tree", "kind = \"layered\"", "kind = \"tree\"", `exp.toml:17: workload.layers: does not apply to workload kind "tree"`},
		{"cv without gamma", `layers = 2`, "layers = 2\narrival_rate = 1\narrival_cv = 2", `exp.toml:19: workload.arrival_cv: applies to gamma arrivals only`},
		{"gamma without cv", `layers = 2`, "layers = 2\narrival_rate = 1\narrival_process = \"gamma\"", `workload.arrival_cv: gamma arrivals need the gaps' coefficient of variation`},
		{"unknown process", `layers = 2`, "layers = 2\narrival_rate = 1\narrival_process = \"bursty\"", `exp.toml:19: workload.arrival_process: unknown arrival process "bursty"`},
		{"bare-number SLO", "[[policy]]", "[slo]\ne2e = 30\n[[policy]]", `exp.toml:21: slo.e2e: 30ns is too short; write a duration with its unit`},
		{"online option on round-robin", `name = "round-robin"`, "name = \"round-robin\"\nonline.replan = \"30s\"", `exp.toml:22: policy[0].online.replan: options of the online policy in a [[policy]] of round-robin (it takes none besides the common ones)`},
		{"online options table on round-robin", `name = "round-robin"`, "name = \"round-robin\"\n[policy.online]\nmax_in_flight = 8", `exp.toml:22: policy[0].online: options of the online policy in a [[policy]] of round-robin`},
		{"policy option outside its table", `name = "round-robin"`, "name = \"round-robin\"\nreplan = \"30s\"", `exp.toml:22: policy[0].replan: unknown key: a policy's own options go in its options table: write online.replan`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, layered, tc.from)
			_, err := resolve(t, strings.Replace(layered, tc.from, tc.to, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := resolve(t, layered)
	require.NoError(t, err)
}

const dag = `name = "d"
[cluster]
gpu = "A100-80GB"
workers = 2
[[model]]
name = "A"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 100 }
[workload]
kind = "dag"
queries = 10
prompt_tokens = { dist = "fixed", value = 40 }
[[workload.node]]
name = "plan"
model = "A"
[[workload.node]]
name = "search"
tool_ms = { dist = "fixed", value = 500 }
count = 3
inputs = ["plan"]
[[workload.node]]
name = "read"
model = "A"
count = 3
inputs = ["search"]
[[workload.node]]
name = "join"
model = "A"
inputs = ["read", "plan"]
[[policy]]
name = "online"
`

// A dag template: fan-out copies, a map over a fan-out, a fan-in, tool steps.
func TestDAGWorkload(t *testing.T) {
	r, err := resolve(t, dag)
	require.NoError(t, err)
	q := r.Graph.Workload.Queries[0]
	require.Len(t, q.Calls, 8)
	assert.True(t, q.Calls[1].IsTool())
	assert.Equal(t, []traces.Input{{From: 1}}, q.Calls[4].Inputs, "read #1 reads search #1")
	assert.Equal(t, []traces.Input{{From: 3}}, q.Calls[6].Inputs, "read #3 reads search #3")
	assert.Len(t, q.Calls[7].Inputs, 4, "join reads every read and the plan")
	assert.Equal(t, 3, q.Calls[7].Layer)
	assert.Equal(t, 40+300+100, q.Calls[7].InputTokens, "question, three summaries, the plan")
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	tools := 0
	for _, c := range run.Results[0].Calls {
		if c.Call.IsTool() {
			tools++
			assert.Equal(t, -1, int(c.Worker))
		}
	}
	assert.Equal(t, 30, tools)

	for _, tc := range []struct {
		from, to, want string
	}{
		{`inputs = ["plan"]`, `inputs = ["read"]`, `exp.toml:20: workload.node[1].inputs: node "search" reads "read", which is not an earlier node`},
		{"name = \"search\"\ntool_ms", "name = \"plan\"\ntool_ms", `exp.toml:17: workload.node[1].name: node "plan" is defined twice`},
		{"count = 3\ninputs = [\"plan\"]", "count = 3\ninputs = [\"plan\"]\ntemplate_tokens = 5", `exp.toml:21: workload.node[1].template_tokens: does not apply to a tool step`},
		{"name = \"join\"\nmodel = \"A\"", "name = \"join\"", `workload.node[3].model: missing: node "join" needs a model (an LLM call) or tool_ms (a tool step)`},
		{"count = 3\ninputs = [\"search\"]", "count = 0\ninputs = [\"search\"]", `workload.node[2].count: must be in [1, 1024] copies, got 0`},
	} {
		require.Contains(t, dag, tc.from)
		_, err := resolve(t, strings.Replace(dag, tc.from, tc.to, 1))
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// A MoA experiment with an arrival rate serves its queries online: they arrive over time and
// queries.csv carries their arrivals and latencies.
func TestOnlineMoA(t *testing.T) {
	src := strings.Replace(moa, "queries = 60", "queries = 60\narrival_rate = 0.5", 1)
	r, err := resolve(t, src)
	require.NoError(t, err)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, run.WriteDir(dir, experiments.RunInfo{}, experiments.HostInfo{}))
	rows, err := results.ReadQueriesCSV(filepath.Join(dir, "queries.csv"))
	require.NoError(t, err)
	require.Len(t, rows, 60*len(run.Results))
	last := 0.0
	for _, q := range rows[:60] {
		assert.Positive(t, q.ArrivalS)
		assert.GreaterOrEqual(t, q.ArrivalS, last)
		assert.InDelta(t, q.EndS-q.ArrivalS, q.LatencyS, 1e-5)
		assert.LessOrEqual(t, q.TTFTS, q.LatencyS+1e-6)
		assert.LessOrEqual(t, q.QueueS, q.LatencyS+1e-6)
		last = q.ArrivalS
	}
	assert.InDelta(t, 60/0.5, last, 40, "60 Poisson arrivals at 0.5/s span about 120 s")
	s := run.Summaries[0]
	assert.Positive(t, s.P99E2ELS)
	assert.GreaterOrEqual(t, s.P99E2ELS, s.MedianE2ELS)
}

// A workload file whose graph has a cycle fails with the file's line.
func TestTraceWithCycle(t *testing.T) {
	dir := t.TempDir()
	good := `{"v":2,"id":0,"calls":[{"model":"R","prompt_tokens":5,"output_tokens":7}]}`
	cyclic := `{"v":2,"id":1,"calls":[{"model":"R","prompt_tokens":5,"output_tokens":7,"inputs":[{"from":1,"tokens":1}]},{"model":"R","prompt_tokens":5,"output_tokens":7,"inputs":[{"from":0,"tokens":1}]}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "w.jsonl"), []byte(good+"\n"+cyclic+"\n"), 0o644))
	src := strings.Replace(moa, "queries = 60\nprompt_tokens = { dist = \"uniform\", min = 50, max = 300 }\nexperts_per_query = 2\nrouting = { skew = 4 }\nvotes = { options = 4, error_correlation = 0.5 }\naggregator = { model = \"R\", accuracy = 0.4 }", "trace = \"w.jsonl\"", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exp.toml"), []byte(src), 0o644))
	e, err := experiments.Load(filepath.Join(dir, "exp.toml"))
	require.NoError(t, err)
	_, err = e.Resolve()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "w.jsonl:2: calls[0].inputs: calls 0 -> 1 -> 0 form a cycle")
}
