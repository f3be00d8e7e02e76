package solver

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"sync"
)

// memoCapacity is how many plans the process keeps for reuse; the least recently used goes
// first. A plan holds a count and a time per model and worker: a few kilobytes at 32 workers,
// some 10 MB when full.
var memoCapacity = 4096

// memoKey identifies a problem by its full content (memoKeyOf).
type memoKey [sha256.Size]byte

// memoKeyOf hashes everything that decides a plan: the workers, the offsets, the time limit,
// each item (name, calls, load, curve, replication cap, preloads, fits, per-worker costs) and
// the searches' step limits. Lists are prefixed with their lengths and nil ones marked, so
// that two different problems never encode alike.
func memoKeyOf(p *Problem) memoKey {
	h := sha256.New()
	var buf [8]byte
	u := func(x uint64) {
		binary.LittleEndian.PutUint64(buf[:], x)
		h.Write(buf[:])
	}
	i := func(x int) { u(uint64(int64(x))) }
	f := func(x float64) { u(math.Float64bits(x)) }
	floats := func(xs []float64) {
		if xs == nil {
			i(-1)
			return
		}
		i(len(xs))
		for _, x := range xs {
			f(x)
		}
	}
	bools := func(xs []bool) {
		if xs == nil {
			i(-1)
			return
		}
		i(len(xs))
		for _, x := range xs {
			if x {
				i(1)
			} else {
				i(0)
			}
		}
	}
	curve := func(c Curve) {
		i(len(c.X))
		for _, x := range c.X {
			i(x)
		}
		floats(c.T)
	}
	i(p.Workers)
	i(int(p.TimeLimit))
	i(exactNodeLimit)
	i(fillStepLimit)
	floats(p.Offset)
	i(len(p.Items))
	for _, it := range p.Items {
		i(len(it.Name))
		h.Write([]byte(it.Name))
		i(it.Calls)
		f(it.Load)
		curve(it.Curve)
		i(it.MaxReplicas)
		bools(it.Preloaded)
		bools(it.Fits)
		if it.OnWorker == nil {
			i(-1)
		} else {
			i(len(it.OnWorker))
			for _, c := range it.OnWorker {
				f(c.Load)
				curve(c.Curve)
			}
		}
	}
	var k memoKey
	h.Sum(k[:0])
	return k
}

// memo is a process-wide store of plans by problem, bounded (an LRU of memoCapacity), safe
// for concurrent use; a problem being solved has an entry too, so that a second caller waits
// for the first instead of solving it again.
type memo struct {
	mu      sync.Mutex
	entries map[memoKey]*list.Element // of *memoEntry
	order   list.List                 // most recently used first; solved entries only
	solving map[memoKey]chan struct{} // closed when the solve ends
}

type memoEntry struct {
	key  memoKey
	plan *Plan
}

// plans is the process's memo of Solve.
var plans = &memo{entries: map[memoKey]*list.Element{}, solving: map[memoKey]chan struct{}{}}

// claim returns a copy of the plan kept for key, or, when there is none, leader = true: the
// caller is to solve the problem and call release. A caller that finds the problem being
// solved waits for that solve; when it ends without a plan to keep (or ctx ends first), claim
// returns neither and the caller solves on its own.
func (c *memo) claim(ctx context.Context, key memoKey) (plan *Plan, leader bool) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.order.MoveToFront(e)
		plan := e.Value.(*memoEntry).plan.clone()
		c.mu.Unlock()
		return plan, false
	}
	wait, busy := c.solving[key]
	if !busy {
		c.solving[key] = make(chan struct{})
		c.mu.Unlock()
		return nil, true
	}
	c.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*memoEntry).plan.clone(), false
	}
	return nil, false
}

// release ends the leader's solve of key, keeping a copy of plan unless it is nil.
func (c *memo) release(key memoKey, plan *Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if plan != nil {
		if e, ok := c.entries[key]; ok {
			e.Value.(*memoEntry).plan = plan.clone()
			c.order.MoveToFront(e)
		} else {
			c.entries[key] = c.order.PushFront(&memoEntry{key: key, plan: plan.clone()})
			for c.order.Len() > memoCapacity {
				last := c.order.Back()
				c.order.Remove(last)
				delete(c.entries, last.Value.(*memoEntry).key)
			}
		}
	}
	if ch, ok := c.solving[key]; ok {
		close(ch)
		delete(c.solving, key)
	}
}

// reset forgets every kept plan (tests that change how problems are solved).
func (c *memo) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	c.order.Init()
}

// len is the number of kept plans.
func (c *memo) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// clone returns a deep copy of the plan.
func (pl *Plan) clone() *Plan {
	c := *pl
	c.Counts = cloneCounts(pl.Counts)
	c.WorkerTime = append([]float64(nil), pl.WorkerTime...)
	return &c
}
