package traces_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

func TestLogNormalMatchesMeanAndP99(t *testing.T) {
	l, err := traces.NewLogNormal(3000, 16000, 1, 1<<30)
	require.NoError(t, err)
	assert.InDelta(t, 3000, math.Exp(l.Mu+l.Sigma*l.Sigma/2), 1e-6)
	assert.InDelta(t, 16000, math.Exp(l.Mu+2.3263478740408408*l.Sigma), 1e-6)

	// Empirically too, on a large draw without truncation.
	r := sim.Stream(1, "t")
	xs := make([]float64, 200000)
	sum := 0.0
	for i := range xs {
		xs[i] = float64(l.Sample(r))
		sum += xs[i]
	}
	assert.InDelta(t, 3000, sum/float64(len(xs)), 60)

	_, err = traces.NewLogNormal(100, 5000, 1, 10000)
	assert.ErrorContains(t, err, "too large for a lognormal")
	_, err = traces.NewLogNormal(100, 90, 1, 10000)
	assert.ErrorContains(t, err, "must be larger than the mean")
}

func TestTruncation(t *testing.T) {
	l, err := traces.NewLogNormal(3000, 16000, 10, 4000)
	require.NoError(t, err)
	r := sim.Stream(2, "t")
	for i := 0; i < 10000; i++ {
		v := l.Sample(r)
		require.GreaterOrEqual(t, v, 10)
		require.LessOrEqual(t, v, 4000)
	}
}
