package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/results"
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

// fasterMoAPaper are the same reductions as fractions, for the sensitivity analysis's
// reference lines; "exit" has none (the paper reports early exit alone, not on the tree).
var fasterMoAPaper = map[string]float64{"plain": 0.62, "overlap": 0.76, "overlap+exit": 0.90}

// runFasterMoA runs a tree experiment's first policy on the dense graph, then every policy on
// the tree, and prints the mean latency reductions beside Faster-MoA's; with --sensitivity it
// does so for each unpublished assumption at the ends of its range.
func runFasterMoA(args []string, stdout io.Writer) error {
	fs := newFlagSet("faster-moa", flag.ContinueOnError)
	seed, sets := experimentFlags(fs)
	sens := fs.Bool("sensitivity", false, "move each unpublished assumption of the setup to the ends of its range and report every technique's reduction (seeds 1..--seeds); -o writes sensitivity.csv for mosaic plot")
	seeds := fs.Int("seeds", 3, "with --sensitivity: run every variant with seeds 1..N")
	out := fs.String("o", "", "with --sensitivity: folder for sensitivity.csv (mosaic plot FOLDER draws a tornado chart per technique)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic faster-moa [EXP.toml] [--seed N] [--set key=value ...] [--sensitivity [--seeds 3] [-o DIR]]

Runs a tree experiment's first policy on the dense graph (workload.dense = true: every layer
but the last as wide as the first, each node reading every node below), then every policy on
the tree, and prints each one's mean per-query latency and its reduction over the dense graph
beside Faster-MoA's reported figures (policies labelled plain, overlap, exit,
overlap+exit). Default: experiments/examples/faster-moa.toml.

With --sensitivity, moves each assumption the paper does not publish (what a layer forwards,
the agents' output lengths and their tail, the load, the engine) to the low and high end of its
range, one at a time, and prints every technique's mean reduction over the seeds beside the
paper's: which assumption explains which gap.

example:
  mosaic faster-moa experiments/examples/faster-moa.toml --seed 2
  mosaic faster-moa --sensitivity -o out/faster-moa && mosaic plot out/faster-moa`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		pos = []string{"experiments/examples/faster-moa.toml"}
	}
	if *seeds < 1 {
		return fmt.Errorf("%w: --seeds must be positive, got %d", errUsage, *seeds)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if (given["o"] || given["seeds"]) && !*sens {
		return fmt.Errorf("%w: --seeds and -o are for --sensitivity", errUsage)
	}
	if given["seed"] && *sens {
		return fmt.Errorf("%w: --sensitivity runs seeds 1..--seeds; --seed is for the single comparison", errUsage)
	}
	if parseOnly {
		_, err := loadExperiment(pos, seed.value, *sets)
		return err
	}
	if *sens {
		return fasterMoASensitivity(stdout, pos, *sets, *seeds, *out)
	}
	c, err := fasterMoACompare(pos, seed.value, *sets)
	if err != nil {
		return err
	}
	base := c.dense.Summaries[0]
	fmt.Fprintf(stdout, "Faster-MoA's techniques (arXiv 2512.18126) on %s: %s, %d queries, seed %d\n", c.tree.Experiment.Name,
		describeCluster(c.tree.Experiment), len(c.tree.Experiment.Graph.Workload.Queries), base.Seed)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "graph\tpolicy\tmean_e2el_s\tp99_e2el_s\taccuracy\tcancelled\treduction\tpaper\t")
	fmt.Fprintf(tw, "dense\t%s\t%.1f\t%.1f\t%.4f\t%d\t-\t-\t\n", base.Policy, base.MeanE2ELS, base.P99E2ELS, base.Accuracy, base.CancelledCalls)
	for _, s := range c.tree.Summaries {
		paper := fasterMoAFigures[s.Policy]
		if paper == "" {
			paper = "-"
		}
		fmt.Fprintf(tw, "tree\t%s\t%.1f\t%.1f\t%.4f\t%d\t%.1f%%\t%s\t\n", s.Policy, s.MeanE2ELS, s.P99E2ELS, s.Accuracy, s.CancelledCalls,
			100*c.reduction(s), paper)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	gap := false
	for _, s := range c.tree.Summaries {
		if p, ok := fasterMoAPaper[s.Policy]; ok && math.Abs(c.reduction(s)-p) > 0.10 {
			gap = true
		}
	}
	if gap {
		fmt.Fprintln(stdout, "More than 10 pp from the paper: the assumptions it does not publish explain the gaps; mosaic faster-moa --sensitivity\n"+
			"moves each one (table and tornado charts; results in docs/policies.md, \"Faster-MoA's shape\").")
	}
	return nil
}

// fasterMoARuns is one comparison: the first policy on the dense graph, every policy on the tree.
type fasterMoARuns struct{ dense, tree *experiments.Run }

// reduction is a tree policy's reduction of the mean per-query latency over the dense graph.
func (c fasterMoARuns) reduction(s results.SummaryRow) float64 {
	return 1 - s.MeanE2ELS/c.dense.Summaries[0].MeanE2ELS
}

// fasterMoACompare simulates the experiment of pos (with sets) on the dense graph, its first
// policy, and on the tree, every policy.
func fasterMoACompare(pos []string, seed string, sets []string) (fasterMoARuns, error) {
	run := func(dense bool) (*experiments.Run, error) {
		exp, err := loadExperiment(pos, seed, sets)
		if err != nil {
			return nil, err
		}
		// The kind first: workload.dense applies to trees only.
		if exp.Workload.Kind != experiments.KindTree {
			return nil, fmt.Errorf("%w: %s: mosaic faster-moa needs a workload of kind \"tree\", not %q", errUsage, exp.File(), exp.Workload.Kind)
		}
		if err := exp.Set(fmt.Sprintf("workload.dense=%v", dense)); err != nil {
			return nil, err
		}
		res, err := exp.Resolve()
		if err != nil {
			return nil, err
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
		slog.Debug("simulating", "graph", map[bool]string{true: "dense", false: "tree"}[dense], "policies", len(res.Graph.Policies))
		return res.Simulate(context.Background(), newProgress(start))
	}
	dense, err := run(true)
	if err != nil {
		return fasterMoARuns{}, err
	}
	tree, err := run(false)
	if err != nil {
		return fasterMoARuns{}, err
	}
	return fasterMoARuns{dense: dense, tree: tree}, nil
}

// fasterMoAAssumptions are the inputs of a Faster-MoA comparison the paper does not publish,
// each with the low and high end of its range (--set assignments for every model of exp):
// what a downstream agent reads of each input (the answer alone, 150 tokens, to the whole
// output), the agents' output lengths (x0.5 to x1.5 of the measured thinking-mode means), the
// tail of those lengths (p99 at 2x to 8x the mean), the load (one query per 400 s to one per
// 50 s) and the engine (the paper ran vLLM 0.11 and SGLang 0.5.3): no CPU overheads (an engine
// that hides them behind the GPU, as asynchronous scheduling does) to the vllm-v1 preset's
// (fitted on vLLM 0.9-0.10 without it; its chunked-prefill budget too).
func fasterMoAAssumptions(exp *experiments.Experiment) []experiments.Assumption {
	perModel := func(f func(i int, m experiments.Model) []string) (out []string) {
		for i, m := range exp.Models {
			if m.OutputTokens != nil {
				out = append(out, f(i, m)...)
			}
		}
		return out
	}
	key := func(i int, k string) string { return fmt.Sprintf("model[%d].%s", i, k) }
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	forward := func(mean, p99, maxTokens float64) func(int, experiments.Model) []string {
		return func(i int, _ experiments.Model) []string {
			return []string{key(i, "forward_tokens.dist") + "=lognormal", key(i, "forward_tokens.mean=") + num(mean),
				key(i, "forward_tokens.p99=") + num(p99), key(i, "forward_tokens.max=") + num(maxTokens)}
		}
	}
	whole := func(i int, m experiments.Model) []string {
		o := m.OutputTokens
		return []string{key(i, "forward_tokens.dist") + "=lognormal", key(i, "forward_tokens.mean=") + num(o.Mean),
			key(i, "forward_tokens.p99=") + num(o.P99), key(i, "forward_tokens.max=") + num(float64(o.Max))}
	}
	scale := func(f float64) func(int, experiments.Model) []string {
		return func(i int, m experiments.Model) []string {
			o := m.OutputTokens
			return []string{key(i, "output_tokens.mean=") + num(o.Mean*f), key(i, "output_tokens.p99=") + num(o.P99*f),
				key(i, "output_tokens.max=") + num(float64(o.Max)*max(f, 1))}
		}
	}
	tail := func(k float64) func(int, experiments.Model) []string {
		return func(i int, m experiments.Model) []string {
			o := m.OutputTokens
			// The cap rises with the tail, to 24,576 tokens: what the 32B agent's KV cache share
			// (gpu_memory_utilization 0.5 of an H200) holds with a prompt.
			return []string{key(i, "output_tokens.p99=") + num(o.Mean*k), key(i, "output_tokens.max=") + num(max(float64(o.Max), min(1.5*o.Mean*k, 24576)))}
		}
	}
	return []experiments.Assumption{
		{Name: "forwarded tokens", Low: perModel(forward(150, 600, 2048)), High: perModel(whole), LowLabel: "answer, 150", HighLabel: "whole output"},
		{Name: "agent output length", Low: perModel(scale(0.5)), High: perModel(scale(1.5)), LowLabel: "x0.5", HighLabel: "x1.5"},
		{Name: "output length tail", Low: perModel(tail(2)), High: perModel(tail(8)), LowLabel: "p99 2x mean", HighLabel: "p99 8x mean"},
		{Name: "load", Low: []string{"workload.arrival_rate=0.0025"}, High: []string{"workload.arrival_rate=0.02"}, LowLabel: "1 per 400 s", HighLabel: "1 per 50 s"},
		{Name: "engine", Low: []string{"engine.iteration_overhead_ms=0", "engine.per_seq_overhead_ms=0"}, High: []string{"engine.preset=vllm-v1"},
			LowLabel: "no CPU overheads", HighLabel: "vllm-v1 preset"},
	}
}

// fasterMoASensitivity runs the comparison for the file as it is and for each assumption at
// each end of its range, seeds 1..seeds, and prints each technique's mean reduction; with out
// it writes out/sensitivity.csv, one tornado "experiment" per technique whose speedup is the
// dense graph's mean latency over the tree's (1 / (1 - reduction)).
func fasterMoASensitivity(stdout io.Writer, pos, sets []string, seeds int, out string) error {
	exp, err := loadExperiment(pos, "", sets)
	if err != nil {
		return err
	}
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil { // before the runs, not after
			return err
		}
	}
	as := fasterMoAAssumptions(exp)
	vs := []fasterMoAVariant{{side: "base", note: "as in the file"}}
	for _, a := range as {
		vs = append(vs, fasterMoAVariant{a, "low", a.LowLabel, a.Low}, fasterMoAVariant{a, "high", a.HighLabel, a.High})
	}
	var rows []results.SensitivityRow
	var labels []string
	mean := map[int]map[string]float64{} // variant -> policy -> mean reduction over the seeds
	start := time.Now()
	for vi, v := range vs {
		mean[vi] = map[string]float64{}
		for sd := 1; sd <= seeds; sd++ {
			c, err := fasterMoACompare(pos, strconv.Itoa(sd), append(append([]string(nil), sets...), v.assign...))
			if err != nil {
				return fmt.Errorf("%s %s (%s), seed %d: %w", v.a.Name, v.side, v.note, sd, err)
			}
			if labels == nil {
				for _, s := range c.tree.Summaries {
					labels = append(labels, s.Policy)
				}
			}
			for _, s := range c.tree.Summaries {
				r := c.reduction(s)
				mean[vi][s.Policy] += r / float64(seeds)
				paper, ok := fasterMoAPaper[s.Policy]
				ref := math.NaN()
				if ok {
					ref = 1 / (1 - paper)
				}
				rows = append(rows, results.SensitivityRow{Experiment: exp.Name + " " + s.Policy, Assumption: v.a.Name, Side: v.side, Setting: v.note,
					Seed: uint64(sd), SpeedupExpert: math.NaN(), SpeedupAggregator: math.NaN(),
					SpeedupE2E: c.dense.Summaries[0].MeanE2ELS / s.MeanE2ELS, PaperE2E: ref})
			}
		}
		slog.Info("faster-moa sensitivity", "variant", vi+1, "of", len(vs), "elapsed", time.Since(start).Round(time.Millisecond))
	}
	if err := writeFasterMoASensitivity(stdout, exp.Name, seeds, vs, labels, mean); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	var b bytes.Buffer
	if err := results.WriteCSV(&b, results.SensitivityHeader, rows); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(out, "sensitivity.csv")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	slog.Info("written", "file", path)
	return nil
}

// describeCluster is "6 x H200".
func describeCluster(r *experiments.Resolved) string {
	return fmt.Sprintf("%d x %s", r.Cluster.Workers, r.GPU.Name)
}

// fasterMoAVariant is one variant of the sensitivity analysis: an assumption at one side of
// its range (the base: none), with its --set assignments.
type fasterMoAVariant struct {
	a          experiments.Assumption
	side, note string
	assign     []string
}

// writeFasterMoASensitivity prints each variant's mean reduction per technique (labels) over
// the seeds, and the paper's figures.
func writeFasterMoASensitivity(stdout io.Writer, name string, seeds int, vs []fasterMoAVariant, labels []string, mean map[int]map[string]float64) error {
	fmt.Fprintf(stdout, "Faster-MoA's reductions of the mean latency over the dense graph, %s, mean of seeds 1-%d; each assumption moved alone\n", name, seeds)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "assumption\tside\tsetting")
	for _, l := range labels {
		fmt.Fprintf(tw, "\t%s", l)
	}
	fmt.Fprintln(tw)
	for vi, v := range vs {
		name := v.a.Name
		if v.side == "base" {
			name = "(base)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s", name, v.side, v.note)
		for _, l := range labels {
			fmt.Fprintf(tw, "\t%.1f%%", 100*mean[vi][l])
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "Faster-MoA\t\t")
	for _, l := range labels {
		fmt.Fprintf(tw, "\t%s", orDefault(fasterMoAFigures[l], "-"))
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
