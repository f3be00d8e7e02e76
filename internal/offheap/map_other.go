//go:build !unix

package offheap

// mapWords cannot map memory here: Make uses the heap.
func mapWords[T Word](n int) (s []T, unmap func(), ok bool) { return nil, nil, false }
