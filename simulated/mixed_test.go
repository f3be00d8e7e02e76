package simulated_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// mixedHardware is the mixed cluster of these tests: w0 and w1 are A100-80GB GPUs, w2 a
// tensor-parallel pair of H100-80GB GPUs.
var mixedHardware = []struct {
	gpu string
	tp  int
}{{"A100-80GB", 1}, {"A100-80GB", 1}, {"H100-80GB", 2}}

// mixedSetup builds models M0..Mn-1 (Llama-3-8B, which runs on every worker) and Big
// (Llama-3-70B, which only the H100 pair can hold), each with its cost model and engine on
// every worker of mixedHardware.
func mixedSetup(t *testing.T, n int) ([]policies.ModelInfo, []simulated.WorkerSetup) {
	t.Helper()
	cat := sim.DefaultCatalog()
	W := len(mixedHardware)
	perWorker := make([]simulated.WorkerSetup, W)
	for w := range perWorker {
		perWorker[w] = simulated.WorkerSetup{}
	}
	var infos []policies.ModelInfo
	add := func(name, archName string, util float64, out traces.LengthDist) {
		arch, err := cat.Model(archName)
		require.NoError(t, err)
		info := policies.ModelInfo{Name: name, Arch: arch, Memory: util, Output: out, Workers: make([]policies.WorkerCost, W)}
		for w, hw := range mixedHardware {
			g, err := cat.GPU(hw.gpu)
			require.NoError(t, err)
			cm, err := sim.NewCostModel(arch, g, sim.DefaultProfile().For(g), sim.WithTP(hw.tp))
			require.NoError(t, err)
			label := hw.gpu
			if hw.tp > 1 {
				label = fmt.Sprintf("%s x%d", hw.gpu, hw.tp)
			}
			blocks, err := cm.KVBlocks(util, 8192, 16)
			if err != nil {
				info.Workers[w] = policies.WorkerCost{Hardware: label, Unfit: err.Error()}
				perWorker[w][name] = simulated.ModelSetup{Unfit: err.Error()}
				continue
			}
			ec := sim.EngineConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, ChunkedPrefill: true, BlockSize: 16, NumBlocks: blocks, WatermarkBlocks: blocks / 100}
			info.Workers[w] = policies.WorkerCost{Hardware: label, Cost: cm, Engine: ec, LoadTime: cm.LoadTime()}
			perWorker[w][name] = simulated.ModelSetup{Cost: cm, Engine: ec}
			if info.Cost == nil {
				info.Cost, info.Engine, info.LoadTime = cm, ec, cm.LoadTime()
			}
		}
		infos = append(infos, info)
	}
	out, err := traces.NewLogNormal(300, 2000, 1, 4000)
	require.NoError(t, err)
	for i := range n {
		add(fmt.Sprintf("M%d", i), "llama-3-8b", 0.9, out)
	}
	add("Big", "llama-3-70b", 0.95, traces.Fixed(200))
	return infos, perWorker
}

// mixedWorkload is k experts of M0..M(models-1) per query and a gated aggregator of Big.
func mixedWorkload(queries, k, models int) *traces.Workload {
	wl := &traces.Workload{Name: "mixed"}
	for q := range queries {
		qu := traces.Query{ID: q, Gold: "A"}
		var inputs []traces.Input
		for i := range k {
			ans := "A"
			if q%3 != 0 && i == 0 {
				ans = "B"
			}
			qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleExpert, Model: fmt.Sprintf("M%d", (q+i)%models),
				PromptTokens: 100, OutputTokens: 100 + (q*37+i*11)%500, Answer: ans})
			inputs = append(inputs, traces.Input{From: i, Tokens: 50})
		}
		qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleAggregator, Model: "Big", PromptTokens: 100, Inputs: inputs,
			OutputTokens: 200, Answer: "A", Gate: true})
		wl.Queries = append(wl.Queries, qu)
	}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

func runMixed(t *testing.T, p policies.Policy, wl *traces.Workload, models int) *policies.Result {
	t.Helper()
	infos, perWorker := mixedSetup(t, models)
	cl, err := simulated.New(simulated.Config{Workers: perWorker, UnloadTime: time.Second})
	require.NoError(t, err)
	rule := policies.ConfidenceSkip{Threshold: 1}
	d, err := policies.NewDriver(cl, p, rule, wl, infos, len(perWorker))
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err, p.Name())
	checkInvariants(t, res, wl, rule)
	return res
}

// Every policy completes on a mixed cluster, never loads the 70B model on a GPU that cannot
// hold it, and serves its calls on the H100 pair only.
func TestPoliciesOnMixedCluster(t *testing.T) {
	wl := mixedWorkload(60, 3, 4)
	for _, p := range []policies.Policy{roundrobin.New(), dataparallel.New(), placement.New(placement.Options{}), placement.New(placement.Options{Pipeline: true}), online.New(online.Options{})} {
		t.Run(p.Name(), func(t *testing.T) {
			res := runMixed(t, p, wl, 4)
			for _, l := range res.Loads {
				if l.Model == "Big" {
					assert.Equal(t, policies.WorkerID(2), l.Worker, "Big loaded on worker %d", l.Worker)
				}
			}
			big := 0
			for _, c := range res.Calls {
				if c.Call.Model == "Big" {
					big++
					assert.Equal(t, policies.WorkerID(2), c.Worker, "call %d", c.Call.ID)
				}
			}
			assert.Positive(t, big)
			if dp, ok := p.(*dataparallel.Policy); ok {
				assert.Equal(t, []policies.WorkerID{0, 1}, dp.Skipped()["Big"], "data-parallel says which workers skip Big")
				assert.Empty(t, dp.Skipped()["M0"])
			}
		})
	}
}

// Each worker serves with its own cost model: the same calls finish sooner on the H100 pair
// than on an A100, and a model a worker cannot hold cannot be loaded there.
func TestPerWorkerCosts(t *testing.T) {
	_, perWorker := mixedSetup(t, 1)
	cl, err := simulated.New(simulated.Config{Workers: perWorker, UnloadTime: time.Second})
	require.NoError(t, err)
	err = cl.Load(0, "Big")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster: model Big cannot run on worker 0: model meta-llama/Meta-Llama-3-70B (131.4 GiB of weights) does not fit on A100-80GB")
	assert.ErrorContains(t, cl.Load(1, "Nope"), `cluster: model "Nope" cannot run on worker 1`)
	require.NoError(t, cl.Load(0, "M0"))
	require.NoError(t, cl.Load(2, "M0"))
	loaded := map[policies.WorkerID]time.Duration{}
	for len(loaded) < 2 {
		ev, err := cl.Next(context.Background())
		require.NoError(t, err)
		require.Equal(t, policies.EventLoaded, ev.Kind)
		loaded[ev.Worker] = ev.At
	}
	start := max(loaded[0], loaded[2])
	cl.WakeAt(start)
	for {
		ev, err := cl.Next(context.Background())
		require.NoError(t, err)
		if ev.Kind == policies.EventTimer {
			break
		}
	}
	for i, w := range []policies.WorkerID{0, 2} {
		for j := range 32 {
			c := &traces.Call{ID: i*100 + j, Model: "M0", InputTokens: 512, OutputTokens: 256}
			require.NoError(t, cl.Submit(w, c, 0))
		}
	}
	end := map[policies.WorkerID]time.Duration{}
	for range 64 {
		ev, err := cl.Next(context.Background())
		require.NoError(t, err)
		require.Equal(t, policies.EventDone, ev.Kind)
		end[ev.Worker] = max(end[ev.Worker], ev.At)
	}
	a100, h100 := (end[0] - start).Seconds(), (end[2] - start).Seconds()
	t.Logf("32 calls of Llama-3-8B: %.2f s on an A100-80GB, %.2f s on a TP-2 pair of H100-80GB", a100, h100)
	assert.Less(t, h100, 0.75*a100, "the H100 pair is faster")
	// The slowdown is the cost models', nothing else: each worker's own predicts it. The same
	// 32 calls served alone by an engine with the worker's cost model and engine take as long
	// as the worker took.
	for _, w := range []policies.WorkerID{0, 2} {
		s := perWorker[w]["M0"]
		eng, err := sim.NewEngine(s.Engine, s.Cost)
		require.NoError(t, err)
		reqs := make([]sim.Arrival, 32)
		for j := range reqs {
			reqs[j] = sim.Arrival{Request: sim.Request{ID: uint64(j), PromptTokens: 512, OutputTokens: 256}}
		}
		alone, err := sim.Serve(eng, reqs)
		require.NoError(t, err)
		assert.InDelta(t, alone.Makespan.Seconds(), (end[w] - start).Seconds(), 1e-3, "worker %d (%s)", w, mixedHardware[w].gpu)
	}
	_, perWorker = mixedSetup(t, 1)
	assert.Equal(t, perWorker[0]["M0"].Cost, perWorker[1]["M0"].Cost)
	assert.Greater(t, perWorker[2]["M0"].Engine.NumBlocks, perWorker[0]["M0"].Engine.NumBlocks, "two GPUs hold a larger KV cache")
}

// The policies see a worker's facts through ModelInfo: the hardware, the costs, whether it
// can run the model.
func TestModelInfoPerWorker(t *testing.T) {
	infos, _ := mixedSetup(t, 1)
	m0, big := infos[0], infos[1]
	assert.False(t, m0.Alike(), "M0 runs faster on the H100 pair")
	assert.Equal(t, "H100-80GB x2", m0.On(2).Hardware)
	assert.Equal(t, []policies.WorkerID{0, 1, 2}, m0.Runnable(3))
	assert.Equal(t, []policies.WorkerID{2}, big.Runnable(3))
	assert.False(t, big.CanRun(0))
	assert.False(t, big.CanRun(3), "no worker 3")
	assert.Contains(t, big.On(0).Unfit, "does not fit on A100-80GB")
	assert.Same(t, big.Cost, big.On(2).Cost, "the model-wide cost is the first worker's that can run it")
	assert.Less(t, m0.On(2).LoadTime, m0.On(0).LoadTime+time.Nanosecond)
	at2 := m0.At(2)
	assert.Same(t, m0.On(2).Cost, at2.Cost, "At gives the worker's costs ...")
	assert.Equal(t, m0.On(2).Engine, at2.Engine)
	assert.Equal(t, m0.Workers, at2.Workers, "... and keeps every worker's")
	uniform := policies.ModelInfo{Name: "U", Memory: 0.5, Cost: m0.Cost, Engine: m0.Engine, LoadTime: time.Second}.OnEvery(8, "A100-80GB")
	assert.Equal(t, uniform, uniform.At(3), "on identical workers each worker's costs are the model's")
	assert.True(t, uniform.CanRun(7), "a uniform cluster's model runs on every worker")
	assert.False(t, uniform.CanRun(8), "no worker 8")
	assert.True(t, uniform.Alike())
	assert.True(t, slices.Equal([]policies.WorkerID{0, 1, 2, 3, 4, 5, 6, 7}, uniform.Runnable(8)))
}
