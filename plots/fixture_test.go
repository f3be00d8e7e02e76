package plots_test

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/plots"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// The fixture: experiment exp-a simulated with seeds 1 and 2 under rr (the baseline, never
// skips) and mosaic (T = 1), once with mosaic-t0.5 (T = 0.5), and replayed with seed 1;
// experiment exp-b simulated once. calls.csv and workers.csv hold exp-a's seed-1 run of rr
// and mosaic on two workers: four queries, two experts each from models A and B, aggregator C.

func summaryRow(exp, mode, policy string, seed uint64, threshold, skipped float64, speedups [3]float64, e2e, acc float64) results.SummaryRow {
	return results.SummaryRow{Experiment: exp, Mode: mode, Policy: policy, Seed: seed, Rule: "rule", Threshold: threshold,
		Queries: 4, ExpertCalls: 8, AggregatorCalls: 4 - int(skipped), AggregatorSkipped: int(skipped),
		ExpertStageS: e2e * 0.75, AggregatorStageS: e2e * 0.25, E2ES: e2e,
		SpeedupExpert: speedups[0], SpeedupAggregator: speedups[1], SpeedupE2E: speedups[2],
		Accuracy: acc, GPUBusyFrac: 0.5, ModelLoads: 3}
}

var inf = math.Inf(1)

func fixtureSummary() []results.SummaryRow {
	return []results.SummaryRow{
		summaryRow("exp-a", "sim", "rr", 1, inf, 0, [3]float64{1, 1, 1}, 100, 0.75),
		summaryRow("exp-a", "sim", "mosaic", 1, 1, 2, [3]float64{2, 3, 2.5}, 40, 0.5),
		summaryRow("exp-a", "sim", "rr", 2, inf, 0, [3]float64{1, 1, 1}, 120, 0.75),
		summaryRow("exp-a", "sim", "mosaic", 2, 1, 1, [3]float64{1.5, 2, 2}, 60, 0.75),
		summaryRow("exp-a", "sim", "mosaic-t0.5", 1, 0.5, 3, [3]float64{2, 4, 3}, 33, 0.25),
		summaryRow("exp-a", "replay", "rr", 1, inf, 0, [3]float64{1, 1, 1}, 125, 0.75),
		summaryRow("exp-a", "replay", "mosaic", 1, 1, 2, [3]float64{2, 2.5, 2.5}, 50, 0.5),
		summaryRow("exp-b", "sim", "rr", 1, inf, 0, [3]float64{1, 1, 1}, 10, 1),
		summaryRow("exp-b", "sim", "mosaic", 1, 1, 4, [3]float64{1.25, 1.5, 1.25}, 8, 1),
	}
}

func call(policy string, query, id int, layer int, model string, worker, out int, start, end float64) results.CallRow {
	role := traces.RoleExpert
	if layer > 0 {
		role = traces.RoleAggregator
	}
	return results.CallRow{Policy: policy, Query: query, Call: id, Role: role, Layer: layer, Model: model, Worker: worker,
		InputTokens: 100, OutputTokens: out, ReadyS: 0, StartS: start, FirstTokenS: start + 0.5, EndS: end, Status: "done"}
}

func fixtureCalls() []results.CallRow {
	e, a := 0, 1
	return []results.CallRow{
		// rr: A on worker 0, B on worker 1, then C on worker 1.
		call("rr", 0, 0, e, "A", 0, 10, 10, 20),
		call("rr", 0, 1, e, "A", 0, 100, 10, 40),
		call("rr", 1, 3, e, "A", 0, 1000, 12, 50),
		call("rr", 1, 4, e, "B", 1, 20, 10, 15),
		call("rr", 2, 6, e, "A", 0, 100, 20, 45),
		call("rr", 2, 7, e, "B", 1, 40, 10, 18),
		call("rr", 3, 9, e, "A", 0, 10, 40, 50),
		call("rr", 3, 10, e, "A", 0, 10, 41, 50),
		call("rr", 0, 2, a, "C", 1, 500, 60, 80),
		call("rr", 1, 5, a, "C", 1, 5000, 60, 100),
		call("rr", 2, 8, a, "C", 1, 500, 62, 90),
		call("rr", 3, 11, a, "C", 1, 50, 62, 70),
		// mosaic: the same expert calls (other placement), two aggregator calls.
		call("mosaic", 0, 0, e, "A", 1, 10, 5, 9),
		call("mosaic", 0, 1, e, "A", 1, 100, 5, 12),
		call("mosaic", 1, 3, e, "A", 0, 1000, 5, 20),
		call("mosaic", 1, 4, e, "B", 0, 20, 21, 25),
		call("mosaic", 2, 6, e, "A", 1, 100, 6, 15),
		call("mosaic", 2, 7, e, "B", 0, 40, 21, 26),
		call("mosaic", 3, 9, e, "A", 1, 10, 6, 10),
		call("mosaic", 3, 10, e, "A", 1, 10, 6, 10),
		call("mosaic", 1, 5, a, "C", 0, 5000, 30, 40),
		call("mosaic", 2, 8, a, "C", 1, 500, 30, 38),
	}
}

func fixtureWorkers() []results.WorkerRow {
	return []results.WorkerRow{
		{Policy: "rr", Worker: 0, Kind: "load", Model: "A", StartS: 0, EndS: 10},
		{Policy: "rr", Worker: 0, Kind: "busy", Model: "A", StartS: 10, EndS: 50, MeanBatch: 3},
		{Policy: "rr", Worker: 0, Kind: "idle", StartS: 50, EndS: 100},
		{Policy: "rr", Worker: 1, Kind: "load", Model: "B", StartS: 0, EndS: 10},
		{Policy: "rr", Worker: 1, Kind: "busy", Model: "B", StartS: 10, EndS: 18, MeanBatch: 2},
		{Policy: "rr", Worker: 1, Kind: "idle", StartS: 18, EndS: 50},
		{Policy: "rr", Worker: 1, Kind: "load", Model: "C", StartS: 50, EndS: 60},
		{Policy: "rr", Worker: 1, Kind: "busy", Model: "C", StartS: 60, EndS: 100, MeanBatch: 2.5},
		{Policy: "mosaic", Worker: 0, Kind: "load", Model: "A", StartS: 0, EndS: 5},
		{Policy: "mosaic", Worker: 0, Kind: "busy", Model: "A", StartS: 5, EndS: 20, MeanBatch: 1},
		{Policy: "mosaic", Worker: 0, Kind: "busy", Model: "B", StartS: 21, EndS: 26, MeanBatch: 2},
		{Policy: "mosaic", Worker: 0, Kind: "load", Model: "C", StartS: 26, EndS: 30},
		{Policy: "mosaic", Worker: 0, Kind: "busy", Model: "C", StartS: 30, EndS: 40, MeanBatch: 1},
		{Policy: "mosaic", Worker: 1, Kind: "load", Model: "A", StartS: 0, EndS: 5},
		{Policy: "mosaic", Worker: 1, Kind: "busy", Model: "A", StartS: 5, EndS: 15, MeanBatch: 4},
		{Policy: "mosaic", Worker: 1, Kind: "idle", StartS: 15, EndS: 30},
		{Policy: "mosaic", Worker: 1, Kind: "busy", Model: "C", StartS: 30, EndS: 38, MeanBatch: 1},
		{Policy: "mosaic", Worker: 1, Kind: "idle", StartS: 38, EndS: 40},
	}
}

func writeCSV[R results.Recorder](t *testing.T, path string, header []string, rows []R) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, results.WriteCSV(f, header, rows))
	require.NoError(t, f.Close())
}

// fixtureDir writes the fixture as a results folder and returns its path.
func fixtureDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "results")
	require.NoError(t, os.Mkdir(dir, 0o755))
	writeSweepSummary(t, filepath.Join(dir, "summary.csv"), fixtureSummary(), fixtureRates)
	writeCSV(t, filepath.Join(dir, "calls.csv"), results.CallHeader, fixtureCalls())
	writeCSV(t, filepath.Join(dir, "queries.csv"), results.QueryHeader, fixtureQueries())
	writeCSV(t, filepath.Join(dir, "workers.csv"), results.WorkerHeader, fixtureWorkers())
	return dir
}

// fixtureRates are the arrival rates of fixtureSummary's rows, as a sweep over
// workload.arrival_rate writes them in its own column.
var fixtureRates = []float64{0.5, 0.5, 1, 1, 0.5, 0.5, 1, 0.5, 1}

// writeSweepSummary writes summary rows behind a column of arrival rates.
func writeSweepSummary(t *testing.T, path string, rows []results.SummaryRow, rates []float64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	w := csv.NewWriter(f)
	require.NoError(t, w.Write(append([]string{plots.RateColumn}, results.SummaryHeader...)))
	for i, r := range rows {
		require.NoError(t, w.Write(append([]string{strconv.FormatFloat(rates[i], 'g', -1, 64)}, r.Record()...)))
	}
	w.Flush()
	require.NoError(t, w.Error())
	require.NoError(t, f.Close())
}

// fixtureQueries are two policies' queries of an online run.
func fixtureQueries() []results.QueryRow {
	var out []results.QueryRow
	for pi, p := range []string{"rr", "mosaic"} {
		for q := range 4 {
			arrival, latency := float64(5*q), float64(20*(q+1)/(pi+1))
			out = append(out, results.QueryRow{Policy: p, Query: q, ArrivalS: arrival, FirstTokenS: arrival + latency/2, EndS: arrival + latency,
				LatencyS: latency, TTFTS: latency / 2, Calls: 3, Answer: "A", Gold: "A", Correct: 1, SLOMet: -1})
		}
	}
	return out
}

// loadFixture writes the fixture and reads it back, so that tests see the CSV values.
func loadFixture(t *testing.T) (summary []results.SummaryRow, calls []results.CallRow, workers []results.WorkerRow) {
	t.Helper()
	dir := fixtureDir(t)
	summary, err := results.ReadSummaryCSV(filepath.Join(dir, "summary.csv"))
	require.NoError(t, err)
	calls, err = results.ReadCallsCSV(filepath.Join(dir, "calls.csv"))
	require.NoError(t, err)
	workers, err = results.ReadWorkersCSV(filepath.Join(dir, "workers.csv"))
	require.NoError(t, err)
	return summary, calls, workers
}

// The replay fixture: experiment exp-r simulated with seeds 1 and 2 under rr (the baseline),
// mosaic and dp in one folder, and replayed on the emulator, one folder per seed. Seed 1's
// replay has dp's calls failing (status failed: no speedup, no accuracy); seed 2's was run
// with --allow-failed-calls, so every row is summarised over the completed queries (status
// partial).

// replaySetup is what the replay fixture's run.json names.
var replaySetup = plots.Setup{Engine: "mosaic emulate dev", Hardware: "2 x A100-80GB"}

func replayFixtureRows() (sim, seed1, seed2 []results.SummaryRow) {
	nan := math.NaN()
	with := func(r results.SummaryRow, status string) results.SummaryRow {
		r.Status = status
		if status == results.StatusFailed {
			r.SpeedupExpert, r.SpeedupAggregator, r.SpeedupE2E, r.Accuracy = nan, nan, nan, nan
		}
		return r
	}
	sim = []results.SummaryRow{
		summaryRow("exp-r", "sim", "rr", 1, inf, 0, [3]float64{1, 1, 1}, 100, 0.75),
		summaryRow("exp-r", "sim", "mosaic", 1, 1, 2, [3]float64{2, 3, 2.5}, 40, 0.5),
		summaryRow("exp-r", "sim", "dp", 1, inf, 0, [3]float64{1.2, 1, 1.25}, 80, 0.75),
		summaryRow("exp-r", "sim", "rr", 2, inf, 0, [3]float64{1, 1, 1}, 120, 0.75),
		summaryRow("exp-r", "sim", "mosaic", 2, 1, 1, [3]float64{1.5, 2, 2}, 60, 0.75),
		summaryRow("exp-r", "sim", "dp", 2, inf, 0, [3]float64{1.2, 1, 1.2}, 100, 0.75),
	}
	seed1 = []results.SummaryRow{
		with(summaryRow("exp-r", "replay", "rr", 1, inf, 0, [3]float64{1, 1, 1}, 110, 0.75), results.StatusOK),
		with(summaryRow("exp-r", "replay", "mosaic", 1, 1, 2, [3]float64{1.8, 2.5, 2.2}, 50, 0.5), results.StatusOK),
		with(summaryRow("exp-r", "replay", "dp", 1, inf, 0, [3]float64{}, 30, 0.75), results.StatusFailed),
	}
	seed2 = []results.SummaryRow{
		with(summaryRow("exp-r", "replay", "rr", 2, inf, 0, [3]float64{1, 1, 1}, 100, 0.75), results.StatusPartial),
		with(summaryRow("exp-r", "replay", "mosaic", 2, 1, 1, [3]float64{1.5, 2, 1.6}, 62.5, 0.75), results.StatusPartial),
		with(summaryRow("exp-r", "replay", "dp", 2, inf, 0, [3]float64{1.1, 1, 1.25}, 80, 0.75), results.StatusPartial),
	}
	return sim, seed1, seed2
}

// replayFixtureDirs writes the replay fixture's folders: the simulation's, then each seed's
// replay with a run.json naming replaySetup.
func replayFixtureDirs(t *testing.T) []string {
	t.Helper()
	sim, seed1, seed2 := replayFixtureRows()
	return []string{
		resultsDir(t, "sim", sim, `{"experiment": {"name": "exp-r"}, "seed": 1, "mode": "sim"}`),
		resultsDir(t, "replay-1", seed1, replayRunJSON(1, replaySetup)),
		resultsDir(t, "replay-2", seed2, replayRunJSON(2, replaySetup)),
	}
}

// replayRunJSON is the run.json of a replay of exp-r measured on setup.
func replayRunJSON(seed int, setup plots.Setup) string {
	return fmt.Sprintf(`{"experiment": {"name": "exp-r"}, "seed": %d, "mode": "replay", "engine": %q, "hardware": %q, "servers": []}`,
		seed, setup.Engine, setup.Hardware)
}

// resultsDir writes a results folder named name holding summary rows and, unless runJSON is
// empty, a run.json; it returns the folder's path.
func resultsDir(t *testing.T, name string, rows []results.SummaryRow, runJSON string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	writeCSV(t, filepath.Join(dir, "summary.csv"), results.SummaryHeader, rows)
	if runJSON != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "run.json"), []byte(runJSON), 0o644))
	}
	return dir
}

// vllmSetup is the setup of the replay fixture's second engine.
var vllmSetup = plots.Setup{Engine: "vLLM 0.11.0", Hardware: "2 x A100-80GB"}

// vllmFixtureDir writes a replay of exp-r's seed 1 on vllmSetup, slower than the emulator's,
// in which dp's calls failed.
func vllmFixtureDir(t *testing.T) string {
	t.Helper()
	_, seed1, _ := replayFixtureRows()
	rows := slices.Clone(seed1)
	rows[0].E2ES, rows[1].E2ES, rows[1].SpeedupE2E = 130, 70, 130.0/70
	return resultsDir(t, "vllm-1", rows, replayRunJSON(1, vllmSetup))
}
