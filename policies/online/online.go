// Package online is an online serving policy for call graphs: it places models for the
// expected mix of calls and dispatches each call as it becomes ready, with no stage barrier.
//
//   - Placement: the MOSAIC ILP (placement.PlanStage) on the expected calls per model over every
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
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/names"
	"github.com/mosaic-sched/mosaic/internal/sparse"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/placement"
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
	// differ from the model's own (see placement.Options).
	Outputs map[policies.LayerModel]traces.LengthDist
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
	// Name is the policy's name (default Name): the online forms of the offline policies
	// (round-robin, data-parallel, mosaic) are this policy under their own names.
	Name string
	// Placement is where models go: PlaceMosaic (default: the MOSAIC ILP for the expected
	// mix), PlaceRoundRobin (pinned as the round-robin baseline pins them) or PlaceEverywhere
	// (every model on every worker that can hold it: data parallel).
	Placement string
	// Order is the order of each model's queue (default OrderDeepest; see the Order
	// constants).
	Order string
	// Starve is β, the anti-starvation ratio of the attained-service orders (OrderPLAS,
	// OrderATLAS): a queued call whose program's waiting time (its calls' waits, this one's
	// included) reaches β times the program's service (at least ServiceFloor) moves to the
	// first level (0: DefaultStarve; negative: never).
	Starve float64
	// Quantum is the upper end, in seconds of service, of the first level of the
	// attained-service orders; level k ends at Quantum * 2^k (0: DefaultQuantum).
	Quantum float64
}

// Placements of Options.Placement.
const (
	PlaceMosaic     = "mosaic"
	PlaceRoundRobin = "round-robin"
	PlaceEverywhere = "everywhere"
)

// Orders of Options.Order: how each model's queue is ordered (ties go to the older query,
// then to the call released first).
const (
	// OrderDeepest: the deepest layer first, so that a started query finishes before a new
	// one starts.
	OrderDeepest = "deepest"
	// OrderFCFS: first come first served by query: the calls of the query that arrived first.
	OrderFCFS = "fcfs"
	// OrderSJF: shortest expected job first: the call with the fewest expected output tokens
	// (its model's mean at its layer).
	OrderSJF = "sjf"
	// OrderPLAS: program-level least attained service (Autellix: Luo et al., "Autellix: An
	// Efficient Serving Engine for LLM Agents as General Programs", arXiv 2502.13965v1,
	// §4.2.1, Eq. 1): a call's priority is its program's service when it is released, the sum
	// of the run times (admission to end on a worker) of the program's calls finished so far,
	// discretised into levels (§4.2.2: K queues of priority ranges, a call entering the queue
	// of its range; here level k ends at Quantum * 2^k), FCFS by release within a level, with
	// the anti-starvation rule of Algorithm 1 (lines 24-30; Starve).
	OrderPLAS = "plas"
	// OrderATLAS: adaptive thread-level attained service (Autellix §4.2.1, Eq. 2), for
	// programs that fan out: a call's priority is the longest chain of service leading to it.
	// As Autellix implements it (Algorithm 1, line 4), one value per program, the longest
	// critical path seen: a call takes it when released, and a finished call raises it to its
	// own priority plus its run time if that is longer. For a MoA query the aggregator gets
	// its slowest expert's run time (their sum under PLAS).
	OrderATLAS = "atlas"
)

// Defaults of the attained-service orders. Autellix publishes neither its number of queues,
// nor their ranges, nor β (arXiv 2502.13965v1 gives no values): these are ours. Levels double
// from 10 s of service, about one 500-token call at 20 ms a token; β = 8 is the value of the
// public reimplementations of Autellix's scheduler.
const (
	DefaultStarve  = 8.0
	DefaultQuantum = 10.0
	// ServiceFloor is the least service the anti-starvation ratio divides by, so that a
	// program with no service yet is not promoted at once (the paper leaves the case open).
	ServiceFloor = time.Second
	// starveScan bounds the queued calls, oldest first, that the anti-starvation rule checks
	// at each dispatch.
	starveScan = 64
)

// Orders lists the queue orders, for errors and listings.
var Orders = []string{OrderDeepest, OrderFCFS, OrderSJF, OrderPLAS, OrderATLAS}

// Placements lists the placements, for errors and listings.
var Placements = []string{PlaceMosaic, PlaceRoundRobin, PlaceEverywhere}

// Policy implements policies.Policy.
type Policy struct {
	opts    Options
	workers []*worker
	// models are the models in the experiment's order; byName finds one by its name.
	models []*model
	byName names.Index
	// plan is the current placement: per worker its models in serving order.
	plan    [][]*model
	planMix map[string]float64 // planned share of expected work per model
	// arrival is when each query's first call was queued, by query ID (-1: none queued, or its
	// final call was: it needs no more ordering).
	arrival sparse.Slice[time.Duration]
	// flight is the expected output tokens of each call in flight, by call ID (-1: not in
	// flight).
	flight sparse.Slice[float64]
	// The attained-service orders: service is each query's service in seconds (the sum of
	// its finished calls' run times under PLAS, its longest path of service under ATLAS),
	// waited its calls' waits so far, and before each released call's priority, by call ID.
	service sparse.Slice[float64]
	waited  sparse.Slice[float64]
	before  sparse.Slice[float64]
	// sjf is the expected output tokens of a layer's calls of a model (OrderSJF).
	sjf     map[policies.LayerModel]float64
	plans   []*placement.StagePlan
	replans int
	// dropped are queued calls cancelled before they were submitted.
	dropped map[int]bool
	// Overlap (calls released open): a query's open calls wait in held until every other
	// call it has released is submitted (unsent counts those not yet), so that an open call
	// holds a worker only while its inputs are in flight, never while they wait for a worker.
	held   map[int][]policies.CallRef
	unsent sparse.Slice[int32] // by query ID
	// free are the workers with nothing in flight, no load or unload under way and no model
	// wanted (only they can be idle), wanting those with a model wanted (only they can be
	// switching): kept by touch as the workers change, so that an event visits the workers
	// it may concern rather than all of them (a 64-GPU cluster's policy visited each worker
	// several times an event).
	free, wanting workerSet
	// moved are the workers whose active model is not among their planned models (a re-plan
	// moved them, or they stole or took on a model): an idle one goes to its planned model with
	// no call waiting (see idleTarget). visit is swaps' scratch: the idle workers it asks.
	moved, visit workerSet
	// backlog and waiting are scratch of swaps, open of dispatch, acts of OnEvent; swapsN
	// numbers swaps' calls (see model.depthIn).
	backlog, waiting []*model
	swapsN           int
	open             []*worker
	acts             []policies.Action
}

// model is one model's queue of ready calls and what the policy knows of it, cached at Start.
type model struct {
	queue
	name string
	// limitOn is the calls a worker may have in flight (see Policy.limitOn), by worker, and
	// limit the model's own engine's; runs says which workers' GPUs can hold the model.
	limitOn []int
	limit   int
	runs    []bool
	// patient is how long its calls may wait with no replica; meanOut the expected output
	// tokens of its call.
	patient time.Duration
	meanOut float64
	// priority says its engine schedules by priority: a call carries its rank there.
	priority bool
	// assigned says the plan gives it some worker; released counts its calls released since
	// the last plan.
	assigned bool
	released int
	// servers are the workers whose active model it is, in worker order (Policy.serve keeps
	// them); planned those the plan assigns it, in worker order, and plannedSet the same.
	servers, planned []*worker
	plannedSet       workerSet
	// depth is its calls waiting per replica slot as of swaps call number depthAt (see
	// depthIn; 0: none).
	depth   float64
	depthAt int
	// full says none of its servers could take a call when dispatch last looked, and none has
	// changed since (Policy.unblock forgets it): dispatch passes it by.
	full bool
}

// replicas is how many workers serve the model.
func (m *model) replicas() int { return len(m.servers) }

// depthIn returns the model's calls waiting per replica slot in swaps call number at,
// worked out once for the idle workers that call it ask about: neither its queue nor, but
// through serve (which forgets it), its replicas change within a call.
func (m *model) depthIn(at int) float64 {
	if m.depthAt != at {
		m.depth, m.depthAt = float64(m.len())/float64(m.replicas()*m.limit), at
	}
	return m.depth
}

type worker struct {
	id policies.WorkerID
	// What dispatch reads of each server first, together: its calls in flight (their expected
	// tokens are in Policy.flight) and their expected outstanding tokens, and whether it
	// serves its active model, holding it, neither loading nor wanting another (kept by
	// Policy.touch).
	inflight    int
	outstanding float64
	serving     bool
	// loading says its active model is being loaded.
	loading bool
	active  string // the model it serves (held or loading)
	am      *model // active's state (nil when active is "")
	// unloading is the model whose unload this policy requested and that has not completed;
	// want the model to load once it has.
	unloading string
	want      string
	// loadedAt is when its active model finished loading: it keeps the model until the
	// model's queue is empty or it has held it for the patience.
	loadedAt time.Duration
	// held are the models it holds (loaded, not being unloaded), as the policy's own actions
	// and the backend's events say.
	held []string
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
	if o.Name == "" {
		o.Name = Name
	}
	if o.Placement == "" {
		o.Placement = PlaceMosaic
	}
	if o.Order == "" {
		o.Order = OrderDeepest
	}
	if o.Starve == 0 {
		o.Starve = DefaultStarve
	}
	if o.Quantum == 0 {
		o.Quantum = DefaultQuantum
	}
	p := &Policy{opts: o}
	p.resetIDs()
	return p
}

// resetIDs empties what the policy keeps by query and call ID: pages held only while IDs in
// flight need them, as a long run's IDs grow without bound.
func (p *Policy) resetIDs() {
	p.unsent = sparse.Slice[int32]{}
	p.arrival = sparse.Slice[time.Duration]{Fill: -1}
	p.flight = sparse.Slice[float64]{Fill: -1}
	p.service = sparse.Slice[float64]{}
	p.waited = sparse.Slice[float64]{}
	p.before = sparse.Slice[float64]{}
}

// Name implements policies.Policy.
func (p *Policy) Name() string { return p.opts.Name }

// Placements returns the placements the policy solved, in order (the first at the start).
func (p *Policy) Placements() []*placement.StagePlan { return p.plans }

// Replans counts the placements made after the first.
func (p *Policy) Replans() int { return p.replans }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.workers = make([]*worker, W)
	for w := range p.workers {
		p.workers[w] = &worker{id: policies.WorkerID(w)}
	}
	p.free, p.wanting = newWorkerSet(W), newWorkerSet(W)
	p.moved, p.visit = newWorkerSet(W), newWorkerSet(W)
	for _, wk := range p.workers {
		p.touch(wk)
	}
	p.dropped = map[int]bool{}
	p.held = map[int][]policies.CallRef{}
	p.resetIDs()
	p.models, p.byName = nil, names.Index{}
	p.sjf = map[policies.LayerModel]float64{}
	switch p.opts.Order {
	case OrderDeepest, OrderFCFS, OrderSJF, OrderPLAS, OrderATLAS:
	default:
		return nil, fmt.Errorf("unknown order %q (known: %s)", p.opts.Order, strings.Join(Orders, ", "))
	}
	for _, info := range v.Models() {
		m := &model{name: info.Name, meanOut: p.expectedOutput(v, info), limit: 256,
			limitOn: make([]int, W), runs: make([]bool, W),
			// Calls may wait twice a model's load time, at least a minute, with no replica
			// before a busy worker drains to serve them, so that swaps do not thrash.
			patient: max(time.Minute, 2*info.LoadTime)}
		if p.opts.MaxInFlight > 0 {
			m.limit = p.opts.MaxInFlight
		} else if info.Engine.MaxNumSeqs > 0 {
			m.limit = info.Engine.MaxNumSeqs
		}
		for w := range W {
			id := policies.WorkerID(w)
			m.runs[w] = info.CanRun(id)
			// MaxInFlight, else the sequence cap of the model's engine on that worker (on a
			// mixed cluster it follows the worker's GPU), else the model's own.
			switch n := info.On(id).Engine.MaxNumSeqs; {
			case p.opts.MaxInFlight > 0:
				m.limitOn[w] = p.opts.MaxInFlight
			case n > 0:
				m.limitOn[w] = n
			default:
				m.limitOn[w] = m.limit
			}
		}
		m.priority = enginePriority(info)
		m.guard = p.opts.Starve > 0 && (p.opts.Order == OrderPLAS || p.opts.Order == OrderATLAS)
		p.models = append(p.models, m)
		p.byName.Add(info.Name)
		for l := range v.Layers() {
			lm := policies.LayerModel{Layer: l, Model: info.Name}
			if d := p.opts.Outputs[lm]; d != nil {
				p.sjf[lm] = d.Mean()
			} else if info.Output != nil {
				p.sjf[lm] = info.Output.Mean()
			}
		}
	}
	counts := map[string]int{}
	for _, m := range v.Models() {
		counts[m.Name] = v.Expected(policies.AnyLayer, m.Name)
	}
	switch p.opts.Placement {
	case PlaceMosaic:
		if err := p.place(v, counts, meanPrompts(v.Ready())); err != nil {
			return nil, err
		}
	case PlaceRoundRobin, PlaceEverywhere:
		if err := p.pin(v); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown placement %q (known: %s)", p.opts.Placement, strings.Join(Placements, ", "))
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
		if d := p.opts.Outputs[policies.LayerModel{Layer: l, Model: m.Name}]; d != nil {
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
	var demand []placement.Demand
	outputs := map[string]traces.LengthDist{}
	for _, m := range v.Models() {
		if counts[m.Name] > 0 {
			n := max(1, int(math.Round(float64(counts[m.Name])*scale)))
			demand = append(demand, placement.Demand{Model: m.Name, Calls: n, Prompt: cmp.Or(prompts[m.Name], 1)})
		}
	}
	if len(demand) == 0 {
		return fmt.Errorf("the workload has no LLM calls")
	}
	sp, err := placement.PlanStage(context.Background(), v.Models(), outputs, demand, v.Workers(), nil, nil, p.opts.TimeLimit)
	if err != nil {
		return fmt.Errorf("placing models: %w", err)
	}
	sp.Start = v.Now()
	p.plans = append(p.plans, sp)
	plan := make([][]*model, v.Workers())
	work := make([]map[*model]float64, v.Workers())
	for w := range work {
		work[w] = map[*model]float64{}
	}
	for i, name := range sp.Models {
		m := p.model(name)
		for w, x := range sp.Plan.Counts[i] {
			if x > 0 {
				plan[w] = append(plan[w], m)
				work[w][m] = sp.Problem.Items[i].CurveOn(w).At(x)
			}
		}
	}
	for w := range plan {
		slices.SortStableFunc(plan[w], func(a, b *model) int { return cmp.Compare(work[w][b], work[w][a]) })
	}
	p.adopt(plan, counts)
	return nil
}

// adopt makes plan (per worker, its models in serving order) the placement, planned for the mix
// of counts calls per model.
func (p *Policy) adopt(plan [][]*model, counts map[string]int) {
	p.plan = plan
	for _, m := range p.models {
		m.assigned, m.released, m.planned = false, 0, m.planned[:0]
		if m.plannedSet == nil {
			m.plannedSet = newWorkerSet(len(p.workers))
		}
		clear(m.plannedSet)
	}
	for w, models := range plan {
		for _, m := range models {
			m.assigned = true
			m.planned = append(m.planned, p.workers[w])
			m.plannedSet.put(policies.WorkerID(w), true)
		}
	}
	for _, wk := range p.workers {
		p.noteMoved(wk)
	}
	p.planMix = p.mix(counts)
}

// pin places the models without solving: PlaceRoundRobin gives each model one worker, the
// next in turn that can run it, taking the models layer by layer in the experiment's order
// (a model keeps the worker of the first layer that uses it), as the round-robin baseline
// places them; PlaceEverywhere gives every worker every model it can run, worker w starting
// with the w-th (data parallel).
func (p *Policy) pin(v policies.View) error {
	W := v.Workers()
	plan := make([][]*model, W)
	counts := map[string]int{}
	var used []*model
	for l := range v.Layers() {
		for _, info := range v.Models() {
			if n := v.Expected(l, info.Name); n > 0 {
				if _, ok := counts[info.Name]; !ok {
					used = append(used, p.model(info.Name))
				}
				counts[info.Name] += n
			}
		}
	}
	if len(used) == 0 {
		return fmt.Errorf("the workload has no LLM calls")
	}
	next := 0
	for _, m := range used {
		placed := false
		for k := range W {
			w := (next + k) % W
			if !m.runs[w] {
				continue
			}
			placed = true
			if p.opts.Placement == PlaceRoundRobin {
				plan[w] = append(plan[w], m)
				next += k + 1
				break
			}
		}
		if !placed {
			return fmt.Errorf("model %s runs on no worker of the cluster", m.name)
		}
	}
	if p.opts.Placement == PlaceEverywhere {
		for w := range W {
			for i := range used {
				if m := used[(w+i)%len(used)]; m.runs[w] {
					plan[w] = append(plan[w], m)
				}
			}
		}
	}
	p.adopt(plan, counts)
	return nil
}

// mix is each model's share of the expected work of counts calls (summed in the models'
// order, so that the shares do not depend on the map's).
func (p *Policy) mix(counts map[string]int) map[string]float64 {
	total := 0.0
	out := map[string]float64{}
	for _, m := range p.models {
		if n, ok := counts[m.name]; ok {
			out[m.name] = float64(n) * m.meanOut
			total += out[m.name]
		}
	}
	for m := range out {
		if total > 0 {
			out[m] /= total
		}
	}
	return out
}

func (p *Policy) load(wk *worker, m *model) policies.Action {
	p.serve(wk, m)
	wk.loading, wk.want = true, ""
	p.touch(wk)
	return policies.Load(wk.id, m.name)
}

// serve makes m the worker's active model.
func (p *Policy) serve(wk *worker, m *model) {
	if wk.am != m {
		if old := wk.am; old != nil {
			old.servers = slices.DeleteFunc(old.servers, func(s *worker) bool { return s == wk })
		}
		i, _ := slices.BinarySearchFunc(m.servers, wk.id, func(s *worker, id policies.WorkerID) int { return cmp.Compare(s.id, id) })
		m.servers = slices.Insert(m.servers, i, wk)
		m.depthAt = 0
		if old := wk.am; old != nil {
			old.depthAt = 0
		}
	}
	wk.active, wk.am = m.name, m
	p.noteMoved(wk)
}

// noteMoved files worker wk in the moved set after a change of its active model or of the
// plan.
func (p *Policy) noteMoved(wk *worker) {
	plan := p.plan[wk.id]
	p.moved.put(wk.id, wk.am != nil && len(plan) > 0 && !slices.Contains(plan, wk.am))
}

// touch files worker wk in the free and wanting sets, and notes whether it is serving, after a
// change of its state: every change of its loading, unloading, wanted or active model, and of
// its calls in flight from or to none, is followed by one, as is a load of its active model.
func (p *Policy) touch(wk *worker) {
	p.free.put(wk.id, wk.inflight == 0 && !wk.loading && wk.want == "" && wk.unloading == "")
	p.wanting.put(wk.id, wk.want != "")
	wk.serving = !wk.loading && wk.want == "" && wk.am != nil && slices.Contains(wk.held, wk.active)
	p.unblock(wk)
}

// unblock notes a change that may let worker wk take a call of its active model: a touch
// (which follows every change of its active model, and a load that ends), or a call that left
// it.
func (p *Policy) unblock(wk *worker) {
	if wk.am != nil {
		wk.am.full = false
	}
}

// enqueue adds released calls to their models' queues; open ones wait until their query's
// other calls are submitted.
func (p *Policy) enqueue(calls []policies.CallRef) {
	for _, c := range calls {
		if c.Open {
			p.held[c.Query] = append(p.held[c.Query], c)
			continue
		}
		p.unsent.Set(c.Query, p.unsent.Get(c.Query)+1)
		p.push(c)
	}
	for _, c := range calls {
		p.unhold(c.Query)
	}
}

// unhold queues a query's held open calls once none of its other released calls waits.
func (p *Policy) unhold(q int) {
	if p.unsent.Get(q) > 0 || len(p.held) == 0 || len(p.held[q]) == 0 {
		return
	}
	for _, c := range p.held[q] {
		p.push(c)
	}
	delete(p.held, q)
}

// sent records that call c left its queue (submitted or dropped).
func (p *Policy) sent(c waiting) {
	if c.open {
		return
	}
	if n := p.unsent.Get(c.query) - 1; n > 0 {
		p.unsent.Set(c.query, n)
	} else {
		p.unsent.Set(c.query, 0)
		p.unhold(c.query)
	}
}

// model is the model named name (nil for a name the experiment does not list).
func (p *Policy) model(name string) *model {
	if i, ok := p.byName.Get(name); ok {
		return p.models[i]
	}
	return nil
}

// push adds a call to its model's queue.
func (p *Policy) push(c policies.CallRef) {
	arrival := p.arrival.Get(c.Query)
	if arrival < 0 {
		arrival = c.Ready
		p.arrival.Set(c.Query, arrival)
	}
	if c.Final {
		p.arrival.Set(c.Query, -1) // its last call: the query needs no more ordering
	}
	m := p.model(c.Model)
	m.released++
	q := &m.queue
	if q.len() == 0 {
		q.since = c.Ready
	}
	if p.attained() {
		arrival = c.Ready // FCFS by release within a level
	}
	q.push(c, p.rank(c), arrival)
}

// rank is call c's rank in its model's queue under the policy's order (lower goes first).
func (p *Policy) rank(c policies.CallRef) int64 {
	switch p.opts.Order {
	case OrderFCFS:
		return 0
	case OrderSJF:
		return int64(math.Round(p.sjf[policies.LayerModel{Layer: c.Layer, Model: c.Model}]))
	case OrderPLAS, OrderATLAS:
		s := p.service.Get(c.Query)
		p.before.Set(c.ID, s)
		return p.level(s)
	}
	return -int64(c.Layer)
}

// level is the attained-service level of service seconds: 0 below Quantum, then k while
// service < Quantum * 2^k (levels of exponentially growing ranges).
func (p *Policy) level(service float64) int64 {
	k := int64(0)
	for q := p.opts.Quantum; service >= q && k < 62; q *= 2 {
		k++
	}
	return k
}

// attained reports whether the policy orders by attained service.
func (p *Policy) attained() bool { return p.opts.Order == OrderPLAS || p.opts.Order == OrderATLAS }

// served records a finished call's run time (admission to end on its worker) in its
// program's service (Autellix's Algorithm 1, line 4).
func (p *Policy) served(c *policies.CallRef, t policies.CallTiming) {
	if !p.attained() {
		return
	}
	if c.Final {
		p.forget(c)
		return
	}
	run := max(0, (t.End - t.Started).Seconds())
	before := p.before.Get(c.ID)
	p.before.Set(c.ID, 0)
	if p.opts.Order == OrderPLAS {
		p.service.Set(c.Query, p.service.Get(c.Query)+run)
	} else {
		p.service.Set(c.Query, max(p.service.Get(c.Query), before+run))
	}
}

// forget lets go of what the attained-service orders keep of a query once its final call
// ended or will not run.
func (p *Policy) forget(c *policies.CallRef) {
	if !c.Final || !p.attained() {
		return
	}
	p.before.Set(c.ID, 0)
	p.service.Set(c.Query, 0)
	p.waited.Set(c.Query, 0)
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	// The actions go out in a buffer of the policy's: the Driver has carried out the last
	// event's before it sends the next.
	acts := p.acts[:0]
	switch e.Kind {
	case policies.EventReleased:
		p.enqueue(e.Calls)
	case policies.EventSkipped:
		if e.Call.Final {
			p.arrival.Set(e.Call.Query, -1) // as for a final call queued: no more ordering
		}
		p.forget(e.Call)
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
			if e.Kind == policies.EventDone {
				p.served(e.Call, e.Timing)
			} else {
				p.forget(e.Call)
			}
			wk := p.workers[e.Worker]
			if id := e.Call.ID; p.flight.Get(id) >= 0 {
				wk.outstanding -= p.flight.Get(id)
				wk.inflight--
				p.flight.Set(id, -1)
				if wk.inflight == 0 {
					p.touch(wk) // its last call: it may be free
				} else {
					p.unblock(wk)
				}
			}
		}
	case policies.EventLoaded:
		wk := p.workers[e.Worker]
		wk.held = append(wk.held, e.Model)
		if wk.active == e.Model {
			wk.loading, wk.loadedAt = false, e.At
			p.touch(wk)
		}
	case policies.EventUnloaded:
		wk := p.workers[e.Worker]
		if wk.unloading == e.Model {
			wk.unloading = ""
			p.touch(wk)
		}
		if wk.want != "" && wk.unloading == "" && policies.CanLoad(v, wk.id, wk.want) {
			acts = append(acts, p.load(wk, p.model(wk.want)))
		}
	case policies.EventTimer:
		acts = append(acts, p.maybeReplan(v)...)
	}
	acts = append(acts, p.swaps(v)...)
	acts = p.dispatch(acts, v)
	p.acts = acts
	return acts
}

// dispatch hands queued calls to the workers that serve their model and have room, each to
// the one with the least expected outstanding work, and returns acts with the submissions.
func (p *Policy) dispatch(acts []policies.Action, v policies.View) []policies.Action {
	for _, m := range p.models {
		q := &m.queue
		if q.len() == 0 {
			continue
		}
		if m.full {
			if checkFull != nil {
				_, best := p.able(m)
				checkFull(m, best)
			}
			continue
		}
		open, best := p.able(m)
		for best != nil && q.len() > 0 {
			c := p.next(m, v)
			p.sent(c)
			if len(p.dropped) > 0 && p.dropped[c.id] {
				delete(p.dropped, c.id)
				continue
			}
			tokens := m.meanOut
			p.flight.Set(c.id, tokens)
			best.inflight++
			best.outstanding += tokens
			if best.inflight == 1 {
				p.touch(best) // its first call: it is no longer free
			}
			if m.priority {
				acts = append(acts, policies.SubmitPriority(best.id, c.id, int(c.rank)))
			} else {
				acts = append(acts, policies.Submit(best.id, c.id))
			}
			if q.len() == 0 {
				break
			}
			best = nil
			for _, wk := range open {
				if wk.inflight < m.limitOn[wk.id] && (best == nil || wk.outstanding < best.outstanding) {
					best = wk
				}
			}
		}
		// Calls left waiting: every server is full or unable, until one changes.
		m.full = q.len() > 0
	}
	return acts
}

// able lists the workers serving m that can take a call of it now, in order (what makes a
// worker able does not change while calls are handed out, but its room; handing out one
// model's calls changes no other model's workers), and the first of them with the least
// expected outstanding work. Each call goes to such a worker.
func (p *Policy) able(m *model) (open []*worker, best *worker) {
	open = p.open[:0]
	for _, wk := range m.servers {
		if wk.serving && wk.inflight < m.limitOn[wk.id] {
			open = append(open, wk)
			if best == nil || wk.outstanding < best.outstanding {
				best = wk
			}
		}
	}
	p.open = open
	return open, best
}

// checkFull, when set (by tests, which then run one policy at a time), is handed each model dispatch passes by as full, with the
// worker it would have given a call (which must be none).
var checkFull func(m *model, best *worker)

// next takes the next call from m's queue, after the anti-starvation rule (Autellix's
// Algorithm 1, lines 24-30) moved the calls that starved to the first level: a call whose
// program's waiting time, its calls' waits so far and this one's, reaches Starve times the
// program's service (at least ServiceFloor) joins the first level behind the calls there.
// Only the oldest queued calls are checked, starveScan of them.
func (p *Policy) next(m *model, v policies.View) waiting {
	if m.guard {
		now := v.Now()
		m.promote(starveScan, now, func(w waiting) bool {
			wait := p.waited.Get(w.query) + (now - w.ready).Seconds()
			return wait >= p.opts.Starve*max(ServiceFloor.Seconds(), p.service.Get(w.query))
		})
	}
	c := m.pop()
	if p.attained() {
		p.waited.Set(c.query, p.waited.Get(c.query)+(v.Now()-c.ready).Seconds())
	}
	return c
}

// idle reports whether a worker has nothing in flight and nothing to serve of its model.
func (p *Policy) idle(wk *worker) bool {
	return wk.inflight == 0 && !wk.loading && wk.want == "" && wk.unloading == "" && (wk.am == nil || wk.am.len() == 0)
}

// switchTo moves an idle worker to model m: at once if it holds m, else it loads m beside the
// model it holds when both fit the worker's memory, and unloads that model first when not.
func (p *Policy) switchTo(wk *worker, m *model, v policies.View) []policies.Action {
	old := wk.active
	p.serve(wk, m)
	wk.want = m.name
	p.touch(wk)
	if old != "" && wk.unloading == "" && slices.Contains(wk.held, old) && !slices.Contains(wk.held, m.name) && !policies.CanLoad(v, wk.id, m.name) {
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
	p.swapsN++
	move := func(wk *worker, target *model) {
		if wk.inflight == 0 {
			acts = append(acts, p.switchTo(wk, target, v)...)
		} else {
			p.serve(wk, target) // drains, then switches (drained)
			wk.want = target.name
			p.touch(wk)
		}
	}
	// Only a free worker can be idle; moving one changes no other worker.
	if backlog, visit := p.idleVisit(); visit != nil {
		each, checking := visit, checkSkipped != nil
		if checking {
			each = p.free // tests: ask the others too, and check they stay
		}
		for id := each.next(0); id >= 0; id = each.next(id + 1) {
			wk := p.workers[id]
			if !p.idle(wk) {
				continue
			}
			if checking && !visit.has(policies.WorkerID(id)) {
				checkSkipped(wk, p.idleTarget(wk, backlog))
				continue
			}
			if target := p.idleTarget(wk, backlog); target != nil && target != wk.am {
				move(wk, target)
			}
		}
	}
	// Calls that waited too long with no replica, the longest waiting first: a worker assigned
	// the model takes them, or after twice the patience a worker of the most replicated model.
	now := v.Now()
	waiting := p.waiting[:0]
	for _, m := range p.models {
		if m.len() > 0 && m.replicas() == 0 && now-m.since >= m.patient {
			// Insert in order of since (stable: the models' order among equals).
			i := len(waiting)
			waiting = append(waiting, m)
			for ; i > 0 && waiting[i-1].since > m.since; i-- {
				waiting[i] = waiting[i-1]
			}
			waiting[i] = m
		}
	}
	p.waiting = waiting
	for _, m := range waiting {
		if m.replicas() > 0 {
			continue
		}
		// Any worker may take it, or only one the plan assigns it (the same visit in worker
		// order, of the workers the other would not skip).
		candidates := m.planned
		anyWorker := !m.assigned || now-m.since >= 2*m.patient
		if anyWorker {
			candidates = p.workers
		}
		var best *worker
		bestMine := false
		for _, wk := range candidates {
			if wk.want != "" || wk.loading || wk.unloading != "" || !m.runs[wk.id] {
				continue
			}
			if !p.idle(wk) && wk.am != nil && now-wk.loadedAt < wk.am.patient {
				continue // it keeps a model it loaded for the patience
			}
			mine := !anyWorker || slices.Contains(p.plan[wk.id], m)
			if best == nil || better(wk, best, mine, bestMine) {
				best, bestMine = wk, mine
			}
		}
		if best != nil {
			move(best, m)
		}
	}
	// Only a worker that wants a model can be switching; draining one changes no other.
	for id := p.wanting.next(0); id >= 0; id = p.wanting.next(id + 1) {
		if wk := p.workers[id]; wk.switching() {
			acts = append(acts, p.drained(wk, v)...)
		}
	}
	return acts
}

// idleVisit returns the models with calls waiting (backlog, in the models' order) and the free
// workers swaps must ask where they go (nil for none), a superset of those idleTarget sends
// somewhere. Moves in swaps' visit change no queue and move only idle workers, whose active
// models have no calls waiting: so no model of the backlog loses a replica there, its calls
// waiting a replica only fall, and one with no replica has, once a move gives it one, at most
// its calls waiting a replica slot. Every free worker is asked when a model of the backlog may
// be one to steal during the visit (by that bound), or has no replica and no worker assigned
// it; else the only idle workers idleTarget sends anywhere are those the plan assigns a model
// of the backlog and those serving a model their plan does not hold: the others are not asked
// (at 256 workers, asking every free worker after every event was a fifth of the run).
func (p *Policy) idleVisit() ([]*model, workerSet) {
	if !p.free.any() {
		return nil, nil
	}
	backlog := p.backlog[:0]
	all := false
	for _, m := range p.models {
		if m.len() == 0 {
			continue
		}
		backlog = append(backlog, m)
		depth := float64(m.len()) / float64(m.limit) // with its first replica
		if m.replicas() > 0 {
			depth = m.depthIn(p.swapsN)
		}
		all = all || m.replicas() == 0 && !m.assigned || p.opts.Steal > 0 && depth > p.opts.Steal
	}
	p.backlog = backlog
	if all {
		return backlog, p.free
	}
	visit := p.visit
	copy(visit, p.moved)
	for _, m := range backlog {
		visit.or(m.plannedSet)
	}
	visit.and(p.free)
	return backlog, visit
}

// checkSkipped, when set (by tests, which then run one policy at a time), makes swaps ask the
// idle workers idleVisit leaves out too, in turn, and hands it each one with its target (which
// must be none or its model), in place of moving it.
var checkSkipped func(wk *worker, target *model)

// idleTarget is the model an idle worker goes to: the next of its assigned models with calls
// waiting (the one whose calls waited longest), its new model after a re-plan, a model with
// calls waiting that no worker is assigned to, or the deepest backlog per replica (work
// stealing); nil for none. backlog is the models with calls waiting, in the models' order.
func (p *Policy) idleTarget(wk *worker, backlog []*model) *model {
	var target *model
	// Its own assigned models first, the one whose calls waited longest.
	for _, m := range p.plan[wk.id] {
		if m != wk.am && m.len() > 0 && (target == nil || m.since < target.since) {
			target = m
		}
	}
	if target != nil {
		return target
	}
	if p.moved.has(wk.id) {
		return p.plan[wk.id][0] // a re-plan moved this worker
	}
	// A model with calls waiting and no replica that no worker is assigned to (one assigned to
	// a time-sharing worker waits for it, or for the patience to run out), else the deepest
	// backlog.
	depth := 0.0
	for _, m := range backlog {
		if m == wk.am || !m.runs[wk.id] {
			continue
		}
		if m.replicas() == 0 {
			if !m.assigned {
				return m
			}
			continue
		}
		if d := m.depthIn(p.swapsN); p.opts.Steal > 0 && d > p.opts.Steal && d > depth {
			target, depth = m, d
		}
	}
	return target
}

// better reports whether worker a should take a waiting model rather than b: one assigned
// the model first, then one whose model has the most replicas, then the least busy.
func better(a, b *worker, aMine, bMine bool) bool {
	if aMine != bMine {
		return aMine
	}
	if ra, rb := a.replicasOfActive(), b.replicasOfActive(); ra != rb {
		return ra > rb
	}
	return a.outstanding < b.outstanding
}

// switching reports whether the worker wants another model and has drained: nothing in
// flight, no unload under way (drained then moves it on). Most events find no worker so, and
// swaps asks before it calls drained.
func (wk *worker) switching() bool {
	return wk.want != "" && wk.unloading == "" && wk.inflight == 0
}

// replicasOfActive is how many workers serve the worker's active model (0 with none).
func (wk *worker) replicasOfActive() int {
	if wk.am == nil {
		return 0
	}
	return wk.am.replicas()
}

// unload asks worker wk to unload model.
func (p *Policy) unload(wk *worker, model string) policies.Action {
	wk.unloading = model
	wk.held = slices.DeleteFunc(wk.held, func(h string) bool { return h == model })
	p.touch(wk)
	return policies.Unload(wk.id, model)
}

// drained moves a switching worker (want set) on once nothing is in flight there: it serves
// the model it wants if it holds it, loads it if it fits beside what the worker holds, and
// otherwise unloads a held model to make room.
func (p *Policy) drained(wk *worker, v policies.View) []policies.Action {
	if !wk.switching() {
		return nil
	}
	for _, h := range wk.held {
		if h == wk.want {
			wk.want, wk.loading = "", false // it holds the model already
			p.touch(wk)
			return nil
		}
	}
	if !policies.CanLoad(v, wk.id, wk.want) {
		// Make room: unload a held model with nothing in flight.
		for _, h := range wk.held {
			if v.InFlight(wk.id, h) == 0 {
				return []policies.Action{p.unload(wk, h)}
			}
		}
	}
	if policies.CanLoad(v, wk.id, wk.want) && !slices.Contains(v.Loading(wk.id), wk.want) {
		return []policies.Action{p.load(wk, p.model(wk.want))}
	}
	return nil
}

// maybeReplan plans again when the mix of released calls drifted from the planned one.
func (p *Policy) maybeReplan(v policies.View) []policies.Action {
	acts := []policies.Action{policies.WakeAt(v.Now() + p.opts.Replan)}
	total := 0
	released := map[string]int{}
	for _, m := range p.models {
		if m.released > 0 {
			released[m.name] = m.released
			total += m.released
		}
	}
	if total < 4*v.Workers() {
		return acts // too few calls to tell a drift
	}
	now := p.mix(released)
	drift := 0.0
	for _, m := range p.models {
		drift += math.Abs(now[m.name] - p.planMix[m.name])
	}
	drift /= 2
	if drift <= p.opts.Drift {
		for _, m := range p.models {
			m.released = 0
		}
		return acts
	}
	if err := p.place(v, released, nil); err != nil {
		slog.Warn("online: re-planning failed; keeping the placement", "err", err)
		return acts
	}
	p.replans++
	return acts
}

// enginePriority reports whether the model's engine schedules by priority (vLLM's
// --scheduling-policy priority), so that a submitted call carries its rank there.
func enginePriority(info policies.ModelInfo) bool {
	return info.Engine.Priority()
}
