package policies

import (
	"cmp"
	"math"
	"slices"
	"time"
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

// windowQuery is what a window keeps of a query.
type windowQuery struct {
	arrival, end, firstToken time.Duration
	met                      bool
}

// newWindowQuery is q as a window sees it under slo.
func newWindowQuery(q QueryOutcome, slo SLO) windowQuery {
	return windowQuery{arrival: q.Arrival, end: q.End, firstToken: q.FirstToken, met: slo.Met(q)}
}

// Window computes the run's steady-state window, leaving out the warmup share (in [0, 1)) of
// its queries, the first to arrive, under slo. A streamed Result answers under the SLO its run
// was given (Driver.Stream) whatever o says.
func (r *Result) Window(warmup float64, o SLO) Window {
	if r.tally != nil {
		return r.tally.window(warmup)
	}
	qs := make([]windowQuery, len(r.Queries))
	for i, q := range r.Queries {
		qs[i] = newWindowQuery(q, o)
	}
	return window(qs, warmup, o.Set())
}

// window computes the window of qs (reordered by arrival in place).
func window(qs []windowQuery, warmup float64, slo bool) Window {
	slices.SortStableFunc(qs, func(a, b windowQuery) int { return cmp.Compare(a.arrival, b.arrival) })
	skip := int(math.Ceil(warmup * float64(len(qs))))
	if skip >= len(qs) {
		return Window{SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	}
	in := qs[skip:]
	w := Window{Start: in[0].arrival, End: in[len(in)-1].arrival, Queries: len(in), SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	lat := make([]float64, len(in))
	ttft := make([]float64, len(in))
	met := 0
	for i, q := range in {
		lat[i], ttft[i] = (q.end - q.arrival).Seconds(), (q.firstToken - q.arrival).Seconds()
		if q.met {
			met++
		}
	}
	w.Latency, w.TTFT = NewLatencyStats(lat), NewLatencyStats(ttft)
	if span := (w.End - w.Start).Seconds(); span > 0 {
		done := 0
		for _, q := range qs {
			if q.end >= w.Start && q.end <= w.End {
				done++
			}
		}
		w.Throughput = float64(done) / span
	}
	if slo {
		w.SLOAttainment = float64(met) / float64(len(in))
		if span := (w.End - w.Start).Seconds(); span > 0 {
			w.Goodput = float64(met) / span
		}
	}
	return w
}

// window is the steady-state window of a streamed tally's queries, leaving out the warmup
// share: window's figures, read from the queries' latencies in query order, whose arrivals
// a streamed workload keeps in order (otherwise the queries are sorted as window sorts them).
func (t *Tally) window(warmup float64) Window {
	n := len(t.arrival)
	if !slices.IsSorted(t.arrival) {
		qs := make([]windowQuery, n)
		for i, a := range t.arrival {
			qs[i] = windowQuery{arrival: a, end: a + t.lat[i], firstToken: a + t.ttft[i], met: t.metAt(i)}
		}
		return window(qs, warmup, t.slo.Set())
	}
	skip := int(math.Ceil(warmup * float64(n)))
	if skip >= n {
		return Window{SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	}
	w := Window{Start: t.arrival[skip], End: t.arrival[n-1], Queries: n - skip, SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	// Seconds keep the durations' order, so these are NewLatencyStats of the seconds.
	buf := make([]time.Duration, n-skip)
	w.Latency = latencyStats(buf[:copy(buf, t.lat[skip:])])
	w.TTFT = latencyStats(buf[:copy(buf, t.ttft[skip:])])
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
