package policies

import (
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
)

// The Driver's timers: query arrivals, tool steps that end, and the policy's wake-ups, in one
// heap ordered by time.

// timer is one of the Driver's own deadlines.
type timer struct {
	at   time.Duration
	kind timerKind
	id   int // the tool step's call ID
	seq  int
}

type timerKind int

const (
	timerArrival timerKind = iota
	timerTool
	timerPolicy
)

// timerHeap orders the Driver's timers by time, then by when they were set.
type timerHeap []timer

func timerLess(a, b *timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (h *timerHeap) push(t timer) { *h = heapx.Push(*h, t, timerLess) }

func (h *timerHeap) pop() timer {
	var t timer
	*h, t = heapx.Pop(*h, timerLess)
	return t
}

// addTimer schedules one of the Driver's deadlines and asks the backend to wake it then.
func (d *Driver) addTimer(t timer) {
	t.at = max(t.at, d.backend.Now())
	d.timerSeq++
	t.seq = d.timerSeq
	d.timers.push(t)
	if !d.waking[t.at] {
		d.waking[t.at] = true
		d.backend.WakeAt(t.at)
	}
}

// timersDue runs the Driver's deadlines up to now: arrivals, tool steps that end, and the
// policy's wake-ups.
func (d *Driver) timersDue(now time.Duration) ([]Event, error) {
	delete(d.waking, now)
	var fx effects
	wake := false
	for len(d.timers) > 0 && d.timers[0].at <= now {
		t := d.timers.pop()
		switch t.kind {
		case timerArrival:
			for d.arrived < len(d.arrivals) && d.workload.Queries[d.arrivals[d.arrived]].Arrival <= now {
				d.arrive(d.arrivals[d.arrived], now, &fx)
				d.arrived++
			}
			if d.arrived < len(d.arrivals) {
				d.addTimer(timer{at: d.workload.Queries[d.arrivals[d.arrived]].Arrival, kind: timerArrival})
			}
		case timerTool:
			cs := &d.calls[t.id]
			if cs.status != callTool {
				continue // cancelled
			}
			cs.status = callDone
			cs.answer = cs.call.Answer
			cs.timing.End = t.at
			d.counts(cs).remaining--
			d.done++
			d.record(t.id)
			d.settle(t.id, t.at, &fx)
		case timerPolicy:
			wake = true
		}
	}
	out := fx.flush(nil, now)
	if wake {
		out = append(out, Event{Kind: EventTimer, At: now})
	}
	return out, nil
}
