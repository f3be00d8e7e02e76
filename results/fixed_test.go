package results

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAppendFixedMatchesStrconv compares the quick fixed-point writer with strconv on values
// chosen to be hard: ties and their neighbours, exact microseconds, powers of two, signed
// zeros, huge, tiny and non-finite values, and random seconds of a long run.
func TestAppendFixedMatchesStrconv(t *testing.T) {
	var vals []float64
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 0.0078125, 1.5e-6, 2.5e-6, 0.0000005, 0.00005,
		123.4567895, 1e-300, -1e-9, 8.7e6, 9e6, 1e7, 1e15, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.Inf(1), math.Inf(-1), math.NaN()} {
		vals = append(vals, v)
	}
	for e := -30; e <= 45; e++ {
		vals = append(vals, math.Ldexp(1, e), math.Ldexp(3, e), -math.Ldexp(1, e))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		// Ties at each precision and their binary neighbours.
		for _, scale := range []float64{1e4, 1e6} {
			k := float64(r.Int64N(1 << 40))
			tie := (k + 0.5) / scale
			vals = append(vals, tie, math.Nextafter(tie, 0), math.Nextafter(tie, math.Inf(1)), k/scale)
		}
		vals = append(vals, r.Float64()*2e6, r.Float64(), r.ExpFloat64()*100, -r.Float64(),
			math.Ldexp(r.Float64()+1, 20+r.IntN(30))) // 1e6 to 1e15: past where the product is close enough
	}
	for _, prec := range []int{0, 1, 4, 6} {
		for _, v := range vals {
			got := string(appendFixed(nil, v, prec))
			want := strconv.FormatFloat(v, 'f', prec, 64)
			if got != want {
				t.Fatalf("appendFixed(%v (%b), %d) = %q, strconv gives %q", v, v, prec, got, want)
			}
		}
	}
}

func BenchmarkAppendFixed(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float64, 1024)
	for i := range vals {
		vals[i] = r.Float64() * 2e6
	}
	buf := make([]byte, 0, 64)
	b.Run("fixed", func(b *testing.B) {
		for i := range b.N {
			buf = appendFixed(buf[:0], vals[i%len(vals)], 6)
		}
	})
	b.Run("strconv", func(b *testing.B) {
		for i := range b.N {
			buf = strconv.AppendFloat(buf[:0], vals[i%len(vals)], 'f', 6, 64)
		}
	})
}
