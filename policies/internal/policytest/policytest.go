// Package policytest holds test helpers for the policies' tests: a recording fake Backend
// whose timing can be followed by hand, workload builders (a tiny hand-checkable MoA and a
// large generated one, with models for the simulated cluster), a held workload streamed a
// query at a time and a Sink that keeps what a streamed run hands on, and run-invariant checks
// for large runs of a layer-by-layer policy. It is meant for tests only.
package policytest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// PerToken is how long a call takes per output token on a Backend.
const PerToken = 10 * time.Millisecond

// Backend is a recording fake policies.Backend whose timing can be followed by hand: loading
// model m takes LoadTimes[m], an unload takes UnloadTime, and a submitted call runs at once,
// alone, for PerToken per output token (no batching, no queueing). Events due at the same
// instant come out in the order their actions were taken. Log records every action the
// Driver carries out, as "<seconds>s <action>".
type Backend struct {
	// LoadTimes is how long loading each model takes; loading a model not in it fails.
	LoadTimes map[string]time.Duration
	// UnloadTime is how long an unload takes.
	UnloadTime time.Duration
	// Log holds the actions carried out, in order, as "<seconds>s <action>".
	Log []string

	now     time.Duration
	seq     int
	pending []fakeEvent
}

type fakeEvent struct {
	ev  policies.Event
	seq int
}

// Now returns the backend's clock: the time of the last event Next returned.
func (b *Backend) Now() time.Duration { return b.now }

func (b *Backend) push(e policies.Event) {
	b.seq++
	b.pending = append(b.pending, fakeEvent{e, b.seq})
}

func (b *Backend) record(format string, args ...any) {
	b.Log = append(b.Log, fmt.Sprintf("%gs ", b.now.Seconds())+fmt.Sprintf(format, args...))
}

// Load records the load and schedules its EventLoaded LoadTimes[model] from now.
func (b *Backend) Load(w policies.WorkerID, model string) error {
	d, ok := b.LoadTimes[model]
	if !ok {
		return fmt.Errorf("fake backend: unknown model %s", model)
	}
	b.record("load w%d %s", w, model)
	b.push(policies.Event{Kind: policies.EventLoaded, At: b.now + d, Worker: w, Model: model})
	return nil
}

// Unload records the unload and schedules its EventUnloaded UnloadTime from now.
func (b *Backend) Unload(w policies.WorkerID, model string) error {
	b.record("unload w%d %s", w, model)
	b.push(policies.Event{Kind: policies.EventUnloaded, At: b.now + b.UnloadTime, Worker: w, Model: model})
	return nil
}

// Submit records the submission (with its priority, when not 0) and schedules the call's
// EventDone: it starts now and takes PerToken per output token, whatever its priority.
func (b *Backend) Submit(w policies.WorkerID, c *traces.Call, priority int) error {
	if priority != 0 {
		b.record("submit w%d call %d priority %d", w, c.ID, priority)
	} else {
		b.record("submit w%d call %d", w, c.ID)
	}
	end := b.now + time.Duration(c.OutputTokens)*PerToken
	b.push(policies.Event{Kind: policies.EventDone, At: end, Worker: w, Model: c.Model,
		Call:   &policies.CallRef{ID: c.ID, Query: c.Query, Role: c.Role, Layer: c.Layer, Model: c.Model, InputTokens: c.InputTokens},
		Timing: policies.CallTiming{Submitted: b.now, Started: b.now, FirstToken: b.now + PerToken, End: end}})
	return nil
}

// Cancel is not supported: it always fails.
func (b *Backend) Cancel(policies.WorkerID, int) error {
	return errors.New("fake backend: cancel not supported")
}

// WakeAt schedules an EventTimer at t, or now if t has passed.
func (b *Backend) WakeAt(t time.Duration) {
	b.push(policies.Event{Kind: policies.EventTimer, At: max(t, b.now)})
}

// Next returns the earliest pending event (the first scheduled among those due at the same
// instant) and moves the clock to it, or policies.ErrIdle when none is pending.
func (b *Backend) Next(context.Context) (policies.Event, error) {
	if len(b.pending) == 0 {
		return policies.Event{}, policies.ErrIdle
	}
	i := 0
	for j, p := range b.pending {
		if p.ev.At < b.pending[i].ev.At || p.ev.At == b.pending[i].ev.At && p.seq < b.pending[i].seq {
			i = j
		}
	}
	ev := b.pending[i].ev
	b.pending = slices.Delete(b.pending, i, i+1)
	b.now = ev.At
	return ev, nil
}

// TinyMoA is three queries of a two-layer MoA: experts E0, E1, E2 (layer 0) and a gated
// aggregator AGG reading all three (layer 1). Query q's output tokens of E0, E1, E2 and AGG
// are {100, 200, 300, 50}, {300, 150, 200, 60} and {200, 260, 100, 70} for q = 0, 1, 2; call
// IDs are 4q+0 (E0), 4q+1 (E1), 4q+2 (E2), 4q+3 (AGG).
func TinyMoA(t testing.TB) *traces.Workload {
	t.Helper()
	out := [][4]int{
		{100, 200, 300, 50},
		{300, 150, 200, 60},
		{200, 260, 100, 70},
	}
	wl := &traces.Workload{Name: "tiny"}
	for q, o := range out {
		qu := traces.Query{ID: q, Gold: "A"}
		var in []traces.Input
		for i := range 3 {
			qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleExpert, Model: fmt.Sprintf("E%d", i), PromptTokens: 100,
				OutputTokens: o[i], Answer: string(rune('A' + i))})
			in = append(in, traces.Input{From: i, Tokens: 10})
		}
		qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleAggregator, Model: "AGG", PromptTokens: 100, Inputs: in,
			OutputTokens: o[3], Answer: "A", Gate: true})
		wl.Queries = append(wl.Queries, qu)
	}
	require.NoError(t, wl.Finish())
	return wl
}

// TinyModels returns the models of TinyMoA, in the experiment's order E0, E1, E2, AGG, each
// holding 0.9 of a worker's memory, so that a worker holds one model at a time.
func TinyModels() []policies.ModelInfo {
	var models []policies.ModelInfo
	for _, m := range []string{"E0", "E1", "E2", "AGG"} {
		models = append(models, policies.ModelInfo{Name: m, Memory: 0.9})
	}
	return models
}

// SimModels builds the named models, in this order, all Llama-3-8B on A100-80GB with 0.9 of
// the memory (one model per worker at a time), for the simulated cluster. It returns the
// Driver's model infos, the cluster's setups and their (shared) cost model.
func SimModels(t testing.TB, names []string) ([]policies.ModelInfo, map[string]simulated.ModelSetup, *sim.CostModel) {
	t.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("A100-80GB")
	require.NoError(t, err)
	arch, err := cat.Model("llama-3-8b")
	require.NoError(t, err)
	cm, err := sim.NewCostModel(arch, g, sim.DefaultProfile().For(g))
	require.NoError(t, err)
	ec, err := sim.DefaultEngine().WithKVCache(cm, 0.9)
	require.NoError(t, err)
	var infos []policies.ModelInfo
	setups := map[string]simulated.ModelSetup{}
	for _, name := range names {
		infos = append(infos, policies.ModelInfo{Name: name, Arch: arch, Cost: cm, Engine: ec, Memory: 0.9, LoadTime: cm.LoadTime()})
		setups[name] = simulated.ModelSetup{Cost: cm, Engine: ec}
	}
	return infos, setups, cm
}

// BigMoA generates a MoA workload: k = 3 experts per query drawn (with replacement, skewed)
// from E0..E5, and a gated aggregator AGG that is none of them.
func BigMoA(t testing.TB, queries int) *traces.Workload {
	t.Helper()
	outs := BigMoAOutputs(t)
	var experts []traces.ExpertSpec
	for i := range 6 {
		name := fmt.Sprintf("E%d", i)
		experts = append(experts, traces.ExpertSpec{Name: name, Output: outs[name], Forward: traces.Uniform{Lo: 20, Hi: 80}, Accuracy: 0.6 + 0.05*float64(i)})
	}
	wl, err := traces.Generate(traces.GenSpec{Name: "big", Queries: queries, PromptTokens: traces.Uniform{Lo: 50, Hi: 300}, TemplateTokens: 20,
		Experts: experts, K: 3, Skew: 3,
		Aggregator: traces.AggregatorSpec{Model: "AGG", Output: outs["AGG"], TemplateTokens: 30, Accuracy: 0.7},
		Votes:      traces.VoteSpec{Options: 4, ErrorCorrelation: 0.5, Difficulty: 1}}, 7)
	require.NoError(t, err)
	return wl
}

// BigMoAOutputs are the output-length distributions of BigMoA's models, by name.
func BigMoAOutputs(t testing.TB) map[string]traces.LengthDist {
	t.Helper()
	outs := map[string]traces.LengthDist{}
	for i := range 6 {
		out, err := traces.NewLogNormal(float64(200+100*i), float64(1500+300*i), 1, 4000)
		require.NoError(t, err)
		outs[fmt.Sprintf("E%d", i)] = out
	}
	agg, err := traces.NewLogNormal(300, 1500, 1, 3000)
	require.NoError(t, err)
	outs["AGG"] = agg
	return outs
}

// ClusterUnloadTime is the unload time of the simulated cluster a large run uses;
// CheckLargeRun relies on it.
const ClusterUnloadTime = time.Second

// CheckLargeRun checks the properties every run must have, derived on their own from the
// workload, the rule (skip an aggregator whose experts all agree) and the cost model cm and
// engine configuration ec of every model, on a cluster that unloads in ClusterUnloadTime.
// barrier says the policy serves layer by layer (no call of a layer starts before every call
// of the layers below it ended), which is checked too.
func CheckLargeRun(t testing.TB, res *policies.Result, wl *traces.Workload, cm *sim.CostModel, ec sim.EngineConfig, barrier bool) {
	t.Helper()
	mustRun, skipped, wantTokens := callsToRun(t, wl)
	rec := checkCallsRan(t, res, mustRun, wantTokens)
	perWorker := checkLoads(t, res, cm)
	checkModelsLoaded(t, res, perWorker)
	checkInputsFirst(t, res, wl, rec, barrier)
	checkMakespan(t, res, wl, cm, ec, perWorker, barrier, skipped)
}

// callsToRun returns the calls the rule must run, by ID (every expert; an aggregator unless
// its experts are unanimous), how many aggregators it skips and the output tokens of the calls
// it runs. It checks the workload has both unanimous queries and split ones.
func callsToRun(t testing.TB, wl *traces.Workload) (mustRun map[int]*traces.Call, skipped, wantTokens int) {
	t.Helper()
	mustRun = map[int]*traces.Call{}
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		for i := range q.Calls {
			c := &q.Calls[i]
			if c.Gate {
				unanimous := true
				for _, in := range c.Inputs {
					a := q.Calls[in.From].Answer
					unanimous = unanimous && a != "" && a == q.Calls[c.Inputs[0].From].Answer
				}
				if unanimous {
					skipped++
					continue
				}
			}
			mustRun[c.ID] = c
			wantTokens += c.OutputTokens
		}
	}
	require.Positive(t, skipped, "the workload should have unanimous queries, for the rule to skip some")
	require.Less(t, skipped, len(wl.Queries), "the workload should have split queries, whose aggregators run")
	return mustRun, skipped, wantTokens
}

// checkCallsRan checks that every call that must run ran exactly once, done, producing all of
// its output tokens (wantTokens in all), and that no other call ran. It returns the records of
// the calls that ran, by call ID.
func checkCallsRan(t testing.TB, res *policies.Result, mustRun map[int]*traces.Call, wantTokens int) map[int]policies.CallRecord {
	t.Helper()
	rec := map[int]policies.CallRecord{}
	produced := 0
	for _, c := range res.Calls {
		_, twice := rec[c.Call.ID]
		require.False(t, twice, "call %d ran twice", c.Call.ID)
		rec[c.Call.ID] = c
		_, ok := mustRun[c.Call.ID]
		require.True(t, ok, "call %d (%s, query %d) ran, but the rule skips it", c.Call.ID, c.Call.Role, c.Call.Query)
		require.Equal(t, "done", c.Status, "call %d", c.Call.ID)
		require.Equal(t, c.Call.OutputTokens, c.Produced, "call %d", c.Call.ID)
		produced += c.Produced
	}
	require.Len(t, rec, len(mustRun))
	require.Equal(t, wantTokens, produced, "output tokens of the calls that ran")
	return rec
}

// checkLoads checks that every load takes the cost model's load time and that a worker holds
// one model at a time: a model it loaded stays until the worker starts its next load, which
// leaves ClusterUnloadTime for the unload. It returns each worker's loads, by start.
func checkLoads(t testing.TB, res *policies.Result, cm *sim.CostModel) map[policies.WorkerID][]policies.LoadRecord {
	t.Helper()
	perWorker := map[policies.WorkerID][]policies.LoadRecord{}
	for _, l := range res.Loads {
		require.Equal(t, cm.LoadTime(), l.End-l.Start, "load of %s on worker %d", l.Model, l.Worker)
		perWorker[l.Worker] = append(perWorker[l.Worker], l)
	}
	for w, ls := range perWorker {
		slices.SortFunc(ls, func(a, b policies.LoadRecord) int { return cmp.Compare(a.Start, b.Start) })
		for i := 1; i < len(ls); i++ {
			require.GreaterOrEqual(t, ls[i].Start-ls[i-1].End, ClusterUnloadTime, "worker %d loads %s before %s can be unloaded", w, ls[i].Model, ls[i-1].Model)
		}
	}
	return perWorker
}

// checkModelsLoaded checks that a call runs on a worker that finished loading its model before
// the call was submitted, and ends before the worker starts loading another model (perWorker
// holds each worker's loads, by start), and that its timing is in order.
func checkModelsLoaded(t testing.TB, res *policies.Result, perWorker map[policies.WorkerID][]policies.LoadRecord) {
	t.Helper()
	for _, c := range res.Calls {
		ls := perWorker[c.Worker]
		ok := false
		for i, l := range ls {
			if l.Model != c.Call.Model || l.End > c.Timing.Submitted {
				continue
			}
			if i+1 == len(ls) || c.Timing.End <= ls[i+1].Start {
				ok = true
			}
		}
		require.True(t, ok, "call %d of %s ran on worker %d from %v to %v without the model loaded throughout", c.Call.ID, c.Call.Model, c.Worker,
			c.Timing.Started, c.Timing.End)
		require.True(t, c.Timing.Submitted <= c.Timing.Started && c.Timing.Started < c.Timing.End, "call %d timing %+v", c.Call.ID, c.Timing)
	}
}

// checkInputsFirst checks that the calls span two layers and that a call starts after the
// calls it reads ended (rec holds the calls that ran, by ID), and, with the barrier, after
// every call of every lower layer ended.
func checkInputsFirst(t testing.TB, res *policies.Result, wl *traces.Workload, rec map[int]policies.CallRecord, barrier bool) {
	t.Helper()
	layerEnd := map[int]time.Duration{}
	maxLayer := 0
	for _, c := range res.Calls {
		layerEnd[c.Call.Layer] = max(layerEnd[c.Call.Layer], c.Timing.End)
		maxLayer = max(maxLayer, c.Call.Layer)
	}
	require.Equal(t, 1, maxLayer)
	for _, c := range res.Calls {
		q := &wl.Queries[c.Call.Query]
		for _, in := range c.Call.Inputs {
			from := rec[q.Calls[in.From].ID]
			require.GreaterOrEqual(t, c.Timing.Started, from.Timing.End, "call %d started before its input %d ended", c.Call.ID, from.Call.ID)
		}
		if barrier {
			for l := range c.Call.Layer {
				require.GreaterOrEqual(t, c.Timing.Started, layerEnd[l], "call %d of layer %d started before layer %d ended", c.Call.ID, c.Call.Layer, l)
			}
		}
	}
}

// checkMakespan checks the makespan against two lower bounds: each worker's own work
// (busyBounds) and the critical path (criticalPath), and logs them with the number of calls
// that ran and of aggregators skipped. perWorker holds each worker's loads.
func checkMakespan(t testing.TB, res *policies.Result, wl *traces.Workload, cm *sim.CostModel, ec sim.EngineConfig,
	perWorker map[policies.WorkerID][]policies.LoadRecord, barrier bool, skipped int) {
	t.Helper()
	minIter, tokenTime := iterationBounds(cm, ec)
	require.Positive(t, tokenTime)
	makespan := res.Summary().E2E
	busy := busyBounds(res, cm, perWorker, minIter, tokenTime)
	for w, b := range busy {
		require.GreaterOrEqual(t, makespan, b, "worker %d's loads and iterations alone take %v", w, b)
	}
	critical := criticalPath(res, wl, cm, minIter, barrier)
	require.GreaterOrEqual(t, makespan, critical)
	t.Logf("%d calls ran, %d aggregators skipped; makespan %v, lower bounds: critical path %v, busiest worker %v",
		len(res.Calls), skipped, makespan, critical, slices.Max(slices.Collect(maps.Values(busy))))
}

// iterationBounds returns the least time of an engine iteration, the cost model's one-token
// iteration f(1), and the least time per output token: an iteration of b decoding sequences
// takes at least f(b), whose time per token f(b)/b falls with b, and holds at most
// MaxNumSeqs sequences, so a token takes at least f(MaxNumSeqs) / MaxNumSeqs.
func iterationBounds(cm *sim.CostModel, ec sim.EngineConfig) (minIter, tokenTime time.Duration) {
	f := func(b int) time.Duration {
		return time.Duration(cm.IterationSeconds(sim.Batch{Tokens: b, AttentionPairs: float64(b), KVTokens: float64(b), Seqs: b, Sampled: b}) * 1e9)
	}
	return f(1), f(ec.MaxNumSeqs) / time.Duration(ec.MaxNumSeqs)
}

// busyBounds returns, by worker, a lower bound of its own work: its loads (perWorker) and the
// unloads between them, and, for each model it served, the engine iterations its calls there
// need. A call of n output tokens needs n iterations of at least minIter each; the model's T
// output tokens there take at least T * tokenTime.
func busyBounds(res *policies.Result, cm *sim.CostModel, perWorker map[policies.WorkerID][]policies.LoadRecord,
	minIter, tokenTime time.Duration) map[policies.WorkerID]time.Duration {
	type wm struct {
		w policies.WorkerID
		m string
	}
	longest, sum := map[wm]int{}, map[wm]int{}
	for _, c := range res.Calls {
		k := wm{c.Worker, c.Call.Model}
		longest[k] = max(longest[k], c.Produced)
		sum[k] += c.Produced
	}
	busy := map[policies.WorkerID]time.Duration{}
	for w, ls := range perWorker {
		busy[w] = time.Duration(len(ls))*cm.LoadTime() + time.Duration(len(ls)-1)*ClusterUnloadTime
	}
	for k, n := range longest {
		busy[k.w] += max(time.Duration(n)*minIter, time.Duration(sum[k])*tokenTime)
	}
	return busy
}

// criticalPath returns a lower bound of the makespan: the first load and then a query's calls
// one after another along its longest chain of inputs that ran, each output token taking at
// least minIter; with the barrier, also the longest expert call and the longest aggregator
// call in sequence. The calls span layers 0 and 1.
func criticalPath(res *policies.Result, wl *traces.Workload, cm *sim.CostModel, minIter time.Duration, barrier bool) time.Duration {
	var longestLayer [2]int
	for _, c := range res.Calls {
		longestLayer[c.Call.Layer] = max(longestLayer[c.Call.Layer], c.Produced)
	}
	chain := map[int]int{} // call ID -> tokens along its longest chain of inputs that ran
	longestChain := 0
	for _, c := range res.Calls { // layer 0 first, then layer 1 (the last, checked by checkInputsFirst)
		if c.Call.Layer == 0 {
			chain[c.Call.ID] = c.Produced
			longestChain = max(longestChain, c.Produced)
		}
	}
	for _, c := range res.Calls {
		if c.Call.Layer == 0 {
			continue
		}
		q := &wl.Queries[c.Call.Query]
		in := 0
		for _, i := range c.Call.Inputs {
			in = max(in, chain[q.Calls[i.From].ID])
		}
		chain[c.Call.ID] = in + c.Produced
		longestChain = max(longestChain, in+c.Produced)
	}
	critical := cm.LoadTime() + time.Duration(longestChain)*minIter
	if barrier {
		critical = max(critical, cm.LoadTime()+time.Duration(longestLayer[0]+longestLayer[1])*minIter)
	}
	return critical
}

// RunTiny runs policy p on two workers over TinyMoA with the TinyModels, never skipping an
// aggregator, on a Backend whose loads take E0 10s, E1 20s, E2 15s and AGG 25s and whose
// unloads take 0.5s. It returns the backend (its Log) and the Driver's result.
func RunTiny(t testing.TB, p policies.Policy) (*Backend, *policies.Result) {
	t.Helper()
	b := &Backend{UnloadTime: 500 * time.Millisecond, LoadTimes: map[string]time.Duration{
		"E0": 10 * time.Second, "E1": 20 * time.Second, "E2": 15 * time.Second, "AGG": 25 * time.Second}}
	d, err := policies.NewDriver(b, p, policies.NeverSkip(), TinyMoA(t), TinyModels(), 2)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	return b, res
}

// Served is who served a call, and from when to when.
type Served struct {
	Worker     policies.WorkerID
	Start, End time.Duration
}

// TinyWant is what a run over TinyMoA (RunTiny) must give, worked out by hand.
type TinyWant struct {
	// Log is the Backend's log: every action the Driver carried out, in order.
	Log []string
	// Loads are the Driver's load records, in completion order.
	Loads []policies.LoadRecord
	// Served is who served each call, and when, by call ID.
	Served map[int]Served
}

// CheckTiny runs policy p over TinyMoA (RunTiny) and checks the Backend's log, the Driver's
// load records and who served each call when against want, and that every call is done.
func CheckTiny(t testing.TB, p policies.Policy, want TinyWant) {
	t.Helper()
	b, res := RunTiny(t, p)
	assert.Equal(t, want.Log, b.Log)
	assert.Equal(t, want.Loads, res.Loads)
	got := map[int]Served{}
	for _, c := range res.Calls {
		assert.Equal(t, "done", c.Status, "call %d", c.Call.ID)
		got[c.Call.ID] = Served{c.Worker, c.Timing.Started, c.Timing.End}
	}
	assert.Equal(t, want.Served, got)
}

// Ms is n milliseconds.
func Ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// LargeModels returns the models of BigMoA, in the experiment's order: E0..E5, then AGG.
func LargeModels() []string { return []string{"E0", "E1", "E2", "E3", "E4", "E5", "AGG"} }

// LargeInfos is SimModels of LargeModels, each model's info with the output lengths BigMoA
// draws (the profiled lengths a planning policy sees).
func LargeInfos(t testing.TB) ([]policies.ModelInfo, map[string]simulated.ModelSetup, *sim.CostModel) {
	t.Helper()
	infos, setups, cm := SimModels(t, LargeModels())
	outs := BigMoAOutputs(t)
	for i := range infos {
		infos[i].Output = outs[infos[i].Name]
	}
	return infos, setups, cm
}

// LargeWorkers is the number of workers of RunLarge's simulated cluster.
const LargeWorkers = 4

// RunLarge runs policy p over 2000 BigMoA queries on LargeWorkers workers of the simulated
// cluster (the SimModels of LargeModels, unloading in ClusterUnloadTime), skipping an
// aggregator whose experts all agree, checks the invariants of any run (CheckLargeRun) and
// returns the Driver's result.
func RunLarge(t testing.TB, p policies.Policy) *policies.Result {
	t.Helper()
	return RunLargeWith(t, p, true)
}

// RunLargeWith is RunLarge for a policy that serves layer by layer (barrier) or not.
func RunLargeWith(t testing.TB, p policies.Policy, barrier bool) *policies.Result {
	t.Helper()
	infos, setups, cm := LargeInfos(t)
	wl := BigMoA(t, 2000)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(LargeWorkers, setups), UnloadTime: ClusterUnloadTime})
	require.NoError(t, err)
	d, err := policies.NewDriver(cl, p, policies.ConfidenceSkip{Threshold: 1}, wl, infos, LargeWorkers)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	CheckLargeRun(t, res, wl, cm, infos[0].Engine, barrier)
	return res
}

// LoadOrder returns the models each worker loaded, in the order of res.Loads (completion
// order; a worker's loads complete in the order it started them).
func LoadOrder(res *policies.Result) map[policies.WorkerID][]string {
	loaded := map[policies.WorkerID][]string{}
	for _, l := range res.Loads {
		loaded[l.Worker] = append(loaded[l.Worker], l.Model)
	}
	return loaded
}

// HeldSource streams a held workload a query at a time, as a generator's stream would
// (a policies.QuerySource).
type HeldSource struct {
	WL   *traces.Workload
	next int
}

// Len implements policies.QuerySource.
func (s *HeldSource) Len() int { return len(s.WL.Queries) }

// Counts implements policies.QuerySource.
func (s *HeldSource) Counts() (traces.CallCounts, error) {
	var c traces.CallCounts
	for _, q := range s.WL.Queries {
		for _, call := range q.Calls {
			for len(c) <= call.Layer {
				c = append(c, map[string]int{})
			}
			c[call.Layer][call.Model]++
		}
	}
	return c, nil
}

// Next implements policies.QuerySource.
func (s *HeldSource) Next() (*traces.Query, error) {
	if s.next == len(s.WL.Queries) {
		return nil, io.EOF
	}
	s.next++
	return &s.WL.Queries[s.next-1], nil
}

// Collector is a policies.Sink that keeps what a streamed run hands on: the calls' records
// (with copies of their calls), the queries' outcomes and IDs, and the intervals.
type Collector struct {
	Calls     []policies.CallRecord
	Queries   []policies.QueryOutcome
	IDs       []int
	Intervals []policies.Interval
}

// Query implements policies.Sink.
func (c *Collector) Query(q *traces.Query, o policies.QueryOutcome, calls []policies.CallRecord) error {
	for _, r := range calls {
		cp := *r.Call // the Driver's query may go once handed on
		r.Call = &cp
		c.Calls = append(c.Calls, r)
	}
	c.Queries = append(c.Queries, o)
	c.IDs = append(c.IDs, q.ID)
	return nil
}

// Interval implements policies.Sink.
func (c *Collector) Interval(iv policies.Interval) error {
	c.Intervals = append(c.Intervals, iv)
	return nil
}

// ByWorker orders intervals by worker, keeping each worker's in the order given: a held
// result's WorkerIntervals order.
func ByWorker(ivs []policies.Interval) []policies.Interval {
	return slices.SortedStableFunc(slices.Values(ivs), func(a, b policies.Interval) int { return cmp.Compare(a.Worker, b.Worker) })
}
