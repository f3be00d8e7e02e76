// Package dataparallel is the data-parallel baseline: every worker loads every expert model in
// turn and serves 1/W of its calls; after every expert call has finished, every worker loads
// the aggregator and serves 1/W of the aggregator calls. It pays every load W times and
// shrinks each engine's batch W-fold.
//
// Choices: models are taken in the experiment's order, the aggregator model (when it is also
// an expert) last, so that it stays loaded for the aggregator stage; a model's calls are dealt
// to workers in turn, in the order they become ready.
package dataparallel

import (
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/traces"
	"slices"
)

// Name is the policy's name in experiment files.
const Name = "data-parallel"

// Policy implements policies.Policy.
type Policy struct {
	aggregator string
	order      []string // expert models in serving order
	next       []int    // per worker, index into order of the model it serves
	share      []map[string][]int
	dealt      map[string]int // calls of a model dealt so far
	aggDealt   int
	aggShare   [][]int
	aggLoading []bool // the aggregator load was requested on the worker
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy; aggregator names the aggregator model ("" if none).
func New(aggregator string) *Policy { return &Policy{aggregator: aggregator} }

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	aggIsExpert := false
	for _, m := range v.Models() {
		if v.Expected(traces.StageExpert, m.Name) == 0 {
			continue
		}
		if m.Name == p.aggregator {
			aggIsExpert = true
			continue
		}
		p.order = append(p.order, m.Name)
	}
	if aggIsExpert {
		p.order = append(p.order, p.aggregator)
	}
	p.next = make([]int, W)
	p.share = make([]map[string][]int, W)
	p.aggShare = make([][]int, W)
	p.aggLoading = make([]bool, W)
	for w := range p.share {
		p.share[w] = map[string][]int{}
	}
	p.dealt = map[string]int{}
	for _, c := range v.Ready() {
		p.deal(c, W)
	}
	var acts []policies.Action
	if len(p.order) > 0 {
		for w := 0; w < W; w++ {
			acts = append(acts, policies.Load(policies.WorkerID(w), p.order[0]))
		}
	}
	return acts, nil
}

func (p *Policy) deal(c policies.CallRef, W int) {
	if c.Stage == traces.StageAggregator {
		w := p.aggDealt % W
		p.aggDealt++
		p.aggShare[w] = append(p.aggShare[w], c.ID)
		return
	}
	w := p.dealt[c.Model] % W
	p.dealt[c.Model]++
	p.share[w][c.Model] = append(p.share[w][c.Model], c.ID)
}

func (p *Policy) current(w policies.WorkerID) string {
	if p.next[w] < len(p.order) {
		return p.order[p.next[w]]
	}
	return ""
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	W := v.Workers()
	switch e.Kind {
	case policies.EventReleased:
		for _, c := range e.Calls {
			p.deal(c, W)
		}
	case policies.EventDone, policies.EventFailed:
		w := e.Worker
		if e.Call != nil && e.Call.Stage == traces.StageExpert && e.Model == p.current(w) && p.finished(w, e.Model, v) {
			p.next[w]++
			if e.Model != p.aggregator {
				return append([]policies.Action{policies.Unload(w, e.Model)}, p.dispatch(v)...)
			}
		}
	case policies.EventUnloaded:
		w := e.Worker
		if m := p.current(w); m != "" && v.Fits(w, m) {
			return append([]policies.Action{policies.Load(w, m)}, p.dispatch(v)...)
		}
	}
	return p.dispatch(v)
}

// finished reports whether worker w has served its whole share of model m: nothing of it
// queued, nothing in flight, and no more of m's calls to come.
func (p *Policy) finished(w policies.WorkerID, m string, v policies.View) bool {
	if len(p.share[w][m]) > 0 || v.InFlight(w, m) > 0 {
		return false
	}
	// Calls of m not yet released may still be dealt to w.
	return p.dealt[m] >= v.Expected(traces.StageExpert, m)
}

func (p *Policy) dispatch(v policies.View) []policies.Action {
	var acts []policies.Action
	W := v.Workers()
	for w := 0; w < W; w++ {
		wid := policies.WorkerID(w)
		m := p.current(wid)
		if m == "" || !slices.Contains(v.Holds(wid), m) {
			continue
		}
		submitted := len(p.share[w][m])
		for _, id := range p.share[w][m] {
			acts = append(acts, policies.Submit(wid, id))
		}
		p.share[w][m] = p.share[w][m][:0]
		// A share can be empty from the start (fewer calls than workers).
		if submitted == 0 && p.finished(wid, m, v) {
			p.next[w]++
			if m != p.aggregator {
				acts = append(acts, policies.Unload(wid, m))
			}
		}
	}
	if p.aggregator == "" || !policies.ExpertsDone(v) {
		return acts
	}
	// The aggregator stage: a worker loads the aggregator when it has a share to serve and
	// its memory is free (after EventUnloaded if an unload is still under way).
	for w := 0; w < W; w++ {
		wid := policies.WorkerID(w)
		if !slices.Contains(v.Holds(wid), p.aggregator) {
			if len(p.aggShare[w]) > 0 && !p.aggLoading[w] && v.Fits(wid, p.aggregator) {
				p.aggLoading[w] = true
				acts = append(acts, policies.Load(wid, p.aggregator))
			}
			continue
		}
		for _, id := range p.aggShare[w] {
			acts = append(acts, policies.Submit(wid, id))
		}
		p.aggShare[w] = p.aggShare[w][:0]
	}
	return acts
}
