package policies

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/mosaic-sched/mosaic/internal/spill"
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
// was given (Driver.Stream) whatever o says, reading back what its run wrote out of memory (the
// error is one reading it); a held one folds its queries, in order of arrival, as a streamed
// run's tally would.
func (r *Result) Window(warmup float64, o SLO) (Window, error) {
	if r.tally != nil {
		return r.tally.window(warmup)
	}
	qs := slices.Clone(r.Queries)
	slices.SortStableFunc(qs, func(a, b QueryOutcome) int { return cmp.Compare(a.Arrival, b.Arrival) })
	t := &Tally{slo: o, stream: true}
	for _, q := range qs {
		t.Query(q)
	}
	defer t.release()
	return t.window(warmup)
}

// release frees a streamed tally's columns at once (they are otherwise freed once it is
// unreachable).
func (t *Tally) release() {
	if t.cols != nil {
		t.cols.release()
	}
}

// window is the steady-state window of a streamed tally's queries, leaving out the warmup
// share, read from the queries' latencies in query order, whose arrivals a streamed workload
// keeps in order (otherwise it reads a copy in order of arrival).
func (t *Tally) window(warmup float64) (Window, error) {
	defer runtime.KeepAlive(t) // its columns may be off the heap (columns)
	c := t.cols
	if c == nil {
		return Window{SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}, nil
	}
	n := c.arrival.Len()
	if sorted, err := inOrder(c.arrival); err != nil {
		return Window{}, err
	} else if !sorted {
		s, err := t.byArrival()
		if err != nil {
			return Window{}, err
		}
		defer s.release()
		return s.window(warmup)
	}
	skip := int(math.Ceil(warmup * float64(n)))
	if skip >= n {
		return Window{SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}, nil
	}
	start, err := c.arrival.At(skip)
	if err != nil {
		return Window{}, err
	}
	end, err := c.arrival.At(n - 1)
	if err != nil {
		return Window{}, err
	}
	w := Window{Start: start, End: end, Queries: n - skip, SLOAttainment: nan(), Goodput: nan(), Throughput: nan()}
	// Seconds keep the durations' order, so these are NewLatencyStats of the seconds.
	if w.Latency, err = sortedStats(c.lat, skip); err != nil {
		return Window{}, err
	}
	if w.TTFT, err = sortedStats(c.ttft, skip); err != nil {
		return Window{}, err
	}
	met := 0
	for i := skip; i < n; i++ {
		if t.metAt(i) {
			met++
		}
	}
	if span := (w.End - w.Start).Seconds(); span > 0 {
		done := 0
		arr, lat := c.arrival.Reader(0), c.lat.Reader(0)
		for {
			a, ok := arr.Next()
			l, ok2 := lat.Next()
			if !ok || !ok2 {
				break
			}
			if end := a + l; end >= w.Start && end <= w.End {
				done++
			}
		}
		if err := cmp.Or(arr.Err(), lat.Err()); err != nil {
			return Window{}, err
		}
		w.Throughput = float64(done) / span
	}
	if t.slo.Set() {
		w.SLOAttainment = float64(met) / float64(n-skip)
		if span := (w.End - w.Start).Seconds(); span > 0 {
			w.Goodput = float64(met) / span
		}
	}
	return w, nil
}

// inOrder reports whether a column's values never decrease.
func inOrder(c *spill.Column[time.Duration]) (bool, error) {
	r := c.Reader(0)
	prev, ok := r.Next()
	for b := r.Block(); ok && b != nil; b = r.Block() {
		if b[0] < prev || !slices.IsSorted(b) {
			return false, nil
		}
		prev = b[len(b)-1]
	}
	return true, r.Err()
}

// byArrival is what a window reads of the tally (arrivals, latencies, times to first token,
// SLO bits), its queries in order of arrival (stable). It reads the columns into memory: a
// streamed workload's arrivals come in order, and this is for those that do not.
func (t *Tally) byArrival() (*Tally, error) {
	c := t.cols
	var arrival, lat, ttft []time.Duration
	var err error
	for _, col := range []struct {
		c   *spill.Column[time.Duration]
		out *[]time.Duration
	}{{c.arrival, &arrival}, {c.lat, &lat}, {c.ttft, &ttft}} {
		if *col.out, err = col.c.Reader(0).AppendRest(nil); err != nil {
			return nil, err
		}
	}
	order := make([]int, len(arrival))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(arrival[a], arrival[b]) })
	s := &Tally{slo: t.slo, stream: true}
	for _, i := range order {
		s.addStreamed(lat[i], ttft[i], 0, arrival[i], t.metAt(i))
	}
	return s, nil
}
