package simulated_test

import (
	"context"
	"fmt"
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

// setup builds models named M0..Mn-1 (all Llama-3-8B on A100-80GB) for a cluster.
func setup(t *testing.T, n int) ([]policies.ModelInfo, map[string]simulated.ModelSetup) {
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
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("M%d", i)
		out, err := traces.NewLogNormal(300, 2000, 1, 4000)
		require.NoError(t, err)
		infos = append(infos, policies.ModelInfo{Name: name, Arch: arch, Cost: cm, Engine: ec, Memory: 0.9, LoadTime: cm.LoadTime(), Output: out})
		setups[name] = simulated.ModelSetup{Cost: cm, Engine: ec}
	}
	return infos, setups
}

// workload builds queries whose k experts are chosen round the model list, with fixed lengths.
func workload(queries, k, models int, out func(q, i int) int, agreeEvery int) *traces.Workload {
	wl := &traces.Workload{Name: "t"}
	for q := 0; q < queries; q++ {
		qu := traces.Query{ID: q, Gold: "A"}
		var inputs []traces.Input
		for i := 0; i < k; i++ {
			ans := "A"
			if agreeEvery > 0 && q%agreeEvery != 0 && i == 0 {
				ans = "B" // a 2:1 split on most queries
			}
			qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleExpert, Model: fmt.Sprintf("M%d", (q+i)%models),
				PromptTokens: 100, OutputTokens: out(q, i), Answer: ans})
			inputs = append(inputs, traces.Input{From: i, Tokens: min(50, out(q, i))})
		}
		qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleAggregator, Model: "M0", PromptTokens: 100, Inputs: inputs,
			OutputTokens: 200, Answer: "A", Gate: true})
		wl.Queries = append(wl.Queries, qu)
	}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

func run(t *testing.T, p policies.Policy, rule policies.Rule, wl *traces.Workload, models, workers int) *policies.Result {
	t.Helper()
	infos, setups := setup(t, models)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(workers, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewDriver(cl, p, rule, wl, infos, workers)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	checkInvariants(t, res, wl, rule)
	return res
}

// checkInvariants are the properties every simulated run must have. It derives on its own,
// from the workload and the rule, which calls must run, and checks the Driver against it.
func checkInvariants(t *testing.T, res *policies.Result, wl *traces.Workload, rule policies.Rule) {
	t.Helper()
	ran := map[int]policies.CallRecord{}
	// Each call ran once, on a worker that held its model for the whole call (a tool step on
	// none, for exactly its duration).
	for _, c := range res.Calls {
		_, twice := ran[c.Call.ID]
		require.False(t, twice, "call %d ran twice", c.Call.ID)
		ran[c.Call.ID] = c
		require.Equal(t, "done", c.Status)
		tm := c.Timing
		if c.Call.IsTool() {
			require.Equal(t, policies.WorkerID(-1), c.Worker)
			require.Equal(t, c.Call.Tool, tm.End-c.Ready, "tool step %d", c.Call.ID)
			continue
		}
		require.True(t, c.Ready <= tm.Submitted && tm.Submitted <= tm.Started && tm.Started < tm.FirstToken && tm.FirstToken <= tm.End,
			"call %d timing %+v ready %v", c.Call.ID, tm, c.Ready)
		held := false
		for _, l := range res.Loads {
			if l.Worker == c.Worker && l.Model == c.Call.Model && l.End <= tm.Submitted {
				held = true
			}
		}
		require.True(t, held, "call %d on worker %d without %s loaded", c.Call.ID, c.Worker, c.Call.Model)
	}
	// A call runs exactly when the rule does not skip it, given what its inputs answered; it
	// becomes ready once they have all finished; its prompt carries what they forward.
	for qi, q := range wl.Queries {
		answers := make([]string, len(q.Calls))
		finished := make([]time.Duration, len(q.Calls))
		skipped := make([]bool, len(q.Calls))
		pass := make([]int, len(q.Calls))
		order := topo(q)
		for _, i := range order {
			c := &q.Calls[i]
			var in []string // the inputs' votes: a tool step does not vote
			var readyAt time.Duration
			tokens := c.PromptTokens
			for _, e := range c.Inputs {
				if !q.Calls[e.From].IsTool() {
					in = append(in, answers[e.From])
				}
				readyAt = max(readyAt, finished[e.From])
				if skipped[e.From] {
					tokens += pass[e.From]
				} else {
					tokens += e.Tokens
				}
			}
			if c.Gate {
				if d := rule.Decide(in); d.Skip {
					_, didRun := ran[c.ID]
					require.False(t, didRun, "query %d: call %d ran, but the rule skips it", qi, c.ID)
					skipped[i], answers[i], finished[i] = true, d.Majority, readyAt
					for _, e := range c.Inputs {
						if d.Majority != "" && !q.Calls[e.From].IsTool() && answers[e.From] == d.Majority {
							pass[i] = e.Tokens
							break
						}
					}
					continue
				}
			}
			rec, didRun := ran[c.ID]
			require.True(t, didRun, "query %d: call %d never ran", qi, c.ID)
			require.GreaterOrEqual(t, rec.Ready, readyAt, "query %d: call %d ready before its inputs finished", qi, c.ID)
			if !c.IsTool() {
				require.Equal(t, max(1, tokens), rec.Call.InputTokens, "query %d: call %d's prompt", qi, c.ID)
			}
			answers[i], finished[i] = c.Answer, rec.Timing.End
			if c.Synth != nil {
				answers[i] = c.Synth.Answer(in)
			}
		}
		sinks := q.Sinks()
		if len(sinks) == 1 && len(q.Calls[sinks[0]].Inputs) > 0 {
			require.Equal(t, skipped[sinks[0]], res.Queries[qi].Skipped, "query %d", qi)
			require.Equal(t, answers[sinks[0]], res.Queries[qi].Final, "query %d's answer", qi)
		}
	}
	// The makespan is at least the longest call on its own and the first load.
	s := res.Summary()
	for _, c := range res.Calls {
		require.GreaterOrEqual(t, s.E2E, c.Timing.End-c.Timing.Started)
	}
	require.Greater(t, s.E2E, res.Loads[0].End-res.Loads[0].Start)
	require.LessOrEqual(t, s.GPUBusyFrac, 1.0)
}

// topo lists a query's nodes inputs first.
func topo(q traces.Query) []int {
	done := make([]bool, len(q.Calls))
	var out []int
	for len(out) < len(q.Calls) {
		for i, c := range q.Calls {
			if done[i] {
				continue
			}
			ready := true
			for _, e := range c.Inputs {
				ready = ready && done[e.From]
			}
			if ready {
				done[i] = true
				out = append(out, i)
			}
		}
	}
	return out
}

func TestRoundRobinServesEachModelOnce(t *testing.T) {
	wl := workload(60, 3, 6, func(q, i int) int { return 100 + 10*(q%7) }, 0)
	res := run(t, roundrobin.New(), policies.NeverSkip(), wl, 6, 4)
	// Six models on four workers: each model loaded exactly once.
	loads := map[string]int{}
	for _, l := range res.Loads {
		loads[l.Model]++
		assert.Equal(t, policies.WorkerID(modelIndex(l.Model)%4), l.Worker, "model %s", l.Model)
	}
	for i := 0; i < 6; i++ {
		assert.Equal(t, 1, loads[fmt.Sprintf("M%d", i)])
	}
	// The aggregator stage starts after the last expert call (the barrier).
	s := res.Summary()
	for _, c := range res.Calls {
		if c.Call.Role == traces.RoleAggregator {
			assert.GreaterOrEqual(t, c.Timing.Submitted, s.ExpertStage)
			assert.Equal(t, policies.WorkerID(0), c.Worker)
		}
	}
	assert.Equal(t, 60, s.AggregatorCalls)
}

func modelIndex(name string) int {
	var i int
	fmt.Sscanf(name, "M%d", &i)
	return i
}

func TestDataParallelLoadsEveryModelEverywhere(t *testing.T) {
	wl := workload(60, 3, 6, func(q, i int) int { return 100 }, 0)
	res := run(t, dataparallel.New(), policies.NeverSkip(), wl, 6, 4)
	loads := map[string]int{}
	for _, l := range res.Loads {
		loads[l.Model]++
	}
	for i := 0; i < 6; i++ {
		assert.Equal(t, 4, loads[fmt.Sprintf("M%d", i)], "M%d loaded on every worker", i)
	}
	// Calls of each model are spread evenly.
	perWorker := map[string]map[policies.WorkerID]int{}
	for _, c := range res.Calls {
		if c.Call.Layer != 0 {
			continue
		}
		if perWorker[c.Call.Model] == nil {
			perWorker[c.Call.Model] = map[policies.WorkerID]int{}
		}
		perWorker[c.Call.Model][c.Worker]++
	}
	for m, pw := range perWorker {
		for w, n := range pw {
			assert.InDelta(t, 30/4.0, n, 1, "model %s worker %d", m, w)
		}
	}
}

func TestSkippingRemovesAggregatorCalls(t *testing.T) {
	wl := workload(30, 3, 3, func(q, i int) int { return 50 }, 3) // every third query unanimous
	never := run(t, roundrobin.New(), policies.NeverSkip(), wl, 3, 3)
	unanimous := run(t, roundrobin.New(), policies.ConfidenceSkip{Threshold: 1}, wl, 3, 3)
	majority := run(t, roundrobin.New(), policies.ConfidenceSkip{Threshold: 2.0 / 3}, wl, 3, 3)
	assert.Equal(t, 0, never.Summary().AggregatorSkipped)
	assert.Equal(t, 10, unanimous.Summary().AggregatorSkipped)
	assert.Equal(t, 30, majority.Summary().AggregatorSkipped)
	assert.Less(t, unanimous.Summary().AggregatorStage, never.Summary().AggregatorStage)
}

// The straggler: one model with long outputs makes its round-robin worker finish last.
func TestRoundRobinStraggler(t *testing.T) {
	wl := workload(120, 3, 6, func(q, i int) int {
		if (q+i)%6 == 1 {
			return 3000 // M1 is a reasoning model
		}
		return 200
	}, 0)
	res := run(t, roundrobin.New(), policies.NeverSkip(), wl, 6, 4)
	busy := map[policies.WorkerID]time.Duration{}
	var total time.Duration
	for _, iv := range res.WorkerIntervals() {
		if iv.Kind == "busy" {
			busy[iv.Worker] += iv.End - iv.Start
			total += iv.End - iv.Start
		}
	}
	assert.Greater(t, busy[1], 2*busy[2], "worker 1 (M1, M5) is the straggler: %v", busy)
	assert.Equal(t, total, res.BusyTime(), "BusyTime sums the busy intervals")
}

func TestMosaicInvariants(t *testing.T) {
	long := func(q, i int) int {
		if (q+i)%5 == 0 {
			return 2500
		}
		return 50 + (q*31+i*17)%400
	}
	for _, tc := range []struct {
		name    string
		opts    placement.Options
		arrival bool
	}{
		{"offline", placement.Options{}, false},
		{"plain order, no prefetch", placement.Options{Order: placement.OrderPlain, NoPrefetch: true}, false},
		{"online arrivals", placement.Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wl := workload(80, 3, 5, long, 3)
			if tc.arrival {
				for i := range wl.Queries {
					wl.Queries[i].Arrival = time.Duration(i) * 500 * time.Millisecond
				}
			}
			res := run(t, placement.New(tc.opts), policies.ConfidenceSkip{Threshold: 1}, wl, 5, 4)
			rr := run(t, roundrobin.New(), policies.ConfidenceSkip{Threshold: 1}, wl, 5, 4)
			t.Logf("mosaic %v, round-robin %v", res.Summary().E2E, rr.Summary().E2E)
			assert.Less(t, res.Summary().ExpertStage, rr.Summary().ExpertStage)
		})
	}
}

func TestDeterministic(t *testing.T) {
	wl := workload(40, 3, 4, func(q, i int) int { return 50 + (q*7+i*13)%400 }, 2)
	a := run(t, dataparallel.New(), policies.ConfidenceSkip{Threshold: 1}, wl, 4, 3)
	b := run(t, dataparallel.New(), policies.ConfidenceSkip{Threshold: 1}, wl, 4, 3)
	assert.Equal(t, a.Calls, b.Calls)
	assert.Equal(t, a.Loads, b.Loads)
}

// A policy that breaks an invariant fails the run with a message naming it.
type badPolicy struct{}

func (badPolicy) Name() string { return "bad" }
func (badPolicy) Start(v policies.View) ([]policies.Action, error) {
	return []policies.Action{policies.Submit(0, v.Ready()[0].ID)}, nil
}
func (badPolicy) OnEvent(policies.Event, policies.View) []policies.Action { return nil }

type idlePolicy struct{}

func (idlePolicy) Name() string                                            { return "idle" }
func (idlePolicy) Start(policies.View) ([]policies.Action, error)          { return nil, nil }
func (idlePolicy) OnEvent(policies.Event, policies.View) []policies.Action { return nil }

func TestDriverRejectsBadPolicies(t *testing.T) {
	wl := workload(4, 3, 3, func(q, i int) int { return 10 }, 0)
	infos, setups := setup(t, 3)
	for _, tc := range []struct {
		p    policies.Policy
		want string
	}{
		{badPolicy{}, "policy bad at 0s: submit call 0 to worker 0: the worker does not hold M0"},
		{idlePolicy{}, "policy idle stalled at 0s: 4 queries incomplete, 12 calls ready but never submitted"},
	} {
		cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(2, setups)})
		require.NoError(t, err)
		d, err := policies.NewDriver(cl, tc.p, policies.NeverSkip(), wl, infos, 2)
		require.NoError(t, err)
		_, err = d.Run(context.Background())
		assert.ErrorContains(t, err, tc.want)
	}
}

// treeWorkload is a 6-2-1 tree whose cluster aggregators are gated, with a tool step between
// the first agent and its cluster aggregator: gates below the final layer, tool steps and
// fan-in, with answers drawn by the answer model.
func treeWorkload(t *testing.T, queries int, arrivalGap time.Duration) *traces.Workload {
	t.Helper()
	agent := func(model string, acc float64) traces.NodeSpec {
		out, err := traces.NewLogNormal(200, 1200, 1, 3000)
		require.NoError(t, err)
		return traces.NodeSpec{Name: model, Role: traces.RoleAgent, Model: model, TemplateTokens: 30, Question: true, Output: out,
			Forward: traces.Uniform{Lo: 20, Hi: 80}, Answers: true, Accuracy: acc}
	}
	agg := func(model string, gate bool, inputs ...int) traces.NodeSpec {
		return traces.NodeSpec{Name: "agg", Role: traces.RoleAggregator, Model: model, TemplateTokens: 50, Question: true,
			Output: traces.Uniform{Lo: 50, Hi: 400}, Inputs: inputs, Gate: gate}
	}
	nodes := []traces.NodeSpec{agent("M0", 0.7), agent("M1", 0.6), agent("M2", 0.6), agent("M1", 0.7), agent("M2", 0.5), agent("M3", 0.6),
		{Name: "search", Role: traces.RoleTool, Tool: traces.Uniform{Lo: 200, Hi: 3000}, Inputs: []int{0}},
		agg("M0", true, 0, 1, 2, 6), agg("M3", true, 3, 4, 5), agg("M0", false, 7, 8)}
	wl, err := traces.GenerateGraph(traces.GraphSpec{Name: "tree", Queries: queries, PromptTokens: traces.Uniform{Lo: 50, Hi: 200},
		Nodes: nodes, Votes: traces.VoteSpec{Options: 4, ErrorCorrelation: 0.5, Difficulty: 1},
		Synth: traces.SimpleSynthesizer(0.4, 0.95)}, 3)
	require.NoError(t, err)
	for i := range wl.Queries {
		wl.Queries[i].Arrival = time.Duration(i) * arrivalGap
	}
	return wl
}

// Every policy serves graphs with gates below the final layer, tool steps and arrivals, and
// the Driver's invariants hold (checkInvariants derives which calls run on its own).
func TestPoliciesOnGraphs(t *testing.T) {
	for _, gap := range []time.Duration{0, 2 * time.Second} {
		for _, threshold := range []float64{2, 1, 2.0 / 3} {
			for _, p := range []func() policies.Policy{
				func() policies.Policy { return roundrobin.New() },
				func() policies.Policy { return dataparallel.New() },
				func() policies.Policy { return placement.New(placement.Options{TimeLimit: time.Second}) },
				func() policies.Policy { return online.New(online.Options{TimeLimit: time.Second}) },
			} {
				pol := p()
				t.Run(fmt.Sprintf("%s gap %v T %.2f", pol.Name(), gap, threshold), func(t *testing.T) {
					wl := treeWorkload(t, 60, gap)
					res := run(t, pol, policies.ConfidenceSkip{Threshold: threshold}, wl, 4, 3)
					s := res.Summary()
					if threshold > 1 {
						assert.Zero(t, s.SkippedCalls)
					} else {
						assert.Positive(t, s.SkippedCalls, "cluster aggregators of agreeing clusters are skipped")
					}
					assert.Zero(t, s.AggregatorSkipped, "the final aggregator is not gated")
					for _, q := range res.Queries {
						assert.GreaterOrEqual(t, q.End, q.Arrival)
					}
				})
			}
		}
	}
}

// refWatcher runs round-robin and keeps the reference of each call as the policy heard it
// released and as it heard it end.
type refWatcher struct {
	policies.Policy
	released, ended map[int]policies.CallRef
}

func (w *refWatcher) Start(v policies.View) ([]policies.Action, error) {
	for _, c := range v.Ready() {
		w.released[c.ID] = c
	}
	return w.Policy.Start(v)
}

func (w *refWatcher) OnEvent(e policies.Event, v policies.View) []policies.Action {
	switch e.Kind {
	case policies.EventReleased:
		for _, c := range e.Calls {
			w.released[c.ID] = c
		}
	case policies.EventDone:
		w.ended[e.Call.ID] = *e.Call
	}
	return w.Policy.OnEvent(e, v)
}

// TestPolicyHearsDriversReferenceOnDone checks that a call's EventDone carries the Driver's
// reference, as the call was released (final, ready time, inputs, confidence), not the
// backend's, which knows only the call's labels.
func TestPolicyHearsDriversReferenceOnDone(t *testing.T) {
	wl := workload(12, 3, 3, func(q, i int) int { return 60 + 10*i }, 2)
	w := &refWatcher{Policy: roundrobin.New(), released: map[int]policies.CallRef{}, ended: map[int]policies.CallRef{}}
	res := run(t, w, policies.NeverSkip(), wl, 3, 3)
	require.Len(t, w.ended, len(res.Calls))
	finals := 0
	for id, got := range w.ended {
		want, ok := w.released[id]
		require.True(t, ok, "call %d ended without being released", id)
		assert.Equal(t, want, got, "call %d", id)
		if got.Final {
			finals++
			assert.Equal(t, 3, got.Inputs, "aggregator %d", id)
			assert.Positive(t, got.Confidence, "aggregator %d", id)
			assert.Positive(t, got.Ready, "aggregator %d", id)
		}
	}
	assert.Equal(t, 12, finals, "every aggregator's end says it is final")
}
