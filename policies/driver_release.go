package policies

import (
	"fmt"
	"slices"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// Release bookkeeping: how a call becomes ready (its query arrives, its inputs finish), what
// its prompt holds, and how a finished call settles the calls that read it and its query.

// arrive releases a query's calls without inputs.
func (d *Driver) arrive(qi int, now time.Duration, fx *effects) {
	first := d.qs(qi).first
	q := d.qs(qi).q
	released := 0 // exactly what is released: a query's calls are in this run's largest slices
	for i := range q.Calls {
		if c := &q.Calls[i]; len(c.Inputs) == 0 || d.overlap && !c.IsTool() {
			released++
		}
	}
	fx.released = slices.Grow(fx.released, released)
	for i := range q.Calls {
		if len(q.Calls[i].Inputs) == 0 {
			d.start(first+i, now, fx)
		}
	}
	if d.overlap {
		for i := range q.Calls {
			if c := &q.Calls[i]; len(c.Inputs) > 0 && !c.IsTool() {
				id := first + i
				cs := d.cs(id)
				cs.status, cs.ready, cs.open = callReady, now, true
				d.queue(id)
				fx.released = append(fx.released, d.ref(id))
			}
		}
	}
}

// start makes a call whose inputs are all finished go: a tool step begins, an LLM call is
// released (fx gains its reference). (Gates are decided before, in settle.)
func (d *Driver) start(id int, now time.Duration, fx *effects) {
	cs := d.cs(id)
	if cs.open {
		// Released when its query arrived: it is now an ordinary ready call, or its worker
		// gets the rest of its prompt.
		cs.open = false
		cs.ready = now // ready to run now: any wait before is for its inputs, not in a queue
		if cs.status == callSubmitted {
			d.grow(id, true)
		}
		return
	}
	if d.tool(cs) {
		cs.status = callTool
		cs.ready = now
		cs.timing = CallTiming{Submitted: now, Started: now, FirstToken: now}
		d.addTimer(timer{at: now + cs.call.Tool, kind: timerTool, id: id})
		return
	}
	cs.status = callReady
	cs.ready = now
	d.queue(id)
	fx.released = append(fx.released, d.ref(id))
}

// queue adds ready call id to the release order; a long order is pruned of the calls no
// longer ready first (as Ready prunes it), so that it stays as long as the calls waiting.
func (d *Driver) queue(id int) {
	if len(d.order) >= 2*d.ordered+1024 {
		d.order = d.readyOnly(d.order)
		d.ordered = len(d.order)
	}
	d.order = append(d.order, id)
}

// readyOnly keeps the calls of ids that are ready, in order, in place.
func (d *Driver) readyOnly(ids []int) []int {
	kept := ids[:0]
	for _, id := range ids {
		if d.inWindow(id) && d.cs(id).status == callReady {
			kept = append(kept, id)
		}
	}
	return kept
}

func (d *Driver) ref(id int) CallRef {
	cs := d.cs(id)
	c := cs.call
	return CallRef{ID: id, Query: c.Query, Role: c.Role, Layer: c.Layer, Model: c.Model, InputTokens: c.InputTokens,
		Ready: cs.ready, Inputs: len(c.Inputs), Confidence: cs.confidence, Final: cs.final, Open: cs.open}
}

// refPtr returns a reference to call id for an event: the one it was released with, or a
// new one. New references are carved from a shared block (one allocation per refBlock events
// instead of one each); an event's reference is never written after it is handed out.
func (d *Driver) refPtr(id int) *CallRef {
	if r := d.cs(id).rel; r != nil {
		return r
	}
	if len(d.refs) == 0 {
		d.refs = make([]CallRef, refBlock)
	}
	r := &d.refs[0]
	*r = d.ref(id)
	d.refs = d.refs[1:]
	return r
}

// refBlock is how many event references refPtr allocates at once.
const refBlock = 256

// backlog counts the calls of model released and not finished: ready (open ones included)
// or in flight.
func (d *Driver) backlog(model string) int {
	n := 0
	for _, id := range d.order {
		if d.inWindow(id) {
			if cs := d.cs(id); cs.status == callReady && cs.call.Model == model {
				n++
			}
		}
	}
	if mi, ok := d.byName.Get(model); ok {
		for i := range d.ws {
			n += d.ws[i].inflight[mi]
		}
	}
	return n
}

// prompt is the prompt of call id as far as its finished inputs give it: its own prompt and
// what they forward (nothing from a failed or cancelled one, the majority's carrier from a
// skipped one), at least one token.
func (d *Driver) prompt(id int) int {
	c := d.cs(id).call
	base := id - c.Node
	tokens := c.PromptTokens
	for _, in := range c.Inputs {
		switch p := d.cs(base + in.From); p.status {
		case callDone:
			tokens += in.Tokens
		case callSkipped:
			tokens += int(p.pass)
		}
	}
	return max(1, tokens)
}

// grow gives open-submitted call id's worker the prompt tokens its inputs have added since,
// and with close, ends its prompt.
func (d *Driver) grow(id int, close bool) {
	cs := d.cs(id)
	n := d.prompt(id)
	if n == int(cs.sent) && !close {
		return
	}
	add := max(0, n-int(cs.sent))
	cs.sent += int32(add)
	if err := d.grower.Grow(cs.worker, id, add, close); err != nil && d.fatal == nil {
		d.fatal = fmt.Errorf("growing the prompt of call %d on worker %d: %w", id, cs.worker, err)
	}
}

// inputAnswers returns the answers call id's LLM inputs gave, in input order: a tool step
// does not vote, nor does an input that was cancelled or has not finished (an early exit went
// on without it); a failed input votes for nothing. The slice is the Driver's scratch, valid
// until the next call (a Rule must not keep its answers).
func (d *Driver) inputAnswers(id int) []string {
	c := d.cs(id).call
	base := id - c.Node
	out := d.answers[:0]
	for _, in := range c.Inputs {
		p := d.cs(base + in.From)
		switch {
		case d.tool(p):
		case p.status == callDone || p.status == callSkipped || p.status == callFailed:
			out = append(out, p.answer)
		}
	}
	d.answers = out[:0]
	return out
}

// settle propagates that call id has finished (done, failed, skipped or cancelled) to the
// calls that read it and to its query: a child whose inputs are all finished is decided (if
// gated) and started; skipped children settle in turn. With an early exit, a gated child whose
// finished inputs already agree goes on at once, and its unfinished inputs that no other call
// still waits for are cancelled. fx gains what this causes.
func (d *Driver) settle(id int, now time.Duration, fx *effects) {
	var exited []int
	for _, off := range d.readers(id) {
		ch := id + int(off)
		cs := d.cs(ch)
		if cs.status != callWaiting && !cs.open {
			continue // released by an early exit, or cancelled
		}
		cs.waiting--
		if cs.waiting > 0 && cs.open && cs.status == callSubmitted {
			d.grow(ch, false)
		}
		if cs.waiting > 0 {
			if d.exit == nil || !cs.call.Gate || !d.exitEarly(ch) {
				continue
			}
			cs.waiting = 0
			exited = append(exited, ch)
		}
		d.decide(ch, now, fx)
	}
	if d.sinkCall(id) {
		q := d.cs(id).call.Query
		qs := d.qs(q)
		qs.sinksLeft--
		if qs.sinksLeft == 0 {
			d.completeQuery(q, now)
		}
	}
	for _, ch := range exited {
		c := d.cs(ch).call
		base := ch - c.Node
		for _, in := range c.Inputs {
			if p := base + in.From; !d.cs(p).status.finished() && !d.awaited(p) {
				d.cancel(p, now, fx)
			}
		}
	}
}

// adjustInputs gives call id a prompt of what its inputs really forward: nothing from a
// failed, cancelled or unfinished input, and from a skipped one the response that carried its
// majority answer. The
// workload's call is shared, so a changed call becomes the Driver's copy.
func (d *Driver) adjustInputs(id int) {
	cs := d.cs(id)
	c := cs.call
	base := id - c.Node
	tokens := c.PromptTokens
	for _, in := range c.Inputs {
		switch p := d.cs(base + in.From); p.status {
		case callDone:
			tokens += in.Tokens
		case callSkipped:
			tokens += int(p.pass)
		}
	}
	if tokens != c.InputTokens && !c.IsTool() {
		cp := *c
		cp.InputTokens = max(1, tokens)
		cs.call = &cp
	}
}

// tool reports whether the call is a tool step (from the Driver's state: the workload's call
// is a pointer away, and parents are read for every call that reads them).
func (d *Driver) tool(cs *callState) bool { return int(cs.model) == len(d.models) }

func (d *Driver) counts(cs *callState) *counts {
	return &d.expect[cs.call.Layer][cs.model]
}

// completeQuery records a query's final answer: its final call's, or its final calls' top
// answer.
func (d *Driver) completeQuery(qi int, now time.Duration) {
	qs := d.qs(qi)
	qs.complete = true
	qs.end = now
	d.pending--
	var answers []string
	for i := range qs.q.Calls {
		id := qs.first + i
		if st := d.cs(id).status; d.sinkCall(id) && st != callCancelled && st != callCancelling {
			answers = append(answers, d.cs(id).answer)
		}
	}
	if len(answers) == 1 {
		qs.final = answers[0]
	} else {
		qs.final, _ = traces.TopAnswer(answers)
	}
}
