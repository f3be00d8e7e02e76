// Command mosaic simulates and schedules Mixture-of-Agents LLM inference on a few GPUs.
//
// Usage:
//
//	mosaic sim [EXP.toml] [-o DIR] [--seed N] [--set key=value ...] [--sweep key=v1,v2 ...] [--shard i/n]
//	mosaic merge SHARD_DIR... -o OUT
//	mosaic emulate --listen 127.0.0.1:PORT --gpu NAME --model ARCH [--time-scale S]
//	mosaic plot RESULTS_DIR... [-o FIGDIR] [--format png,pdf,svg] [--columns 1|2]
//	mosaic replay EXP.toml -o DIR [--resume]
//	mosaic profile --endpoint URL --model NAME --gpu GPU [-o profile.toml]
//	mosaic plan EXP.toml [--policy mosaic]
//	mosaic paper [--seeds 5] [--results DIR] [-o table.md] [EXP.toml | RESULTS_DIR]...
//	mosaic sensitivity [--seeds 3] [-o DIR] [EXP.toml]...
//	mosaic faster-moa [EXP.toml] [--seed N] [--set key=value ...]
//	mosaic trace gen|import EXP.toml [-o w.jsonl]
//	mosaic trace stats W.jsonl
//	mosaic trace check-votes ANSWERS.csv [--models a,b,c] [--options 4]
//	mosaic calibrate data --data FILE [--framework vLLM] [--gpus 1[,2,4]] [--gpu NAME] [--model M] [--fit [--holdout KEY=V,...]] [-o profile.toml]
//	mosaic calibrate splitwise FILE | cpu FILE | forward FILE... --gpu NAME
//	mosaic catalog [gpus|models|engines|policies|rules]
//	mosaic version
//
// Results go to stdout, logs and progress to stderr. The exit status is 0 on success, 1 when
// the run fails and 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// version and commitFlag are set at build time with -ldflags "-X main.version=... -X main.commitFlag=...".
var (
	version    = "dev"
	commitFlag = ""
)

// errUsage marks errors caused by the command line.
var errUsage = errors.New("usage")

type command struct {
	name, summary string
	run           func(args []string, stdout io.Writer) error
}

var commands = []command{
	{"sim", "simulate an experiment (default: the built-in quick start)", runSim},
	{"emulate", "serve one emulated GPU worker over the OpenAI API (vLLM-like, timed by the simulator)", runEmulate},
	{"plot", "draw paper-style figures from results folders", runPlot},
	{"replay", "run an experiment's policies on real (or emulated) inference servers", runReplay},
	{"profile", "measure a server, fit the cost model's coefficients and write a profile", runProfile},
	{"merge", "merge the folders of a sweep's shards", runMerge},
	{"plan", "show the placement and prompt assignment the mosaic policy plans, its bound and gap", runPlan},
	{"paper", "compare results of the paper experiments with the paper's reported figures", runPaper},
	{"online", "serve the paper workloads and the agent program online: every policy at three loads against capacity", runOnline},
	{"sensitivity", "move each assumption of an experiment over its plausible range and measure the speedup", runSensitivity},
	{"faster-moa", "reproduce Faster-MoA's latency reductions: the dense graph, then the tree with each technique", runFasterMoA},
	{"trace", "generate (gen), import or describe (stats) a Mixture-of-Agents workload", runTrace},
	{"calibrate", "compare the cost model with measurements (data, splitwise, cpu, forward); --fit fits a GPU's coefficients", runCalibrate},
	{"catalog", "list the built-in GPUs, models, engine presets, policies and rules (gpus, models, engines, policies, rules)", runCatalog},
	{"version", "print the version", func(_ []string, w io.Writer) error { _, err := fmt.Fprintln(w, "mosaic", version); return err }},
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = []string{"version"}
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		args = []string{args[1], "-h"} // mosaic help sim: the command's own help
	}
	errOutput = stderr
	defer func() { errOutput = nil }()
	if wantsHelp(args[1:]) {
		// A command's help is what was asked for: print it on stdout.
		helpOutput = stdout
		defer func() { helpOutput = nil }()
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(args[1:], stdout)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintf(stderr, "mosaic %s: %v\n", c.name, err)
				return 2
			default:
				fmt.Fprintf(stderr, "mosaic %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "mosaic: unknown command %q", args[0])
	if near := nearest(args[0]); near != "" {
		fmt.Fprintf(stderr, "; did you mean %q?", near)
	}
	fmt.Fprintln(stderr)
	usage(stderr)
	return 2
}

// parseOnly, set by the command-line fuzz test, makes every command stop once its flags,
// arguments and experiment overrides are parsed and checked: before it simulates, measures,
// serves or writes anything.
var parseOnly bool

// helpOutput, when set, receives the flag sets' usage and errors (a command's help asked for
// goes to stdout).
var helpOutput io.Writer

// errOutput receives the flag sets' errors and usage otherwise: run's stderr.
var errOutput io.Writer

// newFlagSet is flag.NewFlagSet for a command, writing to helpOutput when set, else to
// errOutput.
func newFlagSet(name string, h flag.ErrorHandling) *flag.FlagSet {
	fs := flag.NewFlagSet(name, h)
	switch {
	case helpOutput != nil:
		fs.SetOutput(helpOutput)
	case errOutput != nil:
		fs.SetOutput(errOutput)
	}
	return fs
}

// wantsHelp reports whether a command's arguments ask for its help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// nearest is the command closest to name by edit distance, if it is close (at most a third of
// its letters differ), else "".
func nearest(name string) string {
	best, bestD := "", len(name)/3+1
	for _, c := range commands {
		if d := editDistance(name, c.name); d < bestD || (d == bestD && best == "" && d <= 2) {
			best, bestD = c.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mosaic COMMAND [arguments]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nexamples:\n  mosaic sim                                   # the built-in quick start\n"+
		"  mosaic sim experiments/paper/gpqa.toml -o out && mosaic plot out\n"+
		"  mosaic help sim                              # a command's flags and examples\n\n"+
		"Run 'mosaic COMMAND -h' (or 'mosaic help COMMAND') for a command's flags; 'mosaic --version' for the version.")
}

// parseInterspersed parses flags that may come before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// experimentFlags registers the flags every command that reads an experiment takes.
func experimentFlags(fs *flag.FlagSet) (seed *seedFlag, sets *multiFlag) {
	seed = &seedFlag{}
	fs.Var(seed, "seed", "override the experiment's seed (a non-negative integer)")
	sets = &multiFlag{}
	fs.Var(sets, "set", "override a key of the experiment, key=value (repeatable)")
	return seed, sets
}

// seedFlag is --seed: a non-negative integer, remembered only when given.
type seedFlag struct {
	value string
}

func (s *seedFlag) String() string { return s.value }

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want a non-negative integer, got %q", v)
	}
	s.value = v
	return nil
}
