package online

import (
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
	"github.com/mosaic-sched/mosaic/policies"
)

// queue is one model's ready calls in dispatch order: by rank (what the policy's Order makes
// of a call: minus its layer for OrderDeepest, its program's attained-service level for
// OrderPLAS, ...), then by its query's arrival, then by release order. The calls wait in refs,
// whose free slots are reused; the order is kept on small keys: a run of keys pushed in order
// (a model's first-layer calls as queries arrive) waits in the FIFO run, the rest in a heap,
// and pop takes the smaller head of the two, so that a long backlog of arrivals costs no heap
// operations.
//
// With starvation guarding on (guard), every call also waits in fifo, in the order it was
// queued, where promote finds the oldest: a call taken from its place is left in the other
// structure and skipped there (its slot's seq no longer matches).
type queue struct {
	calls []queued // heap
	run   []queued // run[head:] is sorted
	head  int
	refs  []waiting
	free  []int32
	seq   int
	n     int
	// fifo (starvation guarding only) holds every queued call in release order from fhead.
	fifo  []queued
	fhead int
	guard bool
	// since is when the queue last became non-empty.
	since time.Duration
}

// waiting is what the policy keeps of a queued call (a CallRef is ten words): seq is its
// entry's release number while it waits, 0 once it has left.
type waiting struct {
	id, query int
	open      bool
	seq       int
	ready     time.Duration
	// rank is the call's rank (see queue), which an engine that schedules by priority gets as
	// its priority.
	rank int64
}

// queued is a queued call's place in its queue: its rank, its query's arrival, its release
// order, and its slot in queue.refs.
type queued struct {
	rank    int64
	arrival time.Duration
	seq     int
	slot    int32
}

// queuedLess orders a queue: the lowest rank first, then the oldest query, then release order.
func queuedLess(a, b *queued) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	return a.seq < b.seq
}

// len is how many calls are queued.
func (q *queue) len() int { return q.n }

// push queues call c of rank rank, of a query that arrived at arrival.
func (q *queue) push(c policies.CallRef, rank int64, arrival time.Duration) {
	q.add(waiting{id: c.ID, query: c.Query, open: c.Open, ready: c.Ready}, rank, arrival)
}

// add queues w at rank rank with order key arrival.
func (q *queue) add(w waiting, rank int64, arrival time.Duration) {
	q.seq++
	w.seq, w.rank = q.seq, rank
	var slot int32
	if n := len(q.free); n > 0 {
		slot, q.free = q.free[n-1], q.free[:n-1]
		q.refs[slot] = w
	} else {
		slot = int32(len(q.refs))
		q.refs = append(q.refs, w)
	}
	q.n++
	e := queued{rank: rank, arrival: arrival, seq: q.seq, slot: slot}
	if q.guard {
		q.fifo = append(q.fifo, e)
	}
	if n := len(q.run); n == q.head || !queuedLess(&e, &q.run[n-1]) {
		q.run = append(q.run, e) // after the run's last (seq breaks every tie)
		return
	}
	q.calls = heapx.Push(q.calls, e, queuedLess)
}

// live reports whether entry e still stands for a waiting call.
func (q *queue) live(e *queued) bool { return q.refs[e.slot].seq == e.seq }

// take removes the call of entry e from the queue and returns it.
func (q *queue) take(e queued) waiting {
	w := q.refs[e.slot]
	q.refs[e.slot].seq = 0
	q.free = append(q.free, e.slot)
	q.n--
	return w
}

// pop removes and returns the first call of the non-empty queue.
func (q *queue) pop() waiting {
	for {
		var e queued
		if q.head < len(q.run) && (len(q.calls) == 0 || queuedLess(&q.run[q.head], &q.calls[0])) {
			e = q.run[q.head]
			q.head++
			if q.head == len(q.run) {
				q.run, q.head = q.run[:0], 0
			} else if q.head >= 1024 && 2*q.head >= len(q.run) {
				q.run = q.run[:copy(q.run, q.run[q.head:])]
				q.head = 0
			}
		} else {
			q.calls, e = heapx.Pop(q.calls, queuedLess)
		}
		if q.live(&e) {
			w := q.take(e)
			if q.n == 0 {
				q.reset()
			}
			return w
		}
	}
}

// promote moves to rank 0, behind the calls queued there (order key now), those of the n
// oldest queued calls (by release) of a rank above 0 for which starved holds (starvation
// guarding only).
func (q *queue) promote(n int, now time.Duration, starved func(w waiting) bool) {
	var hit []queued
	for i, seen := q.fhead, 0; i < len(q.fifo) && seen < n; i++ {
		e := &q.fifo[i]
		if !q.live(e) {
			if i == q.fhead {
				q.fhead++
			}
			continue
		}
		seen++
		if e.rank > 0 && starved(q.refs[e.slot]) {
			hit = append(hit, *e)
		}
	}
	for _, e := range hit {
		q.add(q.take(e), 0, now)
	}
	if q.fhead >= 1024 && 2*q.fhead >= len(q.fifo) {
		q.fifo = q.fifo[:copy(q.fifo, q.fifo[q.fhead:])]
		q.fhead = 0
	}
}

// reset drops the entries of calls that left through the other structure, once none waits.
func (q *queue) reset() {
	q.fifo, q.fhead = q.fifo[:0], 0
	q.run, q.head, q.calls = q.run[:0], 0, q.calls[:0]
}
