package simulated_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// eager loads model Mi on worker i and submits every ready call (open ones included) to the
// worker of its model as soon as it can.
type eager struct{ models int }

func (p eager) Name() string { return "eager" }
func (p eager) Start(v policies.View) ([]policies.Action, error) {
	var acts []policies.Action
	for i := range p.models {
		acts = append(acts, policies.Load(policies.WorkerID(i), v.Models()[i].Name))
	}
	return acts, nil
}
func (p eager) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	for _, c := range v.Ready() {
		for w := range v.Workers() {
			if len(v.Holds(policies.WorkerID(w))) > 0 && v.Holds(policies.WorkerID(w))[0] == c.Model {
				acts = append(acts, policies.Submit(policies.WorkerID(w), c.ID))
			}
		}
	}
	return acts
}

// parentChild is one query: parent P on M0 (prompt 100, output 10) and child C on M1, which
// has a 2000-token prompt of its own and reads P's 10 output tokens, and writes 5.
func parentChild(gate bool) *traces.Workload {
	wl := &traces.Workload{Name: "overlap", Queries: []traces.Query{{ID: 0, Gold: "A", Calls: []traces.Call{
		{Role: "parent", Model: "M0", PromptTokens: 100, OutputTokens: 10, Answer: "A"},
		{Role: "child", Model: "M1", PromptTokens: 2000, OutputTokens: 5, Answer: "A", Gate: gate,
			Inputs: []traces.Input{{From: 0, Tokens: 10}}},
	}}}}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

func runOverlap(t *testing.T, wl *traces.Workload, rule policies.Rule, overlap bool) *policies.Result {
	t.Helper()
	infos, setups := setup(t, 2)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(2, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewDriver(cl, eager{models: 2}, rule, wl, infos, 2)
	require.NoError(t, err)
	d.SetOverlap(overlap)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	return res
}

// Prefill-decode overlap on a hand-computed case. Without it the child is released when the
// parent ends and then prefills its whole 2010-token prompt; with it the child's 2000 own
// tokens are prefilled from the moment its model is loaded, while the parent runs on the other
// worker, and only the parent's 10 forwarded tokens remain when both are done. Iteration times
// come from the cost model's batches.
func TestOverlapTiming(t *testing.T) {
	infos, _ := setup(t, 2)
	cm := infos[0].Cost
	// One sequence: c new tokens after prior cached ones; an open sequence samples nothing.
	chunk := func(prior, c, sampled int) time.Duration {
		p, n := float64(prior), float64(c)
		return time.Duration(math.Round(cm.IterationSeconds(sim.Batch{Tokens: c, AttentionPairs: n*p + n*(n+1)/2,
			KVTokens: p + n, Seqs: 1, Sampled: sampled}) * 1e9))
	}
	prefill := func(prior, c int) time.Duration { return chunk(prior, c, 1) }
	decode := func(ctx int) time.Duration { // one sequence decoding with ctx tokens before its new one
		return time.Duration(math.Round(cm.IterationSeconds(sim.Batch{Tokens: 1, AttentionPairs: float64(ctx + 1),
			KVTokens: float64(ctx + 1), Seqs: 1, Sampled: 1}) * 1e9))
	}
	load := infos[0].LoadTime
	// The parent: a 100-token prefill that samples its first token, then 9 decodes.
	parentEnd := load + prefill(0, 100)
	for i := range 9 {
		parentEnd += decode(100 + i)
	}
	childDecodes := func(prompt int) (d time.Duration) {
		for i := range 4 {
			d += decode(prompt + i)
		}
		return d
	}
	base := runOverlap(t, parentChild(false), policies.NeverSkip(), false)
	over := runOverlap(t, parentChild(false), policies.NeverSkip(), true)
	const tol = 2 * time.Microsecond // closed-form decode stretches round to the nanosecond
	for _, res := range []*policies.Result{base, over} {
		require.Len(t, res.Calls, 2)
		assert.InDelta(t, float64(parentEnd), float64(res.Calls[0].Timing.End), float64(tol), "the parent is the same either way")
	}
	wantBase := parentEnd + prefill(0, 2010) + childDecodes(2010)
	// With overlap the child's own 2000 tokens are prefilled from the load on; that iteration
	// (about 144 ms) outlasts the parent (about 110 ms), so the parent's 10 tokens join at
	// its end.
	ownDone := load + chunk(0, 2000, 0)
	require.Greater(t, ownDone, parentEnd, "the case assumes the own-prompt prefill outlasts the parent")
	wantOver := ownDone + prefill(2000, 10) + childDecodes(2010)
	assert.InDelta(t, float64(wantBase), float64(base.Calls[1].Timing.End), float64(tol))
	assert.InDelta(t, float64(wantOver), float64(over.Calls[1].Timing.End), float64(tol))
	assert.Equal(t, load, over.Calls[1].Timing.Submitted, "submitted open when its model was loaded, before the parent ended")
	assert.Equal(t, 2010, over.Calls[1].Call.InputTokens)
	assert.Less(t, over.Summary().E2E, base.Summary().E2E)
	t.Logf("child end: %v without overlap, %v with (parent ends %v)", base.Calls[1].Timing.End, over.Calls[1].Timing.End, parentEnd)
}

// A gated child submitted open and then skipped by its rule leaves its worker: the query's
// answer is the parent's, nothing is left in flight, and the run ends when the parent does.
func TestOverlapSkippedChild(t *testing.T) {
	res := runOverlap(t, parentChild(true), policies.ConfidenceSkip{Threshold: 1}, true)
	require.Len(t, res.Calls, 1, "the skipped child has no call record")
	assert.Equal(t, "A", res.Queries[0].Final)
	assert.Equal(t, 1, res.Summary().SkippedCalls)
	assert.Equal(t, res.Calls[0].Timing.End, res.Summary().E2E)
}

// Overlap needs a backend that can grow a prompt.
func TestOverlapNeedsGrower(t *testing.T) {
	infos, setups := setup(t, 2)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(2, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewDriver(noGrow{cl}, eager{models: 2}, policies.NeverSkip(), parentChild(false), infos, 2)
	require.NoError(t, err)
	d.SetOverlap(true)
	_, err = d.Run(context.Background())
	assert.ErrorContains(t, err, "cannot")
}

type noGrow struct{ policies.Backend }
