package simulated_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// canceller serves every call on worker 0 and, when the first call finishes, cancels call
// victim (submitted) and call queued (never submitted: it holds it back).
type canceller struct {
	victim, queued int
	cancelled      bool
	events         []policies.Event
}

func (p *canceller) Name() string { return "canceller" }
func (p *canceller) Start(v policies.View) ([]policies.Action, error) {
	return []policies.Action{policies.Load(0, "M0")}, nil
}
func (p *canceller) OnEvent(e policies.Event, v policies.View) []policies.Action {
	p.events = append(p.events, e)
	var acts []policies.Action
	if e.Kind == policies.EventDone && !p.cancelled {
		p.cancelled = true
		acts = append(acts, policies.Cancel(p.victim), policies.Cancel(p.queued))
	}
	if len(v.Holds(0)) == 0 {
		return acts
	}
	for _, c := range v.Ready() {
		if c.ID != p.queued {
			acts = append(acts, policies.Submit(0, c.ID))
		}
	}
	return acts
}

// One query of three calls on one model and no aggregator: a short, a long and a held-back
// one.
func cancelWorkload() *traces.Workload {
	wl := &traces.Workload{Name: "c", Queries: []traces.Query{{ID: 0, Calls: []traces.Call{
		{Role: "a", Model: "M0", PromptTokens: 100, OutputTokens: 50, Answer: "A"},
		{Role: "b", Model: "M0", PromptTokens: 100, OutputTokens: 3000, Answer: "A"},
		{Role: "c", Model: "M0", PromptTokens: 100, OutputTokens: 3000, Answer: "B"},
	}}}}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

// A cancelled call stops at the next iteration with the tokens it produced, frees its KV
// blocks, and is recorded as cancelled; one never submitted does not run; the Driver's counts
// stay exact and the run ends when the short call ends, not when the long one would have.
func TestCancellation(t *testing.T) {
	infos, setups := setup(t, 1)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(1, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	p := &canceller{victim: 1, queued: 2}
	d, err := policies.NewDriver(cl, p, policies.NeverSkip(), cancelWorkload(), infos, 1)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, res.Calls, 2, "the held-back call never ran")
	short, long := res.Calls[0], res.Calls[1]
	assert.Equal(t, "done", short.Status)
	assert.Equal(t, 50, short.Produced)
	assert.Equal(t, "cancelled", long.Status)
	assert.Equal(t, 50, long.Produced, "batched with the short call, it had produced as many tokens when that one finished")
	assert.Equal(t, short.Timing.End, long.Timing.End, "stopped at the iteration boundary where the short call ended")
	var kinds []string
	var queuedEvent, victimEvent *policies.Event
	for i, e := range p.events {
		kinds = append(kinds, e.Kind.String())
		if e.Kind == policies.EventCancelled {
			switch e.Call.ID {
			case 2:
				queuedEvent = &p.events[i]
			case 1:
				victimEvent = &p.events[i]
			}
		}
	}
	require.NotNil(t, queuedEvent, "%v", kinds)
	require.NotNil(t, victimEvent, "%v", kinds)
	assert.Equal(t, policies.WorkerID(-1), queuedEvent.Worker, "never submitted")
	assert.Equal(t, policies.WorkerID(0), victimEvent.Worker)
	assert.Equal(t, 50, victimEvent.Produced)
	s := res.Summary()
	assert.Equal(t, 1, s.CancelledCalls)
	assert.Equal(t, short.Timing.End, s.E2E)
	assert.Equal(t, "A", res.Queries[0].Final, "the cancelled calls do not vote: only the done call's A")
	assert.Equal(t, 1.0, res.Queries[0].Confidence)
}

// Cancelling is checked like any action: a finished call cannot be cancelled.
func TestCancelChecks(t *testing.T) {
	infos, setups := setup(t, 1)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(1, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	p := &canceller{victim: 0, queued: 2} // call 0 is the one that finished
	d, err := policies.NewDriver(cl, p, policies.NeverSkip(), cancelWorkload(), infos, 1)
	require.NoError(t, err)
	_, err = d.Run(context.Background())
	assert.ErrorContains(t, err, "cancel call 0: the call is done")
}

// Runtime early exit: once two experts agree, the third is cancelled and the aggregator goes
// on with two inputs. Under round-robin and online, every query completes, each cancelled
// call is recorded with the tokens it produced, and the run is shorter than without it.
func TestEarlyExit(t *testing.T) {
	// Expert 2 of every query is long; experts 0 and 1 agree (agreeEvery 0: all answer A).
	out := func(q, i int) int {
		if i == 2 {
			return 3000
		}
		return 100 + 10*q
	}
	for _, mk := range []func() policies.Policy{
		func() policies.Policy { return roundrobin.New() },
		func() policies.Policy { return online.New(online.Options{}) },
	} {
		base := run(t, mk(), policies.NeverSkip(), workload(12, 3, 3, out, 0), 3, 3)
		infos, setups := setup(t, 3)
		cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(3, setups), UnloadTime: time.Second})
		require.NoError(t, err)
		pol := mk()
		d, err := policies.NewDriver(cl, pol, policies.NeverSkip(), workload(12, 3, 3, out, 0), infos, 3)
		require.NoError(t, err)
		d.SetEarlyExit(&policies.EarlyExit{Agreement: 1, MinFinished: 2})
		res, err := d.Run(context.Background())
		require.NoError(t, err, pol.Name())
		s, b := res.Summary(), base.Summary()
		assert.Positive(t, s.CancelledCalls, pol.Name())
		assert.Less(t, s.E2E, b.E2E, "%s: early exit shortens the run", pol.Name())
		for _, c := range res.Calls {
			if c.Status == "cancelled" {
				assert.Less(t, c.Produced, c.Call.OutputTokens, pol.Name())
				assert.Equal(t, 2, c.Call.Node, "only the long expert is cancelled")
			}
			if c.Call.Role == traces.RoleAggregator {
				assert.Equal(t, 100+2*50, c.Call.InputTokens, "%s: the aggregator reads the two experts that answered", pol.Name())
			}
		}
		for _, q := range res.Queries {
			assert.Equal(t, "A", q.Final)
		}
	}
}
