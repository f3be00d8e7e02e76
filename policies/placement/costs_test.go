package placement_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies/placement"
)

func TestBreakpoints(t *testing.T) {
	assert.Equal(t, []int{1}, placement.Breakpoints(1))
	assert.Equal(t, []int{1, 2, 4, 5}, placement.Breakpoints(5))
	assert.Equal(t, []int{1, 2, 4, 8, 16, 32, 64, 100}, placement.Breakpoints(100))
}

// The offline profile: serving more calls takes longer, but less per call (batching), and the
// longest call bounds it from below.
func TestProfileCurve(t *testing.T) {
	p := expertProblem(t, 6, 4)
	for _, it := range p.Items {
		c := it.Curve
		for i := 1; i < len(c.X); i++ {
			require.GreaterOrEqual(t, c.T[i], c.T[i-1], "%s: more calls never take less time", it.Name)
			perCall := func(k int) float64 { return c.T[k] / float64(c.X[k]) }
			if c.X[i] <= 256 {
				assert.Less(t, perCall(i), perCall(i-1), "%s: batching amortises up to max_num_seqs", it.Name)
			}
		}
	}
	// A reasoning model's single call takes far longer than an instruction model's.
	assert.Greater(t, p.Items[0].Curve.T[0], 5*p.Items[2].Curve.T[0])
}
