package solver_test

import (
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies/solver"
)

// curve builds a batching-shaped time curve: a long-call floor that grows slowly with x plus
// throughput-bound work, sampled at powers of two up to n.
func curve(floor, perCall float64, n int) solver.Curve {
	var c solver.Curve
	for x := 1; ; x *= 2 {
		if x > n {
			x = n
		}
		c.X = append(c.X, x)
		c.T = append(c.T, floor*(1+0.1*math.Log2(float64(x)))+perCall*math.Pow(float64(x), 0.9))
		if x == n {
			break
		}
	}
	return c
}

func randomProblem(r *rand.Rand, items, workers, maxCalls int) solver.Problem {
	p := solver.Problem{Workers: workers, TimeLimit: 5 * time.Second}
	for i := 0; i < items; i++ {
		n := 1 + r.IntN(maxCalls)
		p.Items = append(p.Items, solver.Item{
			Name: string(rune('A' + i)), Calls: n, Load: 5 + 25*r.Float64(),
			Curve:       curve(10+200*r.Float64(), 0.5+20*r.Float64(), n),
			MaxReplicas: 1 + r.IntN(workers),
		})
	}
	return p
}

// bruteForce enumerates every replica count and every set of workers for every item under
// the ILP's model (even splits: a replica of an item with r replicas costs its load plus
// T(ceil(n/r))) and returns the best makespan.
func bruteForce(p solver.Problem) float64 {
	best := math.Inf(1)
	t := make([]float64, p.Workers)
	var rec func(m int)
	rec = func(m int) {
		if m == len(p.Items) {
			best = min(best, maxOf(t))
			return
		}
		it := p.Items[m]
		R := min(cap(it, p.Workers), it.Calls, p.Workers)
		for set := 1; set < 1<<p.Workers; set++ {
			r := bits.OnesCount(uint(set))
			if r > R {
				continue
			}
			share := it.Curve.At((it.Calls + r - 1) / r)
			for w := 0; w < p.Workers; w++ {
				if set&(1<<w) != 0 {
					t[w] += it.Load + share
				}
			}
			rec(m + 1)
			for w := 0; w < p.Workers; w++ {
				if set&(1<<w) != 0 {
					t[w] -= it.Load + share
				}
			}
		}
	}
	rec(0)
	return best
}

func replicas(c []int) int {
	n := 0
	for _, x := range c {
		if x > 0 {
			n++
		}
	}
	return n
}

func cap(it solver.Item, workers int) int {
	if it.MaxReplicas > 0 {
		return it.MaxReplicas
	}
	return workers
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// requireILP skips a test that needs lp_solve in a build without it (plain go test; make
// test builds with it).
func requireILP(t *testing.T) {
	t.Helper()
	if !solver.ILPAvailable {
		t.Skip("built without lp_solve: run through make (go test -tags lpsolve with the Makefile's CGO flags)")
	}
}

func TestILPMatchesBruteForce(t *testing.T) {
	requireILP(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 25; i++ {
		p := randomProblem(r, 1+r.IntN(5), 2+r.IntN(3), 40)
		plan, err := solver.SolveILP(context.Background(), p)
		require.NoError(t, err)
		require.Equal(t, solver.Optimal, plan.Status)
		bf := bruteForce(p)
		assert.InDelta(t, bf, plan.ILPMakespan, 1e-6*bf, "instance %d", i)
		assert.LessOrEqual(t, plan.LowerBound, plan.ILPMakespan+1e-6)
		assert.LessOrEqual(t, plan.Makespan, plan.ILPMakespan+1e-6, "improving moves never make it worse")
		checkPlan(t, p, plan)
	}
}

func checkPlan(t *testing.T, p solver.Problem, plan *solver.Plan) {
	t.Helper()
	for m, it := range p.Items {
		sum := 0
		for w, x := range plan.Counts[m] {
			require.GreaterOrEqual(t, x, 0)
			if x > 0 && it.Fits != nil {
				require.True(t, it.Fits[w], "item %s placed where it does not fit", it.Name)
			}
			sum += x
		}
		require.Equal(t, it.Calls, sum, "item %s", it.Name)
		require.LessOrEqual(t, replicas(plan.Counts[m]), cap(it, p.Workers))
	}
	assert.InDeltaSlice(t, p.Evaluate(plan.Counts), plan.WorkerTime, 1e-9)
}

// The heuristic stays within 1.5x of the LP bound (and is never better than the ILP).
func TestHeuristicWithinFactorOfBound(t *testing.T) {
	requireILP(t) // the bound includes the LP relaxation
	r := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for i := 0; i < 40; i++ {
		p := randomProblem(r, 2+r.IntN(8), 2+r.IntN(6), 3000)
		h := solver.SolveHeuristic(p)
		checkPlan(t, p, h)
		lb, err := solver.LowerBound(p)
		require.NoError(t, err)
		worst = max(worst, h.Makespan/lb)
	}
	t.Logf("worst heuristic makespan / LP bound of the ILP over 40 random instances: %.3f", worst)
	assert.Less(t, worst, 1.5)
}

func TestModelThatFitsNoWorker(t *testing.T) {
	p := solver.Problem{Workers: 2, Items: []solver.Item{{Name: "Big", Calls: 3, Load: 1, Curve: curve(1, 1, 3), Fits: []bool{false, false}}}}
	_, err := solver.Solve(context.Background(), p)
	assert.EqualError(t, err, "solver: model Big fits no worker's memory")
}

func TestFitsAndPreloadRespected(t *testing.T) {
	requireILP(t)
	p := solver.Problem{Workers: 3, Items: []solver.Item{
		{Name: "A", Calls: 40, Load: 30, Curve: curve(50, 5, 40), Fits: []bool{true, false, true}},
		{Name: "B", Calls: 10, Load: 30, Curve: curve(5, 1, 10), Preloaded: []bool{false, true, false}},
	}}
	plan, err := solver.SolveILP(context.Background(), p)
	require.NoError(t, err)
	checkPlan(t, p, plan)
	assert.Zero(t, plan.Counts[0][1])
	assert.Equal(t, 10, plan.Counts[1][1], "B stays where it is loaded")
}

// A time limit too short to prove optimality still yields a plan, either the ILP's incumbent
// or the heuristic's, and says which.
func TestTimeLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	p := randomProblem(r, 24, 12, 5000)
	p.TimeLimit = time.Second
	start := time.Now()
	plan, err := solver.Solve(context.Background(), p)
	require.NoError(t, err)
	checkPlan(t, p, plan)
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.Contains(t, []solver.Status{solver.Optimal, solver.TimeLimit, solver.Heuristic}, plan.Status)
	t.Logf("status %s, makespan %.1f, bound %.1f, gap %.1f%%, %v", plan.Status, plan.Makespan, plan.LowerBound, 100*plan.Gap, plan.SolveTime)
}

func TestCurveAt(t *testing.T) {
	c := solver.Curve{X: []int{1, 4, 8}, T: []float64{10, 16, 24}}
	for x, want := range map[int]float64{0: 0, 1: 10, 2: 12, 4: 16, 6: 20, 8: 24, 12: 32} {
		assert.InDelta(t, want, c.At(x), 1e-9, "x=%d", x)
	}
	assert.Equal(t, 5.0, solver.Curve{X: []int{3}, T: []float64{5}}.At(10))
}
