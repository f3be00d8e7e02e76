//go:build cgo && lpsolve

package solver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/draffensperger/golp"
)

// ILPAvailable says whether this build has SolveILP, the ILP solved by lp_solve (built with cgo
// and the lpsolve tag, as the Makefile does). Solve does not need it.
const ILPAvailable = true

// ilp indexes the columns of the placement ILP (see the package comment).
type ilp struct {
	p    *Problem
	cols int
	c    int       // makespan
	t    []int     // per worker
	v    [][]int   // per item, replica count r-1
	a    [][][]int // per item, r-1, worker
}

func newILP(p *Problem) *ilp {
	md := &ilp{p: p}
	next := func() int { md.cols++; return md.cols - 1 }
	md.c = next()
	for range p.Workers {
		md.t = append(md.t, next())
	}
	for _, it := range p.Items {
		R := it.replicas(p.Workers)
		vs := make([]int, R)
		as := make([][]int, R)
		for r := range R {
			vs[r] = next()
			as[r] = make([]int, p.Workers)
			for w := range p.Workers {
				as[r][w] = next()
			}
		}
		md.v = append(md.v, vs)
		md.a = append(md.a, as)
	}
	return md
}

// build writes the ILP into an LP; with integer false it is the LP relaxation.
func (md *ilp) build(integer bool) (*golp.LP, error) {
	p := md.p
	lp := golp.NewLP(0, md.cols)
	lp.SetVerboseLevel(golp.NEUTRAL)
	lp.SetAddRowMode(true)
	var err error
	add := func(entries []golp.Entry, ct golp.ConstraintType, rhs float64) {
		if err == nil {
			err = lp.AddConstraintSparse(entries, ct, rhs)
		}
	}
	identical := p.identicalWorkers()
	var twins []int
	if !identical && p.hasWorkerCosts() {
		twins = p.twins()
	}
	for mi, it := range p.Items {
		R := it.replicas(p.Workers)
		var one []golp.Entry
		best := math.Inf(1)
		for r := 1; r <= R; r++ {
			v := md.v[mi][r-1]
			one = append(one, golp.Entry{Col: v, Val: 1})
			// sum_w a[m,r,w] = r v[m,r]
			row := []golp.Entry{{Col: v, Val: -float64(r)}}
			for w := range p.Workers {
				row = append(row, golp.Entry{Col: md.a[mi][r-1][w], Val: 1})
			}
			add(row, golp.EQ, 0)
			for w := range p.Workers {
				if it.allowed(w) {
					best = min(best, p.offset(w)+it.loadOn(w)+it.shareOn(r, w))
				}
			}
		}
		add(one, golp.EQ, 1)
		for w := range p.Workers {
			var row []golp.Entry
			for r := 1; r <= R; r++ {
				row = append(row, golp.Entry{Col: md.a[mi][r-1][w], Val: 1})
			}
			limit := 1.0
			if !it.allowed(w) {
				limit = 0
			}
			add(row, golp.LE, limit)
		}
		add([]golp.Entry{{Col: md.c, Val: 1}}, golp.GE, best) // cut: the item's best replica
	}
	for w := range p.Workers {
		row := []golp.Entry{{Col: md.t[w], Val: 1}}
		for mi, it := range p.Items {
			for r := 1; r <= it.replicas(p.Workers); r++ {
				row = append(row, golp.Entry{Col: md.a[mi][r-1][w], Val: -(it.loadOn(w) + it.shareOn(r, w))})
			}
		}
		add(row, golp.EQ, p.offset(w))
		add([]golp.Entry{{Col: md.t[w], Val: 1}, {Col: md.c, Val: -1}}, golp.LE, 0)
		if identical && w > 0 {
			add([]golp.Entry{{Col: md.t[w-1], Val: 1}, {Col: md.t[w], Val: -1}}, golp.GE, 0)
		} else if twins != nil && twins[w] >= 0 {
			add([]golp.Entry{{Col: md.t[twins[w]], Val: 1}, {Col: md.t[w], Val: -1}}, golp.GE, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	lp.SetAddRowMode(false)
	obj := make([]float64, md.cols)
	obj[md.c] = 1
	lp.SetObjFn(obj)
	for mi := range p.Items {
		for r := range md.v[mi] {
			lp.SetBounds(md.v[mi][r], 0, 1)
			if integer {
				lp.SetBinary(md.v[mi][r], true)
			}
			for w := range p.Workers {
				lp.SetBounds(md.a[mi][r][w], 0, 1)
				if integer {
					lp.SetBinary(md.a[mi][r][w], true)
				}
			}
		}
	}
	return lp, nil
}

// SolveILP solves the placement ILP with lp_solve within the problem's time limit (whole
// seconds, rounded up), then lets replicas of a model trade calls where that lowers the
// makespan (Plan.ILPMakespan is the ILP's own optimum, Plan.Makespan the final plan's). Solve
// does not use it: it is the reference the tests and benchmarks compare the searches with,
// and its answer under a time limit depends on the machine's speed.
func SolveILP(ctx context.Context, p Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	lb, err := LowerBound(p)
	if err != nil {
		return nil, err
	}
	md := newILP(&p)
	lp, err := md.build(true)
	if err != nil {
		return nil, err
	}
	lp.SetTimeout(p.timeLimitSeconds())
	st := lp.Solve()
	var status Status
	switch st {
	case golp.OPTIMAL:
		status = Optimal
	case golp.SUBOPTIMAL:
		status = TimeLimit
	default:
		return nil, fmt.Errorf("%w: lp_solve says %s", ErrNoSolution, st)
	}
	obj := lp.Objective()
	if math.IsNaN(obj) || obj >= 1e29 {
		return nil, fmt.Errorf("%w: objective %g", ErrNoSolution, obj)
	}
	vars := lp.Variables()
	placed := make([][]bool, len(p.Items))
	reps := make([]int, len(p.Items))
	for mi := range p.Items {
		placed[mi] = make([]bool, p.Workers)
		for r := range md.v[mi] {
			if vars[md.v[mi][r]] > 0.5 {
				reps[mi] = r + 1
				for w := range p.Workers {
					placed[mi][w] = vars[md.a[mi][r][w]] > 0.5
				}
			}
		}
	}
	return p.planFrom(placed, reps, vars[md.c], lb, status, MethodLPSolve, start)
}
