package sim

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeSeconds, the closed form of a decode stretch, equals the sum of its iterations'
// IterationSeconds with and without a launch floor, wherever the floor falls in the stretch.
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
			coef := DefaultProfile().For(g)
			coef.LaunchFloorMS = floorMS
			cm, err := NewCostModel(m, g, coef, WithTP(tc.tp))
			require.NoError(t, err)
			for _, n := range []int{1, 7, 64, 256} {
				for _, ctx0 := range []float64{0, 1000, 200000} {
					for _, k := range []int{1, 2, 50, 3000} {
						name := fmt.Sprintf("%s/tp=%d/floor=%gms/n=%d/ctx0=%g/k=%d", tc.model, tc.tp, floorMS, n, ctx0, k)
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
