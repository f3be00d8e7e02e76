package online

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
)

// TestQueueOrder pushes calls in a scrambled order and checks they come out deepest layer
// first, then the oldest query's, then in release order, with calls pushed after some were
// popped (reusing their slots) in their place.
func TestQueueOrder(t *testing.T) {
	var q queue
	type in struct{ id, layer int }
	// arrival of call id's query: 10s for ids < 10, else 5s (an older query).
	arrival := func(id int) time.Duration {
		if id < 10 {
			return 10 * time.Second
		}
		return 5 * time.Second
	}
	push := func(calls ...in) {
		for _, c := range calls {
			q.push(policies.CallRef{ID: c.id, Layer: c.layer, Model: "M"}, -int64(c.layer), arrival(c.id))
		}
	}
	var got []int
	pop := func(n int) {
		for ; n > 0 && q.len() > 0; n-- {
			got = append(got, q.pop().id)
		}
	}
	push(in{1, 0}, in{11, 0}, in{2, 1}, in{3, 0}, in{12, 1}, in{13, 0}, in{4, 1})
	pop(2)
	push(in{5, 1}, in{14, 0})
	pop(100)
	// Layer 1: 12 (older query), then 2; then 4 and 5 in release order; layer 0: 11, 13, 14
	// (the older query), then 1, 3.
	assert.Equal(t, []int{12, 2, 4, 5, 11, 13, 14, 1, 3}, got)
	assert.Len(t, q.refs, 7, "slots are reused")
}

// TestQueueRandomOrder pushes and pops random calls, mostly in order (arrivals) with others
// out of order (later layers, older queries), and checks every pop against a sorted
// reference: the run of in-order keys and the heap together give the queue's order.
func TestQueueRandomOrder(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var q queue
		var ref []queued // what the queue holds, by the key the queue gives it
		now := time.Duration(0)
		runs, heaped := 0, 0
		for i := range 8000 {
			// A backlog builds up, then drains (the run is compacted as it is popped).
			push := r.IntN(3) > 0
			if i >= 4000 {
				push = r.IntN(4) == 0
			}
			if push || len(ref) == 0 {
				layer, arrival := 0, now
				if r.IntN(4) == 0 {
					layer = 1 + r.IntN(2) // a later layer's call of an older query
					arrival = now - time.Duration(r.IntN(100))*time.Second
				} else {
					now += time.Duration(r.IntN(3)) * time.Second // ties too
				}
				before := len(q.calls)
				q.push(policies.CallRef{ID: q.seq + 1, Layer: layer, Model: "M"}, -int64(layer), arrival)
				if len(q.calls) > before {
					heaped++
				} else {
					runs++
				}
				ref = append(ref, queued{arrival: arrival, seq: q.seq, rank: -int64(layer)})
				continue
			}
			i := 0
			for j := range ref {
				if queuedLess(&ref[j], &ref[i]) {
					i = j
				}
			}
			c := q.pop()
			require.Equal(t, ref[i].seq, c.id, "seed %d", seed)
			ref = append(ref[:i], ref[i+1:]...)
			require.Equal(t, len(ref), q.len())
		}
		require.Positive(t, runs, "seed %d: pushes joined the run", seed)
		require.Positive(t, heaped, "seed %d: pushes went to the heap", seed)
	}
}

// TestOnlineLargeRun runs the online policy over 2,000 generated MoA queries on four workers
// of the simulated cluster with the invariants of any run (policytest.CheckLargeRun, without
// the layer barrier: this policy has none), and checks the policy's own rules: no worker has
// more calls in flight than MaxInFlight, a worker never serves two models at once, and calls
// do cross layers (an aggregator starts while expert calls of other queries still run).
func TestOnlineLargeRun(t *testing.T) {
	const maxInFlight = 8
	p := New(Options{MaxInFlight: maxInFlight})
	res := policytest.RunLargeWith(t, p, false)
	require.NotEmpty(t, p.Placements(), "the policy records its placement")

	type edge struct {
		t     time.Duration
		delta int
		model string
	}
	perWorker := map[policies.WorkerID][]edge{}
	for _, c := range res.Calls {
		w := c.Worker
		perWorker[w] = append(perWorker[w], edge{c.Timing.Submitted, +1, c.Call.Model}, edge{c.Timing.End, -1, c.Call.Model})
	}
	require.Len(t, perWorker, policytest.LargeWorkers, "every worker serves calls")
	for w, es := range perWorker {
		// Ends before submissions at one instant: a finished call's slot is free again.
		slices.SortFunc(es, func(a, b edge) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.delta, b.delta)) })
		n, peak := 0, 0
		models := map[string]int{}
		for _, e := range es {
			n += e.delta
			peak = max(peak, n)
			models[e.model] += e.delta
			if models[e.model] == 0 {
				delete(models, e.model)
			}
			require.LessOrEqual(t, len(models), 1, "worker %d has calls of %v in flight at %v", w, models, e.t)
		}
		require.LessOrEqual(t, peak, maxInFlight, "worker %d", w)
		require.Equal(t, maxInFlight, peak, "worker %d never fills its %d slots", w, maxInFlight)
	}

	lastExpert := time.Duration(0)
	firstAgg := time.Duration(1<<63 - 1)
	for _, c := range res.Calls {
		if c.Call.Layer == 0 {
			lastExpert = max(lastExpert, c.Timing.End)
		} else {
			firstAgg = min(firstAgg, c.Timing.Started)
		}
	}
	require.Less(t, firstAgg, lastExpert, "no aggregator started before the last expert call ended: a barrier")
}

// TestOnlineLeastOutstanding checks dispatch among replicas: each call goes to the replica
// with the least expected outstanding work that has room.
func TestOnlineLeastOutstanding(t *testing.T) {
	p := New(Options{MaxInFlight: 2})
	m := &model{name: "M", meanOut: 100, limit: 2, limitOn: []int{2, 2, 2}, runs: []bool{true, true, true}}
	setModels(p, m)
	p.dropped = map[int]bool{}
	p.held = map[int][]policies.CallRef{}
	for w := range 3 {
		p.workers = append(p.workers, &worker{id: policies.WorkerID(w), active: "M", am: m, held: []string{"M"}})
	}
	// Worker 0 has 250 tokens outstanding in one call, worker 1 none, worker 2 is loading.
	p.flight.Set(100, 250)
	p.workers[0].inflight, p.workers[0].outstanding = 1, 250
	p.workers[2].loading = true
	indexWorkers(p)
	var calls []policies.CallRef
	for i := range 4 {
		calls = append(calls, policies.CallRef{ID: i, Query: i, Model: "M", Ready: time.Duration(i)})
	}
	p.enqueue(calls)
	acts := p.dispatch(nil, nil)
	// Call 0 to worker 1 (0 outstanding < 250), call 1 to worker 1 too (100 < 250), call 2 to
	// worker 0 (worker 1 has less, 200, but is full at 2), call 3 waits (both full, worker 2
	// still loading).
	want := []policies.Action{policies.Submit(1, 0), policies.Submit(1, 1), policies.Submit(0, 2)}
	assert.Equal(t, want, acts)
	assert.Equal(t, 1, m.len(), "call 3 waits")
	assert.InDelta(t, 350, p.workers[0].outstanding, 1e-9)
	assert.InDelta(t, 200, p.workers[1].outstanding, 1e-9)
}

// TestOnlineForgetsFinishedQueries checks that, once a run is over, the policy keeps nothing
// by query or call ID: what it keeps of a query goes when its final call is queued or skipped
// (a run of a million queries must not grow with them), in each order.
func TestOnlineForgetsFinishedQueries(t *testing.T) {
	for _, order := range []string{OrderDeepest, OrderPLAS} {
		t.Run(order, func(t *testing.T) {
			p := New(Options{Order: order})
			res := policytest.RunLargeWith(t, p, false)
			require.Positive(t, res.Summary().AggregatorSkipped, "the run skips aggregators")
			for name, s := range map[string]interface{ Pages() int }{"arrival": &p.arrival, "flight": &p.flight,
				"service": &p.service, "waited": &p.waited, "before": &p.before, "unsent": &p.unsent} {
				assert.Zero(t, s.Pages(), "%s still holds pages of entries after the run", name)
			}
		})
	}
}
