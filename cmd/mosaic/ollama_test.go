package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/gguf"
	"github.com/mosaic-sched/mosaic/internal/ollamatest"
	"github.com/mosaic-sched/mosaic/results"
)

// The real-engine check: replay drives a serving engine this project did not write. Two
// `ollama serve` processes (Ollama vendors llama.cpp; `make ollama` builds it) stand for two
// workers on this machine's CPU, one thread each, serving small Llama-shaped models whose
// GGUF files the test writes (internal/gguf). `mosaic profile` measures one of them and fits
// the cost model of the "GPU" (here: one CPU thread) to it, `mosaic sim` simulates the MoA
// experiment with that profile, and `mosaic replay` measures it through Ollama's own API:
// model loads and unloads go through the engine, prompts are text, and every call's token
// counts are checked. The test prints simulated against measured makespans and speedups per
// policy; with MOSAIC_OLLAMA_OUT=DIR it keeps the files there. It skips, saying why, where
// Ollama is not built.

// ollamaCatalog describes the hardware and the model for the simulator: one CPU thread as
// the "GPU" (its peak figures only seed the fit; the profile measures what matters) and the
// architecture of the test's GGUF models (gguf.Spec's defaults, f32 weights).
const ollamaCatalog = `
[[gpu]]
name = "CPU-1T"
vendor = "cpu"
peak_tflops = 0.05
hbm_gbps = 10
memory_gib = 8

[[model]]
id = "mosaic/tiny-llama-f32"
aliases = ["tiny-llama"]
layers = 2
hidden = 128
heads = 4
kv_heads = 2
head_dim = 32
intermediate = 384
vocab = 1024
dtype_bytes = 4
params_b = 0.000656
max_model_len = 2048
`

// ollamaExperiment is a small MoA: four experts, two per query, one of them (A, the longest
// writer) also the aggregator, on two
// workers of one model each; the engine's limits are Ollama's (4 parallel slots, a batch of
// 512 tokens); %s are the catalog, the profile, and the two servers' URLs.
const ollamaExperiment = `name = "moa-on-ollama"
seed = 3

[cluster]
gpu = "CPU-1T"
workers = 2
catalog = %q
profile = %q

[engine]
max_num_seqs = 4
max_batched_tokens = 512

[[model]]
name = "E1"
arch = "tiny-llama"
output_tokens = { dist = "lognormal", mean = 120, p99 = 400, max = 500 }
forward_tokens = { dist = "fixed", value = 40 }
accuracy = 0.6

[[model]]
name = "E2"
arch = "tiny-llama"
output_tokens = { dist = "lognormal", mean = 60, p99 = 200, max = 300 }
forward_tokens = { dist = "fixed", value = 40 }
accuracy = 0.5

[[model]]
name = "E3"
arch = "tiny-llama"
output_tokens = { dist = "lognormal", mean = 60, p99 = 200, max = 300 }
forward_tokens = { dist = "fixed", value = 40 }
accuracy = 0.5

[[model]]
name = "A"
arch = "tiny-llama"
output_tokens = { dist = "lognormal", mean = 200, p99 = 600, max = 800 }
forward_tokens = { dist = "fixed", value = 40 }
accuracy = 0.6

[workload]
kind = "moa"
queries = 24
prompt_tokens = { dist = "uniform", min = 30, max = 120 }
experts_per_query = 2
routing = { skew = 4 }
votes = { options = 4, error_correlation = 0.5 }
aggregator = { model = "A", accuracy = 0.6 }

[aggregation]
threshold = 1.0

[[policy]]
name = "round-robin"
threshold = 2.0

[[policy]]
name = "data-parallel"

[[policy]]
name = "mosaic"

[replay]
api = "ollama"
prompt_words = 500
health_timeout = "60s"

[[replay.endpoint]]
worker = 0
url = %q

[[replay.endpoint]]
worker = 1
url = %q
`

func TestReplayOnOllama(t *testing.T) {
	needE2E(t)
	bin := ollamatest.Require(t)
	version, err := ollamatest.ModuleVersion(bin)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The models: one architecture, four different weights (seeds), each a GGUF file of
	// 2.6 MB whose greedy decoding never repeats a token and never ends early.
	spec := gguf.Spec{}.WithDefaults()
	files := map[string][]byte{}
	for i, name := range []string{"E1", "E2", "E3", "A"} {
		s := spec
		s.Seed, s.Name = uint64(i+1), name
		data, err := gguf.Llama(s)
		require.NoError(t, err)
		files[name] = data
	}
	require.GreaterOrEqual(t, spec.Words(), 500, "prompt_words fits the vocabulary")
	var urls []string
	for w := range 2 {
		srv := ollamatest.StartTest(t, ollamatest.Options{Binary: bin, NumParallel: 4, MaxLoadedModels: 2})
		for name, data := range files {
			// One thread per server: two servers on two cores. A slot's context of 2048
			// tokens holds any call's prompt and output.
			require.NoError(t, ollamatest.Create(ctx, srv.URL, name, data, map[string]any{"num_thread": 1, "num_ctx": 2048, "temperature": 0}))
		}
		t.Logf("worker %d: ollama %s at %s", w, version, srv.URL)
		urls = append(urls, srv.URL)
	}
	dir := t.TempDir()
	if keep := os.Getenv("MOSAIC_OLLAMA_OUT"); keep != "" {
		dir = keep // the profile, experiment, results and figures are kept there
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, sub := range []string{"sim", "replay", "figures"} {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, sub)))
		}
	}
	catalog := filepath.Join(dir, "catalog.toml")
	require.NoError(t, os.WriteFile(catalog, []byte(ollamaCatalog), 0o644))

	// Profile one expert on worker 0's server: batch latencies and model loads.
	profile := filepath.Join(dir, "profile.toml")
	code, out, errOut := runCLI("profile", "--endpoint", urls[0], "--model", "E1", "--arch", "tiny-llama", "--gpu", "CPU-1T",
		"--catalog", catalog, "--api", "ollama", "--prompt-words", "500", "--lengths", "32,128,512", "--batches", "1,2,4",
		"--max-num-seqs", "4", "--max-batched-tokens", "512", "--warmup", "2", "-o", profile)
	require.Equal(t, 0, code, errOut)
	t.Logf("mosaic profile:\n%s", out)
	assert.Contains(t, out, "model loads: median")

	exp := filepath.Join(dir, "moa-on-ollama.toml")
	require.NoError(t, os.WriteFile(exp, []byte(fmt.Sprintf(ollamaExperiment, catalog, profile, urls[0], urls[1])), 0o644))
	simDir, repDir := filepath.Join(dir, "sim"), filepath.Join(dir, "replay")
	code, simOut, errOut := runCLI("sim", exp, "-o", simDir)
	require.Equal(t, 0, code, errOut)
	code, repOut, errOut := runCLI("replay", exp, "-o", repDir)
	require.Equal(t, 0, code, errOut)
	t.Logf("mosaic sim:\n%s\nmosaic replay:\n%s", simOut, repOut)
	assert.Contains(t, repOut, "measured on Ollama "+strings.TrimPrefix(version, "v"))

	s, r := summaries(t, simDir), summaries(t, repDir)
	require.Len(t, r, 3)
	var table strings.Builder
	fmt.Fprintf(&table, "%-14s %9s %9s %8s %9s %9s\n", "policy", "sim_e2e_s", "ollama_s", "error", "sim_x", "ollama_x")
	for _, p := range []string{"round-robin", "data-parallel", "mosaic"} {
		sp, rp := s[p], r[p]
		assert.Equal(t, results.StatusOK, rp.Status, p)
		assert.Zero(t, rp.FailedCalls, "%s: every call came back whole, its token counts checked", p)
		assert.Equal(t, sp.ExpertCalls, rp.ExpertCalls, p)
		assert.Equal(t, sp.AggregatorCalls, rp.AggregatorCalls, p)
		assert.Positive(t, rp.ModelLoads, "%s: loads went through the engine", p)
		fmt.Fprintf(&table, "%-14s %9.2f %9.2f %+7.1f%% %9.2f %9.2f\n", p, sp.E2ES, rp.E2ES, 100*(sp.E2ES-rp.E2ES)/rp.E2ES, sp.SpeedupE2E, rp.SpeedupE2E)
		// The simulator, fitted on nine batch latencies of one CPU thread, comes within
		// -45% to +13% of the engine's makespans on a quiet machine (docs/replay.md says where
		// the residual comes from); when other tests share the two cores the servers slow
		// down unevenly (seen: 0.35 of the measured makespan). The bound only catches a
		// measurement off by a factor, such as a time unit or a time scale applied twice.
		ratio := sp.E2ES / rp.E2ES
		assert.True(t, ratio > 0.25 && ratio < 4, "%s: simulated %.2f s against measured %.2f s", p, sp.E2ES, rp.E2ES)
	}
	t.Logf("simulated against measured on Ollama %s (2 servers, 1 CPU thread each):\n%s", version, table.String())

	info := readRunJSON(t, repDir)
	assert.Equal(t, "Ollama "+strings.TrimPrefix(version, "v"), info.Engine)
	for _, p := range info.Replayed {
		for _, srv := range p.Servers {
			assert.Equal(t, "unloaded", srv.CacheReset, "%s: each policy starts with its models unloaded", p.Policy)
		}
	}
	// The figure names the engine and shows the comparison.
	code, _, errOut = runCLI("plot", "-o", filepath.Join(dir, "figures"), simDir, repDir)
	require.Equal(t, 0, code, errOut)
	_, err = os.Stat(filepath.Join(dir, "figures", "sim-vs-replay.png"))
	assert.NoError(t, err)
}
