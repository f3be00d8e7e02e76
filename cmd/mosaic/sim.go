package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runSim(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	seed, sets := experimentFlags(fs)
	outDir := fs.String("o", "", "write summary.csv, calls.csv, workers.csv, run.json and host.json to this folder")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic sim [EXP.toml] [-o DIR] [--seed N] [--set key=value ...]\n\nWithout a file it runs the built-in quick start.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	exp, err := loadExperiment(pos, *seed, *sets)
	if err != nil {
		return err
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	start := time.Now()
	slog.Info("simulating", "experiment", res.Name, "file", exp.File(), "gpu", res.GPU.Name, "workers", res.Cluster.Workers)
	if res.Batch != nil {
		rep, err := res.RunBatch()
		if err != nil {
			return err
		}
		slog.Info("done", "wall", time.Since(start).Round(time.Millisecond))
		return rep.Write(stdout)
	}
	run, err := res.Simulate(context.Background(), newProgress(start))
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if err := run.WriteTable(stdout); err != nil {
		return err
	}
	if err := experiments.WritePlanChecks(stdout, run.PlanChecks()); err != nil {
		return err
	}
	if *outDir != "" {
		host, _ := os.Hostname()
		err := run.WriteDir(*outDir, experiments.RunInfo{Version: version, Commit: commit()},
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

// loadExperiment reads the experiment named by the positional arguments (the built-in quick
// start when there are none) and applies --seed and --set.
func loadExperiment(pos []string, seed int64, sets []string) (*experiments.Experiment, error) {
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
	if seed >= 0 {
		exp.Seed = uint64(seed)
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
