package results_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/results"
)

// A streamed table's sections, written side by side, join in order into the bytes WriteCSV
// writes for the same rows; nothing is in place before Commit, and no temporary file stays.
func TestStreamJoinsSections(t *testing.T) {
	dir := t.TempDir()
	d, err := results.Open(dir, "test")
	require.NoError(t, err)
	defer d.Close()
	rows := [][]results.CallRow{
		{call("a", 0, "done"), call("a", 1, "failed")},
		{},
		{call("c", 2, "done"), call("c, \"quoted\"", 3, "cancelled"), call("c", 4, "done")},
	}
	s, err := results.OpenStream(d, results.Calls, len(rows))
	require.NoError(t, err)
	// The last section first: order of writing does not matter.
	for i := len(rows) - 1; i >= 0; i-- {
		for _, r := range rows[i] {
			require.NoError(t, s.Section(i).Add(r))
		}
	}
	_, err = os.Stat(filepath.Join(dir, "calls.csv"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing in place before Commit")
	require.NoError(t, s.Commit())
	var all []results.CallRow
	for _, r := range rows {
		all = append(all, r...)
	}
	var want bytes.Buffer
	require.NoError(t, results.WriteCSV(&want, results.CallHeader, all))
	got, err := os.ReadFile(filepath.Join(dir, "calls.csv"))
	require.NoError(t, err)
	require.Equal(t, want.String(), string(got))
	back, err := results.ReadCallsCSV(filepath.Join(dir, "calls.csv"))
	require.NoError(t, err)
	require.Len(t, back, len(all))
	left, err := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// Abort, or the folder's Close, removes what a stream wrote and leaves the table as it was.
func TestStreamAbort(t *testing.T) {
	dir := t.TempDir()
	d, err := results.Open(dir, "test")
	require.NoError(t, err)
	require.NoError(t, results.Write(d, results.Queries, slices.Values([]results.QueryRow{{Policy: "old"}})))
	before, err := os.ReadFile(filepath.Join(dir, "queries.csv"))
	require.NoError(t, err)
	s, err := results.OpenStream(d, results.Queries, 2)
	require.NoError(t, err)
	require.NoError(t, s.Section(1).Add(results.QueryRow{Policy: "p", Query: 1}))
	s.Abort()
	c, err := results.OpenStream(d, results.Calls, 3)
	require.NoError(t, err)
	require.NoError(t, c.Section(2).Add(call("p", 1, "done")))
	require.NoError(t, d.Close())
	left, err := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	require.NoError(t, err)
	require.Empty(t, left)
	after, err := os.ReadFile(filepath.Join(dir, "queries.csv"))
	require.NoError(t, err)
	require.Equal(t, before, after)
	_, err = os.Stat(filepath.Join(dir, "calls.csv"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
