// Package spill keeps long columns of 64-bit integers (a value per query of a run that may be
// tens of millions of queries long) in memory that does not grow with them: the newest values
// in a buffer outside the collected heap, the older ones in an unlinked temporary file, read
// back in order (Reader) and sorted by merging sorted runs (Sorted).
//
// A column whose values fit in one chunk never touches the disk. Where a file cannot be
// written (no temporary directory, a full disk) a column keeps its values in memory instead and
// logs why, once; only a failed read of values written out is an error.
package spill

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"unsafe"

	"github.com/mosaic-sched/mosaic/internal/offheap"
	"github.com/mosaic-sched/mosaic/internal/radix"
)

// DefaultChunk is how many values a column holds in memory before it writes them out, and the
// length of the runs Sorted merges: 1 MiB of values. A run's hundred thousand queries'
// latencies stay in memory; a million go to disk in eight chunks, and, kept in sorted runs
// (KeepRuns), merge in about a third of the time a sort of them all in memory takes
// (BenchmarkSorted).
const DefaultChunk = 1 << 17

// blockLen is how many values a Reader reads from a file at a time (32 KiB).
const blockLen = 4096

// Int is what a column holds: a plain 64-bit integer (a time.Duration, say).
type Int interface{ ~int64 }

// Column is an append-only column of values. Appends are not safe for concurrent use; once
// they are done, any number of Readers and Sorted calls may read it at once.
type Column[T Int] struct {
	chunk int
	dir   string
	// buf holds the values after the filed ones (off the heap; release frees it).
	buf     []T
	release func()
	// f holds the first filed values; name is its path while it could not be unlinked.
	f     *os.File
	name  string
	filed int
	// stuck says a write failed: from then on buf keeps every value, growing on the heap.
	stuck bool
	// With keepRuns, each chunk written out is also written sorted, at the same place in
	// runs, sorted in scratch: the first ran values are in sorted runs of a chunk each.
	keepRuns bool
	runs     *Column[T]
	scratch  []T
	freeScr  func()
	ran      int
}

// New returns an empty column that holds up to chunk values in memory and writes older ones
// to a temporary file in dir ("" for os.TempDir, which $TMPDIR sets).
func New[T Int](chunk int, dir string) *Column[T] {
	if chunk < 1 {
		panic("spill: a chunk holds at least one value")
	}
	return &Column[T]{chunk: chunk, dir: dir}
}

// KeepRuns makes the column write each chunk it writes out a second time, sorted, so that
// Sorted merges them instead of sorting them: the sorting is done as the values come (on the
// appending goroutine), not when they are wanted. Call it before the first Append.
func (c *Column[T]) KeepRuns() { c.keepRuns = true }

// Len is the number of values appended.
func (c *Column[T]) Len() int { return c.filed + len(c.buf) }

// Filed is the number of values written out to the column's file.
func (c *Column[T]) Filed() int { return c.filed }

// Append adds v at the end.
func (c *Column[T]) Append(v T) {
	if c.buf == nil {
		c.buf, c.release = offheap.Make[T](0, c.chunk)
	}
	c.buf = append(c.buf, v)
	if len(c.buf) == c.chunk && !c.stuck {
		c.spill()
	}
}

// spill writes the buffered values out, or, when the file cannot be made or written, keeps
// them (and every later one) in memory.
func (c *Column[T]) spill() {
	if c.f == nil {
		f, name, err := tempFile(c.dir)
		if err != nil {
			c.keep(err)
			return
		}
		c.f, c.name = f, name
	}
	if _, err := c.f.WriteAt(bytesOf(c.buf), int64(c.filed)*8); err != nil {
		c.keep(err) // an *os.PathError: it names the file
		return
	}
	if c.keepRuns && c.ran == c.filed {
		c.sortRun()
	}
	c.filed += len(c.buf)
	c.buf = c.buf[:0]
}

// sortRun writes the buffered chunk, about to be filed, sorted to the runs' file, or, where it
// cannot, stops keeping runs (Sorted then sorts the rest when asked).
func (c *Column[T]) sortRun() {
	if c.runs == nil {
		f, name, err := tempFile(c.dir)
		if err != nil {
			c.keepRuns = false
			slog.Warn("could not make a temporary file for sorted runs; sorting when asked", "err", err)
			return
		}
		c.runs = &Column[T]{f: f, name: name}
		c.scratch, c.freeScr = offheap.Make[T](0, c.chunk)
	}
	s := append(c.scratch[:0], c.buf...)
	radix.Sort(s)
	if _, err := c.runs.f.WriteAt(bytesOf(s), int64(c.filed)*8); err != nil {
		c.keepRuns = false
		slog.Warn("could not write a sorted run; sorting when asked", "err", err)
		return
	}
	c.ran += len(s)
	c.runs.filed = c.ran
}

// keep logs why values stay in memory from now on.
func (c *Column[T]) keep(err error) {
	c.stuck = true
	slog.Warn("could not write values out to a temporary file; keeping them in memory", "err", err)
}

// Release frees the column's memory and file. Neither it nor its readers may be used after.
func (c *Column[T]) Release() {
	if c.release != nil {
		c.release()
		c.release = nil
	}
	c.buf = nil
	if c.freeScr != nil {
		c.freeScr()
		c.freeScr, c.scratch = nil, nil
	}
	if c.runs != nil {
		c.runs.Release()
		c.runs = nil
	}
	if c.f != nil {
		_ = c.f.Close()
		if c.name != "" {
			_ = os.Remove(c.name)
		}
		c.f = nil
	}
}

// At returns the i-th value.
func (c *Column[T]) At(i int) (T, error) {
	if i < 0 || i >= c.Len() {
		panic(fmt.Sprintf("spill: value %d of a column of %d", i, c.Len()))
	}
	if i >= c.filed {
		return c.buf[i-c.filed], nil
	}
	var v [1]T
	if err := c.readAt(v[:], i); err != nil {
		return 0, err
	}
	return v[0], nil
}

// readAt reads len(dst) filed values from the i-th on.
func (c *Column[T]) readAt(dst []T, i int) error {
	if _, err := c.f.ReadAt(bytesOf(dst), int64(i)*8); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading values %d-%d back: %w", i, i+len(dst)-1, err) // err names the file
	}
	return nil
}

// Reader reads a column's values in order.
type Reader[T Int] struct {
	c *Column[T]
	// at is the index of the next value to read in; blk holds those read in, not yet returned.
	at      int
	blk     []T
	scratch []T
	err     error
}

// Reader returns a reader of the values from the from-th on.
func (c *Column[T]) Reader(from int) *Reader[T] {
	return &Reader[T]{c: c, at: min(max(from, 0), c.Len())}
}

// Next returns the next value, or false at the end or after an error (Err).
func (r *Reader[T]) Next() (T, bool) {
	if len(r.blk) == 0 && !r.fill() {
		return 0, false
	}
	v := r.blk[0]
	r.blk = r.blk[1:]
	return v, true
}

// Block returns the next values, as many as come at once (valid until the next call), or
// none at the end or after an error (Err).
func (r *Reader[T]) Block() []T {
	if len(r.blk) == 0 && !r.fill() {
		return nil
	}
	b := r.blk
	r.blk = nil
	return b
}

// AppendRest appends the values left to read to dst.
func (r *Reader[T]) AppendRest(dst []T) ([]T, error) {
	for b := r.Block(); b != nil; b = r.Block() {
		dst = append(dst, b...)
	}
	return dst, r.Err()
}

// Err is the error that ended the reading, if any.
func (r *Reader[T]) Err() error { return r.err }

// fill reads in the next values.
func (r *Reader[T]) fill() bool {
	c := r.c
	if r.err != nil {
		return false
	}
	if r.at < c.filed {
		if r.scratch == nil {
			r.scratch = make([]T, blockLen)
		}
		b := r.scratch[:min(len(r.scratch), c.filed-r.at)]
		if r.err = c.readAt(b, r.at); r.err != nil {
			return false
		}
		r.blk, r.at = b, r.at+len(b)
		return true
	}
	if i := r.at - c.filed; i < len(c.buf) {
		r.blk, r.at = c.buf[i:], c.Len()
		return true
	}
	return false
}

// Sorted hands visit the column's values from the from-th on in increasing order, a block at
// a time (each valid only during the call). It merges the column's sorted runs (KeepRuns) with
// the rest sorted in memory; without runs, up to a chunk of values are sorted in memory, and
// more a chunk at a time into runs in a temporary file, which are then merged. Either way the
// memory it takes is at most two chunks' whatever the column's length, unless the disk fails
// it (a column that could not write out its values, a sorted run that cannot be written): all
// of them are then sorted in memory.
func Sorted[T Int](c *Column[T], from int, visit func([]T)) error {
	from = max(from, 0)
	n := c.Len() - from
	if n <= 0 {
		return nil
	}
	// The runs kept from the first whole chunk from on, and the rest: before them (part of a
	// chunk) and after them (the buffer).
	lo := (from + c.chunk - 1) / c.chunk * c.chunk
	if hi := c.ran; hi > lo && (lo-from)+(c.Len()-hi) <= 2*c.chunk {
		return sortedRuns(c, from, lo, hi, visit)
	}
	if n <= c.chunk || c.stuck {
		return sortedInMemory(c, from, n, visit)
	}
	f, name, err := tempFile(c.dir)
	if err != nil {
		slog.Warn("could not make a temporary file to sort in; sorting in memory", "err", err)
		return sortedInMemory(c, from, n, visit)
	}
	runs := &Column[T]{chunk: c.chunk, f: f, name: name}
	defer runs.Release()
	buf, release := offheap.Make[T](0, c.chunk)
	defer release()
	var rs []*Reader[T] // the sorted runs
	r := c.Reader(from)
	for {
		buf = buf[:0]
		for len(buf) < cap(buf) {
			b := r.Block()
			if b == nil {
				break
			}
			k := min(len(b), cap(buf)-len(buf))
			buf = append(buf, b[:k]...)
			r.blk = b[k:] // the reader hands what did not fit to the next run
		}
		if err := r.Err(); err != nil {
			return err
		}
		if len(buf) == 0 {
			break
		}
		radix.Sort(buf)
		if _, err := f.WriteAt(bytesOf(buf), int64(runs.filed)*8); err != nil {
			slog.Warn("could not write a sorted run to a temporary file; sorting in memory", "err", err)
			release()
			return sortedInMemory(c, from, n, visit)
		}
		rs = append(rs, runs.part(runs.filed, runs.filed+len(buf)))
		runs.filed += len(buf)
	}
	release()
	return merge(rs, visit)
}

// sortedRuns is Sorted merging the kept runs of the chunks from lo to hi with the values
// from from to lo and from hi on, sorted in memory.
func sortedRuns[T Int](c *Column[T], from, lo, hi int, visit func([]T)) error {
	rest, release := offheap.Make[T](lo-from, (lo-from)+(c.Len()-hi))
	defer release()
	if lo > from {
		if err := c.readAt(rest, from); err != nil {
			return err
		}
	}
	rest, err := c.Reader(hi).AppendRest(rest)
	if err != nil {
		return err
	}
	radix.Sort(rest)
	var rs []*Reader[T]
	for at := lo; at < hi; at += c.chunk {
		rs = append(rs, c.runs.part(at, at+c.chunk))
	}
	if len(rest) > 0 {
		rs = append(rs, (&Column[T]{buf: rest}).Reader(0))
	}
	return merge(rs, visit)
}

// part is a reader of a file's values from lo to hi.
func (c *Column[T]) part(lo, hi int) *Reader[T] {
	return (&Column[T]{f: c.f, filed: hi}).Reader(lo)
}

// sortedInMemory is Sorted of n values, in one buffer.
func sortedInMemory[T Int](c *Column[T], from, n int, visit func([]T)) error {
	buf, release := offheap.Make[T](0, n)
	defer release()
	buf, err := c.Reader(from).AppendRest(buf)
	if err != nil {
		return err
	}
	radix.Sort(buf)
	visit(buf)
	return nil
}

// merge hands visit the values the readers read, each in increasing order, in increasing
// order: a binary heap of the readers by their next values (each reader's next value kept
// beside it, the heap holding their indices). The heap is its own, not internal/heapx's: a
// merge replaces the top once a value and sifts it down, where heapx pops and pushes through
// a comparison function; a first form with swapped cursors took about 49 ns a value, this one
// merges 8 runs of a million in 16-17.5 ms (BenchmarkSorted).
func merge[T Int](rs []*Reader[T], visit func([]T)) error {
	if len(rs) == 1 {
		r := rs[0]
		for b := r.Block(); b != nil; b = r.Block() {
			visit(b)
		}
		return r.Err()
	}
	type cursor struct {
		head T   // the next value
		blk  []T // the ones read after it
		r    *Reader[T]
	}
	cur := make([]cursor, 0, len(rs))
	for _, r := range rs {
		if b := r.Block(); b != nil {
			cur = append(cur, cursor{head: b[0], blk: b[1:], r: r})
		} else if err := r.Err(); err != nil {
			return err
		}
	}
	h := make([]int32, len(cur))
	for i := range h {
		h[i] = int32(i)
	}
	// down sifts the heap's entry at i down to its place.
	down := func(i int) {
		x := h[i]
		v := cur[x].head
		for {
			c := 2*i + 1
			if c >= len(h) {
				break
			}
			if c+1 < len(h) && cur[h[c+1]].head < cur[h[c]].head {
				c++
			}
			if v <= cur[h[c]].head {
				break
			}
			h[i] = h[c]
			i = c
		}
		h[i] = x
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]T, 0, blockLen)
	for len(h) > 0 {
		c := &cur[h[0]]
		out = append(out, c.head)
		if len(out) == cap(out) {
			visit(out)
			out = out[:0]
		}
		if len(c.blk) == 0 {
			if c.blk = c.r.Block(); c.blk == nil {
				if err := c.r.Err(); err != nil {
					return err
				}
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
				if len(h) > 0 {
					down(0)
				}
				continue
			}
		}
		c.head, c.blk = c.blk[0], c.blk[1:]
		down(0)
	}
	if len(out) > 0 {
		visit(out)
	}
	return nil
}

// tempFile makes a temporary file in dir and unlinks it, so that it goes with its last
// descriptor; name is its path where the system keeps an open file's name (it is then removed
// on release).
func tempFile(dir string) (f *os.File, name string, err error) {
	f, err = os.CreateTemp(dir, "mosaic-spill-*")
	if err != nil {
		return nil, "", err
	}
	if os.Remove(f.Name()) != nil {
		return f, f.Name(), nil
	}
	return f, "", nil
}

// bytesOf is the memory of s as bytes (the machine's byte order: files are the process's own).
func bytesOf[T Int](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*8)
}
