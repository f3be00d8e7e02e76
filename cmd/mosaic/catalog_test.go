package main

import (
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
		{[]string{"catalog", "gpus"}, []string{"MI300X", "mesh", "H100-80GB"}},
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
