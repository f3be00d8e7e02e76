package simulated_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// loaded returns a cluster of workers that each hold model M0.
func loaded(t *testing.T, workers int) (*simulated.Cluster, context.Context) {
	t.Helper()
	_, setups := setup(t, 1)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(workers, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	for w := range workers {
		require.NoError(t, cl.Load(policies.WorkerID(w), "M0"))
	}
	for range workers {
		ev, err := cl.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, policies.EventLoaded, ev.Kind)
	}
	return cl, ctx
}

// The cluster finds a call in flight by its ID, whether the ID is small (a workload's) or
// not, and a call runs in one place at a time.
func TestCallIDs(t *testing.T) {
	cl, ctx := loaded(t, 2)
	const huge = 1 << 40
	small := &traces.Call{ID: 5, Model: "M0", InputTokens: 64, OutputTokens: 32}
	big := &traces.Call{ID: huge, Model: "M0", InputTokens: 64, OutputTokens: 4000}
	require.NoError(t, cl.Submit(0, small, 0))
	require.NoError(t, cl.Submit(0, big, 0))
	assert.EqualError(t, cl.Submit(1, small, 0), "cluster: call 5 is already in flight on worker 0")
	assert.EqualError(t, cl.Submit(1, big, 0), "cluster: call 1099511627776 is already in flight on worker 0")
	assert.EqualError(t, cl.Cancel(1, 5), "cluster: call 5 is not in flight on worker 1")
	assert.EqualError(t, cl.Grow(1, huge, 1, true), "cluster: call 1099511627776 is not in flight on worker 1")

	ev, err := cl.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, policies.EventDone, ev.Kind)
	require.Equal(t, 5, ev.Call.ID)
	require.NoError(t, cl.Cancel(0, huge))
	ev, err = cl.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, policies.EventCancelled, ev.Kind)
	require.Equal(t, huge, ev.Call.ID)
	assert.Positive(t, ev.Produced)

	// Both left worker 0: they may run again elsewhere.
	require.NoError(t, cl.Submit(1, small, 0))
	require.NoError(t, cl.Submit(1, big, 0))
	assert.EqualError(t, cl.Cancel(0, 5), "cluster: call 5 is not in flight on worker 0")
	done := map[int]policies.WorkerID{}
	for len(done) < 2 {
		ev, err := cl.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, policies.EventDone, ev.Kind)
		done[ev.Call.ID] = ev.Worker
	}
	assert.Equal(t, map[int]policies.WorkerID{5: 1, huge: 1}, done)
	_, err = cl.Next(ctx)
	assert.ErrorIs(t, err, policies.ErrIdle)
}

// IDs far apart start in the map and are found there after the slice grows over them; an
// engine with a call in flight, even an open one waiting for its prompt, is not unloaded.
func TestCallIDsSparseThenDense(t *testing.T) {
	cl, ctx := loaded(t, 1)
	ids := []int{5000, 4000, 1 << 30, 8000, 3}
	for _, id := range ids {
		require.NoError(t, cl.Submit(0, &traces.Call{ID: id, Model: "M0", InputTokens: 64, OutputTokens: 100 + id%7}, 0))
	}
	for _, id := range ids {
		assert.EqualError(t, cl.Submit(0, &traces.Call{ID: id, Model: "M0", InputTokens: 1, OutputTokens: 1}, 0),
			fmt.Sprintf("cluster: call %d is already in flight on worker 0", id))
	}
	require.NoError(t, cl.Cancel(0, 5000)) // in the map, though 8000 grew the slice over it
	require.NoError(t, cl.Cancel(0, 1<<30))
	seen := map[int]policies.EventKind{}
	for len(seen) < len(ids) {
		ev, err := cl.Next(ctx)
		require.NoError(t, err)
		seen[ev.Call.ID] = ev.Kind
	}
	assert.Equal(t, map[int]policies.EventKind{5000: policies.EventCancelled, 1 << 30: policies.EventCancelled,
		4000: policies.EventDone, 8000: policies.EventDone, 3: policies.EventDone}, seen)

	// An open call waits for the rest of its prompt: its engine has no work, but the call is
	// in flight, so the model stays.
	require.NoError(t, cl.SubmitOpen(0, &traces.Call{ID: 7, Model: "M0", InputTokens: 32, OutputTokens: 8}, 0))
	_, err := cl.Next(ctx) // the known prompt is prefilled; then nothing is left to do
	require.ErrorIs(t, err, policies.ErrIdle)
	assert.EqualError(t, cl.Unload(0, "M0"), "cluster: M0 on worker 0 still has work")
	require.NoError(t, cl.Grow(0, 7, 16, true))
	ev, err := cl.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, policies.EventDone, ev.Kind)
	require.NoError(t, cl.Unload(0, "M0"))
}
