package plots

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/results"
)

// Results is one results folder (see docs/experiments.md, "Results folder") read into memory.
type Results struct {
	Dir     string
	Summary []results.SummaryRow
	// Calls, Queries and Workers are nil when the folder has no calls.csv, queries.csv or
	// workers.csv.
	Calls   []results.CallRow
	Queries []results.QueryRow
	Workers []results.WorkerRow
	// Rates are the arrival rates of the Summary rows of a sweep over workload.arrival_rate
	// (nil otherwise).
	Rates []float64
	// Points are the sweep points of the Summary rows: their swept keys other than the seed,
	// "arrival_rate=2 threshold=0.5" (nil outside a sweep or when only the seed is swept).
	Points []string
	// Setup is the engine and hardware a replay measured, from the folder's run.json (empty
	// for a simulated run, or without run.json).
	Setup Setup
}

// Load reads the summary.csv, calls.csv, queries.csv, workers.csv and run.json of a results
// folder. summary.csv is required; the others may be missing (the figures that need them are
// then skipped, and a missing run.json leaves Setup empty).
func Load(dir string) (Results, error) {
	r := Results{Dir: dir}
	var err error
	if r.Summary, err = results.ReadSummaryCSV(filepath.Join(dir, "summary.csv")); err != nil {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	if len(r.Summary) == 0 {
		return r, fmt.Errorf("plots: loading %s: summary.csv has no rows", dir)
	}
	if r.Calls, err = results.ReadCallsCSV(filepath.Join(dir, "calls.csv")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	if r.Workers, err = results.ReadWorkersCSV(filepath.Join(dir, "workers.csv")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	if r.Queries, err = results.ReadQueriesCSV(filepath.Join(dir, "queries.csv")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	if r.Rates, r.Points, err = readSweep(filepath.Join(dir, "summary.csv")); err != nil {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	if r.Setup, err = readSetup(filepath.Join(dir, "run.json")); err != nil {
		return r, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	return r, nil
}

// Label names the folder in figure names and titles: its experiment when summary.csv holds
// one, with "-replay" appended for a measured run, else the folder's base name.
func (r Results) Label() string {
	label := filepath.Base(filepath.Clean(r.Dir))
	if exps := distinct(r.Summary, func(s results.SummaryRow) string { return s.Experiment }); len(exps) == 1 && exps[0] != "" {
		label = exps[0]
	}
	if modes := distinct(r.Summary, func(s results.SummaryRow) string { return s.Mode }); len(modes) == 1 && modes[0] == "replay" {
		label += "-replay"
	}
	return label
}

// Stat summarises the values of one quantity over the seeds (rows) that share a key.
type Stat struct {
	Mean, Min, Max float64
	// Std is the sample standard deviation (0 for a single value).
	Std float64
	N   int
}

// NewStat summarises the finite values (NaN and infinities, such as the speedup of a stage
// that took no time, are left out); the zero Stat (N = 0) stands for no data.
func NewStat(values ...float64) Stat {
	if slices.ContainsFunc(values, func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }) {
		values = slices.DeleteFunc(slices.Clone(values), func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
	}
	if len(values) == 0 {
		return Stat{}
	}
	s := Stat{Min: math.Inf(1), Max: math.Inf(-1), N: len(values)}
	for _, v := range values {
		s.Mean += v
		s.Min = math.Min(s.Min, v)
		s.Max = math.Max(s.Max, v)
	}
	s.Mean /= float64(len(values))
	if len(values) > 1 {
		for _, v := range values {
			s.Std += (v - s.Mean) * (v - s.Mean)
		}
		s.Std = math.Sqrt(s.Std / float64(len(values)-1))
	}
	return s
}

// Spread chooses the error bars drawn where several seeds share a key.
type Spread int

const (
	// SpreadMinMax draws error bars from the smallest to the largest value.
	SpreadMinMax Spread = iota
	// SpreadStd draws error bars one sample standard deviation either side of the mean.
	SpreadStd
)

// Range returns the ends of s's error bar under spread.
func (s Stat) Range(spread Spread) (lo, hi float64) {
	if spread == SpreadStd {
		return s.Mean - s.Std, s.Mean + s.Std
	}
	return s.Min, s.Max
}

// Group is an experiment run in one mode ("sim" or "replay"), and in the speedup figure at
// one point of a sweep (its swept keys other than the seed, "" outside a sweep).
type Group struct {
	Experiment, Mode string
	Point            string
}

func (g Group) String() string {
	s := g.Experiment
	if g.Mode != "" && g.Mode != "sim" {
		s += " (" + g.Mode + ")"
	}
	if g.Point != "" {
		s += " " + g.Point
	}
	return s
}

// groupOf is a row's experiment and mode.
func groupOf(r results.SummaryRow) Group { return Group{Experiment: r.Experiment, Mode: r.Mode} }

// Stages of the speedup figure, in the order of SpeedupTable.Cells.
const (
	StageExpert = iota
	StageAggregator
	StageEndToEnd
	numStages
)

// StageNames names the stages of SpeedupTable.Cells.
var StageNames = [numStages]string{"expert", "aggregator", "end-to-end"}

// SpeedupTable is the data of the speedup figure.
type SpeedupTable struct {
	// Groups and Policies in the order they first appear in the rows.
	Groups   []Group
	Policies []string
	// Baseline is the first policy of every group, or "" when the groups disagree.
	Baseline string
	// Cells[stage][group][policy] summarises the speedups of that stage over the seeds of
	// (experiment, mode, policy); N = 0 where the group did not run the policy.
	Cells [numStages][][]Stat
}

// SpeedupData tabulates the per-stage speedups of summary rows by (experiment, mode, sweep
// point) and policy: only the seeds of one point are pooled. points[i] is rows[i]'s sweep
// point (Results.Points); nil when no row comes from a sweep.
func SpeedupData(rows []results.SummaryRow, points []string) SpeedupTable {
	var t SpeedupTable
	group := func(i int) Group {
		g := groupOf(rows[i])
		if i < len(points) {
			g.Point = points[i]
		}
		return g
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	t.Groups = distinct(idx, group)
	t.Policies = distinct(rows, func(r results.SummaryRow) string { return r.Policy })
	for i, g := range t.Groups {
		first := ""
		for j, r := range rows {
			if group(j) == g {
				first = r.Policy
				break
			}
		}
		if i == 0 {
			t.Baseline = first
		} else if first != t.Baseline {
			t.Baseline = ""
		}
	}
	for s := range numStages {
		t.Cells[s] = make([][]Stat, len(t.Groups))
		for gi, g := range t.Groups {
			t.Cells[s][gi] = make([]Stat, len(t.Policies))
			for pi, p := range t.Policies {
				var vs []float64
				for j, r := range rows {
					if group(j) == g && r.Policy == p {
						vs = append(vs, [numStages]float64{r.SpeedupExpert, r.SpeedupAggregator, r.SpeedupE2E}[s])
					}
				}
				t.Cells[s][gi][pi] = NewStat(vs...)
			}
		}
	}
	return t
}

// Timeline is the data of the GPU timeline figure: each policy's workers as lanes of intervals.
type Timeline struct {
	Policies []TimelinePolicy // in the order they first appear
	// Models are the models the intervals name, sorted.
	Models []string
	// End is the latest end of any interval, s.
	End float64
}

// TimelinePolicy is the lanes of one policy.
type TimelinePolicy struct {
	Policy string
	Lanes  []TimelineLane // by worker
	// End is the policy's makespan, the latest end of its intervals, s.
	End float64
}

// TimelineLane is one worker's intervals in time order and the seconds it spent in each kind.
type TimelineLane struct {
	Worker           int
	Intervals        []results.WorkerRow
	Busy, Load, Idle float64
}

// TimelineData groups worker intervals by policy and worker.
func TimelineData(rows []results.WorkerRow) Timeline {
	var t Timeline
	for _, p := range distinct(rows, func(r results.WorkerRow) string { return r.Policy }) {
		tp := TimelinePolicy{Policy: p}
		lanes := map[int]*TimelineLane{}
		for _, r := range rows {
			if r.Policy != p {
				continue
			}
			l := lanes[r.Worker]
			if l == nil {
				l = &TimelineLane{Worker: r.Worker}
				lanes[r.Worker] = l
			}
			l.Intervals = append(l.Intervals, r)
			d := r.EndS - r.StartS
			switch r.Kind {
			case "busy":
				l.Busy += d
			case "load":
				l.Load += d
			default:
				l.Idle += d
			}
			tp.End = math.Max(tp.End, r.EndS)
		}
		for _, l := range lanes {
			slices.SortStableFunc(l.Intervals, func(a, b results.WorkerRow) int { return cmp.Compare(a.StartS, b.StartS) })
			tp.Lanes = append(tp.Lanes, *l)
		}
		slices.SortFunc(tp.Lanes, func(a, b TimelineLane) int { return cmp.Compare(a.Worker, b.Worker) })
		t.End = math.Max(t.End, tp.End)
		t.Policies = append(t.Policies, tp)
	}
	for _, r := range rows {
		if r.Model != "" && !slices.Contains(t.Models, r.Model) {
			t.Models = append(t.Models, r.Model)
		}
	}
	slices.Sort(t.Models)
	return t
}

// CDF returns the empirical distribution function of values: the distinct values in
// increasing order and, for each, the fraction of values at or below it. NaNs are dropped.
func CDF(values []float64) (x, p []float64) {
	v := slices.DeleteFunc(slices.Clone(values), math.IsNaN)
	slices.Sort(v)
	for i, f := range v {
		if i+1 < len(v) && v[i+1] == f {
			continue
		}
		x = append(x, f)
		p = append(p, float64(i+1)/float64(len(v)))
	}
	return x, p
}

// LengthCDF is the output-length distribution of one model in one role and layer.
type LengthCDF struct {
	Model string
	// Role is the calls' role ("expert", "aggregator", ...) and Layer their layer.
	Role  string
	Layer int
	// N is the number of calls; X (tokens) and P are their CDF.
	N    int
	X, P []float64
	// Median is the median output length, tokens.
	Median float64
}

// OutputLengthData returns the output-length CDF of each (model, role, layer) in calls,
// ordered by model, then layer, then role. Tool steps have no output and are left out. Every call of the workload counts once: the rows of the several
// policies of a run name the same calls, so a (query, call) pair is taken from its first row.
// Calls with no output tokens are dropped, because the figure's axis is logarithmic.
func OutputLengthData(calls []results.CallRow) []LengthCDF {
	type key struct {
		model, role string
		layer       int
	}
	lengths := map[key][]float64{}
	for _, c := range uniqueCalls(calls) {
		if c.OutputTokens > 0 && c.Model != "" {
			k := key{c.Model, c.Role, c.Layer}
			lengths[k] = append(lengths[k], float64(c.OutputTokens))
		}
	}
	var out []LengthCDF
	for k, v := range lengths {
		x, p := CDF(v)
		out = append(out, LengthCDF{Model: k.model, Role: k.role, Layer: k.layer, N: len(v), X: x, P: p, Median: quantile(v, 0.5)})
	}
	slices.SortFunc(out, func(a, b LengthCDF) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Role, b.Role))
	})
	return out
}

// ModelCount is the number of calls to one model.
type ModelCount struct {
	Model string
	Calls int
}

// Demand is the data of the expert demand figure.
type Demand struct {
	// Models in decreasing order of calls (ties by name).
	Models []ModelCount
	// Ratio is the most called expert's count over the least called one's.
	Ratio float64
}

// DemandData counts the first-layer calls (a MoA query's experts) per model. Every call of the
// workload counts once (see OutputLengthData).
func DemandData(calls []results.CallRow) Demand {
	counts := map[string]int{}
	for _, c := range uniqueCalls(calls) {
		if c.Layer == 0 && c.Model != "" {
			counts[c.Model]++
		}
	}
	var d Demand
	for m, n := range counts {
		d.Models = append(d.Models, ModelCount{m, n})
	}
	slices.SortFunc(d.Models, func(a, b ModelCount) int { return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Model, b.Model)) })
	if len(d.Models) > 0 {
		d.Ratio = float64(d.Models[0].Calls) / float64(d.Models[len(d.Models)-1].Calls)
	}
	return d
}

// TradeoffPoint is one threshold of a TradeoffSeries.
type TradeoffPoint struct {
	// Threshold is the aggregation threshold T; +Inf stands for never skipping.
	Threshold float64
	// SkipRate (aggregator_skipped / queries) and Accuracy, both fractions, over the rows
	// (policies and seeds) that ran with this threshold.
	SkipRate, Accuracy Stat
}

// TradeoffSeries is one experiment's threshold trade-off.
type TradeoffSeries struct {
	Group
	Points []TradeoffPoint // by increasing threshold, +Inf last
}

// TradeoffData returns, per (experiment, mode), the skip rate and accuracy at each threshold
// of the rows whose policy belongs to family (its name, or its name followed by "+" or "-",
// as in "mosaic-t2/3"); an empty family takes every row. Rows with a NaN threshold or no
// queries are left out.
func TradeoffData(rows []results.SummaryRow, family string) []TradeoffSeries {
	var kept []results.SummaryRow
	for _, r := range rows {
		if InFamily(r.Policy, family) && !math.IsNaN(r.Threshold) && r.Queries > 0 {
			kept = append(kept, r)
		}
	}
	var out []TradeoffSeries
	for _, g := range distinct(kept, groupOf) {
		s := TradeoffSeries{Group: g}
		var ts []float64
		for _, r := range kept {
			if groupOf(r) == g && !slices.Contains(ts, r.Threshold) {
				ts = append(ts, r.Threshold)
			}
		}
		slices.Sort(ts)
		for _, th := range ts {
			var skip, acc []float64
			for _, r := range kept {
				if groupOf(r) == g && r.Threshold == th {
					skip = append(skip, float64(r.AggregatorSkipped)/float64(r.Queries))
					acc = append(acc, r.Accuracy)
				}
			}
			s.Points = append(s.Points, TradeoffPoint{Threshold: th, SkipRate: NewStat(skip...), Accuracy: NewStat(acc...)})
		}
		out = append(out, s)
	}
	return out
}

// InFamily reports whether policy belongs to family: it is the family's name, or the name
// followed by "+" or "-" and a variant ("round-robin+skip", "mosaic-t2/3"). Every policy
// belongs to the empty family.
func InFamily(policy, family string) bool {
	if family == "" || policy == family {
		return true
	}
	rest, ok := strings.CutPrefix(policy, family)
	return ok && (strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "-"))
}

// Setup is what a replay measured on, as its folder's run.json names it.
type Setup struct {
	// Engine names the inference servers measured, with their versions ("mosaic emulate dev",
	// "vLLM 0.11.0", "Ollama 0.6.5"), and Hardware the experiment's cluster they served
	// ("2 x A100-80GB"). Either is empty where run.json does not say (a simulated run, a
	// folder written before run.json named them, or one without run.json).
	Engine, Hardware string
}

// String describes the setup as it follows "measured on": "mosaic emulate dev, standing for
// 2 x A100-80GB" (the emulator imitates the cluster), "vLLM 0.11.0 on 2 x A100-80GB", "vLLM
// 0.11.0", "an unnamed engine on 2 x A100-80GB", or "" when nothing is known.
func (s Setup) String() string {
	switch {
	case s.Engine == "" && s.Hardware == "":
		return ""
	case s.Hardware == "":
		return s.Engine
	case s.Engine == "":
		return "an unnamed engine on " + s.Hardware
	case strings.HasPrefix(s.Engine, "mosaic emulate"):
		return s.Engine + ", standing for " + s.Hardware
	}
	return s.Engine + " on " + s.Hardware
}

// readSetup reads the engine and hardware of a results folder's run.json: the zero Setup when
// the file or its fields are missing, an error naming the file when it is no JSON object.
func readSetup(path string) (Setup, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Setup{}, nil
	}
	if err != nil {
		return Setup{}, err
	}
	var info struct {
		Engine   string `json:"engine"`
		Hardware string `json:"hardware"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return Setup{}, fmt.Errorf("%s: %w", path, err)
	}
	return Setup{Engine: strings.TrimSpace(info.Engine), Hardware: strings.TrimSpace(info.Hardware)}, nil
}

// SimVsReplayPair is one policy's end-to-end makespan and speedup, simulated and measured on
// one setup.
type SimVsReplayPair struct {
	Experiment, Policy string
	// Setup is what the replay rows were measured on (rows replayed on several setups make a
	// pair per setup).
	Setup Setup
	// Sim and Replay summarise e2e_s (s) over the seeds of each mode, leaving out the rows
	// whose status is failed; Replay.N is 0 when every replay row failed.
	Sim, Replay Stat
	// ErrorPct is the simulator's error, (Sim.Mean - Replay.Mean) / Replay.Mean in percent
	// (NaN without a measurement).
	ErrorPct float64
	// SimSpeedup and ReplaySpeedup summarise speedup_e2e over the same rows: the end-to-end
	// speedup over SimBaseline and ReplayBaseline, the first policy of the experiment's rows
	// in each mode (as a run computes it). N is 0 where no speedup was computed (a failed
	// baseline, for one).
	SimSpeedup, ReplaySpeedup   Stat
	SimBaseline, ReplayBaseline string
	// SpeedupDiff is the measured speedup less the simulated one, ReplaySpeedup.Mean -
	// SimSpeedup.Mean (NaN when either is missing).
	SpeedupDiff float64
	// Failed and SimFailed count the replay and simulated rows left out because their status
	// is failed: calls failed, so their makespan covers part of the workload.
	Failed, SimFailed int
	// Partial counts the replay rows behind Replay whose status is partial: their figures are
	// over the queries that completed under every policy of their run, not the whole
	// workload.
	Partial int
}

// SimVsReplayData pairs the e2e makespans and speedups of the (experiment, policy) keys that
// have both mode=sim and mode=replay rows, in the order the keys first appear, one pair per
// setup the key's replay rows were measured on. setups[i] is the setup of rows[i]'s folder
// (Results.Setup); nil, or shorter than rows, leaves the rest unknown. Rows whose status is
// failed count in the pair's Failed or SimFailed and are left out of its figures.
func SimVsReplayData(rows []results.SummaryRow, setups []Setup) []SimVsReplayPair {
	type key struct{ exp, policy string }
	setupOf := func(i int) Setup {
		if i < len(setups) {
			return setups[i]
		}
		return Setup{}
	}
	type expMode struct{ exp, mode string }
	baselines := map[expMode]string{}
	for _, r := range rows {
		if k := (expMode{r.Experiment, r.Mode}); baselines[k] == "" {
			baselines[k] = r.Policy
		}
	}
	var out []SimVsReplayPair
	for _, k := range distinct(rows, func(r results.SummaryRow) key { return key{r.Experiment, r.Policy} }) {
		var sim, simSpeedup []float64
		simFailed := 0
		var replayIdx []int
		for i, r := range rows {
			if (key{r.Experiment, r.Policy}) != k {
				continue
			}
			switch {
			case r.Mode == "sim" && r.Status == results.StatusFailed:
				simFailed++
			case r.Mode == "sim":
				sim = append(sim, r.E2ES)
				simSpeedup = append(simSpeedup, r.SpeedupE2E)
			case r.Mode == "replay":
				replayIdx = append(replayIdx, i)
			}
		}
		if sim == nil && simFailed == 0 || len(replayIdx) == 0 {
			continue
		}
		for _, s := range distinct(replayIdx, setupOf) {
			p := SimVsReplayPair{Experiment: k.exp, Policy: k.policy, Setup: s,
				Sim: NewStat(sim...), SimSpeedup: NewStat(simSpeedup...), SimFailed: simFailed,
				SimBaseline: baselines[expMode{k.exp, "sim"}], ReplayBaseline: baselines[expMode{k.exp, "replay"}]}
			var replay, replaySpeedup []float64
			for _, i := range replayIdx {
				r := rows[i]
				switch {
				case setupOf(i) != s:
				case r.Status == results.StatusFailed:
					p.Failed++
				default:
					replay = append(replay, r.E2ES)
					replaySpeedup = append(replaySpeedup, r.SpeedupE2E)
					if r.Status == results.StatusPartial {
						p.Partial++
					}
				}
			}
			p.Replay, p.ReplaySpeedup = NewStat(replay...), NewStat(replaySpeedup...)
			p.ErrorPct, p.SpeedupDiff = math.NaN(), math.NaN()
			if p.Replay.N > 0 && p.Sim.N > 0 {
				p.ErrorPct = (p.Sim.Mean - p.Replay.Mean) / p.Replay.Mean * 100
			}
			if p.ReplaySpeedup.N > 0 && p.SimSpeedup.N > 0 {
				p.SpeedupDiff = p.ReplaySpeedup.Mean - p.SimSpeedup.Mean
			}
			out = append(out, p)
		}
	}
	return out
}

// uniqueCalls returns the first row of every (query, call) pair.
func uniqueCalls(calls []results.CallRow) []results.CallRow {
	type key struct{ query, call int }
	seen := map[key]bool{}
	var out []results.CallRow
	for _, c := range calls {
		k := key{c.Query, c.Call}
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

// quantile returns the q-quantile of values by linear interpolation between order statistics.
func quantile(values []float64, q float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Clone(values)
	slices.Sort(v)
	pos := q * float64(len(v)-1)
	i := int(pos)
	if i+1 >= len(v) {
		return v[len(v)-1]
	}
	return v[i] + (pos-float64(i))*(v[i+1]-v[i])
}

// distinct returns the keys of rows in the order they first appear.
func distinct[R any, K comparable](rows []R, key func(R) K) []K {
	seen := map[K]bool{}
	var out []K
	for _, r := range rows {
		k := key(r)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
