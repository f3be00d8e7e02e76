// Package offheap allocates large slices of plain words outside the collected heap: memory a
// long run must hold to its end (a million queries' latencies), which the collector would
// otherwise count as live heap and let as much garbage again build up beside before it
// collects (GOGC=100 doubles the heap it paces on).
//
// Where the system cannot map memory (or for small slices) Make falls back to the heap.
package offheap

import "sync"

// Word is what an off-heap slice can hold: a plain 64-bit integer, which holds no pointer
// the collector would have to see.
type Word interface{ ~int64 | ~uint64 }

// minBytes is the smallest slice Make maps outside the heap; smaller ones are not worth a
// system call.
const minBytes = 1 << 20

// Make returns a slice of length zero words and room for capacity, and the function that
// releases its memory. Until release is called the slice is valid as any other; after it,
// neither it nor any slice of it may be used (release is idempotent). A slice appended past
// its capacity moves to the heap, as any slice does.
func Make[T Word](length, capacity int) (s []T, release func()) {
	if length < 0 || capacity < length {
		panic("offheap: length and capacity out of range")
	}
	if bytes := capacity * 8; capacity > 0 && bytes >= minBytes && bytes/8 == capacity {
		if s, unmap, ok := mapWords[T](capacity); ok {
			var once sync.Once
			return s[:length], func() { once.Do(unmap) }
		}
	}
	return make([]T, length, capacity), func() {}
}

// Releaser collects the release functions of a value's off-heap slices, to run them all
// once the value is no longer used (see runtime.AddCleanup).
type Releaser []func()

// Release runs every release function once.
func (r Releaser) Release() {
	for _, f := range r {
		f()
	}
}
