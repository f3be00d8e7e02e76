package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/results"
)

// Tests of what replay must never do silently: bend a figure through failed calls, a second
// writer, retries, a server that is not there, a host that cannot keep up, or an earlier
// policy's prefix cache; and of resuming into one row per call.

// attached starts an emulator for every worker and model of the e2e experiment (faults per
// model name), and writes a copy of the experiment whose [replay] attaches to them, with the
// extra [replay] lines given. It returns the file and the emulators by worker and model.
func attached(t *testing.T, faults map[string]emulate.Faults, prefixCaching bool, replayLines ...string) (string, map[[2]string]*emulate.Server) {
	t.Helper()
	data, err := os.ReadFile(e2eExperiment)
	require.NoError(t, err)
	exp := string(data)
	exp = exp[:strings.Index(exp, "[replay]")]
	var b strings.Builder
	b.WriteString(exp)
	b.WriteString("[replay]\nmode = \"attach\"\ntime_scale = 50\n")
	for _, l := range replayLines {
		b.WriteString(l + "\n")
	}
	servers := map[[2]string]*emulate.Server{}
	for w := range 2 {
		for name, arch := range map[string]string{"R": "qwenr1", "I1": "qwen2.5-7b", "I2": "llama-3-8b"} {
			cfg, err := emulate.ConfigFor("A100-80GB", arch, emulate.Options{NoPrefixCaching: !prefixCaching})
			require.NoError(t, err)
			cfg.ServedName, cfg.TimeScale, cfg.LoadTime = name, 50, 0
			cfg.Faults = faults[name]
			s, err := emulate.New(cfg)
			require.NoError(t, err)
			require.NoError(t, s.Start("127.0.0.1:0"))
			t.Cleanup(func() { s.Close() })
			servers[[2]string{strconv.Itoa(w), name}] = s
			fmt.Fprintf(&b, "\n[[replay.endpoint]]\nworker = %d\nmodel = %q\nurl = %q\n", w, name, s.URL())
		}
	}
	path := filepath.Join(t.TempDir(), "attached.toml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path, servers
}

func needE2E(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end replay takes 5-20 s")
	}
	if raceEnabled {
		t.Skip("the race detector slows the emulators too much")
	}
}

// summaryRecords reads summary.csv as strings by policy and column, as a reader other than
// ours (pandas) sees it.
func summaryRecords(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	recs := readCSVWithHeader(t, filepath.Join(dir, "summary.csv"))
	out := map[string]map[string]string{}
	for _, r := range recs {
		out[r["policy"]] = r
	}
	return out
}

func readCSVWithHeader(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs, "%s has a header", path)
	out := make([]map[string]string, 0, len(recs)-1)
	for _, rec := range recs[1:] {
		m := make(map[string]string, len(rec))
		for i, c := range recs[0] {
			m[c] = rec[i]
		}
		out = append(out, m)
	}
	return out
}

// Defect 1: one model answers HTTP 500 to every completion. The run is a failed run: exit 1,
// every policy's row says status failed with no speedup or accuracy (blank, not a number),
// the table says why, and the failed rows keep what they observed and the error, without the
// internal retry mark. --allow-failed-calls computes the figures over the queries that
// completed under every policy instead, labelled partial, and exits 0.
func TestReplayFailedCallsFailTheRun(t *testing.T) {
	needE2E(t)
	exp, _ := attached(t, map[string]emulate.Faults{"I1": {ErrorRate: 1}}, false, "retries = 1", `retry_backoff = "0.1s"`)
	dir := filepath.Join(t.TempDir(), "replay")
	code, out, errOut := runCLI("replay", exp, "-o", dir)
	require.Equal(t, 1, code, "a run with failed calls exits 1: %s", errOut)
	assert.Contains(t, errOut, "calls failed")
	assert.Contains(t, out, "FAILED")
	assert.Contains(t, out, "No speedup or accuracy is computed for it or against it")
	assert.Contains(t, out, "HTTP 500")
	for p, r := range summaryRecords(t, dir) {
		assert.Equal(t, "failed", r["status"], p)
		assert.Positive(t, atoi(t, r["failed_calls"]), p)
		for _, col := range []string{"speedup_expert", "speedup_aggregator", "speedup_e2e", "accuracy", "accuracy_delta_pp"} {
			assert.Empty(t, r[col], "%s %s: not computed", p, col)
		}
		assert.Equal(t, strconv.Itoa(atoi(t, r["failed_calls"])), r["retries"], "%s: each failed call was tried twice", p)
	}
	failed := 0
	for _, c := range readCSVWithHeader(t, filepath.Join(dir, "calls.csv")) {
		if c["status"] != "failed" {
			continue
		}
		failed++
		assert.Equal(t, "I1", c["model"])
		assert.Equal(t, "2", c["attempts"])
		assert.Contains(t, c["error"], "HTTP 500")
		assert.Contains(t, c["error"], "after 2 attempts")
		assert.NotContains(t, c["error"], "retryable")
		start, end := atof(t, c["start_s"]), atof(t, c["end_s"])
		assert.Positive(t, end, "a failed row keeps the times it observed: %v", c)
		assert.GreaterOrEqual(t, end, start)
		assert.GreaterOrEqual(t, start, atof(t, c["ready_s"]))
		assert.Greater(t, atof(t, c["retry_lost_s"]), 0.09, "the backoff (0.1 s of the experiment's time) is counted")
	}
	require.Positive(t, failed)

	dir2 := filepath.Join(t.TempDir(), "replay")
	code, out, errOut = runCLI("replay", exp, "-o", dir2, "--allow-failed-calls")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "partial (")
	rows := summaryRecords(t, dir2)
	for p, r := range rows {
		assert.Equal(t, "partial", r["status"], p)
		q := atoi(t, r["queries"])
		assert.Positive(t, q, p)
		assert.Less(t, q, 40, "%s: over the completed queries only", p)
		assert.NotEmpty(t, r["speedup_e2e"], p)
		assert.NotEmpty(t, r["accuracy"], p)
	}
	assert.Equal(t, "1.0000", rows["round-robin"]["speedup_e2e"])
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err, s)
	return n
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, s)
	return f
}

// Defect 2: two replays into one folder. The second fails at once, naming the first's PID,
// whether both are fresh runs or both --resume; the folder is free again when the first dies.
func TestReplayFolderLock(t *testing.T) {
	needE2E(t)
	dir := filepath.Join(t.TempDir(), "replay")
	// The first replay runs in a process of its own (this test binary as mosaic).
	first := exec.Command(os.Args[0], "replay", e2eExperiment, "-o", dir)
	first.Env = append(os.Environ(), "MOSAIC_TEST_MAIN=1")
	require.NoError(t, first.Start())
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	lock := filepath.Join(dir, results.LockName)
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(lock)
		return err == nil && strings.HasPrefix(string(data), strconv.Itoa(first.Process.Pid)+"\n")
	}, 30*time.Second, 20*time.Millisecond, "the first replay holds the lock")

	for _, args := range [][]string{{"replay", e2eExperiment, "-o", dir}, {"replay", e2eExperiment, "-o", dir, "--resume"}} {
		began := time.Now()
		code, _, errOut := runCLI(args...)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, fmt.Sprintf("is being written by PID %d (mosaic replay", first.Process.Pid))
		assert.Less(t, time.Since(began), 5*time.Second, "it fails at once")
	}
	// A simulation into the folder is refused the same way, before it simulates anything.
	code, out, errOut := runCLI("sim", e2eExperiment, "-o", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "is being written by PID")
	assert.Empty(t, out, "no table: it did not run")

	require.NoError(t, first.Process.Kill()) // a crash: the kernel drops the lock
	_ = first.Wait()
	code, _, errOut = runCLI("replay", e2eExperiment, "-o", dir, "--resume", "--set", "workload.queries=4")
	assert.Equal(t, 1, code)
	assert.NotContains(t, errOut, "is being written", "the lock went with its holder")
}

// Defect 4: an endpoint where nothing listens fails the replay within the connect timeout,
// naming the URL and the cause, before any policy starts; and the folder it leaves is
// reusable by a run without --resume (defect 8: a start-up failure).
func TestReplayWrongEndpointFailsFast(t *testing.T) {
	needE2E(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	data, err := os.ReadFile(e2eExperiment)
	require.NoError(t, err)
	exp := string(data)
	exp = exp[:strings.Index(exp, "[replay]")] + fmt.Sprintf("[replay]\ntime_scale = 20\nconnect_timeout = \"2s\"\n[[replay.endpoint]]\nworker = 0\nurl = %q\n[[replay.endpoint]]\nworker = 1\nurl = %q\n", url, url)
	path := filepath.Join(t.TempDir(), "wrong.toml")
	require.NoError(t, os.WriteFile(path, []byte(exp), 0o644))
	dir := filepath.Join(t.TempDir(), "replay")
	began := time.Now()
	code, _, errOut := runCLI("replay", path, "-o", dir)
	took := time.Since(began)
	require.Equal(t, 1, code)
	assert.Contains(t, errOut, url)
	assert.Contains(t, errOut, "connection refused")
	assert.Less(t, took, 20*time.Second, "within the connect timeout (2 s), not the health timeout (60 s)")
	t.Logf("failed after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(errOut))

	good, _ := attached(t, nil, false)
	code, _, errOut = runCLI("replay", good, "-o", dir)
	require.Equal(t, 0, code, "the folder of a run that measured nothing is reusable: %s", errOut)
	assert.Len(t, summaries(t, dir), 3)
}

// Defect 3: retry backoff waits in the experiment's time (real time / time scale) and is
// counted, not hidden: calls.csv records each call's attempts and the time they lost, and
// summary.csv the retries.
func TestReplayRetriesCounted(t *testing.T) {
	needE2E(t)
	exp, _ := attached(t, map[string]emulate.Faults{"I2": {ErrorRate: 0.5, Seed: 7}}, false, "retries = 8", `retry_backoff = "2s"`)
	dir := filepath.Join(t.TempDir(), "replay")
	code, out, errOut := runCLI("replay", exp, "-o", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "retries")
	retried := 0
	for _, c := range readCSVWithHeader(t, filepath.Join(dir, "calls.csv")) {
		n := atoi(t, c["attempts"])
		require.Equal(t, "done", c["status"])
		if n == 1 {
			assert.Equal(t, "0.000000", c["retry_lost_s"])
			continue
		}
		retried++
		// The backoffs are 2, 4, 8, ... s of the experiment's time: at time scale 50 the
		// old real-time wait of 2 s would have cost 100 s.
		backoff := 2 * (math.Pow(2, float64(n-1)) - 1)
		lost := atof(t, c["retry_lost_s"])
		assert.GreaterOrEqual(t, lost, 0.95*backoff, "call %s: %d attempts", c["call"], n)
		// A retry also waits its turn to be sent behind the worker's other sends: on a busy
		// machine that is up to a few tenths of a real second, times 50.
		assert.Less(t, lost, 5*backoff+10, "call %s: %d attempts lost %.1f s, not the backoff x the time scale (%.0f s)", c["call"], n, lost, 50*backoff)
		assert.GreaterOrEqual(t, atof(t, c["start_s"]), atof(t, c["ready_s"])+0.95*backoff, "the timing is the last attempt's")
	}
	require.Positive(t, retried, "the faults struck")
	total := 0
	for _, r := range summaryRecords(t, dir) {
		total += atoi(t, r["retries"])
	}
	assert.GreaterOrEqual(t, total, retried)
}

// Defect 5: a replay reports its progress on stderr: calls done of the total per policy, the
// time elapsed and the rate.
func TestReplayProgress(t *testing.T) {
	needE2E(t)
	logs := captureLogs(t)
	exp, _ := attached(t, nil, false)
	code, _, errOut := runCLI("replay", exp, "-o", filepath.Join(t.TempDir(), "replay"))
	require.Equal(t, 0, code, errOut)
	for _, p := range []string{"round-robin", "data-parallel", "mosaic"} {
		assert.Regexp(t, `msg="replay progress" policy=`+p+` calls_done=(\d+) calls_total=(\d+) elapsed=\S+ calls_per_s=\S+`, logs.String())
	}
	assert.Contains(t, logs.String(), "calls_done=120 calls_total=120", "the last report of round-robin (no skips) counts every call")
}

// Defect 7: policies replayed one after another on the same attached servers, with the
// servers' prefix caches on, do not inherit each other's caches: the same policy listed three
// times gets the same prefix-cache hit rate in every position (its own prompts' sharing
// only), where, without a salt per policy, later positions would be served from the earlier
// ones' blocks.
func TestReplayPoliciesIsolatedFromEachOthersCaches(t *testing.T) {
	needE2E(t)
	exp, servers := attached(t, nil, true, `prefix_caching = "workload"`)
	data, err := os.ReadFile(exp)
	require.NoError(t, err)
	s := string(data)
	head, tail := s[:strings.Index(s, "[[policy]]")], s[strings.Index(s, "[replay]"):]
	policies := "[[policy]]\nname = \"round-robin\"\nlabel = \"first\"\n\n[[policy]]\nname = \"round-robin\"\nlabel = \"second\"\n\n[[policy]]\nname = \"round-robin\"\nlabel = \"third\"\n\n"
	require.NoError(t, os.WriteFile(exp, []byte(head+policies+tail), 0o644))
	// The question is shared by a query's calls: a prefix the cache may serve within a policy.
	dir := filepath.Join(t.TempDir(), "replay")
	code, _, errOut := runCLI("replay", exp, "-o", dir, "--set", "engine.prefix_caching=true")
	require.Equal(t, 0, code, errOut)
	info := readRunJSON(t, dir)
	require.Len(t, info.Replayed, 3)
	var rates []float64
	for _, p := range info.Replayed {
		require.NotNil(t, p.PrefixCacheHitPct, p.Policy)
		require.Positive(t, p.PrefixCache.QueriedTokens, p.Policy)
		rates = append(rates, *p.PrefixCacheHitPct)
		assert.NotEmpty(t, p.CacheSalt)
		for _, srv := range p.Servers {
			assert.Equal(t, "reset requested", srv.CacheReset, "%s worker %d %s", p.Policy, srv.Worker, srv.Model)
		}
	}
	t.Logf("prefix-cache hit rates by position: %.1f%% %.1f%% %.1f%%", rates[0], rates[1], rates[2])
	// Within a policy, whether a query's second call finds its question cached depends on
	// timing (both may be prefilling at once): the rates vary by a few points run to run.
	// Inherited caches raise them by tens of points (16%, 96%, 96% without salt or reset).
	for _, r := range rates[1:] {
		assert.InDelta(t, rates[0], r, 15, "a policy's hit rate does not depend on its position")
	}
	assert.NotEqual(t, info.Replayed[0].CacheSalt, info.Replayed[1].CacheSalt)
	// The emulators saw the resets.
	resets := 0
	for _, srv := range servers {
		resets += metric(t, srv, "mosaic:emulate_prefix_cache_resets_total") + metric(t, srv, "mosaic:emulate_prefix_cache_reset_refusals_total")
	}
	assert.Positive(t, resets)
}

// runJSON is the part of a replay's run.json the tests read.
type runJSON struct {
	Engine   string `json:"engine"`
	Hardware string `json:"hardware"`
	Replayed []struct {
		Policy      string `json:"policy"`
		Runs        int    `json:"runs"`
		CacheSalt   string `json:"cache_salt"`
		PrefixCache struct {
			QueriedTokens int64 `json:"queried_tokens"`
			HitTokens     int64 `json:"hit_tokens"`
		} `json:"prefix_cache"`
		PrefixCacheHitPct *float64 `json:"prefix_cache_hit_pct"`
		Servers           []struct {
			Worker     int    `json:"worker"`
			Model      string `json:"model"`
			CacheReset string `json:"cache_reset"`
		} `json:"servers"`
		HostLag struct {
			Pct          float64 `json:"pct"`
			TimeScale    float64 `json:"time_scale"`
			FitTimeScale float64 `json:"fit_time_scale"`
		} `json:"host_lag"`
	} `json:"replayed"`
}

func readRunJSON(t *testing.T, dir string) runJSON {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "run.json"))
	require.NoError(t, err)
	var info runJSON
	require.NoError(t, json.Unmarshal(data, &info))
	return info
}

// metric reads one series of an emulator's /metrics (0 when absent).
func metric(t *testing.T, s *emulate.Server, name string) int {
	t.Helper()
	data, err := httpGet(s.URL() + "/metrics")
	require.NoError(t, err)
	for _, line := range strings.Split(data, "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err)
			return int(v)
		}
	}
	return 0
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return string(data), err
}

// Defect 8: resuming a run whose calls failed leaves one row per call (the new row supersedes
// the failed one), aggregator rows only for queries queries.csv says were aggregated, and
// summary.csv counting the runs a resumed policy's makespan spans.
func TestReplayResumeSupersedes(t *testing.T) {
	needE2E(t)
	exp, _ := attached(t, map[string]emulate.Faults{"I1": {ErrorRate: 0.3, Seed: 3}}, false, "retries = 0")
	dir := filepath.Join(t.TempDir(), "replay")
	code, _, errOut := runCLI("replay", exp, "-o", dir)
	require.Equal(t, 1, code, errOut)
	failedBefore := 0
	for _, c := range readCSVWithHeader(t, filepath.Join(dir, "calls.csv")) {
		if c["status"] == "failed" {
			failedBefore++
		}
	}
	require.Positive(t, failedBefore)

	fixed, _ := attached(t, nil, false, "retries = 0")
	// The same experiment (the [replay] table may change between runs), healthy servers.
	code, out, errOut := runCLI("replay", fixed, "-o", dir, "--resume")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "spans 2 runs")
	calls := readCSVWithHeader(t, filepath.Join(dir, "calls.csv"))
	seen := map[[2]string]int{}
	aggs := map[[2]string]bool{}
	for _, c := range calls {
		assert.Equal(t, "done", c["status"], "%v", c)
		seen[[2]string{c["policy"], c["call"]}]++
		if c["role"] == "aggregator" {
			aggs[[2]string{c["policy"], c["query"]}] = true
		}
	}
	for k, n := range seen {
		assert.Equal(t, 1, n, "policy %s call %s: one row", k[0], k[1])
	}
	qs, err := results.ReadQueriesCSV(filepath.Join(dir, "queries.csv"))
	require.NoError(t, err)
	require.Len(t, qs, 3*40, "one row per policy and query")
	for _, q := range qs {
		assert.Equal(t, !q.FinalSkipped, aggs[[2]string{q.Policy, strconv.Itoa(q.Query)}],
			"%s query %d: an aggregator row exactly when queries.csv says it was aggregated", q.Policy, q.Query)
	}
	for p, r := range summaries(t, dir) {
		assert.Equal(t, results.StatusOK, r.Status, p)
		assert.Equal(t, 2, r.Runs, "%s: its makespan spans the interrupted run and the resumed one", p)
	}
}

// Defect 6: a replay at time scale 200 on emulators sharing this machine's cores with the
// replay stretches its measurements (the host's delays are multiplied by 200): it says so, in
// the log, the table, summary.csv and run.json, with a time scale that would fit.
func TestReplayHostLagGuard(t *testing.T) {
	needE2E(t)
	t.Setenv("MOSAIC_TEST_MAIN", "1")
	logs := captureLogs(t)
	dir := filepath.Join(t.TempDir(), "replay")
	code, out, errOut := runCLI("replay", e2eExperiment, "-o", dir, "--set", "replay.time_scale=200")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, logs.String(), "the host could not keep up")
	assert.Contains(t, out, "the host could not keep up")
	assert.Contains(t, out, "rerun at time scale")
	over := 0
	for p, r := range summaries(t, dir) {
		t.Logf("%s: host lag %.2f%% of the servers' time", p, r.HostLagPct)
		if r.HostLagPct > 1 {
			over++
		}
	}
	assert.Positive(t, over, "summary.csv records the lag")
	for _, p := range readRunJSON(t, dir).Replayed {
		assert.Equal(t, 200.0, p.HostLag.TimeScale)
		if p.HostLag.Pct > 1 {
			assert.Positive(t, p.HostLag.FitTimeScale, p.Policy)
			assert.Less(t, p.HostLag.FitTimeScale, 200.0, p.Policy)
		}
	}
}

// mosaic profile against an emulated H100: batches of equal prompt and output lengths and of
// short outputs (--outputs L,32, which separates a prompt token's cost from a generated one's),
// fitted back to the emulator's own cost model. At time scale 5 the short batches last 20-40 ms
// of real time, long enough that the host's jitter (a few ms on a busy machine) stays small.
func TestProfileEmulator(t *testing.T) {
	needE2E(t)
	cfg, err := emulate.ConfigFor("H100-80GB", "llama-3-8b", emulate.Options{})
	require.NoError(t, err)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime = "L", 5, 0
	s, err := emulate.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start("127.0.0.1:0"))
	t.Cleanup(func() { s.Close() })
	out := filepath.Join(t.TempDir(), "profile.toml")
	code, stdout, errOut := runCLI("profile", "--endpoint", s.URL(), "--model", "L", "--arch", "llama-3-8b", "--gpu", "H100-80GB",
		"--lengths", "128,512", "--outputs", "L,32", "--batches", "1,16", "--time-scale", "5", "--warmup", "2", "-o", out)
	require.Equal(t, 0, code, errOut)
	t.Logf("%s", stdout)
	assert.Regexp(t, `meta-llama/Meta-Llama-3-8B\s+512\s+32\s+16\s`, stdout, "a batch of 16 prompts of 512 tokens, 32 tokens out")
	m := regexp.MustCompile(`MAPE ([0-9.]+)% over 8 rows`).FindStringSubmatch(stdout)
	require.NotNil(t, m, stdout)
	assert.Less(t, atof(t, m[1]), 10.0, "the fit reproduces the emulator's own cost model")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), "[gpu.h100-80gb]")
}
