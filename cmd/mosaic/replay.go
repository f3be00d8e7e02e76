package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runReplay(args []string, stdout io.Writer) error {
	fs := newFlagSet("replay", flag.ContinueOnError)
	outDir := fs.String("o", "", "results folder (required): calls.csv grows as calls complete")
	resume := fs.Bool("resume", false, "continue an interrupted replay in -o DIR without redoing finished calls")
	seed, sets := experimentFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic replay EXP.toml -o DIR [--resume] [--seed N] [--set key=value ...]\n\n"+
			"Runs the experiment's policies, one after another, on the inference servers its [replay] table names\n"+
			"(attach) or launches (launch), and writes the results in the simulator's schema.")
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
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	start := time.Now()
	host, _ := os.Hostname()
	run, err := res.Replay(ctx, experiments.ReplayOptions{
		Dir: *outDir, Resume: *resume,
		Info:      experiments.RunInfo{Version: version, Commit: commit()},
		Host:      experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: start.UTC().Format(time.RFC3339)},
		Telemetry: startTelemetry,
	})
	if err != nil {
		return err
	}
	slog.Info("replay done", "dir", *outDir, "wall", time.Since(start).Round(time.Millisecond))
	return run.WriteTable(stdout)
}
