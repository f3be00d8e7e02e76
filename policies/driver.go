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

	"github.com/mosaic-sched/mosaic/internal/names"
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
// The Driver keeps the calls and queries of a run in a window ordered by ID: a workload given
// whole (NewDriver) enters it at once, one drawn a query at a time (NewStreamDriver) as
// simulated time reaches each arrival; a query leaves from the front once it is complete and
// all its calls have ended, its records going to the Result or, for a run that streams them
// (Stream), to a Sink. The policy cannot tell the two apart: it sees the same View.
//
// A Driver runs one policy once; it is not safe for concurrent use. Its code is in pieces:
// this file (the loop, a call's end), driver_release.go (how calls become ready),
// driver_gates.go (the rule, early exit, cancellation), driver_timers.go, driver_actions.go
// (the checks on a policy's actions), driver_view.go (the View), driver_stream.go (streamed
// workloads and records, the window's front) and driver_window.go (its storage).
type Driver struct {
	backend Backend
	policy  Policy
	rule    Rule
	models  []ModelInfo
	byName  names.Index
	// refs is the unused rest of the block refPtr carves event references from, released
	// that of the block flush carves released calls from.
	refs, released []CallRef
	// scratch holds the buffer of a step's effects' events between steps, and steps that of
	// the events a backend event causes (see flush and stepEvents).
	scratch, steps []Event
	workers        int
	// Progress, when set, is called after every finished call with the number done and total.
	Progress func(done, total int)
	// CallDone, when set, is called with the record of every call as it finishes (or fails),
	// tool steps included, from the Driver's goroutine: the hook that writes results as they
	// come.
	CallDone func(CallRecord)

	// The window: the calls and queries not yet retired (see retire), from the oldest on, by
	// ID (driver_window.go). The calls that read call id are id plus
	// child.span(childAt.at(id), childAt.at(id+1)). A held workload enters the window whole,
	// a streamed one (NewStreamDriver) a query at a time.
	calls   blocks[callState]
	queries blocks[queryState]
	childAt fifo[int]
	child   fifo[int32]
	// fill is add's scratch.
	fill []int
	// nq is the number of queries of the workload, pulled the calls that entered the window
	// and total0 the calls of the whole workload.
	nq, pulled, total0 int
	ws                 []workerState
	order              []int // ready call ids in release order (lazily pruned)
	// ordered is how long order was after it was last pruned.
	ordered int
	// expect counts calls per layer and model index (the last index: tool steps).
	expect  [][]counts
	layers  int
	loads   []LoadRecord
	pending int // queries not complete
	done    int // calls done
	total   int // calls that will run, as known

	// held is the workload given whole (nil when streamed); stream the source of a streamed
	// one, with the last arrival it gave.
	held        *traces.Workload
	stream      QuerySource
	lastArrival time.Duration
	// res collects a held run's records as queries retire; out receives a streamed run's
	// (see Stream).
	res *Result
	out *streamOut
	// agg and gold count the retired queries whose workload answer is right with every call
	// aggregated, and those with a gold answer (Result.AlwaysAggregate).
	agg, gold int

	clock clock // arrivals, tool steps' ends and the policy's wake-ups (driver_timers.go)
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
	// outcomes are the calls that failed, were cancelled or were sent more than once.
	outcomes outcomes
}

// outcomes records the calls whose end was not a plain finish, by call ID: few calls, so the
// call states stay small.
type outcomes struct {
	// errs are the errors of failed calls, cancelledAt when cancelled calls were cancelled.
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

// effects is what one step of the Driver caused, gathered in the order it happened: the calls
// it released and the events it derived besides (a skip, a ready call withdrawn, a
// cancellation). Every step that can release, skip or cancel calls (an arrival, a call or tool
// step that ends, a policy's cancellation) writes into one, then flushes it as events.
type effects struct {
	released []CallRef
	events   []Event
}

// effects returns an empty effects value for a step whose events go out through flush: the
// calls it releases are written straight into the rest of the shared block that flush carves
// released calls from (a new block when little is left), its events into the Driver's
// scratch.
func (d *Driver) effects() effects {
	if cap(d.released) < refBlock/8 {
		d.released = make([]CallRef, refBlock)
	}
	return effects{released: d.released[:0], events: d.scratch[:0]}
}

// flush appends the step's events to out, then one EventReleased at time at of the calls it
// released (when it released any), and returns out. The released calls were written into the
// shared block (one allocation per refBlock calls instead of one a step): their slice is
// carved from it, ending where they end, and never written after it is handed out (a step
// that outgrew the block's rest has a slice of its own). fx's events buffer becomes the
// Driver's scratch again.
func (d *Driver) flush(fx *effects, out []Event, at time.Duration) []Event {
	out = append(out, fx.events...)
	if n := len(fx.released); n > 0 {
		calls := fx.released[:n:n]
		if cap(d.released) > 0 && &d.released[:1][0] == &calls[0] {
			d.released = d.released[n:]
		}
		for i := range calls {
			if !calls[i].Open {
				d.cs(calls[i].ID).rel = &calls[i]
			}
		}
		out = append(out, Event{Kind: EventReleased, At: at, Calls: calls})
	}
	clear(fx.events)
	d.scratch = fx.events[:0]
	*fx = effects{}
	return out
}

// stepEvents returns the Driver's buffer for the events a backend event causes (handle's
// result), emptied: they are handed on before the next backend event is handled.
func (d *Driver) stepEvents() []Event {
	clear(d.steps)
	return d.steps[:0]
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
	call *traces.Call // the workload's call, or the Driver's copy when its inputs changed
	// rel is the reference released with the call (not open), which the event that ends it
	// carries too: every field of a call's reference is as when it was released.
	rel    *CallRef
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
	q         *traces.Query
	first     int // its first call's ID
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
// experiment's models, each name listed once (every LLM call's model must be among them);
// workers is the cluster size.
func NewDriver(b Backend, p Policy, r Rule, wl *traces.Workload, models []ModelInfo, workers int) (*Driver, error) {
	if len(wl.Queries) == 0 {
		return nil, errors.New("policies: the workload has no queries")
	}
	d, err := newDriver(b, p, r, models, workers)
	if err != nil {
		return nil, err
	}
	d.held, d.nq = wl, len(wl.Queries)
	d.pending = d.nq
	d.layers = wl.Layers()
	d.expect = make([][]counts, d.layers)
	for l := range d.expect {
		d.expect[l] = make([]counts, len(d.models)+1)
	}
	n := wl.NumCalls()
	d.childAt.buf = make([]int, 1, n+1)
	d.child.buf = make([]int32, 0, n)
	for qi := range wl.Queries {
		if err := d.add(&wl.Queries[qi]); err != nil {
			return nil, err
		}
	}
	for id := range n {
		cs := d.cs(id)
		d.expect[cs.call.Layer][cs.model].expected++
		d.expect[cs.call.Layer][cs.model].remaining++
	}
	d.total, d.total0 = n, n
	d.clock.arrivals = make([]int, len(wl.Queries))
	for i := range d.clock.arrivals {
		d.clock.arrivals[i] = i
	}
	if !slices.IsSortedFunc(wl.Queries, func(a, b traces.Query) int { return cmp.Compare(a.Arrival, b.Arrival) }) {
		sort.SliceStable(d.clock.arrivals, func(a, b int) bool {
			return wl.Queries[d.clock.arrivals[a]].Arrival < wl.Queries[d.clock.arrivals[b]].Arrival
		})
	}
	d.res = &Result{Calls: make([]CallRecord, 0, n), Queries: make([]QueryOutcome, 0, len(wl.Queries))}
	return d, nil
}

// newDriver returns a driver without a workload.
func newDriver(b Backend, p Policy, r Rule, models []ModelInfo, workers int) (*Driver, error) {
	if workers <= 0 {
		return nil, errors.New("policies: no workers")
	}
	if len(models) >= math.MaxInt16 {
		return nil, fmt.Errorf("policies: %d models (at most %d)", len(models), math.MaxInt16-1)
	}
	models = slices.Clone(models)
	for i, m := range models {
		switch {
		case m.Workers == nil:
			models[i] = m.OnEvery(workers, "")
		case len(m.Workers) != workers:
			return nil, fmt.Errorf("policies: model %s lists %d workers' costs for %d workers", m.Name, len(m.Workers), workers)
		}
	}
	d := &Driver{backend: b, policy: p, rule: r, models: models, workers: workers,
		clock:    clock{waking: map[time.Duration]bool{}},
		outcomes: outcomes{errs: map[int]string{}, cancelledAt: map[int]time.Duration{}, retried: map[int]retry{}}}
	for i, m := range models {
		if d.byName.Add(m.Name) != i {
			return nil, fmt.Errorf("policies: model %s is listed twice", m.Name)
		}
	}
	d.ws = make([]workerState, workers)
	for i := range d.ws {
		d.ws[i] = workerState{loading: map[string]time.Duration{}, unloading: map[string]time.Duration{}, inflight: make([]int, len(models))}
	}
	return d, nil
}

// add puts query q, the next one, into the window: its calls' states, who reads each, and
// its final calls. It checks the query's numbering and models.
func (d *Driver) add(q *traces.Query) error {
	qi, id := d.queries.hi, d.calls.hi
	if q.ID != qi {
		return fmt.Errorf("query %d has id %d: query ids run 0, 1, 2, ... in order", qi, q.ID)
	}
	fill := append(d.fill[:0], make([]int, len(q.Calls)+1)...)
	for i := range q.Calls {
		c := &q.Calls[i]
		if c.ID != id+i || c.Query != qi || c.Node != i {
			return fmt.Errorf("query %d: call %d has id %d, query %d, node %d: want %d, %d, %d (traces.Workload.Finish numbers them)", qi, i, c.ID, c.Query, c.Node, id+i, qi, i)
		}
		if c.Layer >= d.layers {
			return fmt.Errorf("call %d (query %d, %s) is in layer %d, deeper than the workload's %d layers", c.ID, qi, c.Label(), c.Layer, d.layers)
		}
		fill[i] = len(d.models)
		if !c.IsTool() {
			var ok bool
			if fill[i], ok = d.byName.Get(c.Model); !ok {
				return fmt.Errorf("call %d (query %d, %s) uses model %q, which the experiment does not list", c.ID, qi, c.Label(), c.Model)
			}
		}
	}
	for i := range q.Calls {
		c := &q.Calls[i]
		*d.calls.push() = callState{call: c, waiting: int32(len(c.Inputs)), worker: -1, model: int16(fill[i])}
	}
	// Who reads each call (CSR: count, then fill), as offsets from the call's ID.
	start := d.child.end()
	clear(fill)
	for i := range q.Calls {
		for _, in := range q.Calls[i].Inputs {
			fill[in.From+1]++
		}
	}
	for i := 1; i < len(fill); i++ {
		fill[i] += fill[i-1]
	}
	for i := range q.Calls {
		d.childAt.push(start + fill[i+1])
	}
	for range fill[len(q.Calls)] {
		d.child.push(0)
	}
	kids := d.child.span(start, d.child.end())
	for i := range q.Calls {
		for _, in := range q.Calls[i].Inputs {
			kids[fill[in.From]] = int32(i - in.From)
			fill[in.From]++
		}
	}
	d.fill = fill
	qs := d.queries.push()
	*qs = queryState{q: q, first: id}
	for i := range q.Calls {
		if d.sinkCall(id + i) {
			cs := d.cs(id + i)
			qs.sinksLeft++
			cs.final = len(cs.call.Inputs) > 0
		}
	}
	d.pulled += len(q.Calls)
	return nil
}

// cs returns the state of call id, which must be in the window.
func (d *Driver) cs(id int) *callState { return d.calls.at(id) }

// qs returns the state of query qi, which must be in the window.
func (d *Driver) qs(qi int) *queryState { return d.queries.at(qi) }

// inWindow reports whether call id is in the window.
func (d *Driver) inWindow(id int) bool { return d.calls.holds(id) }

// readers returns the calls that read call id, as offsets from id.
func (d *Driver) readers(id int) []int32 {
	return d.child.span(d.childAt.at(id), d.childAt.at(id+1))
}

// sinkCall reports whether no call reads call id: a final call of its query.
func (d *Driver) sinkCall(id int) bool { return d.childAt.at(id+1) == d.childAt.at(id) }

// Run drives the policy until every query is complete and returns what happened.
func (d *Driver) Run(ctx context.Context) (*Result, error) {
	if d.overlap {
		g, ok := d.backend.(Grower)
		if !ok {
			return nil, fmt.Errorf("policy %s: prefill-decode overlap needs a backend that can grow a call's prompt, and %T cannot", d.policy.Name(), d.backend)
		}
		d.grower = g
	}
	if d.out != nil {
		if d.exit != nil || d.overlap {
			d.out.hold = true // they cancel submitted calls (see Stream)
		}
		d.out.rec = newRecorder(d.out.sink, d.out.tally, d.workers, d.out.models)
		defer d.out.rec.stop() // a run that fails waits for it too
	}
	// Queries of the offline batch are ready at the start (the policy sees them in the View);
	// later arrivals wake the driver.
	var fx effects
	if err := d.arrivals(0, &fx); err != nil {
		return nil, err
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
		derived, err := d.handle(&ev)
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
		if err := d.retire(false); err != nil {
			return nil, err
		}
	}
	return d.result()
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
	if d.stopping > 0 || d.clock.arrived < d.nq {
		return false
	}
	for _, t := range d.clock.timers {
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
	waiting = d.total0 - d.pulled // calls of queries still to come
	for id := d.calls.lo; id < d.calls.hi; id++ {
		c := d.cs(id)
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

// handle updates the state for a backend event and returns the events it causes. A call's
// event leaves it carrying the Driver's reference to the call (CallRef's every field, as the
// policy hears it in its other events), in place of the backend's.
func (d *Driver) handle(ev *Event) ([]Event, error) {
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
		if l := (LoadRecord{Worker: ev.Worker, Model: ev.Model, Start: start, End: ev.At}); d.out != nil {
			if err := d.loaded(l); err != nil {
				return nil, err
			}
		} else {
			d.loads = append(d.loads, l)
		}
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
		if id := ev.Call.ID; d.inWindow(id) && d.cs(id).aborting {
			return nil, d.dropped(id)
		}
		if id := ev.Call.ID; d.inWindow(id) && d.cs(id).status == callCancelling {
			return nil, d.stopped(ev)
		}
		return d.finish(ev)
	case EventCancelled:
		if ev.Call != nil && d.inWindow(ev.Call.ID) && d.cs(ev.Call.ID).aborting {
			return nil, d.dropped(ev.Call.ID)
		}
		if ev.Call == nil || !d.inWindow(ev.Call.ID) || d.cs(ev.Call.ID).status != callCancelling {
			return nil, fmt.Errorf("backend reported a call cancelled that was not being cancelled (%+v)", ev.Call)
		}
		return nil, d.stopped(ev)
	}
	return nil, fmt.Errorf("backend sent unexpected %s event", ev.Kind)
}

// record reports a finished call to the hooks.
func (d *Driver) record(id int) error {
	if d.CallDone != nil {
		d.CallDone(d.callRecord(id))
	}
	if d.Progress != nil {
		d.Progress(d.done, d.total)
	}
	if d.out != nil {
		return d.traced(id)
	}
	return nil
}

func (d *Driver) callRecord(id int) CallRecord {
	cs := d.cs(id)
	st, produced := "done", cs.call.OutputTokens
	switch cs.status {
	case callFailed:
		st = "failed" // what it produced is unknown: the tokens asked for stand
	case callCancelled, callCancelling:
		st, produced = "cancelled", int(cs.produced)
	}
	r := d.outcomes.retried[id]
	return CallRecord{Call: cs.call, Worker: cs.worker, Ready: cs.ready, Timing: cs.timing, Status: st, Err: d.outcomes.errs[id], Final: cs.final,
		Attempts: max(1, r.attempts), RetryLost: r.lost,
		Produced: produced}
}

func (d *Driver) finish(ev *Event) ([]Event, error) {
	id := ev.Call.ID
	if !d.inWindow(id) || d.cs(id).status != callSubmitted {
		return nil, fmt.Errorf("backend reported call %d finished, but it was not in flight", id)
	}
	cs := d.cs(id)
	cs.timing = ev.Timing
	if ev.Attempts > 1 {
		d.outcomes.retried[id] = retry{attempts: ev.Attempts, lost: ev.RetryLost}
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
			d.outcomes.errs[id] = ev.Err.Error()
		}
	}
	ev.Call = d.refPtr(id)
	d.loadsIdle = 0
	d.ws[cs.worker].inflight[cs.model]--
	d.counts(cs).remaining--
	d.done++
	if err := d.record(id); err != nil {
		return nil, err
	}
	fx := d.effects()
	d.settle(id, ev.At, &fx)
	d.steps = d.flush(&fx, d.stepEvents(), ev.At)
	return d.steps, nil
}

// stopped records that a cancelled call left its worker: stopped (EventCancelled), or done or
// failed before the cancellation took effect. The calls that read it went on without it when
// it was cancelled, so its answer is not used.
func (d *Driver) stopped(ev *Event) error {
	id := ev.Call.ID
	cs := d.cs(id)
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
	return d.record(id)
}

// dropped records that a call skipped after it was submitted open has left its worker.
func (d *Driver) dropped(id int) error {
	cs := d.cs(id)
	cs.aborting = false
	d.stopping--
	d.loadsIdle = 0
	d.ws[cs.worker].inflight[cs.model]--
	return nil
}
