// Package mosaic is the MOSAIC policy: an integer linear program (package solver) jointly
// chooses which expert models each worker loads (replicating heavy reasoning experts, pinning
// light ones) and how many of each model's calls each replica serves, minimising the expert
// stage's makespan including load costs, from offline-profiled costs: the time for one worker
// to serve x calls of a model is simulated with the cost model and the model's output-length
// distribution (Profile). After every expert call has finished (the stage barrier), the
// aggregator stage is planned the same way on the aggregator calls that confidence-aware
// aggregation left, with the aggregator replicated where that pays.
//
// Choices beyond the paper, each switchable:
//   - Order: within a worker, models run heaviest first, the aggregator last when the worker
//     serves it as an expert (so it stays loaded). Aggregator calls go longest-predicted first,
//     by disagreement (a split query's aggregator writes about 2.5x more than a unanimous
//     one's); "plain" keeps release order. Expert calls always keep release order: nothing
//     known before they run predicts their output length (ordering them by prompt length was
//     measured and made the MMLU-Pro expert stage 5% longer).
//   - Prefetch: a worker that has served its expert calls loads the aggregator while others
//     still work, so the aggregator stage starts without load costs there.
//   - Replication cap R_m = max(1, min(W, floor(T_m(n_m) / L_m))): replicating a model whose
//     whole work is less than one load cannot pay.
package mosaic

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/traces"
)

// Name is the policy's name in experiment files.
const Name = "mosaic"

// Orders of calls within a worker.
const (
	OrderLongestFirst = "longest-first"
	OrderPlain        = "plain"
)

// unloadTime is the policy's estimate of the time to unload a model.
const unloadTime = time.Second

// Options configure the policy.
type Options struct {
	// Aggregator names the aggregator model ("" when queries have none).
	Aggregator string
	// AggregatorOutput is the aggregator's output-length distribution (nil: the model's).
	AggregatorOutput traces.LengthDist
	// TimeLimit bounds each ILP solve (default 10 s).
	TimeLimit time.Duration
	// Order is OrderLongestFirst (default) or OrderPlain.
	Order string
	// NoPrefetch turns off loading the aggregator on workers done with their experts.
	NoPrefetch bool
}

// StagePlan is the plan of one stage.
type StagePlan struct {
	Stage   traces.Stage
	Start   time.Duration // when the stage was planned
	Models  []string      // the problem's items, in order
	Problem solver.Problem
	Plan    *solver.Plan
}

// Policy implements policies.Policy.
type Policy struct {
	opts    Options
	workers []*worker
	expert  *StagePlan
	agg     *StagePlan
	// dealing state per model: replica workers and their remaining quotas
	quota    map[string][]int // model -> per worker remaining calls to receive
	aggCalls []policies.CallRef
	barrier  bool
}

type worker struct {
	id      policies.WorkerID
	queue   []string         // models to serve, in order
	cur     int              // index in queue of the model being served
	pending map[string][]int // calls dealt to this worker, not yet submitted
	left    map[string]int   // calls of a model this worker has yet to finish
	want    string           // model to load once an unload completes
	loading string           // model whose load this policy requested and that has not completed
	loadAt  time.Duration    // when the current load started
}

// load requests model on the worker.
func (wk *worker) load(model string, now time.Duration) policies.Action {
	wk.loading, wk.loadAt, wk.want = model, now, ""
	return policies.Load(wk.id, model)
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy.
func New(o Options) *Policy {
	if o.TimeLimit <= 0 {
		o.TimeLimit = 10 * time.Second
	}
	if o.Order == "" {
		o.Order = OrderLongestFirst
	}
	return &Policy{opts: o}
}

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Options returns the policy's options, defaults filled in.
func (p *Policy) Options() Options { return p.opts }

// Plans returns the stage plans made so far (nil where a stage was not planned).
func (p *Policy) Plans() (expert, aggregator *StagePlan) { return p.expert, p.agg }

// Demand is the work of one model in a stage: its number of calls and their mean prompt.
type Demand struct {
	Model  string
	Calls  int
	Prompt int
}

// PlanStage builds and solves the placement problem of a stage: models with their demand,
// profiled on the cluster's engines. preloaded[w] names the model worker w holds (or is
// loading); offset[w] is when it becomes free, relative to now.
func PlanStage(ctx context.Context, infos []policies.ModelInfo, outputs map[string]traces.LengthDist, demand []Demand,
	workers int, preloaded []string, offset []float64, limit time.Duration) (*StagePlan, error) {
	byName := map[string]policies.ModelInfo{}
	for _, m := range infos {
		byName[m.Name] = m
	}
	sp := &StagePlan{Problem: solver.Problem{Workers: workers, Offset: offset, TimeLimit: limit}}
	for _, d := range demand {
		if d.Calls == 0 {
			continue
		}
		info, ok := byName[d.Model]
		if !ok {
			return nil, fmt.Errorf("unknown model %q", d.Model)
		}
		dist := outputs[d.Model]
		if dist == nil {
			dist = info.Output
		}
		prof, err := NewProfile(info, dist, d.Prompt)
		if err != nil {
			return nil, err
		}
		curve, err := prof.Curve(d.Calls)
		if err != nil {
			return nil, err
		}
		load := info.LoadTime.Seconds()
		reps := workers
		if load > 0 {
			reps = int(math.Max(1, math.Min(float64(workers), math.Floor(curve.At(d.Calls)/load))))
		}
		it := solver.Item{Name: d.Model, Calls: d.Calls, Load: load, Curve: curve, MaxReplicas: reps}
		if info.Memory > 1 {
			it.Fits = make([]bool, workers) // fits no worker: the solver says so
		}
		if preloaded != nil {
			it.Preloaded = make([]bool, workers)
			for w, m := range preloaded {
				it.Preloaded[w] = m == d.Model
			}
		}
		sp.Models = append(sp.Models, d.Model)
		sp.Problem.Items = append(sp.Problem.Items, it)
	}
	if len(sp.Problem.Items) == 0 {
		return sp, nil
	}
	plan, err := solver.Solve(ctx, sp.Problem)
	if err != nil {
		return nil, err
	}
	sp.Plan = plan
	return sp, nil
}

// Start implements policies.Policy: it plans the expert stage and loads every worker's first model.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.workers = make([]*worker, W)
	for w := range p.workers {
		p.workers[w] = &worker{id: policies.WorkerID(w), pending: map[string][]int{}, left: map[string]int{}}
	}
	ready := v.Ready()
	prompts := meanPrompts(ready)
	var demand []Demand
	for _, m := range v.Models() {
		if n := v.Expected(traces.StageExpert, m.Name); n > 0 {
			demand = append(demand, Demand{Model: m.Name, Calls: n, Prompt: prompts[m.Name]})
		}
	}
	sp, err := PlanStage(context.Background(), v.Models(), nil, demand, W, nil, nil, p.opts.TimeLimit)
	if err != nil {
		return nil, fmt.Errorf("planning the expert stage: %w", err)
	}
	sp.Stage, sp.Start = traces.StageExpert, v.Now()
	p.expert = sp
	p.quota = map[string][]int{}
	for i, m := range sp.Models {
		p.quota[m] = slices.Clone(sp.Plan.Counts[i])
		for w, x := range sp.Plan.Counts[i] {
			if x > 0 {
				p.workers[w].queue = append(p.workers[w].queue, m)
				p.workers[w].left[m] = x
			}
		}
	}
	// Heaviest model first on every worker; the aggregator last (it stays loaded).
	for w, wk := range p.workers {
		sort.SliceStable(wk.queue, func(i, j int) bool {
			a, b := wk.queue[i], wk.queue[j]
			if (a == p.opts.Aggregator) != (b == p.opts.Aggregator) {
				return b == p.opts.Aggregator
			}
			return p.work(a, w) > p.work(b, w)
		})
	}
	p.deal(ready, v)
	var acts []policies.Action
	for _, wk := range p.workers {
		if m := wk.current(); m != "" {
			acts = append(acts, wk.load(m, v.Now()))
		} else if a := p.prefetchModel(wk, v); a != "" {
			acts = append(acts, wk.load(a, v.Now()))
		}
	}
	return acts, nil
}

// work is the planned serving time of model m on worker w.
func (p *Policy) work(m string, w int) float64 {
	for i, name := range p.expert.Models {
		if name == m {
			return p.expert.Problem.Items[i].Curve.At(p.expert.Plan.Counts[i][w])
		}
	}
	return 0
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

func (wk *worker) current() string {
	if wk.cur < len(wk.queue) {
		return wk.queue[wk.cur]
	}
	return ""
}

// order sorts aggregator calls longest-predicted first (unless the order is plain): more
// disagreement first, then the longer prompt. Expert calls keep their order.
func (p *Policy) order(calls []policies.CallRef) {
	if p.opts.Order == OrderPlain {
		return
	}
	sort.SliceStable(calls, func(i, j int) bool {
		a, b := calls[i], calls[j]
		if a.Stage != traces.StageAggregator || b.Stage != traces.StageAggregator {
			return false
		}
		if a.Confidence != b.Confidence {
			return a.Confidence < b.Confidence // more disagreement, longer aggregation
		}
		return a.InputTokens > b.InputTokens
	})
}

// deal hands expert calls to the replicas of their model, each to the replica with the largest
// share of its quota still to receive.
func (p *Policy) deal(calls []policies.CallRef, v policies.View) {
	calls = slices.Clone(calls)
	p.order(calls)
	for _, c := range calls {
		if c.Stage != traces.StageExpert {
			p.aggCalls = append(p.aggCalls, c)
			continue
		}
		q := p.quota[c.Model]
		best := -1
		for w, left := range q {
			if left > 0 && (best < 0 || left > q[best]) {
				best = w
			}
		}
		if best < 0 {
			// More calls than planned (cannot happen offline): give it to the least busy holder.
			for w := range q {
				if p.expert.Plan.Counts[p.index(c.Model)][w] > 0 && (best < 0 || v.InFlight(policies.WorkerID(w), "") < v.InFlight(policies.WorkerID(best), "")) {
					best = w
				}
			}
		} else {
			q[best]--
		}
		wk := p.workers[best]
		wk.pending[c.Model] = append(wk.pending[c.Model], c.ID)
	}
}

func (p *Policy) index(model string) int { return slices.Index(p.expert.Models, model) }

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	switch e.Kind {
	case policies.EventReleased:
		p.deal(e.Calls, v)
	case policies.EventDone, policies.EventFailed:
		if e.Call != nil && e.Call.Stage == traces.StageExpert {
			wk := p.workers[e.Worker]
			wk.left[e.Model]--
			if wk.current() == e.Model && wk.left[e.Model] <= 0 && len(wk.pending[e.Model]) == 0 {
				acts = append(acts, p.advance(wk, v)...)
			}
		}
	case policies.EventLoaded:
		if wk := p.workers[e.Worker]; wk.loading == e.Model {
			wk.loading = ""
		}
	case policies.EventUnloaded:
		wk := p.workers[e.Worker]
		if wk.want != "" && v.Fits(wk.id, wk.want) {
			acts = append(acts, wk.load(wk.want, v.Now()))
		}
	}
	acts = append(acts, p.submitReady(v)...)
	acts = append(acts, p.aggregatorStage(v)...)
	return acts
}

// advance moves a worker that has finished its current expert model to its next model, or,
// when it has none, prefetches the aggregator.
func (p *Policy) advance(wk *worker, v policies.View) []policies.Action {
	done := wk.current()
	wk.cur++
	next := wk.current()
	if next == "" {
		next = p.prefetchModel(wk, v)
		if next == "" || done == next {
			return nil
		}
	}
	wk.want = next
	return []policies.Action{policies.Unload(wk.id, done)}
}

// prefetchModel is the aggregator if the worker should load it ahead of the aggregator stage.
func (p *Policy) prefetchModel(wk *worker, v policies.View) string {
	a := p.opts.Aggregator
	if p.opts.NoPrefetch || a == "" || p.barrier || slices.Contains(v.Holds(wk.id), a) || wk.loading == a {
		return ""
	}
	if _, ok := v.Model(a); !ok {
		return ""
	}
	return a
}

// submitReady submits dealt calls whose worker serves their model now.
func (p *Policy) submitReady(v policies.View) []policies.Action {
	var acts []policies.Action
	for _, wk := range p.workers {
		m := wk.current()
		if m == "" || !slices.Contains(v.Holds(wk.id), m) {
			continue
		}
		for _, id := range wk.pending[m] {
			acts = append(acts, policies.Submit(wk.id, id))
		}
		wk.pending[m] = wk.pending[m][:0]
	}
	return acts
}

// aggregatorStage plans and drives the aggregator stage once every expert call has finished
// and every aggregator call is known.
func (p *Policy) aggregatorStage(v policies.View) []policies.Action {
	a := p.opts.Aggregator
	if a == "" || !policies.ExpertsDone(v) {
		return nil
	}
	if !p.barrier {
		if len(p.aggCalls) < v.Expected(traces.StageAggregator, a) {
			return nil // the rule's last decisions are on their way
		}
		p.barrier = true
		if len(p.aggCalls) == 0 {
			return nil
		}
		if err := p.planAggregator(v); err != nil {
			// Cannot happen for a model that served as an expert; never leave calls behind.
			slog.Error("mosaic: planning the aggregator stage failed; serving it where the aggregator is", "err", err)
		}
	}
	var acts []policies.Action
	for _, wk := range p.workers {
		if len(wk.pending[a]) == 0 {
			continue
		}
		switch {
		case slices.Contains(v.Holds(wk.id), a):
			for _, id := range wk.pending[a] {
				acts = append(acts, policies.Submit(wk.id, id))
			}
			wk.pending[a] = wk.pending[a][:0]
		case wk.loading == a || wk.want == a:
			// wait for the load
		case len(v.Holds(wk.id)) > 0:
			for _, m := range v.Holds(wk.id) {
				if v.InFlight(wk.id, m) == 0 {
					acts = append(acts, policies.Unload(wk.id, m))
				}
			}
			wk.want = a
		case v.Fits(wk.id, a):
			acts = append(acts, wk.load(a, v.Now()))
		default:
			wk.want = a // memory still being freed
		}
	}
	return acts
}

func (p *Policy) planAggregator(v policies.View) error {
	a := p.opts.Aggregator
	W := len(p.workers)
	preloaded := make([]string, W)
	offset := make([]float64, W)
	info, _ := v.Model(a)
	for _, wk := range p.workers {
		switch {
		case slices.Contains(v.Holds(wk.id), a):
			preloaded[wk.id] = a
		case wk.loading == a:
			preloaded[wk.id] = a
			offset[wk.id] = max(0, (wk.loadAt + info.LoadTime - v.Now()).Seconds())
		case len(v.Holds(wk.id)) > 0:
			offset[wk.id] = unloadTime.Seconds()
		}
	}
	prompt := 0
	for _, c := range p.aggCalls {
		prompt += c.InputTokens
	}
	prompt /= len(p.aggCalls)
	sp, err := PlanStage(context.Background(), v.Models(), map[string]traces.LengthDist{a: p.opts.AggregatorOutput},
		[]Demand{{Model: a, Calls: len(p.aggCalls), Prompt: prompt}}, W, preloaded, offset, p.opts.TimeLimit)
	counts := make([]int, W)
	if err == nil && sp.Plan != nil {
		sp.Stage, sp.Start = traces.StageAggregator, v.Now()
		p.agg = sp
		counts = sp.Plan.Counts[0]
	} else {
		// Fall back to the workers that hold the aggregator, else worker 0.
		for w := range counts {
			if preloaded[w] == a {
				counts[w] = len(p.aggCalls) / W
			}
		}
		counts[0] += len(p.aggCalls) - sum(counts)
	}
	calls := slices.Clone(p.aggCalls)
	p.order(calls)
	// Deal longest first, each to the worker with the most of its quota left.
	left := slices.Clone(counts)
	for _, c := range calls {
		best := 0
		for w := range left {
			if left[w] > left[best] {
				best = w
			}
		}
		left[best]--
		wk := p.workers[best]
		wk.pending[a] = append(wk.pending[a], c.ID)
	}
	return err
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
