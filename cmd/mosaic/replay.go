package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runReplay(args []string, stdout io.Writer) error {
	fs := newFlagSet("replay", flag.ContinueOnError)
	outDir := fs.String("o", "", "results folder (required): calls.csv grows as calls complete")
	resume := fs.Bool("resume", false, "continue an interrupted replay in -o DIR without redoing finished calls")
	allowFailed := fs.Bool("allow-failed-calls", false, "when calls fail, compute the figures over the queries that completed under every policy (status partial) and exit 0, instead of leaving them out and exiting 1")
	seed, sets := experimentFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic replay EXP.toml -o DIR [--resume] [--allow-failed-calls] [--seed N] [--set key=value ...]\n\n"+
			"Runs the experiment's policies, one after another, on the inference servers its [replay] table names\n"+
			"(attach) or launches (launch), and writes the results in the simulator's schema. A policy with a\n"+
			"failed call gets status failed in summary.csv, no speedup or accuracy is computed for it or against\n"+
			"it, and the command exits 1 (--resume retries the failed calls).")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one experiment file", errUsage)
	}
	if *outDir == "" {
		return fmt.Errorf("%w: -o DIR is required (results are written as calls complete)", errUsage)
	}
	exp, err := loadExperiment(pos, seed.value, *sets)
	if err != nil || parseOnly {
		return err
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	warnSimulatedEngine(exp, res)
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	start := time.Now()
	host, _ := os.Hostname()
	run, err := res.Replay(ctx, experiments.ReplayOptions{
		Dir: *outDir, Resume: *resume, AllowFailedCalls: *allowFailed,
		Command:   "mosaic replay " + strings.Join(args, " "),
		Info:      experiments.RunInfo{Version: version, Commit: commit()},
		Host:      experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: start.UTC().Format(time.RFC3339)},
		Telemetry: startTelemetry,
		Progress:  newReplayProgress(start, 5*time.Second),
	})
	if run == nil {
		return err
	}
	slog.Info("replay done", "dir", *outDir, "wall", time.Since(start).Round(time.Millisecond))
	if terr := run.WriteTable(stdout); terr != nil {
		return terr
	}
	if errors.Is(err, experiments.ErrFailedCalls) {
		return fmt.Errorf("calls failed (summary.csv: status failed; calls.csv: their errors): the figures of those policies are not results; rerun with --resume to retry them, or with --allow-failed-calls to compare over the queries that completed")
	}
	return err
}

// warnSimulatedEngine notes, for a replay of real servers (attached, or launched by a command
// other than the emulator), that
// an experiment naming no engine preset is simulated with vLLM 0.6's fitted CPU overheads,
// which over-predict a vLLM V1 server's steps at high batch by about half
// (docs/calibration.md): the side-by-side comparison wants [engine] preset = "vllm-v1".
func warnSimulatedEngine(exp *experiments.Experiment, res *experiments.Resolved) {
	if note := simulatedEngineNote(exp, res); note != "" {
		slog.Warn(note, "file", exp.File())
	}
}

// simulatedEngineNote is warnSimulatedEngine's message, or "" when it has none to give.
func simulatedEngineNote(exp *experiments.Experiment, res *experiments.Resolved) string {
	if res.Preset != nil || (exp.Replay.Mode != "attach" && strings.Contains(exp.Replay.Command, " emulate")) {
		return ""
	}
	return `the experiment names no engine preset: mosaic sim predicts it with vLLM 0.6's CPU overheads; to compare with vllm serve of vLLM 0.8 or later, set [engine] preset = "vllm-v1"`
}

// newReplayProgress reports each policy's calls done, the total, the elapsed time and the
// rate, on stderr every interval at most (a replay runs in real time: minutes to hours).
func newReplayProgress(start time.Time, every time.Duration) experiments.Progress {
	var mu sync.Mutex
	type state struct {
		began, last time.Time
	}
	seen := map[string]*state{}
	return func(policy string, done, total int) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		st := seen[policy]
		if st == nil {
			st = &state{began: now, last: now}
			seen[policy] = st
		}
		if now.Sub(st.last) < every && done < total {
			return
		}
		st.last = now
		elapsed := now.Sub(st.began)
		rate := 0.0
		if elapsed > 0 {
			rate = float64(done) / elapsed.Seconds()
		}
		slog.Info("replay progress", "policy", policy, "calls_done", done, "calls_total", total,
			"elapsed", elapsed.Round(time.Second), "calls_per_s", fmt.Sprintf("%.2f", rate), "run_elapsed", now.Sub(start).Round(time.Second))
	}
}
