package simulated_test

import (
	"context"
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

// reversePriority loads M0 on worker 0 and submits every ready call there with priority -ID:
// an engine that schedules by priority serves the later calls first.
type reversePriority struct{}

func (reversePriority) Name() string { return "reverse-priority" }

func (reversePriority) Start(policies.View) ([]policies.Action, error) {
	return []policies.Action{policies.Load(0, "M0")}, nil
}

func (reversePriority) OnEvent(_ policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	for _, c := range v.Ready() {
		if v.Holding(0, c.Model) {
			acts = append(acts, policies.SubmitPriority(0, c.ID, -c.ID))
		}
	}
	return acts
}

// fourCalls is one query of four independent calls on M0, ready at once.
func fourCalls(t *testing.T) *traces.Workload {
	t.Helper()
	q := traces.Query{ID: 0, Gold: "A"}
	for range 4 {
		q.Calls = append(q.Calls, traces.Call{Role: traces.RoleExpert, Model: "M0", PromptTokens: 100, OutputTokens: 50, Answer: "A"})
	}
	wl := &traces.Workload{Name: "four", Queries: []traces.Query{q}}
	require.NoError(t, wl.Finish())
	return wl
}

// The Driver hands each call's Action.Priority to the cluster, whose priority engine serves
// the waiting calls by it: with one sequence at a time, the calls submitted together with
// priorities 0, -1, -2, -3 run 3, 2, 1, 0, each starting when the previous one ends.
func TestDriverPassesPriority(t *testing.T) {
	infos, setups := setup(t, 1)
	ec := setups["M0"].Engine
	ec.MaxNumSeqs, ec.SchedulingPolicy = 1, sim.SchedulingPriority
	setups["M0"] = simulated.ModelSetup{Cost: setups["M0"].Cost, Engine: ec}
	infos[0].Engine = ec
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(1, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewDriver(cl, reversePriority{}, policies.NeverSkip(), fourCalls(t), infos, 1)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, res.Calls, 4)
	calls := slices.Clone(res.Calls)
	slices.SortFunc(calls, func(a, b policies.CallRecord) int { return int(a.Timing.Started - b.Timing.Started) })
	var order []int
	for i, c := range calls {
		order = append(order, c.Call.ID)
		assert.Equal(t, calls[0].Timing.Submitted, c.Timing.Submitted, "submitted together")
		if i > 0 {
			assert.Equal(t, calls[i-1].Timing.End, c.Timing.Started, "call %d starts when call %d ends", c.Call.ID, calls[i-1].Call.ID)
		}
	}
	assert.Equal(t, []int{3, 2, 1, 0}, order)
}

// An engine that schedules first come first served refuses a call with a priority other than
// 0, naming the call and the worker; so does the Driver's run of a policy that sets one.
func TestFCFSClusterRefusesPriority(t *testing.T) {
	cl, _ := loaded(t, 1)
	err := cl.Submit(0, &traces.Call{ID: 9, Query: 2, Model: "M0", InputTokens: 64, OutputTokens: 8}, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "call 9 (query 2, M0) on worker 0")
	assert.Contains(t, err.Error(), "priority 4")
	require.NoError(t, cl.Submit(0, &traces.Call{ID: 9, Query: 2, Model: "M0", InputTokens: 64, OutputTokens: 8}, 0),
		"the refused call is not in flight")

	infos, setups := setup(t, 1)
	fcfs, err := simulated.New(simulated.Config{Workers: simulated.Identical(1, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewDriver(fcfs, reversePriority{}, policies.NeverSkip(), fourCalls(t), infos, 1)
	require.NoError(t, err)
	_, err = d.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "on worker 0: request 1: priority -1, but the engine schedules first come first served")
}
