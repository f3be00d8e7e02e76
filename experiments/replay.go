package experiments

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// ReplayOptions says where a replay writes and whether it resumes.
type ReplayOptions struct {
	Dir    string
	Resume bool
	Info   RunInfo
	Host   HostInfo
	// Telemetry, when set, starts GPU telemetry writing to the given file; it returns a stop
	// function (nil when telemetry is off or unavailable).
	Telemetry func(path string, start time.Time, scale float64, every time.Duration) (stop func())
}

// replayConfig validates [replay] and builds the backend configuration.
func (r *Resolved) replayConfig() (replay.Config, error) {
	e := r.Experiment
	rp := e.Replay
	W := r.NumWorkers()
	cfg := replay.Config{Workers: W, Models: map[string]replay.Model{}, Command: rp.Command, Env: rp.Env,
		GPUName: r.GPU.Name, GPUs: rp.GPUs, HealthTimeout: rp.HealthTimeout,
		Timeouts:       replay.Timeouts{Connect: rp.ConnectTimeout, FirstToken: rp.FirstTokenTimeout, Idle: rp.IdleTimeout, Request: rp.RequestTimeout},
		MaxConcurrency: rp.MaxConcurrency, Retries: DefaultRetries, TimeScale: rp.TimeScale, StopOnDeadWorker: true,
		Seed: uint64(r.Seed), AdmissionPoll: replay.DefaultAdmissionPoll}
	served := func(m *ResolvedModel, eng sim.EngineConfig) replay.Model {
		return replay.Model{Name: m.Name, Arch: m.Arch.ID, Utilization: m.Memory, MaxNumSeqs: eng.MaxNumSeqs,
			MaxTokens: eng.MaxBatchedTokens, ChunkedPrefill: eng.ChunkedPrefill, Vocab: m.Arch.Vocab}
	}
	for _, m := range r.Models {
		cfg.Models[m.Name] = served(m, m.Engine)
	}
	if r.Mixed() {
		// Each worker serves a model with its group's engine settings, and only the models its
		// GPUs can hold.
		cfg.PerWorker = make([]map[string]replay.Model, W)
		for w := range W {
			cfg.PerWorker[w] = map[string]replay.Model{}
			for _, m := range r.Models {
				if gm := r.On(m, w); gm.Cost != nil {
					cfg.PerWorker[w][m.Name] = served(m, gm.Engine)
				}
			}
		}
	}
	if err := r.replayDevices(&cfg); err != nil {
		return cfg, err
	}
	switch rp.PrefixCaching {
	case "":
		cfg.PrefixCaching = len(r.Models) > 0 && r.Models[0].PrefixCaching
	case "off":
	case "workload":
		cfg.PrefixCaching = true
	default:
		return cfg, e.errorf("replay.prefix_caching", "unknown value %q (known: off, workload)", rp.PrefixCaching)
	}
	if rp.AdmissionPoll != nil {
		if *rp.AdmissionPoll < 0 || (*rp.AdmissionPoll > 0 && *rp.AdmissionPoll < time.Millisecond) {
			return cfg, e.errorf("replay.admission_poll", "%v is not a duration of at least 1ms (or \"0s\" for none)", *rp.AdmissionPoll)
		}
		cfg.AdmissionPoll = *rp.AdmissionPoll
	}
	switch rp.Mode {
	case "":
	case "attach":
		if len(rp.Endpoints) == 0 {
			return cfg, e.errorf("replay.mode", "attach needs [[replay.endpoint]] tables (worker, url[, model])")
		}
	case "launch":
		if len(rp.Endpoints) > 0 {
			return cfg, e.errorf("replay.endpoint", "launch mode starts its own servers: remove the endpoints or use mode = \"attach\"")
		}
	default:
		return cfg, e.errorf("replay.mode", "unknown mode %q (known: attach, launch)", rp.Mode)
	}
	for i, ep := range rp.Endpoints {
		key := fmt.Sprintf("replay.endpoint[%d]", i)
		if ep.Worker < 0 || ep.Worker >= W {
			return cfg, e.errorf(key+".worker", "no worker %d (the cluster has %d)", ep.Worker, W)
		}
		if ep.Model != "" {
			if _, ok := r.Model(ep.Model); !ok {
				return cfg, e.errorf(key+".model", "no [[model]] is named %q", ep.Model)
			}
		}
		if ep.URL == "" {
			return cfg, e.errorf(key+".url", "missing")
		}
		u, err := url.Parse(ep.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, e.errorf(key+".url", "%q is not an http(s) URL such as http://127.0.0.1:8000", ep.URL)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return cfg, e.errorf(key+".url", "%q has an invalid port", ep.URL)
			}
		}
		cfg.Endpoints = append(cfg.Endpoints, replay.Endpoint{Worker: ep.Worker, Model: ep.Model, URL: ep.URL})
	}
	if len(cfg.Endpoints) > 0 {
		// Every worker needs a server for every model a policy may load there.
		for w := 0; w < W; w++ {
			for _, m := range r.Models {
				if r.On(m, w).Cost == nil {
					continue // its GPUs cannot hold the model: no policy loads it there
				}
				if !covered(cfg.Endpoints, w, m.Name) {
					return cfg, e.errorf("replay.endpoint", "no endpoint serves model %s on worker %d: list one with worker = %d (and model = %q, or no model for all of the worker's models)", m.Name, w, w, m.Name)
				}
			}
		}
		if rp.HealthTimeout == 0 {
			cfg.HealthTimeout = time.Minute // attached servers are already up
		}
	}
	if rp.MaxConcurrency < 0 || (rp.MaxConcurrency == 0 && e.has("replay.max_concurrency")) {
		return cfg, e.errorf("replay.max_concurrency", "must be at least 1, got %d (leave it out for the engine's max_num_seqs)", rp.MaxConcurrency)
	}
	if rp.Retries != nil {
		if *rp.Retries < 0 {
			return cfg, e.errorf("replay.retries", "must not be negative")
		}
		cfg.Retries = *rp.Retries
	}
	switch rp.OnDeadWorker {
	case "", "stop":
	case "continue":
		cfg.StopOnDeadWorker = false
	default:
		return cfg, e.errorf("replay.on_dead_worker", "unknown value %q (known: stop, continue)", rp.OnDeadWorker)
	}
	if rp.TimeScale < 0 {
		return cfg, e.errorf("replay.time_scale", "must be positive")
	}
	for name, d := range map[string]time.Duration{"health_timeout": rp.HealthTimeout, "request_timeout": rp.RequestTimeout,
		"connect_timeout": rp.ConnectTimeout, "first_token_timeout": rp.FirstTokenTimeout, "idle_timeout": rp.IdleTimeout} {
		if d < 0 || (d == 0 && e.has("replay."+name)) {
			return cfg, e.errorf("replay."+name, "must be positive, got %v", d)
		}
		if d != 0 && d < time.Millisecond {
			return cfg, e.errorf("replay."+name, "%v is too short; write a duration with its unit, e.g. \"600s\"", d)
		}
	}
	if rp.APIKeyEnv != "" {
		cfg.APIKey = os.Getenv(rp.APIKeyEnv)
		if cfg.APIKey == "" {
			return cfg, e.errorf("replay.api_key_env", "the environment variable %s is empty or unset", rp.APIKeyEnv)
		}
	}
	return cfg, nil
}

// replayDevices gives every worker its CUDA devices: its GPUs (Resolved.GPUsOf: as many as
// its group's TP degree, numbered group by group), mapped through [replay] gpus when it is
// given. A uniform cluster of single-GPU workers keeps the simple form (one device per worker).
func (r *Resolved) replayDevices(cfg *replay.Config) error {
	e := r.Experiment
	gpus := e.Replay.GPUs
	total := r.NumGPUs()
	if len(gpus) > 0 && len(gpus) != total {
		if total == r.NumWorkers() {
			return e.errorf("replay.gpus", "lists %d devices for %d workers", len(gpus), total)
		}
		return e.errorf("replay.gpus", "lists %d devices for %d workers of %d GPUs in all (%s): list one device per GPU, the workers taking them in order",
			len(gpus), r.NumWorkers(), total, strings.Join(r.Hardware(), ", "))
	}
	seen := map[int]bool{}
	for _, d := range gpus {
		if d < 0 {
			return e.errorf("replay.gpus", "device %d is negative", d)
		}
		if seen[d] {
			return e.errorf("replay.gpus", "device %d is listed twice: each GPU belongs to one worker", d)
		}
		seen[d] = true
	}
	if !r.Mixed() && r.TP == 1 {
		return nil
	}
	cfg.Hardware = make([]replay.WorkerHardware, r.NumWorkers())
	for w := range cfg.Hardware {
		hw := replay.WorkerHardware{GPUName: r.Group(w).GPU.Name}
		for _, i := range r.GPUsOf(w) {
			d := i
			if len(gpus) > 0 {
				d = gpus[i]
			}
			hw.Devices = append(hw.Devices, d)
		}
		cfg.Hardware[w] = hw
	}
	return nil
}

func covered(eps []replay.Endpoint, w int, model string) bool {
	for _, ep := range eps {
		if ep.Worker == w && (ep.Model == "" || ep.Model == model) {
			return true
		}
	}
	return false
}

// ValidateReplay checks the experiment's [replay] table.
func (r *Resolved) ValidateReplay() error {
	_, err := r.replayConfig()
	return err
}

// resumeState is what an interrupted replay left behind.
type resumeState struct {
	summaries map[string]traces.SummaryRow // completed policies, every call done
	done      map[string]map[int]policies.CallTiming
	offset    map[string]time.Duration // when the interrupted policy's last recorded call ended
	info      replayInfo               // the run.json of the interrupted run
}

func newResumeState() *resumeState {
	return &resumeState{summaries: map[string]traces.SummaryRow{}, done: map[string]map[int]policies.CallTiming{}, offset: map[string]time.Duration{}}
}

// readResume reads what an interrupted replay in dir measured, with the strict readers of the
// results files (a malformed line is an error naming the file, line and column), and makes the
// files ready to be appended to: calls.csv loses a line torn by the interruption, and the rows
// of policies that run again are dropped.
func readResume(dir string, r *Resolved) (*resumeState, error) {
	st := newResumeState()
	data, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		return nil, fmt.Errorf("--resume: %w (nothing to resume in %s)", err, dir)
	}
	var info replayInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("--resume: %s/run.json: %w", dir, err)
	}
	if info.Mode != "replay" || info.Seed != uint64(r.Seed) || info.Experiment == nil || info.Experiment.Name != r.Name {
		return nil, fmt.Errorf("--resume: %s holds a %s run of %q (seed %d), not a replay of %q (seed %d)", dir, info.Mode, nameOf(info.Experiment), info.Seed, r.Name, r.Seed)
	}
	fp, err := r.fingerprint()
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	if info.Fingerprint != fp {
		return nil, fmt.Errorf("--resume: the experiment differs from the one %s was started with (the workload, models, cluster or policies changed): resume with the same file and overrides, or start a new folder", dir)
	}
	st.info = info
	// summary.csv is written whole (renamed into place) when a policy ends: absent, no policy
	// ended. A policy that ended with failed calls is not finished: it runs again, its done
	// calls kept and its failed ones sent again.
	rerun := map[string]bool{}
	summary := filepath.Join(dir, "summary.csv")
	if rows, err := traces.ReadSummaryCSV(summary); err == nil {
		for _, row := range rows {
			if row.FailedCalls > 0 {
				rerun[row.Policy] = true
				slog.Warn("--resume: the policy ended with failed calls: running them again", "policy", row.Policy, "failed_calls", row.FailedCalls)
				continue
			}
			st.summaries[row.Policy] = row
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	drop := func(policy string) bool { return rerun[policy] }
	// Their rows go from the files written when a policy ends.
	if _, err := rewriteRows(filepath.Join(dir, "workers.csv"), traces.ReadWorkersCSV, traces.WorkerHeader,
		func(w traces.WorkerRow) bool { return drop(w.Policy) }); err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	if _, err := rewriteRows(filepath.Join(dir, "queries.csv"), traces.ReadQueriesCSV, traces.QueryHeader,
		func(q traces.QueryRow) bool { return drop(q.Policy) }); err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	// calls.csv is appended a line per call: the interruption may have torn its last line.
	path := filepath.Join(dir, "calls.csv")
	if torn, err := trimTornLine(path); err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	} else if torn {
		slog.Warn("--resume: dropped the torn last line of calls.csv (the interrupted run died while writing it)", "file", path)
	}
	// A rerun policy's calls that did not finish are sent again: their new rows replace these.
	rows, err := rewriteRows(path, traces.ReadCallsCSV, traces.CallHeader,
		func(c traces.CallRow) bool { return drop(c.Policy) && c.Status != "done" })
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	for _, c := range rows {
		if c.Status != "done" {
			continue
		}
		if st.done[c.Policy] == nil {
			st.done[c.Policy] = map[int]policies.CallTiming{}
		}
		t := policies.CallTiming{Started: fromSeconds(c.StartS), FirstToken: fromSeconds(c.FirstTokenS), End: fromSeconds(c.EndS), Preemptions: c.Preemptions}
		st.done[c.Policy][c.Call] = t
		st.offset[c.Policy] = max(st.offset[c.Policy], t.End)
	}
	return st, nil
}

// fromSeconds converts a results file's seconds to a Duration, rounded to the nanosecond.
func fromSeconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// rewriteRows reads a results CSV with its strict reader and, when drop removes any row,
// rewrites it without them (through a file renamed into place). It returns the rows kept; a
// missing file is left missing and has none.
func rewriteRows[R traces.Recorder](path string, read func(string) ([]R, error), header []string, drop func(R) bool) ([]R, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	rows, err := read(path)
	if err != nil {
		return nil, err
	}
	kept := slices.DeleteFunc(slices.Clone(rows), drop)
	if len(kept) == len(rows) {
		return rows, nil
	}
	return kept, writeCSVFile(path, header, slices.Values(kept))
}

// trimTornLine cuts a file appended line by line back to its last complete line (ending in a
// newline), as a process killed in the middle of a write leaves it; it reports whether it cut.
func trimTornLine(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || len(data) == 0 || data[len(data)-1] == '\n' {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, os.Truncate(path, int64(bytes.LastIndexByte(data, '\n')+1))
}

// replayInfo is a replay's run.json: RunInfo and the servers it measured.
type replayInfo struct {
	RunInfo
	// Servers are the inference servers the replay used, with the version each reported.
	Servers []replay.ServerInfo `json:"servers"`
}

// addServers merges the servers of one policy's run into the list, sorted by worker, model
// and version.
func addServers(list []replay.ServerInfo, more []replay.ServerInfo) []replay.ServerInfo {
	for _, s := range more {
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

// appender appends CSV rows to a file and flushes after each, so a crash loses nothing
// already written.
type appender struct {
	mu sync.Mutex
	f  *os.File
	w  *csv.Writer
}

func openAppender(path string, header []string) (*appender, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	a := &appender{f: f, w: csv.NewWriter(f)}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() == 0 {
		if err := a.write(header); err != nil {
			f.Close()
			return nil, err
		}
	}
	return a, nil
}

func (a *appender) write(rec []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.w.Write(rec); err != nil {
		return err
	}
	a.w.Flush()
	return a.w.Error()
}

func (a *appender) Close() error { return a.f.Close() }

// Replay runs the experiment's policies one after another on real (or emulated) servers,
// writing calls.csv as calls complete, and workers.csv and summary.csv as each policy ends.
// With Resume it skips the policies a previous run finished and the calls it completed.
func (r *Resolved) Replay(ctx context.Context, opt ReplayOptions) (*Run, error) {
	m := r.Graph
	if m == nil {
		return nil, fmt.Errorf("%s: replay needs a workload of call graphs (kind moa, layered, tree or dag)", r.File())
	}
	cfg, err := r.replayConfig()
	if err != nil {
		return nil, err
	}
	if opt.Dir == "" {
		return nil, errors.New("replay needs a results folder (-o DIR): results are written as calls complete")
	}
	if cmd := cfg.Command; len(cfg.Endpoints) == 0 && cmd != "" && !strings.Contains(cmd, "{prefix_caching}") && !strings.Contains(cmd, "prefix-caching") {
		slog.Warn("[replay] command sets no prefix caching (add {prefix_caching}): the servers keep their own default (vLLM V1: on), whatever [replay] prefix_caching says")
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, err
	}
	state := newResumeState()
	if opt.Resume {
		if state, err = readResume(opt.Dir, r); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(filepath.Join(opt.Dir, "calls.csv")); err == nil {
		return nil, fmt.Errorf("%s already holds results: use --resume to continue them, or another folder", opt.Dir)
	}
	cfg.LogDir = filepath.Join(opt.Dir, "logs")
	info := r.runInfo("replay", opt.Info)
	if info.Fingerprint, err = r.fingerprint(); err != nil {
		return nil, err
	}
	rinfo := replayInfo{RunInfo: info}
	if opt.Resume {
		rinfo = state.info // what the run was started with, and the servers it used so far
	} else if err := writeJSON(filepath.Join(opt.Dir, "run.json"), rinfo); err != nil {
		return nil, err
	}
	calls, err := openAppender(filepath.Join(opt.Dir, "calls.csv"), traces.CallHeader)
	if err != nil {
		return nil, err
	}
	defer calls.Close()
	workers, err := openAppender(filepath.Join(opt.Dir, "workers.csv"), traces.WorkerHeader)
	if err != nil {
		return nil, err
	}
	defer workers.Close()
	queries, err := openAppender(filepath.Join(opt.Dir, "queries.csv"), traces.QueryHeader)
	if err != nil {
		return nil, err
	}
	defer queries.Close()
	start := time.Now()
	if opt.Telemetry != nil {
		every := time.Second
		if t := r.Experiment.Replay.Telemetry; t != nil {
			every = *t
		}
		if every > 0 {
			if stop := opt.Telemetry(filepath.Join(opt.Dir, "gpus.csv"), start, max(cfg.TimeScale, 1e-9), every); stop != nil {
				defer stop()
			}
		}
	}
	run := &Run{Experiment: r, Mode: "replay"}
	infos := r.ModelInfos()
	var rows []traces.SummaryRow
	for _, p := range m.Policies {
		if row, ok := state.summaries[p.Label]; ok {
			slog.Info("policy already replayed, skipping", "policy", p.Label)
			rows = append(rows, row)
			continue
		}
		pcfg := cfg
		finished := state.done[p.Label]
		pcfg.Finished = finished
		if len(finished) > 0 {
			// The resumed run's clock continues where the interrupted one's last recorded call
			// ended; the calls in flight then are served again.
			pcfg.TimeOffset = state.offset[p.Label]
			slog.Warn("resuming an interrupted policy: its makespan spans two runs (the calls in flight at the interruption are served again)",
				"policy", p.Label, "calls_done_before", len(finished), "clock_resumes_at_s", pcfg.TimeOffset.Seconds())
		}
		// A call's row is written as it completes; a row that cannot be written stops the
		// policy, since going on would measure what the results would not hold.
		pctx, stop := context.WithCancel(ctx)
		var writeErr error
		record := func(c policies.CallRecord) {
			if _, old := finished[c.Call.ID]; old || writeErr != nil {
				return // recorded by the interrupted run, or the file failed
			}
			if c.Status == "failed" {
				slog.Error("call failed", "policy", p.Label, "err", c.Err)
			}
			row := CallRow(p.Label, c)
			if err := calls.write(row.Record()); err != nil {
				writeErr = fmt.Errorf("%s: writing calls.csv: %w", p.Label, err)
				stop()
			}
		}
		be, err := replay.New(pcfg)
		if err != nil {
			stop()
			return nil, err
		}
		pol := p.New()
		d, err := policies.NewDriver(be, pol, p.Rule, m.Workload, infos, r.NumWorkers())
		if err != nil {
			be.Close()
			stop()
			return nil, err
		}
		d.CallDone = record
		d.SetEarlyExit(p.Exit)
		d.SetOverlap(p.Overlap)
		slog.Info("replaying", "policy", p.Label, "cluster", r.ClusterString(), "resumed_calls", len(finished))
		res, err := d.Run(pctx)
		be.Close()
		stop()
		if writeErr != nil {
			return nil, fmt.Errorf("%w (the results so far are in %s)", writeErr, opt.Dir)
		}
		// run.json names the servers measured (their versions), as soon as they are known.
		if more := be.Servers(); len(more) > 0 {
			rinfo.Servers = addServers(rinfo.Servers, more)
			if werr := writeJSON(filepath.Join(opt.Dir, "run.json"), rinfo); werr != nil {
				slog.Error("writing run.json", "err", werr)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w (the results so far are in %s; rerun with --resume to continue)", p.Label, err, opt.Dir)
		}
		res.Policy = p.Label
		for _, wr := range WorkerRows([]*policies.Result{res}) {
			if err := workers.write(wr.Record()); err != nil {
				return nil, err
			}
		}
		for _, qr := range QueryRows(m.Workload, m.SLO, []*policies.Result{res}) {
			if err := queries.write(qr.Record()); err != nil {
				return nil, err
			}
		}
		run.Results = append(run.Results, res)
		run.Policies = append(run.Policies, pol)
		rows = append(rows, summaryRow(r.Name, "replay", uint64(r.Seed), m.SLO, res))
		if err := writeSummary(opt.Dir, rows); err != nil {
			return nil, err
		}
	}
	run.Summaries = rows
	host := opt.Host
	host.WallS = time.Since(start).Seconds()
	if err := writeJSON(filepath.Join(opt.Dir, "host.json"), host); err != nil {
		return nil, err
	}
	return run, writeSummary(opt.Dir, rows)
}

// writeSummary sets the rows' speedups over the first and writes summary.csv.
func writeSummary(dir string, rows []traces.SummaryRow) error {
	setSpeedups(rows)
	return writeCSVFile(filepath.Join(dir, "summary.csv"), traces.SummaryHeader, slices.Values(rows))
}

// fingerprint identifies the experiment as resolved (file, overrides and seed included, the
// [replay] table excluded: the servers may change between an interrupted run and its
// resumption), so that --resume refuses to mix results of different experiments.
func (r *Resolved) fingerprint() (string, error) {
	e := *r.Experiment
	e.Replay = Replay{}
	data, err := json.Marshal(struct {
		E *Experiment
		W *traces.Workload
	}{&e, r.Graph.Workload})
	if err != nil {
		return "", fmt.Errorf("fingerprinting the experiment: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}
