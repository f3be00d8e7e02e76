package traces_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

// gaps returns the inter-arrival times of a workload of n queries under a, in seconds.
func gaps(t *testing.T, a traces.Arrivals, n int, seed uint64) []float64 {
	t.Helper()
	wl := &traces.Workload{Queries: make([]traces.Query, n)}
	require.NoError(t, a.Apply(wl, seed))
	out := make([]float64, n)
	prev := time.Duration(0)
	for i, q := range wl.Queries {
		require.GreaterOrEqual(t, q.Arrival, prev, "arrivals are in query order")
		require.Zero(t, q.Arrival%time.Microsecond)
		out[i] = (q.Arrival - prev).Seconds()
		prev = q.Arrival
	}
	return out
}

func meanCV(xs []float64) (mean, cv float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(v/float64(len(xs)-1)) / mean
}

// The processes' statistics: the mean gap is 1/rate; Poisson gaps have CV 1, gamma gaps the
// configured CV.
func TestArrivalStatistics(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    traces.Arrivals
		cv   float64
	}{
		{"poisson", traces.Arrivals{Rate: 4}, 1},
		{"gamma bursty", traces.Arrivals{Process: traces.ArrivalsGamma, Rate: 2, CV: 3}, 3},
		{"gamma smooth", traces.Arrivals{Process: traces.ArrivalsGamma, Rate: 0.5, CV: 0.5}, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mean, cv := meanCV(gaps(t, tc.a, 40000, 7))
			assert.InEpsilon(t, 1/tc.a.Rate, mean, 0.05, "mean gap")
			assert.InEpsilon(t, tc.cv, cv, 0.08, "coefficient of variation")
		})
	}
	assert.Equal(t, gaps(t, traces.Arrivals{Rate: 3}, 100, 1), gaps(t, traces.Arrivals{Rate: 3}, 100, 1), "deterministic")
	assert.NotEqual(t, gaps(t, traces.Arrivals{Rate: 3}, 100, 1), gaps(t, traces.Arrivals{Rate: 3}, 100, 2))
	for _, g := range gaps(t, traces.Arrivals{}, 10, 1) {
		assert.Zero(t, g, "rate 0 is an offline batch")
	}
}

// A trace replays its gaps in order, scaled to the target rate (or at its own rate).
func TestTraceArrivals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv")
	require.NoError(t, os.WriteFile(path, []byte("TIMESTAMP,x\n2023-11-16 18:15:46.5,1\n2023-11-16 18:15:47.5,1\n2023-11-16 18:15:50.5,1\n"), 0o644))
	g, err := traces.ReadTimestamps(path, "TIMESTAMP")
	require.NoError(t, err)
	assert.InDeltaSlice(t, []float64{1, 3}, g, 1e-9)
	own := gaps(t, traces.Arrivals{Process: traces.ArrivalsTrace, Gaps: g}, 4, 1)
	assert.InDeltaSlice(t, []float64{1, 3, 1, 3}, own, 1e-6, "the trace's own rate, repeated")
	scaled := gaps(t, traces.Arrivals{Process: traces.ArrivalsTrace, Gaps: g, Rate: 1}, 4, 1)
	assert.InDeltaSlice(t, []float64{0.5, 1.5, 0.5, 1.5}, scaled, 1e-6, "mean gap 2 s scaled to 1 query/s")

	_, err = traces.ReadTimestamps(path, "when")
	assert.ErrorContains(t, err, `no column "when"`)
	require.NoError(t, os.WriteFile(path, []byte("TIMESTAMP\nyesterday\nnow\n"), 0o644))
	_, err = traces.ReadTimestamps(path, "TIMESTAMP")
	assert.ErrorContains(t, err, `t.csv:2: column TIMESTAMP: "yesterday" is neither seconds nor a timestamp`)
}

func TestRealTraceArrivals(t *testing.T) {
	g, err := traces.ReadTimestamps(sharedFile(t, "traces/azure_conv_2023.csv"), "TIMESTAMP")
	require.NoError(t, err)
	require.Len(t, g, 19365)
	mean, cv := meanCV(g)
	t.Logf("Azure conversation trace: mean gap %.3f s (%.2f requests/s), CV %.2f", mean, 1/mean, cv)
	assert.InDelta(t, 5.5, 1/mean, 0.5, "docs/experiments.md's 5.5 requests/s")
	scaled := gaps(t, traces.Arrivals{Process: traces.ArrivalsTrace, Gaps: g, Rate: 0.5}, 19365, 1)
	m2, cv2 := meanCV(scaled)
	assert.InEpsilon(t, 2, m2, 1e-3)
	assert.InEpsilon(t, cv, cv2, 1e-3, "scaling keeps the burstiness")
}

func TestArrivalsValidation(t *testing.T) {
	for _, tc := range []struct {
		a    traces.Arrivals
		want string
	}{
		{traces.Arrivals{Rate: -1}, "must be a non-negative number"},
		{traces.Arrivals{Process: traces.ArrivalsGamma, Rate: 1}, "positive coefficient of variation"},
		{traces.Arrivals{Process: traces.ArrivalsGamma, CV: 1}, "gamma arrivals need a positive rate"},
		{traces.Arrivals{Process: traces.ArrivalsTrace}, "need a trace"},
		{traces.Arrivals{Process: "uniform", Rate: 1}, `unknown arrival process "uniform"`},
	} {
		assert.ErrorContains(t, tc.a.Validate(), tc.want)
	}
}
