package spill

import (
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAFullDiskKeepsValuesInMemory makes the files refuse writes past 112 bytes (the process's
// file-size limit: Go ignores the signal, so a write fails with EFBIG, as on a full disk) and
// checks that the column keeps its values and Sorted sorts them in memory rather than fail.
func TestAFullDiskKeepsValuesInMemory(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	limit := old
	limit.Cur = 112 // 14 values: two chunks of 7
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old))
		}
	}
	defer restore()
	vals := values(100, 8)
	c := column(t, 7, t.TempDir(), vals, true)
	require.True(t, c.stuck, "the third chunk could not be written")
	require.Equal(t, 14, c.Filed())
	var got []int64
	require.NoError(t, Sorted(c, 0, func(b []int64) { got = append(got, b...) }))
	restore()
	require.Equal(t, slices.Sorted(slices.Values(vals)), got)
	require.Equal(t, vals, readAll(t, c, 0))
}
