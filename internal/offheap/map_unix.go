//go:build unix

package offheap

import (
	"syscall"
	"unsafe"
)

// mapWords maps n zero words of anonymous private memory: the system commits a page when it
// is first written, so unused capacity costs no resident memory.
func mapWords[T Word](n int) (s []T, unmap func(), ok bool) {
	b, err := syscall.Mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), func() { _ = syscall.Munmap(b) }, true
}
