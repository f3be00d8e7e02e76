package solver

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// filler builds plans of a given makespan by filling workers (fill), the core of fillSearch.
type filler struct {
	p     *Problem
	reps  []int // per item: the most replicas (its cap, its calls, the workers it fits)
	steps int   // curve evaluations and placements so far: the search's budget counts them
	// byRoom: a piece that does not fit whole goes to the worker with the most time left
	// rather than to the one that takes the most calls (they differ on unlike workers).
	byRoom bool
	// scratch
	room   []float64 // per worker: time left before the target makespan
	counts [][]int
}

func newFiller(p *Problem) *filler {
	f := &filler{p: p, reps: make([]int, len(p.Items)), room: make([]float64, p.Workers)}
	for m, it := range p.Items {
		f.reps[m] = min(it.replicas(p.Workers), p.allowedCount(it))
	}
	f.counts = make([][]int, len(p.Items))
	for m := range f.counts {
		f.counts[m] = make([]int, p.Workers)
	}
	return f
}

// fill places the items, in order, so that every worker finishes by c: each item's calls go
// in pieces to workers that do not hold it yet, the rest of its calls, where they fit whole,
// to the worker they leave least room on (best fit), else as many calls as fit to the worker
// that takes the most (or, with byRoom, to the one with the most time left). Deciding whether
// the workers can hold the items by c is bin packing with item fragmentation where every
// fragment costs a header, here a load (Menakerman and Rom, "Bin Packing with Item
// Fragmentation", WADS 2001; Shachnai, Tamir and Yehezkely, "Approximation schemes for packing
// with item fragmentation", Theory Comput. Syst. 43, 2008); this greedy for it is ours. It
// returns the counts (the filler's scratch: copy them to keep them), or nil when some item
// does not fit, or would need more replicas than its cap.
func (f *filler) fill(c float64, order []int) [][]int {
	p := f.p
	for w := range f.room {
		f.room[w] = c - p.offset(w)
	}
	for m := range f.counts {
		clear(f.counts[m])
	}
	for _, m := range order {
		it := p.Items[m]
		rem, used := it.Calls, 0
		for rem > 0 {
			if used == f.reps[m] {
				return nil
			}
			whole, wholeLeft := -1, math.Inf(1)
			part, partX, partLeft := -1, 0, 0.0
			for w := range p.Workers {
				if f.counts[m][w] > 0 || !it.allowed(w) {
					continue
				}
				budget := f.room[w] - it.loadOn(w)
				f.steps++
				curve := it.CurveOn(w)
				if t := curve.At(rem); t <= budget {
					if left := budget - t; left < wholeLeft {
						whole, wholeLeft = w, left
					}
					continue
				}
				if whole >= 0 {
					continue
				}
				x := maxCalls(curve, budget, rem)
				f.steps += 8
				if x == 0 {
					continue
				}
				left := budget - curve.At(x)
				better := x > partX || (x == partX && left < partLeft)
				if f.byRoom && part >= 0 {
					better = f.room[w] > f.room[part] || (f.room[w] == f.room[part] && x > partX)
				}
				if part < 0 || better {
					part, partX, partLeft = w, x, left
				}
			}
			w, x := whole, rem
			if w < 0 {
				w, x = part, partX
			}
			if w < 0 {
				return nil
			}
			f.counts[m][w] = x
			f.room[w] -= it.loadOn(w) + it.CurveOn(w).At(x)
			rem -= x
			used++
		}
	}
	return f.counts
}

// minFill is the least makespan, between lo and hi, at which fill places every item in
// order, to a relative precision of tol (a bisection: fill succeeds at any makespan a little
// above one where it does, as a rule, though not always), with its counts; nil when it fails
// even at hi.
func (f *filler) minFill(lo, hi, tol float64, order []int) (float64, [][]int) {
	var best [][]int
	if counts := f.fill(hi, order); counts != nil {
		best = cloneCounts(counts)
	} else {
		return hi, nil
	}
	for hi-lo > tol*hi {
		mid := (lo + hi) / 2
		if counts := f.fill(mid, order); counts != nil {
			hi, best = mid, cloneCounts(counts)
		} else {
			lo = mid
		}
	}
	return hi, best
}

// fillOrders are the orders in which fillSearch places the items: by decreasing least work
// (heavy models take whole workers first, light ones fill what is left), and the items that
// may not be split first (by decreasing size), then the others by decreasing least work.
func fillOrders(p *Problem, reps []int) [][]int {
	M := len(p.Items)
	least := make([]float64, M)
	for m, it := range p.Items {
		least[m] = math.Inf(1)
		for w := range p.Workers {
			if it.allowed(w) {
				least[m] = min(least[m], it.loadOn(w)+it.CurveOn(w).At(it.Calls))
			}
		}
	}
	byWork := make([]int, M)
	for m := range byWork {
		byWork[m] = m
	}
	slices.SortStableFunc(byWork, func(a, b int) int { return cmp.Compare(least[b], least[a]) })
	pinnedFirst := slices.Clone(byWork)
	slices.SortStableFunc(pinnedFirst, func(a, b int) int {
		return cmp.Compare(min(reps[a], 2), min(reps[b], 2))
	})
	orders := [][]int{byWork}
	if !slices.Equal(pinnedFirst, byWork) {
		orders = append(orders, pinnedFirst)
	}
	return orders
}

// fillStepLimit bounds fillSearch: the curve evaluations and placements it may spend (a few
// hundred milliseconds on the slowest machines measured). It is a count, not a time, so that
// the plan does not depend on the machine's speed.
var fillStepLimit = 10_000_000

// fillTargetGap is the gap to the lower bound at which fillSearch stops looking.
const fillTargetGap = 0.01

// fillTolerance is the relative precision of fillSearch's bisection over the makespan.
const fillTolerance = 1e-5

// fillSearch plans a problem the exact search does not take on (more than exactMaxWorkers
// workers, or more choices than exactNodeLimit): for a target makespan C it fills the
// workers with the items' calls, each item split into as few pieces as fit (fill), and
// bisects for the least C at which that succeeds; it does so for a few orders of the items,
// then, while the plan is farther than fillTargetGap from the lower bound and steps are left,
// swaps pairs of items in the best order (a first-improvement local search). Replicas of a
// model then trade calls (rebalance). The problem is solved with its workers in a canonical
// order (canonical), so that renumbering interchangeable or unlike workers renumbers the plan
// and changes nothing else.
func fillSearch(ctx context.Context, p Problem) (*Plan, error) {
	start := time.Now()
	perm, cp := canonical(p)
	lb := WorkBound(cp)
	f := newFiller(&cp)
	var best [][]int
	bestSpan := math.Inf(1)
	try := func(order []int, byRoom bool) (float64, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		f.byRoom = byRoom
		hi := max(lb, 1e-9) * (1 + fillTargetGap/2)
		for k := 0; f.fill(hi, order) == nil; k++ {
			if k == 200 {
				return 0, fmt.Errorf("solver: the fill search placed no plan up to a makespan of %g s", hi)
			}
			hi = lb + 2*(hi-lb)
		}
		_, counts := f.minFill(lb, hi, fillTolerance, order)
		cp.rebalance(counts)
		span := maxOf(cp.Evaluate(counts))
		if span < bestSpan*(1-1e-12) {
			best, bestSpan = counts, span
		}
		return span, nil
	}
	orders := fillOrders(&cp, f.reps)
	rules := []bool{false}
	if !cp.identicalWorkers() {
		rules = append(rules, true)
	}
	order, byRoom, orderSpan := orders[0], false, math.Inf(1)
	for _, rule := range rules {
		for _, o := range orders {
			span, err := try(o, rule)
			if err != nil {
				return nil, err
			}
			if span < orderSpan {
				order, byRoom, orderSpan = o, rule, span
			}
		}
	}
	// Swap pairs of items in the best order while that helps and steps are left.
	for improved := true; improved && gap(bestSpan, lb) > fillTargetGap; {
		improved = false
		for i := 0; i < len(order) && !improved; i++ {
			for j := i + 1; j < len(order) && !improved; j++ {
				if f.steps > fillStepLimit {
					break
				}
				o := slices.Clone(order)
				o[i], o[j] = o[j], o[i]
				span, err := try(o, byRoom)
				if err != nil {
					return nil, err
				}
				if span < orderSpan*(1-1e-12) {
					order, orderSpan, improved = o, span, true
				}
			}
		}
	}
	if gap(bestSpan, lb) > fillTargetGap {
		// Still far from the bound: new replicas for the models of the latest worker, and
		// moving its replicas elsewhere, may do better; on a small problem, the heuristic's
		// plan too.
		f.polish(best)
		bestSpan = maxOf(cp.Evaluate(best))
		if cp.Workers*len(cp.Items) <= fillSmall {
			if h := SolveHeuristic(cp); h.Makespan < bestSpan*(1-1e-12) {
				best, bestSpan = h.Counts, h.Makespan
			}
		}
	}
	counts := make([][]int, len(p.Items))
	for m := range counts {
		counts[m] = make([]int, p.Workers)
		for k, w := range perm {
			counts[m][w] = best[m][k]
		}
	}
	plan := &Plan{Counts: counts, LowerBound: lb, Method: MethodFill, Status: NearOptimal}
	plan.WorkerTime = p.Evaluate(counts)
	plan.Makespan = maxOf(plan.WorkerTime)
	plan.Gap = gap(plan.Makespan, lb)
	if plan.Gap > fillTargetGap {
		plan.Status = BestFound
	}
	plan.SolveTime = time.Since(start)
	return plan, nil
}

// canonical returns the problem with its workers sorted by what they are (offset, then for
// each item: whether it fits, its load time there, its curve there), stably, and perm, the
// original number of each canonical worker.
func canonical(p Problem) (perm []int, cp Problem) {
	perm = make([]int, p.Workers)
	for w := range perm {
		perm[w] = w
	}
	slices.SortStableFunc(perm, func(a, b int) int { return p.compareWorkers(a, b) })
	cp = Problem{Workers: p.Workers, TimeLimit: p.TimeLimit, Items: make([]Item, len(p.Items))}
	if p.Offset != nil {
		cp.Offset = make([]float64, p.Workers)
		for k, w := range perm {
			cp.Offset[k] = p.Offset[w]
		}
	}
	for m, it := range p.Items {
		c := it
		if it.Preloaded != nil {
			c.Preloaded = make([]bool, p.Workers)
			for k, w := range perm {
				c.Preloaded[k] = it.Preloaded[w]
			}
		}
		if it.Fits != nil {
			c.Fits = make([]bool, p.Workers)
			for k, w := range perm {
				c.Fits[k] = it.Fits[w]
			}
		}
		if it.OnWorker != nil {
			c.OnWorker = make([]Cost, p.Workers)
			for k, w := range perm {
				c.OnWorker[k] = it.OnWorker[w]
			}
		}
		cp.Items[m] = c
	}
	return perm, cp
}

// compareWorkers orders workers by what they are; 0 when they are interchangeable.
func (p *Problem) compareWorkers(a, b int) int {
	if c := cmp.Compare(p.offset(a), p.offset(b)); c != 0 {
		return c
	}
	for _, it := range p.Items {
		if fa, fb := it.allowed(a), it.allowed(b); fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(it.loadOn(a), it.loadOn(b)); c != 0 {
			return c
		}
		ca, cb := it.CurveOn(a), it.CurveOn(b)
		if c := slices.Compare(ca.X, cb.X); c != 0 {
			return c
		}
		if c := slices.Compare(ca.T, cb.T); c != 0 {
			return c
		}
	}
	return 0
}

// fillSmall is the size (workers x items) up to which fillSearch also tries the heuristic,
// whose improving moves take time that grows with the cube of the workers.
const fillSmall = 64

// polish lowers the makespan by moves on the worker that finishes last, while steps are
// left: a model there gets one more replica (the move the heuristic grows its plans by), or
// its replica there moves whole to a worker that does not hold it; either way the model's
// replicas then trade calls (rebalance). It takes the best move each round and stops when none
// helps.
func (f *filler) polish(counts [][]int) {
	p := f.p
	for f.steps <= fillStepLimit {
		t := p.Evaluate(counts)
		crit, span := argmax(t), maxOf(t)
		var next [][]int
		for m, it := range p.Items {
			x := counts[m][crit]
			if x == 0 {
				continue
			}
			grow := x >= 2 && replicaCount(counts[m]) < f.reps[m]
			for w := range p.Workers {
				if counts[m][w] > 0 || !it.allowed(w) {
					continue
				}
				for _, move := range []int{1, x} { // a new replica, or the whole one
					if move == 1 && !grow {
						continue
					}
					trial := cloneCounts(counts)
					trial[m][crit] -= move
					trial[m][w] = move
					p.rebalance(trial)
					f.steps += 50 * len(p.Items) * p.Workers
					if s := maxOf(p.Evaluate(trial)); s < span*(1-1e-12) {
						next, span = trial, s
					}
				}
			}
		}
		if next == nil {
			return
		}
		copy2(counts, next)
	}
}

func replicaCount(xs []int) int {
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return n
}
