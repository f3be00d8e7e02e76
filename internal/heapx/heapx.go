// Package heapx is a binary min-heap kept in a slice of a concrete type. container/heap
// passes elements through an interface, which allocates on every push and pop: on the
// simulator's hot paths (the Driver's timers, the online policy's queues) that is an
// allocation per call.
package heapx

// Push adds x to the heap h ordered by less and returns the heap.
func Push[T any](h []T, x T, less func(a, b *T) bool) []T {
	h = append(h, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// Pop removes the least element of the non-empty heap h and returns the heap and the element.
func Pop[T any](h []T, less func(a, b *T) bool) ([]T, T) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	var zero T
	h[n] = zero // the slot is beyond the heap now: let go of what it references
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && less(&h[c+1], &h[c]) {
			c++
		}
		if !less(&h[c], &h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return h, top
}
