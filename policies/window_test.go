package policies

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/spill"
)

// TestWindow checks the steady-state window on five hand-made queries. Arrivals at 0, 10, 20,
// 30, 40 s; ends at 15, 30, 60, 50, 100 s (latencies 15, 20, 40, 20, 60); first tokens 5 s
// after arrival. With a 40% warm-up the first two are left out: the window is the arrivals at
// 20, 30, 40 s (3 queries), latencies 40, 20, 60 (mean 40, median 40, p99 60), and under a
// 30 s SLO only the query of latency 20 meets it: attainment 1/3, goodput 1 per 20 s = 0.05.
// Queries ending within [20, 40] s: those ending at 30 s only (15 is before): throughput
// 1/20 = 0.05. A streamed run's tally gives the same window as the held result.
func TestWindow(t *testing.T) {
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	arr := []float64{0, 10, 20, 30, 40}
	end := []float64{15, 30, 60, 50, 100}
	res := &Result{}
	slo := SLO{E2E: 30 * time.Second}
	tally := &Tally{slo: slo, stream: true}
	// Held in an order other than arrival's: the window sorts them.
	for _, i := range []int{3, 0, 4, 1, 2} {
		q := QueryOutcome{Arrival: s(arr[i]), End: s(end[i]), FirstToken: s(arr[i] + 5)}
		res.Queries = append(res.Queries, q)
		tally.Query(q)
	}
	w := window(t, res, 0.4, slo)
	assert.Equal(t, s(20), w.Start)
	assert.Equal(t, s(40), w.End)
	assert.Equal(t, 3, w.Queries)
	assert.InDelta(t, 40, w.Latency.Mean, 1e-9)
	assert.InDelta(t, 40, w.Latency.P50, 1e-9)
	assert.InDelta(t, 60, w.Latency.P99, 1e-9)
	assert.InDelta(t, 5, w.TTFT.P99, 1e-9)
	assert.InDelta(t, 1.0/3, w.SLOAttainment, 1e-9)
	assert.InDelta(t, 0.05, w.Goodput, 1e-9)
	assert.InDelta(t, 0.05, w.Throughput, 1e-9)
	assert.Equal(t, w, window(t, &Result{tally: tally}, 0.4, SLO{}), "the streamed tally's window")

	none := window(t, res, 0.4, SLO{})
	assert.True(t, math.IsNaN(none.SLOAttainment) && math.IsNaN(none.Goodput), "no SLO, no attainment")
	all := window(t, res, 0, slo)
	assert.Equal(t, 5, all.Queries)
	assert.Equal(t, time.Duration(0), all.Start)
}

// window is res.Window, which must not fail.
func window(t *testing.T, res *Result, warmup float64, slo SLO) Window {
	t.Helper()
	w, err := res.Window(warmup, slo)
	require.NoError(t, err)
	return w
}

// TestStreamedWindowInOrder checks the window a streamed tally reads from its latencies in
// query order (arrivals in order, with ties) against the held result's, for several warm-ups,
// after the summary was computed (which must leave that order alone), and that its summary's
// latencies match the held one's: with its columns in memory, outside the heap (200,000
// queries' take a whole chunk's buffer each), and written out to files (chunks of 777 values:
// the window's and the summary's sorts merge runs).
func TestStreamedWindowInOrder(t *testing.T) {
	for _, tc := range []struct {
		queries, chunk int
	}{{1000, spill.DefaultChunk}, {200_000, spill.DefaultChunk}, {20_000, 777}} {
		t.Run(fmt.Sprint(tc.queries, "/", tc.chunk), func(t *testing.T) { checkStreamedWindow(t, tc.queries, tc.chunk) })
	}
	runtime.GC() // the columns' cleanup may run
	runtime.GC()
}

// checkStreamedWindow checks a streamed tally whose columns hold chunk values in memory
// against the held result (whose window's columns hold the default chunk).
func checkStreamedWindow(t *testing.T, queries, chunk int) {
	r := rand.New(rand.NewPCG(3, 4))
	slo := SLO{E2E: 40 * time.Second, TTFT: 20 * time.Second}
	res := &Result{}
	tally := &Tally{slo: slo, stream: true}
	defer func(c int) { spillChunk = c }(spillChunk)
	spillChunk = chunk
	tally.makeColumns()
	spillChunk = spill.DefaultChunk
	at := time.Duration(0)
	for i := range queries {
		if r.IntN(4) > 0 {
			at += time.Duration(r.Int64N(int64(3 * time.Second)))
		}
		q := QueryOutcome{Arrival: at, FirstToken: at + time.Duration(r.Int64N(int64(30*time.Second))), Queue: time.Duration(r.Int64N(int64(time.Second)))}
		q.End = q.FirstToken + time.Duration(r.Int64N(int64(30*time.Second)))
		res.Queries = append(res.Queries, q)
		tally.Query(q)
		if i%(queries/4) == 0 {
			runtime.GC()
		}
	}
	assert.Equal(t, chunk < queries, tally.cols.lat.Filed() > 0, "the latencies were written out")
	streamed := &Result{tally: tally}
	require.NoError(t, streamed.Settle())
	held := res.Summary()
	runtime.GC()
	got := streamed.Summary()
	assert.Equal(t, held.Latency, got.Latency)
	assert.Equal(t, held.TTFT, got.TTFT)
	assert.Equal(t, held.Queue, got.Queue)
	// (Printed: NaNs, of a one-query window's rates, compare equal so.)
	for _, warmup := range []float64{0, 0.2, 0.5, 0.999} {
		want := window(t, res, warmup, slo)
		assert.Equal(t, fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", window(t, streamed, warmup, SLO{})), "warm-up %v", warmup)
		if warmup < 0.9 {
			assert.Positive(t, want.Throughput, "warm-up %v", warmup)
			assert.Positive(t, want.SLOAttainment, "warm-up %v", warmup)
		}
	}
	assert.Equal(t, fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", streamed.Summary()), "the summary a second time")
}

// TestStatsOfMatchesTheFormula checks the latency summaries, folded a block at a time, against
// the formula written out: the seconds summed in increasing order over the count (the same
// bits), and the values at ceil(q*n)-1, for counts from one and blocks that start at the
// ranks.
func TestStatsOfMatchesTheFormula(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// A duration whose seconds, as Duration.Seconds works them out, are not its nanoseconds
	// over 1e9 (a bit apart): a one-query summary must give the former.
	odd := time.Duration(0)
	for v := time.Duration(1_000_000_001); odd == 0; v += 7 {
		if v.Seconds() != float64(v)/1e9 {
			odd = v
		}
	}
	for _, n := range []int{1, 2, 3, 10, 100, 1001} {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(r.Int64N(int64(200 * time.Second)))
		}
		if n == 1 {
			d[0] = odd
		}
		slices.Sort(d)
		sum := 0.0
		for _, v := range d {
			sum += float64(v/time.Second) + float64(v%time.Second)/1e9 // Duration.Seconds
		}
		at := func(q float64) float64 { return d[min(n-1, max(0, int(math.Ceil(q*float64(n)))-1))].Seconds() }
		want := LatencyStats{Mean: sum / float64(n), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: d[n-1].Seconds()}
		for _, block := range []int{1, 2, 3, 7, n} {
			var a statsOf
			a.start(n)
			for i := 0; i < n; i += block {
				a.add(d[i:min(n, i+block)])
			}
			assert.Equal(t, want, a.stats(), "n=%d, blocks of %d", n, block)
		}
		assert.Equal(t, want, latencyStats(slices.Clone(d)), "n=%d", n)
	}
}

// TestSettleBesideTheWindow settles a streamed result while its window is read on another
// goroutine, as mosaic sim does, with its columns written out (go test -race).
func TestSettleBesideTheWindow(t *testing.T) {
	defer func(c int) { spillChunk = c }(spillChunk)
	spillChunk = 777
	r := rand.New(rand.NewPCG(7, 8))
	slo := SLO{E2E: 40 * time.Second}
	res, tally := &Result{}, &Tally{slo: slo, stream: true}
	at := time.Duration(0)
	for range 10_000 {
		at += time.Duration(r.Int64N(int64(time.Second)))
		q := QueryOutcome{Arrival: at, FirstToken: at + time.Duration(r.Int64N(int64(20*time.Second)))}
		q.End = q.FirstToken + time.Duration(r.Int64N(int64(30*time.Second)))
		res.Queries = append(res.Queries, q)
		tally.Query(q)
	}
	spillChunk = spill.DefaultChunk
	streamed := &Result{tally: tally}
	var w Window
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, werr = streamed.Window(0.2, SLO{})
	}()
	require.NoError(t, streamed.Settle())
	<-done
	require.NoError(t, werr)
	assert.Equal(t, fmt.Sprintf("%+v", window(t, res, 0.2, slo)), fmt.Sprintf("%+v", w))
	held := res.Summary()
	assert.Equal(t, held.Latency, streamed.Summary().Latency)
}
