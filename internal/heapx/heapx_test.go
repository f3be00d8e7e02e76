package heapx_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mosaic-sched/mosaic/internal/heapx"
)

type item struct{ key, seq int }

func less(a, b *item) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}

// Elements come out in order, interleaved pushes and pops included, ties in push order.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h []item
	var want, got []item
	seq := 0
	for range 2000 {
		if len(h) > 0 && r.IntN(3) == 0 {
			var x item
			h, x = heapx.Pop(h, less)
			got = append(got, x)
			// x must be the least of what was pushed and not yet popped.
			slices.SortFunc(want, func(a, b item) int {
				if less(&a, &b) {
					return -1
				}
				return 1
			})
			assert.Equal(t, want[0], x)
			want = want[1:]
			continue
		}
		seq++
		x := item{key: r.IntN(50), seq: seq}
		h = heapx.Push(h, x, less)
		want = append(want, x)
	}
	slices.SortFunc(want, func(a, b item) int {
		if less(&a, &b) {
			return -1
		}
		return 1
	})
	var rest []item
	for len(h) > 0 {
		var x item
		h, x = heapx.Pop(h, less)
		rest = append(rest, x)
	}
	assert.Equal(t, want, rest)
	assert.Len(t, append(got, rest...), seq)
	assert.Empty(t, h)
}
