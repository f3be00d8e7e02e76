package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCatalogListings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"catalog"}, []string{"vllm-0.6", "vllm-v1", "overheads: fit (make profile)"}},
		{[]string{"catalog", "engines"}, []string{"model_len", "2048|8192", "256|1024"}},
		{[]string{"catalog", "gpus"}, []string{"MI300X", "mesh", "H100-80GB", "held_out_mape", "like A100-40GB", "borrowed: A100-40GB", "coefficients of built-in profile:"}},
		{[]string{"catalog", "models"}, []string{"databricks/dbrx-instruct", "4/16", "Qwen/Qwen3-32B"}},
	} {
		code, out, errOut := runCLI(tc.args...)
		require.Equal(t, 0, code, errOut)
		for _, w := range tc.want {
			assert.Contains(t, out, w, tc.args)
		}
	}
	code, _, errOut := runCLI("catalog", "tpus")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unknown listing "tpus"`)
}

func TestCalibrateModesExclusive(t *testing.T) {
	code, _, errOut := runCLI("calibrate", "--data", "a.csv", "--splitwise", "b.csv")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "exactly one of --data, --splitwise, --forward and --cpu-overheads")
	code, _, errOut = runCLI("calibrate", "--data", "a.csv", "--holdout", "gpus=4")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "need --fit")
	code, _, errOut = runCLI("calibrate", "--data", "a.csv", "--fit", "--holdout", "colour=red")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unknown key "colour"`)
	code, _, errOut = runCLI("calibrate", "--data", "a.csv", "--fit-also", "launch_floor_ms")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "need --fit")
	code, _, errOut = runCLI("calibrate", "--splitwise", "b.csv", "--fit-also", "launch_floor")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--fit-also "launch_floor": not a fittable coefficient`)
	code, out, errOut := runCLI("calibrate", "--forward", "../../sim/calibrate/testdata/forward_fixture.csv", "--gpu", "H100-80GB")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "MAPE")
}

// calibrate --forward over the measured H200 profiles: a shape held out is reported apart,
// the fit over two shapes frees layer_latency_us and -o writes it; bad combinations and
// files are usage or input errors naming what is wrong.
func TestCalibrateForwardMeasured(t *testing.T) {
	dir := "../../tools/measurements/"
	args := []string{"calibrate", "--forward", dir + "h200_llama-3-8b.csv", "--forward", dir + "h200_llama-3-70b_tp8.csv",
		"--forward", dir + "h200_llama-3-70b_tp4.csv", "--gpu", "H200"}
	prof := filepath.Join(t.TempDir(), "h200.toml")
	code, out, errOut := runCLI(append(args, "--fit", "--holdout", "tp=8", "-o", prof)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "# fitted on 104 of 136 points")
	assert.Contains(t, out, "layer_latency_us")
	assert.Regexp(t, `MAPE [0-9.]+% over 32 points: held-out`, out)
	assert.Contains(t, out, "Meta-Llama-3-70B TP 8 decode held-out")
	written, err := os.ReadFile(prof)
	require.NoError(t, err)
	assert.Contains(t, string(written), "[gpu.h200]")
	assert.Contains(t, string(written), "layer_latency_us = ")

	code, _, errOut = runCLI(append(args, "-o", prof)...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-o with --forward writes fitted coefficients: add --fit")
	code, _, errOut = runCLI(append(args, "--fit", "--holdout", "gpus=2")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--holdout with --forward takes B")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--forward", dir + "h200_llama-3-70b_tp8.csv", "--gpu", "H200", "--tp", "4"}, 1, `h200_llama-3-70b_tp8.csv:2: column "tp" is 8, but --tp 4`},
		{[]string{"--forward", dir + "h200_llama-3-8b.csv", "--gpu", "H200", "--tp", "8"}, 1, `h200_llama-3-8b.csv:2: column "tp" is 1, but --tp 8`},
		{[]string{"--forward", dir + "h200_llama-3-70b_tp8.csv", "--gpu", "H200", "--model", "mixtral-8x7b"}, 1, `column "model" is meta-llama/Meta-Llama-3-70B, but --model mistralai/Mixtral-8x7B`},
		{[]string{"--forward", dir + "h200_llama-3-8b.csv", "--gpu", "H100-80GB"}, 1, `h200_llama-3-8b.csv:2: column "gpu" is H200, but --gpu H100-80GB`},
		{[]string{"--forward", dir + "h200_llama-3-8b.csv", "--forward", dir + "h200_llama-3-8b.csv", "--gpu", "H200"}, 2, "is given twice"},
		{[]string{"--forward", dir + "h200_llama-3-8b.csv", "--gpu", "H200", "--fit", "--fit-only", "iteration_overhead_ms"}, 2, "iteration_overhead_ms does not enter a bare forward pass's time"},
		{[]string{"--forward", dir + "h200_llama-3-8b.csv", "--gpu", "H200", "--gpus", "2"}, 2, "--gpus, --framework and --operators are for --data"},
	} {
		code, _, errOut = runCLI(append([]string{"calibrate"}, tc.args...)...)
		assert.Equal(t, tc.code, code, tc.want)
		assert.Contains(t, errOut, tc.want)
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	require.NoError(t, os.WriteFile(bad, []byte("phase,batch_size,context_len,time_ms,model\ndecode,1,128,5,llama-9\n"), 0o644))
	code, _, errOut = runCLI("calibrate", "--forward", bad, "--gpu", "H200")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `bad.csv:2: column "model"`)
	code, _, errOut = runCLI("calibrate", "--data", "a.csv", "--tp", "2")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--tp is for --forward")
}
