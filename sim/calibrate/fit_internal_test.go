package calibrate

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The default fit varies the all-reduce's per-step latency only when the rows span two or
// more tensor-parallel degrees: one degree constrains a_ar + 2(TP-1)*a_hop alone.
func TestFreeParamsHopNeedsTwoDegrees(t *testing.T) {
	for _, tc := range []struct {
		tps            []int
		allReduce, hop bool
	}{
		{[]int{1}, false, false},
		{[]int{1, 2, 2}, true, false},
		{[]int{2, 4}, true, true},
		{[]int{1, 2, 8}, true, true},
	} {
		var cases []Case
		for _, tp := range tc.tps {
			cases = append(cases, Case{TP: tp})
		}
		free, err := FitOptions{}.freeParams(cases)
		require.NoError(t, err)
		assert.Equal(t, tc.allReduce, slices.Contains(free, pAllReduce), "allreduce_us for TP %v", tc.tps)
		assert.Equal(t, tc.allReduce, slices.Contains(free, pTPReserve), "tp_reserve_gib for TP %v", tc.tps)
		assert.Equal(t, tc.hop, slices.Contains(free, pHop), "allreduce_hop_us for TP %v", tc.tps)
		assert.NotContains(t, free, pFloor)
		assert.NotContains(t, free, pAttCompute)
	}
	free, err := FitOptions{Also: []string{"launch_floor_ms", "launch_floor_ms"}}.freeParams(nil)
	require.NoError(t, err)
	assert.Equal(t, 1, countOf(free, pFloor))
}

func countOf(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
