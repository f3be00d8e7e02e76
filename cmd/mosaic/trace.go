package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mosaic-sched/mosaic/traces"
)

func runTrace(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want a subcommand: gen, import, stats, convert or check-votes", errUsage)
	}
	switch args[0] {
	case "gen":
		return traceGen(args[1:], stdout, false)
	case "import":
		return traceGen(args[1:], stdout, true)
	case "stats":
		return traceStats(args[1:], stdout)
	case "convert":
		return traceConvert(args[1:], stdout)
	case "check-votes":
		return traceCheckVotes(args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprintln(os.Stderr, "usage: mosaic trace gen EXP.toml [-o w.jsonl] [--seed N] [--set key=value ...]\n"+
			"       mosaic trace import EXP.toml [-o w.jsonl]   (an experiment whose workload.answers names real answers)\n"+
			"       mosaic trace stats W.jsonl\n"+
			"       mosaic trace convert OLD.jsonl -o NEW.jsonl   (rewrite a workload file in the current format, version 2)\n"+
			"       mosaic trace check-votes ANSWERS.csv [--models a,b,c] [--options 4]   (the vote model against real answers)")
		return nil
	}
	return fmt.Errorf("%w: unknown subcommand %q (want gen, import, stats, convert or check-votes)", errUsage, args[0])
}

// traceGen writes the workload an experiment describes as JSONL and prints its statistics.
func traceGen(args []string, stdout io.Writer, mustImport bool) error {
	name := "gen"
	if mustImport {
		name = "import"
	}
	fs := newFlagSet("trace "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: mosaic trace %s EXP.toml [-o w.jsonl] [--seed N] [--set key=value ...]\n", name)
		fs.PrintDefaults()
	}
	out := fs.String("o", "", "write the workload to this JSONL file (default: standard output)")
	seed, sets := experimentFlags(fs)
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
	if mustImport && exp.Workload.Answers == "" {
		return fmt.Errorf("%s: workload.answers: missing: trace import builds a workload from an answer file", exp.File())
	}
	res, err := exp.Resolve()
	if err != nil {
		return err
	}
	if res.Graph == nil {
		return fmt.Errorf("%s: workload.kind: trace %s needs a workload of call graphs (kind moa, layered, tree or dag)", exp.File(), name)
	}
	wl := res.Graph.Workload
	if *out == "" {
		w := bufio.NewWriter(stdout)
		if err := traces.WriteJSONL(w, wl); err != nil {
			return err
		}
		return w.Flush()
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := traces.WriteJSONL(w, wl); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	slog.Info("workload written", "file", *out, "queries", len(wl.Queries))
	return traces.Stats(wl).Write(stdout)
}

func traceStats(args []string, stdout io.Writer) error {
	fs := newFlagSet("trace stats", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic trace stats W.jsonl\n\n"+
			"Describes a workload file: the graph's shape, calls per model, role and layer with output-length\n"+
			"percentiles, the first layer's selection ratio, vote patterns and accuracies.\n\n"+
			"example:\n  mosaic trace gen experiments/paper/gpqa.toml -o gpqa.jsonl && mosaic trace stats gpqa.jsonl")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one workload file: mosaic trace stats W.jsonl", errUsage)
	}
	wl, err := traces.ReadJSONL(pos[0])
	if err != nil {
		return err
	}
	return traces.Stats(wl).Write(stdout)
}

// traceConvert rewrites a workload file (version 1 or 2) in the current JSONL format.
func traceConvert(args []string, stdout io.Writer) error {
	fs := newFlagSet("trace convert", flag.ContinueOnError)
	out := fs.String("o", "", "the converted workload file (required; it must not be the input)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic trace convert OLD.jsonl -o NEW.jsonl\n\nRewrites a workload file in the current JSONL format (version 2: a graph of calls per query).")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		return fmt.Errorf("%w: want one workload file and -o NEW.jsonl", errUsage)
	}
	if abs(pos[0]) == abs(*out) {
		return fmt.Errorf("%w: -o %s is the input: write the converted file elsewhere", errUsage, *out)
	}
	wl, err := traces.ReadJSONL(pos[0])
	if err != nil || parseOnly {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := traces.WriteJSONL(w, wl); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s (version %d, %d queries, %d calls) -> %s (version %d)\n", pos[0], wl.Format, len(wl.Queries), wl.NumCalls(), *out, traces.FormatVersion)
	return err
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// traceCheckVotes fits the vote model to the pairs of a real answer file and compares its
// predictions for triples with the real ones.
func traceCheckVotes(args []string, stdout io.Writer) error {
	fs := newFlagSet("trace check-votes", flag.ContinueOnError)
	models := fs.String("models", "", "comma-separated models of the file (default: those with at most 10% unreadable answers)")
	options := fs.Int("options", 4, "answer letters per question")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic trace check-votes ANSWERS.csv [--models a,b,c] [--options 4]

Fits the vote model's difficulty and error correlation to pairs of real answers (how often two
models are both right; how often two wrong ones agree), then compares its predictions for every
triple of distinct models with the real triples: the shares of 3:0, 2:1 and 1:1:1 votes and how
often a unanimous and a majority vote is right. ANSWERS.csv is an answer file such as the shared
data's agreement/routerbench_arc_challenge_answers.csv.`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one answer file", errUsage)
	}
	if *options < 2 {
		return fmt.Errorf("%w: --options must be at least 2 answer letters, got %d", errUsage, *options)
	}
	set, err := traces.ReadAnswerSet(pos[0])
	if err != nil || parseOnly {
		return err
	}
	var names []string
	if *models != "" {
		names = strings.Split(*models, ",")
	} else {
		var dropped []string
		names, dropped = traces.ReadableModels(set, 0.1)
		if len(dropped) > 0 {
			slog.Info("models left out: more than 10% of their answers are unreadable", "models", strings.Join(dropped, ", "))
		}
	}
	c, err := traces.CheckVotes(set, names, *options)
	if err != nil {
		return err
	}
	return c.Write(stdout)
}
