package radix

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSortMatchesSlicesSort sorts slices of every shape the passes treat differently (short
// ones, negative values, the extremes, bytes all alike, few distinct values, already sorted
// or reversed) and requires slices.Sort's result.
func TestSortMatchesSlicesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func(i int) int64{
		"latencies":  func(int) int64 { return int64(r.ExpFloat64() * 30e9) },
		"signed":     func(int) int64 { return r.Int64() - math.MaxInt64/2 },
		"extremes":   func(i int) int64 { return []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}[i%5] },
		"one value":  func(int) int64 { return 42 },
		"few values": func(int) int64 { return int64(r.IntN(3)) << 40 },
		"sorted":     func(i int) int64 { return int64(i) * 977 },
		"reversed":   func(i int) int64 { return -int64(i) * 1_000_003 },
		"low byte":   func(int) int64 { return int64(r.IntN(256)) },
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 7, small, small + 1, 3*small + 5, 100_000} {
			s := make([]time.Duration, n)
			for i := range s {
				s[i] = time.Duration(gen(i))
			}
			want := slices.Clone(s)
			slices.Sort(want)
			got := slices.Clone(s)
			Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, %d elements: not sorted as slices.Sort sorts them", name, n)
			}
		}
	}
}

// BenchmarkSort sorts a million latencies (exponential, mean 30 s, in nanoseconds) by bytes
// and with slices.Sort.
func BenchmarkSort(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]time.Duration, 1_000_000)
	for i := range src {
		src[i] = time.Duration(r.ExpFloat64() * 30e9)
	}
	s := make([]time.Duration, len(src))
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			Sort(s)
		}
	})
	b.Run("slices", func(b *testing.B) {
		for b.Loop() {
			copy(s, src)
			slices.Sort(s)
		}
	})
}
