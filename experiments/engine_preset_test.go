package experiments_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/sim"
)

// batchExperiment is a one-model batch experiment with the given cluster and engine tables.
func batchExperiment(cluster, engine, arch string) string {
	return `name = "t"

[cluster]
` + cluster + `

[engine]
` + engine + `

[[model]]
name = "M"
arch = "` + arch + `"
output_tokens = { dist = "fixed", value = 32 }

[workload]
kind = "batch"
requests = 8
input_tokens = { dist = "fixed", value = 256 }
`
}

// Without a preset nothing changes: vLLM's defaults and the profile's coefficients.
func TestNoPresetKeepsDefaults(t *testing.T) {
	r, err := resolve(t, batchExperiment(`gpu = "A100-80GB"`, ``, "qwen2.5-7b"))
	require.NoError(t, err)
	m := r.Models[0]
	assert.Nil(t, r.Preset)
	assert.Equal(t, 1, r.TP)
	assert.True(t, m.Engine.ChunkedPrefill)
	assert.Equal(t, 8192, m.Engine.MaxBatchedTokens)
	assert.Equal(t, 256, m.Engine.MaxNumSeqs)
	assert.False(t, m.PrefixCaching)
	assert.Equal(t, sim.DefaultProfile().For(r.GPU), m.Cost.Coef)
	assert.Equal(t, "built-in", r.Profile.Source)
}

func TestEnginePresets(t *testing.T) {
	for _, tc := range []struct {
		name, gpu, engine, arch string
		chunked, caching        bool
		budget, seqs            int
		perSeqMS                float64
	}{
		// vLLM 0.6 without chunked prefill: the budget is the model's length.
		{"vllm-0.6", "A100-80GB", `preset = "vllm-0.6"`, "qwen2.5-7b", false, false, 32768, 256, 0.10416},
		// vLLM V1 picks larger defaults on 80 GB GPUs that are not A100s; its serving fit has
		// no per-sequence overhead.
		{"vllm-v1 on A100", "A100-80GB", `preset = "vllm-v1"`, "qwen2.5-7b", true, true, 2048, 256, 0},
		{"vllm-v1 on H100", "H100-80GB", `preset = "vllm-v1"`, "qwen2.5-7b", true, true, 8192, 1024, 0},
		// Explicit keys override the preset.
		{"overrides", "H100-80GB", "preset = \"vllm-v1\"\nmax_num_seqs = 64\nprefix_caching = false\nper_seq_overhead_ms = 0.05", "qwen2.5-7b", true, false, 8192, 64, 0.05},
		{"override without preset", "H100-80GB", "per_seq_overhead_ms = 0.02\nchunked_prefill = false\nmax_batched_tokens = 32768", "qwen2.5-7b", false, false, 32768, 256, 0.02},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := resolve(t, batchExperiment(`gpu = "`+tc.gpu+`"`, tc.engine, tc.arch))
			require.NoError(t, err)
			m := r.Models[0]
			assert.Equal(t, tc.chunked, m.Engine.ChunkedPrefill)
			assert.Equal(t, tc.caching, m.PrefixCaching)
			assert.Equal(t, tc.budget, m.Engine.MaxBatchedTokens)
			assert.Equal(t, tc.seqs, m.Engine.MaxNumSeqs)
			assert.Equal(t, tc.perSeqMS, m.Cost.Coef.PerSeqOverheadMS)
			// What the run records is what the cost model uses.
			assert.Equal(t, m.Cost.Coef, r.Profile.For(r.GPU))
			rep, err := r.RunBatch()
			require.NoError(t, err)
			assert.EqualValues(t, 8*32, rep.Result.OutputTokens)
		})
	}
}

// The built-in vllm-0.6 preset is the engine `mosaic calibrate` simulates the benchmark rows
// on, with the overheads those rows were fitted to.
func TestVLLM06PresetMatchesCalibration(t *testing.T) {
	cat := sim.DefaultCatalog()
	p, err := cat.Engine("vllm-0.6")
	require.NoError(t, err)
	prof := sim.DefaultProfile()
	g, err := cat.GPU("A100-40GB")
	require.NoError(t, err)
	assert.Equal(t, prof.For(g), p.Apply(prof.For(g)), "the preset's overheads are the A100 fit's")
	assert.False(t, p.ChunkedPrefill)
	assert.NotEmpty(t, p.Source)
	assert.NotEmpty(t, p.OverheadSource)
}

func TestTensorParallelCluster(t *testing.T) {
	r, err := resolve(t, batchExperiment("gpu = \"H100-80GB\"\nworkers = 2\ntp = 2", `preset = "vllm-v1"`, "llama-3-70b"))
	require.NoError(t, err)
	assert.Equal(t, 2, r.TP)
	assert.Equal(t, 2, r.Models[0].Cost.TP)
	assert.Contains(t, r.String(), "2 x (2 x H100-80GB, tensor-parallel)")
	rep, err := r.RunBatch()
	require.NoError(t, err)
	assert.EqualValues(t, 8*32, rep.Result.OutputTokens)

	for _, tc := range []struct{ name, cluster, engine, arch, want string }{
		{"bad tp", "gpu = \"H100-80GB\"\ntp = 3", ``, "llama-3-8b", "exp.toml:5: cluster.tp: must be 1, 2, 4 or 8 GPUs per worker, got 3"},
		{"heads do not split", "gpu = \"H100-80GB\"\ntp = 8", ``, "qwen2-7b", "model[0].arch: model Qwen/Qwen2-7B: 28 attention heads do not split over 8 GPUs (cluster.tp = 8)"},
		{"too large for the group", "gpu = \"A100-40GB\"\ntp = 2", ``, "llama-3-70b", "does not fit on 2 x A100-40GB"},
		{"unknown preset", `gpu = "H100-80GB"`, `preset = "tgi-9"`, "llama-3-8b", `exp.toml:7: engine.preset: unknown engine preset "tgi-9" (known: vllm-0.6, vllm-v1`},
		{"negative overhead", `gpu = "H100-80GB"`, `per_seq_overhead_ms = -1.0`, "llama-3-8b", "exp.toml:7: engine.per_seq_overhead_ms: must not be negative, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resolve(t, batchExperiment(tc.cluster, tc.engine, tc.arch))
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), tc.want), "got %v", err)
		})
	}
}

// [engine] launch_floor_ms reaches the cost model and lengthens a batch whose decode steps
// are shorter than the floor; a preset with a floor must say where it was measured.
func TestEngineLaunchFloor(t *testing.T) {
	run := func(engine string) (sim.Coefficients, float64) {
		r, err := resolve(t, batchExperiment(`gpu = "H100-80GB"`, engine, "qwen2.5-7b"))
		require.NoError(t, err)
		rep, err := r.RunBatch()
		require.NoError(t, err)
		return r.Models[0].Cost.Coef, rep.Result.Makespan.Seconds()
	}
	plain, base := run(`preset = "vllm-0.6"`)
	assert.Zero(t, plain.LaunchFloorMS)
	coef, floored := run("preset = \"vllm-0.6\"\nlaunch_floor_ms = 50")
	assert.Equal(t, 50.0, coef.LaunchFloorMS)
	// 32 output tokens take 32 iterations (a prefill and 31 decodes), each at least the floor,
	// while without it the whole batch takes far less.
	assert.GreaterOrEqual(t, floored, 32*0.050)
	assert.Less(t, base, 0.5*floored)

	_, err := resolve(t, batchExperiment(`gpu = "H100-80GB"`, "launch_floor_ms = -1", "qwen2.5-7b"))
	assert.ErrorContains(t, err, "engine.launch_floor_ms")

	cat := sim.DefaultCatalog()
	path := filepath.Join(t.TempDir(), "eager.toml")
	require.NoError(t, os.WriteFile(path, []byte("[[engine]]\nname = \"eager\"\nsource = \"test\"\nmax_num_seqs = 8\nmax_batched_tokens = 2048\nchunked_prefill = true\nlaunch_floor_ms = 9\n"), 0o644))
	assert.ErrorContains(t, cat.AddFile(path), "overhead_source is missing")
}

// Prefill-decode overlap grows running sequences, which an engine without chunked prefill
// never prefills again: the experiment names the policy's key instead of stalling.
func TestOverlapNeedsChunkedPrefill(t *testing.T) {
	e, err := experiments.Load("examples/faster-moa.toml")
	require.NoError(t, err)
	require.NoError(t, e.Set("engine.chunked_prefill=false"))
	_, err = e.Resolve()
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".overlap")
	assert.Contains(t, err.Error(), "needs chunked prefill")
}

// The online policy keeps models that fit a worker together resident: Faster-MoA's agents (4B,
// 8B and 32B at memory fractions that share one H200) are loaded once per worker, not swapped
// in and out between calls.
func TestOnlineKeepsModelsThatFitTogether(t *testing.T) {
	e, err := experiments.Load("examples/faster-moa.toml")
	require.NoError(t, err)
	require.NoError(t, e.Set("workload.queries=150")) // the swaps began after about 100 queries
	r, err := e.Resolve()
	require.NoError(t, err)
	require.NoError(t, r.SelectPolicies([]string{"plain"}))
	run, err := r.Simulate(context.Background(), nil)
	require.NoError(t, err)
	loads := run.Results[0].Loads
	require.NotEmpty(t, loads)
	seen := map[string]bool{}
	for _, l := range loads {
		key := fmt.Sprintf("%d/%s", l.Worker, l.Model)
		assert.False(t, seen[key], "worker %d loads %s twice", l.Worker, l.Model)
		seen[key] = true
	}
	assert.LessOrEqual(t, len(loads), 3*run.Experiment.Cluster.Workers)
}
