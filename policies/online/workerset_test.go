package online

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/names"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
	"github.com/mosaic-sched/mosaic/simulated"
)

// indexWorkers builds the policy's worker indexes (each model's servers, the free and wanting
// sets) from its workers' states, for tests that set the workers up by hand.
func indexWorkers(p *Policy) {
	n := len(p.workers)
	p.free, p.wanting, p.moved, p.visit = newWorkerSet(n), newWorkerSet(n), newWorkerSet(n), newWorkerSet(n)
	if p.plan == nil {
		p.plan = make([][]*model, n)
	}
	for _, m := range p.models {
		m.servers, m.plannedSet = nil, newWorkerSet(n)
		for _, wk := range m.planned {
			m.plannedSet.put(wk.id, true)
		}
	}
	for _, wk := range p.workers {
		if wk.am != nil {
			wk.am.servers = append(wk.am.servers, wk)
		}
		p.touch(wk)
		p.noteMoved(wk)
	}
}

// checkIndexes reports where the policy's worker indexes differ from what its workers' states
// give.
func checkIndexes(p *Policy) error {
	for _, m := range p.models {
		var want []*worker
		for _, wk := range p.workers {
			if wk.am == m {
				want = append(want, wk)
			}
		}
		if !slices.Equal(want, m.servers) {
			return fmt.Errorf("model %s: servers %v, want %v", m.name, ids(m.servers), ids(want))
		}
	}
	if len(p.free) != (len(p.workers)+63)/64 || len(p.wanting) != len(p.free) {
		return fmt.Errorf("sets of %d and %d words for %d workers", len(p.free), len(p.wanting), len(p.workers))
	}
	for _, wk := range p.workers {
		free := wk.inflight == 0 && !wk.loading && wk.want == "" && wk.unloading == ""
		if p.free.has(wk.id) != free {
			return fmt.Errorf("worker %d: in the free set %v, free %v (%+v)", wk.id, p.free.has(wk.id), free, *wk)
		}
		if serving := !wk.loading && wk.want == "" && wk.am != nil && slices.Contains(wk.held, wk.active); wk.serving != serving {
			return fmt.Errorf("worker %d: serving %v, want %v (%+v)", wk.id, wk.serving, serving, *wk)
		}
		if p.wanting.has(wk.id) != (wk.want != "") {
			return fmt.Errorf("worker %d: in the wanting set %v, wants %q", wk.id, p.wanting.has(wk.id), wk.want)
		}
	}
	for _, wk := range p.workers {
		plan := p.plan[wk.id]
		if moved := wk.am != nil && len(plan) > 0 && !slices.Contains(plan, wk.am); p.moved.has(wk.id) != moved {
			return fmt.Errorf("worker %d: in the moved set %v, serving %v with plan %v", wk.id, p.moved.has(wk.id), wk.active, modelNames(plan))
		}
	}
	for _, m := range p.models {
		if len(m.plannedSet) != len(p.free) {
			return fmt.Errorf("model %s: planned set of %d words", m.name, len(m.plannedSet))
		}
		for _, wk := range p.workers {
			if in := slices.Contains(m.planned, wk); m.plannedSet.has(wk.id) != in {
				return fmt.Errorf("model %s: worker %d in the planned set %v, planned %v", m.name, wk.id, m.plannedSet.has(wk.id), in)
			}
		}
	}
	for w := len(p.workers); w < 64*len(p.free); w++ {
		if id := policies.WorkerID(w); p.free.has(id) || p.wanting.has(id) || p.moved.has(id) {
			return fmt.Errorf("no worker %d, but it is in a set", w)
		}
	}
	return nil
}

// setModels gives p the models ms, in order, as Start gives it the experiment's.
func setModels(p *Policy, ms ...*model) {
	p.models, p.byName = ms, names.Index{}
	for _, m := range ms {
		p.byName.Add(m.name)
	}
}

// modelNames lists the models' names.
func modelNames(ms []*model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

func ids(ws []*worker) []policies.WorkerID {
	var out []policies.WorkerID
	for _, wk := range ws {
		out = append(out, wk.id)
	}
	return out
}

// indexChecked is the policy, with its worker indexes checked after Start and every event.
type indexChecked struct {
	*Policy
	t      testing.TB
	events int
}

func (c *indexChecked) Start(v policies.View) ([]policies.Action, error) {
	acts, err := c.Policy.Start(v)
	require.NoError(c.t, checkIndexes(c.Policy), "after Start")
	return acts, err
}

func (c *indexChecked) OnEvent(e policies.Event, v policies.View) []policies.Action {
	acts := c.Policy.OnEvent(e, v)
	c.events++
	if err := checkIndexes(c.Policy); err != nil {
		c.t.Fatalf("after event %d (%s at %v): %v", c.events, e.Kind, e.At, err)
	}
	return acts
}

// TestWorkerIndexes runs the policy over 2,000 MoA queries on the simulated cluster, under
// each placement and a stealing, re-planning and attained-service configuration, and checks
// after every event that the indexes an event's passes visit (each model's servers, the free
// and wanting workers) are what the workers' states give: a change of a worker's state that
// misses its touch fails here.
func TestWorkerIndexes(t *testing.T) {
	for name, o := range map[string]Options{
		"mosaic":      {},
		"everywhere":  {Placement: PlaceEverywhere, Steal: -1, Replan: -1},
		"round-robin": {Placement: PlaceRoundRobin, Steal: -1, Replan: -1, Order: OrderFCFS},
		"plas":        {Order: OrderPLAS, MaxInFlight: 4},
	} {
		t.Run(name, func(t *testing.T) {
			c := &indexChecked{Policy: New(o), t: t}
			policytest.RunLargeWith(t, c, false)
			require.Greater(t, c.events, 4000, "events checked")
		})
	}
}

// TestIdleVisit has swaps ask the idle workers that idleVisit leaves out too, at their turn in
// the visit, over runSpreads' runs: none may have a model to go to.
func TestIdleVisit(t *testing.T) {
	skipped := 0
	runSpreads(t, func(t *testing.T) {
		checkSkipped = func(wk *worker, target *model) {
			skipped++
			if target != nil && target != wk.am {
				t.Fatalf("worker %d (serving %s) was not asked, but would go to %s", wk.id, wk.active, target.name)
			}
		}
	})
	checkSkipped = nil
	require.Greater(t, skipped, 10000, "idle workers left out of the visits")
}

// TestIdleVisitFirstReplica checks the visit of a model with calls waiting, no replica and a
// time-sharing worker assigned: not one to steal at the start of the visit, it gets a replica
// and a backlog to steal during it when that worker (0) takes it, and the next idle worker (1),
// assigned only its own model, must be asked too.
func TestIdleVisitFirstReplica(t *testing.T) {
	p := New(Options{Steal: 0.5})
	a := &model{name: "A", meanOut: 1, limit: 2, limitOn: []int{2, 2}, runs: []bool{true, true}}
	b := &model{name: "B", meanOut: 1, limit: 2, limitOn: []int{2, 2}, runs: []bool{true, true}}
	setModels(p, a, b)
	p.dropped, p.held = map[int]bool{}, map[int][]policies.CallRef{}
	for w := range 2 {
		p.workers = append(p.workers, &worker{id: policies.WorkerID(w), active: "A", am: a, held: []string{"A", "B"}})
	}
	indexWorkers(p)
	p.adopt([][]*model{{a, b}, {a}}, map[string]int{"A": 1, "B": 1})
	var calls []policies.CallRef
	for i := range 10 {
		calls = append(calls, policies.CallRef{ID: i, Query: i, Model: "B"})
	}
	p.enqueue(calls)
	p.swaps(nowView{})
	assert.Equal(t, []policies.WorkerID{0, 1}, ids(b.servers), "both workers go to B: 0 as planned, 1 to steal")
}

// nowView is a View at time 0 that answers nothing else (swaps asks only the time when no
// worker needs a load).
type nowView struct{ policies.View }

func (nowView) Now() time.Duration { return 0 }

// TestFullModels checks, each time dispatch passes a model by as full over runSpreads' runs,
// that none of its servers could have taken a call.
func TestFullModels(t *testing.T) {
	passed := 0
	runSpreads(t, func(t *testing.T) {
		checkFull = func(m *model, best *worker) {
			passed++
			if best != nil {
				t.Fatalf("model %s was passed by as full, but worker %d could take a call", m.name, best.id)
			}
		}
	})
	checkFull = nil
	require.Greater(t, passed, 10000, "models passed by")
}

// runSpreads runs the policy, its worker indexes checked, on 4 and 48 workers, 600 queries
// arriving over time so that workers go idle and busy again, under each placement, with
// stealing and frequent re-plans, and with two calls a worker at most (so that models fill
// and are stolen); hook sets a test's hooks for each run, with the run's t.
func runSpreads(t *testing.T, hook func(t *testing.T)) {
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"mosaic", Options{}},
		{"replan", Options{Replan: 30 * time.Second, Steal: 0.5}},
		{"two-a-worker", Options{Replan: 30 * time.Second, Steal: 0.5, MaxInFlight: 2}},
		{"everywhere", Options{Placement: PlaceEverywhere}},
		{"round-robin", Options{Placement: PlaceRoundRobin, Order: OrderFCFS}},
	} {
		for _, workers := range []int{4, 48} {
			t.Run(fmt.Sprintf("%s/%d", c.name, workers), func(t *testing.T) {
				hook(t)
				p := &indexChecked{Policy: New(c.o), t: t}
				runSpread(t, p, workers, 600, 20*time.Millisecond*time.Duration(48/workers))
			})
		}
	}
}

// runSpread runs p over BigMoA's first n queries on a simulated cluster of the given workers,
// a query arriving every gap.
func runSpread(t *testing.T, p policies.Policy, workers, n int, gap time.Duration) {
	t.Helper()
	infos, setups, _ := policytest.LargeInfos(t)
	wl := policytest.BigMoA(t, n)
	for i := range wl.Queries {
		wl.Queries[i].Arrival = time.Duration(i) * gap
	}
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(workers, setups), UnloadTime: policytest.ClusterUnloadTime})
	require.NoError(t, err)
	d, err := policies.NewDriver(cl, p, policies.ConfidenceSkip{Threshold: 1}, wl, infos, workers)
	require.NoError(t, err)
	res, err := d.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, res.Summary().Queries)
}

// TestWorkerSet checks the set's bits across words: put, has, and next, which visits the
// set in ID order (as swaps does), also when the set changes behind the visit.
func TestWorkerSet(t *testing.T) {
	s := newWorkerSet(130)
	require.Len(t, s, 3)
	for _, id := range []policies.WorkerID{0, 5, 63, 64, 100, 129} {
		s.put(id, true)
	}
	s.put(5, false)
	s.put(7, false) // not in: stays out
	var got []int
	for id := s.next(0); id >= 0; id = s.next(id + 1) {
		got = append(got, id)
		s.put(policies.WorkerID(id), false) // as a worker leaves the set when it moves
	}
	assert.Equal(t, []int{0, 63, 64, 100, 129}, got)
	assert.Equal(t, -1, s.next(0), "every visited worker left")
	s.put(129, true)
	assert.True(t, s.has(129))
	assert.False(t, s.has(5))
	assert.Equal(t, 129, s.next(65))
	assert.Equal(t, -1, s.next(130))
	assert.Equal(t, -1, newWorkerSet(0).next(0))
}
