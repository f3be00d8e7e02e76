package online

import (
	"math/bits"

	"github.com/mosaic-sched/mosaic/policies"
)

// workerSet is a set of workers by ID, a bit each, visited in ID order (bit b of word i is
// worker 64i+b).
type workerSet []uint64

// newWorkerSet returns an empty set for workers 0 to n-1.
func newWorkerSet(n int) workerSet { return make(workerSet, (n+63)/64) }

// put adds worker id to the set when in holds, else removes it.
func (s workerSet) put(id policies.WorkerID, in bool) {
	w, bit := int(id)>>6, uint64(1)<<(uint(id)&63)
	if in {
		s[w] |= bit
	} else {
		s[w] &^= bit
	}
}

// has reports whether worker id is in the set.
func (s workerSet) has(id policies.WorkerID) bool { return s[int(id)>>6]&(1<<(uint(id)&63)) != 0 }

// next returns the smallest worker ID at or after from in the set, or -1 when there is none.
func (s workerSet) next(from int) int {
	i := from >> 6
	if i >= len(s) {
		return -1
	}
	if word := s[i] >> (uint(from) & 63); word != 0 {
		return from + bits.TrailingZeros64(word)
	}
	for i++; i < len(s); i++ {
		if s[i] != 0 {
			return i<<6 + bits.TrailingZeros64(s[i])
		}
	}
	return -1
}

// any reports whether the set has a member.
func (s workerSet) any() bool {
	for _, w := range s {
		if w != 0 {
			return true
		}
	}
	return false
}

// or adds t's members to s (a set of as many workers).
func (s workerSet) or(t workerSet) {
	for i := range s {
		s[i] |= t[i]
	}
}

// and keeps in s only t's members (a set of as many workers).
func (s workerSet) and(t workerSet) {
	for i := range s {
		s[i] &= t[i]
	}
}
