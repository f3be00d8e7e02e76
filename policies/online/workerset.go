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
