package sparse_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/sparse"
)

// TestSliceMatchesSlice: a sparse slice reads as a plain slice grown with the fill value, under
// random sets, and holds only the pages with a value other than the fill.
func TestSliceMatchesSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := sparse.Slice[float64]{Fill: -1}
	want := make([]float64, 50000)
	for i := range want {
		want[i] = -1
	}
	for step := range 200000 {
		// A moving band of indices, as IDs in flight move up, with strays behind and ahead.
		i := step/5 + r.IntN(3000) - 1500
		if r.IntN(100) == 0 {
			i = r.IntN(len(want))
		}
		i = max(0, min(len(want)-1, i))
		v := -1.0
		if r.IntN(2) == 0 {
			v = float64(r.IntN(10))
		}
		s.Set(i, v)
		want[i] = v
		j := r.IntN(len(want))
		require.Equal(t, want[j], s.Get(j), "index %d", j)
	}
	pages := map[int]bool{}
	for i, v := range want {
		require.Equal(t, v, s.Get(i), "index %d", i)
		if v != -1 {
			pages[i>>10] = true
		}
	}
	require.Equal(t, len(pages), s.Pages())
	require.Equal(t, -1.0, s.Get(1<<30), "far beyond")
	// IDs far apart keep pages apart, not a run between them.
	s.Set(1<<40, 7)
	s.Set(3, 8)
	require.Equal(t, 7.0, s.Get(1<<40))
	require.Equal(t, 8.0, s.Get(3))
	s.Set(1<<40, -1)
	require.Equal(t, -1.0, s.Get(1<<40))
	pages[0] = true
	require.Equal(t, len(pages), s.Pages())
}
