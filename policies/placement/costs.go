package placement

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"reflect"
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
	// digest hashes lengths (which nothing changes once drawn), for the memo's keys.
	digest [sha256.Size]byte
}

// NewProfile draws the representative lengths of dist (deterministically) for info.
func NewProfile(info policies.ModelInfo, dist traces.LengthDist, prompt int) (*Profile, error) {
	if dist == nil {
		return nil, fmt.Errorf("model %s has no output-length distribution to plan with", info.Name)
	}
	l := profileLengths(info.Name, dist)
	return &Profile{Info: info, Prompt: max(1, prompt), lengths: l.lengths, digest: l.digest}, nil
}

// drawnLengths are a profile's representative lengths and their digest. The lengths are
// shared by every profile of the same model name and distribution content: nothing writes
// them once drawn.
type drawnLengths struct {
	lengths []int
	digest  [sha256.Size]byte
}

// profileLengths draws the representative lengths of dist for the model named name: a stream
// of its own seeded by the name, so they depend on nothing else. They are drawn once per
// process for each name and distribution content (lengthsMemo).
func profileLengths(name string, dist traces.LengthDist) drawnLengths {
	draw := func() (drawnLengths, error) {
		r := sim.Stream(0, "mosaic-profile/"+name)
		l := make([]int, profileSamples)
		for i := range l {
			l[i] = dist.Sample(r)
		}
		slices.Sort(l)
		h := sha256.New()
		for _, x := range l {
			writeInt(h, int64(x))
		}
		d := drawnLengths{lengths: l}
		h.Sum(d.digest[:0])
		return d, nil
	}
	h := sha256.New()
	writeString(h, name)
	t := reflect.TypeOf(dist)
	writeString(h, t.String())
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	writeString(h, t.PkgPath())
	if !hashValue(h, reflect.ValueOf(dist), 0) {
		d, _ := draw()
		return d
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	d, _ := lengthsMemo.get(k, draw)
	return d
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
//
// The result depends only on the content of the profile (engine settings, cost model, context
// limit, prompt and representative lengths) and x, and the simulation is deterministic, so it
// is computed once per process for each such content (serveMemo): the policies of a run, and
// the points of a sweep, that plan the same model on the same hardware share it.
func (p *Profile) ServeTime(x int) (float64, error) {
	key, ok := p.memoKey(x)
	if !ok {
		return p.serve(x)
	}
	return serveMemo.get(key, func() (float64, error) { return p.serve(x) })
}

// serve is ServeTime without the memo.
func (p *Profile) serve(x int) (float64, error) {
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

// The memos of profiles, for the process: what they hold depends only on the content hashed
// into their keys (never on a pointer), and the simulations and draws are deterministic, so a
// remembered value is the one a new computation would give. Each is bounded: past its size it
// starts again empty. A sweep of the paper's experiments over seeds, thresholds and cluster
// sizes needs a few thousand serving times (models x breakpoints x distinct stage prompts; an
// entry is under 100 bytes) and a few sets of lengths (one per model and distribution; 32 KiB
// each).
var (
	serveMemo   = newMemo[serveKey, float64](1 << 16)
	lengthsMemo = newMemo[[sha256.Size]byte, drawnLengths](256)
)

// serveKey is what a serving time depends on: a hash of the profile's content (never a
// pointer) and the number of calls.
type serveKey struct {
	profile [sha256.Size]byte
	x       int
}

// memo computes each key's value once, however many goroutines ask for it together, and
// remembers it; it holds at most max values.
type memo[K comparable, V any] struct {
	mu      sync.Mutex
	max     int
	entries map[K]*memoEntry[V]
}

// memoEntry is one value, computed once: done is closed when v and err are set.
type memoEntry[V any] struct {
	done chan struct{}
	v    V
	err  error
}

func newMemo[K comparable, V any](max int) *memo[K, V] {
	return &memo[K, V]{max: max, entries: map[K]*memoEntry[V]{}}
}

// get returns the value of key, computing it with f unless it is known or being computed
// (then it waits for it). Errors are not remembered: the next caller computes again.
func (m *memo[K, V]) get(key K, f func() (V, error)) (V, error) {
	m.mu.Lock()
	if e, ok := m.entries[key]; ok {
		m.mu.Unlock()
		<-e.done
		if e.err == nil {
			return e.v, nil
		}
		return f()
	}
	if len(m.entries) >= m.max {
		clear(m.entries) // bounded: entries being computed stay with their waiters
	}
	e := &memoEntry[V]{done: make(chan struct{})}
	m.entries[key] = e
	m.mu.Unlock()
	e.v, e.err = f()
	if e.err != nil {
		m.mu.Lock()
		if m.entries[key] == e {
			delete(m.entries, key)
		}
		m.mu.Unlock()
	}
	close(e.done)
	return e.v, e.err
}

// memoKey is the memo's key of ServeTime(x): a hash of everything serve reads (the engine
// settings, the cost model with its model and GPU, the context limit, the prompt and the
// representative lengths) and x. ok is false when that content cannot be hashed (no cost
// model or model; a kind of value hashValue does not know), and the time is then not
// remembered.
func (p *Profile) memoKey(x int) (serveKey, bool) {
	if p.Info.Cost == nil || p.Info.Arch == nil {
		return serveKey{}, false
	}
	h := sha256.New()
	h.Write(p.digest[:])
	writeInt(h, int64(p.Prompt))
	writeInt(h, int64(p.Info.Arch.MaxModelLen))
	if !hashValue(h, reflect.ValueOf(p.Info.Engine), 0) || !hashValue(h, reflect.ValueOf(p.Info.Cost), 0) {
		return serveKey{}, false
	}
	k := serveKey{x: x}
	h.Sum(k.profile[:0])
	return k, true
}

func writeInt(h hash.Hash, v int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	h.Write(b[:])
}

func writeString(h hash.Hash, s string) {
	writeInt(h, int64(len(s)))
	h.Write([]byte(s))
}

// hashValue writes v's content into h: scalars by value, pointers by what they point to
// (unexported fields included: a cost model's derived coefficients are part of its content).
// It reports false for what it cannot hash by content (maps, functions, channels, values
// nested deeper than 8).
func hashValue(h hash.Hash, v reflect.Value, depth int) bool {
	if depth > 8 {
		return false
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			writeInt(h, 1)
		} else {
			writeInt(h, 0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		writeInt(h, v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		writeInt(h, int64(v.Uint()))
	case reflect.Float32, reflect.Float64:
		writeInt(h, int64(math.Float64bits(v.Float())))
	case reflect.String:
		writeString(h, v.String())
	case reflect.Pointer:
		if v.IsNil() {
			writeInt(h, 0)
			return true
		}
		writeInt(h, 1)
		return hashValue(h, v.Elem(), depth+1)
	case reflect.Struct:
		writeInt(h, int64(v.NumField()))
		for i := range v.NumField() {
			if !hashValue(h, v.Field(i), depth+1) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		writeInt(h, int64(v.Len()))
		for i := range v.Len() {
			if !hashValue(h, v.Index(i), depth+1) {
				return false
			}
		}
	default:
		return false
	}
	return true
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
