package offheap

import (
	"runtime"
	"testing"
	"time"
)

func TestMakeZeroedWritableAndLengths(t *testing.T) {
	for _, n := range []int{0, 1, 1000, minBytes / 8, 3 * minBytes / 8} {
		s, release := Make[time.Duration](n/2, n)
		if len(s) != n/2 || cap(s) != n {
			t.Fatalf("Make(%d, %d): len %d, cap %d", n/2, n, len(s), cap(s))
		}
		s = s[:n]
		for i := range s {
			if s[i] != 0 {
				t.Fatalf("Make(%d): word %d is %d, not zero", n, i, s[i])
			}
			s[i] = time.Duration(i) * 3
		}
		for i := range s {
			if s[i] != time.Duration(i)*3 {
				t.Fatalf("Make(%d): word %d reads %d after writing %d", n, i, s[i], i*3)
			}
		}
		// Appending past the capacity moves the slice to the heap, keeping its words.
		s = append(s, -1)
		if s[len(s)-1] != -1 || (n > 0 && s[n-1] != time.Duration(n-1)*3) {
			t.Fatalf("Make(%d): append past the capacity lost words", n)
		}
		release()
		release() // idempotent
	}
}

// A large slice is not on the collected heap: allocating and filling it leaves the heap's
// size where it was (on systems that can map memory).
func TestLargeSliceOutsideHeap(t *testing.T) {
	if _, unmap, ok := mapWords[uint64](1); !ok {
		t.Skip("this system cannot map memory: Make uses the heap")
	} else {
		unmap()
	}
	const n = 16 << 20 / 8 // 16 MiB
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, release := Make[uint64](n, n)
	defer release()
	for i := range s {
		s[i] = uint64(i)
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*8/2 {
		t.Fatalf("the heap grew by %d bytes for a %d-byte off-heap slice", grew, n*8)
	}
	if s[n-1] != n-1 {
		t.Fatalf("last word %d, want %d", s[n-1], n-1)
	}
}

func TestMakeRejectsBadSizes(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Make(2, 1) did not panic")
		}
	}()
	Make[int64](2, 1)
}
