package sim_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

func catalogEntries(t *testing.T, gpu, model string) (*sim.GPU, *sim.Model, sim.Coefficients) {
	t.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU(gpu)
	require.NoError(t, err)
	m, err := cat.Model(model)
	require.NoError(t, err)
	return g, m, sim.DefaultProfile().For(g)
}

func decodeBatch(n, ctx int) sim.Batch {
	c := float64(n * ctx)
	return sim.Batch{Tokens: n, AttentionPairs: c, KVTokens: c, Seqs: n, Sampled: n}
}

func prefillBatch(tokens int) sim.Batch {
	t := float64(tokens)
	return sim.Batch{Tokens: tokens, AttentionPairs: t * (t + 1) / 2, KVTokens: t, Seqs: 1, Sampled: 1}
}

// WithTP(1) is the single-GPU cost model, bit for bit: existing results do not move.
func TestTP1IsSingleGPU(t *testing.T) {
	g, m, coef := catalogEntries(t, "A100-80GB", "llama-3-8b")
	plain, err := sim.NewCostModel(m, g, coef)
	require.NoError(t, err)
	tp1, err := sim.NewCostModel(m, g, coef, sim.WithTP(1))
	require.NoError(t, err)
	assert.Equal(t, 1, plain.TP)
	for _, b := range []sim.Batch{decodeBatch(1, 100), decodeBatch(256, 2000), prefillBatch(8192)} {
		assert.Equal(t, plain.IterationSeconds(b), tp1.IterationSeconds(b))
	}
	a, err := plain.KVBlocks(0.9, 8192, 16)
	require.NoError(t, err)
	b, err := tp1.KVBlocks(0.9, 8192, 16)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, m.WeightBytes(), plain.WeightBytesPerGPU())
}

// The all-reduce term is exactly 2 * layers * (a_ar + 2(TP-1) a_hop + 2(TP-1)/TP * bytes / bw).
func TestAllReduceTerm(t *testing.T) {
	g, m, coef := catalogEntries(t, "H100-80GB", "llama-2-70b")
	coef.AllReduceUS, coef.AllReduceHopUS, coef.LinkEfficiency = 20, 2, 0.5
	// A zero-cost reference: the same model with no all-reduce latency and an infinitely fast
	// link differs from it by the all-reduce term only.
	free := coef
	free.AllReduceUS, free.AllReduceHopUS = 0, 0
	for _, tp := range []int{2, 4, 8} {
		cm, err := sim.NewCostModel(m, g, coef, sim.WithTP(tp))
		require.NoError(t, err)
		ref, err := sim.NewCostModel(m, g, free, sim.WithTP(tp))
		require.NoError(t, err)
		for _, tokens := range []int{1, 4096} {
			b := prefillBatch(tokens)
			steps := 2 * float64(tp-1)
			bytes := float64(tokens * m.Hidden * m.DtypeBytes)
			bw := g.CollectiveGBps(tp) * 1e9 * coef.LinkEfficiency
			want := 2 * float64(m.Layers) * ((20+steps*2)/1e6 + steps/float64(tp)*bytes/bw)
			refLink := 2 * float64(m.Layers) * steps / float64(tp) * bytes / (g.CollectiveGBps(tp) * 1e9 * free.LinkEfficiency)
			got := cm.IterationSeconds(b) - (ref.IterationSeconds(b) - refLink)
			assert.InDelta(t, want, got, 1e-12, "tp %d tokens %d", tp, tokens)
		}
	}
}

// Sharding divides the weights each GPU streams: a memory-bound decode step gets faster with
// TP, by less than TP because of the all-reduces; a 70B model that fits no single 80 GB GPU
// fits two, with a KV cache per GPU that grows with TP.
func TestTensorParallelShards(t *testing.T) {
	g, m, coef := catalogEntries(t, "H100-80GB", "llama-3-70b")
	one, err := sim.NewCostModel(m, g, coef)
	require.NoError(t, err)
	_, err = one.KVBlocks(0.9, 8192, 16)
	require.ErrorContains(t, err, "does not fit on H100-80GB")

	prev := one.IterationSeconds(decodeBatch(1, 512))
	prevBlocks := 0
	for _, tp := range []int{2, 4, 8} {
		cm, err := sim.NewCostModel(m, g, coef, sim.WithTP(tp))
		require.NoError(t, err)
		step := cm.IterationSeconds(decodeBatch(1, 512))
		assert.Less(t, step, prev, "tp %d", tp)
		assert.Greater(t, step, prev/2, "tp %d: all-reduces keep the speed-up below 2x per doubling", tp)
		prev = step
		blocks, err := cm.KVBlocks(0.9, 8192, 16)
		require.NoError(t, err, "tp %d", tp)
		assert.Greater(t, blocks, prevBlocks, "tp %d", tp)
		prevBlocks = blocks
		assert.InDelta(t, m.WeightBytes()/float64(tp), cm.WeightBytesPerGPU(), 1e-6*m.WeightBytes())
	}
}

func TestValidTP(t *testing.T) {
	cat := sim.DefaultCatalog()
	for _, tc := range []struct {
		model string
		tp    int
		want  string
	}{
		{"llama-3-8b", 3, "must be 1, 2, 4 or 8"},
		{"llama-3-8b", 16, "must be 1, 2, 4 or 8"},
		{"qwen2-7b", 8, "28 attention heads do not split over 8"},
		{"qwen2-7b", 4, ""},
		{"glm-4-9b", 8, ""}, // 2 KV heads, replicated 4 times
		{"llama-2-70b", 8, ""},
	} {
		t.Run(tc.model, func(t *testing.T) {
			m, err := cat.Model(tc.model)
			require.NoError(t, err)
			err = sim.ValidTP(m, tc.tp)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A GPU without an interconnect cannot shard.
	g := &sim.GPU{Name: "lonely", PeakTFLOPs: 100, HBMGBps: 1000, MemoryGiB: 80}
	m, err := cat.Model("llama-3-8b")
	require.NoError(t, err)
	_, err = sim.NewCostModel(m, g, sim.DefaultProfile().Default, sim.WithTP(2))
	require.ErrorContains(t, err, "no interconnect")
}

// KV heads are replicated, not split, once TP exceeds them: the cache per token per GPU stops
// shrinking and the replicated KV projections add to each GPU's weights.
func TestKVHeadReplication(t *testing.T) {
	g, m, coef := catalogEntries(t, "H100-80GB", "glm-4-9b") // 2 KV heads
	tp2, err := sim.NewCostModel(m, g, coef, sim.WithTP(2))
	require.NoError(t, err)
	tp8, err := sim.NewCostModel(m, g, coef, sim.WithTP(8))
	require.NoError(t, err)
	// Decode attention at long context is bound by reading the KV cache, which is the same per
	// GPU at TP 2 and 8 (one KV head each).
	long := decodeBatch(1, 100000)
	short := decodeBatch(1, 1)
	attn2 := tp2.IterationSeconds(long) - tp2.IterationSeconds(short)
	attn8 := tp8.IterationSeconds(long) - tp8.IterationSeconds(short)
	assert.InDelta(t, attn2, attn8, 1e-3*attn2)
	assert.Greater(t, tp8.WeightBytesPerGPU(), m.WeightBytes()/8)
}

func TestExpectedExperts(t *testing.T) {
	cat := sim.DefaultCatalog()
	mix, err := cat.Model("mixtral-8x7b")
	require.NoError(t, err)
	dense, err := cat.Model("llama-3-8b")
	require.NoError(t, err)
	assert.True(t, mix.MoE())
	assert.False(t, dense.MoE())
	assert.Equal(t, 1.0, dense.ExpectedExperts(1000))
	assert.InDelta(t, 2.0, mix.ExpectedExperts(1), 1e-12)
	assert.InDelta(t, 8*(1-math.Pow(0.75, 4)), mix.ExpectedExperts(4), 1e-12)
	assert.InDelta(t, 8.0, mix.ExpectedExperts(256), 1e-9)
	for n := 1; n < 64; n++ {
		assert.Less(t, mix.ExpectedExperts(n), mix.ExpectedExperts(n+1))
	}
}

// An MoE model stores every expert but a token only visits k of them: a single decode step
// reads little more than the active weights, a large batch reads them all, and the compute
// per token is that of the active experts.
func TestMoECost(t *testing.T) {
	g, m, coef := catalogEntries(t, "H100-80GB", "mixtral-8x22b")
	cm, err := sim.NewCostModel(m, g, coef, sim.WithTP(4))
	require.NoError(t, err)
	flops, weights := cm.LinearWork()
	// 39B active of 141B parameters (the model card): FLOPs per token are about 2 x 39B less the
	// embeddings, weights about 141B x 2 bytes.
	assert.InDelta(t, 2*38.5e9, flops, 0.05*2*38.5e9)
	assert.InDelta(t, 140e9*2, weights, 0.02*140e9*2)
	one := cm.IterationSeconds(decodeBatch(1, 100))
	many := cm.IterationSeconds(decodeBatch(64, 100))
	assert.Greater(t, many, 2*one, "a batch of 64 touches every expert, one token only 2 of 8")
	blocks, err := cm.KVBlocks(0.9, 8192, 16)
	require.NoError(t, err)
	assert.Positive(t, blocks)
}

// Every model of the catalog that needs more than one GPU runs on a tensor-parallel group: a
// few requests go through the engine on the smallest group of 80 GB GPUs it fits.
func TestCatalogModelsRunWithTP(t *testing.T) {
	cat := sim.DefaultCatalog()
	for _, tc := range []struct {
		model, gpu string
		tp         int
	}{
		{"Qwen/Qwen1.5-72B-Chat", "H100-80GB", 4}, // no grouped-query attention: 2.5 MB of KV per token
		{"Qwen/Qwen1.5-110B-Chat", "H100-80GB", 4},
		{"meta-llama/Meta-Llama-3-70B-Instruct", "A100-80GB", 2},
		{"mistralai/Mixtral-8x22B-Instruct-v0.1", "H100-80GB", 4},
		{"databricks/dbrx-instruct", "H100-80GB", 4},
		{"mistralai/Mixtral-8x7B-v0.1", "A100-80GB", 2},
		{"Qwen/Qwen3-4B", "H200", 1},
		{"Qwen/Qwen3-8B", "H200", 2},
		{"Qwen/Qwen3-32B", "H200", 2},
		{"Qwen/Qwen3-32B", "A100-40GB", 4},
		{"Qwen/Qwen2-72B", "MI300X", 8},
	} {
		t.Run(tc.model, func(t *testing.T) {
			g, err := cat.GPU(tc.gpu)
			require.NoError(t, err)
			m, err := cat.Model(tc.model)
			require.NoError(t, err)
			cm, err := sim.NewCostModel(m, g, sim.DefaultProfile().For(g), sim.WithTP(tc.tp))
			require.NoError(t, err)
			blocks, err := cm.KVBlocks(0.9, 8192, 16)
			require.NoError(t, err)
			eng, err := sim.NewEngine(sim.EngineConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, ChunkedPrefill: true,
				BlockSize: 16, NumBlocks: blocks, WatermarkBlocks: blocks / 100}, cm)
			require.NoError(t, err)
			reqs := make([]sim.Arrival, 8)
			for i := range reqs {
				reqs[i] = sim.Arrival{Request: sim.Request{ID: uint64(i), PromptTokens: 512, OutputTokens: 64}}
			}
			res, err := sim.Serve(eng, reqs)
			require.NoError(t, err)
			assert.Equal(t, int64(8*64), res.OutputTokens)
			assert.Positive(t, res.Makespan)
		})
	}
	// Models too large for one GPU say so, naming the shard.
	g, err := cat.GPU("H100-80GB")
	require.NoError(t, err)
	m, err := cat.Model("dbrx")
	require.NoError(t, err)
	cm, err := sim.NewCostModel(m, g, sim.DefaultProfile().For(g), sim.WithTP(2))
	require.NoError(t, err)
	_, err = cm.KVBlocks(0.9, 8192, 16)
	require.ErrorContains(t, err, "2 x H100-80GB")
}

// FP8 weights stream half the bytes and multiply at the GPU's FP8 peak; the KV cache stays
// BF16 unless kv_dtype_bytes says FP8, which halves the bytes attention reads and the cache
// holds per token; a GPU without an FP8 peak runs FP8 weights at its BF16 peak.
func TestFP8Precisions(t *testing.T) {
	cat := sim.DefaultCatalog()
	h100, err := cat.GPU("H100-80GB")
	require.NoError(t, err)
	a100, err := cat.GPU("A100-80GB")
	require.NoError(t, err)
	bf16, err := cat.Model("llama-3-8b")
	require.NoError(t, err)
	fp8 := *bf16
	fp8.DtypeBytes = 1
	fp8kv := fp8
	fp8kv.KVDtypeBytes = 1
	assert.Equal(t, 2*fp8kv.KVBytesPerToken(), fp8.KVBytesPerToken(), "kv_dtype_bytes 0: BF16, as vLLM's auto")
	assert.Equal(t, 1979.0, h100.LinearPeakTFLOPs(&fp8))
	assert.Equal(t, h100.PeakTFLOPs, h100.LinearPeakTFLOPs(bf16))
	assert.Equal(t, a100.PeakTFLOPs, a100.LinearPeakTFLOPs(&fp8), "no FP8 tensor cores")

	coef := sim.DefaultProfile().For(h100)
	coef.IterationOverheadMS, coef.PerSeqOverheadMS = 0, 0
	cost := func(m *sim.Model, b sim.Batch) (lin float64) {
		cm, err := sim.NewCostModel(m, h100, coef)
		require.NoError(t, err)
		lin, _, _ = cm.LinearParts(b)
		return lin - float64(m.Layers)*coef.LayerLatencyUS/1e6 // the roofline part
	}
	decode := sim.Batch{Tokens: 1, Seqs: 1, Sampled: 1, AttentionPairs: 1, KVTokens: 1}
	prefill := sim.Batch{Tokens: 8192, Seqs: 1, Sampled: 1, AttentionPairs: 1, KVTokens: 1}
	assert.InDelta(t, cost(bf16, decode)/2, cost(&fp8, decode), 1e-12, "a decode step reads half the bytes")
	assert.InDelta(t, cost(bf16, prefill)*989/1979, cost(&fp8, prefill), 1e-12, "a long prefill runs at the FP8 peak")

	big := sim.Batch{Tokens: 1, Seqs: 1, Sampled: 1, AttentionPairs: 1e6, KVTokens: 1e6}
	gpu := func(m *sim.Model) float64 {
		cm, err := sim.NewCostModel(m, h100, coef)
		require.NoError(t, err)
		return cm.IterationSeconds(big) - cm.IterationSeconds(decode)
	}
	assert.InDelta(t, gpu(&fp8)/2, gpu(&fp8kv), 1e-9, "attention over an FP8 cache reads half the bytes")

	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"[[model]]\nid = \"m\"\nlayers = 1\nhidden = 8\nheads = 1\nkv_heads = 1\nhead_dim = 8\nintermediate = 8\nvocab = 8\ndtype_bytes = 1\nkv_dtype_bytes = -1\nparams_b = 1\nmax_model_len = 8\n",
			`model "m": kv_dtype_bytes must not be negative`},
		{"[[gpu]]\nname = \"g\"\npeak_tflops = 1\npeak_tflops_fp8 = -2\nhbm_gbps = 1\nmemory_gib = 1\n", `gpu "g": peak_tflops_fp8 must be a non-negative number`},
	} {
		path := filepath.Join(dir, "c.toml")
		require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
		assert.ErrorContains(t, sim.DefaultCatalog().AddFile(path), tc.want)
	}
}
