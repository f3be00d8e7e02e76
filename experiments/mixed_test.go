package experiments_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/sim"
)

// mixedExperiment is a small layered MoA on the cluster the groups describe: proposers M and N
// (Llama-3-8B), and aggregator A of arch agg.
func mixedExperiment(groups, agg string) string {
	return `name = "mixed"
seed = 2
` + groups + `
[[model]]
name = "M"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 512 }

[[model]]
name = "N"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 512 }

[[model]]
name = "A"
arch = "` + agg + `"
gpu_memory_utilization = 0.95
output_tokens = { dist = "fixed", value = 64 }

[workload]
kind = "layered"
queries = 400
prompt_tokens = { dist = "fixed", value = 200 }
layers = 1
proposers = ["M", "N"]
gate = "none"

[workload.aggregator]
model = "A"

[[policy]]
name = "round-robin"

[[policy]]
name = "mosaic"
`
}

const aPlusH = `
[[cluster.group]]
gpu = "A100-80GB"
count = 1

[[cluster.group]]
gpu = "H100-80GB"
count = 1
`

// twoAPlusHPair is 2 x A100-80GB and 2 x H100-80GB joined into one TP-2 worker.
const twoAPlusHPair = `
[[cluster.group]]
gpu = "A100-80GB"
count = 2

[[cluster.group]]
gpu = "H100-80GB"
count = 2
tp = 2
`

// Groups count GPUs and join them into workers of tp GPUs: 2 A100s and 2 H100s at TP 2 are
// three workers, w2 being GPUs 2 and 3. A 70B model fits only the pair, and each worker runs
// a model with its own GPUs' costs.
func TestMixedClusterResolves(t *testing.T) {
	r, err := resolve(t, mixedExperiment(twoAPlusHPair, "llama-3-70b"))
	require.NoError(t, err)
	assert.True(t, r.Mixed())
	assert.Equal(t, 3, r.NumWorkers())
	assert.Equal(t, 4, r.NumGPUs())
	assert.Equal(t, []string{"A100-80GB", "A100-80GB", "H100-80GB x2"}, r.Hardware())
	assert.Equal(t, []int{0}, r.GPUsOf(0))
	assert.Equal(t, []int{1}, r.GPUsOf(1))
	assert.Equal(t, []int{2, 3}, r.GPUsOf(2))
	assert.Equal(t, "mixed: 2 x A100-80GB + 1 x (2 x H100-80GB, tensor-parallel)", r.String())

	infos := r.ModelInfos()
	require.Len(t, infos, 3)
	m, a := infos[0], infos[2]
	require.Len(t, m.Workers, 3)
	for w := range 3 {
		assert.Empty(t, m.Workers[w].Unfit, "Llama-3-8B runs on every worker")
	}
	assert.Equal(t, 2, m.Workers[2].Cost.TP)
	assert.Contains(t, a.Workers[0].Unfit, "does not fit on A100-80GB")
	assert.Contains(t, a.Workers[1].Unfit, "does not fit on A100-80GB")
	require.NotNil(t, a.Workers[2].Cost)
	assert.Equal(t, 2, a.Workers[2].Cost.TP)
	// A decode step of 32 sequences at 1,000 tokens of context: the H100 pair reads half the
	// weights per GPU at 3,350 GB/s against the A100's 2,039 GB/s, so it is faster; the two
	// A100s are alike.
	decode := sim.Batch{Tokens: 32, AttentionPairs: 32 * 1000, KVTokens: 32 * 1000, Seqs: 32, Sampled: 32}
	step := func(w int) float64 { return m.Workers[w].Cost.IterationSeconds(decode) }
	assert.Equal(t, step(0), step(1))
	assert.Less(t, step(2), step(0)/1.5)

	var b bytes.Buffer
	require.NoError(t, r.WriteWorkers(&b))
	assert.Equal(t, `workers (GPUs numbered group by group):
  w0   GPU 0        A100-80GB
  w1   GPU 1        A100-80GB
  w2   GPUs 2,3     H100-80GB x2, tensor-parallel group (TP 2)
`, b.String())
}

// Hand-checked: one A100-80GB and one H100-80GB serve 800 calls of one Llama-3-8B. On two
// A100s the ILP splits them evenly; here the H100 serves a call in less time (its curve lies
// below the A100's), so the plan gives it more calls, in the ratio that equalises the two
// finish times: x_H / x_A = t_A / t_H, the per-call times read from the two workers' curves.
func TestMixedPlanLoadsTheFasterGPU(t *testing.T) {
	if !solver.ILPAvailable {
		t.Skip("built without lp_solve")
	}
	single := func(groups string) string {
		src := mixedExperiment(groups, "llama-3-8b")
		src = strings.Replace(src, `proposers = ["M", "N"]`, `proposers = ["M"]`, 1)
		return strings.Replace(src, "queries = 400", "queries = 800", 1)
	}
	r, err := resolve(t, single(aPlusH))
	require.NoError(t, err)
	plans, err := r.PlanPreview(context.Background(), "mosaic")
	require.NoError(t, err)
	ex := plans[0]
	require.NotNil(t, ex)
	require.Len(t, ex.Problem.Items, 1)
	it := ex.Problem.Items[0]
	require.NotNil(t, it.OnWorker, "per-worker costs reach the solver")
	x := ex.Plan.Counts[0]
	require.Equal(t, 800, x[0]+x[1])
	perCall := func(w int) float64 { return it.OnWorker[w].Curve.At(x[w]) / float64(x[w]) }
	speed := perCall(0) / perCall(1)
	assert.Greater(t, speed, 1.3, "the H100 serves Llama-3-8B faster than the A100")
	assert.Greater(t, x[1], x[0], "more calls on the faster GPU: %v", x)
	// Both load the model (the same time: the load bandwidth is the profile's), so equal finish
	// times mean equal serving times: x_H t_H = x_A t_A.
	assert.Equal(t, it.OnWorker[0].Load, it.OnWorker[1].Load)
	wt := ex.Plan.WorkerTime
	assert.InEpsilon(t, wt[0], wt[1], 0.02, "finish times %v", wt)
	assert.InEpsilon(t, speed, float64(x[1])/float64(x[0]), 0.02, "calls in the ratio of the speeds: %v", x)

	// The same experiment on two A100s splits evenly.
	u, err := resolve(t, single(strings.Replace(aPlusH, `gpu = "H100-80GB"`, `gpu = "A100-80GB"`, 1)))
	require.NoError(t, err)
	up, err := u.PlanPreview(context.Background(), "mosaic")
	require.NoError(t, err)
	assert.Equal(t, []int{400, 400}, up[0].Plan.Counts[0])
	t.Logf("A100 + H100: %v calls, finish %v, speed ratio %.3f; A100 + A100: %v", x, wt, speed, up[0].Plan.Counts[0])
}

// Every policy runs on the mixed cluster; the 70B aggregator only ever runs on the H100 pair.
func TestMixedClusterSimulates(t *testing.T) {
	src := mixedExperiment(twoAPlusHPair, "llama-3-70b")
	src = strings.Replace(src, "queries = 400", "queries = 60", 1) + `
[[policy]]
name = "data-parallel"

[[policy]]
name = "online"
`
	r, err := resolve(t, src)
	require.NoError(t, err)
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, run.Results, 4)
	for _, res := range run.Results {
		n := 0
		for _, c := range res.Calls {
			if c.Call.Model == "A" {
				assert.EqualValues(t, 2, c.Worker, "%s: the 70B aggregator on the H100 pair", res.Policy)
				n++
			}
		}
		assert.Equal(t, 60, n, res.Policy)
		assert.Zero(t, res.Summary().FailedCalls, res.Policy)
	}
}

// The example experiment: the 70B aggregator's stage is planned on the TP-2 pair alone.
func TestMixedClusterExample(t *testing.T) {
	if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
		t.Skipf("shared data not found: set %s", dataset.Env)
	}
	if !solver.ILPAvailable {
		t.Skip("built without lp_solve")
	}
	e, err := experiments.Load("examples/mixed-cluster.toml")
	require.NoError(t, err)
	r, err := e.Resolve()
	require.NoError(t, err)
	assert.Equal(t, []string{"A100-80GB", "A100-80GB", "H100-80GB x2"}, r.Hardware())
	plans, err := r.PlanPreview(context.Background(), "mosaic")
	require.NoError(t, err)
	require.Len(t, plans, 2)
	ag := plans[1]
	require.NotNil(t, ag)
	assert.Equal(t, []int{0, 0, 805}, ag.Plan.Counts[0])
}

// A plan the ILP's time limit cut short is reported as the best found, with its bound and
// gap, never as an optimum.
func TestWritePlanTimeLimit(t *testing.T) {
	sp := &placement.StagePlan{
		Models:  []string{"M"},
		Problem: solver.Problem{Workers: 2, Items: []solver.Item{{Name: "M", Calls: 10, MaxReplicas: 2}}},
		Plan: &solver.Plan{Counts: [][]int{{4, 6}}, WorkerTime: []float64{12, 12.5}, Makespan: 12.5, ILPMakespan: 13,
			LowerBound: 10, Gap: 0.2, Status: solver.TimeLimit},
	}
	var b bytes.Buffer
	require.NoError(t, experiments.WritePlan(&b, sp, []string{"A100-80GB", "H100-80GB x2"}))
	out := b.String()
	assert.Contains(t, out, "w1 (H100-80GB x2)")
	assert.Contains(t, out, "predicted makespan 12.5 s, best found (time limit): not proved optimal")
	assert.Contains(t, out, "lower bound        10.0 s (work bound, for any split of the calls), gap 20.00%")
	assert.Contains(t, out, "solver             best found (time limit) in ")
	assert.NotContains(t, out, "optimum")
}

func TestMixedClusterErrors(t *testing.T) {
	group := func(body string) string { return "\n[[cluster.group]]\n" + body + "\n" }
	a100 := group(`gpu = "A100-80GB"` + "\ncount = 2")
	tests := []struct {
		name, src, want string
	}{
		{"unknown gpu", mixedExperiment(a100+group(`gpu = "B300"`+"\ncount = 2"), "llama-3-8b"),
			`exp.toml:9: cluster.group[1].gpu: unknown GPU "B300" (known: A100-40GB, `},
		{"missing gpu", mixedExperiment(a100+group("count = 2"), "llama-3-8b"),
			"exp.toml:8: cluster.group[1].gpu: missing: name a GPU from the catalog"},
		{"missing count", mixedExperiment(a100+group(`gpu = "H100-80GB"`), "llama-3-8b"),
			"cluster.group[1].count: missing: the number of GPUs of the group"},
		{"zero count", mixedExperiment(a100+group(`gpu = "H100-80GB"`+"\ncount = 0"), "llama-3-8b"),
			"exp.toml:10: cluster.group[1].count: must be positive, got 0"},
		{"tp not 1, 2, 4 or 8", mixedExperiment(a100+group(`gpu = "H100-80GB"`+"\ncount = 3\ntp = 3"), "llama-3-8b"),
			"exp.toml:11: cluster.group[1].tp: must be 1, 2, 4 or 8 GPUs per worker, got 3"},
		{"tp does not divide count", mixedExperiment(a100+group(`gpu = "H100-80GB"`+"\ncount = 2\ntp = 4"), "llama-3-8b"),
			"exp.toml:11: cluster.group[1].tp: 4 does not divide count = 2: the group's 2 GPUs form workers of tp GPUs each"},
		{"both forms", mixedExperiment("\n[cluster]\ngpu = \"A100-80GB\"\n"+a100, "llama-3-8b"),
			"exp.toml:5: cluster.gpu: give either [cluster] gpu, workers and tp (identical workers) or [[cluster.group]] tables (a mixed cluster), not both"},
		{"model fits no worker", mixedExperiment(aPlusH, "llama-3-70b"),
			"model[2].arch: meta-llama/Meta-Llama-3-70B runs on no worker of the cluster: cluster.group[0] (A100-80GB): model meta-llama/Meta-Llama-3-70B (131.4 GiB of weights) does not fit on A100-80GB"},
		{"group runs no model", strings.ReplaceAll(mixedExperiment(group(`gpu = "A100-40GB"`+"\ncount = 1")+group(`gpu = "H100-80GB"`+"\ncount = 2\ntp = 2"), "llama-3-70b"), "llama-3-8b", "llama-3-70b"),
			"exp.toml:4: cluster.group[0]: its workers (A100-40GB) can run none of the models: M: model meta-llama/Meta-Llama-3-70B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolve(t, tt.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
