// Package simulated is the simulated Backend, the peer of replay's real one: W GPU workers in
// virtual time, each running one sim.Engine per loaded model, with model load and unload costs
// from the cost model. Each worker has its own setup (Config.Workers): the workers of a mixed
// cluster differ in GPU type and tensor-parallel degree, so each runs a model with its own cost
// model and engine, and refuses a model its GPUs cannot hold; a cluster of identical workers is
// the case where every worker shares one setup (Identical).
//
// A worker may hold several models when their memory fractions fit (the Driver checks); engines
// that have work at the same time share the GPU by processor sharing: each iteration takes as
// many times longer as there are busy engines on the worker.
//
// Engines advance in closed-form stretches (sim.Engine.SteadyPlan). A stretch is planned, not
// run, until it ends; a call submitted to an engine in the middle of a stretch interrupts it at
// the first iteration boundary after the submission, exactly as a real engine admits a new
// request at its next iteration.
package simulated

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mosaic-sched/mosaic/internal/sparse"
	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// ModelSetup is how one model runs on one worker.
type ModelSetup struct {
	Cost   *sim.CostModel
	Engine sim.EngineConfig
	// Unfit, when set, says why the model cannot run on the worker (its GPUs cannot hold it):
	// a load there fails with it.
	Unfit string
}

// WorkerSetup is how each model runs on one worker, by model name. A model missing from it, or
// marked Unfit there, cannot be loaded on the worker.
type WorkerSetup map[string]ModelSetup

// Config describes the simulated cluster.
type Config struct {
	// Workers is each worker's setup, in worker order: on a mixed cluster the workers differ
	// in GPU type and tensor-parallel degree, so each runs a model with its own cost model and
	// engine (KV cache). Workers that are alike share one setup (Identical).
	Workers []WorkerSetup
	// UnloadTime is the time to stop an engine and free its memory.
	UnloadTime time.Duration
}

// Identical returns the setups of n identical workers, each running every model as models
// says: a cluster of one kind of worker.
func Identical(n int, models WorkerSetup) []WorkerSetup {
	out := make([]WorkerSetup, n)
	for w := range out {
		out[w] = models
	}
	return out
}

// setup returns how model runs on worker w, or an error when it cannot run there.
func (cfg *Config) setup(w int, model string) (ModelSetup, error) {
	s, ok := cfg.Workers[w][model]
	switch {
	case !ok:
		return s, fmt.Errorf("cluster: model %q cannot run on worker %d", model, w)
	case s.Unfit != "":
		return s, fmt.Errorf("cluster: model %s cannot run on worker %d: %s", model, w, s.Unfit)
	}
	return s, nil
}

type itemKind int

const (
	itemLoaded itemKind = iota
	itemUnloaded
	itemEngine
	itemTimer
	itemKick // start an idle engine once every submission of this instant is in
)

type item struct {
	kind    itemKind
	worker  int
	model   string
	eng     *engine
	version uint64
}

// Cluster implements backend.Backend in virtual time.
type Cluster struct {
	cfg     Config
	q       sim.Queue[item]
	workers []*worker
	// out holds the events ready to be returned by Next from out[head]; it is reused once
	// drained, so that delivering events does not allocate.
	out  []backend.Event
	head int
	// The states of calls in flight are reused: a call's state retires when its last event
	// is queued in out, and is free for another call once out has been drained (the events
	// point into it until they are consumed).
	free, retired []*callInfo
	// calls are the states of the calls in flight by call ID, in pages held only while a call
	// in flight needs them (a hash lookup per iteration output was a twentieth of a large
	// run, and a slice by ID grows with the run).
	calls sparse.Slice[*callInfo]
}

// info returns the state of call id in flight (nil: none).
func (c *Cluster) info(id uint64) *callInfo {
	if id > math.MaxInt {
		return nil
	}
	return c.calls.Get(int(id))
}

// setInfo records the state of call id in flight; nil forgets it.
func (c *Cluster) setInfo(id uint64, ci *callInfo) {
	if id > math.MaxInt {
		return // no call has such an ID (they are ints)
	}
	c.calls.Set(int(id), ci)
}

// on returns the state of call id if it is in flight on engine e (nil otherwise).
func (c *Cluster) on(e *engine, id uint64) *callInfo {
	if ci := c.info(id); ci != nil && ci.eng == e {
		return ci
	}
	return nil
}

// newCallInfo returns a call state, reused when one is free.
func (c *Cluster) newCallInfo() *callInfo {
	if n := len(c.free); n > 0 {
		ci := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		return ci
	}
	return &callInfo{}
}

type worker struct {
	id int
	// order holds the engines of the models loaded, in load order.
	order []*engine
	// unloaded holds the engine of each model last unloaded from the worker: a load of the
	// model renews it (sim.Engine.Renew), reusing its buffers.
	unloaded map[string]*sim.Engine
}

// engine returns the engine of model on the worker (nil: none): a scan of the few engines it
// holds, newest first, cheaper than hashing the name.
func (wk *worker) engine(model string) *engine {
	for i := len(wk.order) - 1; i >= 0; i-- {
		if e := wk.order[i]; e.model == model {
			return e
		}
	}
	return nil
}

type callInfo struct {
	// r is the call's reference, sent with the events that end it.
	r       backend.CallRef
	call    *traces.Call
	eng     *engine // where it runs
	timing  backend.CallTiming
	started bool
}

func (ci *callInfo) ref() *backend.CallRef { return &ci.r }

type engine struct {
	model string
	w     *worker
	eng   *sim.Engine

	version uint64
	state   engState
	start   time.Duration // of the planned stretch or committed iteration
	end     time.Duration
	steps   int     // planned stretch length
	factor  float64 // processor-sharing slowdown of the current plan
	outs    outputs // of a committed iteration
	kickDue bool    // an itemKick is scheduled
	// inflight counts its calls in flight (an open call waiting for its prompt included,
	// which the engine does not count as work).
	inflight int
	// cancels are calls to abort at the end of the committed iteration, in request order.
	cancels []uint64
}

type engState int

const (
	stIdle      engState = iota
	stPlanned            // a steady stretch is planned, not yet run
	stCommitted          // iterations have run; their outputs are due at end
)

type outputs struct {
	admitted, firstToken, finished, preempted []uint64
}

// take moves an iteration's outputs into o without copying them: the buffers are swapped,
// and the iteration keeps o's old ones, emptied (the engine empties them at its next
// iteration anyway, and nothing reads them after take).
func (o *outputs) take(it *sim.Iteration) {
	o.admitted, it.Admitted = it.Admitted, o.admitted[:0]
	o.firstToken, it.FirstToken = it.FirstToken, o.firstToken[:0]
	o.finished, it.Finished = it.Finished, o.finished[:0]
	o.preempted, it.Preempted = it.Preempted, o.preempted[:0]
}

// New returns an idle cluster with no model loaded.
func New(cfg Config) (*Cluster, error) {
	if len(cfg.Workers) == 0 {
		return nil, fmt.Errorf("cluster: no workers")
	}
	c := &Cluster{cfg: cfg}
	for i := range cfg.Workers {
		c.workers = append(c.workers, &worker{id: i, unloaded: map[string]*sim.Engine{}})
	}
	return c, nil
}

var _ backend.Backend = (*Cluster)(nil)

// Now implements backend.Backend.
func (c *Cluster) Now() time.Duration { return c.q.Now() }

// Load implements backend.Backend.
func (c *Cluster) Load(w backend.WorkerID, model string) error {
	if w < 0 || int(w) >= len(c.workers) {
		return fmt.Errorf("cluster: no worker %d", w)
	}
	setup, err := c.cfg.setup(int(w), model)
	if err != nil {
		return err
	}
	c.q.Schedule(c.Now()+setup.Cost.LoadTime(), item{kind: itemLoaded, worker: int(w), model: model})
	return nil
}

// Unload implements backend.Backend.
func (c *Cluster) Unload(w backend.WorkerID, model string) error {
	wk := c.workers[w]
	e := wk.engine(model)
	if e == nil {
		return fmt.Errorf("cluster: worker %d does not hold %s", w, model)
	}
	if !e.eng.Idle() || e.state != stIdle || e.inflight > 0 {
		return fmt.Errorf("cluster: %s on worker %d still has work", model, w)
	}
	wk.unloaded[model] = e.eng
	for i, m := range wk.order {
		if m == e {
			wk.order = append(wk.order[:i:i], wk.order[i+1:]...)
			break
		}
	}
	c.q.Schedule(c.Now()+c.cfg.UnloadTime, item{kind: itemUnloaded, worker: int(w), model: model})
	return nil
}

// WakeAt implements backend.Backend.
func (c *Cluster) WakeAt(t time.Duration) {
	c.q.Schedule(max(t, c.Now()), item{kind: itemTimer})
}

// Submit implements backend.Backend. A call whose ID is in flight, on any worker, is refused,
// and so is a priority other than 0 on an engine that schedules first come first served.
func (c *Cluster) Submit(w backend.WorkerID, call *traces.Call, priority int) error {
	return c.submit(w, call, false, priority)
}

// SubmitOpen implements backend.Grower: the call's engine sequence prefills the prompt known
// so far and waits for Grow.
func (c *Cluster) SubmitOpen(w backend.WorkerID, call *traces.Call, priority int) error {
	return c.submit(w, call, true, priority)
}

var _ backend.Grower = (*Cluster)(nil)

// Grow implements backend.Grower: the tokens join the call's prompt at the engine's next
// iteration boundary.
func (c *Cluster) Grow(w backend.WorkerID, id int, tokens int, close bool) error {
	if w < 0 || int(w) >= len(c.workers) {
		return fmt.Errorf("cluster: no worker %d", w)
	}
	ci := c.info(uint64(id))
	if ci == nil || ci.eng.w != c.workers[w] {
		return fmt.Errorf("cluster: call %d is not in flight on worker %d", id, w)
	}
	e := ci.eng
	now := c.Now()
	if e.state == stPlanned {
		c.cut(e, now)
	}
	if err := e.eng.Grow(uint64(id), tokens, close); err != nil {
		return fmt.Errorf("call %d on worker %d: %w", id, w, err)
	}
	if e.state == stIdle && !e.kickDue && !e.eng.Idle() {
		e.kickDue = true
		c.q.Schedule(now, item{kind: itemKick, eng: e})
	}
	return nil
}

func (c *Cluster) submit(w backend.WorkerID, call *traces.Call, open bool, priority int) error {
	if w < 0 || int(w) >= len(c.workers) {
		return fmt.Errorf("cluster: no worker %d", w)
	}
	e := c.workers[w].engine(call.Model)
	if e == nil {
		return fmt.Errorf("cluster: worker %d does not hold %s", w, call.Model)
	}
	if ci := c.info(uint64(call.ID)); ci != nil {
		return fmt.Errorf("cluster: call %d is already in flight on worker %d", call.ID, ci.eng.w.id)
	}
	now := c.Now()
	if e.state == stPlanned {
		c.cut(e, now)
	}
	// The query's calls share their question as a prompt prefix (a prefix cache reuses it).
	req := sim.Request{ID: uint64(call.ID), PromptTokens: call.InputTokens, OutputTokens: call.OutputTokens,
		PrefixKey: uint64(call.Query) + 1, PrefixTokens: call.PrefixTokens, Open: open, Priority: priority}
	if err := e.eng.Add(req); err != nil {
		return fmt.Errorf("call %d (query %d, %s) on worker %d: %w", call.ID, call.Query, call.Model, w, err)
	}
	ci := c.newCallInfo()
	*ci = callInfo{call: call, eng: e, timing: backend.CallTiming{Submitted: now},
		r: backend.CallRef{ID: call.ID, Query: call.Query, Role: call.Role, Layer: call.Layer, Model: call.Model, InputTokens: call.InputTokens}}
	c.setInfo(req.ID, ci)
	e.inflight++
	if e.state == stIdle && !e.kickDue {
		// Start the engine after every call submitted at this instant has joined, as a real
		// engine would batch them into one iteration. (Otherwise the request joins when the
		// iterations already run end.)
		e.kickDue = true
		c.q.Schedule(now, item{kind: itemKick, eng: e})
	}
	return nil
}

// Cancel implements backend.Backend: the call leaves its engine at the next iteration
// boundary (at once when none is under way), its KV blocks are freed, and EventCancelled
// reports the tokens it produced. A call that finishes in the iteration under way reports
// EventDone instead. The call is in flight until then: it cannot be submitted again before.
func (c *Cluster) Cancel(w backend.WorkerID, id int) error {
	if w < 0 || int(w) >= len(c.workers) {
		return fmt.Errorf("cluster: no worker %d", w)
	}
	if ci := c.info(uint64(id)); ci != nil && ci.eng.w == c.workers[w] {
		e := ci.eng
		now := c.Now()
		if e.state == stPlanned {
			c.cut(e, now)
		}
		if e.state == stCommitted {
			e.cancels = append(e.cancels, uint64(id))
			return nil
		}
		c.abort(e, uint64(id), now)
		if !e.eng.Idle() && !e.kickDue {
			e.kickDue = true
			c.q.Schedule(now, item{kind: itemKick, eng: e})
		}
		return nil
	}
	for _, ev := range c.out[c.head:] {
		if ev.Kind == backend.EventDone && ev.Worker == w && ev.Call != nil && ev.Call.ID == id {
			return nil // it finished at this instant; its EventDone is on its way
		}
	}
	return fmt.Errorf("cluster: call %d is not in flight on worker %d", id, w)
}

// abort stops call id in e's engine at now and reports it cancelled.
func (c *Cluster) abort(e *engine, id uint64, now time.Duration) {
	ci := c.on(e, id)
	if ci == nil {
		return // it finished in the iteration that just ended
	}
	c.setInfo(id, nil)
	e.inflight--
	produced, _ := e.eng.Abort(id)
	ci.timing.End = now
	c.out = append(c.out, backend.Event{Kind: backend.EventCancelled, At: now, Worker: backend.WorkerID(e.w.id), Model: e.model,
		Call: ci.ref(), Timing: ci.timing, Produced: produced})
	c.retired = append(c.retired, ci)
}

// Next implements backend.Backend.
func (c *Cluster) Next(ctx context.Context) (backend.Event, error) {
	for c.head == len(c.out) {
		c.out, c.head = c.out[:0], 0
		if len(c.retired) > 0 {
			c.free = append(c.free, c.retired...)
			clear(c.retired)
			c.retired = c.retired[:0]
		}
		if err := ctx.Err(); err != nil {
			return backend.Event{}, err
		}
		it, ok := c.q.Pop()
		if !ok {
			return backend.Event{}, backend.ErrIdle
		}
		c.process(it.At, it.Payload)
	}
	ev := c.out[c.head]
	c.out[c.head] = backend.Event{} // let the collector have its call
	c.head++
	return ev, nil
}

func (c *Cluster) process(now time.Duration, it item) {
	switch it.kind {
	case itemTimer:
		c.out = append(c.out, backend.Event{Kind: backend.EventTimer, At: now})
	case itemLoaded:
		setup, err := c.cfg.setup(it.worker, it.model)
		var eng *sim.Engine
		wk := c.workers[it.worker]
		if err == nil {
			if old := wk.unloaded[it.model]; old != nil {
				delete(wk.unloaded, it.model)
				eng, _ = old.Renew()
			}
			if eng == nil {
				eng, err = sim.NewEngine(setup.Engine, setup.Cost)
			}
		}
		if err != nil {
			c.out = append(c.out, backend.Event{Kind: backend.EventFailed, At: now, Worker: backend.WorkerID(it.worker), Model: it.model, Err: err})
			return
		}
		eng.OmitProduced() // first tokens and finishes are all the cluster reads
		e := &engine{model: it.model, w: wk, eng: eng}
		wk.order = append(wk.order, e)
		c.out = append(c.out, backend.Event{Kind: backend.EventLoaded, At: now, Worker: backend.WorkerID(it.worker), Model: it.model})
	case itemUnloaded:
		c.out = append(c.out, backend.Event{Kind: backend.EventUnloaded, At: now, Worker: backend.WorkerID(it.worker), Model: it.model})
	case itemKick:
		e := it.eng
		e.kickDue = false
		if e.state == stIdle {
			c.kick(e, now)
			c.replanOthers(e, now)
		}
	case itemEngine:
		e := it.eng
		if it.version != e.version {
			return // a plan that was interrupted
		}
		if e.state == stPlanned {
			e.outs.take(e.eng.RunSteady(e.steps))
		}
		c.deliver(e, now)
		e.state = stIdle
		c.kick(e, now)
		if e.state == stIdle {
			c.replanOthers(e, now) // one busy engine fewer on the worker
		}
	}
}

// deliver turns a committed iteration's outputs into call timings and Done events at now.
func (c *Cluster) deliver(e *engine, now time.Duration) {
	for _, id := range e.outs.admitted {
		if ci := c.on(e, id); ci != nil && !ci.started {
			ci.timing.Started, ci.started = e.start, true
		}
	}
	for _, id := range e.outs.preempted {
		if ci := c.on(e, id); ci != nil {
			ci.timing.Preemptions++
		}
	}
	for _, id := range e.outs.firstToken {
		if ci := c.on(e, id); ci != nil {
			ci.timing.FirstToken = now
		}
	}
	for _, id := range e.outs.finished {
		ci := c.on(e, id)
		c.setInfo(id, nil)
		e.inflight--
		ci.timing.End = now
		c.out = append(c.out, backend.Event{Kind: backend.EventDone, At: now, Worker: backend.WorkerID(e.w.id), Model: e.model, Call: ci.ref(), Timing: ci.timing})
		c.retired = append(c.retired, ci)
	}
	for _, id := range e.cancels {
		c.abort(e, id, now)
	}
	e.cancels = e.cancels[:0]
	e.outs = outputs{admitted: e.outs.admitted[:0], firstToken: e.outs.firstToken[:0], finished: e.outs.finished[:0], preempted: e.outs.preempted[:0]}
}

// busyEngines counts the engines of w that have work.
func busyEngines(w *worker) int {
	n := 0
	for _, e := range w.order {
		if !e.eng.Idle() || e.state != stIdle {
			n++
		}
	}
	return n
}

// kick starts the next stretch or iteration of an idle engine at now.
func (c *Cluster) kick(e *engine, now time.Duration) {
	e.version++
	if e.eng.Idle() {
		e.state = stIdle
		return
	}
	e.factor = float64(max(1, busyEngines(e.w)))
	e.start = now
	if k, d := e.eng.SteadyPlan(); k > 0 {
		e.state, e.steps = stPlanned, k
		e.end = now + scale(d, e.factor)
	} else {
		it := e.eng.Step()
		e.outs.take(it)
		e.state = stCommitted
		e.end = now + scale(it.Duration, e.factor)
	}
	c.q.Schedule(e.end, item{kind: itemEngine, eng: e, version: e.version})
}

// cut ends a planned stretch at the first iteration boundary at or after now: the iterations
// that have run are committed (their outputs due when they end); if none has, the engine is
// left idle for the caller to kick.
func (c *Cluster) cut(e *engine, now time.Duration) {
	e.version++ // the planned end event is void
	e.state = stIdle
	elapsed := time.Duration(float64(now-e.start) / e.factor)
	if elapsed <= 0 {
		return
	}
	it := e.eng.RunSteady(e.eng.StepsToReach(e.steps, elapsed))
	e.outs.take(it)
	e.state = stCommitted
	e.end = e.start + scale(it.Duration, e.factor)
	c.q.Schedule(e.end, item{kind: itemEngine, eng: e, version: e.version})
}

// replanOthers re-plans the other engines of e's worker when the number of busy engines
// changed, so their processor share is right.
func (c *Cluster) replanOthers(e *engine, now time.Duration) {
	n := float64(max(1, busyEngines(e.w)))
	for _, o := range e.w.order {
		if o != e && o.state == stPlanned && o.factor != n {
			c.cut(o, now)
			if o.state == stIdle {
				c.kick(o, now)
			}
		}
	}
}

func scale(d time.Duration, f float64) time.Duration {
	if f == 1 {
		return d
	}
	return time.Duration(float64(d) * f)
}
