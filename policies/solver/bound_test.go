package solver

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxCalls is the largest x <= n with At(x) <= budget, on random non-decreasing curves (first
// breakpoints above 1 and calls beyond the last breakpoint included), as a scan finds it.
func TestMaxCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 20000; i++ {
		n := 1 + r.IntN(300)
		var c Curve
		tt := 0.0
		for x := 1 + r.IntN(3); x <= n+r.IntN(50); x += 1 + r.IntN(40) {
			tt += 10 * r.Float64() * r.Float64()
			c.X, c.T = append(c.X, x), append(c.T, tt)
		}
		if len(c.X) == 0 {
			continue
		}
		budget := tt * 1.3 * r.Float64()
		want := 0
		for x := 1; x <= n; x++ {
			if c.At(x) <= budget {
				want = x
			}
		}
		require.Equal(t, want, maxCalls(c, budget, n), "curve %v, budget %v, n %d", c, budget, n)
	}
}

// The least work over splits into batches: on a concave curve the closed form (the most
// unequal batches) and the recurrence agree; on any curve the recurrence matches an exhaustive
// search over splits.
func TestLeastWork(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 300; i++ {
		n := 1 + r.IntN(40)
		var c Curve
		t0, slope := 0.0, 5+10*r.Float64()
		concave := i%2 == 0
		for x := 1; x <= n; x += 1 + r.IntN(4) {
			if concave {
				slope *= 0.5 + 0.5*r.Float64()
				t0 += slope * float64(max(1, x-lastX(c)))
			} else {
				t0 += 10 * r.Float64() * r.Float64()
			}
			c.X, c.T = append(c.X, x), append(c.T, t0)
		}
		load := 3 * r.Float64()
		it := Item{Calls: n, Load: load, Curve: c}
		b := &boundItem{it: it, allowed: []int{0}, loads: []float64{load}, work: map[int]float64{}, breaks: c.X, concave: c.concave()}
		if concave {
			require.True(t, b.concave, "curve %v", c)
		}
		xmax := 1 + r.IntN(n)
		got := b.leastWork(xmax, true)
		want := bestSplit(func(x int) float64 { return load + c.At(x) }, n, xmax)
		assert.InDelta(t, want, got, 1e-9*want, "curve %v, xmax %d", c, xmax)
		if b.concave {
			b.concave, b.work = false, map[int]float64{}
			assert.InDelta(t, got, b.leastWork(xmax, true), 1e-9*got, "the recurrence agrees with the closed form")
		}
	}
}

func lastX(c Curve) int {
	if len(c.X) == 0 {
		return 0
	}
	return c.X[len(c.X)-1]
}

// bestSplit is the least total cost of splitting n calls into batches of at most xmax.
func bestSplit(cost func(int) float64, n, xmax int) float64 {
	f := make([]float64, n+1)
	for m := 1; m <= n; m++ {
		f[m] = math.Inf(1)
		for x := 1; x <= min(m, xmax); x++ {
			f[m] = min(f[m], f[m-x]+cost(x))
		}
	}
	return f[n]
}
