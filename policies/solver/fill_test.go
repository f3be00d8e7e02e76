package solver_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies/solver"
)

// The fill search against the exact search on problems both take on (2 to 4 workers): its
// plans are valid, never far above the exact search's (even splits, then trading calls) and
// mostly at or below them, since the fill search splits calls unevenly from the start; the
// bound stays below both. On identical workers it is within 1% of the exact search's plan on
// every instance; on mixed clusters, whose few unlike workers the greedy filling packs less
// well, within 10%. (Solve gives such small problems to the exact search first.)
func TestFillSearchAgainstExactSearch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		problem func(r *rand.Rand, items, workers, maxCalls int) solver.Problem
		worst   float64
	}{
		{"identical workers", randomProblem, 0.01},
		{"mixed cluster", mixedProblem, 0.10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(21, 22))
			atOrBelow, n, worst := 0, 0, 0.0
			for i := 0; i < 120; i++ {
				p := tc.problem(r, 1+r.IntN(6), 2+r.IntN(3), 400)
				ex, ok, err := solver.ExactSearch(context.Background(), p)
				require.NoError(t, err)
				if !ok {
					continue
				}
				fill, err := solver.FillSearch(context.Background(), p)
				require.NoError(t, err)
				checkPlan(t, p, fill)
				assert.Equal(t, solver.MethodFill, fill.Method)
				assert.Zero(t, fill.ILPMakespan, "the fill search solves no ILP")
				require.LessOrEqual(t, fill.LowerBound, ex.Makespan*(1+1e-9), "instance %d", i)
				require.LessOrEqual(t, fill.LowerBound, fill.Makespan*(1+1e-9), "instance %d", i)
				require.InDelta(t, ex.LowerBound, fill.LowerBound, 0, "one bound, whichever search")
				n++
				if fill.Makespan <= ex.Makespan*(1+1e-9) {
					atOrBelow++
				}
				worst = max(worst, fill.Makespan/ex.Makespan-1)
				require.LessOrEqual(t, fill.Makespan, ex.Makespan*(1+tc.worst), "instance %d: %v against %v", i, fill.Counts, ex.Counts)
			}
			t.Logf("%d instances: the fill search at or below the exact search on %d, at worst %+.2f%%", n, atOrBelow, 100*worst)
			assert.GreaterOrEqual(t, float64(atOrBelow), 0.9*float64(n))
		})
	}
}

// allSplits returns the least makespan over every plan of a tiny problem: every split of
// every item's calls over the workers it fits, unequal splits included, within its replica
// cap.
func allSplits(p solver.Problem) float64 {
	best := math.Inf(1)
	counts := make([][]int, len(p.Items))
	for m := range counts {
		counts[m] = make([]int, p.Workers)
	}
	var rec func(m, w, left int)
	rec = func(m, w, left int) {
		if m == len(p.Items) {
			best = min(best, maxOf(p.Evaluate(counts)))
			return
		}
		it := p.Items[m]
		if w == p.Workers-1 || left == 0 {
			counts[m][w] = left
			if left == 0 || it.Fits == nil || it.Fits[w] {
				if replicas(counts[m]) <= cap(it, p.Workers) {
					rec(m+1, 0, next(p, m+1))
				}
			}
			counts[m][w] = 0
			return
		}
		for x := 0; x <= left; x++ {
			if x > 0 && it.Fits != nil && !it.Fits[w] {
				break
			}
			counts[m][w] = x
			rec(m, w+1, left-x)
		}
		counts[m][w] = 0
	}
	rec(0, 0, next(p, 0))
	return best
}

func next(p solver.Problem, m int) int {
	if m < len(p.Items) {
		return p.Items[m].Calls
	}
	return 0
}

// tinyProblem is a problem small enough to enumerate every split: 2 or 3 workers, 1 to 3
// items of up to 6 calls, curves that need not be concave (a long call sampled early), and at
// random offsets, preloads, memory limits and per-worker costs.
func tinyProblem(r *rand.Rand) solver.Problem {
	W := 2 + r.IntN(2)
	p := solver.Problem{Workers: W}
	if r.IntN(2) == 0 {
		p.Offset = make([]float64, W)
		for w := range p.Offset {
			p.Offset[w] = 10 * r.Float64()
		}
	}
	mixed := r.IntN(3) == 0
	for i := range 1 + r.IntN(3) {
		n := 1 + r.IntN(6)
		c := solver.Curve{}
		t := 0.0
		for x := 1; x <= n; x++ {
			t += 1 + 10*r.Float64()*r.Float64()
			c.X, c.T = append(c.X, x), append(c.T, t)
		}
		it := solver.Item{Name: string(rune('A' + i)), Calls: n, Load: 3 * r.Float64(), Curve: c, MaxReplicas: r.IntN(W + 1)}
		if r.IntN(3) == 0 {
			it.Preloaded = make([]bool, W)
			it.Preloaded[r.IntN(W)] = true
		}
		if r.IntN(4) == 0 {
			it.Fits = make([]bool, W)
			for w := range it.Fits {
				it.Fits[w] = w == 0 || r.IntN(2) == 0
			}
		}
		if mixed {
			it.OnWorker = make([]solver.Cost, W)
			for w := range it.OnWorker {
				f := 1 + float64(w%2)*r.Float64()
				it.OnWorker[w] = solver.Cost{Load: it.Load * f, Curve: scaled(c, f)}
			}
		}
		p.Items = append(p.Items, it)
	}
	return p
}

// WorkBound is never above the makespan of any plan: checked against every split of every
// item's calls on tiny problems (with offsets, preloads, memory limits, per-worker costs and
// curves that are not concave), and against the plans of every search on larger ones.
func TestBoundNeverAboveAPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for i := 0; i < 300; i++ {
		p := tinyProblem(r)
		require.NoError(t, p.Validate())
		lb, best := solver.WorkBound(p), allSplits(p)
		require.LessOrEqual(t, lb, best*(1+1e-9), "instance %d: bound above the best of every split", i)
	}
	randomInstances(t, 41, 40, 300, 6, 5, func(t *testing.T, i int, p solver.Problem) {
		lb := solver.WorkBound(p)
		plans := []*solver.Plan{solver.SolveHeuristic(p)}
		fill, err := solver.FillSearch(context.Background(), p)
		require.NoError(t, err)
		plans = append(plans, fill)
		if ex, ok, err := solver.ExactSearch(context.Background(), p); ok && err == nil {
			plans = append(plans, ex)
		}
		if solver.ILPAvailable {
			ilp, err := solver.SolveILP(context.Background(), p)
			require.NoError(t, err)
			plans = append(plans, ilp)
		}
		for _, plan := range plans {
			require.LessOrEqual(t, lb, plan.Makespan*(1+1e-9), "instance %d: %s", i, plan.Method)
		}
	})
}

// A cluster of 32 workers: 8 slow and 24 fast, some models preloaded on some workers, some
// workers busy for a while (a later stage).
func clusterProblem(r *rand.Rand) solver.Problem {
	p := randomProblem(r, 8+r.IntN(5), 32, 4000)
	p.Offset = make([]float64, p.Workers)
	for w := range p.Offset {
		p.Offset[w] = float64(w%3) * 20
	}
	for i := range p.Items {
		it := &p.Items[i]
		it.MaxReplicas = 0
		it.OnWorker = make([]solver.Cost, p.Workers)
		it.Preloaded = make([]bool, p.Workers)
		for w := range p.Workers {
			f := 1.0
			if w%4 == 0 {
				f = 2
			}
			it.OnWorker[w] = solver.Cost{Load: it.Load * f, Curve: scaled(it.Curve, f)}
			it.Preloaded[w] = i == w%5
		}
	}
	return p
}

// The fill search gives the same answer every time (it counts steps, not time), and Solve
// does too, reused from its memo or not.
func TestFillSearchDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for range 3 {
		p := clusterProblem(r)
		a, err := solver.FillSearch(context.Background(), p)
		require.NoError(t, err)
		b, err := solver.FillSearch(context.Background(), p)
		require.NoError(t, err)
		assert.Equal(t, a.Counts, b.Counts)
		assert.Equal(t, a.WorkerTime, b.WorkerTime)
		assert.Equal(t, a.LowerBound, b.LowerBound)
		assert.Equal(t, a.Status, b.Status)
		solver.ResetMemo()
		c, err := solver.Solve(context.Background(), p)
		require.NoError(t, err)
		assert.Equal(t, a.Counts, c.Counts, "Solve gives such a problem to the fill search")
		checkPlan(t, p, c)
	}
}

// permuted returns p with its workers renumbered: worker w of p is worker perm[w] of the
// result.
func permuted(p solver.Problem, perm []int) solver.Problem {
	q := p
	if p.Offset != nil {
		q.Offset = make([]float64, p.Workers)
		for w, v := range perm {
			q.Offset[v] = p.Offset[w]
		}
	}
	q.Items = nil
	for _, it := range p.Items {
		c := it
		if it.Preloaded != nil {
			c.Preloaded = make([]bool, p.Workers)
			for w, v := range perm {
				c.Preloaded[v] = it.Preloaded[w]
			}
		}
		if it.Fits != nil {
			c.Fits = make([]bool, p.Workers)
			for w, v := range perm {
				c.Fits[v] = it.Fits[w]
			}
		}
		if it.OnWorker != nil {
			c.OnWorker = make([]solver.Cost, p.Workers)
			for w, v := range perm {
				c.OnWorker[v] = it.OnWorker[w]
			}
		}
		q.Items = append(q.Items, c)
	}
	return q
}

// Renumbering the workers (identical ones, and groups of unlike ones with their preloads and
// offsets) renumbers the fill search's plan and changes nothing else: the same makespan, the
// same bound.
func TestFillSearchSymmetry(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for i := range 4 {
		p := clusterProblem(r)
		if i == 0 { // identical workers
			p = clusterProblem(r)
			for m := range p.Items {
				p.Items[m].Preloaded, p.Items[m].OnWorker = nil, nil
			}
			p.Offset = nil
		}
		perm := r.Perm(p.Workers)
		q := permuted(p, perm)
		a, err := solver.FillSearch(context.Background(), p)
		require.NoError(t, err)
		b, err := solver.FillSearch(context.Background(), q)
		require.NoError(t, err)
		assert.Equal(t, a.Makespan, b.Makespan, "instance %d", i)
		assert.Equal(t, a.LowerBound, b.LowerBound, "instance %d", i)
		// Each worker keeps what it serves, up to swapping interchangeable workers.
		assert.Equal(t, workerLoads(p, a.Counts), workerLoads(q, b.Counts), "instance %d", i)
	}
}

// workerLoads describes a plan by what each worker is (its offset, and per item its fit,
// preload and costs) and what it serves, sorted: two plans that differ only by which of
// interchangeable workers serves what describe alike.
func workerLoads(p solver.Problem, counts [][]int) []string {
	var out []string
	for w := range p.Workers {
		s := "offset 0:"
		if p.Offset != nil {
			s = fmt.Sprintf("offset %v:", p.Offset[w])
		}
		for m, it := range p.Items {
			pre := it.Preloaded != nil && it.Preloaded[w]
			s += fmt.Sprintf(" [%v %v %v %d]", pre, it.LoadOn(w), it.CurveOn(w).T, counts[m][w])
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Solve keeps what it solved: an identical problem gets an identical plan, marked reused,
// that the caller may change without changing what Solve keeps; a problem that differs in
// anything is solved anew; concurrent calls for one problem get one plan; the memo holds no
// more than its capacity.
func TestSolveMemo(t *testing.T) {
	solver.ResetMemo()
	t.Cleanup(solver.ResetMemo)
	r := rand.New(rand.NewPCG(71, 72))
	p := clusterProblem(r)
	first, err := solver.Solve(context.Background(), p)
	require.NoError(t, err)
	assert.False(t, first.Reused)
	second, err := solver.Solve(context.Background(), p)
	require.NoError(t, err)
	assert.True(t, second.Reused)
	assert.Equal(t, first.Counts, second.Counts)
	assert.Equal(t, first.WorkerTime, second.WorkerTime)
	assert.Equal(t, first.Makespan, second.Makespan)
	assert.Equal(t, first.LowerBound, second.LowerBound)
	assert.Equal(t, first.Gap, second.Gap)
	assert.Equal(t, first.Status, second.Status)
	assert.Equal(t, first.Method, second.Method)

	// The copy is the caller's.
	second.Counts[0][0] += 99
	second.WorkerTime[0] = -1
	third, err := solver.Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, first.Counts, third.Counts)
	assert.Equal(t, first.WorkerTime, third.WorkerTime)

	// Any difference is a different problem: a curve's time, a preload, the time limit.
	q := permuted(p, r.Perm(p.Workers)) // a deep copy, renumbered
	q.Items[0].OnWorker[0].Curve.T = append([]float64(nil), q.Items[0].OnWorker[0].Curve.T...)
	q.Items[0].OnWorker[0].Curve.T[0] = math.Nextafter(q.Items[0].OnWorker[0].Curve.T[0], math.Inf(1))
	for _, other := range []solver.Problem{q, withTimeLimit(p, 7e9)} {
		plan, err := solver.Solve(context.Background(), other)
		require.NoError(t, err)
		assert.False(t, plan.Reused)
	}

	// Concurrent calls for a new problem.
	z := clusterProblem(r)
	var wg sync.WaitGroup
	got := make([]*solver.Plan, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = solver.Solve(context.Background(), z)
		}()
	}
	wg.Wait()
	fresh := 0
	for _, plan := range got {
		require.NotNil(t, plan)
		assert.Equal(t, got[0].Counts, plan.Counts)
		if !plan.Reused {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh, "one call solves, the others wait for it")

	// Bounded.
	defer solver.SetMemoCapacity(3)()
	for i := range 5 {
		_, err := solver.Solve(context.Background(), withTimeLimit(twoItems(), 1e9+float64(i)))
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, solver.MemoLen(), 3)
}

// withTimeLimit returns p with another time limit, in nanoseconds.
func withTimeLimit(p solver.Problem, ns float64) solver.Problem {
	p.TimeLimit = time.Duration(ns)
	return p
}

// twoItems is a small problem for the memo's capacity.
func twoItems() solver.Problem {
	return solver.Problem{Workers: 3, Items: []solver.Item{
		{Name: "a", Calls: 30, Load: 5, Curve: curve(10, 2, 30)},
		{Name: "b", Calls: 20, Load: 5, Curve: curve(20, 1, 20)},
	}}
}
