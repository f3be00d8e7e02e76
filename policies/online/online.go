// Package online is an online serving policy for call graphs: it places models for the
// expected mix of calls and dispatches each call as it becomes ready, with no stage barrier.
//
//   - Placement: the MOSAIC ILP (mosaic.PlanStage) on the expected calls per model over every
//     layer gives each model its replicas (on a mixed cluster, priced with each worker's own
//     costs); a worker serves one model at a time, its assigned models in turn. A worker never
//     takes on a model its GPUs cannot hold (ModelInfo.CanRun), by swap or by stealing.
//   - Dispatch: each model has one queue of ready calls; a worker pulls from its model's queue
//     while it has fewer than MaxInFlight calls in flight (late binding, so replicas of a
//     model share its queue and an idle replica takes work queued for a busy one: work
//     stealing between replicas). Queues are ordered by layer, deepest first, then by the
//     query's arrival: a call that finishes a started query goes before one that starts a
//     new query (program-level least-attained-service, as Autellix schedules agent programs).
//     Among workers with room, the one with the least expected outstanding work gets the call.
//   - Swaps: a worker whose model has nothing queued or in flight switches to another of its
//     models that has calls waiting; an idle worker takes on a model whose backlog is larger
//     than Steal times its replicas' capacity (a new replica); a model with calls waiting and
//     no replica gets the least busy worker.
//   - Re-planning: every Replan of simulated time the policy compares the mix of calls released
//     since the last plan with the planned one and, when their shares of the expected work
//     differ by more than Drift (total variation), plans again; workers move to their new
//     models as they become idle.
//
// The policy sees only what the View shows: released calls, the profiled length
// distributions and the expected number of calls per model (the mix a deployment knows from
// its history), never a call's output length.
package online

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/mosaic-sched/mosaic/internal/heapx"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/mosaic"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/traces"
)

// Name is the policy's name in experiment files.
const Name = "online"

// Defaults of Options.
const (
	DefaultReplan = time.Minute
	DefaultDrift  = 0.2
	DefaultSteal  = 2.0
)

// Options configure the policy.
type Options struct {
	// Outputs are the output-length distributions of the calls of a layer and model where they
	// differ from the model's own (see mosaic.Options).
	Outputs map[mosaic.Key]traces.LengthDist
	// TimeLimit bounds each ILP solve (default solver.DefaultTimeLimit).
	TimeLimit time.Duration
	// Replan is how often the policy checks the mix (0: DefaultReplan; negative: never).
	Replan time.Duration
	// Drift is the share of expected work that must move between models before it plans
	// again (0: DefaultDrift).
	Drift float64
	// Steal is how many replicas' worth of backlog (calls in flight across the model's
	// replicas, at MaxInFlight each) makes an idle worker take on a model (0: DefaultSteal;
	// negative: never).
	Steal float64
	// MaxInFlight caps the calls in flight per worker (0: the model's engine max_num_seqs).
	MaxInFlight int
}

// Policy implements policies.Policy.
type Policy struct {
	opts    Options
	workers []*worker
	queues  map[string]*queue
	// plan is the current placement: per worker its models in serving order.
	plan     [][]string
	planMix  map[string]float64 // planned share of expected work per model
	released map[string]int     // calls released per model since the last plan
	meanOut  map[string]float64 // expected output tokens of a model's call
	arrival  map[int]time.Duration
	plans    []*mosaic.StagePlan
	replans  int
	// Per model, cached at Start: the names in the experiment's order, the calls a worker may
	// have in flight, and how long calls may wait with no replica.
	models   []string
	limit    map[string]int
	patient  map[string]time.Duration
	assigned map[string]bool // models the plan gives some worker
	replicas map[string]int  // scratch of swaps
	// infos are the models as the View gave them at Start (their per-worker costs on a mixed
	// cluster).
	infos map[string]policies.ModelInfo
	// dropped are queued calls cancelled before they were submitted.
	dropped map[int]bool
	// Overlap (calls released open): a query's open calls wait in held until every other
	// call it has released is submitted (unsent counts those not yet), so that an open call
	// holds a worker only while its inputs are in flight, never while they wait for a worker.
	held   map[int][]policies.CallRef
	unsent map[int]int
}

type worker struct {
	id      policies.WorkerID
	active  string // the model it serves (held or loading)
	loading bool
	// unloading is the model whose unload this policy requested and that has not completed;
	// want the model to load once it has.
	unloading string
	want      string
	// loadedAt is when its active model finished loading: it keeps the model until the
	// model's queue is empty or it has held it for the patience.
	loadedAt time.Duration
	// held are the models it holds (loaded, not being unloaded), as the policy's own actions
	// and the backend's events say.
	held        []string
	outstanding float64
	inflight    map[int]float64 // call -> expected tokens
}

// queue is one model's ready calls, a heap ordered deepest layer first, then oldest query,
// then release order.
type queue struct {
	calls []queued
	seq   int
	// since is when the queue last became non-empty.
	since time.Duration
}

type queued struct {
	ref     policies.CallRef
	arrival time.Duration
	seq     int
}

// queuedLess orders a queue: the deepest layer first, then the oldest query, then release
// order.
func queuedLess(a, b *queued) bool {
	if a.ref.Layer != b.ref.Layer {
		return a.ref.Layer > b.ref.Layer
	}
	if a.arrival != b.arrival {
		return a.arrival < b.arrival
	}
	return a.seq < b.seq
}

func (q *queue) push(c queued) { q.calls = heapx.Push(q.calls, c, queuedLess) }

func (q *queue) pop() queued {
	var c queued
	q.calls, c = heapx.Pop(q.calls, queuedLess)
	return c
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy.
func New(o Options) *Policy {
	if o.TimeLimit <= 0 {
		o.TimeLimit = solver.DefaultTimeLimit
	}
	if o.Replan == 0 {
		o.Replan = DefaultReplan
	}
	if o.Drift == 0 {
		o.Drift = DefaultDrift
	}
	if o.Steal == 0 {
		o.Steal = DefaultSteal
	}
	return &Policy{opts: o}
}

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Placements returns the placements the policy solved, in order (the first at the start).
func (p *Policy) Placements() []*mosaic.StagePlan { return p.plans }

// Replans counts the placements made after the first.
func (p *Policy) Replans() int { return p.replans }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.workers = make([]*worker, W)
	for w := range p.workers {
		p.workers[w] = &worker{id: policies.WorkerID(w), inflight: map[int]float64{}}
	}
	p.queues = map[string]*queue{}
	p.dropped = map[int]bool{}
	p.held, p.unsent = map[int][]policies.CallRef{}, map[int]int{}
	p.arrival = map[int]time.Duration{}
	p.meanOut = map[string]float64{}
	p.limit, p.patient, p.replicas = map[string]int{}, map[string]time.Duration{}, map[string]int{}
	p.infos = map[string]policies.ModelInfo{}
	for _, m := range v.Models() {
		p.infos[m.Name] = m
		p.models = append(p.models, m.Name)
		p.queues[m.Name] = &queue{}
		p.meanOut[m.Name] = p.expectedOutput(v, m)
		p.limit[m.Name] = 256
		if p.opts.MaxInFlight > 0 {
			p.limit[m.Name] = p.opts.MaxInFlight
		} else if m.Engine.MaxNumSeqs > 0 {
			p.limit[m.Name] = m.Engine.MaxNumSeqs
		}
		// Calls may wait twice a model's load time, at least a minute, with no replica before
		// a busy worker drains to serve them, so that swaps do not thrash.
		p.patient[m.Name] = max(time.Minute, 2*m.LoadTime)
	}
	counts := map[string]int{}
	for _, m := range v.Models() {
		counts[m.Name] = v.Expected(policies.AnyLayer, m.Name)
	}
	if err := p.place(v, counts, meanPrompts(v.Ready())); err != nil {
		return nil, err
	}
	p.enqueue(v.Ready())
	var acts []policies.Action
	for _, wk := range p.workers {
		if len(p.plan[wk.id]) > 0 {
			acts = append(acts, p.load(wk, p.plan[wk.id][0]))
		}
	}
	if p.opts.Replan > 0 {
		acts = append(acts, policies.WakeAt(v.Now()+p.opts.Replan))
	}
	return acts, nil
}

// expectedOutput is the mean output of a model's calls over the layers it serves, weighted by
// its expected calls there.
func (p *Policy) expectedOutput(v policies.View, m policies.ModelInfo) float64 {
	sum, n := 0.0, 0
	for l := range v.Layers() {
		k := v.Expected(l, m.Name)
		if k == 0 {
			continue
		}
		mean := 1.0
		if d := p.opts.Outputs[mosaic.Key{Layer: l, Model: m.Name}]; d != nil {
			mean = d.Mean()
		} else if m.Output != nil {
			mean = m.Output.Mean()
		}
		sum += float64(k) * mean
		n += k
	}
	if n == 0 {
		if m.Output != nil {
			return m.Output.Mean()
		}
		return 1
	}
	return sum / float64(n)
}

func meanPrompts(calls []policies.CallRef) map[string]int {
	sum, n := map[string]int{}, map[string]int{}
	for _, c := range calls {
		sum[c.Model] += c.InputTokens
		n[c.Model]++
	}
	out := map[string]int{}
	for m := range sum {
		out[m] = sum[m] / n[m]
	}
	return out
}

// planningCalls bounds the calls a placement is solved for: the mix matters, not its size, and
// profiling a model's serving curve costs time in the calls it serves.
const planningCalls = 2048

// place solves the placement for the mix of counts calls per model and records it.
func (p *Policy) place(v policies.View, counts map[string]int, prompts map[string]int) error {
	total := 0
	for _, n := range counts {
		total += n
	}
	scale := min(1, float64(planningCalls)/float64(max(1, total)))
	var demand []mosaic.Demand
	outputs := map[string]traces.LengthDist{}
	for _, m := range v.Models() {
		if counts[m.Name] > 0 {
			n := max(1, int(math.Round(float64(counts[m.Name])*scale)))
			demand = append(demand, mosaic.Demand{Model: m.Name, Calls: n, Prompt: cmp.Or(prompts[m.Name], 1)})
		}
	}
	if len(demand) == 0 {
		return fmt.Errorf("the workload has no LLM calls")
	}
	sp, err := mosaic.PlanStage(context.Background(), v.Models(), outputs, demand, v.Workers(), nil, nil, p.opts.TimeLimit)
	if err != nil {
		return fmt.Errorf("placing models: %w", err)
	}
	sp.Start = v.Now()
	p.plans = append(p.plans, sp)
	plan := make([][]string, v.Workers())
	work := make([]map[string]float64, v.Workers())
	for w := range work {
		work[w] = map[string]float64{}
	}
	for i, m := range sp.Models {
		for w, x := range sp.Plan.Counts[i] {
			if x > 0 {
				plan[w] = append(plan[w], m)
				work[w][m] = sp.Problem.Items[i].CurveOn(w).At(x)
			}
		}
	}
	for w := range plan {
		slices.SortStableFunc(plan[w], func(a, b string) int { return cmp.Compare(work[w][b], work[w][a]) })
	}
	p.plan = plan
	p.assigned = map[string]bool{}
	for _, models := range plan {
		for _, m := range models {
			p.assigned[m] = true
		}
	}
	p.planMix = p.mix(counts)
	p.released = map[string]int{}
	return nil
}

// mix is each model's share of the expected work of counts calls.
func (p *Policy) mix(counts map[string]int) map[string]float64 {
	total := 0.0
	out := map[string]float64{}
	for m, n := range counts {
		out[m] = float64(n) * p.meanOut[m]
		total += out[m]
	}
	for m := range out {
		if total > 0 {
			out[m] /= total
		}
	}
	return out
}

func (p *Policy) load(wk *worker, model string) policies.Action {
	wk.active, wk.loading, wk.want = model, true, ""
	return policies.Load(wk.id, model)
}

// enqueue adds released calls to their models' queues; open ones wait until their query's
// other calls are submitted.
func (p *Policy) enqueue(calls []policies.CallRef) {
	for _, c := range calls {
		if c.Open {
			p.held[c.Query] = append(p.held[c.Query], c)
			continue
		}
		p.unsent[c.Query]++
		p.push(c)
	}
	for _, c := range calls {
		p.unhold(c.Query)
	}
}

// unhold queues a query's held open calls once none of its other released calls waits.
func (p *Policy) unhold(q int) {
	if p.unsent[q] > 0 || len(p.held[q]) == 0 {
		return
	}
	for _, c := range p.held[q] {
		p.push(c)
	}
	delete(p.held, q)
}

// sent records that call c left its queue (submitted or dropped).
func (p *Policy) sent(c policies.CallRef) {
	if c.Open {
		return
	}
	if p.unsent[c.Query]--; p.unsent[c.Query] <= 0 {
		delete(p.unsent, c.Query)
		p.unhold(c.Query)
	}
}

// push adds a call to its model's queue.
func (p *Policy) push(c policies.CallRef) {
	arrival, ok := p.arrival[c.Query]
	if !ok {
		arrival = c.Ready
		p.arrival[c.Query] = arrival
	}
	if c.Final {
		delete(p.arrival, c.Query) // its last call: the query needs no more ordering
	}
	p.released[c.Model]++
	q := p.queues[c.Model]
	if len(q.calls) == 0 {
		q.since = c.Ready
	}
	q.seq++
	q.push(queued{ref: c, arrival: arrival, seq: q.seq})
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	switch e.Kind {
	case policies.EventReleased:
		p.enqueue(e.Calls)
	case policies.EventCancelled:
		if e.Worker < 0 {
			if h := p.held[e.Call.Query]; slices.ContainsFunc(h, func(c policies.CallRef) bool { return c.ID == e.Call.ID }) {
				p.held[e.Call.Query] = slices.DeleteFunc(h, func(c policies.CallRef) bool { return c.ID == e.Call.ID })
				break
			}
			p.dropped[e.Call.ID] = true // skipped when its queue reaches it
			break
		}
		fallthrough
	case policies.EventDone, policies.EventFailed:
		if e.Call != nil {
			wk := p.workers[e.Worker]
			wk.outstanding -= wk.inflight[e.Call.ID]
			delete(wk.inflight, e.Call.ID)
		}
	case policies.EventLoaded:
		wk := p.workers[e.Worker]
		wk.held = append(wk.held, e.Model)
		if wk.active == e.Model {
			wk.loading, wk.loadedAt = false, e.At
		}
	case policies.EventUnloaded:
		wk := p.workers[e.Worker]
		if wk.unloading == e.Model {
			wk.unloading = ""
		}
		if wk.want != "" && wk.unloading == "" && policies.CanLoad(v, wk.id, wk.want) {
			acts = append(acts, p.load(wk, wk.want))
		}
	case policies.EventTimer:
		acts = append(acts, p.maybeReplan(v)...)
	}
	acts = append(acts, p.swaps(v)...)
	return append(acts, p.dispatch(v)...)
}

// dispatch hands queued calls to the workers that serve their model and have room, each to
// the one with the least expected outstanding work.
func (p *Policy) dispatch(v policies.View) []policies.Action {
	var acts []policies.Action
	for _, m := range p.models {
		q := p.queues[m]
		if len(q.calls) == 0 {
			continue
		}
		for len(q.calls) > 0 {
			var best *worker
			for _, wk := range p.workers {
				if wk.active == m && !wk.loading && wk.want == "" && len(wk.inflight) < p.limitOn(wk, m) && slices.Contains(wk.held, m) &&
					(best == nil || wk.outstanding < best.outstanding) {
					best = wk
				}
			}
			if best == nil {
				break
			}
			c := q.pop().ref
			p.sent(c)
			if p.dropped[c.ID] {
				delete(p.dropped, c.ID)
				continue
			}
			tokens := p.meanOut[c.Model]
			best.inflight[c.ID] = tokens
			best.outstanding += tokens
			acts = append(acts, policies.Submit(best.id, c.ID))
		}
	}
	return acts
}

// limitOn is the most calls of model m worker wk may have in flight: MaxInFlight, else the
// sequence cap of m's engine on that worker (on a mixed cluster it follows the worker's GPU).
func (p *Policy) limitOn(wk *worker, m string) int {
	if p.opts.MaxInFlight > 0 {
		return p.opts.MaxInFlight
	}
	if n := p.infos[m].On(wk.id).Engine.MaxNumSeqs; n > 0 {
		return n
	}
	return p.limit[m]
}

// canRun reports whether worker wk can run model m at all (on a mixed cluster, whether its
// GPUs can hold it).
func (p *Policy) canRun(wk *worker, m string) bool { return p.infos[m].CanRun(wk.id) }

// idle reports whether a worker has nothing in flight and nothing to serve of its model.
func (p *Policy) idle(wk *worker) bool {
	return len(wk.inflight) == 0 && !wk.loading && wk.want == "" && wk.unloading == "" && (wk.active == "" || len(p.queues[wk.active].calls) == 0)
}

// switchTo moves an idle worker to model m: it unloads the model it holds, then loads m.
func (p *Policy) switchTo(wk *worker, m string, v policies.View) []policies.Action {
	old := wk.active
	wk.active, wk.want = m, m
	if old != "" && wk.unloading == "" && slices.Contains(wk.held, old) {
		return []policies.Action{p.unload(wk, old)}
	}
	return p.drained(wk, v)
}

// swaps moves workers to where calls wait. An idle worker goes to the next of its assigned
// models with calls waiting, to its new model after a re-plan, to a model no worker is
// assigned to, or to the model with the deepest backlog per replica (work stealing). A busy
// worker that time-shares several models, once it has held its model for the patience, drains
// and switches when another of its models has had calls waiting, with no replica serving them,
// for longer than the patience; a model no worker is assigned to gets, after the same
// patience, a worker of the most replicated model.
func (p *Policy) swaps(v policies.View) []policies.Action {
	var acts []policies.Action
	replicas := p.replicas
	clear(replicas)
	for _, wk := range p.workers {
		if wk.active != "" {
			replicas[wk.active]++
		}
	}
	assigned := p.assigned
	move := func(wk *worker, target string) {
		replicas[wk.active]--
		replicas[target]++
		if len(wk.inflight) == 0 {
			acts = append(acts, p.switchTo(wk, target, v)...)
		} else {
			wk.active, wk.want = target, target // drains, then switches (drained)
		}
	}
	for _, wk := range p.workers {
		if !p.idle(wk) {
			continue
		}
		target := ""
		// Its own assigned models first, the one whose calls waited longest.
		for _, m := range p.plan[wk.id] {
			if q := p.queues[m]; m != wk.active && len(q.calls) > 0 && (target == "" || q.since < p.queues[target].since) {
				target = m
			}
		}
		if target == "" && wk.active != "" && !slices.Contains(p.plan[wk.id], wk.active) && len(p.plan[wk.id]) > 0 {
			target = p.plan[wk.id][0] // a re-plan moved this worker
		}
		if target == "" {
			// A model with calls waiting and no replica that no worker is assigned to (one
			// assigned to a time-sharing worker waits for it, or for the patience to run out),
			// else the deepest backlog.
			deepest, depth := "", 0.0
			for _, m := range p.models {
				n := len(p.queues[m].calls)
				if n == 0 || m == wk.active || !p.canRun(wk, m) {
					continue
				}
				if replicas[m] == 0 {
					if !assigned[m] {
						deepest = m
						break
					}
					continue
				}
				if d := float64(n) / float64(replicas[m]*p.limit[m]); p.opts.Steal > 0 && d > p.opts.Steal && d > depth {
					deepest, depth = m, d
				}
			}
			target = deepest
		}
		if target != "" && target != wk.active {
			move(wk, target)
		}
	}
	// Calls that waited too long with no replica, the longest waiting first: a worker assigned
	// the model takes them, or after twice the patience a worker of the most replicated model.
	now := v.Now()
	var waiting []string
	for _, m := range p.models {
		if q := p.queues[m]; len(q.calls) > 0 && replicas[m] == 0 && now-q.since >= p.patient[m] {
			waiting = append(waiting, m)
		}
	}
	if len(waiting) > 1 {
		slices.SortStableFunc(waiting, func(a, b string) int { return cmp.Compare(p.queues[a].since, p.queues[b].since) })
	}
	for _, m := range waiting {
		if replicas[m] > 0 {
			continue
		}
		anyWorker := !assigned[m] || now-p.queues[m].since >= 2*p.patient[m]
		var best *worker
		for _, wk := range p.workers {
			if wk.want != "" || wk.loading || wk.unloading != "" || !p.canRun(wk, m) {
				continue
			}
			if !p.idle(wk) && now-wk.loadedAt < p.patient[wk.active] {
				continue // it keeps a model it loaded for the patience
			}
			mine := slices.Contains(p.plan[wk.id], m)
			if !mine && !anyWorker {
				continue // the worker assigned to it takes it
			}
			if best == nil || better(wk, best, mine, slices.Contains(p.plan[best.id], m), replicas) {
				best = wk
			}
		}
		if best != nil {
			move(best, m)
		}
	}
	for _, wk := range p.workers {
		acts = append(acts, p.drained(wk, v)...)
	}
	return acts
}

// better reports whether worker a should take a waiting model rather than b: one assigned
// the model first, then one whose model has the most replicas, then the least busy.
func better(a, b *worker, aMine, bMine bool, replicas map[string]int) bool {
	if aMine != bMine {
		return aMine
	}
	if replicas[a.active] != replicas[b.active] {
		return replicas[a.active] > replicas[b.active]
	}
	return a.outstanding < b.outstanding
}

// unload asks worker wk to unload model.
func (p *Policy) unload(wk *worker, model string) policies.Action {
	wk.unloading = model
	wk.held = slices.DeleteFunc(wk.held, func(h string) bool { return h == model })
	return policies.Unload(wk.id, model)
}

// drained moves a switching worker (want set) on once nothing is in flight there: it unloads
// the model it holds, or, with its memory free, loads the one it wants.
func (p *Policy) drained(wk *worker, v policies.View) []policies.Action {
	if wk.want == "" || wk.unloading != "" || len(wk.inflight) > 0 {
		return nil
	}
	for _, h := range wk.held {
		if h == wk.want {
			wk.want, wk.loading = "", false // it holds the model already
			return nil
		}
		if v.InFlight(wk.id, h) == 0 {
			return []policies.Action{p.unload(wk, h)}
		}
	}
	if policies.CanLoad(v, wk.id, wk.want) && !slices.Contains(v.Loading(wk.id), wk.want) {
		return []policies.Action{p.load(wk, wk.want)}
	}
	return nil
}

// maybeReplan plans again when the mix of released calls drifted from the planned one.
func (p *Policy) maybeReplan(v policies.View) []policies.Action {
	acts := []policies.Action{policies.WakeAt(v.Now() + p.opts.Replan)}
	total := 0
	for _, n := range p.released {
		total += n
	}
	if total < 4*v.Workers() {
		return acts // too few calls to tell a drift
	}
	now := p.mix(p.released)
	drift := 0.0
	for m := range p.queues {
		drift += math.Abs(now[m] - p.planMix[m])
	}
	drift /= 2
	if drift <= p.opts.Drift {
		p.released = map[string]int{}
		return acts
	}
	if err := p.place(v, p.released, nil); err != nil {
		slog.Warn("online: re-planning failed; keeping the placement", "err", err)
		return acts
	}
	p.replans++
	return acts
}
