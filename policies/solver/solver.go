// Package solver places models on workers and splits their calls among replicas so that the
// last worker finishes as early as possible.
//
// Solve takes two paths, both pure Go and both bounded by counts of steps rather than by time,
// so that a plan never depends on the machine's speed:
//
//   - On problems of up to 8 workers whose search ends within a fixed number of choices (the
//     paper's 6 x 4 stages take milliseconds), an exact branch and bound (exact.go) proves the
//     optimum of the ILP below; replicas then trade calls (improve). Status optimal.
//   - Any other problem (a cluster of 16 or 32 workers, or a search too long) goes to the fill
//     search (fill.go): for a target makespan C it fills the workers with the models' calls,
//     each model split into as few pieces as fit, each piece paying its load, and bisects for
//     the least C at which that succeeds, over a few orders of the models; its plan is within
//     1% of the lower bound on the stages of 16 x 8 and 32 x 12 clusters, in milliseconds.
//     Status near-optimal (within 1% of the bound) or best-found.
//
// Every plan carries WorkBound (bound.go), a lower bound on the makespan of any plan, splits
// even or not, so the gap it reports is one the final plan really has. When the search fails
// the heuristic (heuristic.go) plans, and says why. lp_solve (through golp, behind the cgo and
// lpsolve build tags, which the Makefile sets) is no longer on Solve's path: SolveILP solves the
// ILP with it, for comparison. Solve keeps the plans of the problems it solved (memo.go):
// an identical problem is answered with a copy.
//
// The ILP: a model m with n_m calls served by r replicas splits its calls evenly, so each
// replica costs at most τ_mrw = L_mw + T_mw(ceil(n_m / r)) on worker w, where T_mw is the
// (offline-profiled, non-decreasing, mostly concave) time for worker w to serve x calls and
// L_mw the load cost there (0 where m is already loaded). On a cluster of identical workers
// T_mw = T_m and L_mw = L_m; on a mixed cluster (Item.OnWorker) each worker's GPU type and
// tensor-parallel degree give its own curve and load time, so a replica of a heavy model costs
// less on a faster worker. With binaries v[m,r] (m gets r replicas) and a[m,r,w] (one of them
// on w):
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
// Splitting evenly keeps the ILP small (every job is a constant), where a free integer split
// with a concave cost needs a piecewise formulation that no branch and bound we tried could
// close; after solving, replicas of a model trade calls while that lowers the makespan, so the
// final plan is never worse than the ILP's. The fill search works on uneven splits directly.
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
		if i > 0 && t < c.T[i-1] {
			return fmt.Errorf("curve time falls from %g at %d calls to %g at %d: more calls never take less time", c.T[i-1], c.X[i-1], t, c.X[i])
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
	// NearOptimal: the fill search's plan, within fillTargetGap (1%) of the lower bound; not
	// proved optimal, and no farther from the optimum than its gap says.
	NearOptimal Status = "near-optimal"
	// BestFound: the fill search's best plan when its step budget ran out farther than 1%
	// from the lower bound (the bound may be the one that is loose).
	BestFound Status = "best-found"
)

// Plan.Method values.
const (
	MethodExact     = "exact search" // the ILP's optimum, by the exact search
	MethodLPSolve   = "lp_solve"     // the ILP solved by lp_solve
	MethodHeuristic = "heuristic"    // the fallback heuristic
	MethodFill      = "fill search"  // the fill search (fill.go)
)

// Describe says in words how a plan was found, for people: "optimal" (proved), "near-optimal
// (within 1% of the bound)", "best found (not within 1% of the bound)" (the fill search's best
// when its steps ran out), "best found (time limit)" (lp_solve's best when its time limit
// struck), or "heuristic". A plan that is not proved optimal is no farther from the optimum
// than its gap to the lower bound says.
func (s Status) Describe() string {
	switch s {
	case TimeLimit:
		return "best found (time limit)"
	case NearOptimal:
		return fmt.Sprintf("near-optimal (within %g%% of the bound)", 100*fillTargetGap)
	case BestFound:
		return fmt.Sprintf("best found (not within %g%% of the bound)", 100*fillTargetGap)
	}
	return string(s)
}

// Plan is a placement: Counts[m][w] calls of item m on worker w.
type Plan struct {
	Counts [][]int
	// WorkerTime is each worker's predicted finish time (offset + loads + serving).
	WorkerTime []float64
	Makespan   float64
	// ILPMakespan is the ILP's optimum (even splits, before replicas trade calls) where the
	// exact search or lp_solve found it; 0 for the fill search and the heuristic.
	ILPMakespan float64
	// LowerBound is WorkBound: no plan, splits even or not, has a shorter makespan.
	// Gap = 1 - LowerBound/Makespan.
	LowerBound float64
	Gap        float64
	Status     Status
	// Method says what found it: "exact search", "fill search", "lp_solve" or "heuristic".
	Method string
	// Note says why the heuristic was used, when it was.
	Note string
	// SolveTime is how long Solve took: for a Reused plan, the lookup.
	SolveTime time.Duration
	// Reused: the plan is a copy of one Solve made earlier in this process for an identical
	// problem, not solved again (memo.go).
	Reused bool
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

// solveLarge is the search Solve runs on problems the exact search does not take on (a test
// replaces it with a slow one).
var solveLarge = fillSearch

// Solve plans a stage. Problems of up to exactMaxWorkers workers whose exact search ends
// within exactNodeLimit choices get the ILP's proved optimum (status optimal, method "exact
// search"); any other problem gets the fill search's plan (fill.go: status near-optimal
// within 1% of the lower bound, else best-found). Both are bounded by counts of steps, not by
// time, so the plan does not depend on the machine's speed; the reported lower bound is
// WorkBound, which holds for any split of the calls, so the gap is one the final plan really
// has. lp_solve is not used (SolveILP remains, for comparison).
//
// An identical problem solved earlier in the process (its items, curves, loads, fits,
// preloads, per-worker costs, offsets, workers and time limit alike) is not solved again: Solve
// returns a copy of that plan, marked Reused (see memo.go); concurrent calls for one problem
// solve it once.
//
// Problem.TimeLimit is a safety net only: a search of realistic size ends in well under a
// second, but if one has not ended when the limit strikes, Solve stops waiting and returns the
// heuristic's plan with a note that says so and a warning in the log (a plan that then depends
// on the machine, and is not kept for reuse). A solve that runs longer than a few seconds logs
// its progress; a cancelled ctx stops it.
func Solve(ctx context.Context, p Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	key := memoKeyOf(&p)
	if plan, leader := plans.claim(ctx, key); plan != nil {
		plan.Reused = true
		plan.SolveTime = time.Since(start)
		slog.Debug("placement plan reused", "models", len(p.Items), "workers", p.Workers, "makespan", plan.Makespan)
		return plan, nil
	} else if leader {
		var kept *Plan
		defer func() { plans.release(key, kept) }()
		plan, keep, err := solve(ctx, p, start)
		if err != nil {
			return nil, err
		}
		if keep {
			kept = plan
		}
		return plan, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	plan, _, err := solve(ctx, p, start)
	return plan, err
}

// solve is Solve without the memo; keep says whether the plan may be reused (it did not
// come from the time limit's safety net).
func solve(ctx context.Context, p Problem, start time.Time) (plan *Plan, keep bool, err error) {
	limit := p.timeLimit()
	type result struct {
		plan *Plan
		err  error
	}
	done := make(chan result, 1) // the search's goroutine never blocks, even when no one waits
	large := solveLarge
	go func() {
		if plan, ok, err := solveExact(ctx, p); ok || err != nil {
			done <- result{plan, err}
			return
		}
		plan, err := large(ctx, p)
		done <- result{plan, err}
	}()
	cut := time.NewTimer(limit)
	defer cut.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil && ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			return searchOrHeuristic(p, r.plan, r.err, start), true, nil
		case <-cut.C:
			h := SolveHeuristic(p)
			h.LowerBound = WorkBound(p)
			h.Gap = gap(h.Makespan, h.LowerBound)
			h.Note = fmt.Sprintf("the search had not finished within the %v time limit: the heuristic's plan", limit)
			slog.Warn("placement search stopped by its time limit; the plan now depends on the machine's speed",
				"models", len(p.Items), "workers", p.Workers, "time_limit", limit)
			h.SolveTime = time.Since(start)
			return h, false, nil
		case <-tick.C:
			slog.Info("solving the placement problem", "models", len(p.Items), "workers", p.Workers,
				"elapsed", time.Since(start).Round(time.Second), "time_limit", limit)
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// searchOrHeuristic is Solve's answer once the search returned: its plan, or the heuristic's
// (with the work bound and the reason) when the search failed.
func searchOrHeuristic(p Problem, plan *Plan, err error, start time.Time) *Plan {
	if err == nil {
		return plan
	}
	slog.Warn("placement search failed, planning with the heuristic", "reason", err)
	h := SolveHeuristic(p)
	h.Note = err.Error()
	h.LowerBound = WorkBound(p)
	h.Gap = gap(h.Makespan, h.LowerBound)
	h.SolveTime = time.Since(start)
	return h
}

// LowerBound returns WorkBound after checking the problem: a lower bound on the makespan of
// any plan, splits even or not.
func LowerBound(p Problem) (float64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return WorkBound(p), nil
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
