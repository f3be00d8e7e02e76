package experiments

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/snakejson"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// ReplayOptions says where a replay writes, whether it resumes, and how it reports.
type ReplayOptions struct {
	Dir    string
	Resume bool
	// AllowFailedCalls computes a policy's figures over the queries that completed under
	// every policy when some of its calls failed (status partial) instead of leaving them out
	// (status failed).
	AllowFailedCalls bool
	// Command describes this process for the results folder's lock ("mosaic replay ...").
	Command string
	Info    RunInfo
	Host    HostInfo
	// Telemetry, when set, starts GPU telemetry writing to the given file; it returns a stop
	// function (nil when telemetry is off or unavailable).
	Telemetry func(path string, start time.Time, scale float64, every time.Duration) (stop func())
	// Progress, when set, is told of each policy's calls as they finish.
	Progress Progress
}

// replayInfo is a replay's run.json: RunInfo, the servers it measured and what each policy's
// measurement rests on.
type replayInfo struct {
	RunInfo
	// Engine names the servers measured ("mosaic emulate 1.2", "vLLM 0.11.0", "Ollama 0.6.5")
	// and Hardware the cluster they stand for.
	Engine   string `json:"engine"`
	Hardware string `json:"hardware"`
	// Servers are the inference servers the replay used, with the version each reported.
	Servers []replay.ServerInfo `json:"servers"`
	// Replayed says, per policy, how its measurement was made.
	Replayed []PolicyReplay `json:"replayed,omitempty"`
}

// PolicyReplay is how one policy was replayed, in run.json.
type PolicyReplay struct {
	Policy string `json:"policy"`
	// Runs counts the replay invocations that measured the policy's calls (2 or more: its
	// makespan spans an interruption and --resume).
	Runs int `json:"runs"`
	// CacheSalt is the cache_salt its requests carried, and Servers the servers it used, with
	// how each one's prefix cache was emptied before it (ServerInfo.CacheReset).
	CacheSalt string              `json:"cache_salt,omitempty"`
	Servers   []replay.ServerInfo `json:"servers,omitempty"`
	// HostLag is what the replaying host's own delays cost the measurement.
	HostLag replay.HostLag `json:"host_lag"`
	// PrefixCache is what the servers' prefix caches served the policy's calls (their
	// /metrics counters), and PrefixCacheHitPct the share of its prompt tokens they served
	// (absent when the servers do not count).
	PrefixCache       replay.PrefixCache `json:"prefix_cache"`
	PrefixCacheHitPct *float64           `json:"prefix_cache_hit_pct,omitempty"`
	// Retries counts the attempts of calls after their first; FailedCalls the calls that
	// failed for good.
	Retries     int `json:"retries"`
	FailedCalls int `json:"failed_calls"`
}

// addServers merges the servers of one policy's run into the list, sorted by worker, model
// and version.
func addServers(list []replay.ServerInfo, more []replay.ServerInfo) []replay.ServerInfo {
	for _, s := range more {
		s.CacheReset = "" // per policy, in Replayed
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	slices.SortFunc(list, func(a, b replay.ServerInfo) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Version, b.Version))
	})
	return list
}

func nameOf(e *Experiment) string {
	if e == nil {
		return "?"
	}
	return e.Name
}

// cacheSalt is the cache_salt of one policy's requests in one run: the run's nonce and the
// policy, so that no policy, of this run or another, is served from blocks another computed.
func cacheSalt(nonce, policy string) string {
	sum := sha256.Sum256([]byte(nonce + "\x00" + policy))
	return "mosaic-" + hex.EncodeToString(sum[:12])
}

// newNonce is a random identifier of one replay invocation.
func newNonce() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b[:])
}

// Replay runs the experiment's policies one after another on real (or emulated) servers,
// holding the results folder's lock: calls.csv grows as calls complete, and when a policy ends
// its rows of calls.csv, queries.csv and workers.csv are made exactly its final records and
// summary.csv is rewritten. With Resume it skips the policies a previous run finished and the
// calls it completed. A policy with failed calls gets status failed (no speedup or accuracy for
// or against it) unless AllowFailedCalls, and the run's error is then ErrFailedCalls.
func (r *Resolved) Replay(ctx context.Context, opt ReplayOptions) (*Run, error) {
	if r.Graph == nil {
		return nil, fmt.Errorf("%s: replay needs a workload of call graphs (kind moa, layered, tree or dag)", r.File())
	}
	if opt.Dir == "" {
		return nil, errors.New("replay needs a results folder (-o DIR): results are written as calls complete")
	}
	s, err := r.openReplay(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer s.dir.Close()
	if stop := s.startTelemetry(); stop != nil {
		defer stop()
	}
	for _, p := range r.Graph.Policies {
		if row, ok := s.state.summaries[p.Label]; ok {
			slog.Info("policy already replayed, skipping", "policy", p.Label)
			s.rows = append(s.rows, row)
			continue
		}
		if err := s.replayPolicy(ctx, p); err != nil {
			return nil, err
		}
	}
	return s.finish()
}

// replaySession is one invocation of Replay: its locked results folder, what an interrupted run
// left there, the servers' configuration and what has been measured so far.
type replaySession struct {
	r        *Resolved
	opt      ReplayOptions
	cfg      replay.Config
	dir      *results.Dir
	state    *resumeState
	info     replayInfo // run.json
	nonce    string     // this invocation's, in the cache salts
	started  time.Time
	run      *Run
	rows     []results.SummaryRow
	measured map[string]*policies.Result // the policies measured in this invocation
}

// openReplay checks the [replay] table, locks the results folder, reads what an interrupted
// run left (or makes sure nothing measured would be overwritten), checks that every attached
// server answers, and writes run.json.
func (r *Resolved) openReplay(ctx context.Context, opt ReplayOptions) (*replaySession, error) {
	cfg, err := r.replayConfig()
	if err != nil {
		return nil, err
	}
	if cmd := cfg.Command; len(cfg.Endpoints) == 0 && cmd != "" && !strings.Contains(cmd, "{prefix_caching}") && !strings.Contains(cmd, "prefix-caching") {
		slog.Warn("[replay] command sets no prefix caching (add {prefix_caching}): the servers keep their own default (vLLM V1: on), whatever [replay] prefix_caching says")
	}
	dir, err := results.Open(opt.Dir, opt.Command)
	if err != nil {
		return nil, err
	}
	s := &replaySession{r: r, opt: opt, cfg: cfg, dir: dir, state: newResumeState(), nonce: newNonce(), started: time.Now(),
		run: &Run{Experiment: r, Mode: "replay"}, measured: map[string]*policies.Result{}}
	if err := s.prepare(ctx); err != nil {
		dir.Close()
		return nil, err
	}
	return s, nil
}

// prepare reads the folder (resume) or clears an earlier run that measured nothing, probes the
// attached servers, and writes run.json.
func (s *replaySession) prepare(ctx context.Context) error {
	r, dir := s.r, s.dir
	if s.opt.Resume {
		var err error
		if s.state, err = readResume(dir, r); err != nil {
			return err
		}
	} else if has, err := hasResults(dir); err != nil {
		return err
	} else if has {
		return fmt.Errorf("%s already holds results: use --resume to continue them, or another folder", s.opt.Dir)
	} else if err := dir.Remove(resultFiles...); err != nil {
		return err // an earlier run that measured nothing: start afresh
	}
	// Before anything is measured: every attached server answers (a wrong URL fails here,
	// within the connect timeout, naming the URL and the cause).
	if len(s.cfg.Endpoints) > 0 {
		probe, err := replay.New(s.cfg)
		if err != nil {
			return err
		}
		err = probe.Preflight(ctx)
		probe.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", r.File(), err)
		}
	}
	s.cfg.LogDir = dir.File("logs")
	if s.opt.Resume {
		s.info = s.state.info // what the run was started with, and the servers it used so far
	} else {
		info := r.runInfo("replay", s.opt.Info)
		var err error
		if info.Fingerprint, err = r.fingerprint(); err != nil {
			return err
		}
		s.info = replayInfo{RunInfo: info, Hardware: r.ClusterString()}
	}
	return s.writeInfo()
}

// writeInfo writes run.json.
func (s *replaySession) writeInfo() error {
	data, err := snakejson.MarshalIndent(s.info, "", "  ")
	if err != nil {
		return fmt.Errorf("writing run.json: %w", err)
	}
	return s.dir.WriteBytes("run.json", append(data, '\n'))
}

// startTelemetry starts the GPU telemetry the options ask for; nil when none runs.
func (s *replaySession) startTelemetry() (stop func()) {
	if s.opt.Telemetry == nil {
		return nil
	}
	every := time.Second
	if t := s.r.Experiment.Replay.Telemetry; t != nil {
		every = *t
	}
	if every <= 0 {
		return nil
	}
	return s.opt.Telemetry(s.dir.File("gpus.csv"), s.started, max(s.cfg.TimeScale, 1e-9), every)
}

// replayPolicy measures one policy: a Backend of its own (its cache salt, the calls an
// interrupted run finished, its clock), each call's row appended as it completes, then the
// policy's rows made exactly its records and the summary rewritten.
func (s *replaySession) replayPolicy(ctx context.Context, p ResolvedPolicy) error {
	r, m := s.r, s.r.Graph
	pcfg := s.cfg
	finished := s.state.done[p.Label]
	pcfg.Finished = finished
	pr := policyReplay(&s.info, p.Label)
	prevRuns := pr.Runs
	pr.Runs = 1
	if len(finished) > 0 {
		// The resumed run's clock continues where the interrupted one's last recorded call
		// ended; the calls in flight then are served again.
		pcfg.TimeOffset = s.state.offset[p.Label]
		pr.Runs = max(prevRuns, 1) + 1
		slog.Warn("resuming an interrupted policy: its makespan spans runs (the calls in flight at the interruption are served again; summary.csv counts its runs)",
			"policy", p.Label, "calls_done_before", len(finished), "clock_resumes_at_s", pcfg.TimeOffset.Seconds(), "runs", pr.Runs)
	}
	pcfg.CacheSalt = cacheSalt(s.nonce, p.Label)
	pr.CacheSalt = pcfg.CacheSalt
	// A call's row is written as it completes; a row that cannot be written stops the policy,
	// since going on would measure what the results would not hold.
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var writeErr error
	hooks := RunHooks{CallDone: func(c policies.CallRecord) {
		if _, old := finished[c.Call.ID]; old || writeErr != nil {
			return // recorded by the interrupted run, or the file failed
		}
		if c.Status == "failed" {
			slog.Error("call failed", "policy", p.Label, "err", c.Err)
		}
		if err := results.Append(s.dir, results.Calls, CallRow(p.Label, c)); err != nil {
			writeErr = fmt.Errorf("%s: writing calls.csv: %w", p.Label, err)
			stop()
		}
	}}
	if s.opt.Progress != nil {
		hooks.Progress = func(done, total int) { s.opt.Progress(p.Label, done, total) }
		s.opt.Progress(p.Label, 0, m.Workload.NumCalls()) // the policy starts
	}
	be, err := replay.New(pcfg)
	if err != nil {
		return err
	}
	slog.Info("replaying", "policy", p.Label, "cluster", r.ClusterString(), "resumed_calls", len(finished))
	res, pol, err := r.RunPolicy(pctx, be, p, hooks)
	be.Close()
	s.describe(pr, be)
	if werr := s.writeInfo(); werr != nil {
		slog.Error("writing run.json", "err", werr)
	}
	if writeErr != nil {
		return fmt.Errorf("%w (the results so far are in %s)", writeErr, s.opt.Dir)
	}
	if err != nil {
		return fmt.Errorf("%w (the results so far are in %s; rerun with --resume to continue)", err, s.opt.Dir)
	}
	if err := s.supersede(p.Label, res); err != nil {
		return err
	}
	s.run.Results = append(s.run.Results, res)
	s.run.Policies = append(s.run.Policies, pol)
	s.measured[p.Label] = res
	row := summaryRow(r.Name, "replay", uint64(r.Seed), m.SLO, res)
	row.Runs, row.HostLagPct = pr.Runs, pr.HostLag.Pct
	if row.Steady, err = r.steady(res, p.Rule); err != nil {
		return err
	}
	pr.Retries, pr.FailedCalls = row.Retries, row.FailedCalls
	if pr.HostLag.Over() {
		slog.Warn("the host could not keep up: its own delays stretched the measured times",
			"policy", p.Label, "host_lag_pct", round2(pr.HostLag.Pct), "threshold_pct", replay.HostLagThresholdPct,
			"mean_dispatch_ms", pr.HostLag.MeanDispatchMS, "time_scale", s.cfg.TimeScale, "a_time_scale_that_fits", round2(pr.HostLag.FitTimeScale))
	}
	s.rows = append(s.rows, row)
	if err := s.writeInfo(); err != nil {
		return err
	}
	return writeReplaySummary(s.dir, m.Workload, m.SLO, s.rows, s.measured, s.opt.AllowFailedCalls)
}

// describe records in run.json what the policy's backend measured about itself: the host's
// lag, the prefix-cache hits, the servers it used and the engine they are.
func (s *replaySession) describe(pr *PolicyReplay, be *replay.Backend) {
	pr.HostLag = be.HostLag()
	pr.PrefixCache = be.PrefixCache()
	if pct := pr.PrefixCache.HitPct(); !math.IsNaN(pct) {
		pct = round2(pct)
		pr.PrefixCacheHitPct = &pct
	}
	if more := be.Servers(); len(more) > 0 {
		s.info.Servers = addServers(s.info.Servers, more)
		pr.Servers = more
		s.info.Engine = engineName(s.info.Servers, s.cfg.API)
	}
}

// supersede makes the policy's rows of calls.csv, workers.csv and queries.csv exactly its final
// records: a call done in the interrupted run keeps the row measured then, and rows that no
// longer hold (a failed attempt's row beside the call's new one, an aggregator the rerun
// skipped) go.
func (s *replaySession) supersede(label string, res *policies.Result) error {
	m := s.r.Graph
	callRows := make([]results.CallRow, 0, len(res.Calls))
	for _, c := range res.Calls {
		if old, ok := s.state.rows[label][c.Call.ID]; ok {
			callRows = append(callRows, old)
			continue
		}
		callRows = append(callRows, CallRow(label, c))
	}
	if err := results.Supersede(s.dir, results.Calls, label, callRows); err != nil {
		return err
	}
	if err := results.Supersede(s.dir, results.Workers, label, WorkerRows([]*policies.Result{res})); err != nil {
		return err
	}
	return results.Supersede(s.dir, results.Queries, label, QueryRows(m.Workload, m.SLO, []*policies.Result{res}))
}

// finish reads the summary back, writes host.json and returns the run, with ErrFailedCalls
// when a policy's status is failed.
func (s *replaySession) finish() (*Run, error) {
	final, err := results.Rows(s.dir, results.Summary)
	if err != nil {
		return nil, err
	}
	run := s.run
	run.Summaries = final
	run.Replayed = s.info.Replayed
	run.Engine, run.Hardware = s.info.Engine, s.info.Hardware
	host := s.opt.Host
	host.WallS = time.Since(s.started).Seconds()
	data, err := snakejson.MarshalIndent(host, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := s.dir.WriteBytes("host.json", append(data, '\n')); err != nil {
		return nil, err
	}
	for _, row := range final {
		if row.Status == results.StatusFailed {
			return run, ErrFailedCalls
		}
	}
	return run, nil
}

// ErrFailedCalls is Replay's error when a policy's calls failed and AllowFailedCalls is off:
// the results are written, with status failed on those policies.
var ErrFailedCalls = errors.New("calls failed")

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// policyReplay returns run.json's entry of policy, added if missing.
func policyReplay(info *replayInfo, policy string) *PolicyReplay {
	for i := range info.Replayed {
		if info.Replayed[i].Policy == policy {
			return &info.Replayed[i]
		}
	}
	info.Replayed = append(info.Replayed, PolicyReplay{Policy: policy})
	return &info.Replayed[len(info.Replayed)-1]
}

// engineName names the engine the servers are, from the versions they reported.
func engineName(servers []replay.ServerInfo, api replay.API) string {
	var names []string
	for _, s := range servers {
		name := s.Version
		switch {
		case name == "" && api == replay.APIOllama:
			name = "Ollama (version unknown)"
		case name == "":
			name = "an OpenAI-compatible server (version unknown)"
		case strings.HasPrefix(name, "mosaic-emulate"):
			name = strings.TrimSpace("mosaic emulate " + strings.TrimLeft(strings.TrimPrefix(name, "mosaic-emulate"), "/"))
		case api == replay.APIOllama:
			name = "Ollama " + name
		default:
			name = "vLLM " + name
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// writeReplaySummary computes the rows' status and speedups and writes summary.csv. A row with
// failed calls has status failed, and no speedup or accuracy is computed for it or against
// it, unless allowFailed: then every policy measured in this run is summarised over the
// queries that completed (no call failed) under all of them, with status partial.
func writeReplaySummary(dir *results.Dir, wl *traces.Workload, slo policies.SLO, rows []results.SummaryRow, measured map[string]*policies.Result, allowFailed bool) error {
	out := slices.Clone(rows)
	if allowFailed {
		keep := completedQueries(len(wl.Queries), measured)
		if slices.Contains(keep, false) {
			always := alwaysAggregate(wl, keep)
			for i, row := range out {
				res := measured[row.Policy]
				if res == nil {
					continue // finished by an earlier run, over every query: no speedup against the others
				}
				nr := summaryRow(row.Experiment, row.Mode, row.Seed, slo, res.Restrict(keep, always))
				nr.FailedCalls, nr.Retries, nr.Runs, nr.HostLagPct = row.FailedCalls, row.Retries, row.Runs, row.HostLagPct
				nr.Steady = row.Steady // over every query the policy ran
				nr.Status = results.StatusPartial
				out[i] = nr
			}
		}
	}
	results.SetSpeedups(out)
	return results.Write(dir, results.Summary, slices.Values(out))
}

// completedQueries marks the queries none of whose calls failed under any of the results.
func completedQueries(n int, measured map[string]*policies.Result) []bool {
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true
	}
	for _, res := range measured {
		for _, c := range res.Calls {
			if c.Status == "failed" {
				keep[c.Call.Query] = false
			}
		}
	}
	return keep
}

// alwaysAggregate is the accuracy of always aggregating over the kept queries with a gold
// answer (NaN when none has one).
func alwaysAggregate(wl *traces.Workload, keep []bool) float64 {
	right, gold := 0, 0
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		if !keep[qi] || q.Gold == "" {
			continue
		}
		gold++
		if q.FinalAnswer() == q.Gold {
			right++
		}
	}
	if gold == 0 {
		return math.NaN()
	}
	return float64(right) / float64(gold)
}
