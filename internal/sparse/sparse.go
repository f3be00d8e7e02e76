// Package sparse holds Slice, a slice indexed by ID that keeps memory only where its values
// differ from a fill value: per-call and per-query state of a run whose IDs grow without
// bound while only the IDs in flight hold anything.
package sparse

// pageShift sets the entries per page.
const (
	pageShift = 10
	pageSize  = 1 << pageShift
	pageMask  = pageSize - 1
	// sparePages is how many emptied pages are kept for reuse.
	sparePages = 4
)

// Slice is a slice of every non-negative index, each holding Fill until set otherwise. It
// keeps a page of entries only while one of them holds another value, so its memory follows
// the indices in use, not the largest one. The zero value is a Slice of zero values.
type Slice[T comparable] struct {
	// Fill is the value of an entry never set (set it before the first Set).
	Fill T
	// pages[k] holds the entries of page first+k (nil: all Fill), and far the pages too far
	// from those to widen the run to them (IDs far apart).
	pages []*page[T]
	first int
	far   map[int]*page[T]
	spare []*page[T]
}

// page is pageSize entries and how many of them are not Fill.
type page[T comparable] struct {
	v   [pageSize]T
	set int
}

// page returns page n (nil: all Fill).
func (s *Slice[T]) page(n int) *page[T] {
	if k := n - s.first; k >= 0 && k < len(s.pages) {
		if p := s.pages[k]; p != nil {
			return p
		}
	}
	if s.far != nil {
		return s.far[n]
	}
	return nil
}

// Get returns the entry at i (>= 0).
func (s *Slice[T]) Get(i int) T {
	if p := s.page(i >> pageShift); p != nil {
		return p.v[i&pageMask]
	}
	return s.Fill
}

// Set sets the entry at i (>= 0) to v.
func (s *Slice[T]) Set(i int, v T) {
	n := i >> pageShift
	p := s.page(n)
	if p == nil {
		if v == s.Fill {
			return
		}
		p = s.place(n)
	}
	old := p.v[i&pageMask]
	p.v[i&pageMask] = v
	switch {
	case old == s.Fill && v != s.Fill:
		p.set++
	case old != s.Fill && v == s.Fill:
		if p.set--; p.set == 0 {
			s.free(n, p)
		}
	}
}

// place gives page n a page of Fill and returns it: in the run of pages, widened to it, or,
// when that would take a run much longer than the pages it holds, apart.
func (s *Slice[T]) place(n int) *page[T] {
	var p *page[T]
	if m := len(s.spare); m > 0 {
		p, s.spare = s.spare[m-1], s.spare[:m-1]
	} else {
		p = new(page[T])
		var zero T
		if s.Fill != zero {
			for i := range p.v {
				p.v[i] = s.Fill
			}
		}
	}
	if len(s.pages) == 0 {
		s.first = n
	}
	lo, hi := min(s.first, n), max(s.first+len(s.pages), n+1)
	if hi-lo > 2*len(s.pages)+1024 {
		if s.far == nil {
			s.far = map[int]*page[T]{}
		}
		s.far[n] = p
		return p
	}
	if n < s.first {
		s.pages = append(make([]*page[T], s.first-n), s.pages...)
		s.first = n
	}
	for n-s.first >= len(s.pages) {
		s.pages = append(s.pages, nil)
	}
	s.pages[n-s.first] = p
	return p
}

// free lets page n, p, go (all its entries are Fill again), and the empty pages in front.
func (s *Slice[T]) free(n int, p *page[T]) {
	if len(s.spare) < sparePages {
		s.spare = append(s.spare, p)
	}
	if s.far[n] == p {
		delete(s.far, n)
		return
	}
	s.pages[n-s.first] = nil
	n = 0
	for n < len(s.pages) && s.pages[n] == nil {
		n++
	}
	if n > 0 {
		clear(s.pages[:n])
		s.pages = s.pages[n:]
		s.first += n
	}
	for len(s.pages) > 0 && s.pages[len(s.pages)-1] == nil {
		s.pages = s.pages[:len(s.pages)-1]
	}
}

// Pages is how many pages the slice holds (each of 1024 entries).
func (s *Slice[T]) Pages() int {
	n := len(s.far)
	for _, p := range s.pages {
		if p != nil {
			n++
		}
	}
	return n
}
