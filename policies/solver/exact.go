package solver

import (
	"cmp"
	"context"
	"math"
	"math/bits"
	"slices"
	"time"
)

// exactNodeLimit bounds the exact search: the number of (item, replica set) choices it may
// try before it gives the problem to the ILP. It is a count, not a time, so that whether a
// problem is solved by the search or by the ILP does not depend on the machine's speed.
var exactNodeLimit = 2_000_000

// exactMaxWorkers and exactMaxItems bound the problems the exact search takes on: a model's
// replica sets are the subsets of the workers (255 of 8), and an item's membership in the
// replica sets chosen so far is kept in one machine word.
const (
	exactMaxWorkers = 8
	exactMaxItems   = 64
)

// exactOption is one way to place an item: r replicas on the workers of mask, each costing
// cost[w] (load plus serving its ceil(n/r) calls), work in all.
type exactOption struct {
	mask uint32
	ws   []int
	cost []float64
	work float64
}

type exactCand struct {
	opt  int
	span float64
	work float64
}

// exactSearch is a depth-first branch and bound over the placement ILP's own model (the
// package comment): items in decreasing order of their least work, each given a replica count
// and a set of workers. A branch is cut when it cannot beat the incumbent: its makespan so far,
// the work still to place spread evenly over the workers, or the next item's cheapest replica
// on the earliest worker already reach it. Workers that are interchangeable (Problem.twins's
// test) and have been given the same replicas so far are one worker to the search: of such a
// group only a prefix may take the next item's replicas, which removes the symmetric copies of
// every placement without cutting any optimum.
type exactSearch struct {
	p         *Problem
	ctx       context.Context
	order     []int           // items in search order
	opts      [][]exactOption // per search position
	class     []int           // static interchangeability class of each worker
	restWork  []float64       // Σ of the least work of the items from position k on
	restFloor []float64       // the least single-replica cost of the items from position k on (max)
	t         []float64
	member    []uint64 // per worker: the search positions whose replica set holds it
	prev      [][]int  // per depth: the previous worker of the same group, or -1
	saved     [][]float64
	cands     [][]exactCand
	choice    []int
	best      float64
	bestPick  []int
	nodes     int
	limit     int
	aborted   bool
}

// solveExact finds the placement ILP's optimum by exact search when the problem is small
// enough for it to finish within exactNodeLimit choices; ok is false when it is not (the ILP
// then solves it).
func solveExact(ctx context.Context, p Problem) (plan *Plan, ok bool, err error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	start := time.Now()
	s, ok := newExactSearch(ctx, &p, exactNodeLimit)
	if !ok {
		return nil, false, nil
	}
	s.run()
	if s.aborted {
		return nil, false, ctx.Err()
	}
	if math.IsInf(s.best, 1) {
		return nil, false, nil
	}
	placed := make([][]bool, len(p.Items))
	reps := make([]int, len(p.Items))
	for k, m := range s.order {
		o := s.opts[k][s.bestPick[k]]
		placed[m] = make([]bool, p.Workers)
		for _, w := range o.ws {
			placed[m][w] = true
		}
		reps[m] = len(o.ws)
	}
	lb, err := LowerBound(p)
	if err != nil {
		return nil, false, err
	}
	if plan, err = p.planFrom(placed, reps, s.best, lb, Optimal, MethodExact, start); err != nil {
		return nil, false, err
	}
	return plan, true, nil
}

func newExactSearch(ctx context.Context, p *Problem, limit int) (*exactSearch, bool) {
	W, M := p.Workers, len(p.Items)
	if W > exactMaxWorkers || M > exactMaxItems || limit <= 0 {
		return nil, false
	}
	s := &exactSearch{p: p, ctx: ctx, limit: limit, best: math.Inf(1)}
	all := make([][]exactOption, M)
	least := make([]float64, M)
	floor := make([]float64, M)
	for m, it := range p.Items {
		R := it.replicas(W)
		least[m], floor[m] = math.Inf(1), math.Inf(1)
		for mask := uint32(1); mask < 1<<W; mask++ {
			r := bits.OnesCount32(mask)
			if r > R {
				continue
			}
			o := exactOption{mask: mask, cost: make([]float64, W)}
			fits := true
			for w := range W {
				if mask&(1<<w) == 0 {
					continue
				}
				if !it.allowed(w) {
					fits = false
					break
				}
				o.ws = append(o.ws, w)
				o.cost[w] = it.loadOn(w) + it.shareOn(r, w)
				o.work += o.cost[w]
				floor[m] = min(floor[m], o.cost[w])
			}
			if !fits {
				continue
			}
			least[m] = min(least[m], o.work)
			all[m] = append(all[m], o)
		}
		if len(all[m]) == 0 {
			return nil, false
		}
	}
	s.order = make([]int, M)
	for m := range s.order {
		s.order[m] = m
	}
	slices.SortStableFunc(s.order, func(a, b int) int { return cmp.Compare(least[b], least[a]) })
	s.opts = make([][]exactOption, M)
	s.restWork = make([]float64, M+1)
	s.restFloor = make([]float64, M+1)
	for k := M - 1; k >= 0; k-- {
		m := s.order[k]
		s.opts[k] = all[m]
		s.restWork[k] = s.restWork[k+1] + least[m]
		s.restFloor[k] = max(s.restFloor[k+1], floor[m])
	}
	s.class = make([]int, W)
	for w := range W {
		s.class[w] = w
		for v := range w {
			if s.class[v] == v && p.interchangeable(v, w) {
				s.class[w] = v
				break
			}
		}
	}
	s.t = make([]float64, W)
	for w := range W {
		s.t[w] = p.offset(w)
	}
	s.member = make([]uint64, W)
	s.prev = make([][]int, M)
	s.saved = make([][]float64, M)
	s.cands = make([][]exactCand, M)
	for k := range M {
		s.prev[k] = make([]int, W)
		s.saved[k] = make([]float64, W)
		s.cands[k] = make([]exactCand, 0, len(s.opts[k]))
	}
	s.choice = make([]int, M)
	s.bestPick = make([]int, M)
	return s, true
}

func (s *exactSearch) run() {
	span := 0.0
	for _, t := range s.t {
		span = max(span, t)
	}
	s.visit(0, span)
}

// cutoff is the value a branch must stay below to be worth exploring: the incumbent, less a
// relative tolerance of the order of lp_solve's own MIP gap.
func (s *exactSearch) cutoff() float64 { return s.best * (1 - 1e-9) }

// visit places the item at search position k on top of the partial placement s.t, whose
// makespan is span.
func (s *exactSearch) visit(k int, span float64) {
	if k == len(s.order) {
		s.best = span
		copy(s.bestPick, s.choice)
		return
	}
	W := float64(len(s.t))
	sum, earliest := 0.0, math.Inf(1)
	for _, t := range s.t {
		sum += t
		earliest = min(earliest, t)
	}
	if (sum+s.restWork[k])/W >= s.cutoff() || earliest+s.restFloor[k] >= s.cutoff() {
		return
	}
	// Workers that are interchangeable and hold the same replicas so far form a group; only
	// a prefix of a group may take this item's replicas.
	prev := s.prev[k]
	for w := range s.t {
		prev[w] = -1
		for v := w - 1; v >= 0; v-- {
			if s.class[v] == s.class[w] && s.member[v] == s.member[w] {
				prev[w] = v
				break
			}
		}
	}
	cands := s.cands[k][:0]
options:
	for i := range s.opts[k] {
		o := &s.opts[k][i]
		if s.nodes++; s.nodes > s.limit {
			s.aborted = true
			return
		}
		if s.nodes&0xffff == 0 && s.ctx.Err() != nil {
			s.aborted = true
			return
		}
		for _, w := range o.ws {
			if v := prev[w]; v >= 0 && o.mask&(1<<v) == 0 {
				continue options
			}
		}
		next := span
		for _, w := range o.ws {
			next = max(next, s.t[w]+o.cost[w])
		}
		if next >= s.cutoff() || (sum+o.work+s.restWork[k+1])/W >= s.cutoff() {
			continue
		}
		cands = append(cands, exactCand{opt: i, span: next, work: o.work})
	}
	// Most promising first: the lowest makespan, then the least work.
	slices.SortFunc(cands, func(a, b exactCand) int {
		if c := cmp.Compare(a.span, b.span); c != 0 {
			return c
		}
		if c := cmp.Compare(a.work, b.work); c != 0 {
			return c
		}
		return cmp.Compare(a.opt, b.opt)
	})
	s.cands[k] = cands
	saved := s.saved[k]
	copy(saved, s.t)
	for _, c := range cands {
		if c.span >= s.cutoff() {
			break // sorted by span: no later candidate can beat the incumbent either
		}
		o := &s.opts[k][c.opt]
		for _, w := range o.ws {
			s.t[w] += o.cost[w]
			s.member[w] |= 1 << k
		}
		s.choice[k] = c.opt
		s.visit(k+1, c.span)
		copy(s.t, saved)
		for _, w := range o.ws {
			s.member[w] &^= 1 << k
		}
		if s.aborted {
			return
		}
	}
}
