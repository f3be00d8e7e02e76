package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/results"
)

func runSim(args []string, stdout io.Writer) error {
	fs := newFlagSet("sim", flag.ContinueOnError)
	seed, sets := experimentFlags(fs)
	outDir := fs.String("o", "", "write summary.csv, calls.csv, workers.csv, run.json and host.json to this folder")
	var sweeps multiFlag
	fs.Var(&sweeps, "sweep", "run a grid: key=v1,v2,... (repeatable; one results folder per point under -o)")
	shardFlag := fs.String("shard", "", "run shard i/n of the sweep grid (1 <= i <= n); merge shards with mosaic merge")
	var only multiFlag
	fs.Var(&only, "policy", "run only this policy of the experiment, by label (repeatable; speedups are then over the first one given)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic sim [EXP.toml] [-o DIR] [--seed N] [--set key=value ...] [--sweep key=v1,v2,... ...] [--shard i/n]\n\nWithout a file it runs the built-in quick start.\n\n"+
			"examples:\n  mosaic sim experiments/paper/gpqa.toml -o out --seed 2\n"+
			"  mosaic sim experiments/examples/online-moa.toml -o sweep --sweep workload.arrival_rate=0.25,0.5,1")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *cpuProfile != "" && !parseOnly {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if len(sweeps) > 0 || *shardFlag != "" {
		if len(only) > 0 {
			return fmt.Errorf("%w: --policy selects policies of a single run; a sweep runs them all", errUsage)
		}
		return runSweep(pos, seed.value, *sets, sweeps, *shardFlag, *outDir, stdout)
	}
	exp, err := loadExperiment(pos, seed.value, *sets)
	if err != nil || parseOnly {
		return err
	}
	// A generated workload served online streams through the simulation (experiments.Sim).
	res, err := exp.ResolveSim()
	if err != nil {
		return err
	}
	if len(only) > 0 {
		if err := res.SelectPolicies(only); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	start := time.Now()
	var dir *results.Dir
	if *outDir != "" {
		// The folder is ours before anything runs: a second writer is refused at once.
		if dir, err = results.Open(*outDir, ""); err != nil {
			return err
		}
		defer dir.Close()
	}
	slog.Info("simulating", "experiment", res.Name, "file", exp.File(), "cluster", res.ClusterString(), "workers", res.NumWorkers(),
		"streamed", res.Streamed())
	if res.Streamed() {
		// A streamed run allocates each query's state afresh over a small live heap: what is
		// in flight (the queries' latencies are outside the heap, policies.Tally).
		roomForGarbage()
	}
	if res.Batch != nil {
		rep, err := res.RunBatch()
		if err != nil {
			return err
		}
		if *outDir != "" {
			if err := rep.WriteDir(*outDir); err != nil {
				return err
			}
			slog.Info("results written", "dir", *outDir, "files", "report.txt, requests.csv")
		}
		slog.Info("done", "wall", time.Since(start).Round(time.Millisecond))
		return rep.Write(stdout)
	}
	run, err := res.Run(context.Background(), newProgress(start), dir)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if err := run.WriteTable(stdout); err != nil {
		return err
	}
	if err := experiments.WritePlanChecks(stdout, run.PlanChecks(), res.Graph.Workload.Layers()); err != nil {
		return err
	}
	if dir != nil {
		host, _ := os.Hostname()
		err := run.WriteInto(dir, experiments.RunInfo{Version: version, Commit: commit()},
			experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
				Started: start.UTC().Format(time.RFC3339), WallS: wall.Seconds()})
		if err != nil {
			return err
		}
		slog.Info("results written", "dir", *outDir)
	}
	slog.Info("done", "wall", wall.Round(time.Millisecond))
	return nil
}

// runSweep runs a grid of variants of the experiment (or a shard of it).
func runSweep(pos []string, seed string, sets, sweeps []string, shardFlag, outDir string, stdout io.Writer) error {
	if outDir == "" {
		return fmt.Errorf("%w: a sweep needs -o DIR for its results folders", errUsage)
	}
	if len(sweeps) == 0 {
		return fmt.Errorf("%w: --shard needs --sweep", errUsage)
	}
	sw, err := experiments.ParseSweep(sweeps)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	shard, shards := 1, 1
	if shardFlag != "" {
		if shard, shards, err = experiments.ParseShard(shardFlag, os.Getenv); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	// The experiment is read once; each point resolves a copy of it, sharing with the other
	// points the workloads and files they have in common (experiments.Sweeper).
	sweeper, err := experiments.NewSweeper(func() (*experiments.Experiment, error) { return loadExperiment(pos, seed, sets) })
	if err != nil {
		return err
	}
	for _, p := range sw.Points() {
		if _, err := sweeper.Variant(p); err != nil {
			return fmt.Errorf("%w: --sweep point %s: %v", errUsage, p.Name, strings.TrimPrefix(err.Error(), "--set "))
		}
		if parseOnly {
			return nil
		}
	}
	// A sweep allocates fast over a small live heap (the runs of the few points in flight).
	roomForGarbage()
	// Check every point of the grid resolves before running any.
	if err := sweeper.Check(sw.Points()); err != nil {
		return err
	}
	start := time.Now()
	host, _ := os.Hostname()
	total := len(sw.Points())
	slog.Info("sweep", "points", total, "shard", fmt.Sprintf("%d/%d", shard, shards), "dir", outDir)
	overrides := slices.Clone(sets)
	if seed != "" {
		overrides = append([]string{"seed=" + seed}, overrides...)
	}
	err = sweeper.RunSweep(context.Background(), sw, shard, shards, overrides, outDir,
		experiments.RunInfo{Version: version, Commit: commit()},
		experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: start.UTC().Format(time.RFC3339)},
		func(done, n int) { slog.Info("sweep progress", "points_done", done, "points", n) })
	if err != nil {
		return err
	}
	st := sweeper.Stats()
	slog.Info("sweep done", "wall", time.Since(start).Round(time.Millisecond), "workloads_built", st.Workloads, "points_reusing_one", st.Reused,
		"policy_runs", st.Runs, "simulated", st.Simulated)
	return printSweep(filepath.Join(outDir, "summary.csv"), stdout)
}

// printSweep prints the combined summary of a sweep, one line per point and policy; an empty
// file prints nothing, and a file that does not read prints nothing but the error.
func printSweep(path string, stdout io.Writer) error {
	r, err := csvx.Open(path, csvx.Options{})
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Require("", "point", "policy", "e2e_s", "speedup_e2e", "aggregator_skipped", "median_e2el_s", "p99_e2el_s", "slo_attainment"); err != nil {
		return err
	}
	var out strings.Builder
	// Online points show their steady state (summary.csv's window_ columns): the load against
	// the cluster's capacity and the figures over the window; offline ones their makespan.
	online, offline := false, false
	for r.Next() {
		if r.Has("window_queries") && r.Str("window_queries") != "" {
			if !online {
				online = true
				fmt.Fprintf(&out, "%-44s %-16s %6s %5s %10s %10s %10s %8s %8s\n", "point (online: over each run's window)", "policy", "load", "over", "e2el_mean", "e2el_p50", "e2el_p99", "slo_met", "goodput")
			}
			over := ""
			if r.Str("overloaded") == "1" {
				over = "yes"
			}
			fmt.Fprintf(&out, "%-44s %-16s %6.2f %5s %10.1f %10.1f %10.1f %8s %8s\n", r.Str("point"), r.Str("policy"), num(r.Str("load")), over,
				num(r.Str("window_mean_e2el_s")), num(r.Str("window_median_e2el_s")), num(r.Str("window_p99_e2el_s")),
				percent(r.Str("window_slo_attainment")), cmp.Or(r.Str("window_goodput"), "-"))
			continue
		}
		if !offline {
			offline = true
			fmt.Fprintf(&out, "%-44s %-16s %10s %8s %8s %10s %10s %8s\n", "point", "policy", "e2e_s", "x_e2e", "skipped", "p50_e2el_s", "p99_e2el_s", "slo_met")
		}
		fmt.Fprintf(&out, "%-44s %-16s %10.1f %8s %8s %10.1f %10.1f %8s\n", r.Str("point"), r.Str("policy"), num(r.Str("e2e_s")),
			r.Str("speedup_e2e"), r.Str("aggregator_skipped"), num(r.Str("median_e2el_s")), num(r.Str("p99_e2el_s")), percent(r.Str("slo_attainment")))
	}
	if err := r.Err(); err != nil {
		return err
	}
	fmt.Fprintf(&out, "combined summary: %s\n", path)
	fmt.Fprint(stdout, out.String())
	return nil
}

// percent formats a share of a summary.csv we wrote as a percentage ("-" when it is none).
func percent(s string) string {
	if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) {
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return "-"
}

// num parses a number of a summary.csv we wrote (NaN if it is not one).
func num(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

func runMerge(args []string, stdout io.Writer) error {
	fs := newFlagSet("merge", flag.ContinueOnError)
	out := fs.String("o", "", "the merged sweep folder")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic merge SHARD_DIR... -o OUT\n\nMerges the folders of a sweep's shards (mosaic sim --sweep ... --shard i/n).")
		fs.PrintDefaults()
	}
	dirs, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 || *out == "" {
		return fmt.Errorf("%w: want shard folders and -o OUT", errUsage)
	}
	if parseOnly {
		return nil
	}
	if err := experiments.Merge(dirs, *out); err != nil {
		return err
	}
	return printSweep(filepath.Join(*out, "summary.csv"), stdout)
}

// loadExperiment reads the experiment named by the positional arguments (the built-in quick
// start when there are none) and applies --seed and --set.
func loadExperiment(pos []string, seed string, sets []string) (*experiments.Experiment, error) {
	var exp *experiments.Experiment
	var err error
	switch len(pos) {
	case 0:
		exp, err = experiments.Parse(experiments.QuickstartName, experiments.Quickstart)
	case 1:
		exp, err = experiments.Load(pos[0])
	default:
		return nil, fmt.Errorf("%w: want at most one experiment file, got %d", errUsage, len(pos))
	}
	if err != nil {
		return nil, err
	}
	if seed != "" {
		sets = append([]string{"seed=" + seed}, sets...)
	}
	for _, s := range sets {
		if err := exp.Set(s); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	return exp, nil
}

// newProgress reports progress on stderr every few seconds, once a run has taken more than a
// moment.
func newProgress(start time.Time) experiments.Progress {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(policy string, done, total int) {
		if done%256 != 0 && done < total {
			return // the clock is read every 256 calls: a large run finishes millions
		}
		now := time.Now()
		if now.Sub(start) < 2*time.Second {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if now.Sub(last[policy]) < 2*time.Second && done < total {
			return
		}
		last[policy] = now
		slog.Info("progress", "policy", policy, "calls_done", done, "calls_total", total)
	}
}

// roomForGarbage lets the heap grow to three times what is live (GOGC=200) unless GOGC is
// set, for a run that allocates fast over a small live heap: at the collector's default pace
// (GOGC=100) a sweep spent some 14% more CPU, and a streamed run of 10 million online queries
// 4% more (306 s against 293 s), collecting (docs/performance.md).
func roomForGarbage() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}

// startCPUProfile starts writing a CPU profile to path; the returned function stops it and
// closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			slog.Warn("writing the CPU profile", "file", path, "err", err)
		}
	}, nil
}

// commit is the VCS revision the binary was built from, if known.
func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return commitFlag
}
