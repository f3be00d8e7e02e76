package policies

import (
	"slices"
	"sort"
	"time"
)

// The View: what a policy may read of the cluster and the workload (the Driver implements it).

// Now implements View.
func (d *Driver) Now() time.Duration { return d.backend.Now() }

// Workers implements View.
func (d *Driver) Workers() int { return d.workers }

// Models implements View.
func (d *Driver) Models() []ModelInfo { return append([]ModelInfo(nil), d.models...) }

// modelIndex is the index of the model named name in d.models (0 for a name it does not list,
// as a map's missing key gave: callers pass models the Driver holds).
func (d *Driver) modelIndex(name string) int {
	i, _ := d.byName.Get(name)
	return i
}

// Model implements View.
func (d *Driver) Model(name string) (ModelInfo, bool) {
	i, ok := d.byName.Get(name)
	if !ok {
		return ModelInfo{}, false
	}
	return d.models[i], true
}

// Holds implements View.
func (d *Driver) Holds(w WorkerID) []string { return append([]string(nil), d.ws[w].holds...) }

// Holding implements View.
func (d *Driver) Holding(w WorkerID, model string) bool { return slices.Contains(d.ws[w].holds, model) }

// Loading implements View.
func (d *Driver) Loading(w WorkerID) []string {
	var out []string
	for m := range d.ws[w].loading {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Fits implements View.
func (d *Driver) Fits(w WorkerID, model string) bool {
	i, ok := d.byName.Get(model)
	if !ok {
		return false
	}
	used := d.models[i].Memory
	for _, m := range d.resident(w) {
		used += d.models[d.modelIndex(m)].Memory
	}
	return used <= 1+1e-9
}

// InFlight implements View.
func (d *Driver) InFlight(w WorkerID, model string) int {
	if model != "" {
		mi, ok := d.byName.Get(model)
		if !ok {
			return 0
		}
		return d.ws[w].inflight[mi]
	}
	n := 0
	for _, v := range d.ws[w].inflight {
		n += v
	}
	return n
}

// Ready implements View.
func (d *Driver) Ready() []CallRef {
	d.order = d.readyOnly(d.order)
	d.ordered = len(d.order)
	var out []CallRef
	for _, id := range d.order {
		out = append(out, d.ref(id))
	}
	return out
}

// Expected implements View.
func (d *Driver) Expected(layer int, model string) int {
	return d.sum(layer, model, func(c counts) int { return c.expected })
}

// Remaining implements View.
func (d *Driver) Remaining(layer int, model string) int {
	return d.sum(layer, model, func(c counts) int { return c.remaining })
}

func (d *Driver) sum(layer int, model string, f func(counts) int) int {
	lo, hi := layer, layer+1
	if layer == AnyLayer {
		lo, hi = 0, d.layers
	}
	if lo < 0 || hi > d.layers {
		return 0
	}
	mi := -1
	if model != "" {
		var ok bool
		if mi, ok = d.byName.Get(model); !ok {
			return 0
		}
	}
	n := 0
	for l := lo; l < hi; l++ {
		if mi >= 0 {
			n += f(d.expect[l][mi])
			continue
		}
		for _, c := range d.expect[l] {
			n += f(c)
		}
	}
	return n
}

// Layers implements View.
func (d *Driver) Layers() int { return d.layers }

// Queries implements View.
func (d *Driver) Queries() int { return d.nq }

var _ View = (*Driver)(nil)
