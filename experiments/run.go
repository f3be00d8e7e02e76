package experiments

import (
	"context"
	"fmt"
	"io"
	"iter"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/internal/snakejson"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// DefaultUnloadTime is the time to stop an engine and free its memory.
const DefaultUnloadTime = time.Second

// DefaultRetries is how many times replay sends a call again after a retryable failure
// unless [replay] retries says otherwise.
const DefaultRetries = 3

// Run is the outcome of comparing the policies of a MoA experiment.
type Run struct {
	Experiment *Resolved
	Mode       string
	Results    []*policies.Result // in policy order
	Summaries  []results.SummaryRow
	// Policies are the policy values that ran, in order (they may carry plans).
	Policies []policies.Policy
	// Replayed says how each policy was replayed (replay only), Engine names the servers
	// measured and Hardware the cluster they stand for.
	Replayed         []PolicyReplay
	Engine, Hardware string
	// queries is the workload's number of queries; written says calls.csv, queries.csv and
	// workers.csv went into the results folder as the run went (a streamed run: Sim.Run).
	queries int
	written bool
	// shared holds, for a point of a sweep, each policy's run where it was shared, with its
	// rows formatted once per label (sweepruns.go); nil elsewhere.
	shared []*sharedRun
}

// Queries is the number of queries of the workload the policies ran.
func (run *Run) Queries() int {
	if run.queries > 0 {
		return run.queries
	}
	return len(run.Experiment.Graph.Workload.Queries)
}

// Progress reports a policy's progress: calls done of the total known so far.
type Progress func(policy string, done, total int)

// ModelInfos returns what policies may know about the experiment's models: each carries its
// cost on every worker (ModelInfo.Workers), its group's.
func (r *Resolved) ModelInfos() []policies.ModelInfo {
	out := make([]policies.ModelInfo, 0, len(r.Models))
	for _, m := range r.Models {
		info := policies.ModelInfo{Name: m.Name, Arch: m.Arch, Cost: m.Cost, Engine: m.Engine,
			Output: m.Output, Memory: m.Memory, LoadTime: m.Cost.LoadTime(), Workers: make([]policies.WorkerCost, r.NumWorkers())}
		for w := range info.Workers {
			gm := r.On(m, w)
			wc := policies.WorkerCost{Hardware: r.Group(w).Hardware(), Unfit: gm.Unfit}
			if gm.Cost != nil {
				wc.Cost, wc.Engine, wc.LoadTime = gm.Cost, gm.Engine, gm.Cost.LoadTime()
			}
			info.Workers[w] = wc
		}
		out = append(out, info)
	}
	return out
}

// clusterConfig is the simulated cluster of the experiment: each worker runs a model with its
// group's cost model and engine (the workers of a group share one setup).
func (r *Resolved) clusterConfig() simulated.Config {
	cfg := simulated.Config{UnloadTime: DefaultUnloadTime}
	for gi, g := range r.Groups {
		setup := simulated.WorkerSetup{}
		for _, rm := range r.Models {
			gm := rm.OnGroup[gi]
			setup[rm.Name] = simulated.ModelSetup{Cost: gm.Cost, Engine: gm.Engine, Unfit: gm.Unfit}
		}
		cfg.Workers = append(cfg.Workers, simulated.Identical(g.Count, setup)...)
	}
	return cfg
}

// Simulate runs every policy of the experiment on the same workload in the simulator, in
// parallel on the available cores, and computes the summaries (speedups over the first policy).
func (r *Resolved) Simulate(ctx context.Context, progress Progress) (*Run, error) {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	return r.simulate(func(_ int, p ResolvedPolicy) (*policies.Result, policies.Policy, error) {
		sem <- struct{}{}
		defer func() { <-sem }()
		return r.simulatePolicy(ctx, p, progress)
	}, nil)
}

// simulate runs every policy through run (given its index and the policy), each on its own
// goroutine (run bounds how many simulate at once), and computes the summaries, with the
// headline figures of policy i's result from summary(i, result) (nil: Result.Summary).
func (r *Resolved) simulate(run func(int, ResolvedPolicy) (*policies.Result, policies.Policy, error), summary func(int, *policies.Result) policies.Summary) (*Run, error) {
	m := r.Graph
	if m == nil {
		return nil, fmt.Errorf("%s: not a workload of call graphs (workload.kind = %q)", r.File(), r.Workload.Kind)
	}
	res := make([]*policies.Result, len(m.Policies))
	pols := make([]policies.Policy, len(m.Policies))
	errs := make([]error, len(m.Policies))
	var wg sync.WaitGroup
	for i, p := range m.Policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], pols[i], errs[i] = run(i, p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	out := &Run{Experiment: r, Mode: "sim", Results: res, Policies: pols}
	out.Summaries = summarize(r.Name, out.Mode, uint64(r.Seed), m.SLO, res, summary)
	if err := r.addSteady(out.Summaries, res); err != nil {
		return nil, err
	}
	return out, nil
}

// simulatePolicy runs one policy on the workload in a simulated cluster.
func (r *Resolved) simulatePolicy(ctx context.Context, p ResolvedPolicy, progress Progress) (*policies.Result, policies.Policy, error) {
	cl, err := simulated.New(r.clusterConfig())
	if err != nil {
		return nil, nil, err
	}
	var hooks RunHooks
	if progress != nil {
		hooks.Progress = func(done, total int) { progress(p.Label, done, total) }
	}
	return r.RunPolicy(ctx, cl, p, hooks)
}

// RunHooks are what a caller of RunPolicy hears as the run goes: each finished call
// (CallDone: a replay writes its row) and the calls done of the total (Progress).
type RunHooks struct {
	CallDone func(policies.CallRecord)
	Progress func(done, total int)
}

// RunPolicy runs one of the experiment's policies on the workload over a Backend: the one run
// path of the simulator (a simulated cluster) and of replay (servers), which differ only in
// the Backend they pass. The result is labelled with the policy's label.
func (r *Resolved) RunPolicy(ctx context.Context, be policies.Backend, p ResolvedPolicy, hooks RunHooks) (*policies.Result, policies.Policy, error) {
	pol := p.New()
	d, err := policies.NewDriver(be, pol, p.Rule, r.Graph.Workload, r.ModelInfos(), r.NumWorkers())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Label, err)
	}
	d.SetEarlyExit(p.Exit)
	d.SetOverlap(p.Overlap)
	d.CallDone, d.Progress = hooks.CallDone, hooks.Progress
	res, err := d.Run(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Label, err)
	}
	res.Policy = p.Label
	return res, pol, nil
}

// Summarize turns results into summary rows with speedups over the first result; slo sets
// the attainment and goodput columns (NaN when it bounds nothing).
func Summarize(experiment, mode string, seed uint64, slo policies.SLO, measured []*policies.Result) []results.SummaryRow {
	return summarize(experiment, mode, seed, slo, measured, nil)
}

// summarize is Summarize with result i's headline figures from summary(i, result) (nil:
// Result.Summary).
func summarize(experiment, mode string, seed uint64, slo policies.SLO, measured []*policies.Result, summary func(int, *policies.Result) policies.Summary) []results.SummaryRow {
	rows := make([]results.SummaryRow, 0, len(measured))
	for i, res := range measured {
		var s policies.Summary
		if summary != nil {
			s = summary(i, res)
		} else {
			s = res.Summary()
		}
		rows = append(rows, summaryRowOf(experiment, mode, seed, slo, res, s))
	}
	results.SetSpeedups(rows)
	return rows
}

// summaryRow is the summary.csv row of one result, its speedups left for results.SetSpeedups.
func summaryRow(experiment, mode string, seed uint64, slo policies.SLO, res *policies.Result) results.SummaryRow {
	return summaryRowOf(experiment, mode, seed, slo, res, res.Summary())
}

// summaryRowOf is summaryRow with the result's headline figures s (res.Summary()).
func summaryRowOf(experiment, mode string, seed uint64, slo policies.SLO, res *policies.Result, s policies.Summary) results.SummaryRow {
	row := results.SummaryRow{
		Experiment: experiment, Mode: mode, Policy: res.Policy, Seed: seed, Rule: res.Rule, Threshold: res.Threshold,
		Queries: s.Queries, ExpertCalls: s.ExpertCalls, AggregatorCalls: s.AggregatorCalls,
		AggregatorSkipped: s.AggregatorSkipped, ExpertStageS: s.ExpertStage.Seconds(),
		AggregatorStageS: s.AggregatorStage.Seconds(), E2ES: s.E2E.Seconds(),
		Accuracy: s.Accuracy, AccuracyDeltaPP: s.AccuracyDeltaPP, GPUBusyFrac: s.GPUBusyFrac,
		ModelLoads: s.ModelLoads, FailedCalls: s.FailedCalls, SkippedCalls: s.SkippedCalls, CancelledCalls: s.CancelledCalls,
		MeanE2ELS: s.Latency.Mean, MedianE2ELS: s.Latency.P50, P90E2ELS: s.Latency.P90, P99E2ELS: s.Latency.P99,
		MeanTTFTS: s.TTFT.Mean, MedianTTFTS: s.TTFT.P50, P90TTFTS: s.TTFT.P90, P99TTFTS: s.TTFT.P99,
		MeanQueueS: s.Queue.Mean, P99QueueS: s.Queue.P99, RequestThroughput: s.Throughput,
		SLOAttainment: math.NaN(), RequestGoodput: math.NaN(), Status: results.StatusOK, Runs: 1,
	}
	if slo.Set() {
		row.SLOAttainment, row.RequestGoodput = res.Attainment(slo)
	}
	row.Retries = s.Retries
	if s.FailedCalls > 0 {
		// Its figures describe a part of the workload: none is a result.
		row.Status = results.StatusFailed
		row.Accuracy, row.AccuracyDeltaPP = math.NaN(), math.NaN()
	}
	return row
}

// CallRows returns the rows of calls.csv for every result, in policy then call order.
func CallRows(measured []*policies.Result) []results.CallRow {
	return slices.Collect(callRowSeq(measured))
}

// callRowSeq yields CallRows' rows one at a time.
func callRowSeq(measured []*policies.Result) iter.Seq[results.CallRow] {
	return func(yield func(results.CallRow) bool) {
		for _, res := range measured {
			for _, c := range res.Calls {
				if !yield(CallRow(res.Policy, c)) {
					return
				}
			}
		}
	}
}

// CallRow is the calls.csv row of one call record.
func CallRow(policy string, c policies.CallRecord) results.CallRow {
	return results.CallRow{Policy: policy, Query: c.Call.Query, Call: c.Call.ID, Role: c.Call.Role, Layer: c.Call.Layer,
		Model: c.Call.Model, Worker: int(c.Worker), InputTokens: c.Call.InputTokens, OutputTokens: c.Produced,
		ReadyS: c.Ready.Seconds(), StartS: c.Timing.Started.Seconds(), FirstTokenS: c.Timing.FirstToken.Seconds(),
		EndS: c.Timing.End.Seconds(), Preemptions: c.Timing.Preemptions, Status: c.Status,
		Attempts: max(1, c.Attempts), RetryLostS: c.RetryLost.Seconds(), Error: c.Err}
}

// QueryRows returns the rows of queries.csv for every result, in policy then query order.
func QueryRows(wl *traces.Workload, slo policies.SLO, measured []*policies.Result) []results.QueryRow {
	return slices.Collect(queryRowSeq(wl, slo, measured))
}

// queryRowSeq yields QueryRows' rows one at a time.
func queryRowSeq(wl *traces.Workload, slo policies.SLO, measured []*policies.Result) iter.Seq[results.QueryRow] {
	return func(yield func(results.QueryRow) bool) {
		for _, res := range measured {
			calls := make([]int, len(res.Queries))
			for _, c := range res.Calls {
				calls[c.Call.Query]++
			}
			for qi, q := range res.Queries {
				if !yield(queryRow(res.Policy, &wl.Queries[qi], q, calls[qi], slo)) {
					return
				}
			}
		}
	}
}

// queryRow is the queries.csv row of query wq under a policy: how it ended, o, with calls of
// its calls run.
func queryRow(policy string, wq *traces.Query, q policies.QueryOutcome, calls int, slo policies.SLO) results.QueryRow {
	row := results.QueryRow{Policy: policy, Query: wq.ID, Dataset: wq.Dataset, Category: wq.Category,
		ArrivalS: q.Arrival.Seconds(), FirstTokenS: q.FirstToken.Seconds(), EndS: q.End.Seconds(),
		LatencyS: q.Latency().Seconds(), TTFTS: q.TTFT().Seconds(), QueueS: q.Queue.Seconds(),
		Calls: calls, SkippedCalls: q.SkippedCalls, FinalSkipped: q.Skipped, Answer: q.Final, Gold: q.Gold,
		Correct: -1, SLOMet: -1}
	if q.Gold != "" {
		row.Correct = b2i(q.Final == q.Gold)
	}
	if slo.Set() {
		row.SLOMet = b2i(slo.Met(q))
	}
	return row
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WorkerRows returns the rows of workers.csv for every result.
func WorkerRows(measured []*policies.Result) []results.WorkerRow {
	var rows []results.WorkerRow
	for _, res := range measured {
		for _, iv := range res.WorkerIntervals() {
			rows = append(rows, workerRow(res.Policy, iv))
		}
	}
	return rows
}

// workerRow is the workers.csv row of an interval of a policy's run.
func workerRow(policy string, iv policies.Interval) results.WorkerRow {
	return results.WorkerRow{Policy: policy, Worker: int(iv.Worker), Kind: iv.Kind, Model: iv.Model,
		StartS: iv.Start.Seconds(), EndS: iv.End.Seconds(), MeanBatch: iv.MeanBatch}
}

// RunInfo is run.json: everything needed to reproduce the run. It holds nothing that changes
// from one invocation to the next, so the files of two runs with the same seed are identical;
// the host and the wall time go to host.json.
type RunInfo struct {
	Experiment *Experiment `json:"experiment"`
	File       string      `json:"file"`
	Seed       uint64      `json:"seed"`
	Mode       string      `json:"mode"`
	Version    string      `json:"version"`
	Commit     string      `json:"commit"`
	Profile    string      `json:"profile"`
	Policies   []string    `json:"policies"`
	// Fingerprint identifies the resolved experiment (replay's --resume checks it).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Resolved is what the file resolved to: the GPU, its cost-model coefficients and each
	// model's engine, with every default filled in.
	Resolved *ResolvedInfo `json:"resolved,omitempty"`
	// Plans are the stage plans of the planning policies (mosaic, pipeline): their bound, gap
	// and how they were found.
	Plans []PlanInfo `json:"plans,omitempty"`
}

// ResolvedInfo is the resolved cluster of run.json: the GPU and its coefficients, or, for a
// mixed cluster, each worker group's.
type ResolvedInfo struct {
	GPU          *sim.GPU          `json:"gpu,omitempty"`
	Coefficients *sim.Coefficients `json:"coefficients,omitempty"`
	// Groups are a mixed cluster's worker groups, in worker order.
	Groups []ResolvedGroupInfo `json:"groups,omitempty"`
	Models []ResolvedModelInfo `json:"models"`
	// WorkloadFit is what the workload generator solved rather than read: the calibrated vote
	// model, the aggregator's fitted answers, the experts' routing strengths.
	WorkloadFit *traces.Fitted `json:"workload_fit,omitempty"`
}

// ResolvedGroupInfo is one worker group of a mixed cluster in run.json.
type ResolvedGroupInfo struct {
	GPU          sim.GPU          `json:"gpu"`
	TP           int              `json:"tp"`
	Workers      []int            `json:"workers"`
	Coefficients sim.Coefficients `json:"coefficients"`
}

// ResolvedModelInfo is one resolved model of run.json. On a mixed cluster Engine and LoadTimeS
// are the first group's that runs the model, and Groups holds every group's.
type ResolvedModelInfo struct {
	Name      string                   `json:"name"`
	Arch      string                   `json:"arch"`
	Engine    sim.EngineConfig         `json:"engine"`
	Memory    float64                  `json:"memory_fraction"`
	LoadTimeS float64                  `json:"load_time_s"`
	Output    string                   `json:"output_tokens,omitempty"`
	Groups    []ResolvedModelGroupInfo `json:"groups,omitempty"`
}

// ResolvedModelGroupInfo is a model on one worker group of a mixed cluster in run.json.
type ResolvedModelGroupInfo struct {
	Group     int               `json:"group"`
	Engine    *sim.EngineConfig `json:"engine,omitempty"`
	LoadTimeS float64           `json:"load_time_s,omitempty"`
	Unfit     string            `json:"unfit,omitempty"`
}

// resolvedInfo describes what r resolved to.
func (r *Resolved) resolvedInfo() *ResolvedInfo {
	ri := &ResolvedInfo{}
	if r.Mixed() {
		for _, g := range r.Groups {
			gi := ResolvedGroupInfo{GPU: *g.GPU, TP: g.TP, Coefficients: r.Profile.For(g.GPU)}
			for w := g.First; w < g.First+g.Count; w++ {
				gi.Workers = append(gi.Workers, w)
			}
			ri.Groups = append(ri.Groups, gi)
		}
	} else {
		coef := r.Profile.For(r.GPU)
		ri.GPU, ri.Coefficients = r.GPU, &coef
	}
	for _, m := range r.Models {
		mi := ResolvedModelInfo{Name: m.Name, Arch: m.Arch.ID, Engine: m.Engine, Memory: m.Memory, LoadTimeS: m.Cost.LoadTime().Seconds()}
		if m.Output != nil {
			mi.Output = m.Output.String()
		}
		if r.Mixed() {
			for gi, gm := range m.OnGroup {
				mg := ResolvedModelGroupInfo{Group: gi, Unfit: gm.Unfit}
				if gm.Cost != nil {
					eng := gm.Engine
					mg.Engine, mg.LoadTimeS = &eng, gm.Cost.LoadTime().Seconds()
				}
				mi.Groups = append(mi.Groups, mg)
			}
		}
		ri.Models = append(ri.Models, mi)
	}
	if r.Graph != nil && r.Graph.Workload != nil {
		ri.WorkloadFit = r.Graph.Workload.Fitted
	}
	return ri
}

// HostInfo is host.json: where and how long the run took.
type HostInfo struct {
	Host      string  `json:"host"`
	GoVersion string  `json:"go_version"`
	CPUs      int     `json:"cpus"`
	Started   string  `json:"started"`
	WallS     float64 `json:"wall_s"`
}

// WriteDir writes summary.csv, calls.csv, queries.csv, workers.csv, run.json and host.json into
// dir, holding its lock.
func (run *Run) WriteDir(dir string, info RunInfo, host HostInfo) error {
	d, err := results.Open(dir, "")
	if err != nil {
		return err
	}
	defer d.Close()
	return run.WriteInto(d, info, host)
}

// WriteInto writes the run's files into a results folder this process holds open (and
// locked) already: a command that writes results takes the lock before it runs, so that a
// second writer is refused before either has spent anything.
func (run *Run) WriteInto(d *results.Dir, info RunInfo, host HostInfo) error {
	info = run.Experiment.runInfo(run.Mode, info)
	info.Plans = run.PlanInfos()
	g := run.Experiment.Graph
	if err := results.Write(d, results.Summary, slices.Values(run.Summaries)); err != nil {
		return err
	}
	if !run.written && run.shared != nil {
		if err := run.writeShared(d); err != nil {
			return err
		}
	} else if !run.written {
		if err := results.Write(d, results.Calls, callRowSeq(run.Results)); err != nil {
			return err
		}
		if err := results.Write(d, results.Queries, queryRowSeq(g.Workload, g.SLO, run.Results)); err != nil {
			return err
		}
		if err := results.Write(d, results.Workers, slices.Values(WorkerRows(run.Results))); err != nil {
			return err
		}
	}
	if err := writeJSON(d, "run.json", info); err != nil {
		return err
	}
	return writeJSON(d, "host.json", host)
}

// runInfo completes info (the tool's version and commit) with what the run is: its mode, the
// experiment as given and as resolved, its file, seed, profile and policies. Simulated runs
// and replays describe themselves through it alike.
func (r *Resolved) runInfo(mode string, info RunInfo) RunInfo {
	info.Mode, info.Experiment, info.File, info.Seed = mode, r.Experiment, r.File(), uint64(r.Seed)
	info.Profile = r.Profile.Source
	info.Resolved = r.resolvedInfo()
	info.Policies = nil
	if r.Graph != nil {
		for _, p := range r.Graph.Policies {
			info.Policies = append(info.Policies, p.Label)
		}
	}
	return info
}

// writeJSON writes v into a file of the folder with snake_case keys, as run.json and
// host.json are written.
func writeJSON(d *results.Dir, name string, v any) error {
	data, err := snakejson.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return d.WriteBytes(name, append(data, '\n'))
}

// WriteTable prints the comparison as an aligned table. A replay's says what was measured (the
// engine, its version and the hardware it stands for) and, below the table, why a policy's
// figures are missing or qualified: failed calls, retries, a makespan spanning runs, a host
// that could not keep up.
func (run *Run) WriteTable(w io.Writer) error {
	r := run.Experiment
	g := r.Graph
	fmt.Fprintf(w, "experiment %s (%s): %s, %d queries, %s, %s, seed %d\n", r.Name, run.Mode,
		r.ClusterString(), run.Queries(), describeShape(g), describeArrivals(g.Arrivals), r.Seed)
	if run.Mode == "replay" {
		engine := run.Engine
		if engine == "" {
			engine = "no server (nothing was measured)"
		}
		fmt.Fprintf(w, "measured on %s, standing for %s, at time scale %g\n", engine, run.Hardware, max(r.Experiment.Replay.TimeScale, 1))
	}
	// A MoA query's stages are its experts and its aggregator; a deeper graph's are the calls
	// before its final ones (upstream) and its final calls.
	first, second, x1, x2 := "expert_s", "aggreg_s", "x_exp", "x_agg"
	if g.Workload.Layers() != 2 {
		first, second, x1, x2 = "upstream_s", "final_s", "x_up", "x_final"
	}
	ruleW := 14
	failed, cancelled := 0, 0
	for _, s := range run.Summaries {
		failed += s.FailedCalls
		cancelled += s.CancelledCalls
		ruleW = max(ruleW, len(s.Rule))
	}
	fmt.Fprintf(w, "%-18s %-*s %10s %10s %10s %7s %7s %7s %9s %8s %8s %6s %5s\n",
		"policy", ruleW, "rule", first, second, "e2e_s", x1, x2, "x_e2e", "skipped", "accuracy", "d_acc_pp", "busy", "loads")
	var notes []string
	for _, s := range run.Summaries {
		skipped := 0.0
		if s.Queries > 0 {
			skipped = 100 * float64(s.AggregatorSkipped) / float64(s.Queries)
		}
		tail := ""
		switch s.Status {
		case results.StatusFailed:
			tail += "  FAILED"
		case results.StatusPartial:
			tail += fmt.Sprintf("  partial (%d of %d queries)", s.Queries, run.Queries())
		}
		if failed > 0 {
			tail += fmt.Sprintf("  %d calls failed", s.FailedCalls)
		}
		if cancelled > 0 {
			tail += fmt.Sprintf("  %d cancelled", s.CancelledCalls)
		}
		if s.Retries > 0 {
			tail += fmt.Sprintf("  %d retries", s.Retries)
		}
		if s.Runs > 1 {
			tail += fmt.Sprintf("  spans %d runs", s.Runs)
		}
		if s.HostLagPct > replay.HostLagThresholdPct {
			tail += fmt.Sprintf("  host lag %.1f%%", s.HostLagPct)
		}
		tail += "\n"
		if _, err := fmt.Fprintf(w, "%-18s %-*s %10.1f %10.1f %10.1f %s %s %s %8.1f%% %s %s %6.2f %5d%s",
			s.Policy, ruleW, s.Rule, s.ExpertStageS, s.AggregatorStageS, s.E2ES, num(s.SpeedupExpert, "%7.2f"), num(s.SpeedupAggregator, "%7.2f"),
			num(s.SpeedupE2E, "%7.2f"), skipped, num(s.Accuracy, "%8.4f"), num(s.AccuracyDeltaPP, "%+8.2f"), s.GPUBusyFrac, s.ModelLoads, tail); err != nil {
			return err
		}
		notes = append(notes, run.notes(s)...)
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	if g.Arrivals.Offline() {
		return nil
	}
	return writeLatencyTable(w, run.Summaries, g.SLO)
}

// notes explains what qualifies a summary row's figures.
func (run *Run) notes(s results.SummaryRow) []string {
	var out []string
	firstErr := ""
	for _, res := range run.Results {
		if res.Policy == s.Policy && firstErr == "" {
			firstErr = res.FirstError()
		}
	}
	if firstErr != "" {
		firstErr = "; the first: " + firstErr
	}
	switch s.Status {
	case results.StatusFailed:
		out = append(out, fmt.Sprintf("%s: FAILED, %d calls failed%s. No speedup or accuracy is computed for it or against it: its times cover part of the workload, stretched by the failures (rerun with --resume to retry them, or with --allow-failed-calls to compare over the queries that completed).",
			s.Policy, s.FailedCalls, firstErr))
	case results.StatusPartial:
		out = append(out, fmt.Sprintf("%s: partial, %d calls failed%s. Its figures are over the %d queries that completed under every policy of this run, not the whole workload (--allow-failed-calls).",
			s.Policy, s.FailedCalls, firstErr, s.Queries))
	}
	if s.Retries > 0 {
		out = append(out, fmt.Sprintf("%s: %d calls were retried (calls.csv: attempts, retry_lost_s): each call's times are its last attempt's, and the failed attempts' time is in the makespan.", s.Policy, s.Retries))
	}
	if s.Runs > 1 {
		out = append(out, fmt.Sprintf("%s: its makespan spans %d runs (--resume): the calls in flight at an interruption, or those that had failed, were served again after the others, so its stage times are stitched; for a figure to publish, replay it into a fresh folder.", s.Policy, s.Runs))
	}
	for _, pr := range run.Replayed {
		if pr.Policy == s.Policy && pr.HostLag.Over() {
			out = append(out, fmt.Sprintf("%s: the host could not keep up: its own delays cost %.1f%% of the servers' time (threshold %.0f%%; mean send delay %.2f ms at time scale %g); rerun at time scale %.3g or less.",
				s.Policy, pr.HostLag.Pct, replay.HostLagThresholdPct, pr.HostLag.MeanDispatchMS, pr.HostLag.TimeScale, pr.HostLag.FitTimeScale))
		}
	}
	return out
}

// num formats v, or "-" in the format's width where v is not a number (no gold answers to
// grade, a stage that took no time).
func num(v float64, format string) string {
	s := fmt.Sprintf(format, v)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprintf("%*s", len(s), "-")
	}
	return s
}

// writeLatencyTable prints the per-query latencies of an online run.
func writeLatencyTable(w io.Writer, rows []results.SummaryRow, slo policies.SLO) error {
	fmt.Fprintf(w, "per-query latency (s)\n%-18s %9s %9s %9s %9s %9s %9s %8s", "policy", "e2el_mean", "e2el_p50", "e2el_p90", "e2el_p99", "ttft_p99", "queue_p99", "q/s")
	if slo.Set() {
		fmt.Fprintf(w, " %8s %8s", "slo_met", "goodput")
	}
	fmt.Fprintln(w)
	for _, s := range rows {
		fmt.Fprintf(w, "%-18s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f", s.Policy, s.MeanE2ELS, s.MedianE2ELS, s.P90E2ELS, s.P99E2ELS,
			s.P99TTFTS, s.P99QueueS, s.RequestThroughput)
		if slo.Set() {
			fmt.Fprintf(w, " %7.1f%% %8.3f", 100*s.SLOAttainment, s.RequestGoodput)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return writeSteadyTable(w, rows)
}

// writeSteadyTable prints the steady state of an online run's policies (nothing when the rows
// have none): the window, the load against the cluster's capacity, and the figures over the
// window.
func writeSteadyTable(w io.Writer, rows []results.SummaryRow) error {
	if len(rows) == 0 || rows[0].Steady == nil {
		return nil
	}
	s0 := rows[0].Steady
	state := "below capacity"
	if s0.Overloaded {
		state = "OVERLOADED: no steady state; latencies grow with the run's length"
	}
	fmt.Fprintf(w, "steady state: arrivals %.0f-%.0f s (%d queries after the warm-up); %.3f queries/s offered, capacity %.3f (load %.2f, %s)\n",
		s0.WindowStartS, s0.WindowEndS, s0.WindowQueries, s0.ArrivalRate, s0.CapacityQPS, s0.Load, state)
	fmt.Fprintf(w, "%-18s %9s %9s %9s %9s %9s %8s %8s\n", "policy", "e2el_mean", "e2el_p50", "e2el_p99", "ttft_p50", "ttft_p99", "slo_met", "done/s")
	for _, r := range rows {
		s := r.Steady
		if s == nil {
			continue
		}
		slo := "-"
		if !math.IsNaN(s.SLOAttainment) {
			slo = fmt.Sprintf("%.1f%%", 100*s.SLOAttainment)
		}
		if _, err := fmt.Fprintf(w, "%-18s %9.1f %9.1f %9.1f %9.1f %9.1f %8s %8.3f\n", r.Policy, s.MeanE2ELS, s.MedianE2ELS, s.P99E2ELS,
			s.MedianTTFTS, s.P99TTFTS, slo, s.Throughput); err != nil {
			return err
		}
	}
	return nil
}

// describeShape says what a query's graph is: "k = 3" for MoA, else its calls and layers.
func describeShape(g *GraphWorkload) string {
	if len(g.Workload.Queries) == 0 {
		return "no queries"
	}
	q := &g.Workload.Queries[0]
	if g.Kind == KindMoA {
		voters, _ := q.Voters()
		return fmt.Sprintf("k = %d", len(voters))
	}
	return fmt.Sprintf("%s graph of %d calls in %d layers", g.Kind, len(q.Calls), g.Workload.Layers())
}

// describeArrivals says how queries arrive.
func describeArrivals(a traces.Arrivals) string {
	switch {
	case a.Offline():
		return "offline batch"
	case a.Process == traces.ArrivalsGamma:
		return fmt.Sprintf("gamma arrivals %.3g/s (cv %.3g)", a.Rate, a.CV)
	case a.Process == traces.ArrivalsTrace && a.Rate > 0:
		return fmt.Sprintf("trace arrivals scaled to %.3g/s", a.Rate)
	case a.Process == traces.ArrivalsTrace:
		return "trace arrivals"
	}
	return fmt.Sprintf("Poisson arrivals %.3g/s", a.Rate)
}
