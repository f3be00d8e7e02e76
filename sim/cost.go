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
	// AttentionComputeEfficiency, when positive, replaces AttentionEfficiency on the attention
	// kernels' compute roof (FLOPs per query head and key), for kernels that run far below
	// peak there while reading the KV cache near its bandwidth; 0 keeps AttentionEfficiency
	// for both roofs.
	AttentionComputeEfficiency float64 `toml:"attention_compute_efficiency"`
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
	// AllReduceUS is the fixed latency of one all-reduce between tensor-parallel GPUs (kernel
	// launch and synchronisation, and the work of a layer that does not shrink when it is
	// sharded), microseconds. Unused at TP = 1.
	AllReduceUS float64 `toml:"allreduce_us"`
	// AllReduceHopUS is the latency of one step of a ring all-reduce (2(TP-1) steps), the part
	// of an all-reduce's latency that grows with the group, microseconds. Unused at TP = 1.
	AllReduceHopUS float64 `toml:"allreduce_hop_us"`
	// TPReserveGiB is the extra device memory each GPU of a tensor-parallel group loses to
	// neither weights nor KV cache (communicator and all-reduce buffers, allocated before the
	// engine measures its free memory), GiB. Unused at TP = 1.
	TPReserveGiB float64 `toml:"tp_reserve_gib"`
	// LinkEfficiency is the fraction of the interconnect's bandwidth (GPU.LinkGBps) that an
	// all-reduce reaches. Unused at TP = 1.
	LinkEfficiency float64 `toml:"link_efficiency"`
	// LaunchFloorMS is the shortest time the GPU's part of an iteration can take, set by the
	// CPU launching its kernels one by one (an eager engine: no CUDA graphs), milliseconds.
	// The GPU runs behind the launches, so the iteration's GPU part lasts max(launch_floor_ms,
	// its roofline work); 0 (engines that replay CUDA graphs) leaves the roofline alone.
	LaunchFloorMS float64 `toml:"launch_floor_ms"`
	// PagedAttentionV1Factor, when positive, multiplies the attention time of an iteration
	// that only decodes once its sequences times query heads per GPU exceed 512: vLLM's
	// PagedAttention switches there from its partitioned V2 kernel to V1, one thread block per
	// sequence and head walking the whole context (vllm/attention/ops/paged_attn.py,
	// forward_decode: use_v1 = max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs *
	// num_heads > 512), _PARTITION_SIZE = 512; vLLM PRs #1348 and #1510). Engines that decode
	// with it pay the factor (vLLM 0.6.1 on ROCm, whose custom ROCm kernel came after it, in
	// PR #8310); FlashAttention and FlashInfer backends do not (0, the default). The model
	// knows neither the batch's longest context (V2 serves contexts over 8192 tokens at any
	// batch) nor prefills apart from decodes within a mixed iteration (so an iteration with
	// a prefill chunk keeps its time; one of one-token chunks counts as a decode).
	PagedAttentionV1Factor float64 `toml:"paged_attention_v1_factor"`
	// LayerLatencyUS is GPU time each transformer layer adds to an iteration whatever its
	// work, microseconds: the start and tail of its kernels (about ten, replayed from a CUDA
	// graph), which the roofline terms miss when the kernels are small, as in the shards of
	// a tensor-parallel group or at batch 1. 0 (the default) leaves the roofline alone; the
	// engine overheads of profiles fitted end to end already hold it.
	LayerLatencyUS float64 `toml:"layer_latency_us"`
}

// pagedAttentionV1Work is the number of sequences times query heads per GPU above which vLLM's
// PagedAttention decodes with its V1 kernel (see Coefficients.PagedAttentionV1Factor).
const pagedAttentionV1Work = 512

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
	if !(c.AttentionComputeEfficiency >= 0 && c.AttentionComputeEfficiency <= 1) {
		return fmt.Errorf("attention_compute_efficiency must be in [0, 1] (0: attention_efficiency), got %g", c.AttentionComputeEfficiency)
	}
	if c.IterationOverheadMS < 0 || c.PerSeqOverheadMS < 0 || c.ReserveGiB < 0 {
		return fmt.Errorf("iteration_overhead_ms, per_seq_overhead_ms and reserve_gib must not be negative")
	}
	if c.LoadGBps <= 0 || c.StartupS < 0 {
		return fmt.Errorf("load_gbps must be positive and startup_s not negative")
	}
	if c.TPReserveGiB < 0 {
		return fmt.Errorf("tp_reserve_gib must not be negative, got %g", c.TPReserveGiB)
	}
	if c.AllReduceUS < 0 || c.AllReduceHopUS < 0 {
		return fmt.Errorf("allreduce_us and allreduce_hop_us must not be negative, got %g and %g", c.AllReduceUS, c.AllReduceHopUS)
	}
	if !(c.LinkEfficiency > 0 && c.LinkEfficiency <= 1) {
		return fmt.Errorf("link_efficiency must be in (0, 1], got %g", c.LinkEfficiency)
	}
	if !(c.LaunchFloorMS >= 0) || math.IsInf(c.LaunchFloorMS, 0) {
		return fmt.Errorf("launch_floor_ms must be a non-negative number, got %g", c.LaunchFloorMS)
	}
	if !(c.LayerLatencyUS >= 0) || math.IsInf(c.LayerLatencyUS, 0) {
		return fmt.Errorf("layer_latency_us must be a non-negative number, got %g", c.LayerLatencyUS)
	}
	if !(c.PagedAttentionV1Factor >= 0) || math.IsInf(c.PagedAttentionV1Factor, 0) {
		return fmt.Errorf("paged_attention_v1_factor must be a non-negative number (0: none), got %g", c.PagedAttentionV1Factor)
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

// CostModel predicts the duration of engine iterations and model loads for one model on one GPU,
// or on a tensor-parallel group of TP GPUs of one node (WithTP).
//
// The iteration time is a two-part roofline of one GPU's shard, plus the all-reduces that join
// the shards, plus overheads:
//
//	T = o_iter + o_seq * Seqs
//	  + max( F_lin / (TP * P_lin * e_c),  W(Tokens) / (TP * B * e_m) )   linear layers and LM head
//	  + layers * l                                                   fixed time per layer
//	  + max( F_att / (TP * P * e_ac), K / (B * e_a) )                attention over the KV cache
//	  + [TP > 1] 2 * layers * ( a_ar + 2(TP-1) * a_hop
//	                          + 2(TP-1)/TP * Tokens * hidden * act_bytes / (L(TP) * e_l) )
//
// with, in SI units (seconds, FLOP, bytes):
//
//	F_lin = 2 * N_act * Tokens + 2 * hidden * vocab * Sampled          FLOP
//	W     = (N_att + X(Tokens) * N_exp + hidden*vocab) * dtype_bytes   bytes of weights streamed
//	F_att = 4 * layers * heads * head_dim * AttentionPairs             FLOP (QK^T and AV)
//	K     = 2 * layers * kv_heads_per_gpu * head_dim * kv_bytes * KVTokens   bytes of KV cache
//	P     = peak dense FLOP/s of one GPU,  B = its HBM bytes/s,  L(TP) = GPU.CollectiveGBps(TP)
//	P_lin = its FP8 peak for FP8 weights (dtype_bytes = 1) where it has one, P otherwise
//	kv_bytes = the KV cache's bytes per element (kv_dtype_bytes, else act_bytes)
//	act_bytes = max(dtype_bytes, 2): FP8 models keep BF16 activations
//
// where N_att is the number of weights of the attention projections and N_exp of one gated MLP
// (summed over layers), N_act = N_att + k * N_exp the weights a token is multiplied by (k
// experts per token; k = 1 and X = 1 for a dense model), X(Tokens) the expected number of
// distinct experts the batch's tokens touch per layer (Model.ExpectedExperts), and
// kv_heads_per_gpu = max(kv_heads / TP, 1) (vLLM replicates KV heads when TP exceeds them).
// e_c, e_m, e_a, o_iter, o_seq, a_ar, a_hop and e_l are the fitted Coefficients; e_ac is e_a
// unless AttentionComputeEfficiency gives it apart; l = LayerLatencyUS (0 by default). The last line
// is a ring all-reduce of the activations after the attention output projection and after the
// MLP of every layer: a fixed latency a_ar, 2(TP-1) steps of latency a_hop, and 2(TP-1)/TP of
// the message through the link. a_ar also absorbs the part of each layer (norms, residual
// adds, kernel-launch floors) that does not shrink when the layer is sharded. Both terms of
// each max grow with the batch, so small batches are bound by reading the weights and large
// prefills by compute, as on real GPUs; long contexts add KV traffic to every decode step.
//
// An eager engine (no CUDA graphs) launches every kernel from the CPU and the GPU runs behind
// the launches, so its GPU part, the three roofline lines above, lasts at least the launch
// floor f = LaunchFloorMS: T = o_iter + o_seq * Seqs + max(f, linear + attention + all-reduce).
// With f = 0 (the default: engines that replay CUDA graphs) the sum stands as written.
//
// An engine that decodes with vLLM's PagedAttention kernels runs its unpartitioned V1 kernel
// when Seqs * heads / TP > 512; with PagedAttentionV1Factor = v > 0, the attention line of an
// iteration that only decodes (Tokens = Seqs) is then multiplied by v.
//
// A model load takes weight_bytes / (LoadGBps * 1e9) + StartupS seconds (a tensor-parallel
// group reads the whole checkpoint at the node's load bandwidth).
type CostModel struct {
	Model *Model
	GPU   *GPU
	Coef  Coefficients
	// TP is the tensor-parallel degree: the number of GPUs the model is sharded over.
	TP int

	flopsPerToken     float64 // 2 * N_act
	flopsPerSample    float64 // 2 * hidden * vocab
	linComputeScale   float64 // 1 / (TP * P * e_c)
	weightTime        float64 // dense part of W / (TP * B * e_m), seconds
	expertTime        float64 // one expert's share of W / (TP * B * e_m) (MoE only), seconds
	attPerPair        float64 // seconds per attention pair at the compute roof
	attPerKVToken     float64 // seconds per KV token at the memory roof
	fixed             float64 // o_iter, seconds
	perSeq            float64 // o_seq, seconds
	allReduceFixed    float64 // latency of one iteration's all-reduces, seconds
	allReducePerToken float64 // their transfer time per token, seconds
	floor             float64 // f: the launch floor of the GPU part, seconds
	v1Factor          float64 // attention factor of decode iterations of v1Seqs sequences or more (0: none)
	layerFixed        float64 // layers * layer_latency_us, seconds
	v1Seqs            int
}

// CostOption configures a cost model beyond its model, GPU and coefficients.
type CostOption func(*costOptions)

type costOptions struct{ tp int }

// WithTP shards the model over tp GPUs of one node (tensor parallelism): 1, 2, 4 or 8.
func WithTP(tp int) CostOption { return func(o *costOptions) { o.tp = tp } }

// ValidTP reports whether the model can be sharded over tp GPUs the way vLLM shards it: tp is
// 1, 2, 4 or 8, divides the attention heads and the (expert) intermediate size, and the KV
// heads divide or are divided by it.
func ValidTP(m *Model, tp int) error {
	switch tp {
	case 1, 2, 4, 8:
	default:
		return fmt.Errorf("tensor-parallel degree must be 1, 2, 4 or 8, got %d", tp)
	}
	switch {
	case m.Heads%tp != 0:
		return fmt.Errorf("model %s: %d attention heads do not split over %d GPUs", m.ID, m.Heads, tp)
	case m.KVHeads%tp != 0 && tp%m.KVHeads != 0:
		return fmt.Errorf("model %s: %d KV heads do not split over (or replicate across) %d GPUs", m.ID, m.KVHeads, tp)
	case m.Intermediate%tp != 0:
		return fmt.Errorf("model %s: intermediate size %d does not split over %d GPUs", m.ID, m.Intermediate, tp)
	}
	return nil
}

// NewCostModel binds a model, a GPU (or a tensor-parallel group of them, WithTP) and
// coefficients.
func NewCostModel(m *Model, g *GPU, c Coefficients, opts ...CostOption) (*CostModel, error) {
	o := costOptions{tp: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("coefficients for %s: %w", g.Name, err)
	}
	if err := ValidTP(m, o.tp); err != nil {
		return nil, err
	}
	if o.tp > 1 && g.CollectiveGBps(o.tp) <= 0 {
		return nil, fmt.Errorf("GPU %s has no interconnect in the catalog (interconnect, link_gbps): cannot run tensor parallelism", g.Name)
	}
	tp := float64(o.tp)
	peak := g.PeakTFLOPs * 1e12
	bw := g.HBMGBps * 1e9
	lmHead := float64(m.Hidden * m.Vocab)
	attCompute := c.AttentionEfficiency
	if c.AttentionComputeEfficiency > 0 {
		attCompute = c.AttentionComputeEfficiency
	}
	cm := &CostModel{
		Model:           m,
		GPU:             g,
		Coef:            c,
		TP:              o.tp,
		flopsPerToken:   2 * m.activeLinearParams(),
		flopsPerSample:  2 * lmHead,
		linComputeScale: 1 / (g.LinearPeakTFLOPs(m) * 1e12 * c.ComputeEfficiency * tp),
		attPerPair:      4 * float64(m.Layers*(m.Heads/o.tp)*m.HeadDim) / (peak * attCompute),
		attPerKVToken:   kvBytesPerTokenPerGPU(m, o.tp) / (bw * c.AttentionEfficiency),
		fixed:           c.IterationOverheadMS / 1e3,
		perSeq:          c.PerSeqOverheadMS / 1e3,
		floor:           c.LaunchFloorMS / 1e3,
		v1Factor:        c.PagedAttentionV1Factor,
		v1Seqs:          pagedAttentionV1Work/(m.Heads/o.tp) + 1,
		layerFixed:      float64(m.Layers) * c.LayerLatencyUS / 1e6,
	}
	if m.MoE() {
		nAtt := float64(m.Layers) * m.attentionParams()
		cm.weightTime = (nAtt + lmHead) * float64(m.DtypeBytes) / tp / (bw * c.MemoryEfficiency)
		cm.expertTime = float64(m.Layers) * m.expertParams() * float64(m.DtypeBytes) / tp / (bw * c.MemoryEfficiency)
	} else {
		cm.weightTime = (m.linearParams() + lmHead) * float64(m.DtypeBytes) / tp / (bw * c.MemoryEfficiency)
	}
	if o.tp > 1 {
		steps := 2 * (tp - 1)
		allReduces := 2 * float64(m.Layers)
		cm.allReduceFixed = allReduces * (c.AllReduceUS + steps*c.AllReduceHopUS) / 1e6
		cm.allReducePerToken = allReduces * steps / tp * float64(m.Hidden*m.activationBytes()) /
			(g.CollectiveGBps(o.tp) * 1e9 * c.LinkEfficiency)
	}
	return cm, nil
}

// kvHeadsPerGPU is the number of KV heads each of tp GPUs holds.
func kvHeadsPerGPU(m *Model, tp int) int { return max(m.KVHeads/tp, 1) }

// kvBytesPerTokenPerGPU is the KV-cache footprint of one token on one GPU of a tp group.
func kvBytesPerTokenPerGPU(m *Model, tp int) float64 {
	return float64(2 * m.Layers * kvHeadsPerGPU(m, tp) * m.HeadDim * m.KVBytes())
}

// LinearWork returns the FLOPs per token of the transformer blocks' linear layers (2 * N_act,
// the whole model, not one shard) and the bytes of their weights (N_lin * dtype_bytes), the LM
// head excluded.
func (c *CostModel) LinearWork() (flopsPerToken, weightBytes float64) {
	return c.flopsPerToken, c.Model.linearParams() * float64(c.Model.DtypeBytes)
}

// weightSeconds is the time to stream the weights one iteration of tokens tokens reads.
func (c *CostModel) weightSeconds(tokens int) float64 {
	if c.expertTime == 0 {
		return c.weightTime
	}
	return c.weightTime + c.expertTime*c.Model.ExpectedExperts(tokens)
}

// IterationSeconds returns the duration of one iteration serving b, in seconds.
func (c *CostModel) IterationSeconds(b Batch) float64 {
	if b.Tokens == 0 {
		return 0
	}
	over := c.fixed + c.perSeq*float64(b.Seqs)
	lin, att, ar := c.roofline(b)
	if c.floor > 0 {
		return over + max(c.floor, lin+att+ar)
	}
	return over + lin + att + ar
}

// roofline returns the GPU's work in an iteration serving b (b.Tokens > 0): its linear
// layers, its attention and its all-reduces (0 at TP = 1), in seconds.
func (c *CostModel) roofline(b Batch) (lin, att, ar float64) {
	lin = max((c.flopsPerToken*float64(b.Tokens)+c.flopsPerSample*float64(b.Sampled))*c.linComputeScale, c.weightSeconds(b.Tokens)) + c.layerFixed
	att = max(c.attPerPair*b.AttentionPairs, c.attPerKVToken*b.KVTokens)
	if c.v1Factor > 0 && b.Tokens == b.Seqs && b.Seqs >= c.v1Seqs {
		att *= c.v1Factor
	}
	if c.TP > 1 {
		ar = c.allReduceFixed + c.allReducePerToken*float64(b.Tokens)
	}
	return lin, att, ar
}

// ShardSeconds is the GPU part of an iteration serving b on one GPU of the group without the
// group's all-reduces: what that GPU computes alone (at TP = 1, the whole GPU part), its
// roofline terms, or the launch floor where that is longer.
func (c *CostModel) ShardSeconds(b Batch) float64 {
	if b.Tokens == 0 {
		return 0
	}
	lin, att, _ := c.roofline(b)
	if c.floor > 0 {
		return max(c.floor, lin+att)
	}
	return lin + att
}

// IterationParts splits IterationSeconds into the GPU's work (the roofline terms and the
// all-reduces) and the engine's overheads (o_iter + o_seq * Seqs), in seconds.
func (c *CostModel) IterationParts(b Batch) (gpu, overhead float64) {
	if b.Tokens == 0 {
		return 0, 0
	}
	overhead = c.fixed + c.perSeq*float64(b.Seqs)
	return c.IterationSeconds(b) - overhead, overhead
}

// FloorSeconds is what the launch floor adds to IterationSeconds(b): how far the floor
// exceeds the GPU's roofline and all-reduce work (0 without a floor or above it).
func (c *CostModel) FloorSeconds(b Batch) float64 {
	if c.floor <= 0 || b.Tokens == 0 {
		return 0
	}
	lin, att, ar := c.roofline(b)
	return max(0, c.floor-(lin+att+ar))
}

// LinearParts returns two terms of IterationSeconds(b): the linear layers' (and which roof
// they are on, "compute" or "weights") and the all-reduces', in seconds.
func (c *CostModel) LinearParts(b Batch) (linear, allReduce float64, bound string) {
	if b.Tokens == 0 {
		return 0, 0, ""
	}
	compute := (c.flopsPerToken*float64(b.Tokens) + c.flopsPerSample*float64(b.Sampled)) * c.linComputeScale
	weights := c.weightSeconds(b.Tokens)
	linear, bound = weights, "weights"
	if compute > weights {
		linear, bound = compute, "compute"
	}
	linear += c.layerFixed
	if c.TP > 1 {
		allReduce = c.allReduceFixed + c.allReducePerToken*float64(b.Tokens)
	}
	return linear, allReduce, bound
}

// decodeLine returns the iteration time of n decoding sequences as base + slope*ctx, where ctx
// is the sum of their contexts (each including its new token), without the launch floor. Pure
// decode batches have AttentionPairs = KVTokens = ctx, so the roofline's attention term is
// linear in ctx.
func (c *CostModel) decodeLine(n int) (base, slope float64) {
	lin := max((c.flopsPerToken+c.flopsPerSample)*float64(n)*c.linComputeScale, c.weightSeconds(n)) + c.layerFixed
	base = c.fixed + c.perSeq*float64(n) + lin
	if c.TP > 1 {
		base += c.allReduceFixed + c.allReducePerToken*float64(n)
	}
	slope = max(c.attPerPair, c.attPerKVToken)
	if c.v1Factor > 0 && n >= c.v1Seqs {
		slope *= c.v1Factor
	}
	return base, slope
}

// decodeSeconds is the duration of k decode iterations of n sequences whose contexts sum to
// ctx0 before the first: iteration i (1-based) costs IterationSeconds of a decode batch with
// ctx0 + n*i context tokens. Without a launch floor that is base + slope*(ctx0 + n*i), summed
// in closed form; with one, the iterations whose GPU part stays under the floor (the first m:
// the GPU part grows with the context) take the floor instead.
func (c *CostModel) decodeSeconds(n, k int, ctx0 float64) float64 {
	base, slope := c.decodeLine(n)
	kk, nn := float64(k), float64(n)
	if c.floor <= 0 {
		return kk*(base+slope*ctx0) + slope*nn*kk*(kk+1)/2
	}
	over := c.fixed + c.perSeq*nn
	gpu0 := base - over + slope*ctx0 // GPU part of iteration i: gpu0 + slope*n*i
	m := 0.0                         // iterations at the floor: gpu0 + slope*n*i < floor
	switch step := slope * nn; {
	case step <= 0:
		if gpu0 < c.floor {
			m = kk
		}
	default:
		// i < x with x = (floor - gpu0) / step, so m = ceil(x) - 1 clamped to [0, k].
		m = min(max(math.Ceil((c.floor-gpu0)/step)-1, 0), kk)
	}
	return kk*over + m*c.floor + (kk-m)*gpu0 + slope*nn*(kk*(kk+1)/2-m*(m+1)/2)
}

// LoadTime is the time to load the model's weights and start the engine.
func (c *CostModel) LoadTime() time.Duration {
	s := c.Model.WeightBytes()/(c.Coef.LoadGBps*1e9) + c.Coef.StartupS
	return seconds(s)
}

// activationBytesPerToken approximates the activation memory one token of the engine's token
// budget needs at peak on one GPU of a tp group during the memory-profiling forward pass: the
// gated MLP's gate, up and activated tensors (of the k experts a token visits, split over the
// group) plus a few hidden-size buffers, in the activations' precision.
func activationBytesPerToken(m *Model, tp int) float64 {
	_, k := m.experts()
	return float64((3*m.Intermediate*k/tp + 4*m.Hidden) * m.activationBytes())
}

// WeightBytesPerGPU is the size of the weights one GPU of the group holds: 1/TP of the model,
// plus the KV projections it replicates when TP exceeds the KV heads.
func (c *CostModel) WeightBytesPerGPU() float64 {
	m := c.Model
	w := m.WeightBytes() / float64(c.TP)
	if c.TP > m.KVHeads {
		perGPU := float64(2 * m.Hidden * m.HeadDim * m.Layers * m.DtypeBytes) // one KV head
		w += perGPU - perGPU*float64(m.KVHeads)/float64(c.TP)
	}
	return w
}

// KVBlocks returns the number of KV-cache blocks of blockSize tokens that fit on each GPU of
// the group (a block holds the keys and values of blockSize tokens, each GPU the heads of its
// shard):
//
//	capacity = memory * utilisation - weights/TP - reserve [- tp_reserve if TP > 1]
//	           - tokenBudget * activation_per_token
//
// It is an error when the weights and reserve leave no room for a cache at all.
func (c *CostModel) KVBlocks(utilisation float64, tokenBudget, blockSize int) (int, error) {
	m, g := c.Model, c.GPU
	weights := c.WeightBytesPerGPU()
	reserve := c.Coef.ReserveGiB
	if c.TP > 1 {
		reserve += c.Coef.TPReserveGiB
	}
	avail := g.MemoryBytes()*utilisation - weights - reserve*gib -
		float64(tokenBudget)*activationBytesPerToken(m, c.TP)
	blocks := int(avail / (kvBytesPerTokenPerGPU(m, c.TP) * float64(blockSize)))
	if blocks <= 0 {
		where := g.Name
		if c.TP > 1 {
			where = fmt.Sprintf("%d x %s (%.1f GiB of weights per GPU)", c.TP, g.Name, weights/gib)
		}
		return 0, fmt.Errorf("model %s (%.1f GiB of weights) does not fit on %s (%.1f GiB at gpu_memory_utilization %.2f, %.1f GiB reserved): no room for a KV cache",
			m.ID, m.WeightBytes()/gib, where, g.MemoryGiB, utilisation, reserve+float64(tokenBudget)*activationBytesPerToken(m, c.TP)/gib)
	}
	return blocks, nil
}

// seconds converts float seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
