// Package dataparallel is the data-parallel baseline: every worker loads every model of a
// layer in turn and serves 1/W of its calls; the graph runs layer by layer (for a MoA query:
// after every expert call has finished, every worker with a share loads the aggregator and
// serves 1/W of the aggregator calls). It pays every load W times and shrinks each engine's
// batch W-fold.
//
// Choices: models are taken in the experiment's order, those served again in the next layer
// last (so that they stay loaded), and a layer starts with the model the previous one ended
// on; a model's calls of a layer are dealt to workers in turn, in the order they become ready.
// On a mixed cluster a worker whose GPUs cannot hold a model skips it: the model's calls are
// dealt in turn to the workers that can run it (equal shares, whatever their speed: the
// baseline does not weigh workers), and the policy says so on stderr when it starts.
package dataparallel

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/policies"
)

// Name is the policy's name in experiment files.
const Name = "data-parallel"

// job is one model of one layer.
type job struct {
	layer int
	model string
}

// Policy implements policies.Policy.
type Policy struct {
	jobs    []job // every worker's serving order
	next    []int // per worker, index into jobs of the job it serves
	share   []map[job][]int
	dealt   map[job]int // calls of a job dealt so far
	loading []map[job]bool
	// lastLayer is the graph's last layer: a worker keeps the model it serves there.
	lastLayer int
	// capable lists, per model, the workers that can run it; cannot marks, per worker, the
	// models it skips.
	capable map[string][]policies.WorkerID
	cannot  []map[string]bool
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy.
func New() *Policy { return &Policy{} }

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.lastLayer = v.Layers() - 1
	prev := ""
	for l := range v.Layers() {
		var first, now, again []job
		for _, m := range v.Models() {
			j := job{l, m.Name}
			switch {
			case v.Expected(l, m.Name) == 0:
			case m.Name == prev:
				first = append(first, j)
			case v.Expected(l+1, m.Name) > 0:
				again = append(again, j)
			default:
				now = append(now, j)
			}
		}
		layer := append(append(first, now...), again...)
		if len(layer) > 0 {
			prev = layer[len(layer)-1].model
		}
		p.jobs = append(p.jobs, layer...)
	}
	p.next = make([]int, W)
	p.share = make([]map[job][]int, W)
	p.loading = make([]map[job]bool, W)
	p.cannot = make([]map[string]bool, W)
	for w := range p.share {
		p.share[w] = map[job][]int{}
		p.loading[w] = map[job]bool{}
		p.cannot[w] = map[string]bool{}
	}
	p.capable = map[string][]policies.WorkerID{}
	for _, m := range v.Models() {
		ws := m.Runnable(W)
		if len(ws) == 0 && v.Expected(policies.AnyLayer, m.Name) > 0 {
			return nil, fmt.Errorf("model %s runs on no worker of the cluster", m.Name)
		}
		p.capable[m.Name] = ws
		var skipped []string
		for w := range W {
			if !m.CanRun(policies.WorkerID(w)) {
				p.cannot[w][m.Name] = true
				skipped = append(skipped, fmt.Sprintf("w%d (%s)", w, m.On(policies.WorkerID(w)).Hardware))
			}
		}
		if len(skipped) > 0 && v.Expected(policies.AnyLayer, m.Name) > 0 {
			slog.Info("data-parallel: workers that cannot run a model skip it; its calls are dealt to the others",
				"model", m.Name, "skipped", strings.Join(skipped, ", "), "serving", len(ws))
		}
	}
	p.dealt = map[job]int{}
	for _, c := range v.Ready() {
		p.deal(c)
	}
	var acts []policies.Action
	for w := 0; w < W; w++ {
		if j, ok := p.current(policies.WorkerID(w)); ok && j.layer == 0 {
			acts = append(acts, policies.Load(policies.WorkerID(w), j.model))
		}
	}
	return acts, nil
}

// Skipped lists, per model, the workers that cannot run it and so take no share of its calls
// (nil entries on a uniform cluster).
func (p *Policy) Skipped() map[string][]policies.WorkerID {
	out := map[string][]policies.WorkerID{}
	for w, ms := range p.cannot {
		for m := range ms {
			out[m] = append(out[m], policies.WorkerID(w))
		}
	}
	return out
}

// deal gives a released call to the next worker in turn that can run its model.
func (p *Policy) deal(c policies.CallRef) {
	j := job{c.Layer, c.Model}
	ws := p.capable[c.Model]
	w := ws[p.dealt[j]%len(ws)]
	p.dealt[j]++
	p.share[w][j] = append(p.share[w][j], c.ID)
}

// current is the job worker w serves now, passing over jobs of models it cannot run (false
// when it has served all of its jobs).
func (p *Policy) current(w policies.WorkerID) (job, bool) {
	for p.next[w] < len(p.jobs) && p.cannot[w][p.jobs[p.next[w]].model] {
		p.next[w]++
	}
	if p.next[w] < len(p.jobs) {
		return p.jobs[p.next[w]], true
	}
	return job{}, false
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	switch e.Kind {
	case policies.EventReleased:
		for _, c := range e.Calls {
			p.deal(c)
		}
	case policies.EventCancelled:
		if e.Worker < 0 {
			// Never submitted: drop it from the share it was dealt to.
			j := job{e.Call.Layer, e.Call.Model}
			var acts []policies.Action
			for w := range p.share {
				wid := policies.WorkerID(w)
				p.share[w][j] = slices.DeleteFunc(p.share[w][j], func(id int) bool { return id == e.Call.ID })
				if cur, ok := p.current(wid); ok && cur == j && p.finished(wid, j, v) {
					acts = append(acts, p.advance(wid)...)
				}
			}
			return append(acts, p.dispatch(v)...)
		}
		fallthrough
	case policies.EventDone, policies.EventFailed:
		w := e.Worker
		if e.Call != nil {
			if j, ok := p.current(w); ok && j == (job{e.Call.Layer, e.Model}) && p.finished(w, j, v) {
				return append(p.advance(w), p.dispatch(v)...)
			}
		}
	case policies.EventUnloaded:
		w := e.Worker
		if j, ok := p.current(w); ok && j.layer == 0 && policies.CanLoad(v, w, j.model) {
			return append([]policies.Action{policies.Load(w, j.model)}, p.dispatch(v)...)
		}
	}
	return p.dispatch(v)
}

// advance moves worker w past its finished job, unloading the model unless the next job
// serves it too or the job is of the last layer.
func (p *Policy) advance(w policies.WorkerID) []policies.Action {
	done, _ := p.current(w)
	p.next[w]++
	if nxt, ok := p.current(w); ok && nxt.model == done.model || !ok && done.layer == p.lastLayer {
		return nil // served again next, or the run's last layer
	}
	return []policies.Action{policies.Unload(w, done.model)}
}

// finished reports whether worker w has served its whole share of job j: nothing of it
// queued, nothing in flight, and no more of its calls to come.
func (p *Policy) finished(w policies.WorkerID, j job, v policies.View) bool {
	if len(p.share[w][j]) > 0 || v.InFlight(w, j.model) > 0 {
		return false
	}
	// Calls not yet released may still be dealt to w.
	return p.dealt[j] >= v.Expected(j.layer, j.model)
}

func (p *Policy) dispatch(v policies.View) []policies.Action {
	var acts []policies.Action
	for w := range p.share {
		wid := policies.WorkerID(w)
		j, ok := p.current(wid)
		if !ok {
			continue
		}
		holds := v.Holding(wid, j.model)
		if j.layer == 0 {
			if !holds {
				continue
			}
			submitted := len(p.share[w][j])
			for _, id := range p.share[w][j] {
				acts = append(acts, policies.Submit(wid, id))
			}
			p.share[w][j] = p.share[w][j][:0]
			// A share can be empty from the start (fewer calls than workers).
			if submitted == 0 && p.finished(wid, j, v) {
				acts = append(acts, p.advance(wid)...)
			}
			continue
		}
		// A later layer, once every call below it has finished: a worker loads the model
		// when it has a share to serve and its memory is free (after EventUnloaded if an
		// unload is still under way), and passes over jobs it has no share of.
		if !policies.LayersDone(v, j.layer) {
			continue
		}
		for !holds && len(p.share[w][j]) == 0 && p.finished(wid, j, v) {
			p.next[w]++
			if j, ok = p.current(wid); !ok {
				break
			}
			holds = v.Holding(wid, j.model)
		}
		if !ok {
			continue
		}
		if !holds {
			if len(p.share[w][j]) > 0 && !p.loading[w][j] && policies.CanLoad(v, wid, j.model) {
				p.loading[w][j] = true
				acts = append(acts, policies.Load(wid, j.model))
			}
			continue
		}
		for _, id := range p.share[w][j] {
			acts = append(acts, policies.Submit(wid, id))
		}
		p.share[w][j] = p.share[w][j][:0]
	}
	return acts
}
