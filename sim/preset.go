package sim

import (
	"fmt"
	"math"
	"strings"
)

// EnginePreset is a named inference-engine configuration: the scheduler defaults of one engine
// version and, where measured, its CPU overheads. An experiment selects one with
// [engine] preset = "NAME"; explicit [engine] keys override it. Presets live in catalog files
// as [[engine]] tables (the built-in ones in catalog/engines.toml), each with its provenance.
type EnginePreset struct {
	Name        string   `toml:"name"`
	Aliases     []string `toml:"aliases"`
	Description string   `toml:"description"`
	// Source says where the scheduler defaults come from (engine version and file).
	Source string `toml:"source"`

	// ChunkedPrefill: prompts split over iterations and mixed with decodes.
	ChunkedPrefill bool `toml:"chunked_prefill"`
	// MaxBatchedTokens is the token budget of an iteration; 0 means max(max_model_len, 2048),
	// vLLM V0's budget without chunked prefill.
	MaxBatchedTokens int `toml:"max_batched_tokens"`
	// MaxNumSeqs caps the sequences of an iteration.
	MaxNumSeqs int `toml:"max_num_seqs"`
	// LargeGPUMaxBatchedTokens and LargeGPUMaxNumSeqs, when positive, replace the two above on
	// GPUs of at least 70 GiB that are not A100s (vLLM V1's rule for H100-class devices).
	LargeGPUMaxBatchedTokens int `toml:"large_gpu_max_batched_tokens"`
	LargeGPUMaxNumSeqs       int `toml:"large_gpu_max_num_seqs"`
	// PrefixCaching says whether the engine caches shared prompt prefixes by default. It is
	// carried for experiments and replay; the simulated engine does not model caching yet.
	PrefixCaching bool `toml:"prefix_caching"`
	// CUDAGraphSizes are the batch sizes the engine captures CUDA graphs for (decode batches
	// up to the largest run as graphs). Carried for documentation; not modelled.
	CUDAGraphSizes []int `toml:"cuda_graph_sizes"`

	// IterationOverheadMS and PerSeqOverheadMS are the engine's CPU overheads per iteration and
	// per sequence in the batch, milliseconds; they replace the GPU profile's. Absent (nil):
	// the engine has not been measured, and the profile's overheads are used.
	IterationOverheadMS *float64 `toml:"iteration_overhead_ms"`
	PerSeqOverheadMS    *float64 `toml:"per_seq_overhead_ms"`
	// LaunchFloorMS is the launch floor of an eager engine's iterations (see
	// Coefficients.LaunchFloorMS), milliseconds; it replaces the GPU profile's. Absent (nil):
	// the profile's (0 in the built-in profile: engines that replay CUDA graphs).
	LaunchFloorMS *float64 `toml:"launch_floor_ms"`
	// OverheadSource says which measurement the overheads were fitted on.
	OverheadSource string `toml:"overhead_source"`
}

// largeGPU is vLLM V1's test for its larger defaults: at least 70 GiB and not an A100.
func largeGPU(g *GPU) bool {
	return g.MemoryGiB >= 70 && !strings.Contains(strings.ToLower(g.Name), "a100")
}

// Budget returns the preset's token budget and sequence cap for model m on GPU g.
func (p *EnginePreset) Budget(m *Model, g *GPU) (maxBatchedTokens, maxNumSeqs int) {
	maxBatchedTokens, maxNumSeqs = p.MaxBatchedTokens, p.MaxNumSeqs
	if g != nil && largeGPU(g) {
		if p.LargeGPUMaxBatchedTokens > 0 {
			maxBatchedTokens = p.LargeGPUMaxBatchedTokens
		}
		if p.LargeGPUMaxNumSeqs > 0 {
			maxNumSeqs = p.LargeGPUMaxNumSeqs
		}
	}
	if maxBatchedTokens == 0 {
		maxBatchedTokens = max(m.MaxModelLen, 2048)
	}
	return maxBatchedTokens, maxNumSeqs
}

// Apply returns c with the preset's CPU overheads, where it has them.
func (p *EnginePreset) Apply(c Coefficients) Coefficients {
	if p.IterationOverheadMS != nil {
		c.IterationOverheadMS = *p.IterationOverheadMS
	}
	if p.PerSeqOverheadMS != nil {
		c.PerSeqOverheadMS = *p.PerSeqOverheadMS
	}
	if p.LaunchFloorMS != nil {
		c.LaunchFloorMS = *p.LaunchFloorMS
	}
	return c
}

func (p *EnginePreset) validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("engine preset without name")
	case p.Source == "":
		return fmt.Errorf("engine preset %q: source is missing (say where its defaults come from)", p.Name)
	case p.MaxNumSeqs <= 0:
		return fmt.Errorf("engine preset %q: max_num_seqs must be positive", p.Name)
	case p.MaxBatchedTokens < 0 || p.LargeGPUMaxBatchedTokens < 0 || p.LargeGPUMaxNumSeqs < 0:
		return fmt.Errorf("engine preset %q: max_batched_tokens and the large-GPU values must not be negative", p.Name)
	case p.MaxBatchedTokens > 0 && p.MaxBatchedTokens < p.MaxNumSeqs:
		return fmt.Errorf("engine preset %q: max_batched_tokens (%d) must be at least max_num_seqs (%d)", p.Name, p.MaxBatchedTokens, p.MaxNumSeqs)
	case p.MaxBatchedTokens == 0 && p.ChunkedPrefill:
		return fmt.Errorf("engine preset %q: max_batched_tokens = 0 (the model length) is vLLM V0's budget without chunked prefill; give a budget for chunked prefill", p.Name)
	}
	for _, v := range []*float64{p.IterationOverheadMS, p.PerSeqOverheadMS, p.LaunchFloorMS} {
		if v != nil && (!(*v >= 0) || math.IsInf(*v, 0)) {
			return fmt.Errorf("engine preset %q: overheads and the launch floor must be non-negative numbers, got %g", p.Name, *v)
		}
	}
	if (p.IterationOverheadMS != nil || p.PerSeqOverheadMS != nil || p.LaunchFloorMS != nil) && p.OverheadSource == "" {
		return fmt.Errorf("engine preset %q: overhead_source is missing (say which measurement the overheads were fitted on)", p.Name)
	}
	for i, s := range p.CUDAGraphSizes {
		if s <= 0 || (i > 0 && s <= p.CUDAGraphSizes[i-1]) {
			return fmt.Errorf("engine preset %q: cuda_graph_sizes must be positive and increasing", p.Name)
		}
	}
	return nil
}
