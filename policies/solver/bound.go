package solver

import (
	"math"
	"slices"
	"sort"
)

// maxCalls is the most calls, up to n, that curve c serves within budget seconds (0 when not
// even one fits). c is non-decreasing (Curve's contract, which Validate checks), so the answer
// lies on the last stretch whose start fits; it is read off that stretch's line, then settled
// against At.
func maxCalls(c Curve, budget float64, n int) int {
	k := len(c.X)
	if n <= 0 || k == 0 || c.T[0] > budget {
		return 0
	}
	if c.At(n) <= budget {
		return n
	}
	i := sort.Search(k, func(j int) bool { return c.T[j] > budget }) - 1 // T[i] <= budget
	var x int
	switch {
	case i < k-1:
		x0, x1 := c.X[i], c.X[i+1]
		x = x0 + int((budget-c.T[i])*float64(x1-x0)/(c.T[i+1]-c.T[i]))
		x = min(max(x, x0), x1-1)
	case k >= 2:
		s := (c.T[k-1] - c.T[k-2]) / float64(c.X[k-1]-c.X[k-2])
		x = c.X[k-1]
		if s > 0 {
			x += int(min((budget-c.T[k-1])/s, float64(n)))
		} else {
			x = n
		}
	default:
		x = n
	}
	x = min(x, n)
	for x > 0 && c.At(x) > budget {
		x--
	}
	for x < n && c.At(x+1) <= budget {
		x++
	}
	return x
}

// concave reports whether c, with c(0) = 0, is concave on the integers: the time each further
// call adds never grows. Profiled curves mostly are; one whose sample caught a long call early
// is not, and leastWork then takes its recurrence instead of its closed form.
func (c Curve) concave() bool {
	prev := math.Inf(1)
	x0, t0 := 0, 0.0
	for i, x := range c.X {
		if x > x0+1 && i == 0 {
			// At is T[0] for 1..X[0]: a step at 1, flat after.
			if c.T[0] < 0 {
				return false
			}
			prev = 0
			x0, t0 = x, c.T[0]
			continue
		}
		s := (c.T[i] - t0) / float64(x-x0)
		if s > prev*(1+1e-12)+1e-12 {
			return false
		}
		prev, x0, t0 = s, x, c.T[i]
	}
	return true
}

// leastPerCall is the least time per call of cost over batches of 1 to xmax calls:
// min_{1<=y<=xmax} cost(y)/y, where cost is linear between the breakpoints in xs (sorted,
// within [1, xmax]): on such a stretch cost(y)/y is monotone, so the minimum is at one of them.
func leastPerCall(cost func(int) float64, xs []int) float64 {
	best := math.Inf(1)
	for _, x := range xs {
		best = min(best, cost(x)/float64(x))
	}
	return best
}

// boundItem is what WorkBound precomputes for one item.
type boundItem struct {
	it      Item
	allowed []int
	loads   []float64 // load costs on the allowed workers, ascending (0 where preloaded)
	reps    int       // most replicas: the cap, the calls, the allowed workers
	concave bool      // every allowed worker's curve is concave
	// uniformLoad: every allowed worker pays the same load (no preloads): the least-work
	// split then counts it per batch.
	uniformLoad bool
	breaks      []int           // every allowed curve's breakpoints, sorted, without repeats
	xs          []int           // scratch: calls each allowed worker could serve
	work        map[int]float64 // least work by the most calls a replica may serve
	f           []float64       // scratch of leastWork's recurrence
}

// fastest is the item's least time to serve x calls on any allowed worker.
func (b *boundItem) fastest(x int) float64 {
	if b.it.OnWorker == nil {
		return b.it.Curve.At(x)
	}
	t := math.Inf(1)
	for _, w := range b.allowed {
		t = min(t, b.it.OnWorker[w].Curve.At(x))
	}
	return t
}

// leastWorkLimit bounds the recurrence of leastWork (calls x batch sizes); beyond it the least
// time per call stands in, a weaker bound that costs nothing.
const leastWorkLimit = 1 << 18

// leastWork is a lower bound on the item's total time over any split of its n calls into
// batches of at most xmax calls: a batch of x calls costs c(x) = T(x), plus the least load
// time L when loaded is set, with T the fastest allowed curve.
//
// With concave c (c(0) = 0) the least is floor(n / xmax) c(xmax) + c(n mod xmax): a concave
// cost is least for the most unequal batches. Otherwise c is concave between consecutive
// breakpoints (linear on each curve, and a minimum of linear pieces), so moving calls between
// two batches that both lie strictly between breakpoints never raises their cost in one of the
// two directions until one reaches a breakpoint: some least split has every batch but one at a
// breakpoint (1, a curve's breakpoint or xmax). leastWork finds it exactly, by a recurrence over
// the calls covered by such batches (an unbounded knapsack over at most a few dozen sizes),
// and adds the best free batch; where that recurrence would be long (leastWorkLimit) it takes n
// times the least cost per call instead.
func (b *boundItem) leastWork(xmax int, loaded bool) float64 {
	key := 2 * xmax
	if loaded {
		key++
	}
	if v, ok := b.work[key]; ok {
		return v
	}
	n := b.it.Calls
	load := 0.0
	if loaded {
		load = b.loads[0]
	}
	c := func(x int) float64 {
		if x <= 0 {
			return 0
		}
		return load + b.fastest(x)
	}
	var v float64
	sizes := []int{1}
	for _, x := range b.breaks {
		if x > 1 && x < xmax {
			sizes = append(sizes, x)
		}
	}
	if xmax > 1 {
		sizes = append(sizes, xmax)
	}
	switch {
	case b.concave:
		full := n / xmax
		v = float64(full)*c(xmax) + c(n-full*xmax)
	case (n+1)*len(sizes) > leastWorkLimit:
		v = float64(n) * leastPerCall(c, sizes)
	default:
		cost := make([]float64, len(sizes))
		for k, x := range sizes {
			cost[k] = c(x)
		}
		if cap(b.f) < n+1 {
			b.f = make([]float64, n+1)
		}
		f := b.f[:n+1]
		f[0] = 0
		for m := 1; m <= n; m++ {
			best := math.Inf(1)
			for k, x := range sizes {
				if x > m {
					break
				}
				best = min(best, f[m-x]+cost[k])
			}
			f[m] = best
		}
		v = f[n]
		for y := 1; y <= min(xmax, n); y++ {
			v = min(v, f[n-y]+c(y))
		}
	}
	b.work[key] = v
	return v
}

// WorkBound is a lower bound on the makespan of any plan, splits even or not. For a makespan
// C:
//   - every worker's offset must end by C;
//   - each model's calls must fit on at most its replication cap of distinct workers, a
//     replica on worker w serving at most the calls x_mw(C) that o_w + L_mw + T_mw(x) <= C
//     allows: at least r_m(C) replicas, the fewest whose largest x_mw(C) cover n_m;
//   - the total work must fit: Σ_w o_w + Σ_m work_m(C) <= W C, where work_m(C) is the r_m(C)
//     smallest load costs of the model (0 where preloaded; with no preloads, a load per batch
//     instead) plus its least serving time over any split of its calls into batches of at
//     most max_w x_mw(C) (leastWork: for concave T_m, floor(n_m / x) T_m(x) + T_m(n_m mod x),
//     a concave cost being least for the most unequal batches).
//
// On a mixed cluster T_m is the pointwise fastest of the allowed workers' curves, and a
// further test weighs each worker by how much slower than the fastest it is at least, at
// loading and at serving (bounder.fitsSlow). The smallest C that passes every test bounds the
// makespan; each test holds for any split of the calls, so the bound holds for a plan after
// its replicas trade calls too. It is a bisection over C of a fixed number of steps, so its
// value does not depend on the machine.
func WorkBound(p Problem) float64 {
	b, ok := newBounder(&p)
	if !ok {
		return 0
	}
	hi := max(1.0, b.maxOff)
	for !b.feasible(hi) {
		hi *= 2
		if hi > 1e12 {
			return 0
		}
	}
	lo := 0.0
	for i := 0; i < 100 && hi-lo > 1e-9*hi; i++ {
		mid := (lo + hi) / 2
		if b.feasible(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo
}

// bounder holds what WorkBound's test of a makespan needs.
type bounder struct {
	p       *Problem
	items   []boundItem
	offsets float64 // Σ_w o_w
	maxOff  float64
	// slowLoad[w] and slowServe[w] are how many times slower than the fastest allowed worker
	// worker w is at least, at loading and at serving, over the models it may hold; nil when
	// no worker is slower than the fastest (a cluster of one kind).
	slowLoad, slowServe []float64
}

func newBounder(p *Problem) (*bounder, bool) {
	W := p.Workers
	b := &bounder{p: p, items: make([]boundItem, len(p.Items))}
	for w := range W {
		b.offsets += p.offset(w)
		b.maxOff = max(b.maxOff, p.offset(w))
	}
	for i, it := range p.Items {
		bi := &b.items[i]
		bi.it, bi.concave, bi.work = it, true, map[int]float64{}
		for w := range W {
			if !it.allowed(w) {
				continue
			}
			bi.allowed = append(bi.allowed, w)
			bi.loads = append(bi.loads, it.loadOn(w))
			c := it.CurveOn(w)
			if !c.concave() {
				bi.concave = false
			}
			bi.breaks = append(bi.breaks, c.X...)
		}
		if len(bi.allowed) == 0 {
			return nil, false // Validate refuses such a problem
		}
		slices.Sort(bi.loads)
		slices.Sort(bi.breaks)
		bi.breaks = slices.Compact(bi.breaks)
		bi.reps = min(it.replicas(W), len(bi.allowed))
		bi.uniformLoad = bi.loads[0] == bi.loads[len(bi.loads)-1]
		bi.xs = make([]int, len(bi.allowed))
	}
	b.slowness()
	return b, true
}

// slowness sets each worker's least ratio of its load and serving times to the fastest
// allowed worker's, over the models it may hold: load times where the model is loaded nowhere
// yet, serving times at every breakpoint and at the model's calls (the ratio of two curves is
// monotone between breakpoints). +Inf: the worker does no such work. They stay nil when no
// worker is slower than the fastest.
func (b *bounder) slowness() {
	W := b.p.Workers
	sl, st := make([]float64, W), make([]float64, W)
	slower := false
	for w := range W {
		sl[w], st[w] = math.Inf(1), math.Inf(1)
		for i := range b.items {
			bi := &b.items[i]
			if !bi.it.allowed(w) {
				continue
			}
			if l := bi.loads[0]; l > 0 {
				sl[w] = min(sl[w], bi.it.loadOn(w)/l)
			}
			c := bi.it.CurveOn(w)
			for _, x := range append(bi.breaks, bi.it.Calls) {
				if f := bi.fastest(x); f > 0 {
					st[w] = min(st[w], c.At(x)/f)
				}
			}
		}
		if (sl[w] > 1+1e-9 && !math.IsInf(sl[w], 1)) || (st[w] > 1+1e-9 && !math.IsInf(st[w], 1)) {
			slower = true
		}
	}
	if slower {
		b.slowLoad, b.slowServe = sl, st
	}
}

// feasible reports whether makespan c passes WorkBound's tests.
func (b *bounder) feasible(c float64) bool {
	if c < b.maxOff {
		return false
	}
	total := b.offsets
	loads, serving := 0.0, 0.0 // in the fastest worker's time: least loads, least serving
	for i := range b.items {
		bi := &b.items[i]
		n := bi.it.Calls
		for k, w := range bi.allowed {
			bi.xs[k] = maxCalls(bi.it.CurveOn(w), c-b.p.offset(w)-bi.it.loadOn(w), n)
		}
		slices.SortFunc(bi.xs, func(x, y int) int { return y - x })
		r, covered := 0, 0
		for r < bi.reps && covered < n {
			covered += bi.xs[r]
			r++
		}
		if covered < n || bi.xs[0] == 0 {
			return false
		}
		if bi.uniformLoad {
			total += bi.leastWork(bi.xs[0], true)
		} else {
			for _, l := range bi.loads[:r] {
				total += l
			}
			total += bi.leastWork(bi.xs[0], false)
		}
		if b.slowLoad != nil {
			loads += float64(r) * bi.loads[0]
			serving += bi.leastWork(bi.xs[0], false)
		}
	}
	W := float64(b.p.Workers)
	if total > W*c*(1+1e-12)+1e-9 {
		return false
	}
	return b.slowLoad == nil || b.fitsSlow(c, loads, serving)
}

// fitsSlow reports whether loads and serving (in the fastest worker's time) can be shared
// among the workers by makespan c when worker w takes slowLoad[w] and slowServe[w] times as
// long: a covering problem with one knapsack per worker, feasible exactly when for every
// weight ρ >= 0, ρ loads + serving <= Σ_w (c - o_w) max(ρ / slowLoad[w], 1 / slowServe[w])
// (the support function of the set the workers can cover). The right side is convex and
// piecewise linear in ρ, so the weights to check are its breakpoints and the two ends.
func (b *bounder) fitsSlow(c, loads, serving float64) bool {
	room := func(rho float64, inf bool) float64 {
		sum := 0.0
		for w := range b.slowLoad {
			capw := c - b.p.offset(w)
			l, s := 1/b.slowLoad[w], 1/b.slowServe[w]
			if inf {
				sum += capw * l
			} else {
				sum += capw * max(rho*l, s)
			}
		}
		return sum
	}
	const tol = 1 + 1e-12
	if serving > room(0, false)*tol+1e-9 || loads > room(0, true)*tol+1e-9 {
		return false
	}
	for w := range b.slowLoad {
		if math.IsInf(b.slowLoad[w], 1) || math.IsInf(b.slowServe[w], 1) {
			continue
		}
		rho := b.slowLoad[w] / b.slowServe[w]
		if rho*loads+serving > room(rho, false)*tol+1e-9 {
			return false
		}
	}
	return true
}
