package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/sim"
)

const forwardFixture = "../../sim/calibrate/testdata/forward_fixture.csv"

// deprecationNotes are the lines of stderr that note a deprecated form.
func deprecationNotes(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "is deprecated: use mosaic calibrate ") {
			out = append(out, l)
		}
	}
	return out
}

// Each subcommand prints what its deprecated flag form prints, byte for byte; the flag form
// adds one line on stderr naming the subcommand, the subcommand none.
func TestCalibrateSubcommandsMatchFlagForms(t *testing.T) {
	measured := "../../tools/measurements/"
	cases := []struct {
		name      string
		old, new  []string
		note      string
		needsData string
	}{
		{"forward", []string{"--forward", forwardFixture, "--gpu", "H100-80GB"}, []string{"forward", forwardFixture, "--gpu", "H100-80GB"},
			"--forward FILE is deprecated: use mosaic calibrate forward FILE...", ""},
		{"forward fit", []string{"--gpu", "H200", "--fit", "--holdout", "tp=8", "--forward", measured + "h200_llama-3-8b.csv", "--forward", measured + "h200_llama-3-70b_tp8.csv"},
			[]string{"forward", measured + "h200_llama-3-8b.csv", measured + "h200_llama-3-70b_tp8.csv", "--gpu", "H200", "--fit", "--holdout", "tp=8"},
			"use mosaic calibrate forward FILE...", ""},
		{"data", []string{"--data", "DATA", "--gpu", "A100-40GB", "--model", "llama-2-7b", "--gpus", "1,2"},
			[]string{"data", "--data", "DATA", "--gpu", "A100-40GB", "--model", "llama-2-7b", "--gpus", "1,2"},
			"--data FILE is deprecated: use mosaic calibrate data --data FILE", "profiles/argonne_inference_bench_no_h100.csv"},
		{"data as argument", []string{"--data", "DATA", "--gpu", "A100-40GB", "--model", "llama-2-7b"},
			[]string{"data", "DATA", "--gpu", "A100-40GB", "--model", "llama-2-7b"},
			"use mosaic calibrate data --data FILE", "profiles/argonne_inference_bench_no_h100.csv"},
		{"cpu", []string{"--cpu-overheads", "DATA", "--gpu", "H200", "--context", "512"}, []string{"cpu", "DATA", "--gpu", "H200", "--context", "512"},
			"--cpu-overheads FILE is deprecated: use mosaic calibrate cpu FILE", "profiles/vidur/a100__cpu_overheads.csv"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsData != "" {
				path, ok := dataset.File(tc.needsData)
				if !ok {
					t.Skipf("shared data not found: set %s", dataset.Env)
				}
				for _, args := range [][]string{tc.old, tc.new} {
					for i, a := range args {
						if a == "DATA" {
							args[i] = path
						}
					}
				}
			}
			code, oldOut, oldErr := runCLI(append([]string{"calibrate"}, tc.old...)...)
			require.Equal(t, 0, code, oldErr)
			code, newOut, newErr := runCLI(append([]string{"calibrate"}, tc.new...)...)
			require.Equal(t, 0, code, newErr)
			assert.NotEmpty(t, newOut)
			assert.Equal(t, oldOut, newOut)
			notes := deprecationNotes(oldErr)
			require.Len(t, notes, 1, oldErr)
			assert.Contains(t, notes[0], tc.note)
			assert.True(t, strings.HasPrefix(oldErr, "mosaic calibrate: "), "the note comes first: %q", oldErr)
			assert.Empty(t, deprecationNotes(newErr))
		})
	}
}

// calibrate data -o writes the same profile as the flag form but for the header line naming
// the command line.
func TestCalibrateDataWritesSameProfile(t *testing.T) {
	path, ok := dataset.File("profiles/argonne_inference_bench_no_h100.csv")
	if !ok {
		t.Skipf("shared data not found: set %s", dataset.Env)
	}
	dir := t.TempDir()
	args := []string{"--gpu", "A100-40GB", "--model", "llama-2-7b", "--fit", "--fit-only", "per_seq_overhead_ms", "--holdout", "L=2048"}
	oldProf, newProf := filepath.Join(dir, "old.toml"), filepath.Join(dir, "new.toml")
	code, oldOut, errOut := runCLI(append([]string{"calibrate", "--data", path, "-o", oldProf}, args...)...)
	require.Equal(t, 0, code, errOut)
	code, newOut, errOut := runCLI(append([]string{"calibrate", "data", "--data", path, "-o", newProf}, args...)...)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, oldOut, newOut)
	assert.Contains(t, newOut, "held-out rows (held out: L=2048)")
	body := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		s := string(b)
		require.True(t, strings.HasPrefix(s, "# Cost-model profile written by: mosaic "))
		return s[strings.Index(s, "\n"):]
	}
	assert.Equal(t, body(oldProf), body(newProf))

	// The fitted GPU's table says how it was fitted and its held-out error; the fit became the
	// default, unless --keep-default.
	assert.Contains(t, body(newProf), "held_out = \"L=2048\"\nheld_out_mape_pct = ")
	assert.Contains(t, body(newProf), "basis = \"mosaic ")
	keepProf := filepath.Join(dir, "keep.toml")
	code, _, errOut = runCLI(append([]string{"calibrate", "data", "--data", path, "-o", keepProf, "--keep-default"}, args...)...)
	require.Equal(t, 0, code, errOut)
	fitted, err := sim.LoadProfile(newProf, nil)
	require.NoError(t, err)
	kept, err := sim.LoadProfile(keepProf, nil)
	require.NoError(t, err)
	builtin := sim.DefaultProfile()
	assert.Equal(t, builtin.Default, kept.Default)
	assert.NotEqual(t, builtin.Default, fitted.Default)
	a40, err := sim.DefaultCatalog().GPU("A100-40GB")
	require.NoError(t, err)
	assert.Equal(t, fitted.For(a40), kept.For(a40), "the GPU's own coefficients are the fit's either way")
}

// mosaic calibrate -h lists the subcommands; each subcommand's help lists only its flags.
func TestCalibrateHelp(t *testing.T) {
	for _, args := range [][]string{{"calibrate", "-h"}, {"help", "calibrate"}} {
		code, out, errOut := runCLI(args...)
		require.Equal(t, 0, code, errOut)
		for _, want := range []string{"usage: mosaic calibrate SUBCOMMAND", "data --data FILE", "splitwise FILE", "cpu FILE", "forward FILE...", "deprecated"} {
			assert.Contains(t, out, want, args)
		}
	}
	for sub, want := range map[string][]string{
		"data":      {"catalog", "data", "fit", "fit-also", "fit-only", "framework", "gpu", "gpus", "holdout", "keep-default", "model", "o", "operators", "profile"},
		"splitwise": {"catalog", "fit-also", "fit-only", "holdout", "model", "profile"},
		"cpu":       {"catalog", "context", "gpu", "model", "profile"},
		"forward":   {"catalog", "fit", "fit-also", "fit-only", "gpu", "holdout", "model", "o", "profile", "tp"},
	} {
		code, out, errOut := runCLI("calibrate", sub, "-h")
		require.Equal(t, 0, code, errOut)
		assert.True(t, strings.HasPrefix(out, "usage: mosaic calibrate "+sub+" "), out)
		var flags []string
		for _, l := range strings.Split(out, "\n") {
			if f, ok := strings.CutPrefix(l, "  -"); ok {
				flags = append(flags, strings.Fields(f)[0])
			}
		}
		assert.Equal(t, want, flags, sub)
	}
}

// The subcommands' usage errors name what is wrong (exit status 2), before any file is read.
func TestCalibrateSubcommandUsageErrors(t *testing.T) {
	parseOnly = true
	defer func() { parseOnly = false }()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"data"}, "--data FILE is required"},
		{[]string{"data", "a.csv", "b.csv"}, `unexpected argument "b.csv"`},
		{[]string{"data", "--data", "a.csv", "b.csv"}, `unexpected argument "b.csv"`},
		{[]string{"data", "a.csv", "--gpus", "1,x"}, "--gpus"},
		{[]string{"data", "a.csv", "--holdout", "gpus=4"}, "need --fit"},
		{[]string{"data", "a.csv", "--fit", "--holdout", "colour=red"}, `unknown key "colour"`},
		{[]string{"data", "a.csv", "--context", "5"}, "flag provided but not defined: -context"},
		{[]string{"data", "a.csv", "--splitwise", "b.csv"}, "flag provided but not defined: -splitwise"},
		{[]string{"splitwise"}, "calibrate splitwise needs a FILE"},
		{[]string{"splitwise", "a.csv", "--fit"}, "flag provided but not defined: -fit"},
		{[]string{"splitwise", "a.csv", "--fit-also", "launch_floor"}, `--fit-also "launch_floor": not a fittable coefficient`},
		{[]string{"cpu", "a.csv", "b.csv"}, `unexpected argument "b.csv"`},
		{[]string{"cpu", "a.csv", "--context", "-5"}, "--context must be positive"},
		{[]string{"cpu", "a.csv", "--context", "0"}, "--context must be positive"},
		{[]string{"cpu", "a.csv", "--gpus", "2"}, "flag provided but not defined: -gpus"},
		{[]string{"forward"}, "calibrate forward needs a FILE"},
		{[]string{"forward", "a.csv", "--tp", "0"}, "--tp must be positive"},
		{[]string{"forward", "a.csv", "--fit-also", "layer_latency_us"}, "need --fit"},
		{[]string{"forward", "a.csv", "--gpus", "2"}, "flag provided but not defined: -gpus"},
		{[]string{"forward", "a.csv", "--forward", "b.csv"}, "flag provided but not defined: -forward"},
		{[]string{"bogus"}, `unknown subcommand "bogus"`},
		{nil, "name a subcommand"},
	} {
		code, _, errOut := runCLI(append([]string{"calibrate"}, tc.args...)...)
		assert.Equal(t, 2, code, tc.args)
		assert.Contains(t, errOut, tc.want, tc.args)
		assert.Empty(t, deprecationNotes(errOut), tc.args)
	}
}

// The forward subcommand's checks after the flags (run past parseOnly) are those of the flag
// form; only the form changes.
func TestCalibrateForwardSubcommandErrors(t *testing.T) {
	dir := "../../tools/measurements/"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{dir + "h200_llama-3-8b.csv"}, 2, "needs --gpu"},
		{[]string{dir + "h200_llama-3-8b.csv", "--gpu", "H200", "-o", "x.toml"}, 2, "writes fitted coefficients: add --fit"},
		{[]string{dir + "h200_llama-3-8b.csv", dir + "h200_llama-3-8b.csv", "--gpu", "H200"}, 2, "is given twice"},
		{[]string{dir + "h200_llama-3-8b.csv", "--gpu", "H200", "--fit", "--holdout", "gpus=2"}, 2, "--holdout with --forward takes B"},
		{[]string{dir + "h200_llama-3-70b_tp8.csv", "--gpu", "H200", "--tp", "4"}, 1, `h200_llama-3-70b_tp8.csv:2: column "tp" is 8, but --tp 4`},
		{[]string{dir + "h200_llama-3-8b.csv", "--gpu", "H200", "--fit", "--holdout", "tp=1"}, 2, "--holdout tp=1 leaves no points to fit or none to predict"},
	} {
		code, _, errOut := runCLI(append([]string{"calibrate", "forward"}, tc.args...)...)
		assert.Equal(t, tc.code, code, tc.want)
		assert.Contains(t, errOut, tc.want)
	}
}

// The deprecated forms' usage errors stay as they were, after the one-line note.
func TestCalibrateFlagFormNote(t *testing.T) {
	for _, tc := range []struct {
		args []string
		note string
	}{
		{[]string{"--splitwise", "b.csv", "--fit-also", "launch_floor"}, "use mosaic calibrate splitwise FILE"},
		{[]string{"--cpu-overheads", "c.csv", "--context", "-5"}, "use mosaic calibrate cpu FILE"},
		{[]string{"--data", "a.csv", "--tp", "2"}, "use mosaic calibrate data --data FILE"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"calibrate"}, tc.args...), &out, &errb)
		assert.Equal(t, 2, code)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		require.Len(t, lines, 2, errb.String())
		assert.Contains(t, lines[0], tc.note)
		assert.True(t, strings.HasPrefix(lines[1], "mosaic calibrate: usage: "), lines[1])
		assert.Empty(t, out.String())
	}
	// No note when the form is not one of them.
	code, _, errOut := runCLI("calibrate", "--data", "a.csv", "--splitwise", "b.csv")
	assert.Equal(t, 2, code)
	assert.Empty(t, deprecationNotes(errOut))
}
