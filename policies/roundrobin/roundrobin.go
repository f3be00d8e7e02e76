// Package roundrobin is the MOSAIC paper's baseline policy: models are assigned to workers in
// order (model i to worker i mod W) and each is loaded once; a worker serves all calls of its
// models, one model after another; the graph runs layer by layer: the calls of a layer are
// served only after every call of the layers below has finished (for a MoA query: the expert
// stage, then the aggregator stage on the worker the round-robin gives the aggregator).
//
// Details the paper leaves open, chosen here: models are taken layer by layer in the
// experiment's order (on a mixed cluster a model skips, in turn, the workers whose GPUs cannot
// hold it), a model keeping the worker it got in the first layer that uses it (so a
// MoA aggregator that is also an expert stays where it served as an expert; one that is not
// continues the round-robin); within a layer a worker serves its models in that order except
// that models it serves again in the next layer go last, so that they stay loaded.
package roundrobin

import (
	"fmt"
	"slices"

	"github.com/mosaic-sched/mosaic/policies"
)

// Name is the policy's name in experiment files.
const Name = "round-robin"

// job is one model of one layer on a worker.
type job struct {
	layer int
	model string
}

// Policy implements policies.Policy.
type Policy struct {
	jobs [][]job // per worker, in serving order
	next []int   // per worker, index of the job being served or loaded
	// queues are the call IDs queued for each job, found by a scan (see queue).
	queues []jobQueue
	// lastLayer is the graph's last layer: a worker keeps the model it serves there.
	lastLayer int
}

var _ policies.Policy = (*Policy)(nil)

// New returns the policy.
func New() *Policy { return &Policy{} }

// Name implements policies.Policy.
func (p *Policy) Name() string { return Name }

// Start implements policies.Policy.
func (p *Policy) Start(v policies.View) ([]policies.Action, error) {
	W := v.Workers()
	p.jobs = make([][]job, W)
	p.next = make([]int, W)
	p.queues = nil
	p.lastLayer = v.Layers() - 1
	home := map[string]int{}
	n, homed := 0, 0
	models := v.Models()
	for l := range v.Layers() {
		for _, m := range models {
			if v.Expected(l, m.Name) == 0 {
				continue
			}
			if _, ok := home[m.Name]; ok {
				continue
			}
			// The next worker in turn that can run the model (on a mixed cluster a worker
			// whose GPUs cannot hold it is passed over).
			w := -1
			for k := range W {
				if m.CanRun(policies.WorkerID((n + k) % W)) {
					w = (n + k) % W
					n += k + 1
					break
				}
			}
			if w < 0 {
				return nil, fmt.Errorf("model %s runs on no worker of the cluster", m.Name)
			}
			home[m.Name] = w
			homed++
		}
	}
	if homed == 0 {
		return nil, fmt.Errorf("the workload has no LLM calls")
	}
	for w := range p.jobs {
		for l := range v.Layers() {
			var now, again []job
			for _, m := range models {
				if home[m.Name] != w || v.Expected(l, m.Name) == 0 {
					continue
				}
				if v.Expected(l+1, m.Name) > 0 {
					again = append(again, job{l, m.Name})
				} else {
					now = append(now, job{l, m.Name})
				}
			}
			p.jobs[w] = append(append(p.jobs[w], now...), again...)
		}
	}
	for _, c := range v.Ready() {
		p.add(c)
	}
	var acts []policies.Action
	for w, jobs := range p.jobs {
		if len(jobs) > 0 && jobs[0].layer == 0 {
			acts = append(acts, policies.Load(policies.WorkerID(w), jobs[0].model))
		}
	}
	return acts, nil
}

// OnEvent implements policies.Policy.
func (p *Policy) OnEvent(e policies.Event, v policies.View) []policies.Action {
	switch e.Kind {
	case policies.EventReleased:
		for _, c := range e.Calls {
			p.add(c)
		}
		return p.dispatch(v)
	case policies.EventLoaded:
		return p.dispatch(v)
	case policies.EventCancelled:
		if e.Worker >= 0 {
			break // stopped on its worker: as a finished call, below
		}
		j := job{e.Call.Layer, e.Call.Model}
		q := p.queue(j)
		*q = slices.DeleteFunc(*q, func(id int) bool { return id == e.Call.ID })
		var acts []policies.Action
		for w := range p.jobs {
			wid := policies.WorkerID(w)
			if cur, ok := p.current(wid); ok && cur == j && v.Remaining(j.layer, j.model) == 0 && len(*p.queue(j)) == 0 && v.InFlight(wid, j.model) == 0 {
				acts = append(acts, p.advance(wid, v)...)
			}
		}
		return append(acts, p.dispatch(v)...)
	}
	switch e.Kind {
	case policies.EventDone, policies.EventFailed, policies.EventCancelled:
		if e.Call == nil {
			return nil
		}
		w := e.Worker
		j := job{e.Call.Layer, e.Model}
		var acts []policies.Action
		if v.Remaining(j.layer, j.model) == 0 && v.InFlight(w, j.model) == 0 {
			if cur, ok := p.current(w); ok && cur == j {
				acts = p.advance(w, v)
			}
		}
		return append(acts, p.dispatch(v)...)
	case policies.EventUnloaded:
		if a, ok := p.loadCurrent(e.Worker, v); ok {
			return []policies.Action{a}
		}
		return p.dispatch(v)
	}
	return nil
}

// advance moves worker w past its finished job: it unloads the job's model unless its next
// job serves the same model or the job is of the last layer.
func (p *Policy) advance(w policies.WorkerID, v policies.View) []policies.Action {
	done, _ := p.current(w)
	p.next[w]++
	if nxt, ok := p.current(w); ok && nxt.model == done.model || !ok && done.layer == p.lastLayer {
		return nil // served again next, or the run's last layer
	}
	if v.Holding(w, done.model) {
		return []policies.Action{policies.Unload(w, done.model)}
	}
	return nil
}

// current is the job worker w serves now (false when it has served all of its jobs).
func (p *Policy) current(w policies.WorkerID) (job, bool) {
	if p.next[w] < len(p.jobs[w]) {
		return p.jobs[w][p.next[w]], true
	}
	return job{}, false
}

// open reports whether a layer's calls may be served: every call below it has finished.
func open(v policies.View, layer int) bool { return layer == 0 || policies.LayersDone(v, layer) }

// loadCurrent loads worker w's current model when its layer is open and it is neither held
// nor loading and fits.
func (p *Policy) loadCurrent(w policies.WorkerID, v policies.View) (policies.Action, bool) {
	j, ok := p.current(w)
	if !ok || !open(v, j.layer) || v.Holding(w, j.model) || slices.Contains(v.Loading(w), j.model) || !policies.CanLoad(v, w, j.model) {
		return policies.Action{}, false
	}
	return policies.Load(w, j.model), true
}

func (p *Policy) add(c policies.CallRef) {
	j := job{c.Layer, c.Model}
	q := p.queue(j)
	*q = append(*q, c.ID)
}

// jobQueue is the call IDs queued for one job.
type jobQueue struct {
	job
	ids []int
}

// queue returns job j's queue, valid until the next call. A run has a few jobs (layers x
// models), and a scan that compares model names (shared strings) is cheaper than hashing the
// name for every call.
func (p *Policy) queue(j job) *[]int {
	for i := range p.queues {
		if q := &p.queues[i]; q.layer == j.layer && q.model == j.model {
			return &q.ids
		}
	}
	p.queues = append(p.queues, jobQueue{job: j})
	return &p.queues[len(p.queues)-1].ids
}

// dispatch submits queued calls to the workers that serve their layer and model now, once the
// layer is open (the stage barrier), loading a later layer's model when it opens; a job with
// nothing left to serve when its layer opens is passed over.
func (p *Policy) dispatch(v policies.View) []policies.Action {
	var acts []policies.Action
	for w := range p.jobs {
		wid := policies.WorkerID(w)
		for {
			j, ok := p.current(wid)
			if !ok || !open(v, j.layer) {
				break
			}
			q := p.queue(j)
			if j.layer > 0 && v.Remaining(j.layer, j.model) == 0 && len(*q) == 0 && v.InFlight(wid, j.model) == 0 {
				acts = append(acts, p.advance(wid, v)...)
				continue
			}
			if v.Holding(wid, j.model) {
				for _, id := range *q {
					acts = append(acts, policies.Submit(wid, id))
				}
				*q = (*q)[:0]
			} else if j.layer > 0 {
				if a, ok := p.loadCurrent(wid, v); ok {
					acts = append(acts, a)
				}
			}
			break
		}
	}
	return acts
}
