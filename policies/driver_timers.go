package policies

import (
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
)

// The Driver's timers: query arrivals, tool steps that end, and the policy's wake-ups, in one
// heap ordered by time.

// clock is the Driver's timers and the queries' arrivals (a streamed workload's arrive in
// query order).
type clock struct {
	timers   timerHeap
	waking   map[time.Duration]bool // backend wake-ups requested and not yet delivered
	arrivals []int                  // a held workload's query indices by arrival time
	arrived  int                    // queries released so far
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

// arrivals releases the queries that have arrived by now, in order of arrival (a streamed
// workload's come into the window as they do), and sets the timer of the next arrival.
func (d *Driver) arrivals(now time.Duration, fx *effects) error {
	for d.clock.arrived < d.nq {
		var qi int
		if d.held != nil {
			qi = d.clock.arrivals[d.clock.arrived]
		} else {
			qi = d.clock.arrived
			if qi >= d.queries.hi {
				if err := d.pull(); err != nil {
					return err
				}
			}
		}
		if at := d.qs(qi).q.Arrival; at > now {
			d.addTimer(timer{at: at, kind: timerArrival})
			return nil
		}
		d.arrive(qi, now, fx)
		d.clock.arrived++
	}
	return nil
}

// timersDue runs the Driver's deadlines up to now: arrivals, tool steps that end, and the
// policy's wake-ups.
func (d *Driver) timersDue(now time.Duration) ([]Event, error) {
	delete(d.clock.waking, now)
	fx := d.effects()
	wake := false
	for len(d.clock.timers) > 0 && d.clock.timers[0].at <= now {
		t := d.clock.timers.pop()
		switch t.kind {
		case timerArrival:
			if err := d.arrivals(now, &fx); err != nil {
				return nil, err
			}
		case timerTool:
			cs := d.cs(t.id)
			if cs.status != callTool {
				continue // cancelled
			}
			cs.status = callDone
			cs.answer = cs.call.Answer
			cs.timing.End = t.at
			d.counts(cs).remaining--
			d.done++
			if err := d.record(t.id); err != nil {
				return nil, err
			}
			d.settle(t.id, t.at, &fx)
		case timerPolicy:
			wake = true
		}
	}
	out := d.flush(&fx, d.stepEvents(), now)
	if wake {
		out = append(out, Event{Kind: EventTimer, At: now})
	}
	d.steps = out
	return out, nil
}
