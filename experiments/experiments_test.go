package experiments_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
)

const good = `name = "t"
seed = 3

[cluster]
gpu = "A100-80GB"
workers = 1

[[model]]
name = "L3"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 64 }

[workload]
kind = "batch"
model = "L3"
requests = 16
input_tokens = { dist = "fixed", value = 128 }
`

func resolve(t *testing.T, src string) (*experiments.Resolved, error) {
	t.Helper()
	e, err := experiments.Parse("exp.toml", []byte(src))
	if err != nil {
		return nil, err
	}
	return e.Resolve()
}

func TestGoodExperimentRuns(t *testing.T) {
	r, err := resolve(t, good)
	require.NoError(t, err)
	rep, err := r.RunBatch()
	require.NoError(t, err)
	assert.Equal(t, 16, rep.Result.Requests)
	assert.EqualValues(t, 16*64, rep.Result.OutputTokens)
	assert.Positive(t, rep.Result.Makespan)
}

func TestQuickstartResolves(t *testing.T) {
	e, err := experiments.Parse(experiments.QuickstartName, experiments.Quickstart)
	require.NoError(t, err)
	_, err = e.Resolve()
	require.NoError(t, err)
}

// Bad input names the file, the line and the key.
func TestBadExperiments(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"misspelt key", "requests = 16", "requets = 16", "exp.toml:16: workload.requets: unknown key"},
		{"misspelt nested key", `{ dist = "fixed", value = 128 }`, `{ dist = "fixed", valu = 128 }`, "exp.toml:17: workload.input_tokens.valu: unknown key"},
		{"wrong type", "requests = 16", `requests = "many"`, "exp.toml:16"},
		{"unknown gpu", `gpu = "A100-80GB"`, `gpu = "B300"`, `exp.toml:5: cluster.gpu: unknown GPU "B300"`},
		{"unknown model", `arch = "llama-3-8b"`, `arch = "llama-9-1t"`, `exp.toml:10: model[0].arch: unknown model "llama-9-1t"`},
		{"model too large", `arch = "llama-3-8b"`, `arch = "llama-3-70b"`, "exp.toml:10: model[0].arch: model meta-llama/Meta-Llama-3-70B (131.4 GiB of weights) does not fit on A100-80GB"},
		{"zero length", `value = 128`, `value = 0`, "exp.toml:17: workload.input_tokens.value: must be positive, got 0"},
		{"negative requests", "requests = 16", "requests = -2", "exp.toml:16: workload.requests: must be positive, got -2"},
		{"unknown dist", `{ dist = "fixed", value = 64 }`, `{ dist = "zipf", value = 64 }`, `exp.toml:11: model[0].output_tokens.dist: unknown distribution "zipf"`},
		{"workload model", `model = "L3"`, `model = "L4"`, `exp.toml:15: workload.model: no [[model]] is named "L4"`},
		{"too long for the model", `{ dist = "fixed", value = 64 }`, `{ dist = "lognormal", mean = 3000, p99 = 16000, max = 32768 }`, "exp.toml:11: model[0].output_tokens: max 32768 leaves no room for a prompt in meta-llama/Meta-Llama-3-8B's max_model_len 8192 (want at most 8191)"},
		{"prompt too long for the model", `{ dist = "fixed", value = 128 }`, `{ dist = "fixed", value = 8150 }`, "exp.toml:17: workload.input_tokens: the longest prompt (8150) plus the longest output (64) exceed meta-llama/Meta-Llama-3-8B's max_model_len 8192"},
		{"lognormal p99", `{ dist = "fixed", value = 64 }`, `{ dist = "lognormal", mean = 100, p99 = 90, max = 4000 }`, "exp.toml:11: model[0].output_tokens: p99 (90) must be larger than the mean (100)"},
		{"malformed toml", `name = "t"`, `name = "t`, "exp.toml:1"},
		{"utilisation", "workers = 1", "workers = 1\n[engine]\ngpu_memory_utilization = 1.5", "exp.toml:8: engine.gpu_memory_utilization: must be in (0, 1], got 1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, good, tc.from)
			_, err := resolve(t, strings.Replace(good, tc.from, tc.to, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestSet(t *testing.T) {
	e, err := experiments.Parse("exp.toml", []byte(good))
	require.NoError(t, err)
	require.NoError(t, e.Set("workload.requests=4"))
	require.NoError(t, e.Set("model[0].arch=mistral-7b"))
	require.NoError(t, e.Set("engine.chunked_prefill=false"))
	require.NoError(t, e.Set("workload.input_tokens.value=32"))
	r, err := e.Resolve()
	require.NoError(t, err)
	assert.Equal(t, 4, r.Batch.Requests)
	assert.Equal(t, "mistralai/Mistral-7B-v0.1", r.Batch.Model.Arch.ID)
	assert.False(t, r.Batch.Model.Engine.ChunkedPrefill)
	assert.Equal(t, 32, r.Batch.Input.Max())

	for _, bad := range []struct{ in, want string }{
		{"workload.requets=4", `unknown key "requets"`},
		{"workload.requests=four", "want an integer"},
		{"model[3].arch=x", "index 3 out of range"},
		{"seed", "want key=value"},
	} {
		assert.ErrorContains(t, e.Set(bad.in), bad.want, bad.in)
	}
}

// The same seed gives byte-identical output; another seed gives another batch.
func TestDeterminism(t *testing.T) {
	src := strings.Replace(good, `output_tokens = { dist = "fixed", value = 64 }`,
		`output_tokens = { dist = "lognormal", mean = 500, p99 = 3000, max = 6000 }`, 1)
	src = strings.Replace(src, "requests = 16", "requests = 300\narrival_rate = 20", 1)
	run := func(seed string) string {
		e, err := experiments.Parse("exp.toml", []byte(src))
		require.NoError(t, err)
		require.NoError(t, e.Set("seed="+seed))
		r, err := e.Resolve()
		require.NoError(t, err)
		rep, err := r.RunBatch()
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, rep.Write(&b))
		for _, tm := range rep.Result.Times {
			b.WriteString(tm.Finish.String() + "\n")
		}
		return b.String()
	}
	a := run("7")
	assert.Equal(t, a, run("7"))
	assert.NotEqual(t, a, run("8"))
}

func TestMissingCatalogFile(t *testing.T) {
	src := strings.Replace(good, "workers = 1", "workers = 1\ncatalog = \"nope.toml\"", 1)
	_, err := resolve(t, src)
	assert.ErrorContains(t, err, "exp.toml:7: cluster.catalog: reading catalog")
}

func TestUserCatalogAddsModel(t *testing.T) {
	dir := t.TempDir()
	cat := `[[model]]
id = "acme/Tiny-1B"
aliases = ["tiny"]
layers = 16
hidden = 2048
heads = 16
kv_heads = 4
head_dim = 128
intermediate = 8192
vocab = 32000
dtype_bytes = 2
params_b = 1.2
max_model_len = 8192
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cat.toml"), []byte(cat), 0o644))
	src := strings.Replace(good, "workers = 1", "workers = 1\ncatalog = \"cat.toml\"", 1)
	src = strings.Replace(src, `arch = "llama-3-8b"`, `arch = "tiny"`, 1)
	path := filepath.Join(dir, "exp.toml")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	e, err := experiments.Load(path)
	require.NoError(t, err)
	r, err := e.Resolve()
	require.NoError(t, err)
	assert.Equal(t, "acme/Tiny-1B", r.Batch.Model.Arch.ID)
}
