// Package radix sorts large slices of 64-bit integers by their bytes (a least-significant-
// digit radix sort): a few linear passes instead of a comparison sort's n log n comparisons.
// A run's summary sorts a million latencies several times at its end, on the path to its
// result; there the passes take about a third of slices.Sort's time (BenchmarkSort).
//
// The order is the integers' (slices.Sort's): a sorted multiset of integers is unique, so
// anything read from the sorted slice is the same either way.
package radix

import (
	"slices"

	"github.com/mosaic-sched/mosaic/internal/offheap"
)

// minLen is the shortest slice sorted by bytes; shorter ones go to slices.Sort, whose
// comparisons then cost less than the passes' counting.
const minLen = 1 << 12

// Sort sorts s in increasing order. Its scratch, as long as s, is outside the collected heap
// (offheap) and released before it returns.
func Sort[T ~int64](s []T) {
	n := len(s)
	if n < minLen {
		slices.Sort(s)
		return
	}
	buf, release := offheap.Make[T](n, n)
	defer release()
	// Flipping the sign bit orders the integers as unsigned words. One pass counts every
	// byte's values; the bytes that every element shares need no pass.
	const flip = 1 << 63
	var counts [8][256]int
	and, or := ^uint64(0), uint64(0)
	for _, v := range s {
		u := uint64(v) ^ flip
		and &= u
		or |= u
		for b := range 8 {
			counts[b][byte(u>>(8*b))]++
		}
	}
	src, dst := s, buf
	for b := range 8 {
		if byte((and^or)>>(8*b)) == 0 {
			continue // every element has the same byte here
		}
		c := &counts[b]
		at := 0
		for i, k := range c {
			c[i] = at
			at += k
		}
		shift := 8 * b
		for _, v := range src {
			i := byte((uint64(v) ^ flip) >> shift)
			dst[c[i]] = v
			c[i]++
		}
		src, dst = dst, src
	}
	if &src[0] != &s[0] {
		copy(s, src)
	}
}
