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
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/plots"
	"github.com/mosaic-sched/mosaic/results"
)

func runSensitivity(args []string, stdout io.Writer) error {
	fs := newFlagSet("sensitivity", flag.ContinueOnError)
	seeds := fs.Int("seeds", 3, "run every variant with seeds 1..N (the same seeds for all)")
	policy := fs.String("policy", "mosaic", "the policy (label) whose speedups are measured")
	out := fs.String("o", "out/sensitivity", "folder for the runs and sensitivity.csv")
	ref := fs.String("reference", "", "the paper's figures, for the reference line (default: the built-in ones)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic sensitivity [--seeds 3] [--policy mosaic] [-o DIR] [EXPERIMENT.toml]...

Moves each assumption of a MoA experiment to the low and the high end of its plausible range
(reasoning and instruction output lengths, the aggregator's, routing skew, model load time,
max_num_seqs), one at a time, and reports the policy's speedups over the baseline. Writes
DIR/sensitivity.csv; 'mosaic plot DIR' draws a tornado chart per experiment. Without arguments:
the three experiments of experiments/paper/.`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if pos, err = paperInputs(pos, *seeds, "experiment files"); err != nil {
		return err
	}
	refs, err := experiments.LoadReferences(*ref)
	if err != nil || parseOnly {
		return err
	}
	host, _ := os.Hostname()
	var all []results.SensitivityRow
	for _, path := range pos {
		load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
		e, err := load()
		if err != nil {
			return err
		}
		as, err := e.Assumptions()
		if err != nil {
			return err
		}
		paper := math.NaN()
		for _, r := range refs {
			if r.Experiment == e.Name {
				paper = r.SpeedupE2E
			}
		}
		start := time.Now()
		dir := filepath.Join(*out, strings.TrimSuffix(filepath.Base(path), ".toml"))
		slog.Info("sensitivity", "experiment", e.Name, "assumptions", len(as), "seeds", *seeds, "runs", (2*len(as)+1)**seeds, "dir", dir)
		rows, err := experiments.RunSensitivity(context.Background(), load, as, *seeds, *policy, dir, paper,
			experiments.RunInfo{Version: version, Commit: commit()},
			experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: start.UTC().Format(time.RFC3339)},
			func(done, total int) {
				if done%10 == 0 || done == total {
					slog.Info("sensitivity progress", "experiment", e.Name, "runs_done", done, "runs", total)
				}
			})
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		slog.Info("sensitivity done", "experiment", e.Name, "wall", time.Since(start).Round(time.Millisecond))
		all = append(all, rows...)
	}
	var b bytes.Buffer
	if err := results.WriteCSV(&b, results.SensitivityHeader, all); err != nil {
		return err
	}
	path := filepath.Join(*out, "sensitivity.csv")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	slog.Info("written", "file", path)
	return writeSensitivityTable(stdout, all)
}

// writeSensitivityTable prints, per experiment and assumption, the mean end-to-end speedup
// over the seeds at the low end, the base and the high end.
func writeSensitivityTable(w io.Writer, rows []results.SensitivityRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "experiment\tassumption\tlow\tx_e2e low\tx_e2e base\tx_e2e high\thigh\tswing")
	for _, t := range plots.TornadoData(rows) {
		for _, b := range t.Bars {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t%.2f\n", t.Experiment, b.Assumption, b.LowSetting, b.Low, t.Base, b.High, b.HighSetting, b.Swing(t.Base))
		}
		if !math.IsNaN(t.Paper) {
			fmt.Fprintf(tw, "%s\tthe paper's end-to-end speedup\t\t\t%.2f\t\t\t\n", t.Experiment, t.Paper)
		}
	}
	return tw.Flush()
}
