package policies

import (
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
)

// The Driver's timers: query arrivals, tool steps that end, and the policy's wake-ups, in one
// heap ordered by time.

// clock is the Driver's timers and the queries' arrivals.
type clock struct {
	timers   timerHeap
	waking   map[time.Duration]bool // backend wake-ups requested and not yet delivered
	arrivals []int                  // query indices by arrival time
	arrived  int                    // queries of arrivals released so far
	timerSeq int
}

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
	d.clock.timerSeq++
	t.seq = d.clock.timerSeq
	d.clock.timers.push(t)
	if !d.clock.waking[t.at] {
		d.clock.waking[t.at] = true
		d.backend.WakeAt(t.at)
	}
}

// timersDue runs the Driver's deadlines up to now: arrivals, tool steps that end, and the
// policy's wake-ups.
func (d *Driver) timersDue(now time.Duration) ([]Event, error) {
	delete(d.clock.waking, now)
	var fx effects
	wake := false
	for len(d.clock.timers) > 0 && d.clock.timers[0].at <= now {
		t := d.clock.timers.pop()
		switch t.kind {
		case timerArrival:
			for d.clock.arrived < len(d.clock.arrivals) && d.workload.Queries[d.clock.arrivals[d.clock.arrived]].Arrival <= now {
				d.arrive(d.clock.arrivals[d.clock.arrived], now, &fx)
				d.clock.arrived++
			}
			if d.clock.arrived < len(d.clock.arrivals) {
				d.addTimer(timer{at: d.workload.Queries[d.clock.arrivals[d.clock.arrived]].Arrival, kind: timerArrival})
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
