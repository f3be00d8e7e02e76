// Package names finds a name's index among the few names of an experiment (its models), as
// a map[string]int would, in less time: a run looks a call's model up several times per call.
// While the names are few, Get compares them in order; the names a run passes around are
// copies of the experiment's strings, so a comparison usually ends at the lengths or at the
// shared data pointer without reading a byte (BenchmarkGet: about half a small map's time).
// Past a handful of names it uses a map.
package names

// scanMax is the most names Get compares in order.
const scanMax = 8

// Index numbers names 0, 1, 2, ... in the order they are added. The zero Index is empty and
// ready to use.
type Index struct {
	names []string
	m     map[string]int // with more than scanMax names
}

// Add gives name the next index and returns it; a name added before keeps its index.
func (x *Index) Add(name string) int {
	if i, ok := x.Get(name); ok {
		return i
	}
	x.names = append(x.names, name)
	i := len(x.names) - 1
	switch {
	case x.m != nil:
		x.m[name] = i
	case len(x.names) > scanMax:
		x.m = make(map[string]int, len(x.names))
		for j, n := range x.names {
			x.m[n] = j
		}
	}
	return i
}

// Get returns name's index, and false if it was never added.
func (x *Index) Get(name string) (int, bool) {
	if x.m != nil {
		i, ok := x.m[name]
		return i, ok
	}
	for i, n := range x.names {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// Len is how many names were added.
func (x *Index) Len() int { return len(x.names) }
