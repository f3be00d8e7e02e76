package policies

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/traces"
)

// Driver owns the pipeline of call graphs and its invariants, and applies a Policy to a
// Backend:
//   - a query's calls without inputs are released when the query arrives; any other call
//     when every call it reads has finished (done, failed or skipped);
//   - a gated call is first put to the Rule: skipped (its inputs' majority answer stands for
//     its own, and its children read the response that carried that answer) or released;
//   - a tool step takes its time without a worker and is then done;
//   - an LLM call runs only on a worker that holds its model, and only once;
//   - a worker holds only what fits its memory;
//   - a query is complete when its final calls are; stage barriers are the policy's choice.
//
// A Driver runs one policy once; it is not safe for concurrent use.
type Driver struct {
	backend  Backend
	policy   Policy
	rule     Rule
	workload *traces.Workload
	models   []ModelInfo
	byName   map[string]int
	// refs is the unused rest of the block refPtr carves event references from.
	refs    []CallRef
	workers int
	// Progress, when set, is called after every finished call with the number done and total.
	Progress func(done, total int)
	// CallDone, when set, is called with the record of every call as it finishes (or fails),
	// tool steps included, from the Driver's goroutine: the hook that writes results as they
	// come.
	CallDone func(CallRecord)

	calls   []callState // by call ID
	first   []int       // ID of each query's first call
	child   []int32     // children of call i: child[childAt[i]:childAt[i+1]]
	childAt []int32
	queries []queryState
	ws      []workerState
	order   []int // ready call ids in release order (lazily pruned)
	// expect counts calls per layer and model index (the last index: tool steps).
	expect  [][]counts
	layers  int
	loads   []LoadRecord
	pending int // queries not complete
	done    int // calls done
	total   int // calls that will run, as known

	timers   timerHeap
	waking   map[time.Duration]bool // backend wake-ups requested and not yet delivered
	arrivals []int                  // query indices by arrival time
	arrived  int                    // queries of arrivals released so far
	timerSeq int
	// loadsIdle counts the loads since a call last finished: a policy that keeps loading
	// models without serving anything is thrashing, and fails the run instead of running
	// forever.
	loadsIdle int
	// derived are events the Driver caused while carrying out actions (a cancellation
	// releases or skips calls), delivered to the policy once the actions are done.
	derived []Event
	// exit is the early-exit rule of gated calls (nil: none).
	exit *EarlyExit
	// fatal is the first error of a backend call made while propagating (a Cancel).
	fatal error
	// stopping counts cancelled calls their backend has not yet reported stopped: the run
	// waits for them, so that their GPU time is accounted.
	stopping int
	// overlap releases calls with inputs when their query arrives (prefill-decode overlap;
	// see SetOverlap), and grower is the backend's support for it.
	overlap bool
	grower  Grower
	// decided counts gated calls decided, lowered those a load-aware rule skipped because of
	// load.
	decided, lowered int
	// answers is inputAnswers' scratch.
	answers []string
	// errs are the errors of failed calls and cancelledAt when cancelled calls were
	// cancelled, by call ID (few calls; the call states stay small).
	errs        map[int]string
	cancelledAt map[int]time.Duration
	// retried holds the attempts of the calls the backend sent more than once.
	retried map[int]retry
}

// retry is how many times a call was sent and the time its failed attempts cost.
type retry struct {
	attempts int
	lost     time.Duration
}

// Grower is the backend package's Grower: a Backend that can prefill a call while its inputs
// still run (prefill-decode overlap; see SetOverlap).
type Grower = backend.Grower

// SetOverlap turns on prefill-decode overlap (Faster-MoA): every LLM call that reads others is
// released, marked CallRef.Open, as soon as its query arrives, and a policy that submits it
// then has its prompt prefilled on the worker as its inputs finish, so that it starts decoding
// soon after the last one. A gated call submitted open and then skipped by its rule is
// cancelled on its worker. The backend must implement Grower. Call it before Run.
func (d *Driver) SetOverlap(on bool) { d.overlap = on }

// SetEarlyExit turns on Faster-MoA's runtime early exit for gated calls (see EarlyExit); nil
// turns it off. Call it before Run.
func (d *Driver) SetEarlyExit(e *EarlyExit) { d.exit = e }

type counts struct{ expected, remaining int }

type callStatus uint8

const (
	callWaiting callStatus = iota // not released
	callReady
	callSubmitted
	callDone
	callFailed
	callSkipped    // a gated call the rule skipped
	callTool       // a tool step under way
	callCancelling // submitted, then cancelled: the backend has not yet reported it stopped
	callCancelled  // cancelled: it will not run, or stopped where it was
)

func (s callStatus) String() string {
	return [...]string{"not released", "ready", "already submitted", "done", "failed", "skipped", "a tool step under way",
		"cancelled (stopping)", "cancelled"}[s]
}

// finished reports whether the status is final for the calls that read it: done, failed,
// skipped or cancelled.
func (s callStatus) finished() bool {
	return s == callDone || s == callFailed || s == callSkipped || s == callCancelling || s == callCancelled
}

type callState struct {
	call   *traces.Call // the workload's call, or the Driver's copy when its inputs changed
	worker WorkerID
	ready  time.Duration
	timing CallTiming
	// answer is the call's answer once finished (a skipped call's: its inputs' majority).
	answer string
	// confidence is the top vote share of its inputs' answers (0 without inputs).
	confidence float64
	// The small fields last, packed (400,000 calls in a large run).
	// waiting counts the inputs not yet finished.
	waiting int32
	// pass is how many tokens a skipped call forwards to the calls that read it: those of the
	// input that carried its majority answer.
	pass int32
	// produced is the output tokens a cancelled call had produced when it stopped (a
	// submitted call's, reported by the backend).
	produced int32
	// sent is the prompt tokens given to its worker so far when it was submitted open.
	sent int32
	// model is the call's model's index in Driver.models (len(models) for a tool step).
	model  int16
	status callStatus
	final  bool
	// ran says a cancelled call had been submitted (its record goes to the results).
	ran bool
	// open says the call was released before its inputs finished (overlap), and aborting
	// that it was skipped after being submitted open and its worker has not yet reported it
	// stopped.
	open     bool
	aborting bool
}

type queryState struct {
	sinksLeft int
	complete  bool
	final     string
	skipped   int
	end       time.Duration
}

type workerState struct {
	holds     []string
	loading   map[string]time.Duration // model -> load start
	unloading map[string]time.Duration
	inflight  []int // calls in flight by model index
}

// NewDriver checks the workload against the models and returns a driver. models are the
// experiment's models (every LLM call's model must be among them); workers is the cluster size.
func NewDriver(b Backend, p Policy, r Rule, wl *traces.Workload, models []ModelInfo, workers int) (*Driver, error) {
	if workers <= 0 {
		return nil, errors.New("policies: no workers")
	}
	if len(wl.Queries) == 0 {
		return nil, errors.New("policies: the workload has no queries")
	}
	if len(models) >= math.MaxInt16 {
		return nil, fmt.Errorf("policies: %d models (at most %d)", len(models), math.MaxInt16-1)
	}
	d := &Driver{backend: b, policy: p, rule: r, workload: wl, models: models, workers: workers,
		byName: map[string]int{}, waking: map[time.Duration]bool{},
		errs: map[int]string{}, cancelledAt: map[int]time.Duration{}, retried: map[int]retry{}}
	for i, m := range models {
		d.byName[m.Name] = i
	}
	n := wl.NumCalls()
	d.calls = make([]callState, n)
	d.first = make([]int, len(wl.Queries))
	d.queries = make([]queryState, len(wl.Queries))
	d.childAt = make([]int32, n+1)
	d.layers = wl.Layers()
	d.expect = make([][]counts, d.layers)
	for l := range d.expect {
		d.expect[l] = make([]counts, len(models)+1)
	}
	// Count children first (CSR layout), then fill them.
	id := 0
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		d.first[qi] = id
		for i := range q.Calls {
			c := &q.Calls[i]
			if c.ID != id || c.Query != qi || c.Node != i {
				return nil, fmt.Errorf("query %d: call %d has id %d, query %d, node %d: want %d, %d, %d (traces.Workload.Finish numbers them)", qi, i, c.ID, c.Query, c.Node, id, qi, i)
			}
			mi := len(models)
			if !c.IsTool() {
				var ok bool
				if mi, ok = d.byName[c.Model]; !ok {
					return nil, fmt.Errorf("call %d (query %d, %s) uses model %q, which the experiment does not list", c.ID, qi, c.Label(), c.Model)
				}
			}
			d.calls[id] = callState{call: c, waiting: int32(len(c.Inputs)), worker: -1, model: int16(mi)}
			for _, in := range c.Inputs {
				d.childAt[d.first[qi]+in.From+1]++
			}
			d.expect[c.Layer][mi].expected++
			d.expect[c.Layer][mi].remaining++
			id++
		}
	}
	for i := 1; i <= n; i++ {
		d.childAt[i] += d.childAt[i-1]
	}
	d.child = make([]int32, d.childAt[n])
	fill := slices.Clone(d.childAt[:n])
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		for i := range q.Calls {
			for _, in := range q.Calls[i].Inputs {
				p := d.first[qi] + in.From
				d.child[fill[p]] = int32(d.first[qi] + i)
				fill[p]++
			}
		}
	}
	for id := range d.calls {
		if d.childAt[id+1] == d.childAt[id] {
			cs := &d.calls[id]
			d.queries[cs.call.Query].sinksLeft++
			cs.final = len(cs.call.Inputs) > 0
		}
	}
	d.ws = make([]workerState, workers)
	for i := range d.ws {
		d.ws[i] = workerState{loading: map[string]time.Duration{}, unloading: map[string]time.Duration{}, inflight: make([]int, len(models))}
	}
	d.pending = len(wl.Queries)
	d.total = n
	d.arrivals = make([]int, len(wl.Queries))
	for i := range d.arrivals {
		d.arrivals[i] = i
	}
	if !slices.IsSortedFunc(wl.Queries, func(a, b traces.Query) int { return cmp.Compare(a.Arrival, b.Arrival) }) {
		sort.SliceStable(d.arrivals, func(a, b int) bool { return wl.Queries[d.arrivals[a]].Arrival < wl.Queries[d.arrivals[b]].Arrival })
	}
	return d, nil
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
	d.timerSeq++
	t.seq = d.timerSeq
	d.timers.push(t)
	if !d.waking[t.at] {
		d.waking[t.at] = true
		d.backend.WakeAt(t.at)
	}
}

// Run drives the policy until every query is complete and returns what happened.
func (d *Driver) Run(ctx context.Context) (*Result, error) {
	if d.overlap {
		g, ok := d.backend.(Grower)
		if !ok {
			return nil, fmt.Errorf("policy %s: prefill-decode overlap needs a backend that can grow a call's prompt, and %T cannot", d.policy.Name(), d.backend)
		}
		d.grower = g
	}
	// Queries of the offline batch are ready at the start; later arrivals wake the driver.
	var released []CallRef
	for d.arrived < len(d.arrivals) && d.workload.Queries[d.arrivals[d.arrived]].Arrival <= 0 {
		released = d.arrive(d.arrivals[d.arrived], 0, released)
		d.arrived++
	}
	if d.arrived < len(d.arrivals) {
		d.addTimer(timer{at: d.workload.Queries[d.arrivals[d.arrived]].Arrival, kind: timerArrival})
	}
	acts, err := d.policy.Start(d)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", d.policy.Name(), err)
	}
	if err := d.applyAll(acts); err != nil {
		return nil, err
	}
	idleWakes := 0
	for d.pending > 0 || d.stopping > 0 {
		ev, err := d.backend.Next(ctx)
		if errors.Is(err, ErrIdle) {
			return nil, d.stalled()
		}
		if err != nil {
			return nil, err
		}
		derived, err := d.handle(ev)
		if err == nil {
			err = d.fatal
		}
		if err != nil {
			return nil, err
		}
		// Calls withdrawn by this event (cancelled or skipped before they were submitted) are
		// told first, so that the policy does not submit them on hearing the event.
		for _, de := range derived {
			if de.Kind == EventCancelled && de.Worker < 0 {
				if err := d.applyAll(d.policy.OnEvent(de, d)); err != nil {
					return nil, err
				}
			}
		}
		if ev.Kind != EventTimer {
			idleWakes = 0
			if err := d.applyAll(d.policy.OnEvent(ev, d)); err != nil {
				return nil, err
			}
		} else if d.quiet() {
			// Only the policy's wake-ups keep the run going: it waits for nothing.
			if idleWakes++; idleWakes > maxIdleWakes {
				return nil, d.stalled()
			}
		}
		for _, de := range derived {
			if de.Kind == EventCancelled && de.Worker < 0 {
				continue
			}
			if err := d.applyAll(d.policy.OnEvent(de, d)); err != nil {
				return nil, err
			}
		}
	}
	return d.result(), nil
}

// applyAll carries out actions, then tells the policy what they caused (a cancellation
// finishes calls, which releases or skips others), until nothing more follows.
func (d *Driver) applyAll(acts []Action) error {
	if err := d.apply(acts); err != nil {
		return err
	}
	// The events the Driver derives while it applies them are handed on in order; the
	// buffer is reused once they are all out (slicing it from the front would reallocate it).
	for i := 0; i < len(d.derived); i++ {
		ev := d.derived[i]
		d.derived[i] = Event{}
		if err := d.apply(d.policy.OnEvent(ev, d)); err != nil {
			d.derived = d.derived[:0]
			return err
		}
	}
	d.derived = d.derived[:0]
	return d.fatal
}

// maxIdleWakes is how many policy wake-ups in a row, with nothing under way, make a run
// stalled.
const maxIdleWakes = 10000

// quiet reports whether nothing is under way: no call in flight or stopping, no load or
// unload, no tool step and no arrival to come.
func (d *Driver) quiet() bool {
	if d.stopping > 0 || d.arrived < len(d.arrivals) {
		return false
	}
	for _, t := range d.timers {
		if t.kind != timerPolicy {
			return false
		}
	}
	for i := range d.ws {
		ws := &d.ws[i]
		if len(ws.loading) > 0 || len(ws.unloading) > 0 {
			return false
		}
		for _, n := range ws.inflight {
			if n > 0 {
				return false
			}
		}
	}
	return true
}

func (d *Driver) stalled() error {
	var ready, waiting, inflight int
	// Where the ready calls wait, by layer and model, so that a stall names what was left.
	type where struct {
		layer int
		model string
	}
	at := map[where]int{}
	for i := range d.calls {
		c := &d.calls[i]
		switch c.status {
		case callReady:
			ready++
			at[where{c.call.Layer, c.call.Model}]++
		case callWaiting:
			waiting++
		case callSubmitted, callCancelling:
			inflight++
		}
	}
	keys := slices.SortedFunc(maps.Keys(at), func(a, b where) int {
		return cmp.Or(cmp.Compare(a.layer, b.layer), cmp.Compare(a.model, b.model))
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("layer %d %s: %d", k.layer, cmp.Or(k.model, "tool"), at[k]))
	}
	detail := ""
	if len(parts) > 0 {
		detail = " (" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Errorf("policy %s stalled at %v: %d queries incomplete, %d calls ready but never submitted%s, %d not released, %d in flight",
		d.policy.Name(), d.backend.Now(), d.pending, ready, detail, waiting, inflight)
}

// arrive releases a query's calls without inputs.
func (d *Driver) arrive(qi int, now time.Duration, out []CallRef) []CallRef {
	q := &d.workload.Queries[qi]
	released := 0 // exactly what is released: a query's calls are in this run's largest slices
	for i := range q.Calls {
		if c := &q.Calls[i]; len(c.Inputs) == 0 || d.overlap && !c.IsTool() {
			released++
		}
	}
	out = slices.Grow(out, released)
	for i := range q.Calls {
		if len(q.Calls[i].Inputs) == 0 {
			out = d.start(d.first[qi]+i, now, out)
		}
	}
	if d.overlap {
		for i := range q.Calls {
			if c := &q.Calls[i]; len(c.Inputs) > 0 && !c.IsTool() {
				id := d.first[qi] + i
				cs := &d.calls[id]
				cs.status, cs.ready, cs.open = callReady, now, true
				d.order = append(d.order, id)
				out = append(out, d.ref(id))
			}
		}
	}
	return out
}

// start makes a call whose inputs are all finished go: a tool step begins, an LLM call is
// released (out gains its reference). (Gates are decided before, in settle.)
func (d *Driver) start(id int, now time.Duration, out []CallRef) []CallRef {
	cs := &d.calls[id]
	if cs.open {
		// Released when its query arrived: it is now an ordinary ready call, or its worker
		// gets the rest of its prompt.
		cs.open = false
		cs.ready = now // ready to run now: any wait before is for its inputs, not in a queue
		if cs.status == callSubmitted {
			d.grow(id, true)
		}
		return out
	}
	if d.tool(cs) {
		cs.status = callTool
		cs.ready = now
		cs.timing = CallTiming{Submitted: now, Started: now, FirstToken: now}
		d.addTimer(timer{at: now + cs.call.Tool, kind: timerTool, id: id})
		return out
	}
	cs.status = callReady
	cs.ready = now
	d.order = append(d.order, id)
	return append(out, d.ref(id))
}

func (d *Driver) ref(id int) CallRef {
	cs := &d.calls[id]
	c := cs.call
	return CallRef{ID: id, Query: c.Query, Role: c.Role, Layer: c.Layer, Model: c.Model, InputTokens: c.InputTokens,
		Ready: cs.ready, Inputs: len(c.Inputs), Confidence: cs.confidence, Final: cs.final, Open: cs.open}
}

// refPtr returns a new reference to call id for an event. References are carved from a
// shared block (one allocation per refBlock events instead of one each); an event's
// reference is never written after it is handed out.
func (d *Driver) refPtr(id int) *CallRef {
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
		if cs := &d.calls[id]; cs.status == callReady && cs.call.Model == model {
			n++
		}
	}
	if mi, ok := d.byName[model]; ok {
		for i := range d.ws {
			n += d.ws[i].inflight[mi]
		}
	}
	return n
}

// known is the prompt of call id as far as its finished inputs give it: its own prompt and
// what they forward (nothing from a failed or cancelled one, the majority's carrier from a
// skipped one), at least one token.
func (d *Driver) known(id int) int {
	c := d.calls[id].call
	base := d.first[c.Query]
	tokens := c.PromptTokens
	for _, in := range c.Inputs {
		switch p := &d.calls[base+in.From]; p.status {
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
	cs := &d.calls[id]
	n := d.known(id)
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
	c := d.calls[id].call
	base := d.first[c.Query]
	out := d.answers[:0]
	for _, in := range c.Inputs {
		p := &d.calls[base+in.From]
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
// still waits for are cancelled. events gains the events this causes besides releases.
func (d *Driver) settle(id int, now time.Duration, released []CallRef, events *[]Event) []CallRef {
	var exited []int
	for _, ch := range d.child[d.childAt[id]:d.childAt[id+1]] {
		cs := &d.calls[ch]
		if cs.status != callWaiting && !cs.open {
			continue // released by an early exit, or cancelled
		}
		cs.waiting--
		if cs.waiting > 0 && cs.open && cs.status == callSubmitted {
			d.grow(int(ch), false)
		}
		if cs.waiting > 0 {
			if d.exit == nil || !cs.call.Gate || !d.exitEarly(int(ch)) {
				continue
			}
			cs.waiting = 0
			exited = append(exited, int(ch))
		}
		released = d.decide(int(ch), now, released, events)
	}
	cs := &d.calls[id]
	if d.childAt[id+1] == d.childAt[id] {
		qs := &d.queries[cs.call.Query]
		qs.sinksLeft--
		if qs.sinksLeft == 0 {
			d.completeQuery(cs.call.Query, now)
		}
	}
	for _, ch := range exited {
		base := d.first[d.calls[ch].call.Query]
		for _, in := range d.calls[ch].call.Inputs {
			if p := base + in.From; !d.calls[p].status.finished() && !d.awaited(p) {
				released = d.cancel(p, now, released, events)
			}
		}
	}
	return released
}

// decide puts a child whose inputs are finished (or that exits early) to the rule, and skips
// or starts it.
func (d *Driver) decide(ch int, now time.Duration, released []CallRef, events *[]Event) []CallRef {
	cs := &d.calls[ch]
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
				if err := d.backend.Cancel(cs.worker, ch); err != nil && d.fatal == nil {
					d.fatal = fmt.Errorf("cancelling skipped call %d on worker %d: %w", ch, cs.worker, err)
				}
			}
			queued := cs.open && cs.status == callReady
			cs.open = false
			d.skip(ch, dec, now, events)
			if queued {
				// Released open and not submitted: withdrawn, as a cancelled ready call.
				*events = append(*events, Event{Kind: EventCancelled, At: now, Worker: -1, Model: cs.call.Model, Call: d.refPtr(ch)})
			}
			return d.settle(ch, now, released, events)
		}
	}
	return d.start(ch, now, released)
}

// awaited reports whether some call that reads call id still waits for it.
func (d *Driver) awaited(id int) bool {
	for _, ch := range d.child[d.childAt[id]:d.childAt[id+1]] {
		if d.calls[ch].status == callWaiting || d.calls[ch].open {
			return true
		}
	}
	return false
}

// exitEarly reports whether gated call id may go on before all its inputs are done: at least
// MinFinished of its LLM inputs have answered and their top answer has at least the Agreement
// share of their answers (and, with MinConfidence, their mean confidence is high enough).
func (d *Driver) exitEarly(id int) bool {
	c := d.calls[id].call
	base := d.first[c.Query]
	var answers []string
	conf := 0.0
	for _, in := range c.Inputs {
		p := &d.calls[base+in.From]
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
func (d *Driver) cancel(id int, now time.Duration, released []CallRef, events *[]Event) []CallRef {
	cs := &d.calls[id]
	cs.open = false
	switch cs.status {
	case callWaiting, callReady, callTool:
		cs.status = callCancelled
	case callSubmitted:
		cs.status, cs.ran = callCancelling, true
		d.stopping++
		if err := d.backend.Cancel(cs.worker, id); err != nil && d.fatal == nil {
			d.fatal = fmt.Errorf("cancelling call %d on worker %d: %w", id, cs.worker, err)
		}
	default:
		return released
	}
	d.cancelledAt[id] = now
	d.counts(cs).expected--
	d.counts(cs).remaining--
	d.total--
	if cs.status == callCancelled && !d.tool(cs) {
		*events = append(*events, Event{Kind: EventCancelled, At: now, Worker: -1, Model: cs.call.Model, Call: d.refPtr(id)})
	}
	return d.settle(id, now, released, events)
}

// skip records that the rule skipped gated call id.
func (d *Driver) skip(id int, dec Decision, now time.Duration, events *[]Event) {
	cs := &d.calls[id]
	cs.status = callSkipped
	cs.answer = dec.Majority
	cs.ready = now
	c := cs.call
	for _, in := range c.Inputs {
		if p := &d.calls[d.first[c.Query]+in.From]; dec.Majority != "" && !d.tool(p) && p.answer == dec.Majority {
			cs.pass = int32(in.Tokens)
			break
		}
	}
	d.counts(cs).expected--
	d.counts(cs).remaining--
	d.total--
	d.queries[c.Query].skipped++
	*events = append(*events, Event{Kind: EventSkipped, At: now, Query: c.Query, Call: d.refPtr(id)})
}

// adjustInputs gives call id a prompt of what its inputs really forward: nothing from a
// failed, cancelled or unfinished input, and from a skipped one the response that carried its
// majority answer. The
// workload's call is shared, so a changed call becomes the Driver's copy.
func (d *Driver) adjustInputs(id int) {
	cs := &d.calls[id]
	c := cs.call
	base := d.first[c.Query]
	tokens := c.PromptTokens
	for _, in := range c.Inputs {
		switch p := &d.calls[base+in.From]; p.status {
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
	qs := &d.queries[qi]
	qs.complete = true
	qs.end = now
	d.pending--
	q := &d.workload.Queries[qi]
	var answers []string
	for i := range q.Calls {
		id := d.first[qi] + i
		if st := d.calls[id].status; d.childAt[id+1] == d.childAt[id] && st != callCancelled && st != callCancelling {
			answers = append(answers, d.calls[id].answer)
		}
	}
	if len(answers) == 1 {
		qs.final = answers[0]
	} else {
		qs.final, _ = traces.TopAnswer(answers)
	}
}

// handle updates the state for a backend event and returns the events it causes.
func (d *Driver) handle(ev Event) ([]Event, error) {
	switch ev.Kind {
	case EventTimer:
		return d.timersDue(ev.At)
	case EventLoaded:
		ws := &d.ws[ev.Worker]
		start, ok := ws.loading[ev.Model]
		if !ok {
			return nil, fmt.Errorf("backend reported %s loaded on worker %d, which was not loading it", ev.Model, ev.Worker)
		}
		delete(ws.loading, ev.Model)
		ws.holds = append(ws.holds, ev.Model)
		d.loads = append(d.loads, LoadRecord{Worker: ev.Worker, Model: ev.Model, Start: start, End: ev.At})
		d.loadsIdle++
		if limit := 8*d.workers*len(d.models) + 16; d.loadsIdle > limit {
			return nil, fmt.Errorf("policy %s is thrashing: %d model loads since a call last finished (at %v); %d queries incomplete",
				d.policy.Name(), d.loadsIdle, ev.At, d.pending)
		}
		return nil, nil
	case EventUnloaded:
		delete(d.ws[ev.Worker].unloading, ev.Model)
		return nil, nil
	case EventDone, EventFailed:
		if ev.Call == nil {
			if ev.Kind == EventFailed {
				delete(d.ws[ev.Worker].loading, ev.Model)
				return nil, fmt.Errorf("loading %s on worker %d failed: %w", ev.Model, ev.Worker, ev.Err)
			}
			return nil, errors.New("backend reported a finished call without the call")
		}
		if id := ev.Call.ID; id >= 0 && id < len(d.calls) && d.calls[id].aborting {
			return nil, d.dropped(id)
		}
		if id := ev.Call.ID; id >= 0 && id < len(d.calls) && d.calls[id].status == callCancelling {
			return nil, d.stopped(&ev)
		}
		return d.finish(&ev)
	case EventCancelled:
		if ev.Call != nil && ev.Call.ID >= 0 && ev.Call.ID < len(d.calls) && d.calls[ev.Call.ID].aborting {
			return nil, d.dropped(ev.Call.ID)
		}
		if ev.Call == nil || ev.Call.ID < 0 || ev.Call.ID >= len(d.calls) || d.calls[ev.Call.ID].status != callCancelling {
			return nil, fmt.Errorf("backend reported a call cancelled that was not being cancelled (%+v)", ev.Call)
		}
		return nil, d.stopped(&ev)
	}
	return nil, fmt.Errorf("backend sent unexpected %s event", ev.Kind)
}

// timersDue runs the Driver's deadlines up to now: arrivals, tool steps that end, and the
// policy's wake-ups.
func (d *Driver) timersDue(now time.Duration) ([]Event, error) {
	delete(d.waking, now)
	var released []CallRef
	var skipped []Event
	wake := false
	for len(d.timers) > 0 && d.timers[0].at <= now {
		t := d.timers.pop()
		switch t.kind {
		case timerArrival:
			for d.arrived < len(d.arrivals) && d.workload.Queries[d.arrivals[d.arrived]].Arrival <= now {
				released = d.arrive(d.arrivals[d.arrived], now, released)
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
			released = d.settle(t.id, t.at, released, &skipped)
		case timerPolicy:
			wake = true
		}
	}
	var out []Event
	out = append(out, skipped...)
	if len(released) > 0 {
		out = append(out, Event{Kind: EventReleased, At: now, Calls: released})
	}
	if wake {
		out = append(out, Event{Kind: EventTimer, At: now})
	}
	return out, nil
}

// record reports a finished call to the hooks.
func (d *Driver) record(id int) {
	if d.CallDone != nil {
		d.CallDone(d.callRecord(id))
	}
	if d.Progress != nil {
		d.Progress(d.done, d.total)
	}
}

func (d *Driver) callRecord(id int) CallRecord {
	cs := &d.calls[id]
	st, produced := "done", cs.call.OutputTokens
	switch cs.status {
	case callFailed:
		st = "failed" // what it produced is unknown: the tokens asked for stand
	case callCancelled, callCancelling:
		st, produced = "cancelled", int(cs.produced)
	}
	r := d.retried[id]
	return CallRecord{Call: cs.call, Worker: cs.worker, Ready: cs.ready, Timing: cs.timing, Status: st, Err: d.errs[id], Final: cs.final,
		Attempts: max(1, r.attempts), RetryLost: r.lost,
		Produced: produced}
}

func (d *Driver) finish(ev *Event) ([]Event, error) {
	id := ev.Call.ID
	if id < 0 || id >= len(d.calls) || d.calls[id].status != callSubmitted {
		return nil, fmt.Errorf("backend reported call %d finished, but it was not in flight", id)
	}
	cs := &d.calls[id]
	cs.timing = ev.Timing
	if ev.Attempts > 1 {
		d.retried[id] = retry{attempts: ev.Attempts, lost: ev.RetryLost}
	}
	if ev.Kind == EventDone {
		cs.status = callDone
		cs.answer = cs.call.Answer
		if s := cs.call.Synth; s != nil {
			cs.answer = s.Answer(d.inputAnswers(id))
		}
	} else {
		cs.status = callFailed
		if ev.Err != nil {
			d.errs[id] = ev.Err.Error()
		}
	}
	ev.Call = d.refPtr(id)
	d.loadsIdle = 0
	d.ws[cs.worker].inflight[cs.model]--
	d.counts(cs).remaining--
	d.done++
	d.record(id)
	var skipped []Event
	released := d.settle(id, ev.At, nil, &skipped)
	out := skipped
	if len(released) > 0 {
		out = append(out, Event{Kind: EventReleased, At: ev.At, Calls: released})
	}
	return out, nil
}

// stopped records that a cancelled call left its worker: stopped (EventCancelled), or done or
// failed before the cancellation took effect. The calls that read it went on without it when
// it was cancelled, so its answer is not used.
func (d *Driver) stopped(ev *Event) error {
	id := ev.Call.ID
	cs := &d.calls[id]
	cs.status = callCancelled
	d.stopping--
	cs.timing = ev.Timing
	cs.produced = int32(ev.Produced)
	if ev.Kind == EventDone {
		cs.produced = int32(cs.call.OutputTokens)
	}
	ev.Call = d.refPtr(id)
	ev.Worker = cs.worker
	d.loadsIdle = 0
	d.ws[cs.worker].inflight[cs.model]--
	d.record(id)
	return nil
}

// dropped records that a call skipped after it was submitted open has left its worker.
func (d *Driver) dropped(id int) error {
	cs := &d.calls[id]
	cs.aborting = false
	d.stopping--
	d.loadsIdle = 0
	d.ws[cs.worker].inflight[cs.model]--
	return nil
}

// apply checks and carries out actions.
func (d *Driver) apply(acts []Action) error {
	for _, a := range acts {
		if err := d.do(a); err != nil {
			return fmt.Errorf("policy %s at %v: %s: %w", d.policy.Name(), d.backend.Now(), a, err)
		}
	}
	return nil
}

func (d *Driver) do(a Action) error {
	if a.Kind == ActWake {
		if a.At < 0 {
			return errors.New("a wake-up time must not be negative")
		}
		d.addTimer(timer{at: a.At, kind: timerPolicy})
		return nil
	}
	if a.Kind == ActCancel {
		if a.CallID < 0 || a.CallID >= len(d.calls) {
			return errors.New("no such call")
		}
		switch st := d.calls[a.CallID].status; st {
		case callWaiting, callReady, callSubmitted, callTool:
		default:
			return fmt.Errorf("the call is %s", st)
		}
		var events []Event
		released := d.cancel(a.CallID, d.backend.Now(), nil, &events)
		d.derived = append(d.derived, events...)
		if len(released) > 0 {
			d.derived = append(d.derived, Event{Kind: EventReleased, At: d.backend.Now(), Calls: released})
		}
		return d.fatal
	}
	if a.Worker < 0 || int(a.Worker) >= d.workers {
		return fmt.Errorf("no worker %d (the cluster has %d)", a.Worker, d.workers)
	}
	ws := &d.ws[a.Worker]
	switch a.Kind {
	case ActLoad:
		if _, ok := d.byName[a.Model]; !ok {
			return fmt.Errorf("unknown model %q", a.Model)
		}
		if d.holds(a.Worker, a.Model) {
			return errors.New("the worker already holds it")
		}
		if _, ok := ws.loading[a.Model]; ok {
			return errors.New("the worker is already loading it")
		}
		if !d.Fits(a.Worker, a.Model) {
			return fmt.Errorf("it does not fit next to %v (memory fractions sum above 1)", d.resident(a.Worker))
		}
		if err := d.backend.Load(a.Worker, a.Model); err != nil {
			return err
		}
		ws.loading[a.Model] = d.backend.Now()
	case ActUnload:
		if !d.holds(a.Worker, a.Model) {
			return errors.New("the worker does not hold it")
		}
		if n := ws.inflight[d.byName[a.Model]]; n > 0 {
			return fmt.Errorf("%d of its calls are in flight there", n)
		}
		if err := d.backend.Unload(a.Worker, a.Model); err != nil {
			return err
		}
		for i, m := range ws.holds {
			if m == a.Model {
				ws.holds = append(ws.holds[:i:i], ws.holds[i+1:]...)
				break
			}
		}
		ws.unloading[a.Model] = d.backend.Now()
	case ActSubmit:
		if a.CallID < 0 || a.CallID >= len(d.calls) {
			return errors.New("no such call")
		}
		cs := &d.calls[a.CallID]
		if cs.status != callReady {
			return fmt.Errorf("the call is %s, not ready", cs.status)
		}
		if !d.holds(a.Worker, cs.call.Model) {
			return fmt.Errorf("the worker does not hold %s", cs.call.Model)
		}
		if cs.open {
			cp := *cs.call
			cp.InputTokens = d.known(a.CallID)
			if err := d.grower.SubmitOpen(a.Worker, &cp); err != nil {
				return err
			}
			cs.sent = int32(cp.InputTokens)
		} else if err := d.backend.Submit(a.Worker, cs.call); err != nil {
			return err
		}
		cs.status = callSubmitted
		cs.worker = a.Worker
		ws.inflight[cs.model]++
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
	return nil
}

func (d *Driver) holds(w WorkerID, model string) bool {
	return slices.Contains(d.ws[w].holds, model)
}

func (d *Driver) resident(w WorkerID) []string {
	ws := &d.ws[w]
	out := append([]string(nil), ws.holds...)
	for m := range ws.loading {
		out = append(out, m)
	}
	for m := range ws.unloading {
		out = append(out, m)
	}
	sort.Strings(out[len(ws.holds):])
	return out
}

// View implementation.

// Now implements View.
func (d *Driver) Now() time.Duration { return d.backend.Now() }

// Workers implements View.
func (d *Driver) Workers() int { return d.workers }

// Models implements View.
func (d *Driver) Models() []ModelInfo { return append([]ModelInfo(nil), d.models...) }

// Model implements View.
func (d *Driver) Model(name string) (ModelInfo, bool) {
	i, ok := d.byName[name]
	if !ok {
		return ModelInfo{}, false
	}
	return d.models[i], true
}

// Holds implements View.
func (d *Driver) Holds(w WorkerID) []string { return append([]string(nil), d.ws[w].holds...) }

// Holding implements View.
func (d *Driver) Holding(w WorkerID, model string) bool { return slices.Contains(d.ws[w].holds, model) }

// Loading implements View.
func (d *Driver) Loading(w WorkerID) []string {
	var out []string
	for m := range d.ws[w].loading {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Fits implements View.
func (d *Driver) Fits(w WorkerID, model string) bool {
	i, ok := d.byName[model]
	if !ok {
		return false
	}
	used := d.models[i].Memory
	for _, m := range d.resident(w) {
		used += d.models[d.byName[m]].Memory
	}
	return used <= 1+1e-9
}

// InFlight implements View.
func (d *Driver) InFlight(w WorkerID, model string) int {
	if model != "" {
		mi, ok := d.byName[model]
		if !ok {
			return 0
		}
		return d.ws[w].inflight[mi]
	}
	n := 0
	for _, v := range d.ws[w].inflight {
		n += v
	}
	return n
}

// Ready implements View.
func (d *Driver) Ready() []CallRef {
	kept := d.order[:0]
	var out []CallRef
	for _, id := range d.order {
		if d.calls[id].status == callReady {
			kept = append(kept, id)
			out = append(out, d.ref(id))
		}
	}
	d.order = kept
	return out
}

// Expected implements View.
func (d *Driver) Expected(layer int, model string) int {
	return d.sum(layer, model, func(c counts) int { return c.expected })
}

// Remaining implements View.
func (d *Driver) Remaining(layer int, model string) int {
	return d.sum(layer, model, func(c counts) int { return c.remaining })
}

func (d *Driver) sum(layer int, model string, f func(counts) int) int {
	lo, hi := layer, layer+1
	if layer == AnyLayer {
		lo, hi = 0, d.layers
	}
	if lo < 0 || hi > d.layers {
		return 0
	}
	mi := -1
	if model != "" {
		var ok bool
		if mi, ok = d.byName[model]; !ok {
			return 0
		}
	}
	n := 0
	for l := lo; l < hi; l++ {
		if mi >= 0 {
			n += f(d.expect[l][mi])
			continue
		}
		for _, c := range d.expect[l] {
			n += f(c)
		}
	}
	return n
}

// Layers implements View.
func (d *Driver) Layers() int { return d.layers }

// Queries implements View.
func (d *Driver) Queries() int { return len(d.workload.Queries) }

var _ View = (*Driver)(nil)
