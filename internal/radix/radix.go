// Package radix sorts large slices of 64-bit integers by their bytes, in place: a most-
// significant-digit radix sort (American flag sort: each pass counts one byte's values, moves
// every element into its byte's bucket by swaps, and sorts each bucket on the next byte), so
// that it needs no scratch as long as the slice. A run's summary sorts a million latencies
// five times at its end, on the path to its result; there it takes about half of
// slices.Sort's time (BenchmarkSort). A streamed run's worker timelines sort their calls'
// entries with it too, packed into integers (policies' timeline.sortStarts).
//
// The order is the integers' (slices.Sort's): a sorted multiset of integers is unique, so
// anything read from the sorted slice is the same either way.
package radix

import "slices"

// small is the longest bucket handed to slices.Sort: below it, its comparisons cost less than
// another pass's counting.
const small = 1 << 8

// Sort sorts s in increasing order.
func Sort[T ~int64](s []T) {
	if len(s) <= small {
		slices.Sort(s)
		return
	}
	// Flipping the sign bit orders the integers as unsigned words; the passes start at the
	// highest byte in which some elements differ.
	const flip = 1 << 63
	and, or := ^uint64(0), uint64(0)
	for _, v := range s {
		u := uint64(v) ^ flip
		and &= u
		or |= u
	}
	shift := 56
	for shift > 0 && byte((and^or)>>shift) == 0 {
		shift -= 8
	}
	sortByte(s, shift)
}

// sortByte sorts s, whose elements share every byte above the one at shift, by that byte and
// then, bucket by bucket, by the ones below.
func sortByte[T ~int64](s []T, shift int) {
	const flip = 1 << 63
	digit := func(v T) byte { return byte((uint64(v) ^ flip) >> shift) }
	var counts [256]int
	for _, v := range s {
		counts[digit(v)]++
	}
	// Bucket b holds s[start[b]:end[b]]; next[b] is its first element not yet in place.
	var next, end [256]int
	at := 0
	for b, n := range counts {
		next[b] = at
		at += n
		end[b] = at
	}
	for b := range 256 {
		for next[b] < end[b] {
			v := s[next[b]]
			d := digit(v)
			if int(d) == b {
				next[b]++
				continue
			}
			// v belongs to bucket d: swap it there, and look at what came back.
			s[next[b]], s[next[d]] = s[next[d]], v
			next[d]++
		}
	}
	if shift == 0 {
		return
	}
	start := 0
	for b := range 256 {
		bucket := s[start:end[b]]
		start = end[b]
		switch {
		case len(bucket) <= 1:
		case len(bucket) <= small:
			slices.Sort(bucket)
		default:
			sortByte(bucket, shift-8)
		}
	}
}
