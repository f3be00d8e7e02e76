package policies

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/mosaic-sched/mosaic/internal/offheap"
)

// DefaultWarmup is the share of an online run's queries, the first to arrive, that its
// steady-state window leaves out.
const DefaultWarmup = 0.2

// Window is the steady state of an online run: the queries that arrived after a warm-up (the
// first share of the queries to arrive), up to the last arrival. Every query runs to its end,
// so a query that arrived late in the window counts its whole latency: in an overloaded run
// the window's latencies grow with its length, as they should.
type Window struct {
	// Start and End bound the window's arrivals; Queries counts them.
	Start, End time.Duration
	Queries    int
	// Latency and TTFT summarise the window's end-to-end latencies and times to the final
	// call's first token (seconds).
	Latency, TTFT LatencyStats
	// SLOAttainment is the share of the window's queries that meet the SLO, Goodput their
	// rate over the window (NaN without an SLO), and Throughput the rate at which queries
	// (any) finished during the window: the arrival rate in a steady state, below it while
	// the queue grows.
	SLOAttainment, Goodput, Throughput float64
}

// Window computes the run's steady-state window, leaving out the warmup share (in [0, 1)) of
// its queries, the first to arrive, under slo. A streamed Result answers under the SLO its run
// was given (Driver.Stream) whatever o says; a held one folds its queries, in order of arrival,
// as a streamed run's tally would.
func (r *Result) Window(warmup float64, o SLO) Window {
	if r.tally != nil {
		return r.tally.window(warmup)
	}
	qs := slices.Clone(r.Queries)
	slices.SortStableFunc(qs, func(a, b QueryOutcome) int { return cmp.Compare(a.Arrival, b.Arrival) })
	t := &Tally{slo: o, stream: true}
	for _, q := range qs {
		t.Query(q)
	}
	return t.window(warmup)
}

// window is the steady-state window of a streamed tally's queries, leaving out the warmup
// share, read from the queries' latencies in query order, whose arrivals a streamed workload
// keeps in order (otherwise it reads a copy in order of arrival).
func (t *Tally) window(warmup float64) Window {
	defer runtime.KeepAlive(t) // its columns may be off the heap (Tally.reserve)
	n := len(t.arrival)
	if !slices.IsSorted(t.arrival) {
		return t.byArrival().window(warmup)
	}
	skip := int(math.Ceil(warmup * float64(n)))
	if skip >= n {
		return Window{SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	}
	w := Window{Start: t.arrival[skip], End: t.arrival[n-1], Queries: n - skip, SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	// Seconds keep the durations' order, so these are NewLatencyStats of the seconds.
	buf, release := offheap.Make[time.Duration](n-skip, n-skip)
	w.Latency = latencyStats(buf[:copy(buf, t.lat[skip:])])
	w.TTFT = latencyStats(buf[:copy(buf, t.ttft[skip:])])
	release()
	met := 0
	for i := skip; i < n; i++ {
		if t.metAt(i) {
			met++
		}
	}
	if span := (w.End - w.Start).Seconds(); span > 0 {
		done := 0
		for i, a := range t.arrival {
			if end := a + t.lat[i]; end >= w.Start && end <= w.End {
				done++
			}
		}
		w.Throughput = float64(done) / span
	}
	if t.slo.Set() {
		w.SLOAttainment = float64(met) / float64(n-skip)
		if span := (w.End - w.Start).Seconds(); span > 0 {
			w.Goodput = float64(met) / span
		}
	}
	return w
}

// byArrival is what a window reads of the tally (arrivals, latencies, times to first token,
// SLO bits), its queries in order of arrival (stable).
func (t *Tally) byArrival() *Tally {
	order := make([]int, len(t.arrival))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(t.arrival[a], t.arrival[b]) })
	s := &Tally{slo: t.slo, stream: true}
	for _, i := range order {
		s.lat, s.ttft = append(s.lat, t.lat[i]), append(s.ttft, t.ttft[i])
		s.addArrival(t.arrival[i], t.metAt(i))
	}
	return s
}
