package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runSim(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	seed := fs.Int64("seed", -1, "override the experiment's seed")
	var sets multiFlag
	fs.Var(&sets, "set", "override a key of the experiment, key=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic sim [EXP.toml] [--seed N] [--set key=value ...]\n\nWithout a file it runs the built-in quick start.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var exp *experiments.Experiment
	switch len(pos) {
	case 0:
		exp, err = experiments.Parse(experiments.QuickstartName, experiments.Quickstart)
	case 1:
		exp, err = experiments.Load(pos[0])
	default:
		return fmt.Errorf("%w: want at most one experiment file, got %d", errUsage, len(pos))
	}
	if err != nil {
		return err
	}
	if *seed >= 0 {
		exp.Seed = uint64(*seed)
	}
	for _, s := range sets {
		if err := exp.Set(s); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	start := time.Now()
	slog.Info("simulating", "experiment", res.Name, "file", exp.File(), "gpu", res.GPU.Name, "workers", res.Cluster.Workers)
	rep, err := res.RunBatch()
	if err != nil {
		return err
	}
	slog.Info("done", "wall", time.Since(start).Round(time.Millisecond))
	return rep.Write(stdout)
}
