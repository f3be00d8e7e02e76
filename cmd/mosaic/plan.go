package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runPlan(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	policy := fs.String("policy", "", "the policy (label) whose plan to show (default: the first mosaic policy)")
	seed, sets := experimentFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic plan EXP.toml [--policy mosaic] [--seed N] [--set key=value ...]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one experiment file", errUsage)
	}
	exp, err := loadExperiment(pos, seed.value, *sets)
	if err != nil {
		return err
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	ex, ag, err := res.PlanPreview(context.Background(), *policy)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "experiment %s: %d x %s, %d queries\n\nexpert stage (%d calls)\n", res.Name, res.Cluster.Workers, res.GPU.Name,
		len(res.MoA.Workload.Queries), len(res.MoA.Workload.Queries)*res.MoA.Workload.ExpertsPerQuery())
	if err := experiments.WritePlan(stdout, ex); err != nil {
		return err
	}
	if ag != nil {
		fmt.Fprintf(stdout, "\naggregator stage (%d calls after skipping; from the barrier, the aggregator loaded where it served as an expert)\n", ag.Problem.Items[0].Calls)
		return experiments.WritePlan(stdout, ag)
	}
	return nil
}
