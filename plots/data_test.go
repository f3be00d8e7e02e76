package plots_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/plots"
	"github.com/mosaic-sched/mosaic/results"
)

func TestSpeedupData(t *testing.T) {
	summary, _, _ := loadFixture(t)
	got := plots.SpeedupData(summary, nil)
	assert.Equal(t, []plots.Group{{Experiment: "exp-a", Mode: "sim"}, {Experiment: "exp-a", Mode: "replay"}, {Experiment: "exp-b", Mode: "sim"}}, got.Groups)
	assert.Equal(t, []string{"rr", "mosaic", "mosaic-t0.5"}, got.Policies)
	assert.Equal(t, "rr", got.Baseline)
	tests := []struct {
		name                 string
		stage, group, policy int
		want                 plots.Stat
	}{
		{"baseline over two seeds", plots.StageEndToEnd, 0, 0, plots.Stat{Mean: 1, Min: 1, Max: 1, N: 2}},
		{"expert over two seeds", plots.StageExpert, 0, 1, plots.Stat{Mean: 1.75, Min: 1.5, Max: 2, Std: math.Sqrt(0.125), N: 2}},
		{"aggregator over two seeds", plots.StageAggregator, 0, 1, plots.Stat{Mean: 2.5, Min: 2, Max: 3, Std: math.Sqrt(0.5), N: 2}},
		{"one seed", plots.StageEndToEnd, 0, 2, plots.Stat{Mean: 3, Min: 3, Max: 3, N: 1}},
		{"replay", plots.StageAggregator, 1, 1, plots.Stat{Mean: 2.5, Min: 2.5, Max: 2.5, N: 1}},
		{"policy not run", plots.StageExpert, 1, 2, plots.Stat{}},
		{"second experiment", plots.StageEndToEnd, 2, 1, plots.Stat{Mean: 1.25, Min: 1.25, Max: 1.25, N: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDeltaMapValues(t, statMap(tt.want), statMap(got.Cells[tt.stage][tt.group][tt.policy]), 1e-12)
		})
	}
}

func statMap(s plots.Stat) map[string]float64 {
	return map[string]float64{"mean": s.Mean, "min": s.Min, "max": s.Max, "std": s.Std, "n": float64(s.N)}
}

func TestSpeedupDataBaselineDisagrees(t *testing.T) {
	rows := []results.SummaryRow{{Experiment: "a", Mode: "sim", Policy: "rr"}, {Experiment: "b", Mode: "sim", Policy: "dp"}}
	assert.Empty(t, plots.SpeedupData(rows, nil).Baseline)
}

// Rows of two sweep points are never pooled: only each point's seeds are.
func TestSpeedupDataKeepsSweepPointsApart(t *testing.T) {
	var rows []results.SummaryRow
	var points []string
	for _, pt := range []struct {
		point   string
		speedup float64
	}{{"arrival_rate=1", 1.2}, {"arrival_rate=1", 1.4}, {"arrival_rate=4", 2.0}, {"arrival_rate=4", 2.2}} {
		rows = append(rows, results.SummaryRow{Experiment: "e", Mode: "sim", Policy: "rr", SpeedupE2E: 1},
			results.SummaryRow{Experiment: "e", Mode: "sim", Policy: "mosaic", SpeedupE2E: pt.speedup})
		points = append(points, pt.point, pt.point)
	}
	got := plots.SpeedupData(rows, points)
	require.Equal(t, []plots.Group{{Experiment: "e", Mode: "sim", Point: "arrival_rate=1"}, {Experiment: "e", Mode: "sim", Point: "arrival_rate=4"}}, got.Groups)
	assert.Equal(t, "e arrival_rate=4", got.Groups[1].String())
	assert.InDelta(t, 1.3, got.Cells[plots.StageEndToEnd][0][1].Mean, 1e-12)
	assert.InDelta(t, 2.1, got.Cells[plots.StageEndToEnd][1][1].Mean, 1e-12)
	assert.Equal(t, 2, got.Cells[plots.StageEndToEnd][1][1].N)
}

func TestStatRange(t *testing.T) {
	s := plots.NewStat(1, 2, 6)
	lo, hi := s.Range(plots.SpreadMinMax)
	assert.Equal(t, [2]float64{1, 6}, [2]float64{lo, hi})
	lo, hi = s.Range(plots.SpreadStd)
	assert.InDelta(t, 3-math.Sqrt(7), lo, 1e-12)
	assert.InDelta(t, 3+math.Sqrt(7), hi, 1e-12)
	assert.Equal(t, plots.Stat{}, plots.NewStat())
}

func TestTimelineData(t *testing.T) {
	_, _, workers := loadFixture(t)
	got := plots.TimelineData(workers)
	assert.Equal(t, []string{"A", "B", "C"}, got.Models)
	assert.Equal(t, 100.0, got.End)
	require.Len(t, got.Policies, 2)
	type lane struct {
		worker, intervals int
		busy, load, idle  float64
	}
	tests := []struct {
		policy string
		end    float64
		lanes  []lane
	}{
		{"rr", 100, []lane{{0, 3, 40, 10, 50}, {1, 5, 48, 20, 32}}},
		{"mosaic", 40, []lane{{0, 5, 30, 9, 0}, {1, 5, 18, 5, 17}}},
	}
	for i, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			p := got.Policies[i]
			assert.Equal(t, tt.policy, p.Policy)
			assert.Equal(t, tt.end, p.End)
			var lanes []lane
			for _, l := range p.Lanes {
				lanes = append(lanes, lane{l.Worker, len(l.Intervals), l.Busy, l.Load, l.Idle})
				for k := 1; k < len(l.Intervals); k++ {
					assert.LessOrEqual(t, l.Intervals[k-1].StartS, l.Intervals[k].StartS, "intervals in time order")
				}
			}
			assert.Equal(t, tt.lanes, lanes)
		})
	}
}

func TestCDF(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		x, p   []float64
	}{
		{"ties", []float64{3, 1, 2, 2}, []float64{1, 2, 3}, []float64{0.25, 0.75, 1}},
		{"one value", []float64{7}, []float64{7}, []float64{1}},
		{"NaN dropped", []float64{math.NaN(), 5, 4}, []float64{4, 5}, []float64{0.5, 1}},
		{"empty", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, p := plots.CDF(tt.values)
			assert.Equal(t, tt.x, x)
			assert.Equal(t, tt.p, p)
		})
	}
}

func TestOutputLengthData(t *testing.T) {
	_, calls, _ := loadFixture(t)
	got := plots.OutputLengthData(calls)
	want := []plots.LengthCDF{
		{Model: "A", Role: "expert", N: 6, X: []float64{10, 100, 1000}, P: []float64{0.5, 5.0 / 6, 1}, Median: 55},
		{Model: "B", Role: "expert", N: 2, X: []float64{20, 40}, P: []float64{0.5, 1}, Median: 30},
		{Model: "C", Role: "aggregator", Layer: 1, N: 4, X: []float64{50, 500, 5000}, P: []float64{0.25, 0.75, 1}, Median: 500},
	}
	assert.Equal(t, want, got)
}

func TestDemandData(t *testing.T) {
	_, calls, _ := loadFixture(t)
	got := plots.DemandData(calls)
	assert.Equal(t, plots.Demand{Models: []plots.ModelCount{{"A", 6}, {"B", 2}}, Ratio: 3}, got)
	assert.Equal(t, plots.Demand{}, plots.DemandData(nil))
}

func TestTradeoffData(t *testing.T) {
	summary, _, _ := loadFixture(t)
	type point struct{ threshold, skip, skipMin, skipMax, acc float64 }
	flatten := func(series []plots.TradeoffSeries) map[plots.Group][]point {
		out := map[plots.Group][]point{}
		for _, s := range series {
			for _, p := range s.Points {
				out[s.Group] = append(out[s.Group], point{p.Threshold, p.SkipRate.Mean, p.SkipRate.Min, p.SkipRate.Max, p.Accuracy.Mean})
			}
		}
		return out
	}
	tests := []struct {
		family string
		want   map[plots.Group][]point
	}{
		{"", map[plots.Group][]point{
			{Experiment: "exp-a", Mode: "sim"}:    {{0.5, 0.75, 0.75, 0.75, 0.25}, {1, 0.375, 0.25, 0.5, 0.625}, {inf, 0, 0, 0, 0.75}},
			{Experiment: "exp-a", Mode: "replay"}: {{1, 0.5, 0.5, 0.5, 0.5}, {inf, 0, 0, 0, 0.75}},
			{Experiment: "exp-b", Mode: "sim"}:    {{1, 1, 1, 1, 1}, {inf, 0, 0, 0, 1}},
		}},
		{"mosaic", map[plots.Group][]point{
			{Experiment: "exp-a", Mode: "sim"}:    {{0.5, 0.75, 0.75, 0.75, 0.25}, {1, 0.375, 0.25, 0.5, 0.625}},
			{Experiment: "exp-a", Mode: "replay"}: {{1, 0.5, 0.5, 0.5, 0.5}},
			{Experiment: "exp-b", Mode: "sim"}:    {{1, 1, 1, 1, 1}},
		}},
		{"rr", map[plots.Group][]point{
			{Experiment: "exp-a", Mode: "sim"}:    {{inf, 0, 0, 0, 0.75}},
			{Experiment: "exp-a", Mode: "replay"}: {{inf, 0, 0, 0, 0.75}},
			{Experiment: "exp-b", Mode: "sim"}:    {{inf, 0, 0, 0, 1}},
		}},
		{"dp", map[plots.Group][]point{}},
	}
	for _, tt := range tests {
		t.Run("family "+tt.family, func(t *testing.T) {
			assert.Equal(t, tt.want, flatten(plots.TradeoffData(summary, tt.family)))
		})
	}
}

func TestInFamily(t *testing.T) {
	tests := []struct {
		policy, family string
		want           bool
	}{
		{"mosaic", "mosaic", true},
		{"mosaic-t2/3", "mosaic", true},
		{"round-robin+skip", "round-robin", true},
		{"mosaics", "mosaic", false},
		{"mosaic", "mosaic-t2/3", false},
		{"anything", "", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, plots.InFamily(tt.policy, tt.family), "%s in %s", tt.policy, tt.family)
	}
}

func TestSimVsReplayData(t *testing.T) {
	summary, _, _ := loadFixture(t)
	got := plots.SimVsReplayData(summary, nil)
	require.Len(t, got, 2)
	assert.Equal(t, plots.SimVsReplayPair{Experiment: "exp-a", Policy: "rr",
		Sim: plots.Stat{Mean: 110, Min: 100, Max: 120, Std: math.Sqrt(200), N: 2}, Replay: plots.Stat{Mean: 125, Min: 125, Max: 125, N: 1},
		ErrorPct:   -12,
		SimSpeedup: plots.Stat{Mean: 1, Min: 1, Max: 1, N: 2}, ReplaySpeedup: plots.Stat{Mean: 1, Min: 1, Max: 1, N: 1},
		SimBaseline: "rr", ReplayBaseline: "rr"}, got[0])
	assert.Equal(t, "mosaic", got[1].Policy)
	assert.Equal(t, 50.0, got[1].Sim.Mean)
	assert.Equal(t, 50.0, got[1].Replay.Mean)
	assert.Equal(t, 0.0, got[1].ErrorPct)
	assert.Equal(t, plots.Stat{Mean: 2.25, Min: 2, Max: 2.5, Std: math.Sqrt(0.125), N: 2}, got[1].SimSpeedup)
	assert.Equal(t, plots.Stat{Mean: 2.5, Min: 2.5, Max: 2.5, N: 1}, got[1].ReplaySpeedup)
	assert.InDelta(t, 0.25, got[1].SpeedupDiff, 1e-12, "measured less simulated")

	var simOnly []results.SummaryRow
	for _, r := range summary {
		if r.Mode == "sim" {
			simOnly = append(simOnly, r)
		}
	}
	assert.Empty(t, plots.SimVsReplayData(simOnly, nil))
}

// Failed rows are left out and counted, partial ones kept and counted, and the speedups are
// paired like the makespans.
func TestSimVsReplayDataStatus(t *testing.T) {
	sim, seed1, seed2 := replayFixtureRows()
	failedSim := sim[2]
	failedSim.Seed, failedSim.Status, failedSim.E2ES, failedSim.SpeedupE2E = 3, results.StatusFailed, 10, math.NaN()
	rows := slices.Concat(sim, []results.SummaryRow{failedSim}, seed1, seed2)
	got := plots.SimVsReplayData(rows, nil)
	require.Len(t, got, 3)
	byPolicy := map[string]plots.SimVsReplayPair{}
	for _, p := range got {
		byPolicy[p.Policy] = p
		assert.Equal(t, "rr", p.SimBaseline)
		assert.Equal(t, "rr", p.ReplayBaseline)
		assert.Equal(t, plots.Setup{}, p.Setup)
	}

	rr := byPolicy["rr"]
	assert.Equal(t, plots.Stat{Mean: 105, Min: 100, Max: 110, Std: math.Sqrt(50), N: 2}, rr.Replay, "an ok and a partial row")
	assert.Equal(t, 1, rr.Partial)
	assert.Zero(t, rr.Failed)
	assert.InDelta(t, (110-105)/105.0*100, rr.ErrorPct, 1e-9)
	assert.Equal(t, 0.0, rr.SpeedupDiff)

	mosaic := byPolicy["mosaic"]
	assert.InDelta(t, 2.25, mosaic.SimSpeedup.Mean, 1e-12)
	assert.InDelta(t, 1.9, mosaic.ReplaySpeedup.Mean, 1e-12)
	assert.Equal(t, 2, mosaic.ReplaySpeedup.N)
	assert.InDelta(t, -0.35, mosaic.SpeedupDiff, 1e-12)

	dp := byPolicy["dp"]
	assert.Equal(t, 1, dp.Failed, "seed 1's failed row is left out")
	assert.Equal(t, 1, dp.SimFailed, "the failed simulated row is left out")
	assert.Equal(t, 1, dp.Partial)
	assert.Equal(t, plots.Stat{Mean: 80, Min: 80, Max: 80, N: 1}, dp.Replay, "seed 2's partial row only")
	assert.Equal(t, 2, dp.Sim.N)
	assert.Equal(t, 90.0, dp.Sim.Mean)
	assert.InDelta(t, 12.5, dp.ErrorPct, 1e-9)
	assert.Equal(t, plots.Stat{Mean: 1.25, Min: 1.25, Max: 1.25, N: 1}, dp.ReplaySpeedup)
	assert.InDelta(t, 0.025, dp.SpeedupDiff, 1e-12)
}

// Replays on two setups make a pair per setup; a pair whose replay rows all failed has no
// measurement.
func TestSimVsReplayDataSetups(t *testing.T) {
	sim, seed1, _ := replayFixtureRows()
	rows := slices.Concat(sim, seed1, seed1)
	setups := slices.Concat(make([]plots.Setup, len(sim)), slices.Repeat([]plots.Setup{replaySetup}, len(seed1)),
		slices.Repeat([]plots.Setup{vllmSetup}, len(seed1)))
	got := plots.SimVsReplayData(rows, setups)
	require.Len(t, got, 6)
	type key struct {
		policy string
		setup  plots.Setup
	}
	var keys []key
	for _, p := range got {
		keys = append(keys, key{p.Policy, p.Setup})
	}
	assert.Equal(t, []key{{"rr", replaySetup}, {"rr", vllmSetup}, {"mosaic", replaySetup}, {"mosaic", vllmSetup},
		{"dp", replaySetup}, {"dp", vllmSetup}}, keys)
	for _, p := range got[4:] {
		assert.Equal(t, 1, p.Failed)
		assert.Equal(t, plots.Stat{}, p.Replay)
		assert.Equal(t, plots.Stat{}, p.ReplaySpeedup)
		assert.True(t, math.IsNaN(p.ErrorPct))
		assert.True(t, math.IsNaN(p.SpeedupDiff))
	}
	assert.Equal(t, 1, got[1].Replay.N, "each setup's own rows")
}

// The speedups of each mode are over that mode's first policy.
func TestSimVsReplayDataBaselines(t *testing.T) {
	sim, seed1, _ := replayFixtureRows()
	replay := []results.SummaryRow{seed1[1], seed1[0]}
	got := plots.SimVsReplayData(slices.Concat(sim, replay), nil)
	require.NotEmpty(t, got)
	assert.Equal(t, "rr", got[0].SimBaseline)
	assert.Equal(t, "mosaic", got[0].ReplayBaseline)
}

func TestSetupString(t *testing.T) {
	tests := []struct {
		setup plots.Setup
		want  string
	}{
		{plots.Setup{Engine: "mosaic emulate dev", Hardware: "2 x A100-80GB"}, "mosaic emulate dev, standing for 2 x A100-80GB"},
		{plots.Setup{Engine: "vLLM 0.11.0", Hardware: "4 x H100-80GB"}, "vLLM 0.11.0 on 4 x H100-80GB"},
		{plots.Setup{Engine: "Ollama 0.6.5"}, "Ollama 0.6.5"},
		{plots.Setup{Hardware: "2 x A100-80GB"}, "an unnamed engine on 2 x A100-80GB"},
		{plots.Setup{}, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.setup.String())
	}
}

// Load reads the engine and hardware from run.json; without the file or its fields they are
// empty, and a malformed run.json is an error that names it.
func TestLoadSetup(t *testing.T) {
	dirs := replayFixtureDirs(t)
	r, err := plots.Load(dirs[1])
	require.NoError(t, err)
	assert.Equal(t, replaySetup, r.Setup)
	r, err = plots.Load(dirs[0])
	require.NoError(t, err)
	assert.Equal(t, plots.Setup{}, r.Setup, "a simulated run names no engine")

	sim, _, _ := replayFixtureRows()
	r, err = plots.Load(resultsDir(t, "no-run-json", sim, ""))
	require.NoError(t, err)
	assert.Equal(t, plots.Setup{}, r.Setup)
	r, err = plots.Load(resultsDir(t, "hardware-only", sim, `{"mode": "replay", "hardware": "2 x L4"}`))
	require.NoError(t, err)
	assert.Equal(t, plots.Setup{Hardware: "2 x L4"}, r.Setup)

	for _, bad := range []string{`{"mode": "replay", "engine": `, `{"engine": 3}`, `[]`} {
		dir := resultsDir(t, "bad", sim, bad)
		_, err = plots.Load(dir)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), filepath.Join(dir, "run.json")+":", bad)
	}
}

func TestResultsLabel(t *testing.T) {
	row := func(exp, mode string) results.SummaryRow { return results.SummaryRow{Experiment: exp, Mode: mode} }
	tests := []struct {
		name    string
		summary []results.SummaryRow
		want    string
	}{
		{"one experiment", []results.SummaryRow{row("mmlu", "sim"), row("mmlu", "sim")}, "mmlu"},
		{"replayed", []results.SummaryRow{row("mmlu", "replay")}, "mmlu-replay"},
		{"several experiments", []results.SummaryRow{row("a", "sim"), row("b", "sim")}, "out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, plots.Results{Dir: "/x/out/", Summary: tt.summary}.Label())
		})
	}
}

func TestNewStatSkipsNonFinite(t *testing.T) {
	s := plots.NewStat(1, math.NaN(), 3, math.Inf(1))
	assert.Equal(t, plots.Stat{Mean: 2, Min: 1, Max: 3, Std: math.Sqrt(2), N: 2}, s)
	assert.Equal(t, plots.Stat{}, plots.NewStat(math.NaN()))
}

func TestLatencyCDFData(t *testing.T) {
	q := func(policy string, arrival, latency float64) results.QueryRow {
		return results.QueryRow{Policy: policy, ArrivalS: arrival, LatencyS: latency, EndS: arrival + latency}
	}
	assert.Nil(t, plots.LatencyCDFData([]results.QueryRow{q("a", 0, 5), q("a", 0, 7)}), "an offline batch has no latency figure")
	got := plots.LatencyCDFData([]results.QueryRow{q("b", 1, 10), q("a", 0, 4), q("b", 2, 30), q("a", 3, 2), q("b", 3, 20)})
	require.Len(t, got, 2)
	assert.Equal(t, "b", got[0].Policy, "policies in order of appearance")
	assert.Equal(t, []float64{10, 20, 30}, got[0].X)
	assert.Equal(t, []float64{1.0 / 3, 2.0 / 3, 1}, got[0].P)
	assert.Equal(t, 20.0, got[0].P50)
	assert.Equal(t, "a", got[1].Policy)
}

func TestLoadData(t *testing.T) {
	row := func(policy string, p50, p99, slo float64) results.SummaryRow {
		return results.SummaryRow{Experiment: "e", Mode: "sim", Policy: policy, MedianE2ELS: p50, P99E2ELS: p99, SLOAttainment: slo}
	}
	rows := []results.SummaryRow{row("x", 1, 2, 1), row("y", 5, 9, math.NaN()), row("x", 3, 6, 0.5), row("x", 5, 8, 0.7), row("x", 9, 9, 0.9)}
	rates := []float64{0.5, 0.5, 2, 2, 0}
	got := plots.LoadData(rows, rates)
	require.Len(t, got, 1, "y has one rate only; the offline row is left out")
	x := got[0]
	assert.Equal(t, "x", x.Policy)
	require.Len(t, x.Points, 2)
	assert.Equal(t, 0.5, x.Points[0].Rate)
	assert.Equal(t, 2.0, x.Points[1].Rate)
	assert.Equal(t, 4.0, x.Points[1].P50.Mean, "two seeds at rate 2")
	assert.Equal(t, 7.0, x.Points[1].P99.Mean)
	assert.InDelta(t, 0.6, x.Points[1].SLO.Mean, 1e-12)
}
