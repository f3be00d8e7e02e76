package sim

import (
	"fmt"
	"math"
	"time"
)

// Coefficients are the per-GPU constants of the cost model. The efficiencies and overheads are
// fitted on measurements (`mosaic calibrate --fit`, `mosaic profile`); GPUs without measurements
// use the efficiencies fitted on measured ones, applied to their own datasheet peaks.
type Coefficients struct {
	// ComputeEfficiency is the fraction of peak FLOP/s that the matrix multiplications reach.
	ComputeEfficiency float64 `toml:"compute_efficiency"`
	// MemoryEfficiency is the fraction of HBM bandwidth reached while streaming the weights.
	MemoryEfficiency float64 `toml:"memory_efficiency"`
	// AttentionEfficiency is the fraction of HBM bandwidth (and of peak FLOP/s) reached by the
	// paged-attention kernels reading the KV cache.
	AttentionEfficiency float64 `toml:"attention_efficiency"`
	// IterationOverheadMS is the fixed time of one engine iteration (scheduling, kernel
	// launches, sampling set-up), milliseconds.
	IterationOverheadMS float64 `toml:"iteration_overhead_ms"`
	// PerSeqOverheadMS is the time each sequence in the batch adds to an iteration (input
	// preparation, sampling, output processing), milliseconds.
	PerSeqOverheadMS float64 `toml:"per_seq_overhead_ms"`
	// ReserveGiB is the fixed device memory that is neither weights nor KV cache (CUDA context,
	// allocator slack, graph pools), GiB. Activation memory proportional to the token budget is
	// added to it (see KVBlocks).
	ReserveGiB float64 `toml:"reserve_gib"`
	// LoadGBps is the bandwidth at which weights reach the GPU when a model is loaded, 10^9 B/s.
	LoadGBps float64 `toml:"load_gbps"`
	// StartupS is the engine start-up time paid on every model load (process start, memory
	// profiling, CUDA graph capture), seconds.
	StartupS float64 `toml:"startup_s"`
}

// Validate reports coefficients that would make the cost model meaningless.
func (c Coefficients) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"compute_efficiency", c.ComputeEfficiency},
		{"memory_efficiency", c.MemoryEfficiency},
		{"attention_efficiency", c.AttentionEfficiency},
	} {
		if !(f.v > 0 && f.v <= 1) {
			return fmt.Errorf("%s must be in (0, 1], got %g", f.name, f.v)
		}
	}
	if c.IterationOverheadMS < 0 || c.PerSeqOverheadMS < 0 || c.ReserveGiB < 0 {
		return fmt.Errorf("iteration_overhead_ms, per_seq_overhead_ms and reserve_gib must not be negative")
	}
	if c.LoadGBps <= 0 || c.StartupS < 0 {
		return fmt.Errorf("load_gbps must be positive and startup_s not negative")
	}
	return nil
}

// Batch describes the work of one engine iteration, as the cost model needs it.
type Batch struct {
	// Tokens is the number of tokens that pass through the model: every prefill-chunk token
	// plus one per decoding sequence.
	Tokens int
	// AttentionPairs is the number of (query token, key token) pairs attention computes: a
	// chunk of c tokens that starts after s cached tokens contributes c*s + c*(c+1)/2; a
	// decoding sequence with context n (including its new token) contributes n.
	AttentionPairs float64
	// KVTokens is the number of cached tokens read plus new tokens written in the KV cache.
	KVTokens float64
	// Seqs is the number of sequences in the batch.
	Seqs int
	// Sampled is the number of sequences that sample a token (the LM head runs only for them).
	Sampled int
}

// CostModel predicts the duration of engine iterations and model loads for one model on one GPU.
//
// The iteration time is a two-part roofline plus overheads:
//
//	T = o_iter + o_seq * Seqs
//	  + max( F_lin / (P * e_c),  W / (B * e_m) )          linear layers and LM head
//	  + max( F_att / (P * e_a),  K / (B * e_a) )          attention over the KV cache
//
// with, in SI units (seconds, FLOP, bytes):
//
//	F_lin = 2 * N_lin * Tokens + 2 * hidden * vocab * Sampled       FLOP
//	W     = (N_lin + hidden*vocab) * dtype_bytes                    bytes of weights streamed
//	F_att = 4 * layers * heads * head_dim * AttentionPairs          FLOP (QK^T and AV)
//	K     = 2 * layers * kv_heads * head_dim * dtype_bytes * KVTokens   bytes of KV cache
//	P     = peak dense FLOP/s of the GPU,  B = HBM bytes/s
//
// where N_lin is the number of weights of the attention projections and the gated MLP, and
// e_c, e_m, e_a, o_iter, o_seq are the fitted Coefficients. Both terms of each max grow with the
// batch, so small batches are bound by reading the weights and large prefills by compute, as on
// real GPUs; long contexts add KV traffic to every decode step.
//
// A model load takes weight_bytes / (LoadGBps * 1e9) + StartupS seconds.
type CostModel struct {
	Model *Model
	GPU   *GPU
	Coef  Coefficients

	flopsPerToken   float64 // 2 * N_lin
	flopsPerSample  float64 // 2 * hidden * vocab
	linComputeScale float64 // 1 / (P * e_c)
	weightTime      float64 // W / (B * e_m), seconds
	attPerPair      float64 // seconds per attention pair at the compute roof
	attPerKVToken   float64 // seconds per KV token at the memory roof
	fixed           float64 // o_iter, seconds
	perSeq          float64 // o_seq, seconds
}

// NewCostModel binds a model, a GPU and coefficients.
func NewCostModel(m *Model, g *GPU, c Coefficients) (*CostModel, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("coefficients for %s: %w", g.Name, err)
	}
	peak := g.PeakTFLOPs * 1e12
	bw := g.HBMGBps * 1e9
	nLin := m.linearParams()
	lmHead := float64(m.Hidden * m.Vocab)
	cm := &CostModel{
		Model:           m,
		GPU:             g,
		Coef:            c,
		flopsPerToken:   2 * nLin,
		flopsPerSample:  2 * lmHead,
		linComputeScale: 1 / (peak * c.ComputeEfficiency),
		weightTime:      (nLin + lmHead) * float64(m.DtypeBytes) / (bw * c.MemoryEfficiency),
		attPerPair:      4 * float64(m.Layers*m.Heads*m.HeadDim) / (peak * c.AttentionEfficiency),
		attPerKVToken:   m.KVBytesPerToken() / (bw * c.AttentionEfficiency),
		fixed:           c.IterationOverheadMS / 1e3,
		perSeq:          c.PerSeqOverheadMS / 1e3,
	}
	return cm, nil
}

// LinearWork returns the FLOPs per token of the transformer blocks' linear layers (2 * N_lin)
// and the bytes of their weights (N_lin * dtype_bytes), the LM head excluded.
func (c *CostModel) LinearWork() (flopsPerToken, weightBytes float64) {
	return c.flopsPerToken, c.flopsPerToken / 2 * float64(c.Model.DtypeBytes)
}

// IterationSeconds returns the duration of one iteration serving b, in seconds.
func (c *CostModel) IterationSeconds(b Batch) float64 {
	if b.Tokens == 0 {
		return 0
	}
	lin := math.Max((c.flopsPerToken*float64(b.Tokens)+c.flopsPerSample*float64(b.Sampled))*c.linComputeScale, c.weightTime)
	att := math.Max(c.attPerPair*b.AttentionPairs, c.attPerKVToken*b.KVTokens)
	return c.fixed + c.perSeq*float64(b.Seqs) + lin + att
}

// decodeLine returns the iteration time of n decoding sequences as base + slope*ctx, where ctx
// is the sum of their contexts (each including its new token). Pure decode batches have
// AttentionPairs = KVTokens = ctx, so the roofline's attention term is linear in ctx.
func (c *CostModel) decodeLine(n int) (base, slope float64) {
	lin := math.Max((c.flopsPerToken+c.flopsPerSample)*float64(n)*c.linComputeScale, c.weightTime)
	return c.fixed + c.perSeq*float64(n) + lin, math.Max(c.attPerPair, c.attPerKVToken)
}

// LoadTime is the time to load the model's weights and start the engine.
func (c *CostModel) LoadTime() time.Duration {
	s := c.Model.WeightBytes()/(c.Coef.LoadGBps*1e9) + c.Coef.StartupS
	return seconds(s)
}

// activationBytesPerToken approximates the activation memory one token of the engine's token
// budget needs at peak during the memory-profiling forward pass: the gated MLP's gate, up and
// activated tensors plus a few hidden-size buffers, in the model's precision.
func activationBytesPerToken(m *Model) float64 {
	return float64((3*m.Intermediate + 4*m.Hidden) * m.DtypeBytes)
}

// KVBlocks returns the number of KV-cache blocks of blockSize tokens that fit on the GPU:
//
//	capacity = memory * utilisation - weights - reserve - tokenBudget * activation_per_token
//
// It is an error when the weights and reserve leave no room for a cache at all.
func (c *CostModel) KVBlocks(utilisation float64, tokenBudget, blockSize int) (int, error) {
	m, g := c.Model, c.GPU
	avail := g.MemoryBytes()*utilisation - m.WeightBytes() - c.Coef.ReserveGiB*gib -
		float64(tokenBudget)*activationBytesPerToken(m)
	blocks := int(avail / (m.KVBytesPerToken() * float64(blockSize)))
	if blocks <= 0 {
		return 0, fmt.Errorf("model %s (%.1f GiB of weights) does not fit on %s (%.1f GiB at gpu_memory_utilization %.2f, %.1f GiB reserved): no room for a KV cache",
			m.ID, m.WeightBytes()/gib, g.Name, g.MemoryGiB, utilisation, c.Coef.ReserveGiB+float64(tokenBudget)*activationBytesPerToken(m)/gib)
	}
	return blocks, nil
}

// seconds converts float seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
