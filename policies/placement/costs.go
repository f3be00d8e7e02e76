package placement

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// profileSamples is how many output lengths are drawn to stand for a model's distribution.
const profileSamples = 4096

// Profile is a model's offline profile: representative output lengths and the engine and
// cost model that serve it.
type Profile struct {
	Info    policies.ModelInfo
	Prompt  int   // mean prompt tokens of its calls
	lengths []int // sorted representative output lengths
}

// NewProfile draws the representative lengths of dist (deterministically) for info.
func NewProfile(info policies.ModelInfo, dist traces.LengthDist, prompt int) (*Profile, error) {
	if dist == nil {
		return nil, fmt.Errorf("model %s has no output-length distribution to plan with", info.Name)
	}
	r := sim.Stream(0, "mosaic-profile/"+info.Name)
	l := make([]int, profileSamples)
	for i := range l {
		l[i] = dist.Sample(r)
	}
	slices.Sort(l)
	return &Profile{Info: info, Prompt: max(1, prompt), lengths: l}, nil
}

// outputs returns x output lengths that stand for x calls: the distribution's quantiles at
// (i + 1/2) / x, so the longest of them grows into the tail as x grows.
func (p *Profile) outputs(x int) []int {
	out := make([]int, x)
	for i := range out {
		q := (float64(i) + 0.5) / float64(x)
		out[i] = p.lengths[min(len(p.lengths)-1, int(q*float64(len(p.lengths))))]
	}
	return out
}

// ServeTime simulates one worker's engine serving x calls submitted together and returns the
// time until the last finishes, in seconds. It is not linear in x: batching amortises the
// weight reads at small x, and the longest call bounds it from below.
func (p *Profile) ServeTime(x int) (float64, error) {
	eng, err := sim.NewEngine(p.Info.Engine, p.Info.Cost)
	if err != nil {
		return 0, err
	}
	reqs := make([]sim.Arrival, x)
	limit := p.Info.Arch.MaxModelLen
	for i, out := range p.outputs(x) {
		prompt := min(p.Prompt, limit-out)
		reqs[i] = sim.Arrival{Request: sim.Request{ID: uint64(i), PromptTokens: max(1, prompt), OutputTokens: out}}
	}
	res, err := sim.Serve(eng, reqs)
	if err != nil {
		return 0, fmt.Errorf("profiling %s: %w", p.Info.Name, err)
	}
	return res.Makespan.Seconds(), nil
}

// Breakpoints returns the call counts at which a curve up to n calls is sampled: powers of
// two below n, and n itself.
func Breakpoints(n int) []int {
	var xs []int
	for x := 1; x < n; x *= 2 {
		xs = append(xs, x)
	}
	return append(xs, n)
}

// Curve samples ServeTime at Breakpoints(n).
func (p *Profile) Curve(n int) (solver.Curve, error) {
	cs, err := Curves([]*Profile{p}, []int{n})
	if err != nil {
		return solver.Curve{}, err
	}
	return cs[0], nil
}

// Curves samples each profile's ServeTime at Breakpoints(ns[i]), the simulations spread over
// the available cores (each is independent and deterministic, so the curves do not depend
// on how they were spread), the longest first.
func Curves(profiles []*Profile, ns []int) ([]solver.Curve, error) {
	type job struct{ profile, point, x int }
	var jobs []job
	times := make([][]float64, len(profiles))
	for i := range profiles {
		xs := Breakpoints(ns[i])
		times[i] = make([]float64, len(xs))
		for k, x := range xs {
			jobs = append(jobs, job{i, k, x})
		}
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(b.x, a.x) })
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				jb := jobs[j]
				times[jb.profile][jb.point], errs[j] = profiles[jb.profile].ServeTime(jb.x)
			}
		}()
	}
	for j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	out := make([]solver.Curve, len(profiles))
	for i := range profiles {
		c := &out[i]
		prev := 0.0
		for k, x := range Breakpoints(ns[i]) {
			// Keep the curve non-decreasing: more calls never take less time to serve.
			t := max(times[i][k], prev)
			prev = t
			c.X = append(c.X, x)
			c.T = append(c.T, t)
		}
	}
	return out, nil
}
