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
// T(ceil(n/r)) on its worker, per-worker costs and fits included) and returns the best
// makespan.
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
	sets:
		for set := 1; set < 1<<p.Workers; set++ {
			r := bits.OnesCount(uint(set))
			if r > R {
				continue
			}
			for w := 0; w < p.Workers; w++ {
				if set&(1<<w) != 0 && it.Fits != nil && !it.Fits[w] {
					continue sets
				}
			}
			x := (it.Calls + r - 1) / r
			cost := func(w int) float64 { return it.LoadOn(w) + it.CurveOn(w).At(x) }
			for w := 0; w < p.Workers; w++ {
				if set&(1<<w) != 0 {
					t[w] += cost(w)
				}
			}
			rec(m + 1)
			for w := 0; w < p.Workers; w++ {
				if set&(1<<w) != 0 {
					t[w] -= cost(w)
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

// The heuristic stays within 1.5x of the lower bound.
func TestHeuristicWithinFactorOfBound(t *testing.T) {
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
	t.Logf("worst heuristic makespan / lower bound over 40 random instances: %.3f", worst)
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

// A problem beyond the exact search (24 models on 12 workers) is planned by the fill search,
// well within a one-second time limit, and the plan says how it was found and how far from
// its bound it is.
func TestLargeProblem(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	p := randomProblem(r, 24, 12, 5000)
	p.TimeLimit = time.Second
	plan, err := solver.Solve(context.Background(), p)
	require.NoError(t, err)
	checkPlan(t, p, plan)
	assert.Equal(t, solver.MethodFill, plan.Method)
	assert.Contains(t, []solver.Status{solver.NearOptimal, solver.BestFound}, plan.Status)
	assert.Empty(t, plan.Note, "not the time limit's safety net")
	assert.InDelta(t, solver.WorkBound(p), plan.LowerBound, 0)
	t.Logf("status %s, makespan %.1f, bound %.1f, gap %.2f%%, %v", plan.Status, plan.Makespan, plan.LowerBound, 100*plan.Gap, plan.SolveTime)
}

func TestCurveAt(t *testing.T) {
	c := solver.Curve{X: []int{1, 4, 8}, T: []float64{10, 16, 24}}
	for x, want := range map[int]float64{0: 0, 1: 10, 2: 12, 4: 16, 6: 20, 8: 24, 12: 32} {
		assert.InDelta(t, want, c.At(x), 1e-9, "x=%d", x)
	}
	assert.Equal(t, 5.0, solver.Curve{X: []int{3}, T: []float64{5}}.At(10))
}

// scaled returns c with every time multiplied by f (a worker f times slower).
func scaled(c solver.Curve, f float64) solver.Curve {
	out := solver.Curve{X: append([]int(nil), c.X...)}
	for _, t := range c.T {
		out.T = append(out.T, t*f)
	}
	return out
}

// mixedProblem is a random problem on a mixed cluster: the first half of the workers are
// slow (1.5 to 3x the fast ones' times, loads included), and some workers cannot hold some
// models.
func mixedProblem(r *rand.Rand, items, workers, maxCalls int) solver.Problem {
	p := randomProblem(r, items, workers, maxCalls)
	slow := 1.5 + 1.5*r.Float64()
	for i := range p.Items {
		it := &p.Items[i]
		it.OnWorker = make([]solver.Cost, workers)
		it.Fits = make([]bool, workers)
		for w := range workers {
			f := 1.0
			if w < workers/2 {
				f = slow
			}
			it.Fits[w] = w == workers-1 || r.Float64() < 0.8
			if it.Fits[w] { // a worker that cannot hold the model has no cost for it
				it.OnWorker[w] = solver.Cost{Load: it.Load * f, Curve: scaled(it.Curve, f)}
			}
		}
	}
	return p
}

// The ILP finds the optimum of its model (brute force over replica counts and worker sets), on
// identical workers and with per-worker costs and fits (a mixed cluster), where its symmetry
// breaking between interchangeable workers must cut no optimum; its bound stays below it, the
// work bound below any plan, improving moves never make the plan worse, and the heuristic's
// plan is valid.
func TestILPMatchesBruteForce(t *testing.T) {
	requireILP(t)
	randomInstances(t, 1, 25, 40, 5, 4, func(t *testing.T, i int, p solver.Problem) {
		plan, err := solver.SolveILP(context.Background(), p)
		require.NoError(t, err)
		require.Equal(t, solver.Optimal, plan.Status)
		require.Equal(t, solver.MethodLPSolve, plan.Method)
		bf := bruteForce(p)
		assert.InDelta(t, bf, plan.ILPMakespan, 1e-6*bf, "instance %d", i)
		assert.LessOrEqual(t, plan.LowerBound, plan.ILPMakespan+1e-6, "instance %d", i)
		assert.LessOrEqual(t, solver.WorkBound(p), bf+1e-6, "instance %d: the work bound holds for any plan", i)
		assert.LessOrEqual(t, plan.Makespan, plan.ILPMakespan+1e-6, "instance %d: improving moves never make it worse", i)
		checkPlan(t, p, plan)
		checkPlan(t, p, solver.SolveHeuristic(p))
	})
}

// randomInstances runs check on n random problems of up to maxCalls calls per item and 2 to 4
// workers, in two subtests: identical workers (up to maxIdentical items) and a mixed cluster
// (up to maxMixed items); seed picks the instances.
func randomInstances(t *testing.T, seed uint64, n, maxCalls, maxIdentical, maxMixed int, check func(t *testing.T, i int, p solver.Problem)) {
	tests := []struct {
		name     string
		seed     uint64
		problem  func(r *rand.Rand, items, workers, maxCalls int) solver.Problem
		maxItems int
	}{
		{"identical workers", seed, randomProblem, maxIdentical},
		{"mixed cluster", seed + 4, mixedProblem, maxMixed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(tt.seed, tt.seed+1))
			for i := 0; i < n; i++ {
				check(t, i, tt.problem(r, 1+r.IntN(tt.maxItems), 2+r.IntN(3), maxCalls))
			}
		})
	}
}

// Solve finds the ILP model's optimum by exact search on problems of the paper's size, with
// or without lp_solve: on identical workers, where the search treats workers that hold the
// same replicas as one, and on mixed clusters, where only the workers of one group are
// interchangeable, it matches brute force and proves it (status optimal).
func TestExactSearchMatchesBruteForce(t *testing.T) {
	randomInstances(t, 11, 100, 60, 5, 5, func(t *testing.T, i int, p solver.Problem) {
		plan, err := solver.Solve(context.Background(), p)
		require.NoError(t, err)
		require.Equal(t, solver.Optimal, plan.Status, "instance %d: %s", i, plan.Note)
		require.Equal(t, solver.MethodExact, plan.Method, "instance %d", i)
		bf := bruteForce(p)
		require.InDelta(t, bf, plan.ILPMakespan, 1e-6*bf, "instance %d", i)
		require.LessOrEqual(t, plan.Makespan, plan.ILPMakespan+1e-6, "instance %d", i)
		require.LessOrEqual(t, plan.LowerBound, plan.ILPMakespan+1e-6, "instance %d", i)
		checkPlan(t, p, plan)
	})
}

// On 2 slow and 2 fast workers, the heavy model goes to the fast workers and the light ones
// to the slow workers, by the ILP and by the heuristic alike, whichever workers are the fast
// ones: the per-worker costs decide, not the workers' order.
func TestHeavyModelOnFastWorkers(t *testing.T) {
	const slow = 2.5
	for _, fastWorkers := range [][]int{{2, 3}, {0, 1}} {
		heavy := solver.Item{Name: "Heavy", Calls: 400, Load: 40, Curve: curve(900, 6, 400)}
		light1 := solver.Item{Name: "Light1", Calls: 400, Load: 30, Curve: curve(20, 1, 400)}
		light2 := solver.Item{Name: "Light2", Calls: 400, Load: 30, Curve: curve(20, 1, 400)}
		p := solver.Problem{Workers: 4, Items: []solver.Item{heavy, light1, light2}}
		for i := range p.Items {
			it := &p.Items[i]
			it.OnWorker = make([]solver.Cost, 4)
			for w := range 4 {
				f := slow
				if w == fastWorkers[0] || w == fastWorkers[1] {
					f = 1
				}
				it.OnWorker[w] = solver.Cost{Load: it.Load * f, Curve: scaled(it.Curve, f)}
			}
		}
		plans := []*solver.Plan{solver.SolveHeuristic(p)}
		if solver.ILPAvailable {
			plan, err := solver.SolveILP(context.Background(), p)
			require.NoError(t, err)
			plans = append(plans, plan)
		}
		for _, plan := range plans {
			checkPlan(t, p, plan)
			onFast := plan.Counts[0][fastWorkers[0]] + plan.Counts[0][fastWorkers[1]]
			assert.Equal(t, 400, onFast, "fast workers %v, %s: every heavy call on a fast worker: %v", fastWorkers, plan.Status, plan.Counts)
		}
	}
}

func TestMixedProblemValidation(t *testing.T) {
	c := curve(1, 1, 3)
	p := solver.Problem{Workers: 2, Items: []solver.Item{{Name: "M", Calls: 3, OnWorker: []solver.Cost{{Load: 1, Curve: c}}}}}
	assert.EqualError(t, p.Validate(), "solver: item M: per-worker lists must have 2 entries")
	p.Items[0].OnWorker = []solver.Cost{{Load: 1, Curve: c}, {Load: 1}}
	assert.EqualError(t, p.Validate(), "solver: item M on worker 1: curve needs as many times as breakpoints, at least one")
	// A worker the model does not fit needs no cost.
	p.Items[0].Fits = []bool{true, false}
	require.NoError(t, p.Validate())
	p.Items[0].OnWorker[0].Load = -1
	assert.EqualError(t, p.Validate(), "solver: item M on worker 0: load time -1")
}

func TestStatusDescribe(t *testing.T) {
	assert.Equal(t, "optimal", solver.Optimal.Describe())
	assert.Equal(t, "best found (time limit)", solver.TimeLimit.Describe())
	assert.Equal(t, "heuristic", solver.Heuristic.Describe())
}

// Hand-computed: 300 calls of one model on two workers, 0.6 s a call on the slow one and 0.4 s
// on the fast one, no load time. The ILP's even splits give 150 + 150 (90 s on the slow
// worker, better than 120 s for all on the fast one); trading calls between the replicas
// until the finish times meet gives x0 + x1 = 300 with 0.6 x0 = 0.4 x1: 120 calls on the slow
// worker, 180 on the fast one, both done at 72 s.
func TestFasterWorkerTakesMoreCalls(t *testing.T) {
	linear := func(perCall float64) solver.Curve {
		return solver.Curve{X: []int{1, 300}, T: []float64{perCall, 300 * perCall}}
	}
	p := solver.Problem{Workers: 2, Items: []solver.Item{{Name: "M", Calls: 300,
		OnWorker: []solver.Cost{{Curve: linear(0.6)}, {Curve: linear(0.4)}}}}}
	plans := []*solver.Plan{solver.SolveHeuristic(p)}
	if solver.ILPAvailable {
		plan, err := solver.SolveILP(context.Background(), p)
		require.NoError(t, err)
		assert.InDelta(t, 90, plan.ILPMakespan, 1e-9, "the ILP's even split")
		plans = append(plans, plan)
	}
	for _, plan := range plans {
		checkPlan(t, p, plan)
		assert.Equal(t, [][]int{{120, 180}}, plan.Counts, plan.Status)
		assert.InDelta(t, 72, plan.Makespan, 1e-9, plan.Status)
		assert.InDeltaSlice(t, []float64{72, 72}, plan.WorkerTime, 1e-9, plan.Status)
	}
}
