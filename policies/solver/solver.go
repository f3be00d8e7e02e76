// Package solver places models on workers and splits their calls among replicas so that the
// last worker finishes as early as possible. It is the only package that talks to lp_solve
// (through golp, behind the cgo and lpsolve build tags, which the Makefile sets).
//
// Solve finds the optimum of the ILP below by an exact branch and bound of its own first
// (exact.go), on problems of up to 8 workers whose search ends within a fixed number of choices
// (the paper's 6 x 4 stages take milliseconds, where lp_solve's branch and bound takes seconds
// to prove the same optimum once preloads make the workers unlike); larger problems go to
// lp_solve. When lp_solve is missing, times out without a solution or fails numerically, Solve
// falls back to a pure-Go heuristic and says so.
//
// The model: a model m with n_m calls served by r replicas splits its calls evenly, so each
// replica costs at most τ_mrw = L_mw + T_mw(ceil(n_m / r)) on worker w, where T_mw is the
// (offline-profiled, concave) time for worker w to serve x calls and L_mw the load cost there
// (0 where m is already loaded). On a cluster of identical workers T_mw = T_m and L_mw = L_m;
// on a mixed cluster (Item.OnWorker) each worker's GPU type and tensor-parallel degree give its
// own curve and load time, so a replica of a heavy model costs less on a faster worker. With
// binaries v[m,r] (m gets r replicas) and a[m,r,w] (one of them on w):
//
//	minimise   C
//	subject to Σ_r v[m,r] = 1                                   one replica count per model
//	           Σ_w a[m,r,w] = r v[m,r]                           r replicas on distinct workers
//	           Σ_r a[m,r,w] <= 1   (0 where m does not fit w)
//	           t_w = o_w + Σ_m Σ_r τ_mrw a[m,r,w] <= C           o_w: when w becomes free
//	           C >= min_{r,w} (o_w + τ_mrw)                       a valid cut per model
//	           t_w >= t_w'  for interchangeable workers w < w'   symmetry breaking
//	           r <= R_m                                           the replication cap
//
// Splitting evenly keeps the ILP small and its LP relaxation tight (every job is a constant),
// where a free integer split with a concave cost needs a piecewise formulation that lp_solve's
// branch and bound cannot close; after solving, replicas of a model trade calls while that
// lowers the makespan, so the final plan is never worse than the ILP's. The LP relaxation of
// this ILP is the lower bound reported with every plan.
package solver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"time"
)

// Curve is a piecewise-linear, non-decreasing time (seconds) to serve x calls on one worker,
// given at breakpoints X (strictly increasing, X[0] >= 1). Between breakpoints it interpolates;
// beyond the last it extrapolates the last slope.
type Curve struct {
	X []int
	T []float64
}

// At returns the time to serve x calls (0 for x <= 0; +Inf for x > 0 on an empty curve: a
// worker with no cost for the model cannot serve it).
func (c Curve) At(x int) float64 {
	if x <= 0 {
		return 0
	}
	n := len(c.X)
	if n == 0 {
		return math.Inf(1)
	}
	if x <= c.X[0] || n == 1 {
		return c.T[0]
	}
	i := sort.SearchInts(c.X, x)
	if i < n && c.X[i] == x {
		return c.T[i]
	}
	if i == n {
		i = n - 1
	}
	x0, x1 := float64(c.X[i-1]), float64(c.X[i])
	return c.T[i-1] + (c.T[i]-c.T[i-1])*(float64(x)-x0)/(x1-x0)
}

func (c Curve) validate() error {
	if len(c.X) == 0 || len(c.X) != len(c.T) {
		return errors.New("curve needs as many times as breakpoints, at least one")
	}
	if c.X[0] < 1 {
		return errors.New("curve breakpoints start at 1 call or more")
	}
	for i := 1; i < len(c.X); i++ {
		if c.X[i] <= c.X[i-1] {
			return errors.New("curve breakpoints must increase")
		}
	}
	for i, t := range c.T {
		if t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
			return fmt.Errorf("curve time %g at %d calls", t, c.X[i])
		}
	}
	return nil
}

// Item is a model with calls to place.
type Item struct {
	Name  string
	Calls int
	// Load is the time to load the model on a worker that does not hold it.
	Load  float64
	Curve Curve
	// MaxReplicas caps on how many workers the model is placed (0: no cap).
	MaxReplicas int
	// Preloaded marks workers that already hold the model (no load cost there); nil: none.
	Preloaded []bool
	// Fits marks the workers whose memory can hold the model; nil: all.
	Fits []bool
	// OnWorker, when set (one entry per worker), gives the model's load time and serving curve
	// on each worker and replaces Load and Curve: on a cluster of mixed GPU types or
	// tensor-parallel degrees a replica's time depends on its worker. The entries of workers
	// that Fits excludes are ignored.
	OnWorker []Cost
}

// Cost is a model's cost on one worker: the time to load it there (seconds) and the time for
// the worker to serve x calls of it.
type Cost struct {
	Load  float64
	Curve Curve
}

// CurveOn returns the item's serving curve on worker w.
func (it Item) CurveOn(w int) Curve {
	if it.OnWorker != nil {
		return it.OnWorker[w].Curve
	}
	return it.Curve
}

// LoadOn returns the time to load the item on worker w where it is not preloaded.
func (it Item) LoadOn(w int) float64 {
	if it.OnWorker != nil {
		return it.OnWorker[w].Load
	}
	return it.Load
}

// Problem is a placement problem.
type Problem struct {
	Items   []Item
	Workers int
	// Offset is when each worker becomes free (seconds); nil: all at 0.
	Offset []float64
	// TimeLimit bounds the solve (0: DefaultTimeLimit); see Solve for limits that are not whole
	// seconds.
	TimeLimit time.Duration
}

// Status says how a plan was found.
type Status string

// Plan statuses.
const (
	Optimal   Status = "optimal"    // the ILP's optimum, proved (by the exact search or lp_solve)
	TimeLimit Status = "time-limit" // the ILP's best solution when the time limit struck
	Heuristic Status = "heuristic"  // the fallback heuristic
)

// Plan.Method values.
const (
	MethodExact     = "exact search" // the ILP's optimum, by the exact search
	MethodLPSolve   = "lp_solve"     // the ILP solved by lp_solve
	MethodHeuristic = "heuristic"    // the fallback heuristic
)

// Describe says in words how a plan was found, for people: "optimal" (proved), "best found
// (time limit)" (the best plan when the ILP's time limit struck: not proved optimal, and no
// farther from the optimum than the gap to the lower bound says), or "heuristic".
func (s Status) Describe() string {
	if s == TimeLimit {
		return "best found (time limit)"
	}
	return string(s)
}

// Plan is a placement: Counts[m][w] calls of item m on worker w.
type Plan struct {
	Counts [][]int
	// WorkerTime is each worker's predicted finish time (offset + loads + serving).
	WorkerTime []float64
	Makespan   float64
	// ILPMakespan is the ILP's optimum (even splits, before replicas trade calls).
	ILPMakespan float64
	// LowerBound is the ILP's LP relaxation optimum (with the cuts); Gap = 1 - LowerBound/Makespan.
	LowerBound float64
	Gap        float64
	Status     Status
	// Method says what found it: "exact search", "lp_solve" or "heuristic".
	Method string
	// Note says why the heuristic was used, when it was.
	Note      string
	SolveTime time.Duration
}

// Errors.
var (
	// ErrUnavailable means the binary was built without lp_solve (build with make, or with
	// cgo, the lpsolve tag and the lp_solve flags of the Makefile).
	ErrUnavailable = errors.New("solver: lp_solve is not available in this build (build with make, or go build -tags lpsolve with the Makefile's CGO flags)")
	// ErrNoSolution means the ILP found no solution (infeasible, numerical failure or
	// time limit before the first solution).
	ErrNoSolution = errors.New("solver: the ILP found no solution")
)

// Validate checks the problem; an item that fits no worker is an error naming it.
func (p *Problem) Validate() error {
	if p.Workers <= 0 {
		return errors.New("solver: no workers")
	}
	if p.Offset != nil && len(p.Offset) != p.Workers {
		return fmt.Errorf("solver: %d offsets for %d workers", len(p.Offset), p.Workers)
	}
	for _, it := range p.Items {
		if it.Calls <= 0 {
			return fmt.Errorf("solver: item %s has %d calls", it.Name, it.Calls)
		}
		if it.OnWorker == nil {
			if err := it.Curve.validate(); err != nil {
				return fmt.Errorf("solver: item %s: %w", it.Name, err)
			}
			if it.Load < 0 {
				return fmt.Errorf("solver: item %s: negative load time", it.Name)
			}
		}
		if (it.Fits != nil && len(it.Fits) != p.Workers) || (it.Preloaded != nil && len(it.Preloaded) != p.Workers) ||
			(it.OnWorker != nil && len(it.OnWorker) != p.Workers) {
			return fmt.Errorf("solver: item %s: per-worker lists must have %d entries", it.Name, p.Workers)
		}
		if p.allowedCount(it) == 0 {
			return fmt.Errorf("solver: model %s fits no worker's memory", it.Name)
		}
		if it.OnWorker != nil {
			for w, c := range it.OnWorker {
				if !it.allowed(w) {
					continue
				}
				if err := c.Curve.validate(); err != nil {
					return fmt.Errorf("solver: item %s on worker %d: %w", it.Name, w, err)
				}
				if c.Load < 0 || math.IsNaN(c.Load) || math.IsInf(c.Load, 0) {
					return fmt.Errorf("solver: item %s on worker %d: load time %g", it.Name, w, c.Load)
				}
			}
		}
	}
	return nil
}

func (p *Problem) allowedCount(it Item) int {
	n := 0
	for w := 0; w < p.Workers; w++ {
		if it.allowed(w) {
			n++
		}
	}
	return n
}

func (it Item) allowed(w int) bool { return it.Fits == nil || it.Fits[w] }

// loadOn is the load cost of the item on worker w: 0 where it is preloaded.
func (it Item) loadOn(w int) float64 {
	if it.Preloaded != nil && it.Preloaded[w] {
		return 0
	}
	return it.LoadOn(w)
}

func (it Item) replicas(workers int) int {
	r := workers
	if it.MaxReplicas > 0 {
		r = min(r, it.MaxReplicas)
	}
	return min(r, it.Calls)
}

// shareOn is the time a replica of it serves on worker w when the item has r replicas:
// T_w(ceil(n / r)); 0 on a worker that cannot hold it and has no cost of its own.
func (it Item) shareOn(r, w int) float64 {
	c := it.CurveOn(w)
	if len(c.X) == 0 && !it.allowed(w) {
		return 0
	}
	return c.At((it.Calls + r - 1) / r)
}

// bestTime is the least time one replica of x calls takes, load included, on any worker that
// may hold the item (every worker's, on identical workers).
func (p *Problem) bestTime(it Item, x int) float64 {
	if it.OnWorker == nil {
		return it.Load + it.Curve.At(x)
	}
	best := math.Inf(1)
	for w := 0; w < p.Workers; w++ {
		if it.allowed(w) {
			best = min(best, it.OnWorker[w].Load+it.OnWorker[w].Curve.At(x))
		}
	}
	return best
}

// identicalWorkers reports whether workers are interchangeable (same offset, no preloads,
// memory limits or per-worker costs).
func (p *Problem) identicalWorkers() bool {
	for w := 1; w < p.Workers; w++ {
		if p.offset(w) != p.offset(0) {
			return false
		}
	}
	for _, it := range p.Items {
		if it.Preloaded != nil || it.Fits != nil || it.OnWorker != nil {
			return false
		}
	}
	return true
}

// hasWorkerCosts reports whether some item has per-worker costs (a mixed cluster).
func (p *Problem) hasWorkerCosts() bool {
	for _, it := range p.Items {
		if it.OnWorker != nil {
			return true
		}
	}
	return false
}

// twins returns, for each worker, the closest earlier worker that is interchangeable with it
// (the same offset and, for every item, the same fit, preload, load time and curve), or -1:
// on a mixed cluster the workers of one group are twins, and the ILP orders their finish
// times to break the symmetry between them.
func (p *Problem) twins() []int {
	out := make([]int, p.Workers)
	for w := range out {
		out[w] = -1
		for v := w - 1; v >= 0; v-- {
			if p.interchangeable(v, w) {
				out[w] = v
				break
			}
		}
	}
	return out
}

func (p *Problem) interchangeable(a, b int) bool {
	if p.offset(a) != p.offset(b) {
		return false
	}
	for _, it := range p.Items {
		if it.allowed(a) != it.allowed(b) || it.loadOn(a) != it.loadOn(b) {
			return false
		}
		if ca, cb := it.CurveOn(a), it.CurveOn(b); !slices.Equal(ca.X, cb.X) || !slices.Equal(ca.T, cb.T) {
			return false
		}
	}
	return true
}

// balancedCounts splits each item's calls evenly over the workers where it is placed; the
// remainder goes to the replicas on the workers that finish earliest.
func (p *Problem) balancedCounts(placed [][]bool, reps []int) ([][]int, error) {
	counts := make([][]int, len(p.Items))
	for mi, it := range p.Items {
		counts[mi] = make([]int, p.Workers)
		var ws []int
		for w, ok := range placed[mi] {
			if ok {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 || len(ws) != reps[mi] {
			return nil, fmt.Errorf("%w: item %s placed on %d workers for %d replicas", ErrNoSolution, it.Name, len(ws), reps[mi])
		}
		for i, w := range ws {
			counts[mi][w] = it.Calls / len(ws)
			if i < it.Calls%len(ws) {
				counts[mi][w]++
			}
		}
	}
	return counts, nil
}

// planFrom completes a plan from an ILP solution (the workers of each item's replicas, their
// number, and the solution's makespan): even splits, then the improving moves, with the
// plan's predicted times and its gap to lb.
func (p *Problem) planFrom(placed [][]bool, reps []int, ilpMakespan, lb float64, status Status, method string, start time.Time) (*Plan, error) {
	counts, err := p.balancedCounts(placed, reps)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Counts: counts, ILPMakespan: ilpMakespan, LowerBound: lb, Status: status, Method: method}
	p.improve(plan.Counts)
	plan.WorkerTime = p.Evaluate(plan.Counts)
	plan.Makespan = maxOf(plan.WorkerTime)
	plan.Gap = gap(plan.Makespan, lb)
	plan.SolveTime = time.Since(start)
	return plan, nil
}

func (p *Problem) offset(w int) float64 {
	if p.Offset == nil {
		return 0
	}
	return p.Offset[w]
}

// Evaluate returns each worker's finish time under counts.
func (p *Problem) Evaluate(counts [][]int) []float64 {
	t := make([]float64, p.Workers)
	for w := range t {
		t[w] = p.offset(w)
	}
	for m, it := range p.Items {
		for w := 0; w < p.Workers; w++ {
			if x := counts[m][w]; x > 0 {
				t[w] += it.loadOn(w) + it.CurveOn(w).At(x)
			}
		}
	}
	return t
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// DefaultTimeLimit bounds a solve whose problem gives no time limit.
const DefaultTimeLimit = 10 * time.Second

// progressEvery is how often a solve that is still running says so in the log.
var progressEvery = 5 * time.Second

// solveILP is the ILP solver Solve runs (a test replaces it with a slow one).
var solveILP = SolveILP

// Solve plans with the ILP: its optimum by exact search where the search finishes within
// exactNodeLimit choices, else by lp_solve; it falls back to the heuristic, with a warning,
// when lp_solve is unavailable or finds no solution. The returned plan says which one it is.
//
// The time limit (Problem.TimeLimit) holds to the millisecond: lp_solve counts whole seconds,
// so under a limit that is not a whole number of seconds Solve stops waiting for the ILP when
// the limit strikes and returns the heuristic's plan, with the work bound as its lower bound
// and a note that says so. A solve that runs longer than a few seconds logs its progress; a
// cancelled ctx stops the wait.
func Solve(ctx context.Context, p Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	limit := p.timeLimit()
	type result struct {
		plan *Plan
		err  error
	}
	done := make(chan result, 1) // the ILP's goroutine never blocks, even when no one waits
	ilp := solveILP
	go func() {
		if plan, ok, err := solveExact(ctx, p); ok || err != nil {
			done <- result{plan, err}
			return
		}
		plan, err := ilp(ctx, p)
		done <- result{plan, err}
	}()
	var cut <-chan time.Time
	if limit%time.Second != 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		cut = t.C
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return ilpOrHeuristic(p, r.plan, r.err, start), nil
		case <-cut:
			h := SolveHeuristic(p)
			h.LowerBound = WorkBound(p)
			h.Gap = gap(h.Makespan, h.LowerBound)
			h.Note = fmt.Sprintf("the ILP had not finished within the %v time limit (lp_solve counts whole seconds): the heuristic's plan, with the work bound", limit)
			h.SolveTime = time.Since(start)
			return h, nil
		case <-tick.C:
			slog.Info("solving the placement ILP", "models", len(p.Items), "workers", p.Workers,
				"elapsed", time.Since(start).Round(time.Second), "time_limit", limit)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ilpOrHeuristic is Solve's answer once the ILP returned: its plan (or the heuristic's where
// that is better than an incumbent the time limit cut short), or the heuristic's when the ILP
// failed.
func ilpOrHeuristic(p Problem, plan *Plan, err error, start time.Time) *Plan {
	if err == nil {
		if plan.Status == TimeLimit {
			// The ILP's incumbent may be weak when the time limit struck: keep the better plan.
			if h := SolveHeuristic(p); h.Makespan < plan.Makespan-1e-9 {
				plan.Counts, plan.WorkerTime, plan.Makespan, plan.Method = h.Counts, h.WorkerTime, h.Makespan, h.Method
				plan.Gap = gap(plan.Makespan, plan.LowerBound)
				plan.Note = "the time limit struck; the heuristic's plan was better than the ILP's incumbent"
			}
			plan.SolveTime = time.Since(start)
		}
		return plan
	}
	slog.Warn("ILP solver unusable, planning with the heuristic", "reason", err)
	h := SolveHeuristic(p)
	h.Note = err.Error()
	if lb, lbErr := LowerBound(p); lbErr == nil {
		h.LowerBound = lb
		h.Gap = gap(h.Makespan, lb)
	}
	h.SolveTime = time.Since(start)
	return h
}

func gap(makespan, lb float64) float64 {
	if makespan <= 0 {
		return 0
	}
	return max(0, 1-lb/makespan)
}

// timeLimit is the problem's time limit, DefaultTimeLimit when it gives none.
func (p Problem) timeLimit() time.Duration {
	if p.TimeLimit <= 0 {
		return DefaultTimeLimit
	}
	return p.TimeLimit
}

// timeLimitSeconds is the time limit as lp_solve takes it: whole seconds, rounded up.
func (p Problem) timeLimitSeconds() int {
	return max(1, int(math.Ceil(p.timeLimit().Seconds())))
}

// WorkBound is a lower bound on the makespan of any plan, splits even or not: for a makespan
// C, a replica of model m can serve at most x_m(C) calls (the most with L_m + T_m(x) <= C), so
// m needs at least r = ceil(n_m / x_m(C)) replicas and, T_m being concave, at least
// r L_m + floor(n_m / x_m(C)) T_m(x_m(C)) + T_m(n_m mod x_m(C)) of work; the smallest C whose
// total work fits on the workers (Σ_m work_m(C) + Σ_w o_w <= W C) bounds the makespan. Load
// costs are taken at their cheapest worker, so preloads only weaken the bound; on a mixed
// cluster T_m is the pointwise fastest of the workers' curves (concave too), so a replica's
// work is never overstated wherever it runs.
func WorkBound(p Problem) float64 {
	offsets := 0.0
	minOff := math.Inf(1)
	for w := 0; w < p.Workers; w++ {
		offsets += p.offset(w)
		minOff = min(minOff, p.offset(w))
	}
	load := func(it Item) float64 {
		l := math.Inf(1)
		for w := 0; w < p.Workers; w++ {
			if it.OnWorker == nil || it.allowed(w) {
				l = min(l, it.loadOn(w))
			}
		}
		return l
	}
	// fastest is the item's time to serve x calls on its fastest worker.
	fastest := func(it Item, x int) float64 {
		if it.OnWorker == nil {
			return it.Curve.At(x)
		}
		t := math.Inf(1)
		for w := 0; w < p.Workers; w++ {
			if it.allowed(w) {
				t = min(t, it.OnWorker[w].Curve.At(x))
			}
		}
		return t
	}
	// feasible reports whether makespan c leaves room for every model's work.
	feasible := func(c float64) bool {
		total := offsets
		for _, it := range p.Items {
			L := load(it)
			budget := c - minOff - L
			if budget < fastest(it, 1) {
				return false
			}
			// x_max: the most calls one replica serves within the budget (T is non-decreasing).
			xmax := sort.Search(it.Calls, func(x int) bool { return fastest(it, x+1) > budget })
			if xmax == 0 {
				return false
			}
			r := (it.Calls + xmax - 1) / xmax
			if r > it.replicas(p.Workers) {
				return false
			}
			full := it.Calls / xmax
			total += float64(r)*L + float64(full)*fastest(it, xmax) + fastest(it, it.Calls-full*xmax)
		}
		return total <= float64(p.Workers)*c+1e-9
	}
	hi := 1.0
	for !feasible(hi) {
		hi *= 2
		if hi > 1e12 {
			return 0
		}
	}
	lo := 0.0
	for i := 0; i < 60 && hi-lo > 1e-6*hi; i++ {
		mid := (lo + hi) / 2
		if feasible(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo
}
