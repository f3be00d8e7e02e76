package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

// fasterMoAFigures are Faster-MoA's reported end-to-end latency reductions over the dense
// graph (arXiv 2512.18126; PAPERS.md §2), by the policy labels of
// experiments/examples/faster-moa.toml.
var fasterMoAFigures = map[string]string{
	"plain":        "~62% (tree)",
	"overlap":      "~76% (tree + overlap)",
	"exit":         "10-50% (exit alone)",
	"overlap+exit": "~90% (all three)",
}

// runFasterMoA runs a tree experiment's first policy on the dense graph, then every policy on
// the tree, and prints the mean latency reductions beside Faster-MoA's.
func runFasterMoA(args []string, stdout io.Writer) error {
	fs := newFlagSet("faster-moa", flag.ContinueOnError)
	seed, sets := experimentFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic faster-moa [EXP.toml] [--seed N] [--set key=value ...]

Runs a tree experiment's first policy on the dense graph (workload.dense = true: every layer
but the last as wide as the first, each node reading every node below), then every policy on
the tree, and prints each one's mean per-query latency and its reduction over the dense graph
beside Faster-MoA's reported figures (policies labelled plain, overlap, exit,
overlap+exit). Default: experiments/examples/faster-moa.toml.

example:
  mosaic faster-moa experiments/examples/faster-moa.toml --seed 2`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		pos = []string{"experiments/examples/faster-moa.toml"}
	}
	if parseOnly {
		_, err := loadExperiment(pos, seed.value, *sets)
		return err
	}
	run := func(dense bool) (*experiments.Run, error) {
		exp, err := loadExperiment(pos, seed.value, append([]string{fmt.Sprintf("workload.dense=%v", dense)}, *sets...))
		if err != nil {
			return nil, err
		}
		res, err := exp.Resolve()
		if err != nil {
			return nil, err
		}
		if res.Graph == nil || res.Graph.Kind != experiments.KindTree {
			return nil, fmt.Errorf("%w: %s: mosaic faster-moa needs a workload of kind \"tree\"", errUsage, exp.File())
		}
		if res.Graph.Workload.Queries[len(res.Graph.Workload.Queries)-1].Arrival == 0 {
			slog.Warn("the workload is an offline batch: Faster-MoA measures per-request latency at low load (set workload.arrival_rate)")
		}
		if dense {
			if err := res.SelectPolicies([]string{res.Graph.Policies[0].Label}); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		slog.Info("simulating", "graph", map[bool]string{true: "dense", false: "tree"}[dense], "policies", len(res.Graph.Policies))
		r, err := res.Simulate(context.Background(), newProgress(start))
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	dense, err := run(true)
	if err != nil {
		return err
	}
	tree, err := run(false)
	if err != nil {
		return err
	}
	base := dense.Summaries[0]
	fmt.Fprintf(stdout, "Faster-MoA's techniques (arXiv 2512.18126) on %s: %s, %d queries, seed %d\n", tree.Experiment.Name,
		describeCluster(tree.Experiment), len(tree.Experiment.Graph.Workload.Queries), base.Seed)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "graph\tpolicy\tmean_e2el_s\tp99_e2el_s\taccuracy\tcancelled\treduction\tpaper\t")
	fmt.Fprintf(tw, "dense\t%s\t%.1f\t%.1f\t%.4f\t%d\t-\t-\t\n", base.Policy, base.MeanE2ELS, base.P99E2ELS, base.Accuracy, base.CancelledCalls)
	for _, s := range tree.Summaries {
		paper := fasterMoAFigures[s.Policy]
		if paper == "" {
			paper = "-"
		}
		fmt.Fprintf(tw, "tree\t%s\t%.1f\t%.1f\t%.4f\t%d\t%.1f%%\t%s\t\n", s.Policy, s.MeanE2ELS, s.P99E2ELS, s.Accuracy, s.CancelledCalls,
			100*(1-s.MeanE2ELS/base.MeanE2ELS), paper)
	}
	return tw.Flush()
}

// describeCluster is "6 x H200".
func describeCluster(r *experiments.Resolved) string {
	return fmt.Sprintf("%d x %s", r.Cluster.Workers, r.GPU.Name)
}
