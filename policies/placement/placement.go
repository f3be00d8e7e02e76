// Package placement is the MOSAIC policy ("mosaic" in an experiment file): an integer linear program (package solver) jointly
// chooses which models each worker loads (replicating heavy reasoning models, pinning light
// ones) and how many of each model's calls each replica serves, minimising a stage's makespan
// including load costs, from offline-profiled costs: the time for one worker to serve x calls
// of a model is simulated with the cost model and the model's output-length distribution
// (Profile). The graph runs layer by layer, each layer a planned stage: layer 0 (a MoA query's
// experts) is planned at the start; after every call below a layer has finished (the stage
// barrier), that layer is planned the same way on the calls that confidence-aware aggregation
// left (a MoA query's aggregator stage), with models replicated where that pays.
//
// Choices beyond the paper, each switchable:
//   - Order: within a worker, models run heaviest first; in a stage, models the next layer
//     uses go last (so they stay loaded), and in a later stage the model a worker already
//     holds goes first. Calls that read others (aggregators) go longest-predicted first, by
//     disagreement (a split query's aggregator writes about 2.5x more than a unanimous
//     one's); "plain" keeps release order. Calls without inputs always keep release order:
//     nothing known before they run predicts their output length (ordering expert calls by
//     prompt length was measured and made the MMLU-Pro expert stage 5% longer).
//   - Prefetch: when the next layer uses one model (a MoA aggregator), a worker that has
//     served its calls of a stage loads it while others still work, so the next stage starts
//     without load costs there.
//   - Replication cap R_m = max(1, min(W, floor(T_m(n_m) / L_m))): replicating a model whose
//     whole work is less than one load cannot pay.
package placement

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
	"github.com/mosaic-sched/mosaic/sim"
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
	// Outputs are the output-length distributions of the calls of a layer and model where
	// they differ from the model's own (a MoA aggregator writes differently from the same
	// model as an expert); a missing entry means the model's.
	Outputs map[policies.LayerModel]traces.LengthDist
	// TimeLimit bounds each ILP solve (default solver.DefaultTimeLimit).
	TimeLimit time.Duration
	// Order is OrderLongestFirst (default) or OrderPlain.
	Order string
	// NoPrefetch turns off loading the next layer's model on workers done with a stage.
	NoPrefetch bool
	// Pipeline lifts the stage barrier for the next layer's ready calls (the policy is then
	// named "pipeline"; see pipeline.go).
	Pipeline bool
}

// StagePlan is the plan of one stage: the calls of one layer.
type StagePlan struct {
	Layer   int
	Start   time.Duration // when the stage was planned
	Models  []string      // the problem's items, in order
	Problem solver.Problem
	Plan    *solver.Plan
}

// Policy implements policies.Policy.
type Policy struct {
	opts    Options
	workers []*worker
	plans   []*StagePlan // by layer (nil: not planned, or nothing to plan)
	stage   int          // the layer being served
	// dealing state of the current stage: per model, every worker's calls still to receive
	quota   map[string][]int
	waiting map[int][]policies.CallRef // released calls of later layers, by layer
	// early are the calls of the next layer submitted before its stage (Pipeline), and
	// earlyN counts them by layer.
	early  map[int]bool
	earlyN map[int]int
	// inflightEarly is feed's scratch: calls submitted to a worker in this round; free the
	// workers done with their stage.
	inflightEarly map[policies.WorkerID]int
	free          []*worker
	// perm and sorted are order's scratch.
	perm   []int32
	sorted []policies.CallRef
}

type worker struct {
	id      policies.WorkerID
	queue   []string         // models to serve in the current stage, in order
	cur     int              // index in queue of the model being served
	pending map[string][]int // calls dealt to this worker, not yet submitted
	left    map[string]int   // calls of a model this worker has yet to finish in the stage
	want    string           // model to load once an unload completes
	loading string           // model whose load this policy requested and that has not completed
	loadAt  time.Duration    // when the current load started
	// unloading counts the unloads this policy requested that have not completed.
	unloading int
}

// unload requests that the worker unload model.
func (wk *worker) unload(model string) policies.Action {
	wk.unloading++
	return policies.Unload(wk.id, model)
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
		o.TimeLimit = solver.DefaultTimeLimit
	}
	if o.Order == "" {
		o.Order = OrderLongestFirst
	}
	return &Policy{opts: o}
}

// Name implements policies.Policy.
func (p *Policy) Name() string {
	if p.opts.Pipeline {
		return PipelineName
	}
	return Name
}

// Options returns the policy's options, defaults filled in.
func (p *Policy) Options() Options { return p.opts }

// Plans returns the stage plans made so far, by layer (nil where a layer had nothing to plan).
func (p *Policy) Plans() []*StagePlan { return p.plans }

// Demand is the work of one model in a stage: its number of calls and their mean prompt.
type Demand struct {
	Model  string
	Calls  int
	Prompt int
}

// PlanStage builds and solves the placement problem of a stage: models with their demand,
// profiled on the cluster's engines. preloaded[w] names the model worker w holds (or is
// loading); offset[w] is when it becomes free, relative to now. On a mixed cluster
// (a model whose workers are not ModelInfo.Alike) a model is profiled on each kind of worker it can run on, once per
// distinct cost model, and the solver prices each replica with its worker's curve and load
// time; workers that cannot run it are excluded.
func PlanStage(ctx context.Context, infos []policies.ModelInfo, outputs map[string]traces.LengthDist, demand []Demand,
	workers int, preloaded []string, offset []float64, limit time.Duration) (*StagePlan, error) {
	byName := map[string]policies.ModelInfo{}
	for _, m := range infos {
		byName[m.Name] = m
	}
	sp := &StagePlan{Problem: solver.Problem{Workers: workers, Offset: offset, TimeLimit: limit}}
	// Each model with calls, with the output distribution it is planned with.
	type model struct {
		d    Demand
		info policies.ModelInfo
		dist traces.LengthDist
	}
	var models []model
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
		models = append(models, model{d, info, dist})
	}
	// The serving curves of the models on a cluster of one kind of worker, profiled together
	// (spread over the cores).
	var profs []*Profile
	var ns []int
	for _, m := range models {
		if !m.info.Alike() {
			continue
		}
		prof, err := NewProfile(m.info, m.dist, m.d.Prompt)
		if err != nil {
			return nil, err
		}
		profs, ns = append(profs, prof), append(ns, m.d.Calls)
	}
	curves, err := Curves(profs, ns)
	if err != nil {
		return nil, err
	}
	for _, m := range models {
		d, info := m.d, m.info
		var it solver.Item
		if info.Alike() {
			curve := curves[0]
			curves = curves[1:]
			load := info.LoadTime.Seconds()
			reps := workers
			if load > 0 {
				reps = int(math.Max(1, math.Min(float64(workers), math.Floor(curve.At(d.Calls)/load))))
			}
			it = solver.Item{Name: d.Model, Calls: d.Calls, Load: load, Curve: curve, MaxReplicas: reps}
		} else {
			var err error
			if it, err = mixedItem(info, m.dist, d, workers); err != nil {
				return nil, err
			}
		}
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

// mixedItem is a model's item on a mixed cluster: its curve and load time on each worker that
// can run it, one profile per distinct cost model (workers of one kind share it). Its Curve
// and Load are the first such worker's; its replication cap allows as many replicas as the
// kind of worker that gains most from them would, up to the workers that can run it.
func mixedItem(info policies.ModelInfo, dist traces.LengthDist, d Demand, workers int) (solver.Item, error) {
	it := solver.Item{Name: d.Model, Calls: d.Calls, OnWorker: make([]solver.Cost, workers), Fits: make([]bool, workers)}
	curves := map[*sim.CostModel]solver.Curve{}
	reps, runnable := 1, 0
	for w := range workers {
		wc := info.On(policies.WorkerID(w))
		if !info.CanRun(policies.WorkerID(w)) || wc.Cost == nil {
			continue
		}
		curve, ok := curves[wc.Cost]
		if !ok {
			prof, err := NewProfile(info.At(policies.WorkerID(w)), dist, d.Prompt)
			if err != nil {
				return it, err
			}
			if curve, err = prof.Curve(d.Calls); err != nil {
				return it, err
			}
			curves[wc.Cost] = curve
		}
		load := wc.LoadTime.Seconds()
		it.OnWorker[w] = solver.Cost{Load: load, Curve: curve}
		it.Fits[w] = true
		if runnable == 0 {
			it.Curve, it.Load = curve, load
		}
		runnable++
		if load > 0 {
			reps = max(reps, int(math.Floor(curve.At(d.Calls)/load)))
		} else {
			reps = workers
		}
	}
	if runnable == 0 {
		return it, fmt.Errorf("model %s runs on no worker of the cluster", info.Name)
	}
	it.MaxReplicas = max(1, min(reps, runnable))
	return it, nil
}

// outputs returns the distributions that differ from the models' own in a layer.
func (p *Policy) outputs(layer int) map[string]traces.LengthDist {
	out := map[string]traces.LengthDist{}
	for k, d := range p.opts.Outputs {
		if k.Layer == layer && d != nil {
			out[k.Model] = d
		}
	}
	return out
}

// Start implements policies.Policy: it plans layer 0 and loads every worker's first model.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.workers = make([]*worker, W)
	for w := range p.workers {
		p.workers[w] = &worker{id: policies.WorkerID(w), pending: map[string][]int{}, left: map[string]int{}}
	}
	p.plans = make([]*StagePlan, v.Layers())
	p.waiting = map[int][]policies.CallRef{}
	p.early, p.earlyN, p.inflightEarly = map[int]bool{}, map[int]int{}, map[policies.WorkerID]int{}
	ready := v.Ready()
	prompts := meanPrompts(ready)
	var demand []Demand
	for _, m := range v.Models() {
		if n := v.Expected(0, m.Name); n > 0 {
			demand = append(demand, Demand{Model: m.Name, Calls: n, Prompt: prompts[m.Name]})
		}
	}
	sp, err := PlanStage(context.Background(), v.Models(), p.outputs(0), demand, W, nil, nil, p.opts.TimeLimit)
	if err != nil {
		return nil, fmt.Errorf("planning layer 0: %w", err)
	}
	sp.Layer, sp.Start = 0, v.Now()
	p.plans[0] = sp
	p.begin(sp, v, func(m string) bool { return v.Expected(1, m) > 0 })
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

// begin sets every worker's queue and quotas from a stage plan: heaviest model first, models
// for which last(m) holds last, and the model a worker holds or is loading first.
func (p *Policy) begin(sp *StagePlan, v policies.View, last func(string) bool) {
	p.quota = map[string][]int{}
	for _, wk := range p.workers {
		wk.queue, wk.cur = nil, 0
		clear(wk.left)
	}
	if sp.Plan == nil {
		return
	}
	for i, m := range sp.Models {
		p.quota[m] = slices.Clone(sp.Plan.Counts[i])
		for w, x := range sp.Plan.Counts[i] {
			if x > 0 {
				p.workers[w].queue = append(p.workers[w].queue, m)
				p.workers[w].left[m] = x
			}
		}
	}
	for w, wk := range p.workers {
		resident := func(m string) bool { return wk.loading == m || v.Holding(wk.id, m) }
		sort.SliceStable(wk.queue, func(i, j int) bool {
			a, b := wk.queue[i], wk.queue[j]
			if ra, rb := resident(a), resident(b); ra != rb && sp.Layer > 0 {
				return ra
			}
			if la, lb := last(a), last(b); la != lb {
				return lb
			}
			return p.work(sp, a, w) > p.work(sp, b, w)
		})
	}
}

// work is the planned serving time of model m on worker w in stage sp.
func (p *Policy) work(sp *StagePlan, m string, w int) float64 {
	for i, name := range sp.Models {
		if name == m {
			return sp.Problem.Items[i].CurveOn(w).At(sp.Plan.Counts[i][w])
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

// order sorts calls that read others longest-predicted first (unless the order is plain):
// more disagreement first, then the longer prompt. Calls without inputs keep their order.
func (p *Policy) order(calls []policies.CallRef) {
	if p.opts.Order == OrderPlain {
		return
	}
	// Sort positions, not the references (a stage's release is tens of thousands of them);
	// the permutation is the one sorting the references in place would give.
	idx := p.perm[:0]
	for i := range calls {
		idx = append(idx, int32(i))
	}
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := &calls[idx[i]], &calls[idx[j]]
		if a.Inputs == 0 || b.Inputs == 0 {
			return false
		}
		if a.Confidence != b.Confidence {
			return a.Confidence < b.Confidence // more disagreement, longer aggregation
		}
		return a.InputTokens > b.InputTokens
	})
	sorted := p.sorted[:0]
	for _, i := range idx {
		sorted = append(sorted, calls[i])
	}
	copy(calls, sorted)
	clear(sorted)
	p.perm, p.sorted = idx, sorted
}

// deal hands the current stage's calls to the replicas of their model, each to the replica
// with the most of its quota still to receive; calls of later layers wait for their stage.
func (p *Policy) deal(calls []policies.CallRef, v policies.View) {
	for _, c := range calls {
		if c.Layer > p.stage {
			p.waiting[c.Layer] = append(p.waiting[c.Layer], c)
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
			// More calls than planned (an online arrival after the plan, or no plan): give it
			// to the least busy worker that serves the model in this stage, else the first
			// worker that can run it.
			for w := range p.workers {
				if p.workers[w].left[c.Model] > 0 || slices.Contains(p.workers[w].queue, c.Model) {
					if best < 0 || v.InFlight(policies.WorkerID(w), "") < v.InFlight(policies.WorkerID(best), "") {
						best = w
					}
				}
			}
			if best < 0 {
				best = firstRunnable(v, c.Model)
				wk := p.workers[best]
				if !slices.Contains(wk.queue, c.Model) {
					wk.queue = append(wk.queue, c.Model)
				}
			}
			p.workers[best].left[c.Model]++
		} else {
			q[best]--
		}
		wk := p.workers[best]
		wk.pending[c.Model] = append(wk.pending[c.Model], c.ID)
	}
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	switch e.Kind {
	case policies.EventReleased:
		p.deal(e.Calls, v)
	case policies.EventCancelled:
		if e.Worker < 0 {
			acts = append(acts, p.dropCancelled(e.Call, v)...)
			break
		}
		fallthrough
	case policies.EventDone, policies.EventFailed:
		if e.Call != nil && p.early[e.Call.ID] {
			delete(p.early, e.Call.ID) // served ahead of its stage, outside the plan
			break
		}
		if e.Call != nil && e.Call.Layer == p.stage {
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
		wk.unloading = max(0, wk.unloading-1)
		if wk.want != "" && v.Fits(wk.id, wk.want) {
			acts = append(acts, wk.load(wk.want, v.Now()))
		}
	}
	acts = append(acts, p.nextStage(v)...)
	for _, wk := range p.workers {
		acts = append(acts, p.drive(wk, v)...)
	}
	if p.opts.Pipeline {
		acts = append(acts, p.feed(v)...)
	}
	return acts
}

// dropCancelled forgets a call cancelled before it was submitted: dealt to a worker of the
// current stage, or waiting for its stage.
func (p *Policy) dropCancelled(c *policies.CallRef, v policies.View) []policies.Action {
	if c.Layer > p.stage {
		p.waiting[c.Layer] = slices.DeleteFunc(p.waiting[c.Layer], func(r policies.CallRef) bool { return r.ID == c.ID })
		return nil
	}
	for _, wk := range p.workers {
		n := len(wk.pending[c.Model])
		wk.pending[c.Model] = slices.DeleteFunc(wk.pending[c.Model], func(id int) bool { return id == c.ID })
		if len(wk.pending[c.Model]) == n {
			continue
		}
		wk.left[c.Model]--
		if c.Layer == p.stage && wk.current() == c.Model && wk.left[c.Model] <= 0 && len(wk.pending[c.Model]) == 0 && v.InFlight(wk.id, c.Model) == 0 {
			return p.advance(wk, v)
		}
		return nil
	}
	// Not dealt yet: its quota will not be used.
	if q := p.quota[c.Model]; q != nil {
		for w := range q {
			if q[w] > 0 {
				q[w]--
				p.workers[w].left[c.Model]--
				break
			}
		}
	}
	return nil
}

// advance moves a worker that has finished its current model to its next model, or, when it
// has none, prefetches the next layer's model.
func (p *Policy) advance(wk *worker, v policies.View) []policies.Action {
	done := wk.current()
	wk.cur++
	// Pass over models with nothing left to serve: early exit may have cancelled every call
	// dealt to this worker for a model before the worker reached it, and no call of it would
	// then ever finish to move the worker on.
	for m := wk.current(); m != "" && wk.left[m] <= 0 && len(wk.pending[m]) == 0 && v.InFlight(wk.id, m) == 0; m = wk.current() {
		wk.cur++
	}
	next := wk.current()
	if next == "" {
		next = p.prefetchModel(wk, v)
		if next == "" || done == next {
			return nil
		}
	}
	if !v.Holding(wk.id, done) {
		// Its calls were cancelled while it was still loading: drive unloads it once it has
		// loaded, for the next model.
		return nil
	}
	wk.want = next
	return []policies.Action{wk.unload(done)}
}

// mainModel is the model with the most expected work in a layer ("" when it has none).
func mainModel(v policies.View, layer int, outputs map[string]traces.LengthDist) string {
	best, bestWork := "", 0.0
	for _, m := range v.Models() {
		n := v.Expected(layer, m.Name)
		if n == 0 {
			continue
		}
		mean := 1.0
		if d := outputs[m.Name]; d != nil {
			mean = d.Mean()
		} else if m.Output != nil {
			mean = m.Output.Mean()
		}
		if w := float64(n) * mean; w > bestWork {
			best, bestWork = m.Name, w
		}
	}
	return best
}

// prefetchModel is the next layer's model if the worker should load it ahead of its stage:
// when the next layer uses one model (a MoA aggregator) with at least a call per worker, so
// the next stage will want it on many workers. With several models the next stage's plan
// decides who loads what.
func (p *Policy) prefetchModel(wk *worker, v policies.View) string {
	if p.opts.NoPrefetch || p.stage+1 >= v.Layers() {
		return ""
	}
	a := mainModel(v, p.stage+1, p.outputs(p.stage+1))
	if a == "" || v.Holding(wk.id, a) || wk.loading == a {
		return ""
	}
	if info, _ := v.Model(a); !info.CanRun(wk.id) {
		return "" // this worker's GPUs cannot hold it
	}
	for _, m := range v.Models() {
		if m.Name != a && v.Expected(p.stage+1, m.Name) > 0 {
			return ""
		}
	}
	if v.Expected(p.stage+1, a) < v.Workers() {
		return "" // too few calls for a replica per worker
	}
	return a
}

// drive moves a worker towards serving its current model: submit its dealt calls where it is
// loaded, else free the worker's memory and load it.
func (p *Policy) drive(wk *worker, v policies.View) []policies.Action {
	m := wk.current()
	if m == "" {
		return nil
	}
	var acts []policies.Action
	switch {
	case v.Holding(wk.id, m):
		for _, id := range wk.pending[m] {
			acts = append(acts, policies.Submit(wk.id, id))
		}
		wk.pending[m] = wk.pending[m][:0]
	case wk.loading == m || (wk.want == m && wk.unloading > 0):
		// wait for the load, or for the unload that makes room for it
	case wk.loading != "":
		wk.want = m // another model is loading: make room once it has
	case len(v.Holds(wk.id)) > 0:
		for _, h := range v.Holds(wk.id) {
			if v.InFlight(wk.id, h) == 0 {
				acts = append(acts, wk.unload(h))
			}
		}
		wk.want = m
	case v.Fits(wk.id, m):
		acts = append(acts, wk.load(m, v.Now()))
	default:
		wk.want = m // memory still being freed
	}
	return acts
}

// nextStage plans the next layers once every call below them has finished and every call of
// theirs the rule did not skip has been released.
func (p *Policy) nextStage(v policies.View) []policies.Action {
	for p.stage+1 < v.Layers() && policies.LayersDone(v, p.stage+1) {
		layer := p.stage + 1
		expected := 0
		for _, m := range v.Models() {
			expected += v.Expected(layer, m.Name)
		}
		if len(p.waiting[layer])+p.earlyN[layer] < expected {
			return nil // the rule's last decisions are on their way
		}
		p.stage = layer
		calls := p.waiting[layer]
		delete(p.waiting, layer)
		if len(calls) == 0 {
			p.begin(&StagePlan{Layer: layer}, v, func(string) bool { return false })
			continue
		}
		if err := p.planLayer(layer, calls, v); err != nil {
			// Cannot happen for models the cluster serves; never leave calls behind.
			slog.Error("mosaic: planning a stage failed; serving it where its models are", "layer", layer, "err", err)
		}
	}
	return nil
}

// planLayer plans a later layer on its released calls, with no load cost where a model is
// loaded or loading, and deals the calls.
func (p *Policy) planLayer(layer int, calls []policies.CallRef, v policies.View) error {
	W := len(p.workers)
	preloaded := make([]string, W)
	offset := make([]float64, W)
	calls = slices.Clone(calls)
	p.order(calls)
	n, prompt := map[string]int{}, map[string]int{}
	for _, c := range calls {
		n[c.Model]++
		prompt[c.Model] += c.InputTokens
	}
	for _, wk := range p.workers {
		for _, h := range v.Holds(wk.id) {
			if n[h] > 0 {
				preloaded[wk.id] = h
			}
		}
		switch {
		case preloaded[wk.id] != "":
		case wk.loading != "" && n[wk.loading] > 0:
			preloaded[wk.id] = wk.loading
			info, _ := v.Model(wk.loading)
			offset[wk.id] = max(0, (wk.loadAt + info.On(wk.id).LoadTime - v.Now()).Seconds())
		case len(v.Holds(wk.id)) > 0:
			offset[wk.id] = unloadTime.Seconds()
		}
		if p.opts.Pipeline {
			offset[wk.id] += p.backlog(wk, v, layer, prompt, n)
		}
	}
	var demand []Demand
	for _, m := range v.Models() {
		if n[m.Name] > 0 {
			demand = append(demand, Demand{Model: m.Name, Calls: n[m.Name], Prompt: prompt[m.Name] / n[m.Name]})
		}
	}
	sp, err := PlanStage(context.Background(), v.Models(), p.outputs(layer), demand, W, preloaded, offset, p.opts.TimeLimit)
	if err != nil || sp.Plan == nil {
		// Fall back to the workers that hold each model, else the first that can run it.
		sp = &StagePlan{Problem: solver.Problem{Workers: W}, Plan: &solver.Plan{}}
		for _, d := range demand {
			counts := make([]int, W)
			holders := 0
			for w := range counts {
				if preloaded[w] == d.Model {
					holders++
				}
			}
			for w := range counts {
				if preloaded[w] == d.Model {
					counts[w] = d.Calls / holders
				}
			}
			counts[firstRunnable(v, d.Model)] += d.Calls - sum(counts)
			sp.Models = append(sp.Models, d.Model)
			sp.Problem.Items = append(sp.Problem.Items, solver.Item{Name: d.Model, Calls: d.Calls})
			sp.Plan.Counts = append(sp.Plan.Counts, counts)
		}
	} else {
		sp.Start = v.Now()
	}
	sp.Layer = layer
	p.plans[layer] = sp
	p.begin(sp, v, func(m string) bool { return v.Expected(layer+1, m) > 0 })
	p.deal(calls, v)
	return err
}

// firstRunnable is the first worker that can run model (0 when none can: the load then fails
// with the backend's reason).
func firstRunnable(v policies.View, model string) int {
	info, _ := v.Model(model)
	if ws := info.Runnable(v.Workers()); len(ws) > 0 {
		return int(ws[0])
	}
	return 0
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
