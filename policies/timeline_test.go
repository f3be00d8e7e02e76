package policies

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTimelineSortStarts checks that sortStarts orders the entries by key and keeps every
// (key, model) pair, on the packed path (keys with room for the model number) and on the
// comparison sort it falls back to (a key too large to pack), with many equal keys.
func TestTimelineSortStarts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name   string
		models int
		maxKey int64
		huge   bool
	}{
		{"one model", 1, 1 << 20, false},
		{"six models", 6, 1 << 40, false},
		{"many models", 300, 1 << 50, false},
		{"few keys", 6, 8, false},
		{"a key too large to pack", 6, 1 << 40, true},
	} {
		for _, n := range []int{0, 1, 2, 17, 300, 5000} {
			tl := &timeline{}
			for range n {
				tl.starts = append(tl.starts, edge{key: r.Int64N(tc.maxKey)<<1 | 1, model: int32(r.IntN(tc.models))})
			}
			if tc.huge && n > 0 {
				tl.starts[r.IntN(n)].key = 1<<62 | 1
			}
			want := slices.Clone(tl.starts)
			byPair := func(a, b edge) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.model, b.model)) }
			slices.SortFunc(want, byPair)
			tl.sortStarts(tc.models)
			assert.Truef(t, slices.IsSortedFunc(tl.starts, func(a, b edge) int { return cmp.Compare(a.key, b.key) }),
				"%s, %d entries: not sorted by key", tc.name, n)
			got := slices.Clone(tl.starts)
			slices.SortFunc(got, byPair)
			assert.Equalf(t, want, got, "%s, %d entries: the entries changed", tc.name, n)
		}
	}
}
