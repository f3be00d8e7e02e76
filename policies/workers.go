package policies

import (
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// WorkerCost is how a model runs on one worker of a mixed cluster, whose workers differ in GPU
// type and tensor-parallel degree: the model's cost model, engine and load time on that
// worker's GPUs, or why it cannot run there. Policies read it through ModelInfo.On; the same
// values reach them from the simulator and from replay.
type WorkerCost struct {
	// Hardware names the worker's GPUs: "A100-80GB", or "H100-80GB x2" for a tensor-parallel
	// group of two.
	Hardware string
	// Cost is the model's cost model on the worker's GPUs (nil where it cannot run).
	Cost *sim.CostModel
	// Engine is the model's engine there: its KV cache, token budget and sequence cap follow
	// the worker's memory and GPU type.
	Engine sim.EngineConfig
	// LoadTime is the predicted time to load the model on the worker.
	LoadTime time.Duration
	// Unfit says why the model cannot run on the worker ("" when it can): its weights leave no
	// room for a KV cache on the worker's GPUs, or it does not split over their
	// tensor-parallel degree. A policy must never place the model there; the backends refuse
	// such a load.
	Unfit string
}

// On returns how the model runs on worker w (Workers[w]).
func (m ModelInfo) On(w WorkerID) WorkerCost {
	if w < 0 || int(w) >= len(m.Workers) {
		return WorkerCost{Unfit: "no such worker"}
	}
	return m.Workers[w]
}

// At returns the model as it runs on worker w: its Cost, Engine and LoadTime are the worker's
// (On), so code written for one kind of worker (a serving profile) sees that worker's costs.
func (m ModelInfo) At(w WorkerID) ModelInfo {
	wc := m.On(w)
	m.Cost, m.Engine, m.LoadTime = wc.Cost, wc.Engine, wc.LoadTime
	return m
}

// CanRun reports whether worker w can run the model at all: alone on the worker, its weights
// and a KV cache fit the worker's GPUs. It says nothing of what the worker holds now: View.Fits
// checks the memory next to the models already there (CanLoad checks both).
func (m ModelInfo) CanRun(w WorkerID) bool {
	return w >= 0 && int(w) < len(m.Workers) && m.Workers[w].Unfit == ""
}

// Alike reports whether every worker runs the model with the same cost model, engine and load
// time: a cluster of one kind of worker, where any worker can stand for the others.
func (m ModelInfo) Alike() bool {
	for _, wc := range m.Workers {
		if wc.Cost != m.Workers[0].Cost || wc.Engine != m.Workers[0].Engine || wc.LoadTime != m.Workers[0].LoadTime || wc.Unfit != "" {
			return false
		}
	}
	return true
}

// OnEvery returns the model on a cluster of n identical workers of the given hardware: Workers
// lists n workers that each run it with its Cost, Engine and LoadTime. NewDriver gives a model
// listed without Workers this form.
func (m ModelInfo) OnEvery(n int, hardware string) ModelInfo {
	wc := WorkerCost{Hardware: hardware, Cost: m.Cost, Engine: m.Engine, LoadTime: m.LoadTime}
	m.Workers = make([]WorkerCost, n)
	for w := range m.Workers {
		m.Workers[w] = wc
	}
	return m
}

// Runnable lists the workers of a cluster of n workers that can run the model, in order.
func (m ModelInfo) Runnable(n int) []WorkerID {
	var out []WorkerID
	for w := range n {
		if m.CanRun(WorkerID(w)) {
			out = append(out, WorkerID(w))
		}
	}
	return out
}

// CanLoad reports whether a policy may load model on worker w now: the worker can run it
// (ModelInfo.CanRun) and it fits next to what the worker holds and is loading (View.Fits). On
// a mixed cluster a policy checks this, not View.Fits alone, before it loads a model.
func CanLoad(v View, w WorkerID, model string) bool {
	m, ok := v.Model(model)
	return ok && m.CanRun(w) && v.Fits(w, model)
}
