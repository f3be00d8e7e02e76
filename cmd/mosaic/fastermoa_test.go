package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/results"
)

const fasterMoAExp = "../../experiments/examples/faster-moa.toml"

// mosaic faster-moa --sensitivity moves each unpublished assumption alone: its base row is the
// plain comparison's reductions, and sensitivity.csv holds one speedup per technique, variant
// and seed, with the paper's figure where it has one.
func TestFasterMoASensitivity(t *testing.T) {
	small := []string{"--set", "workload.queries=12"}
	code, plain, errOut := runCLI(append([]string{"faster-moa", fasterMoAExp, "--seed", "1"}, small...)...)
	require.Equal(t, 0, code, errOut)
	dir := t.TempDir()
	code, out, errOut := runCLI(append([]string{"faster-moa", fasterMoAExp, "--sensitivity", "--seeds", "1", "-o", dir}, small...)...)
	require.Equal(t, 0, code, errOut)
	for _, a := range []string{"forwarded tokens", "agent output length", "output length tail", "load", "engine"} {
		assert.Equal(t, 2, strings.Count(out, "\n"+a+" "), "low and high rows of %s:\n%s", a, out)
	}
	// The base row's reductions are the plain command's, seed 1.
	var want []string
	for _, line := range strings.Split(plain, "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[0] == "tree" {
			want = append(want, f[6])
		}
	}
	require.Len(t, want, 4, plain)
	var base []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "(base)") {
			base = strings.Fields(line)[6:] // after "(base) base as in the file"
		}
	}
	assert.Equal(t, want, base, out)

	rows, err := results.ReadSensitivityCSV(filepath.Join(dir, "sensitivity.csv"))
	require.NoError(t, err)
	require.Len(t, rows, (1+2*5)*4)
	for _, r := range rows {
		assert.Positive(t, r.SpeedupE2E)
		if strings.HasSuffix(r.Experiment, " plain") {
			assert.InDelta(t, 1/(1-0.62), r.PaperE2E, 1e-3)
		}
		if r.Side == "base" && strings.HasSuffix(r.Experiment, " overlap+exit") {
			red, err := strconv.ParseFloat(strings.TrimSuffix(want[3], "%"), 64)
			require.NoError(t, err)
			assert.InDelta(t, red, 100*(1-1/r.SpeedupE2E), 0.06)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", dir}, "--seeds and -o are for --sensitivity"},
		{[]string{"--seeds", "3"}, "--seeds and -o are for --sensitivity"},
		{[]string{"--sensitivity", "--seed", "2"}, "--seed is for the single comparison"},
		{[]string{"--sensitivity", "--seeds", "0"}, "--seeds must be positive"},
	} {
		code, _, errOut = runCLI(append([]string{"faster-moa", fasterMoAExp}, tc.args...)...)
		assert.Equal(t, 2, code, tc.args)
		assert.Contains(t, errOut, tc.want, tc.args)
	}
	code, _, errOut = runCLI("faster-moa", "../../experiments/quickstart.toml")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `needs a workload of kind "tree", not "moa"`)
}
