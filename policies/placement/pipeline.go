package placement

import (
	"github.com/mosaic-sched/mosaic/policies"
)

// PipelineName is the name of the MOSAIC policy without its stage barrier.
const PipelineName = "pipeline"

// The pipeline policy is MOSAIC's placement without the stage barrier. MOSAIC serves a layer
// only once every call below it has finished, so a worker that is done with its share of the
// experts idles (or prefetches the aggregator and then idles) until the slowest worker is done.
// The pipeline policy gives such a worker the next layer's calls that are ready: a worker whose
// stage work is done and that holds a model of the next layer (the aggregator it prefetched)
// is fed that model's ready calls, oldest first, up to its engine's batch (max_num_seqs) in
// flight; when the barrier comes, the rest of the layer is planned as MOSAIC plans it, with
// each worker's backlog of early calls as the time it becomes free. The placement, the order
// of calls and the plans of the stages are MOSAIC's; only when the next layer's work starts
// changes. Early exit, overlap and prefix caching are the Driver's and the engine's, switched
// per policy in the experiment file.

// feed submits ready calls of the next layer to workers done with their stage that hold the
// calls' model.
func (p *Policy) feed(v policies.View) []policies.Action {
	next := p.stage + 1
	calls := p.waiting[next]
	if len(calls) == 0 {
		return nil
	}
	// The workers done with their stage: with none, no call can go (the common case while a
	// stage runs, when the next layer's ready calls pile up).
	free := p.free[:0]
	for _, wk := range p.workers {
		if wk.current() == "" && wk.loading == "" && wk.want == "" {
			free = append(free, wk)
		}
	}
	p.free = free
	if len(free) == 0 {
		return nil
	}
	var acts []policies.Action
	var info policies.ModelInfo // the last call's model's (calls of one model come in runs)
	known := false
	kept := -1 // once a call went, where the next kept call moves to
	for i, c := range calls {
		if !known || info.Name != c.Model {
			info, known = v.Model(c.Model)
		}
		if w := p.freeWorker(known, info, free, v); w != nil {
			p.early[c.ID] = true
			p.earlyN[next]++
			acts = append(acts, policies.Submit(w.id, c.ID))
			p.inflightEarly[w.id]++
			if kept < 0 {
				kept = i
			}
			continue
		}
		if kept >= 0 {
			calls[kept] = c
			kept++
		}
	}
	if kept >= 0 {
		clear(calls[kept:])
		p.waiting[next] = calls[:kept]
	}
	clear(p.inflightEarly)
	return acts
}

// freeWorker is the worker with the fewest calls in flight among those done with the stage
// (free) that hold the model of info (known: the model exists) and have room for another call,
// or nil.
func (p *Policy) freeWorker(known bool, info policies.ModelInfo, free []*worker, v policies.View) *worker {
	if !known {
		return nil
	}
	var best *worker
	bestN := 0
	for _, wk := range free {
		if !v.Holding(wk.id, info.Name) {
			continue
		}
		n := v.InFlight(wk.id, "") + p.inflightEarly[wk.id]
		if n >= max(1, info.On(wk.id).Engine.MaxNumSeqs) { // the worker's engine: its GPUs on a mixed cluster
			continue
		}
		if best == nil || n < bestN {
			best, bestN = wk, n
		}
	}
	return best
}

// backlog estimates, in seconds, when worker wk is done with the next layer's calls it was fed
// before the stage: half the profiled time to serve that many calls of the model from the
// start (they are, on average, half done).
// The profile takes the mean prompt of the layer's calls of the model (prompt[m] / n[m]).
func (p *Policy) backlog(wk *worker, v policies.View, layer int, prompt, calls map[string]int) float64 {
	total := 0.0
	for _, m := range v.Holds(wk.id) {
		n := v.InFlight(wk.id, m)
		if n == 0 {
			continue
		}
		info, ok := v.Model(m)
		if !ok {
			continue
		}
		dist := p.outputs(layer)[m]
		if dist == nil {
			dist = info.Output
		}
		mean := 1
		if calls[m] > 0 {
			mean = max(1, prompt[m]/calls[m])
		}
		prof, err := NewProfile(info.At(wk.id), dist, mean) // the worker's costs on a mixed cluster
		if err != nil {
			continue
		}
		curve, err := prof.Curve(n)
		if err != nil {
			continue
		}
		total += curve.At(n) / 2
	}
	return total
}
