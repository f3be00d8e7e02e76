package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mosaic-sched/mosaic/results"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as the mosaic binary: replay's launch template runs {mosaic}
// emulate ..., which is this executable with MOSAIC_TEST_MAIN set.
func TestMain(m *testing.M) {
	if os.Getenv("MOSAIC_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const e2eExperiment = "testdata/e2e.toml"

// raceEnabled is set under the race detector, which slows the emulators' real-time loops
// too much for a timing comparison.
var raceEnabled bool

func summaries(t *testing.T, dir string) map[string]results.SummaryRow {
	t.Helper()
	rows, err := results.ReadSummaryCSV(filepath.Join(dir, "summary.csv"))
	require.NoError(t, err)
	out := map[string]results.SummaryRow{}
	for _, r := range rows {
		out[r.Policy] = r
	}
	return out
}

// Same experiment, two modes: each policy's end-to-end makespan and speedup from replay on
// emulators (launched per worker and model, at time scale 20) agree with the simulator's
// within 5%. Measured: within 1.2% with two busy loops beside the test (docs/replay.md says where
// the remaining difference comes from). An emulator's load time is real time divided by the
// time scale (about 1 s for these models), so on a loaded machine its process start-up alone
// can outlast it; what the loads overran, as workers.csv records them, is taken off the
// replayed makespan before comparing and logged.
func TestSimAgreesWithReplayOnEmulators(t *testing.T) {
	s, r, simDir, repDir, out := simAndReplay(t, e2eExperiment)
	assert.Contains(t, out, "experiment e2e (replay)")
	require.Len(t, r, 3)
	over := loadOverrun(t, simDir, repDir)
	e2e := func(p string) float64 { return r[p].E2ES - over[p] }
	for _, p := range []string{"round-robin", "data-parallel", "mosaic"} {
		t.Logf("%-14s sim e2e %7.1f s  replay e2e %7.1f s (loads overran %.1f s)  speedup %.3f / %.3f",
			p, s[p].E2ES, r[p].E2ES, over[p], s[p].SpeedupE2E, e2e("round-robin")/e2e(p))
		assert.Equal(t, "replay", r[p].Mode)
		assert.InEpsilon(t, s[p].E2ES, e2e(p), 0.05, p)
		assert.InEpsilon(t, s[p].SpeedupE2E, e2e("round-robin")/e2e(p), 0.05, p)
		if over[p] < 0.01*s[p].E2ES && over["round-robin"] < 0.01*s["round-robin"].E2ES {
			assert.InEpsilon(t, s[p].SpeedupE2E, r[p].SpeedupE2E, 0.05, "replay's own speedup, %s", p)
		}
		assert.Equal(t, s[p].ExpertCalls, r[p].ExpertCalls, p)
		assert.Equal(t, s[p].AggregatorCalls, r[p].AggregatorCalls, p)
		assert.Zero(t, r[p].FailedCalls, p)
	}
	for _, f := range []string{"calls.csv", "workers.csv", "run.json", "host.json"} {
		_, err := os.Stat(filepath.Join(repDir, f))
		assert.NoError(t, err, f)
	}
	// run.json names the servers measured, with their versions and prefix caching (off, as
	// [replay] prefix_caching defaults to).
	data, err := os.ReadFile(filepath.Join(repDir, "run.json"))
	require.NoError(t, err)
	var info struct {
		Servers []struct {
			Worker        int    `json:"worker"`
			Model         string `json:"model"`
			Version       string `json:"version"`
			PrefixCaching string `json:"prefix_caching"`
		} `json:"servers"`
	}
	require.NoError(t, json.Unmarshal(data, &info))
	require.NotEmpty(t, info.Servers)
	for _, s := range info.Servers {
		assert.True(t, strings.HasPrefix(s.Version, "mosaic-emulate/"), s.Version)
		assert.Equal(t, "off", s.PrefixCaching)
	}
	// The launched servers' logs are kept per worker.
	logs, _ := filepath.Glob(filepath.Join(repDir, "logs", "worker*.log"))
	assert.NotEmpty(t, logs)
}

// simAndReplay simulates an experiment, then replays it on the emulators its [replay] command
// launches (this test binary), and returns both runs' summaries by policy, the replay's
// results folder and its output. It skips in -short mode and under the race detector, which
// slows the emulators' real-time loops too much for a timing comparison.
func simAndReplay(t *testing.T, exp string) (sim, rep map[string]results.SummaryRow, simDir, repDir, out string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end replay takes 5-20 s")
	}
	if raceEnabled {
		t.Skip("the race detector slows the emulators too much to compare timings")
	}
	t.Setenv("MOSAIC_TEST_MAIN", "1")
	simDir, repDir = t.TempDir(), filepath.Join(t.TempDir(), "replay")
	code, _, errOut := runCLI("sim", exp, "-o", simDir)
	require.Equal(t, 0, code, errOut)
	code, out, errOut = runCLI("replay", exp, "-o", repDir)
	require.Equal(t, 0, code, errOut)
	return summaries(t, simDir), summaries(t, repDir), simDir, repDir, out
}

// loadOverrun is, per policy, the most by which one worker's model loads in replay took
// longer in all than the simulator's (workers.csv "load" rows): time the emulators' process
// start-up added on a busy machine, which delays that worker's calls by as much at most.
// Replay's loads may not be shorter than the simulator's.
func loadOverrun(t *testing.T, simDir, repDir string) map[string]float64 {
	t.Helper()
	loads := func(dir string) map[string]map[int]float64 {
		rows, err := results.ReadWorkersCSV(filepath.Join(dir, "workers.csv"))
		require.NoError(t, err)
		out := map[string]map[int]float64{}
		for _, r := range rows {
			if r.Kind != "load" {
				continue
			}
			if out[r.Policy] == nil {
				out[r.Policy] = map[int]float64{}
			}
			out[r.Policy][r.Worker] += r.EndS - r.StartS
		}
		return out
	}
	sim, rep := loads(simDir), loads(repDir)
	over := map[string]float64{}
	for p, workers := range rep {
		for w, d := range workers {
			assert.GreaterOrEqual(t, d, 0.95*sim[p][w], "%s worker %d: replay's loads are not shorter than the simulator's", p, w)
			over[p] = max(over[p], d-sim[p][w])
		}
	}
	return over
}

// Killing an emulator mid-run leaves a results folder that --resume completes without
// redoing finished calls.
func TestReplayResumeAfterCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay takes ~20 s")
	}
	t.Setenv("MOSAIC_TEST_MAIN", "1")
	dir := filepath.Join(t.TempDir(), "replay")
	crashing := "replay.command={mosaic} emulate --listen 127.0.0.1:{port} --gpu {gpu_name} --model {arch} --served-model-name {model} --time-scale {time_scale} --fault-crash-after 25"
	code, _, errOut := runCLI("replay", e2eExperiment, "-o", dir, "--set", crashing)
	require.Equal(t, 1, code, "the crashed worker stops the run")
	assert.Contains(t, errOut, "--resume")
	before := callRows(t, dir)
	require.NotEmpty(t, before, "calls finished before the crash are on disk")

	code, _, errOut = runCLI("replay", e2eExperiment, "-o", dir)
	assert.Equal(t, 1, code, "a second run without --resume refuses to overwrite")
	assert.Contains(t, errOut, "use --resume")

	code, _, errOut = runCLI("replay", e2eExperiment, "-o", dir, "--resume", "--set", "workload.queries=20")
	assert.Equal(t, 1, code, "resuming a different experiment is refused")
	assert.Contains(t, errOut, "the experiment differs")

	// A torn last line (the run died while writing it) is dropped, not fatal.
	f, err := os.OpenFile(filepath.Join(dir, "calls.csv"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("round-robin,3,9,expert")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	code, _, errOut = runCLI("replay", e2eExperiment, "-o", dir, "--resume")
	require.Equal(t, 0, code, errOut)
	after := callRows(t, dir)
	assert.Len(t, summaries(t, dir), 3)
	// Every call ran exactly once (per policy), and the rows written before the crash are kept.
	seen := map[[2]string]int{}
	for _, r := range after {
		seen[[2]string{r[0], r[2]}]++
	}
	for k, n := range seen {
		assert.Equal(t, 1, n, "policy %s call %s", k[0], k[1])
	}
	assertKept(t, dir, before, after)

	// A line that is not torn but malformed is an error naming the file, line and column,
	// never a silently dropped measurement.
	path := filepath.Join(dir, "calls.csv")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	fields := strings.Split(lines[2], ",")
	fields[12] = "soon" // end_s
	lines[2] = strings.Join(fields, ",")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
	code, _, errOut = runCLI("replay", e2eExperiment, "-o", dir, "--resume")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "calls.csv:3: column end_s")
}

// callRows returns the rows of calls.csv with status done.
func callRows(t *testing.T, dir string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "calls.csv"))
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	status := slices.Index(recs[0], "status")
	require.GreaterOrEqual(t, status, 0)
	var out [][]string
	for _, r := range recs[1:] {
		if r[status] == "done" {
			out = append(out, r)
		}
	}
	return out
}

// assertKept checks that every row of before is in after, as it was: a resumed run keeps the
// calls measured before (their rows may move: a policy's rows are in call order once it ends),
// but for an aggregator that the rerun skipped (an expert that had failed now voted): its row
// goes, and queries.csv says its query was skipped.
func assertKept(t *testing.T, dir string, before, after [][]string) {
	t.Helper()
	rows := map[[2]string][]string{}
	for _, r := range after {
		rows[[2]string{r[0], r[2]}] = r
	}
	qs, err := results.ReadQueriesCSV(filepath.Join(dir, "queries.csv"))
	require.NoError(t, err)
	skipped := map[[2]string]bool{}
	for _, q := range qs {
		skipped[[2]string{q.Policy, strconv.Itoa(q.Query)}] = q.FinalSkipped
	}
	for _, r := range before {
		now, ok := rows[[2]string{r[0], r[2]}]
		if !ok && r[3] == "aggregator" && skipped[[2]string{r[0], r[1]}] {
			continue
		}
		assert.Equal(t, r, now, "policy %s call %s: the row measured before is kept as it was", r[0], r[2])
	}
}

// statusCol is calls.csv's status column.
var statusCol = slices.Index(results.CallHeader, "status")

// Streams that stall or lose their connection mid-way fail their calls (no retries here)
// without stopping the run or losing what completed; --resume, against servers without the
// fault, sends exactly the failed calls again and finishes every policy.
func TestReplayFaultsThenResume(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay takes ~20 s")
	}
	t.Setenv("MOSAIC_TEST_MAIN", "1")
	const emulator = "{mosaic} emulate --listen 127.0.0.1:{port} --gpu {gpu_name} --model {arch} --served-model-name {model} --time-scale {time_scale} {prefix_caching}"
	tests := []struct {
		name, fault, reason string
	}{
		{"stall", "--fault-stall-rate 0.1 --fault-stall 1h", "([replay] idle_timeout)"},
		{"disconnect", "--fault-disconnect-rate 0.1", "the stream ended without [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureLogs(t)
			dir := filepath.Join(t.TempDir(), "replay")
			args := []string{"replay", e2eExperiment, "-o", dir, "--set", "workload.queries=16", "--set", "replay.time_scale=50",
				"--set", "replay.retries=0", "--set", "replay.idle_timeout=300ms"}
			code, out, errOut := runCLI(append(args, "--set", "replay.command="+emulator+" "+tt.fault)...)
			require.Equal(t, 1, code, "a run with failed calls is a failed run: %s", errOut)
			assert.Contains(t, out, "calls failed", "every policy ran: failed calls do not stop the run")
			assert.Contains(t, out, "FAILED")
			assert.Contains(t, errOut, "calls failed")
			assert.Contains(t, logs.String(), tt.reason)
			before := callRows(t, dir)
			failed := 0
			for _, r := range summaries(t, dir) {
				failed += r.FailedCalls
			}
			require.Positive(t, failed, "the fault struck")

			code, _, errOut = runCLI(append(args, "--resume", "--set", "replay.command="+emulator)...)
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, logs.String(), "running them again")
			after := callRows(t, dir)
			assertKept(t, dir, before, after)
			all := allCallRows(t, dir)
			seen := map[[2]string]int{}
			for _, r := range all {
				assert.Equal(t, "done", r[statusCol], "policy %s call %s", r[0], r[2])
				seen[[2]string{r[0], r[2]}]++
			}
			for k, n := range seen {
				assert.Equal(t, 1, n, "policy %s call %s has one row", k[0], k[1])
			}
			rows := summaries(t, dir)
			require.Len(t, rows, 3)
			loads := map[string]int{}
			for _, w := range workerRows(t, dir) {
				if w[2] == "load" {
					loads[w[0]]++
				}
			}
			for p, r := range rows {
				assert.Zero(t, r.FailedCalls, p)
				assert.Equal(t, r.ModelLoads, loads[p], "%s: workers.csv holds one run of the policy", p)
			}
		})
	}
}

// captureLogs sends the process's slog output to a buffer until the test ends.
func captureLogs(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil))) // the handler serialises writes
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

// allCallRows returns every row of calls.csv.
func allCallRows(t *testing.T, dir string) [][]string {
	t.Helper()
	return readCSV(t, filepath.Join(dir, "calls.csv"))
}

// workerRows returns the rows of workers.csv.
func workerRows(t *testing.T, dir string) [][]string {
	t.Helper()
	return readCSV(t, filepath.Join(dir, "workers.csv"))
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return recs[1:]
}

// A mixed cluster replayed on emulators: the TP-2 worker is one server that sees both of its
// GPUs (CUDA_VISIBLE_DEVICES=1,2) and is launched with --tensor-parallel-size 2 through the
// {tensor_parallel} placeholder; the 70B aggregator runs only there, and sim and replay agree.
func TestReplayMixedClusterOnEmulators(t *testing.T) {
	s, r, simDir, repDir, out := simAndReplay(t, "testdata/e2e-mixed.toml")
	over := loadOverrun(t, simDir, repDir)
	assert.Contains(t, out, "experiment e2e-mixed (replay): 1 x A100-80GB + 1 x (2 x H100-80GB, tensor-parallel)")
	for _, p := range []string{"round-robin", "mosaic"} {
		t.Logf("%-12s sim e2e %6.1f s  replay e2e %6.1f s (loads overran %.1f s)", p, s[p].E2ES, r[p].E2ES, over[p])
		assert.Zero(t, r[p].FailedCalls, p)
		assert.InEpsilon(t, s[p].E2ES, r[p].E2ES-over[p], 0.1, p)
	}
	aggs := 0
	for _, row := range allCallRows(t, repDir) {
		if row[5] == "Agg" {
			aggs++
			assert.Equal(t, "1", row[6], "the aggregator on the TP-2 worker: %v", row)
		}
	}
	assert.Equal(t, 2*16, aggs, "no gate: each of the 16 queries' aggregator calls ran under both policies")
	logs, err := filepath.Glob(filepath.Join(repDir, "logs", "worker1-Agg-*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	data, err := os.ReadFile(logs[0])
	require.NoError(t, err)
	assert.Contains(t, string(data), "tensor_parallel_size=2")
	assert.Contains(t, string(data), "cuda_visible_devices=1,2")
	a100, err := filepath.Glob(filepath.Join(repDir, "logs", "worker0-*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, a100)
	data, err = os.ReadFile(a100[0])
	require.NoError(t, err)
	assert.Contains(t, string(data), "tensor_parallel_size=1")
	assert.Contains(t, string(data), "cuda_visible_devices=0")
}
