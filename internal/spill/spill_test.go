package spill

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// values are n values with duplicates and negatives.
func values(n int, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]int64, n)
	for i := range v {
		v[i] = rng.Int64N(41) - 20
		if i%5 == 0 {
			v[i] = rng.Int64()
		}
	}
	return v
}

func column(t *testing.T, chunk int, dir string, vals []int64, keepRuns bool) *Column[int64] {
	t.Helper()
	c := New[int64](chunk, dir)
	if keepRuns {
		c.KeepRuns()
	}
	t.Cleanup(c.Release)
	for _, v := range vals {
		c.Append(v)
	}
	return c
}

func readAll(t *testing.T, c *Column[int64], from int) []int64 {
	t.Helper()
	var got []int64
	r := c.Reader(from)
	for v, ok := r.Next(); ok; v, ok = r.Next() {
		got = append(got, v)
	}
	require.NoError(t, r.Err())
	return got
}

func TestColumnReadsBackWhatWasAppended(t *testing.T) {
	for _, n := range []int{0, 1, 6, 7, 8, 14, 15, 100, 3*blockLen + 5} {
		vals := values(n, uint64(n))
		c := column(t, 7, t.TempDir(), vals, n%2 == 0)
		require.Equal(t, n, c.Len())
		assert.Equal(t, n/7*7, c.Filed(), "n=%d: whole chunks go to the file", n)
		for _, from := range []int{0, 1, 6, 7, n / 2, n - 1, n} {
			if from < 0 {
				continue
			}
			want := vals[min(from, n):]
			got := readAll(t, c, from)
			assert.Equal(t, len(want), len(got), "n=%d from=%d", n, from)
			if len(want) > 0 {
				assert.Equal(t, want, got, "n=%d from=%d", n, from)
			}
		}
		for i := range vals {
			v, err := c.At(i)
			require.NoError(t, err)
			require.Equal(t, vals[i], v, "n=%d: value %d", n, i)
		}
	}
}

// TestSortedMatchesASort checks Sorted against a sort of the values, from several places, for
// columns in memory, written out (sorted at the end, in runs of a chunk), and written out
// with their sorted runs kept (merged with the rest: the part of a chunk before the first whole
// one from the start on, and the buffer).
func TestSortedMatchesASort(t *testing.T) {
	for _, keepRuns := range []bool{false, true} {
		for _, chunk := range []int{1, 7, 1000} {
			// 4100 less 3 is one more than a merged block (blockLen).
			for _, n := range []int{0, 1, 7, 8, 50, 999, 1001, blockLen + 4, 3*blockLen + 5} {
				vals := values(n, uint64(n*31+chunk))
				c := column(t, chunk, t.TempDir(), vals, keepRuns)
				if keepRuns {
					assert.Equal(t, c.Filed(), c.ran, "every chunk written out has its run")
				}
				for _, from := range []int{0, 3, n / 3, chunk, n} {
					if from > n {
						continue
					}
					var got []int64
					require.NoError(t, Sorted(c, from, func(b []int64) { got = append(got, b...) }))
					want := slices.Sorted(slices.Values(vals[from:]))
					assert.Equal(t, len(want), len(got), "runs %v chunk=%d n=%d from=%d", keepRuns, chunk, n, from)
					if len(want) > 0 {
						assert.Equal(t, want, got, "runs %v chunk=%d n=%d from=%d", keepRuns, chunk, n, from)
					}
				}
			}
		}
	}
}

// sortedFrom is what Sorted hands visit, checked against a sort.
func checkSorted(t *testing.T, c *Column[int64], vals []int64, what string) {
	t.Helper()
	for _, from := range []int{0, 1, 3, 7, 8, 15, len(vals) / 2, len(vals) - 1} {
		var got []int64
		require.NoError(t, Sorted(c, from, func(b []int64) { got = append(got, b...) }), "%s from %d", what, from)
		require.Equal(t, slices.Sorted(slices.Values(vals[from:])), got, "%s from %d", what, from)
	}
}

// TestSortedAfterTheDiskFailed checks Sorted on columns that stopped writing part way: one
// whose runs stopped (kept for the first chunks only, more than two chunks after them) and one
// that could write nothing more (its later values in memory).
func TestSortedAfterTheDiskFailed(t *testing.T) {
	for _, stop := range []int{0, 7, 21} {
		vals := values(100, uint64(stop))
		for _, fail := range []struct {
			what  string
			stop  func(c *Column[int64])
			wrote func(c *Column[int64]) int
		}{
			// as sortRun does when a run cannot be written
			{"runs stopped", func(c *Column[int64]) { c.keepRuns = false }, func(c *Column[int64]) int { return c.ran }},
			// as spill does when the file cannot be written
			{"stuck", func(c *Column[int64]) { c.stuck = true }, (*Column[int64]).Filed},
		} {
			c := New[int64](7, t.TempDir())
			c.KeepRuns()
			t.Cleanup(c.Release)
			for i, v := range vals {
				if i == stop {
					fail.stop(c)
				}
				c.Append(v)
			}
			require.Equal(t, stop/7*7, fail.wrote(c), "%s at %d", fail.what, stop)
			checkSorted(t, c, vals, fmt.Sprint(fail.what, " at ", stop))
		}
	}
}

// TestConcurrentReads reads a written-out column from several goroutines at once, as a run's
// summary and its steady-state window do (go test -race).
func TestConcurrentReads(t *testing.T) {
	vals := values(1000, 5)
	c := column(t, 7, t.TempDir(), vals, true)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			from := g * 13
			var got []int64
			assert.NoError(t, Sorted(c, from, func(b []int64) { got = append(got, b...) }))
			assert.Equal(t, slices.Sorted(slices.Values(vals[from:])), got)
			r := c.Reader(from)
			for i := from; ; i++ {
				v, ok := r.Next()
				if !ok {
					break
				}
				assert.Equal(t, vals[i], v)
			}
			v, err := c.At(g)
			assert.NoError(t, err)
			assert.Equal(t, vals[g], v)
		})
	}
	wg.Wait()
}

func TestAColumnWithoutADirectoryKeepsItsValuesInMemory(t *testing.T) {
	vals := values(100, 9)
	c := column(t, 7, filepath.Join(t.TempDir(), "missing"), vals, true)
	assert.Zero(t, c.Filed(), "nothing could be written")
	assert.Equal(t, vals, readAll(t, c, 0))
	var got []int64
	require.NoError(t, Sorted(c, 10, func(b []int64) { got = append(got, b...) }), "sorted in memory")
	assert.Equal(t, slices.Sorted(slices.Values(vals[10:])), got)
}

func TestAFailedReadIsAnError(t *testing.T) {
	c := column(t, 7, t.TempDir(), values(50, 3), false)
	require.NoError(t, c.f.Close()) // the file goes away under the column
	r := c.Reader(0)
	_, ok := r.Next()
	assert.False(t, ok)
	assert.ErrorContains(t, r.Err(), "reading values 0-")
	_, err := c.At(3)
	assert.ErrorContains(t, err, "reading values 3-3 back")
	assert.ErrorContains(t, Sorted(c, 0, func([]int64) {}), "reading values")
	c.f = nil // closed above
}

// BenchmarkSorted sorts a million values, as a run's summary sorts a million queries'
// latencies: in memory (a chunk holds them all) and merged from runs written out to a file.
func BenchmarkSorted(b *testing.B) {
	const n = 1_000_000
	vals := values(n, 1)
	for _, tc := range []struct {
		chunk    int
		keepRuns bool
	}{{1 << 20, false}, {1 << 17, false}, {1 << 17, true}, {1 << 14, true}} {
		b.Run(fmt.Sprint("chunk=", tc.chunk, "/runs=", tc.keepRuns), func(b *testing.B) {
			c := New[int64](tc.chunk, b.TempDir())
			if tc.keepRuns {
				c.KeepRuns()
			}
			defer c.Release()
			for _, v := range vals {
				c.Append(v)
			}
			b.ResetTimer()
			for range b.N {
				sum := int64(0)
				if err := Sorted(c, 0, func(s []int64) { sum += s[len(s)-1] }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppend appends a million values, written out a chunk at a time.
func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		chunk    int
		keepRuns bool
	}{{1 << 20, false}, {1 << 17, false}, {1 << 17, true}} {
		b.Run(fmt.Sprint("chunk=", tc.chunk, "/runs=", tc.keepRuns), func(b *testing.B) {
			dir := b.TempDir()
			for range b.N {
				c := New[int64](tc.chunk, dir)
				if tc.keepRuns {
					c.KeepRuns()
				}
				for i := range 1_000_000 {
					c.Append(int64(i))
				}
				c.Release()
			}
		})
	}
}
