package experiments

import (
	"fmt"
	"slices"
	"sync"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// Capacity is a cluster's capacity for an experiment's workload: the arrival rate at which its
// workers would be busy all the time.
//
// It is an upper bound that every policy faces. Each model's cost per call is its marginal
// serving time at saturation: (T(2X) - T(X)) / X, where T(x) is the time the model's engine
// takes to serve x calls of its output-length distribution submitted together (the planner's
// serving profile, placement.Profile) and X = 1,024, so that the longest call's tail, in both
// terms, cancels out. A query's work is the sum over the calls that run (a gated call the
// rule would skip on the workload's own answers does not) of their model's cost; the workers
// share it perfectly, with no model loads and every model replicated where it fits: the
// capacity is the sum over worker groups of count / (work per query on that group's GPUs).
type Capacity struct {
	// QPS is the capacity in queries per second.
	QPS float64
	// Work is the GPU-seconds per query on the first group's workers.
	Work float64
	// Models is each model's share of that work, by LayerModel, in the experiment's order.
	Models []ModelWork
}

// ModelWork is one model's calls at one layer: calls per query and seconds of a worker per
// call at saturation, on the first group's workers.
type ModelWork struct {
	policies.LayerModel
	CallsPerQuery float64
	PerCall       float64
}

// capacityCalls is X of Capacity's marginal serving time; capacityQueries how many of the
// workload's queries, the first, give the mix of calls (a streamed run draws them from its
// stream, so that it computes the capacity a held run of the same workload does).
const (
	capacityCalls   = 1024
	capacityQueries = 4096
)

// Capacity computes the cluster's capacity for the workload under rule (nil: the
// experiment's [aggregation] rule).
func (r *Resolved) Capacity(rule policies.Rule) (Capacity, error) {
	g := r.Graph
	if g == nil || g.Workload == nil {
		return Capacity{}, fmt.Errorf("%s: capacity needs a workload of call graphs", r.File())
	}
	qs := g.sample
	if qs == nil {
		qs = g.Workload.Queries[:min(len(g.Workload.Queries), capacityQueries)]
	}
	if len(qs) == 0 {
		return Capacity{}, fmt.Errorf("%s: capacity needs queries", r.File())
	}
	if rule == nil {
		rule = policies.NeverSkip()
		if t := r.Aggregation.Threshold; t != nil {
			rule = policies.ConfidenceSkip{Threshold: *t}
		}
	}
	type tally struct{ calls, prompt int }
	counts := map[policies.LayerModel]*tally{}
	var order []policies.LayerModel
	for qi := range qs {
		q := &qs[qi]
		for ci := range q.Calls {
			c := &q.Calls[ci]
			if c.Model == "" || c.Gate && skipped(q, c, rule) {
				continue
			}
			lm := policies.LayerModel{Layer: c.Layer, Model: c.Model}
			t := counts[lm]
			if t == nil {
				t = &tally{}
				counts[lm] = t
				order = append(order, lm)
			}
			t.calls++
			t.prompt += c.InputTokens
		}
	}
	slices.SortFunc(order, func(a, b policies.LayerModel) int {
		if a.Layer != b.Layer {
			return a.Layer - b.Layer
		}
		return r.modelIndex(a.Model) - r.modelIndex(b.Model)
	})
	infos := r.ModelInfos()
	byName := map[string]policies.ModelInfo{}
	for _, in := range infos {
		byName[in.Name] = in
	}
	queries := float64(len(qs))
	var out Capacity
	first := 0
	for gi, grp := range r.Groups {
		work := 0.0
		for _, lm := range order {
			t := counts[lm]
			info := byName[lm.Model]
			w := r.firstWorkerOf(gi)
			on := info.On(policies.WorkerID(w))
			if on.Unfit != "" || on.Cost == nil {
				continue // the group cannot hold it: the others serve it
			}
			info.Cost, info.Engine, info.LoadTime = on.Cost, on.Engine, on.LoadTime
			dist := g.Outputs[lm]
			if dist == nil {
				dist = info.Output
			}
			per, err := perCall(info, dist, t.prompt/t.calls)
			if err != nil {
				return Capacity{}, fmt.Errorf("capacity: model %s: %w", lm.Model, err)
			}
			n := float64(t.calls) / queries
			work += n * per
			if gi == first {
				out.Models = append(out.Models, ModelWork{LayerModel: lm, CallsPerQuery: n, PerCall: per})
			}
		}
		if gi == first {
			out.Work = work
		}
		if work > 0 {
			out.QPS += float64(grp.Count) / work
		}
	}
	return out, nil
}

// perCall is a model's marginal serving time per call at saturation (see Capacity).
func perCall(info policies.ModelInfo, dist traces.LengthDist, prompt int) (float64, error) {
	p, err := placement.NewProfile(info, dist, prompt)
	if err != nil {
		return 0, err
	}
	t1, err := p.ServeTime(capacityCalls)
	if err != nil {
		return 0, err
	}
	t2, err := p.ServeTime(2 * capacityCalls)
	if err != nil {
		return 0, err
	}
	if t2 <= t1 {
		return t2 / (2 * capacityCalls), nil
	}
	return (t2 - t1) / capacityCalls, nil
}

// skipped reports whether rule skips gated call c of query q on the answers the workload
// gives its inputs.
func skipped(q *traces.Query, c *traces.Call, rule policies.Rule) bool {
	answers := make([]string, 0, len(c.Inputs))
	for _, in := range c.Inputs {
		answers = append(answers, q.Calls[in.From].Answer)
	}
	return rule.Decide(answers).Skip
}

// firstWorkerOf is the first worker of group gi.
func (r *Resolved) firstWorkerOf(gi int) int {
	for w, g := range r.groupOf {
		if g == gi {
			return w
		}
	}
	return 0
}

// addSteady sets the steady-state columns of an online run's rows, one per policy in order.
func (r *Resolved) addSteady(rows []results.SummaryRow, res []*policies.Result) error {
	steady, err := r.steadyRows(res)
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].Steady = steady[i]
	}
	return nil
}

// steadyRows are the steady-state rows of the policies' results, in order (each nil for an
// offline batch).
func (r *Resolved) steadyRows(res []*policies.Result) ([]*results.SteadyRow, error) {
	rows := make([]*results.SteadyRow, len(res))
	for i := range res {
		var err error
		if rows[i], err = r.steady(res[i], r.Graph.Policies[i].Rule); err != nil {
			return nil, fmt.Errorf("policy %s: %w", r.Graph.Policies[i].Label, err)
		}
	}
	return rows, nil
}

// steady is the steady-state row of a policy's result under rule in an online run (nil for
// an offline batch).
func (r *Resolved) steady(res *policies.Result, rule policies.Rule) (*results.SteadyRow, error) {
	m := r.Graph
	if m == nil || !m.Online {
		return nil, nil
	}
	if rule == nil {
		rule = policies.NeverSkip()
	}
	c, err := m.caps.get(rule.Name(), func() (Capacity, error) { return r.Capacity(rule) })
	if err != nil {
		return nil, err
	}
	w, err := res.Window(m.Warmup, m.SLO)
	if err != nil {
		return nil, fmt.Errorf("the steady-state window: %w", err)
	}
	row := &results.SteadyRow{WindowStartS: w.Start.Seconds(), WindowEndS: w.End.Seconds(), WindowQueries: w.Queries,
		MeanE2ELS: w.Latency.Mean, MedianE2ELS: w.Latency.P50, P99E2ELS: w.Latency.P99, MedianTTFTS: w.TTFT.P50, P99TTFTS: w.TTFT.P99,
		SLOAttainment: w.SLOAttainment, Goodput: w.Goodput, Throughput: w.Throughput,
		ArrivalRate: offeredRate(m), CapacityQPS: c.QPS}
	if c.QPS > 0 {
		row.Load = row.ArrivalRate / c.QPS
	}
	row.Overloaded = row.Load >= 1
	return row, nil
}

// offeredRate is the arrival rate: the configured one, else the workload's queries over the
// span of their arrivals.
func offeredRate(m *GraphWorkload) float64 {
	if m.Arrivals.Rate > 0 {
		return m.Arrivals.Rate
	}
	qs := m.Workload.Queries
	if len(qs) < 2 {
		return 0
	}
	first, last := qs[0].Arrival, qs[0].Arrival
	for _, q := range qs {
		first, last = min(first, q.Arrival), max(last, q.Arrival)
	}
	if last <= first {
		return 0
	}
	return float64(len(qs)-1) / (last - first).Seconds()
}

// capacities caches a workload's capacity under each rule, by the rule's name.
type capacities struct {
	mu sync.Mutex
	m  map[string]Capacity
}

// get returns the capacity of rule name, computed by f the first time.
func (c *capacities) get(name string, f func() (Capacity, error)) (Capacity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[name]; ok {
		return v, nil
	}
	v, err := f()
	if err != nil {
		return Capacity{}, err
	}
	if c.m == nil {
		c.m = map[string]Capacity{}
	}
	c.m[name] = v
	return v, nil
}
