package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runPlan(args []string, stdout io.Writer) error {
	fs := newFlagSet("plan", flag.ContinueOnError)
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
	if err != nil || parseOnly {
		return err
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	plans, err := res.PlanPreview(context.Background(), *policy)
	if err != nil {
		return err
	}
	wl := res.Graph.Workload
	fmt.Fprintf(stdout, "experiment %s: %s, %d queries, %d calls in %d layers\n", res.Name, res.ClusterString(),
		len(wl.Queries), wl.NumCalls(), wl.Layers())
	if err := res.WriteWorkers(stdout); err != nil {
		return err
	}
	for _, sp := range plans {
		if sp == nil {
			continue
		}
		calls := 0
		for _, it := range sp.Problem.Items {
			calls += it.Calls
		}
		what := "planned at the start"
		if sp.Layer > 0 {
			what = fmt.Sprintf("planned at its barrier, %.1f s, on the calls the rule left, with the models the workers held", sp.Start.Seconds())
		}
		fmt.Fprintf(stdout, "\n%s (layer %d, %d calls; %s)\n", experiments.StageName(sp.Layer, wl.Layers()), sp.Layer, calls, what)
		if err := experiments.WritePlan(stdout, sp, res.Hardware()); err != nil {
			return err
		}
	}
	return nil
}
