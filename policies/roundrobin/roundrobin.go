// Package roundrobin is the MOSAIC paper's baseline policy: expert models are assigned to
// workers in order (model i to worker i mod W) and each is loaded once; a worker serves all
// calls of its models, one model after another; after every expert call has finished, the
// aggregator stage runs on the worker the round-robin gives the aggregator model.
//
// Details the paper leaves open, chosen here: models are taken in the experiment's order; a
// worker serves its models in that order except that the aggregator model, when it is also an
// expert, is served last so that it stays loaded for the aggregator stage; an aggregator that
// is not an expert continues the round-robin (it is model n, on worker n mod W).
package roundrobin

import (
	"fmt"
	"slices"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/traces"
)

// Name is the policy's name in experiment files.
const Name = "round-robin"

// Policy implements policies.Policy.
type Policy struct {
	aggregator string
	plan       [][]string // per worker, its expert models in serving order
	next       []int      // per worker, index of the model being served or loaded
	aggWorker  policies.WorkerID
	experts    map[string][]int // ready expert call ids per model, not yet submitted
	aggCalls   []int            // ready aggregator call ids, not yet submitted
	stage2     bool
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy; aggregator names the aggregator model ("" if the workload has none).
func New(aggregator string) *Policy { return &Policy{aggregator: aggregator} }

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.plan = make([][]string, W)
	p.next = make([]int, W)
	p.experts = map[string][]int{}
	n := 0
	aggIsExpert := false
	for _, m := range v.Models() {
		if v.Expected(traces.StageExpert, m.Name) == 0 {
			continue
		}
		w := n % W
		p.plan[w] = append(p.plan[w], m.Name)
		if m.Name == p.aggregator {
			aggIsExpert = true
			p.aggWorker = policies.WorkerID(w)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("the workload has no expert calls")
	}
	if !aggIsExpert {
		p.aggWorker = policies.WorkerID(n % W)
	}
	// The aggregator model goes last on its worker, so it stays loaded for stage 2.
	for w, models := range p.plan {
		for i, m := range models {
			if m == p.aggregator && i != len(models)-1 {
				p.plan[w] = append(append(append([]string(nil), models[:i]...), models[i+1:]...), m)
				break
			}
		}
	}
	for _, c := range v.Ready() {
		p.queue(c)
	}
	var acts []policies.Action
	for w, models := range p.plan {
		if len(models) > 0 {
			acts = append(acts, policies.Load(policies.WorkerID(w), models[0]))
		}
	}
	return acts, nil
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	switch e.Kind {
	case policies.EventReleased:
		for _, c := range e.Calls {
			p.queue(c)
		}
		return p.dispatch(v)
	case policies.EventLoaded:
		return p.dispatch(v)
	case policies.EventDone, policies.EventFailed:
		if e.Call == nil || e.Call.Stage != traces.StageExpert {
			return nil
		}
		var acts []policies.Action
		w := e.Worker
		if v.Remaining(traces.StageExpert, e.Model) == 0 && p.current(w) == e.Model {
			// This worker is done with the model: move on to its next one.
			p.next[w]++
			if e.Model != p.aggregator {
				acts = append(acts, policies.Unload(w, e.Model))
			} else if m := p.current(w); m != "" {
				acts = append(acts, policies.Load(w, m))
			}
		}
		return append(acts, p.dispatch(v)...)
	case policies.EventUnloaded:
		if m := p.current(e.Worker); m != "" && !holds(v, e.Worker, m) && !slices.Contains(v.Loading(e.Worker), m) && v.Fits(e.Worker, m) {
			return []policies.Action{policies.Load(e.Worker, m)}
		}
		return p.dispatch(v)
	}
	return nil
}

// current is the model worker w serves now, or "" when it has served all of its models.
func (p *Policy) current(w policies.WorkerID) string {
	if p.next[w] < len(p.plan[w]) {
		return p.plan[w][p.next[w]]
	}
	return ""
}

func (p *Policy) queue(c policies.CallRef) {
	if c.Stage == traces.StageAggregator {
		p.aggCalls = append(p.aggCalls, c.ID)
	} else {
		p.experts[c.Model] = append(p.experts[c.Model], c.ID)
	}
}

// dispatch submits queued calls to the workers that hold their models: expert calls to the
// worker serving that model, aggregator calls to the aggregator worker once every expert call
// is done (the stage barrier).
func (p *Policy) dispatch(v policies.View) []policies.Action {
	var acts []policies.Action
	for w := range p.plan {
		m := p.current(policies.WorkerID(w))
		if m == "" || !holds(v, policies.WorkerID(w), m) {
			continue
		}
		for _, id := range p.experts[m] {
			acts = append(acts, policies.Submit(policies.WorkerID(w), id))
		}
		p.experts[m] = p.experts[m][:0]
	}
	if p.aggregator == "" || !policies.ExpertsDone(v) {
		return acts
	}
	aw := p.aggWorker
	if !p.stage2 {
		// The aggregator stage begins. Its worker has unloaded its expert models; if it does
		// not hold the aggregator, load it now or, while an unload is still freeing memory,
		// when that completes (EventUnloaded loads the worker's current model).
		p.stage2 = true
		if !holds(v, aw, p.aggregator) && !slices.Contains(v.Loading(aw), p.aggregator) {
			p.plan[aw] = append(p.plan[aw], p.aggregator)
			p.next[aw] = len(p.plan[aw]) - 1
			if v.Fits(aw, p.aggregator) {
				acts = append(acts, policies.Load(aw, p.aggregator))
			}
		}
	}
	if holds(v, aw, p.aggregator) {
		for _, id := range p.aggCalls {
			acts = append(acts, policies.Submit(aw, id))
		}
		p.aggCalls = p.aggCalls[:0]
	}
	return acts
}

func holds(v policies.View, w policies.WorkerID, m string) bool {
	return slices.Contains(v.Holds(w), m)
}
