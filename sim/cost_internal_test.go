package sim

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeSeconds, the closed form of a decode stretch, equals the sum of its iterations'
// IterationSeconds with and without a launch floor, wherever the floor falls in the stretch,
// with and without a per-layer latency.
func TestDecodeSecondsSumsIterations(t *testing.T) {
	cat := DefaultCatalog()
	for _, tc := range []struct {
		gpu, model string
		tp         int
	}{{"A100-80GB", "llama-3-8b", 1}, {"H100-80GB", "llama-2-70b", 4}} {
		g, err := cat.GPU(tc.gpu)
		require.NoError(t, err)
		m, err := cat.Model(tc.model)
		require.NoError(t, err)
		for _, floorMS := range []float64{0, 5, 12, 25, 80} {
			for _, v1 := range []float64{0, 2.5} {
				coef := DefaultProfile().For(g)
				coef.LaunchFloorMS, coef.PagedAttentionV1Factor = floorMS, v1
				if v1 > 0 {
					coef.LayerLatencyUS = 40
				}
				cm, err := NewCostModel(m, g, coef, WithTP(tc.tp))
				require.NoError(t, err)
				for _, n := range []int{1, 7, 64, 256} {
					for _, ctx0 := range []float64{0, 1000, 200000} {
						for _, k := range []int{1, 2, 50, 3000} {
							name := fmt.Sprintf("%s/tp=%d/floor=%gms/v1=%g/n=%d/ctx0=%g/k=%d", tc.model, tc.tp, floorMS, v1, n, ctx0, k)
							sum := 0.0
							for i := 1; i <= k; i++ {
								ctx := ctx0 + float64(n*i)
								sum += cm.IterationSeconds(Batch{Tokens: n, AttentionPairs: ctx, KVTokens: ctx, Seqs: n, Sampled: n})
							}
							got := cm.decodeSeconds(n, k, ctx0)
							require.InDelta(t, sum, got, 1e-9*math.Max(1, sum), name)
						}
					}
				}
			}
		}
	}
}

// A per-layer latency adds layers x latency to every iteration's GPU part, prefill or decode,
// at any TP degree, and shows in LinearParts; 0 changes nothing.
func TestLayerLatency(t *testing.T) {
	cat := DefaultCatalog()
	g, err := cat.GPU("H200")
	require.NoError(t, err)
	for _, tc := range []struct {
		model string
		tp    int
	}{{"llama-3-8b", 1}, {"llama-3-70b", 8}} {
		m, err := cat.Model(tc.model)
		require.NoError(t, err)
		plain := DefaultProfile().For(g)
		plain.LayerLatencyUS = 0 // the built-in H200 fit has its own
		with := plain
		with.LayerLatencyUS = 25
		a, err := NewCostModel(m, g, plain, WithTP(tc.tp))
		require.NoError(t, err)
		b, err := NewCostModel(m, g, with, WithTP(tc.tp))
		require.NoError(t, err)
		add := float64(m.Layers) * 25e-6
		for _, batch := range []Batch{{Tokens: 1, AttentionPairs: 100, KVTokens: 100, Seqs: 1, Sampled: 1},
			{Tokens: 4096, AttentionPairs: 4096 * 4097 / 2, KVTokens: 4096, Seqs: 1, Sampled: 1}} {
			assert.InDelta(t, add, b.IterationSeconds(batch)-a.IterationSeconds(batch), 1e-12, tc.model)
			la, _, _ := a.LinearParts(batch)
			lb, _, _ := b.LinearParts(batch)
			assert.InDelta(t, add, lb-la, 1e-12, tc.model)
		}
	}
}

// The PagedAttention V1 factor multiplies the attention of decode-only iterations from the
// first batch whose sequences times query heads per GPU exceed 512, and nothing else.
func TestPagedAttentionV1Factor(t *testing.T) {
	cat := DefaultCatalog()
	g, err := cat.GPU("MI300X")
	require.NoError(t, err)
	m, err := cat.Model("llama-3-8b") // 32 query heads
	require.NoError(t, err)
	for _, tc := range []struct{ tp, first int }{{1, 17}, {2, 33}, {4, 65}} {
		plain := DefaultProfile().For(g)
		plain.PagedAttentionV1Factor = 0 // the built-in MI300X fit has its own
		v1 := plain
		v1.PagedAttentionV1Factor = 3
		a, err := NewCostModel(m, g, plain, WithTP(tc.tp))
		require.NoError(t, err)
		b, err := NewCostModel(m, g, v1, WithTP(tc.tp))
		require.NoError(t, err)
		decode := func(n int) Batch {
			ctx := float64(n * 3000)
			return Batch{Tokens: n, AttentionPairs: ctx, KVTokens: ctx, Seqs: n, Sampled: n}
		}
		below, at := decode(tc.first-1), decode(tc.first)
		assert.Equal(t, a.IterationSeconds(below), b.IterationSeconds(below), "tp %d: V2 below the switch", tc.tp)
		_, attA, _ := a.roofline(at)
		require.Positive(t, attA)
		assert.InDelta(t, a.IterationSeconds(at)+2*attA, b.IterationSeconds(at), 1e-12, "tp %d: V1 from %d sequences", tc.tp, tc.first)
		mixed := at
		mixed.Tokens += 500 // an iteration that also prefills keeps its time: the model does not split its attention by kernel
		mixed.AttentionPairs += 500 * 501 / 2
		assert.Equal(t, a.IterationSeconds(mixed), b.IterationSeconds(mixed), "tp %d: mixed iteration", tc.tp)
	}
}
