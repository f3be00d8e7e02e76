package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
)

// paperExperiments are the paper's experiment files, relative to the repository root.
var paperExperiments = []string{"experiments/paper/mmlu-pro.toml", "experiments/paper/medmcqa.toml", "experiments/paper/gpqa.toml"}

func runPaper(args []string, stdout io.Writer) error {
	fs := newFlagSet("paper", flag.ContinueOnError)
	ref := fs.String("reference", "", "the paper's figures (default: the built-in experiments/reference/mosaic-paper.toml)")
	out := fs.String("o", "", "also write the table (markdown) to this file")
	seeds := fs.Int("seeds", 5, "simulate each experiment file with seeds 1..N")
	results := fs.String("results", "out/paper", "where the simulated runs go (one sweep folder per experiment), with paper.csv")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic paper [--seeds 5] [--results DIR] [-o table.md] [EXPERIMENT.toml | RESULTS_DIR]...

Compares the paper experiments with the paper's reported figures: for every figure, our mean,
standard deviation and range over the seeds next to the paper's number, and whether the mean is
within the target (speedups 15%, accuracy changes 1 pp, skip rates 2 pp). Experiment files are
simulated with seeds 1..N first; results folders (of a run or of a seed sweep) are read as they
are. Without arguments: the three experiments of experiments/paper/.`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if pos, err = paperInputs(pos, *seeds, "experiment files or results folders"); err != nil {
		return err
	}
	refs, err := experiments.LoadReferences(*ref)
	if err != nil || parseOnly {
		return err
	}
	var dirs []string
	for _, p := range pos {
		if !strings.HasSuffix(p, ".toml") {
			dirs = append(dirs, p)
			continue
		}
		dir := filepath.Join(*results, strings.TrimSuffix(filepath.Base(p), ".toml"))
		if err := simulateSeeds(p, *seeds, dir); err != nil {
			return err
		}
		dirs = append(dirs, dir)
	}
	rows, err := experiments.ReadPaperRows(dirs)
	if err != nil {
		return err
	}
	figs, err := experiments.PaperFigures(refs, rows)
	if err != nil {
		return fmt.Errorf("%w in %s", err, strings.Join(dirs, ", "))
	}
	var b bytes.Buffer
	if err := experiments.PaperTable(&b, figs); err != nil {
		return err
	}
	if err := saveTable(*out, b.Bytes()); err != nil {
		return err
	}
	if len(dirs) > 0 && len(pos) > 0 && strings.HasSuffix(pos[0], ".toml") {
		var c bytes.Buffer
		if err := experiments.WritePaperCSV(&c, figs); err != nil {
			return err
		}
		path := filepath.Join(*results, "paper.csv")
		if err := os.WriteFile(path, c.Bytes(), 0o644); err != nil {
			return err
		}
		slog.Info("per-seed figures written", "file", path)
	}
	_, err = stdout.Write(b.Bytes())
	return err
}

// saveTable writes a command's table (markdown) to path, as its -o asks ("": nowhere).
func saveTable(path string, table []byte) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, table, 0o644); err != nil {
		return err
	}
	slog.Info("table written", "file", path)
	return nil
}

// paperInputs checks --seeds and defaults the positional arguments to the paper's experiment
// files (what names the arguments the command takes instead, for the error).
func paperInputs(pos []string, seeds int, what string) ([]string, error) {
	if seeds < 1 {
		return nil, fmt.Errorf("%w: --seeds must be at least 1, got %d", errUsage, seeds)
	}
	if len(pos) > 0 {
		return pos, nil
	}
	for _, p := range paperExperiments {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %s not found: run from the repository root, or name the %s", errUsage, p, what)
		}
	}
	return paperExperiments, nil
}

// simulateSeeds runs an experiment file with seeds 1..n as a seed sweep into dir.
func simulateSeeds(path string, n int, dir string) error {
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i + 1)
	}
	sw, err := experiments.ParseSweep([]string{"seed=" + strings.Join(vals, ",")})
	if err != nil {
		return err
	}
	load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
	e, err := load()
	if err != nil {
		return err
	}
	if _, err := e.Resolve(); err != nil {
		return err
	}
	slog.Info("simulating", "experiment", path, "seeds", n, "dir", dir)
	return sweepInto(path, e.Name, load, sw, dir)
}

// sweepInto runs the sweep sw of an experiment (loaded by load, named name, from path) into
// dir, with this binary's version and this host in each point's run.json and host.json,
// logging its progress.
func sweepInto(path, name string, load experiments.SweepLoader, sw experiments.Sweep, dir string) error {
	start := time.Now()
	host, _ := os.Hostname()
	err := experiments.RunSweep(context.Background(), load, sw, 1, 1, nil, dir,
		experiments.RunInfo{Version: version, Commit: commit()},
		experiments.HostInfo{Host: host, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: start.UTC().Format(time.RFC3339)},
		func(done, total int) { slog.Info("points done", "experiment", name, "done", done, "of", total) })
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	slog.Info("simulated", "experiment", name, "dir", dir, "wall", time.Since(start).Round(time.Millisecond))
	return nil
}
