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
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

const singleModel = "../../experiments/examples/single-model.toml"

func TestQuickstart(t *testing.T) {
	code, out, errOut := runCLI("sim")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"experiment quickstart (sim): 4 x A100-80GB, 1000 queries, k = 3", "round-robin ", "data-parallel ", "round-robin+skip "} {
		assert.Contains(t, out, want)
	}
}

func TestSingleModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	code, out, errOut := runCLI("sim", singleModel, "--set", "workload.requests=50", "-o", dir)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"batch latency s", "output throughput tok/s", "mean batch size", "preemptions"} {
		assert.Contains(t, out, want)
	}
	// -o holds the table and one row per request.
	report, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	require.NoError(t, err)
	assert.Equal(t, out, string(report))
	assert.Len(t, readCSV(t, filepath.Join(dir, "requests.csv")), 50)
	data, err := os.ReadFile(filepath.Join(dir, "requests.csv"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "request,prompt_tokens,output_tokens,arrival_s,first_token_s,end_s,ttft_s,latency_s,preemptions\n"))
}

func TestSimSameSeedSameOutput(t *testing.T) {
	_, a, _ := runCLI("sim", singleModel, "--seed", "5", "--set", "workload.requests=100")
	_, b, _ := runCLI("sim", "--set", "workload.requests=100", singleModel, "--seed", "5")
	assert.Equal(t, a, b)
	assert.Regexp(t, `(?m)^requests +100$`, a)
}

// sim -o writes the four result files; twice gives identical files.
func TestSimWritesResults(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		code, _, errOut := runCLI("sim", "--set", "workload.queries=200", "-o", d)
		require.Equal(t, 0, code, errOut)
	}
	for _, f := range []string{"summary.csv", "calls.csv", "queries.csv", "workers.csv", "run.json"} {
		a, err := os.ReadFile(filepath.Join(dirs[0], f))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[1], f))
		require.NoError(t, err)
		assert.Equal(t, string(a), string(b), f)
	}
	_, err := os.Stat(filepath.Join(dirs[0], "host.json"))
	assert.NoError(t, err)
}

func TestTraceGenAndStats(t *testing.T) {
	w := filepath.Join(t.TempDir(), "w.jsonl")
	code, out, errOut := runCLI("trace", "gen", "../../experiments/quickstart.toml", "-o", w, "--set", "workload.queries=50")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "50 queries, 200 calls (0 tool steps), 2 layers")
	code, out2, errOut := runCLI("trace", "stats", w)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out2, "vote pattern")
	code, _, errOut = runCLI("trace", "import", "../../experiments/quickstart.toml")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "workload.answers: missing")
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("name = \"x\"\n[cluster]\ngpu = \"A100-80GB\"\n[[model]]\nname = \"m\"\narch = \"llama-3-8b\"\n[workload]\nrequets = 3\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "usage: mosaic"},
		{"unknown command", []string{"simulate"}, 2, `unknown command "simulate"`},
		{"bad flag", []string{"sim", "--sed", "1"}, 2, "flag provided but not defined"},
		{"misspelt key", []string{"sim", bad}, 1, "bad.toml:8: workload.requets: unknown key"},
		{"missing file", []string{"sim", filepath.Join(dir, "none.toml")}, 1, "no such file"},
		{"bad set", []string{"sim", "--set", "workload.x=1"}, 2, `unknown key "x"`},
		{"calibrate without data", []string{"calibrate"}, 2, "--data FILE is required"},
		{"calibrate bad csv", []string{"calibrate", "--data", bad}, 1, "bad.toml:1: reading header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

func TestCalibrateCommand(t *testing.T) {
	path, ok := dataset.File("profiles/argonne_inference_bench_no_h100.csv")
	if !ok {
		t.Skipf("shared data not found: set %s to run the calibration command test", dataset.Env)
	}
	prof := filepath.Join(t.TempDir(), "p.toml")
	code, out, errOut := runCLI("calibrate", "--data", path, "--framework", "vLLM", "--gpus", "1", "--gpu", "A100-40GB",
		"--model", "llama-2-7b", "--fit", "-o", prof)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.True(t, strings.HasPrefix(lines[0], "model "))
	assert.Regexp(t, `^MAPE \d+\.\d+% over 20 rows$`, lines[len(lines)-1])
	data, err := os.ReadFile(prof)
	require.NoError(t, err)
	assert.Contains(t, string(data), "[gpu.a100-40gb]")

	// The written profile loads and predicts the same rows without fitting.
	code, out2, errOut := runCLI("calibrate", "--data", path, "--gpu", "A100-40GB", "--model", "llama-2-7b", "--profile", prof)
	require.Equal(t, 0, code, errOut)
	last := func(s string) string { l := strings.Split(strings.TrimSpace(s), "\n"); return l[len(l)-1] }
	assert.Equal(t, last(out), last(out2))
}

// mosaic plan and mosaic sim on the mixed-cluster example: the plan names the GPUs of every
// worker (the H100 pair is one tensor-parallel worker) and puts the 70B aggregator on the
// pair; sim compares every policy.
func TestMixedClusterExample(t *testing.T) {
	if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
		t.Skipf("shared data not found: set %s", dataset.Env)
	}
	const exp = "../../experiments/examples/mixed-cluster.toml"
	code, out, errOut := runCLI("plan", exp)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"experiment mixed-cluster: 2 x A100-80GB + 1 x (2 x H100-80GB, tensor-parallel)",
		"  w0   GPU 0        A100-80GB\n",
		"  w2   GPUs 2,3     H100-80GB x2, tensor-parallel group (TP 2)\n",
		"w2 (H100-80GB x2)",
		"lower bound",
	} {
		assert.Contains(t, out, want)
	}
	code, out, errOut = runCLI("sim", exp, "-o", t.TempDir())
	require.Equal(t, 0, code, errOut)
	for _, p := range []string{"round-robin ", "data-parallel ", "mosaic ", "online "} {
		assert.Contains(t, out, "\n"+p)
	}
}

// Help goes to stdout with exit 0, in every form a user tries; a mistyped command gets a
// suggestion; --version works.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "sim"}, {"sim", "--help"}, {"trace", "stats", "--help"}, {"trace", "stats", "-h"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		assert.Equal(t, 0, code, "%v: %s", args, errb.String())
		assert.Contains(t, out.String()+errb.String(), "usage: mosaic", "%v", args)
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"--help"}, &out, &errb))
	assert.Contains(t, out.String(), "examples:")
	out.Reset()
	assert.Equal(t, 0, run([]string{"--version"}, &out, &errb))
	assert.Contains(t, out.String(), "mosaic ")
	errb.Reset()
	assert.Equal(t, 2, run([]string{"simm"}, &out, &errb))
	assert.Contains(t, errb.String(), `did you mean "sim"?`)
	errb.Reset()
	assert.Equal(t, 2, run([]string{"plot", "--dpi", "-5", t.TempDir()}, &out, &errb))
	assert.Contains(t, errb.String(), "--dpi -5")
}
