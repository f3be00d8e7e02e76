package online

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
)

// TestQueueGuardRandom pushes calls with random ranks, pops the first by rank or promotes
// some of the oldest at random, and checks both against a reference list kept in the order
// calls were queued: a promoted call goes to rank 0 behind the calls there, and a call taken
// from one structure never comes out of the other.
func TestQueueGuardRandom(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		q := queue{guard: true}
		type ref struct {
			e  queued
			id int
		}
		var held []ref // in the order queued
		seq, promoted := 0, 0
		now := time.Duration(0)
		for i := range 6000 {
			now += time.Duration(r.IntN(3)) * time.Second
			switch op := r.IntN(5); {
			case op < 2 || len(held) == 0:
				rank, arrival := int64(r.IntN(4)), now-time.Duration(r.IntN(50))*time.Second
				q.push(policies.CallRef{ID: i, Ready: now}, rank, arrival)
				seq++
				held = append(held, ref{queued{rank: rank, arrival: arrival, seq: seq}, i})
			case op == 2:
				// Promote the calls of an ID divisible by 3 among the 5 oldest.
				starved := func(id int) bool { return id%3 == 0 }
				q.promote(5, now, func(w waiting) bool { return starved(w.id) })
				var keep, moved []ref
				for k, h := range held {
					if k < 5 && h.e.rank > 0 && starved(h.id) {
						moved = append(moved, h)
					} else {
						keep = append(keep, h)
					}
				}
				for _, h := range moved {
					seq++
					keep = append(keep, ref{queued{rank: 0, arrival: now, seq: seq}, h.id})
				}
				promoted += len(moved)
				held = keep
			default:
				best := 0
				for k := range held {
					if queuedLess(&held[k].e, &held[best].e) {
						best = k
					}
				}
				w := q.pop()
				require.Equal(t, held[best].id, w.id, "seed %d, step %d", seed, i)
				held = append(held[:best], held[best+1:]...)
			}
			require.Equal(t, len(held), q.len())
		}
		require.Positive(t, promoted, "seed %d", seed)
	}
}

// TestAttainedOrders checks the queue order of the attained-service disciplines on a hand-made
// case. Queries 1, 2 and 3 arrive in that order; query 1 has had 25 s of service (at a 10 s
// quantum the levels end at 10, 20, 40 s: level 2), query 2 5 s (level 0) and query 3 none. PLAS serves query 2 and 3 (level 0, query 2 first: it arrived
// earlier) before query 1. ATLAS measures the longest path instead: query 1's two experts ran
// 12 s and 13 s side by side, a path of 13 s (level 1), so its aggregator still goes after
// queries 2 and 3; FCFS takes queries in arrival order; deepest takes the aggregator first.
func TestAttainedOrders(t *testing.T) {
	expert := func(id, query int, s float64) (policies.CallRef, policies.CallTiming) {
		return policies.CallRef{ID: id, Query: query, Model: "M"}, policies.CallTiming{End: time.Duration(s * float64(time.Second))}
	}
	for _, tc := range []struct {
		order string
		want  []int
	}{
		{OrderPLAS, []int{20, 30, 10}},
		{OrderATLAS, []int{20, 30, 10}},
		{OrderFCFS, []int{10, 20, 30}},
		{OrderDeepest, []int{10, 20, 30}},
	} {
		p := New(Options{Order: tc.order})
		m := &model{name: "M"}
		setModels(p, m)
		for q := 1; q <= 3; q++ {
			p.arrival.Set(q, time.Duration(q)*time.Second)
		}
		// Query 1: two experts (IDs 1, 2) of 12 s and 13 s; query 2: one of 5 s (ID 3).
		for _, x := range []struct {
			id, query int
			s         float64
		}{{1, 1, 12}, {2, 1, 13}, {3, 2, 5}} {
			c, _ := expert(x.id, x.query, x.s)
			p.push(c) // released together
		}
		for _, x := range []struct {
			id, query int
			s         float64
		}{{1, 1, 12}, {2, 1, 13}, {3, 2, 5}} {
			c, tm := expert(x.id, x.query, x.s)
			p.served(&c, tm)
		}
		for m.len() > 0 {
			m.pop()
		}
		if tc.order == OrderPLAS {
			assert.InDelta(t, 25, p.service.Get(1), 1e-9, "the sum of the run times")
			assert.Equal(t, int64(2), p.level(25))
		}
		if tc.order == OrderATLAS {
			assert.InDelta(t, 13, p.service.Get(1), 1e-9, "the longest path")
		}
		// Query 1's aggregator (layer 1), query 2's second-layer call and query 3's first call.
		p.push(policies.CallRef{ID: 10, Query: 1, Layer: 1, Model: "M", Final: true})
		p.push(policies.CallRef{ID: 20, Query: 2, Layer: 1, Model: "M", Final: true})
		p.push(policies.CallRef{ID: 30, Query: 3, Layer: 0, Model: "M"})
		var got []int
		for m.len() > 0 {
			got = append(got, m.pop().id)
		}
		assert.Equal(t, tc.want, got, tc.order)
	}
}

// TestStarvation checks Autellix's anti-starvation rule: a queued call moves to the first
// level, behind the calls there, once its program's waiting time reaches Starve times its
// service.
func TestStarvation(t *testing.T) {
	p := New(Options{Order: OrderPLAS, Starve: 2})
	m := &model{name: "M"}
	m.guard = true
	setModels(p, m)
	p.service.Set(1, 90) // level 4 at 10 s levels (80 <= 90 < 160)
	p.push(policies.CallRef{ID: 1, Query: 1, Model: "M", Ready: 0})
	p.push(policies.CallRef{ID: 2, Query: 2, Model: "M", Ready: time.Second})
	p.push(policies.CallRef{ID: 3, Query: 3, Model: "M", Ready: 2 * time.Second})
	// At 100 s call 1 waited 100 s < 2 x 90 s: the first level goes first.
	v := clockView{now: 100 * time.Second}
	assert.Equal(t, 2, p.next(m, v).id)
	assert.InDelta(t, 99, p.waited.Get(2), 1e-9, "query 2's wait")
	// At 180 s it waited 2 x 90 s: it joins the first level, behind call 3.
	v.now = 180 * time.Second
	assert.Equal(t, 3, p.next(m, v).id)
	c := p.next(m, v)
	assert.Equal(t, 1, c.id)
	assert.Equal(t, int64(0), c.rank, "it carries the first level's priority")
	assert.Equal(t, 0, m.len())
}

// clockView is a View that knows only the time.
type clockView struct {
	policies.View
	now time.Duration
}

func (v clockView) Now() time.Duration { return v.now }

// TestPinnedPlacements checks the static deployments' placements on the large test workload's
// seven models over four workers: round-robin pins model i to worker i mod 4, everywhere puts
// every model on every worker, worker w starting with the w-th.
func TestPinnedPlacements(t *testing.T) {
	for _, tc := range []struct {
		placement string
		check     func(t *testing.T, plan [][]string)
	}{
		{PlaceRoundRobin, func(t *testing.T, plan [][]string) {
			assert.Equal(t, [][]string{{"E0", "E4"}, {"E1", "E5"}, {"E2", "AGG"}, {"E3"}}, plan)
		}},
		{PlaceEverywhere, func(t *testing.T, plan [][]string) {
			for w, models := range plan {
				assert.Len(t, models, 7)
				assert.Equal(t, policytest.LargeModels()[w], models[0], "worker %d starts with model %d", w, w)
			}
		}},
	} {
		p := New(Options{Placement: tc.placement, Order: OrderFCFS, Steal: -1, Replan: -1})
		res := policytest.RunLargeWith(t, p, false)
		require.NotEmpty(t, res.Calls)
		var plan [][]string
		for _, ms := range p.plan {
			var names []string
			for _, m := range ms {
				names = append(names, m.name)
			}
			plan = append(plan, names)
		}
		tc.check(t, plan)
	}
}

// TestEnginePriority: on a model whose engine schedules by priority the policy's submissions
// carry each call's rank as its priority; on an FCFS engine they carry none.
func TestEnginePriority(t *testing.T) {
	for _, byPriority := range []bool{true, false} {
		p := New(Options{Order: OrderPLAS, Starve: -1, MaxInFlight: 4})
		m := &model{name: "M", meanOut: 100, limit: 4, limitOn: []int{4}, runs: []bool{true}, priority: byPriority}
		setModels(p, m)
		p.dropped, p.held = map[int]bool{}, map[int][]policies.CallRef{}
		p.workers = []*worker{{id: 0, active: "M", am: m, held: []string{"M"}}}
		indexWorkers(p)
		p.service.Set(1, 25) // level 2
		p.enqueue([]policies.CallRef{{ID: 10, Query: 1, Model: "M"}, {ID: 20, Query: 2, Model: "M"}})
		acts := p.dispatch(nil, clockView{})
		want := []policies.Action{policies.Submit(0, 20), policies.Submit(0, 10)}
		if byPriority {
			want = []policies.Action{policies.SubmitPriority(0, 20, 0), policies.SubmitPriority(0, 10, 2)}
		}
		assert.Equal(t, want, acts, "engine schedules by priority: %v", byPriority)
	}
}
