package sim

import (
	"container/heap"
	"fmt"
	"time"
)

// Queue is the event queue of a discrete-event simulation: a virtual clock and pending events
// of type T ordered by (time, sequence number), so that events scheduled for the same instant
// fire in the order they were scheduled. It reads no wall clock and is not safe for concurrent use.
type Queue[T any] struct {
	now  time.Duration
	next uint64
	h    eventHeap[T]
}

// Event is a scheduled payload.
type Event[T any] struct {
	At      time.Duration
	Seq     uint64
	Payload T
}

// Now is the virtual time: the time of the last event popped.
func (q *Queue[T]) Now() time.Duration { return q.now }

// Len is the number of pending events.
func (q *Queue[T]) Len() int { return len(q.h) }

// Schedule queues payload at time at. Scheduling in the past is a programming error.
func (q *Queue[T]) Schedule(at time.Duration, payload T) {
	if at < q.now {
		panic(fmt.Sprintf("sim: event scheduled at %v, before now %v", at, q.now))
	}
	heap.Push(&q.h, Event[T]{At: at, Seq: q.next, Payload: payload})
	q.next++
}

// Pop removes the earliest event and advances the clock to its time.
func (q *Queue[T]) Pop() (Event[T], bool) {
	if len(q.h) == 0 {
		return Event[T]{}, false
	}
	ev := heap.Pop(&q.h).(Event[T])
	q.now = ev.At
	return ev, true
}

// Peek returns the earliest event without removing it.
func (q *Queue[T]) Peek() (Event[T], bool) {
	if len(q.h) == 0 {
		return Event[T]{}, false
	}
	return q.h[0], true
}

type eventHeap[T any] []Event[T]

func (h eventHeap[T]) Len() int { return len(h) }
func (h eventHeap[T]) Less(i, j int) bool {
	if h[i].At != h[j].At {
		return h[i].At < h[j].At
	}
	return h[i].Seq < h[j].Seq
}
func (h eventHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap[T]) Push(x any)   { *h = append(*h, x.(Event[T])) }
func (h *eventHeap[T]) Pop() any {
	old := *h
	ev := old[len(old)-1]
	*h = old[:len(old)-1]
	return ev
}
