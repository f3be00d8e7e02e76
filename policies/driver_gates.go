package policies

import (
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// Gates: the aggregation rule's decision on a call whose inputs are in (skip it with their
// majority, or run it), Faster-MoA's early exit, and cancellations.

// decide puts a child whose inputs are finished (or that exits early) to the rule, and skips
// or starts it.
func (d *Driver) decide(ch int, now time.Duration, fx *effects) {
	cs := d.cs(ch)
	answers := d.inputAnswers(ch)
	cs.confidence = traces.Confidence(answers)
	d.adjustInputs(ch)
	if cs.call.Gate {
		var dec Decision
		if lr, ok := d.rule.(LoadRule); ok {
			dec = lr.DecideUnder(answers, Backlog{Queued: d.backlog(cs.call.Model), Decided: d.decided, Lowered: d.lowered})
		} else {
			dec = d.rule.Decide(answers)
		}
		d.decided++
		if dec.Skip && dec.Lowered {
			d.lowered++
		}
		cs.confidence = dec.Confidence
		if dec.Skip {
			if cs.open && cs.status == callSubmitted {
				// Submitted open, its prefill was for nothing: its worker drops it.
				cs.aborting = true
				d.stopping++
				if err := d.cancelling(); err != nil && d.fatal == nil {
					d.fatal = err
				}
				if err := d.backend.Cancel(cs.worker, ch); err != nil && d.fatal == nil {
					d.fatal = fmt.Errorf("cancelling skipped call %d on worker %d: %w", ch, cs.worker, err)
				}
			}
			queued := cs.open && cs.status == callReady
			cs.open = false
			d.skip(ch, dec, now, fx)
			if queued {
				// Released open and not submitted: withdrawn, as a cancelled ready call.
				fx.events = append(fx.events, Event{Kind: EventCancelled, At: now, Worker: -1, Model: cs.call.Model, Call: d.refPtr(ch)})
			}
			d.settle(ch, now, fx)
			return
		}
	}
	d.start(ch, now, fx)
}

// awaited reports whether some call that reads call id still waits for it.
func (d *Driver) awaited(id int) bool {
	for _, off := range d.readers(id) {
		if ch := d.cs(id + int(off)); ch.status == callWaiting || ch.open {
			return true
		}
	}
	return false
}

// exitEarly reports whether gated call id may go on before all its inputs are done: at least
// MinFinished of its LLM inputs have answered and their top answer has at least the Agreement
// share of their answers (and, with MinConfidence, their mean confidence is high enough).
func (d *Driver) exitEarly(id int) bool {
	c := d.cs(id).call
	base := id - c.Node
	var answers []string
	conf := 0.0
	for _, in := range c.Inputs {
		p := d.cs(base + in.From)
		if d.tool(p) || (p.status != callDone && p.status != callSkipped) {
			continue
		}
		answers = append(answers, p.answer)
		conf += p.call.Confidence
	}
	if len(answers) < max(1, d.exit.MinFinished) {
		return false
	}
	top, votes := traces.TopAnswer(answers)
	if top == "" || float64(votes) < d.exit.Agreement*float64(len(answers))-1e-9 {
		return false
	}
	return d.exit.MinConfidence <= 0 || conf/float64(len(answers)) >= d.exit.MinConfidence
}

// cancel cancels call id where it is: one not yet submitted will not run; a submitted one is
// stopped by the backend, which reports it later (EventCancelled, or EventDone when it
// finished first). For the calls that read it, it is finished now, without an answer.
func (d *Driver) cancel(id int, now time.Duration, fx *effects) {
	cs := d.cs(id)
	cs.open = false
	switch cs.status {
	case callWaiting, callReady, callTool:
		cs.status = callCancelled
	case callSubmitted:
		cs.status, cs.ran = callCancelling, true
		d.stopping++
		if err := d.cancelling(); err != nil && d.fatal == nil {
			d.fatal = err
		}
		if err := d.backend.Cancel(cs.worker, id); err != nil && d.fatal == nil {
			d.fatal = fmt.Errorf("cancelling call %d on worker %d: %w", id, cs.worker, err)
		}
	default:
		return
	}
	d.outcomes.cancelledAt[id] = now
	d.counts(cs).expected--
	d.counts(cs).remaining--
	d.total--
	if cs.status == callCancelled && !d.tool(cs) {
		fx.events = append(fx.events, Event{Kind: EventCancelled, At: now, Worker: -1, Model: cs.call.Model, Call: d.refPtr(id)})
	}
	d.settle(id, now, fx)
}

// skip records that the rule skipped gated call id.
func (d *Driver) skip(id int, dec Decision, now time.Duration, fx *effects) {
	cs := d.cs(id)
	cs.status = callSkipped
	cs.answer = dec.Majority
	cs.ready = now
	c := cs.call
	for _, in := range c.Inputs {
		if p := d.cs(id - c.Node + in.From); dec.Majority != "" && !d.tool(p) && p.answer == dec.Majority {
			cs.pass = int32(in.Tokens)
			break
		}
	}
	d.counts(cs).expected--
	d.counts(cs).remaining--
	d.total--
	d.qs(c.Query).skipped++
	fx.events = append(fx.events, Event{Kind: EventSkipped, At: now, Query: c.Query, Call: d.refPtr(id)})
}
