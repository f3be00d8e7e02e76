package policies

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// Driver owns the Mixture-of-Agents pipeline and its invariants, and applies a Policy to a
// Backend:
//   - a call runs only on a worker that holds its model, and only once;
//   - a worker holds only what fits its memory;
//   - when a query's expert calls are all done, the Rule decides: skip (the majority answer is
//     final) or release the aggregator call;
//   - stage barriers are the policy's choice.
//
// A Driver runs one policy once; it is not safe for concurrent use.
type Driver struct {
	backend  Backend
	policy   Policy
	rule     Rule
	workload *traces.Workload
	models   []ModelInfo
	byName   map[string]int
	workers  int
	// Progress, when set, is called after every finished call with the number done and total.
	Progress func(done, total int)
	// CallDone, when set, is called with the record of every call as it finishes (or fails),
	// from the Driver's goroutine: the hook that writes results as they come.
	CallDone func(CallRecord)

	k       int
	calls   []callState // by call ID
	queries []queryState
	ws      []workerState
	ready   map[int]struct{}
	order   []int // ready call ids in release order (lazily pruned)
	expect  map[stageModel]*counts
	loads   []LoadRecord
	pending int // queries not complete
	done    int // calls done
	total   int // calls that will run, as known
	trace   bool
}

type stageModel struct {
	stage traces.Stage
	model string
}

type counts struct{ expected, remaining int }

type callStatus int

const (
	callWaiting callStatus = iota // not released
	callReady
	callSubmitted
	callDone
	callFailed
	callSkipped // aggregator call of a skipped query
)

type callState struct {
	call   *traces.Call
	status callStatus
	worker WorkerID
	ready  time.Duration
	timing CallTiming
	err    string
}

type queryState struct {
	expertsDone int
	complete    bool
	decision    Decision
	final       string
}

type workerState struct {
	holds     []string
	loading   map[string]time.Duration // model -> load start
	unloading map[string]time.Duration
	inflight  map[string]int
}

// NewDriver checks the workload against the models and returns a driver. models are the
// experiment's models (every call's model must be among them); workers is the cluster size.
func NewDriver(b Backend, p Policy, r Rule, wl *traces.Workload, models []ModelInfo, workers int) (*Driver, error) {
	d := &Driver{backend: b, policy: p, rule: r, workload: wl, models: models, workers: workers,
		byName: map[string]int{}, ready: map[int]struct{}{}, expect: map[stageModel]*counts{}}
	for i, m := range models {
		d.byName[m.Name] = i
	}
	if workers <= 0 {
		return nil, errors.New("policies: no workers")
	}
	d.k = wl.ExpertsPerQuery()
	d.calls = make([]callState, len(wl.Queries)*(d.k+1))
	d.queries = make([]queryState, len(wl.Queries))
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		if len(q.Experts) != d.k {
			return nil, fmt.Errorf("query %d has %d experts, others %d", q.ID, len(q.Experts), d.k)
		}
		for i := range q.Experts {
			if err := d.addCall(&q.Experts[i], qi*(d.k+1)+i); err != nil {
				return nil, err
			}
		}
		if err := d.addCall(&q.Aggregator, qi*(d.k+1)+d.k); err != nil {
			return nil, err
		}
	}
	d.ws = make([]workerState, workers)
	for i := range d.ws {
		d.ws[i] = workerState{loading: map[string]time.Duration{}, unloading: map[string]time.Duration{}, inflight: map[string]int{}}
	}
	d.pending = len(wl.Queries)
	d.total = len(wl.Queries) * (d.k + 1)
	return d, nil
}

func (d *Driver) addCall(c *traces.Call, id int) error {
	if c.ID != id {
		return fmt.Errorf("call of query %d has id %d, want %d", c.Query, c.ID, id)
	}
	if _, ok := d.byName[c.Model]; !ok {
		return fmt.Errorf("call %d (query %d, %s) uses model %q, which the experiment does not list", c.ID, c.Query, c.Stage, c.Model)
	}
	d.calls[id] = callState{call: c}
	sm := stageModel{c.Stage, c.Model}
	if d.expect[sm] == nil {
		d.expect[sm] = &counts{}
	}
	d.expect[sm].expected++
	d.expect[sm].remaining++
	return nil
}

// Run drives the policy until every query is complete and returns what happened.
func (d *Driver) Run(ctx context.Context) (*Result, error) {
	// Offline queries are ready at the start; later arrivals wake the driver.
	arrivals := map[time.Duration][]int{}
	for qi, q := range d.workload.Queries {
		if q.Arrival <= 0 {
			d.releaseExperts(qi, 0)
		} else {
			if _, ok := arrivals[q.Arrival]; !ok {
				d.backend.WakeAt(q.Arrival)
			}
			arrivals[q.Arrival] = append(arrivals[q.Arrival], qi)
		}
	}
	acts, err := d.policy.Start(d)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", d.policy.Name(), err)
	}
	if err := d.apply(acts); err != nil {
		return nil, err
	}
	for d.pending > 0 {
		ev, err := d.backend.Next(ctx)
		if errors.Is(err, ErrIdle) {
			return nil, d.stalled()
		}
		if err != nil {
			return nil, err
		}
		derived, err := d.handle(ev, arrivals)
		if err != nil {
			return nil, err
		}
		if ev.Kind != EventTimer {
			if err := d.apply(d.policy.OnEvent(ev, d)); err != nil {
				return nil, err
			}
		}
		for _, de := range derived {
			if err := d.apply(d.policy.OnEvent(de, d)); err != nil {
				return nil, err
			}
		}
	}
	return d.result(), nil
}

func (d *Driver) stalled() error {
	var ready, waiting, inflight int
	for _, c := range d.calls {
		switch c.status {
		case callReady:
			ready++
		case callWaiting:
			waiting++
		case callSubmitted:
			inflight++
		}
	}
	return fmt.Errorf("policy %s stalled at %v: %d queries incomplete, %d calls ready but never submitted, %d not released, %d in flight",
		d.policy.Name(), d.backend.Now(), d.pending, ready, waiting, inflight)
}

func (d *Driver) releaseExperts(qi int, now time.Duration) []CallRef {
	refs := make([]CallRef, 0, d.k)
	for i := 0; i < d.k; i++ {
		refs = append(refs, d.release(qi*(d.k+1)+i, now))
	}
	return refs
}

func (d *Driver) release(id int, now time.Duration) CallRef {
	cs := &d.calls[id]
	cs.status = callReady
	cs.ready = now
	d.ready[id] = struct{}{}
	d.order = append(d.order, id)
	return d.ref(id)
}

func (d *Driver) ref(id int) CallRef {
	c := d.calls[id].call
	ref := CallRef{ID: id, Query: c.Query, Stage: c.Stage, Model: c.Model, InputTokens: c.InputTokens, Ready: d.calls[id].ready}
	if c.Stage == traces.StageAggregator {
		ref.Confidence = d.queries[c.Query].decision.Confidence
	}
	return ref
}

// handle updates the state for a backend event and returns the events it causes.
func (d *Driver) handle(ev Event, arrivals map[time.Duration][]int) ([]Event, error) {
	switch ev.Kind {
	case EventTimer:
		qs := arrivals[ev.At]
		delete(arrivals, ev.At)
		var refs []CallRef
		for _, qi := range qs {
			refs = append(refs, d.releaseExperts(qi, ev.At)...)
		}
		if len(refs) == 0 {
			return nil, nil
		}
		return []Event{{Kind: EventReleased, At: ev.At, Calls: refs}}, nil
	case EventLoaded:
		ws := &d.ws[ev.Worker]
		start, ok := ws.loading[ev.Model]
		if !ok {
			return nil, fmt.Errorf("backend reported %s loaded on worker %d, which was not loading it", ev.Model, ev.Worker)
		}
		delete(ws.loading, ev.Model)
		ws.holds = append(ws.holds, ev.Model)
		d.loads = append(d.loads, LoadRecord{Worker: ev.Worker, Model: ev.Model, Start: start, End: ev.At})
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
		return d.finish(ev)
	}
	return nil, fmt.Errorf("backend sent unexpected %s event", ev.Kind)
}

func (d *Driver) finish(ev Event) ([]Event, error) {
	id := ev.Call.ID
	if id < 0 || id >= len(d.calls) || d.calls[id].status != callSubmitted {
		return nil, fmt.Errorf("backend reported call %d finished, but it was not in flight", id)
	}
	cs := &d.calls[id]
	cs.timing = ev.Timing
	if ev.Kind == EventDone {
		cs.status = callDone
	} else {
		cs.status = callFailed
		if ev.Err != nil {
			cs.err = ev.Err.Error()
		}
	}
	d.ws[cs.worker].inflight[cs.call.Model]--
	d.expect[stageModel{cs.call.Stage, cs.call.Model}].remaining--
	d.done++
	if d.CallDone != nil {
		st := "done"
		if cs.status == callFailed {
			st = "failed"
		}
		d.CallDone(CallRecord{Call: cs.call, Worker: cs.worker, Ready: cs.ready, Timing: cs.timing, Status: st, Err: cs.err})
	}
	if d.Progress != nil {
		d.Progress(d.done, d.total)
	}
	qi := cs.call.Query
	qs := &d.queries[qi]
	if cs.call.Stage == traces.StageAggregator {
		qs.complete = true
		qs.final = cs.call.Answer
		if cs.status == callFailed {
			qs.final = qs.decision.Majority // the aggregator failed: fall back to the vote
		}
		d.pending--
		return nil, nil
	}
	qs.expertsDone++
	if qs.expertsDone < d.k {
		return nil, nil
	}
	answers := make([]string, d.k)
	for i := 0; i < d.k; i++ {
		c := d.calls[qi*(d.k+1)+i]
		if c.status == callDone {
			answers[i] = c.call.Answer
		}
	}
	qs.decision = d.rule.Decide(answers)
	aggID := qi*(d.k+1) + d.k
	if qs.decision.Skip {
		qs.complete = true
		qs.final = qs.decision.Majority
		d.calls[aggID].status = callSkipped
		agg := d.calls[aggID].call
		d.expect[stageModel{agg.Stage, agg.Model}].expected--
		d.expect[stageModel{agg.Stage, agg.Model}].remaining--
		d.total--
		d.pending--
		return []Event{{Kind: EventSkipped, At: ev.At, Query: qi}}, nil
	}
	ref := d.release(aggID, ev.At)
	return []Event{{Kind: EventReleased, At: ev.At, Calls: []CallRef{ref}}}, nil
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
		if ws.inflight[a.Model] > 0 {
			return fmt.Errorf("%d of its calls are in flight there", ws.inflight[a.Model])
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
		if err := d.backend.Submit(a.Worker, cs.call); err != nil {
			return err
		}
		cs.status = callSubmitted
		cs.worker = a.Worker
		delete(d.ready, a.CallID)
		ws.inflight[cs.call.Model]++
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
	return nil
}

func (s callStatus) String() string {
	return [...]string{"not released", "ready", "already submitted", "done", "failed", "skipped"}[s]
}

func (d *Driver) holds(w WorkerID, model string) bool {
	for _, m := range d.ws[w].holds {
		if m == model {
			return true
		}
	}
	return false
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
		return d.ws[w].inflight[model]
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
		if _, ok := d.ready[id]; ok {
			kept = append(kept, id)
			out = append(out, d.ref(id))
		}
	}
	d.order = kept
	return out
}

// Expected implements View.
func (d *Driver) Expected(stage traces.Stage, model string) int {
	if c := d.expect[stageModel{stage, model}]; c != nil {
		return c.expected
	}
	return 0
}

// Remaining implements View.
func (d *Driver) Remaining(stage traces.Stage, model string) int {
	if c := d.expect[stageModel{stage, model}]; c != nil {
		return c.remaining
	}
	return 0
}

// Queries implements View.
func (d *Driver) Queries() int { return len(d.workload.Queries) }

// K implements View.
func (d *Driver) K() int { return d.k }

var _ View = (*Driver)(nil)
