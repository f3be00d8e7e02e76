package policies

// The window's storage: the states of consecutive IDs from the oldest not yet let go, in
// fixed blocks that are reused once every ID in them has gone (no state is ever copied, and a
// streamed run allocates none once its window has grown), and the readers of each call in
// queues of plain values.

// blockShift sets the IDs per block of states.
const (
	blockShift = 10
	blockSize  = 1 << blockShift
	blockMask  = blockSize - 1
	// spareBlocks is how many emptied blocks are kept for reuse.
	spareBlocks = 8
)

// blocks holds the states of IDs lo to hi-1.
type blocks[T any] struct {
	b []*[blockSize]T
	// first is the block number of b[0] (ID first<<blockShift is its first).
	first  int
	lo, hi int
	spare  []*[blockSize]T
}

// at returns the state of id, which must be held.
func (s *blocks[T]) at(id int) *T { return &s.b[id>>blockShift-s.first][id&blockMask] }

// holds reports whether id is held.
func (s *blocks[T]) holds(id int) bool { return id >= s.lo && id < s.hi }

// push adds the state of the next ID (hi), zero, and returns it.
func (s *blocks[T]) push() *T {
	id := s.hi
	if id>>blockShift-s.first == len(s.b) {
		var blk *[blockSize]T
		if n := len(s.spare); n > 0 {
			blk, s.spare = s.spare[n-1], s.spare[:n-1]
		} else {
			blk = new([blockSize]T)
		}
		s.b = append(s.b, blk)
	}
	s.hi++
	return s.at(id)
}

// drop lets the states of the IDs below to go: the blocks they alone filled are cleared for
// reuse.
func (s *blocks[T]) drop(to int) {
	s.lo = to
	k := to>>blockShift - s.first
	for i := range k {
		clear(s.b[i][:])
		if len(s.spare) < spareBlocks {
			s.spare = append(s.spare, s.b[i])
		}
		s.b[i] = nil
	}
	s.b = s.b[k:]
	s.first += k
}

// fifo is a queue of values indexed by position since its start: the values from base on,
// the first at buf[head].
type fifo[T any] struct {
	buf        []T
	head, base int
}

// at returns the value at position i (held).
func (f *fifo[T]) at(i int) T { return f.buf[f.head+i-f.base] }

// end is the position after the last value.
func (f *fifo[T]) end() int { return f.base + len(f.buf) - f.head }

// push appends a value; the values gone are dropped from the buffer's front when it is full.
func (f *fifo[T]) push(v T) {
	if len(f.buf) == cap(f.buf) && f.head > 0 && f.head >= len(f.buf)/2 {
		f.buf = f.buf[:copy(f.buf, f.buf[f.head:])]
		f.head = 0
	}
	f.buf = append(f.buf, v)
}

// span returns the values from position i to j (held), in place.
func (f *fifo[T]) span(i, j int) []T { return f.buf[f.head+i-f.base : f.head+j-f.base] }

// drop lets the values before position to go.
func (f *fifo[T]) drop(to int) {
	f.head += to - f.base
	f.base = to
}
