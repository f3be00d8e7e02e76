package online

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
)

// indexWorkers builds the policy's worker indexes (each model's servers, the free and wanting
// sets) from its workers' states, for tests that set the workers up by hand.
func indexWorkers(p *Policy) {
	p.free, p.wanting = newWorkerSet(len(p.workers)), newWorkerSet(len(p.workers))
	for _, m := range p.models {
		m.servers = nil
	}
	for _, wk := range p.workers {
		if wk.am != nil {
			wk.am.servers = append(wk.am.servers, wk)
		}
		p.touch(wk)
	}
}

// has reports whether worker id is in the set.
func (s workerSet) has(id policies.WorkerID) bool { return s[int(id)>>6]&(1<<(uint(id)&63)) != 0 }

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
		if p.wanting.has(wk.id) != (wk.want != "") {
			return fmt.Errorf("worker %d: in the wanting set %v, wants %q", wk.id, p.wanting.has(wk.id), wk.want)
		}
	}
	for w := len(p.workers); w < 64*len(p.free); w++ {
		if id := policies.WorkerID(w); p.free.has(id) || p.wanting.has(id) {
			return fmt.Errorf("no worker %d, but it is in a set", w)
		}
	}
	return nil
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
