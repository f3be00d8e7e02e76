package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

// calibrateSubcommands are the subcommands of mosaic calibrate, one per analysis of
// sim/calibrate, with the mode flag of the deprecated flag form each replaces (--data FILE
// and so on, which still works, with a deprecation note on stderr).
var calibrateSubcommands = []struct{ name, flag, form, summary string }{
	{"data", "data", "data --data FILE", "simulate measured batch latencies (LLM-Inference-Bench CSV) row by row and print the error; --fit fits a GPU's coefficients first"},
	{"splitwise", "splitwise", "splitwise FILE", "fit Splitwise's iteration times per GPU leaving one tensor-parallel degree out at a time (or the --holdout rows) and print the held-out errors"},
	{"cpu", "cpu-overheads", "cpu FILE", "fit engine CPU overheads to Vidur's CPU-overhead profile; predicted decode throughput at batch 1-256 with them, the profile's and none"},
	{"forward", "forward", "forward FILE...", "compare the cost model's GPU part with forward-pass profiles (tools/profile_forward.py); --fit fits the GPU's efficiencies first"},
	{"serving", "", "serving FILE", "fit an engine's CPU overheads to published steady-state serving runs (time per output token at N in flight); held-out errors; decode throughput at batch 64-512"},
}

// calibrateArgs are the flags and files of one mosaic calibrate run.
type calibrateArgs struct {
	mode   string   // data, splitwise, cpu, forward or serving
	files  []string // the input files: one, or forward's one or more
	legacy bool     // given in the deprecated flag form

	framework, gpus, gpu, holdout, out, profile, catalog string
	models, operators, fitOnly, fitAlso                  multiFlag
	tp, context                                          int
	inputScale                                           float64
	fit, keepDefault                                     bool
	given                                                map[string]bool // the flags given

	gpuCounts []int
	held      *calibrate.Holdout
}

// runCalibrate runs mosaic calibrate: a subcommand, or the deprecated flag form.
func runCalibrate(args []string, stdout io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		for _, s := range calibrateSubcommands {
			if args[0] == s.name {
				return runCalibrateSubcommand(s.name, args[1:], stdout)
			}
		}
		return fmt.Errorf("%w: unknown subcommand %q (data, splitwise, cpu, forward, serving)", errUsage, args[0])
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: name a subcommand: data, splitwise, cpu, forward or serving (in the deprecated flag form, --data FILE is required, or one of --splitwise, --forward, --cpu-overheads)", errUsage)
	}
	a, err := parseLegacyCalibrate(args)
	if err != nil || parseOnly {
		return err
	}
	return a.run(stdout)
}

// calibrateUsage prints mosaic calibrate's help: its subcommands.
func calibrateUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: mosaic calibrate SUBCOMMAND FILE... [flags]\n\nsubcommands:")
	for _, s := range calibrateSubcommands {
		fmt.Fprintf(w, "  %-17s %s\n", s.form, s.summary)
	}
	fmt.Fprintln(w, "\nRun 'mosaic calibrate SUBCOMMAND -h' for its flags. The flag form that preceded the subcommands\n"+
		"(mosaic calibrate --data FILE, --splitwise FILE, --cpu-overheads FILE, --forward FILE) still works, deprecated.\n\n"+
		"examples:\n  mosaic calibrate data --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 4 --gpu A100-40GB\n"+
		"  mosaic calibrate data --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 2,4,8 --gpu MI300X --fit --holdout tp=8\n"+
		"  mosaic calibrate splitwise ../shared/data/profiles/splitwise_perf_model.csv --holdout tp=8\n"+
		"  mosaic calibrate cpu ../shared/data/profiles/vidur/a100__cpu_overheads.csv --gpu H200\n"+
		"  mosaic calibrate forward tools/measurements/h200_llama-3-8b.csv --gpu H200\n"+
		"  mosaic calibrate serving tools/measurements/vllm-v1-serving.csv")
}

// calibrateSubcommandUsage is each subcommand's usage line and examples, before its flags.
var calibrateSubcommandUsage = map[string]string{
	"data": "usage: mosaic calibrate data --data FILE [--framework vLLM] [--gpus 1[,2,4]] [--gpu NAME] [--model M] [--operators F] [--fit [--holdout KEY=V,...] [--fit-only KEY] [--fit-also KEY]] [-o profile.toml]\n\n" +
		"Simulate each row of FILE (LLM-Inference-Bench CSV; FILE may also come as the argument) and print the error.\n\nexamples:\n" +
		"  mosaic calibrate data --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 4 --gpu A100-40GB\n" +
		"  mosaic calibrate data --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 2,4,8 --gpu MI300X --fit --holdout tp=8",
	"splitwise": "usage: mosaic calibrate splitwise FILE [--holdout tp=8] [--model llama2-70b] [--fit-only KEY] [--fit-also KEY]\n\n" +
		"Check iteration times against Splitwise's performance model (CSV): fit per GPU leaving one tensor-parallel degree\n" +
		"out at a time (or the --holdout rows) and report the held-out errors.\n\nexample:\n" +
		"  mosaic calibrate splitwise ../shared/data/profiles/splitwise_perf_model.csv --holdout tp=8",
	"cpu": "usage: mosaic calibrate cpu FILE [--gpu NAME] [--model M] [--context C]\n\n" +
		"Fit engine CPU overheads per iteration and per sequence to Vidur's CPU-overhead profile FILE and print the predicted\n" +
		"decode throughput at batch 1-256 with them, with the profile's and with none.\n\nexample:\n" +
		"  mosaic calibrate cpu ../shared/data/profiles/vidur/a100__cpu_overheads.csv --gpu H200",
	"serving": "usage: mosaic calibrate serving FILE [--input-scale X] [--gpu NAME] [--model M] [--context C]\n\n" +
		"Fit an engine's CPU overheads per iteration and per sequence to published steady-state serving runs (CSV: one engine\n" +
		"replica's sequences in flight, prompt rate, mean lengths and measured time per output token), the GPU part from the\n" +
		"profile; print each run's prediction with the profile's overheads, the fit and a fit without the run (held out), then\n" +
		"the decode throughput of --model on --gpu at batch 64-512 with the profile's overheads, the fit and none.\n\nexample:\n" +
		"  mosaic calibrate serving tools/measurements/vllm-v1-serving.csv\n" +
		"  mosaic calibrate serving tools/measurements/vllm-v1-serving.csv --input-scale 1.3   # the assumed prompt lengths x 1.3",
	"forward": "usage: mosaic calibrate forward FILE [FILE2...] --gpu NAME [--model M] [--tp N] [--fit [--fit-also layer_latency_us] [--holdout model=llama-3-70b] [-o profile.toml]]\n\n" +
		"Compare the cost model's GPU time with forward-pass profiles (CSV written by tools/profile_forward.py).\n\nexample:\n" +
		"  mosaic calibrate forward tools/measurements/h200_llama-3-8b.csv tools/measurements/h200_llama-3-70b_tp8.csv --gpu H200 --fit",
}

// calibrateFlags registers the flags of a subcommand's analysis (all of them for "", the
// deprecated flag form) on fs.
func calibrateFlags(fs *flag.FlagSet, mode string, a *calibrateArgs) {
	all := mode == ""
	if all || mode == "data" {
		fs.StringVar(&a.framework, "framework", "vLLM", "keep rows of this framework (empty: all)")
		fs.StringVar(&a.gpus, "gpus", "1", "keep rows measured on this many GPUs (a comma-separated list: 1,2,4); a row on n GPUs runs at tensor-parallel degree n (times the GPU's measured_unit)")
		fs.Var(&a.operators, "operators", "operator-level profile (Vidur *__mlp.csv.gz) that pins the fitted GPU's compute efficiency (repeatable)")
	}
	gpuUsage := map[string]string{"data": "simulate on this catalog GPU, keeping only rows of its hardware", "cpu": "predict on this catalog GPU only (default: A100-80GB and H100-80GB)",
		"serving": "the catalog GPU whose decode throughput is tabled (default H100-80GB)",
		"forward": "the catalog GPU the profiles were measured on (required)"}
	if all || gpuUsage[mode] != "" {
		fs.StringVar(&a.gpu, "gpu", "", gpuUsage[mode])
	}
	modelUsage := map[string]string{"cpu": "the model whose decode steps are predicted (default " + calibrate.DefaultDecodeModel + ")",
		"serving": "the model whose decode throughput is tabled (default " + calibrate.DefaultDecodeModel + ")",
		"forward": "the catalog model of every point (default: each file's model column)"}[mode]
	fs.Var(&a.models, "model", orDefault(modelUsage, "keep only this model (catalog id or alias; repeatable)"))
	if all || mode == "forward" {
		fs.IntVar(&a.tp, "tp", 0, "the tensor-parallel degree whose one-GPU shard the profiles measured (default: each file's tp column, else 1)")
	}
	if all || mode == "cpu" || mode == "serving" {
		fs.IntVar(&a.context, "context", 1024, "the context (cached tokens) of every decoding sequence")
	}
	if mode == "serving" {
		fs.Float64Var(&a.inputScale, "input-scale", 1, "multiply every row's mean prompt length by this (the lengths are assumptions where the runs do not publish them)")
	}
	if all || (mode != "cpu" && mode != "serving") {
		calibrateFitFlags(fs, mode, a)
	}
	if all || mode == "data" {
		fs.BoolVar(&a.keepDefault, "keep-default", false, "with --fit on one GPU: keep the profile's [default] coefficients (otherwise the fit becomes the default that GPUs without measurements borrow)")
	}
	fs.StringVar(&a.profile, "profile", "", "start from (or predict with) this profile instead of the built-in one")
	fs.StringVar(&a.catalog, "catalog", "", "extra GPUs and models (TOML)")
}

// orDefault is a when it is not empty, else b.
func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// calibrateFitFlags registers the fitting flags of mode ("" for all) on fs.
func calibrateFitFlags(fs *flag.FlagSet, mode string, a *calibrateArgs) {
	holdout := "with --fit: leave rows out of the fit and report them apart, KEY=V1,V2 (keys: gpus, tp, L, B, model), e.g. gpus=4,8"
	fitOnly := "fit only this coefficient (profile key, repeatable). Default: all but load_gbps, startup_s, link_efficiency, launch_floor_ms, attention_compute_efficiency and paged_attention_v1_factor, and allreduce_hop_us only when the rows span two tensor-parallel degrees above 1"
	switch mode {
	case "splitwise":
		holdout = "fit on the rows this leaves and predict those it holds out, KEY=V1,V2 (keys: tp, B, model), e.g. tp=8 (default: each tensor-parallel degree in turn)"
		fitOnly = "fit only this coefficient (profile key, repeatable). Default: the efficiencies but attention_compute_efficiency, the two overheads and the all-reduce coefficients"
	case "forward":
		holdout = "with --fit: leave points out of the fit and report them apart, KEY=V1,V2 (keys: B, L = context, model, tp)"
		fitOnly = "fit only this coefficient (profile key, repeatable). Default: compute_efficiency, memory_efficiency, attention_efficiency, and layer_latency_us when the points span two shapes"
	}
	if mode != "splitwise" {
		fs.BoolVar(&a.fit, "fit", false, "fit the GPU's cost-model coefficients before predicting")
		fs.StringVar(&a.out, "o", "", "write the (fitted) profile as TOML to this file")
	}
	fs.StringVar(&a.holdout, "holdout", "", holdout)
	fs.Var(&a.fitOnly, "fit-only", fitOnly)
	fs.Var(&a.fitAlso, "fit-also", "fit this coefficient too, beside the default set or --fit-only (profile key, repeatable), e.g. launch_floor_ms (an eager engine's launch floor), attention_compute_efficiency or paged_attention_v1_factor")
}

// runCalibrateSubcommand runs mosaic calibrate MODE.
func runCalibrateSubcommand(mode string, args []string, stdout io.Writer) error {
	a := &calibrateArgs{mode: mode}
	fs := newFlagSet("calibrate "+mode, flag.ContinueOnError)
	var data string
	if mode == "data" {
		fs.StringVar(&data, "data", "", "measured batch latencies (CSV in the LLM-Inference-Bench format)")
	}
	calibrateFlags(fs, mode, a)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), calibrateSubcommandUsage[mode]+"\n\nflags:")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if data != "" {
		pos = append([]string{data}, pos...)
	}
	if err := a.checkFiles(pos); err != nil {
		return err
	}
	a.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { a.given[f.Name] = true })
	if err := a.check(); err != nil || parseOnly {
		return err
	}
	return a.run(stdout)
}

// checkFiles checks a subcommand's input files and keeps them.
func (a *calibrateArgs) checkFiles(files []string) error {
	switch {
	case len(files) == 0 && a.mode == "data":
		return fmt.Errorf("%w: --data FILE is required", errUsage)
	case len(files) == 0:
		return fmt.Errorf("%w: calibrate %s needs a FILE", errUsage, a.mode)
	case len(files) > 1 && a.mode != "forward":
		return fmt.Errorf("%w: unexpected argument %q (calibrate %s takes one FILE)", errUsage, files[1], a.mode)
	}
	a.files = files
	return nil
}

// parseLegacyCalibrate parses the deprecated flag form, mosaic calibrate --data FILE (or
// --splitwise, --cpu-overheads, --forward) and notes on stderr the subcommand it stands for.
func parseLegacyCalibrate(args []string) (*calibrateArgs, error) {
	a := &calibrateArgs{legacy: true}
	fs := newFlagSet("calibrate", flag.ContinueOnError)
	files := map[string]*multiFlag{}
	for _, s := range calibrateSubcommands {
		if s.flag == "" {
			continue // no deprecated flag form
		}
		files[s.name] = &multiFlag{}
		fs.Var(files[s.name], s.flag, "deprecated: mosaic calibrate "+s.form)
	}
	calibrateFlags(fs, "", a)
	fs.Usage = func() { calibrateUsage(fs.Output()) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	modes, form := 0, ""
	for _, s := range calibrateSubcommands {
		if files[s.name] == nil {
			continue
		}
		f := *files[s.name]
		if s.name != "forward" && len(f) > 0 {
			f = f[len(f)-1:] // the others were string flags: the last value counts
		}
		if strings.Join(f, ",") != "" {
			modes++
			a.mode, a.files, form = s.name, f, "--"+s.flag+" FILE is deprecated: use mosaic calibrate "+s.form
		}
	}
	switch {
	case modes == 0:
		return nil, fmt.Errorf("%w: --data FILE is required (or one of --splitwise, --forward, --cpu-overheads)", errUsage)
	case modes > 1:
		return nil, fmt.Errorf("%w: give exactly one of --data, --splitwise, --forward and --cpu-overheads", errUsage)
	}
	w := errOutput
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "mosaic calibrate: %s (the other flags unchanged)\n", form)
	a.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { a.given[f.Name] = true })
	return a, a.checkLegacy()
}

// checkLegacy checks the flags of the deprecated form that a subcommand would not take, then
// the rest as the subcommand does.
func (a *calibrateArgs) checkLegacy() error {
	if a.context < 0 {
		return fmt.Errorf("%w: --context must not be negative, got %d", errUsage, a.context)
	}
	forward := a.mode == "forward"
	switch {
	case a.given["tp"] && !forward:
		return fmt.Errorf("%w: --tp is for --forward (with --data, --gpus gives the TP degree)", errUsage)
	case a.tp < 0 || (a.given["tp"] && a.tp == 0):
		return fmt.Errorf("%w: --tp must be positive, got %d", errUsage, a.tp)
	case forward && (a.given["gpus"] || len(a.operators) > 0 || a.given["framework"]):
		return fmt.Errorf("%w: --gpus, --framework and --operators are for --data; --forward takes --tp and each file's tp column", errUsage)
	}
	return a.check()
}

// check parses and checks the flags a subcommand takes.
func (a *calibrateArgs) check() error {
	var err error
	if a.tp < 0 || (a.given["tp"] && a.tp == 0) {
		return fmt.Errorf("%w: --tp must be positive, got %d", errUsage, a.tp)
	}
	if a.mode == "serving" && !(a.inputScale > 0) {
		return fmt.Errorf("%w: --input-scale must be positive, got %g", errUsage, a.inputScale)
	}
	if !a.legacy && (a.mode == "cpu" || a.mode == "serving") && a.context < 1 {
		return fmt.Errorf("%w: --context must be positive, got %d", errUsage, a.context)
	}
	if a.legacy || a.mode == "data" {
		if a.gpuCounts, err = parseCounts(a.gpus); err != nil {
			return fmt.Errorf("%w: --gpus: %v", errUsage, err)
		}
	}
	if a.held, err = calibrate.ParseHoldout(a.holdout); err != nil {
		return fmt.Errorf("%w: --holdout: %v", errUsage, err)
	}
	if (a.held != nil || len(a.fitOnly) > 0 || len(a.fitAlso) > 0) && !a.fit && a.mode != "splitwise" {
		if a.legacy {
			return fmt.Errorf("%w: --holdout, --fit-only and --fit-also need --fit (or --splitwise)", errUsage)
		}
		return fmt.Errorf("%w: --holdout, --fit-only and --fit-also need --fit", errUsage)
	}
	fittable := calibrate.FittableCoefficients()
	for _, f := range []struct {
		flag string
		keys []string
	}{{"--fit-only", a.fitOnly}, {"--fit-also", a.fitAlso}} {
		for _, k := range f.keys {
			if !slices.Contains(fittable, k) {
				return fmt.Errorf("%w: %s %q: not a fittable coefficient (%s)", errUsage, f.flag, k, strings.Join(fittable, ", "))
			}
		}
	}
	return nil
}

// run loads the catalog and the profile and runs the analysis.
func (a *calibrateArgs) run(stdout io.Writer) error {
	cat := sim.DefaultCatalog()
	if a.catalog != "" {
		if err := cat.AddFile(a.catalog); err != nil {
			return err
		}
	}
	prof := sim.DefaultProfile()
	if a.profile != "" {
		var err error
		if prof, err = sim.LoadProfile(a.profile, nil); err != nil {
			return err
		}
	}
	var err error
	switch a.mode {
	case "splitwise":
		err = calibrateSplitwise(stdout, a, cat, prof)
	case "forward":
		err = calibrateForward(stdout, a, cat, prof)
	case "cpu":
		if a.context < 1 {
			return fmt.Errorf("%w: --context must be positive, got %d", errUsage, a.context)
		}
		err = calibrateCPU(stdout, a, cat, prof)
	case "serving":
		err = calibrateServing(stdout, a, cat, prof)
	default:
		err = calibrateData(stdout, a, cat, prof)
	}
	if oe := (*calibrate.OptionError)(nil); errors.As(err, &oe) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

// fitOptions are the coefficients --fit-only and --fit-also name.
func (a *calibrateArgs) fitOptions() calibrate.FitOptions {
	return calibrate.FitOptions{Only: a.fitOnly, Also: a.fitAlso}
}

// calibrateData simulates measured batch latencies (calibrate.CheckData), prints each row's
// error and the MAPEs, and with -o writes the profile.
func calibrateData(stdout io.Writer, a *calibrateArgs, cat *sim.Catalog, prof *sim.Profile) error {
	path := a.files[0]
	rows, err := calibrate.ReadFile(path)
	if err != nil {
		return err
	}
	sel, err := calibrate.Select(rows, cat, calibrate.Filter{Framework: a.framework, GPUCounts: a.gpuCounts, GPU: a.gpu, Models: a.models})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	logSkipped(sel.Skipped)
	d, err := calibrate.CheckData(sel.Cases, cat, prof, calibrate.DataOptions{Operators: a.operators, Fit: a.fit, Holdout: a.held, FitOptions: a.fitOptions(), KeepDefault: a.keepDefault})
	if err != nil {
		return err
	}
	if err := printDataCheck(stdout, d, a.holdout); err != nil {
		return err
	}
	if a.out == "" {
		return nil
	}
	if a.fit {
		for _, g := range d.GPUs {
			mape, _ := d.HeldOutMAPE(g)
			prof.SetProvenance(g.Name, fitProvenance(a, mape))
		}
	}
	return writeProfile(a.out, prof, append([]string{"Cost-model profile written by: mosaic " + strings.Join(os.Args[1:], " ")}, d.ProfileNote()...)...)
}

// printDataCheck prints the operator profiles' efficiencies, each row's prediction and the
// MAPEs; holdout is --holdout as given.
func printDataCheck(stdout io.Writer, d *calibrate.DataCheck, holdout string) error {
	w := bufio.NewWriter(stdout)
	for _, o := range d.Operators {
		fmt.Fprintf(w, "operators %s: %s, %d rows: compute efficiency %.3f (median, >= 1024 tokens), weight-streaming efficiency %.3f against %s's %g GB/s\n",
			filepath.Base(o.Path), o.Model.ID, o.Rows, o.Compute, o.Memory, o.GPU.Name, o.GPU.HBMGBps)
	}
	fmt.Fprintf(w, "%-42s %3s %6s %4s %11s %11s %9s %6s %8s\n", "model", "tp", "L", "B", "measured_s", "predicted_s", "error_pct", "preempt", "set")
	for _, p := range d.Predictions {
		fmt.Fprintf(w, "%-42s %3d %6d %4d %11.3f %11.3f %+9.2f %6d %8s\n", p.Model.ID, p.TP, p.Length, p.Batch, p.Latency, p.Predicted, p.ErrorPct(), p.Preemptions, d.Set(p))
	}
	for _, g := range append(d.ByModel(), d.ByHardwareTP()...) {
		fmt.Fprintf(w, "MAPE %.2f%% over %d rows of %s\n", calibrate.MAPE(g.Preds), len(g.Preds), g.Key)
	}
	for _, g := range d.BySet() {
		fmt.Fprintf(w, "MAPE %.2f%% over %d %s rows (held out: %s)\n", calibrate.MAPE(g.Preds), len(g.Preds), g.Key, holdout)
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d rows\n", d.MAPE(), len(d.Predictions))
	return w.Flush()
}

// fitProvenance records how a fit written to a profile was made: the command line, and its
// error on what --holdout left out.
func fitProvenance(a *calibrateArgs, heldOutMAPE float64) sim.Provenance {
	pv := sim.Provenance{Basis: "mosaic " + strings.Join(os.Args[1:], " ")}
	if a.held != nil {
		pv.HeldOut, pv.HeldOutMAPE = a.holdout, heldOutMAPE
	}
	return pv
}

// writeProfile writes a fitted cost-model profile to path, its header lines first.
func writeProfile(path string, prof *sim.Profile, header ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := prof.Write(f, header...); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	slog.Info("profile written", "file", path)
	return nil
}

// parseCounts parses a comma-separated list of positive integers (calibrate.ParseCounts).
func parseCounts(s string) ([]int, error) { return calibrate.ParseCounts(s) }

// logSkipped reports skipped rows by reason on stderr.
func logSkipped(skipped map[string]int) {
	reasons := make([]string, 0, len(skipped))
	for r := range skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		slog.Warn("rows skipped", "count", skipped[r], "reason", r)
	}
}

// calibrateSplitwise checks the cost model's iteration times against Splitwise's measured
// prompt and token times (calibrate.CheckIterations) and prints every held-out point and the
// MAPE per GPU, degree and kind.
func calibrateSplitwise(stdout io.Writer, a *calibrateArgs, cat *sim.Catalog, prof *sim.Profile) error {
	path := a.files[0]
	points, err := calibrate.ReadSplitwise(path)
	if err != nil {
		return err
	}
	cases, skipped, err := calibrate.SelectIterations(points, cat, a.models)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	logSkipped(skipped)
	preds, err := calibrate.CheckIterations(cases, prof, a.held, a.fitOptions())
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	if a.held == nil {
		fmt.Fprintln(w, "# leave-one-TP-out: each GPU's coefficients are fitted on its other tensor-parallel degrees and predict the held-out one")
	} else {
		fmt.Fprintf(w, "# coefficients fitted per GPU on the rows --holdout %s leaves; the held-out rows are predicted\n", a.held.String())
	}
	fmt.Fprintf(w, "%-10s %3s %6s %4s %5s %-6s %11s %12s %9s\n", "gpu", "tp", "P", "B", "T", "kind", "measured_ms", "predicted_ms", "error_pct")
	for _, p := range preds {
		fmt.Fprintf(w, "%-10s %3d %6d %4d %5d %-6s %11.2f %12.2f %+9.2f\n", p.GPU.Name, p.TP, p.Prompt, p.Batch, p.Tokens, p.Kind,
			p.Seconds*1e3, p.Predicted*1e3, p.ErrorPct())
	}
	for _, g := range calibrate.IterationGroups(preds) {
		fmt.Fprintf(w, "held-out MAPE %.2f%% over %d points of %s\n", calibrate.IterationMAPE(g.Preds), len(g.Preds), g.Key)
	}
	fmt.Fprintf(w, "held-out MAPE %.2f%% over %d points\n", calibrate.IterationMAPE(preds), len(preds))
	return w.Flush()
}

// checkForwardArgs checks what calibrate forward needs beyond the flags' own checks.
func (a *calibrateArgs) checkForwardArgs() error {
	switch {
	case a.gpu == "":
		return fmt.Errorf("%w: --forward needs --gpu (the catalog GPU the profile was measured on)", errUsage)
	case a.held != nil && !slices.Contains(calibrate.ForwardHoldoutKeys, a.held.Key):
		return fmt.Errorf("%w: --holdout with --forward takes B (batch size), L (context length), model or tp", errUsage)
	case a.out != "" && !a.fit:
		return fmt.Errorf("%w: -o with --forward writes fitted coefficients: add --fit", errUsage)
	case len(a.models) > 1:
		return fmt.Errorf("%w: --forward takes at most one --model (else each file's model column)", errUsage)
	}
	for i, p := range a.files {
		if slices.Contains(a.files[:i], p) {
			return fmt.Errorf("%w: --forward %s is given twice", errUsage, p)
		}
	}
	for _, k := range append(append([]string(nil), a.fitOnly...), a.fitAlso...) {
		if !slices.Contains(calibrate.ForwardFittable, k) {
			return fmt.Errorf("%w: %s does not enter a bare forward pass's time; --forward fits %s", errUsage, k, strings.Join(calibrate.ForwardFittable, ", "))
		}
	}
	return nil
}

// calibrateForward compares the cost model's GPU part with forward-pass profiles written by
// tools/profile_forward.py (calibrate.CheckForward), with --fit after fitting the GPU's
// efficiencies on them, prints each point and the MAPEs and with -o writes the profile.
func calibrateForward(stdout io.Writer, a *calibrateArgs, cat *sim.Catalog, prof *sim.Profile) error {
	if err := a.checkForwardArgs(); err != nil {
		return err
	}
	g, err := cat.GPU(a.gpu)
	if err != nil {
		return err
	}
	model := ""
	if len(a.models) == 1 {
		model = a.models[0]
	}
	sets, err := calibrate.ForwardSets(a.files, cat, g, model, a.tp)
	if err != nil {
		return err
	}
	src := "profile " + prof.Source
	f, err := calibrate.CheckForward(sets, g, prof, calibrate.ForwardOptions{Fit: a.fit, Holdout: a.held, FitOptions: a.fitOptions()})
	if err != nil {
		return err
	}
	if err := printForwardCheck(stdout, f, src); err != nil {
		return err
	}
	if a.out == "" {
		return nil
	}
	if a.fit {
		mape, _ := f.HeldOutMAPE()
		prof.SetProvenance(g.Name, fitProvenance(a, mape))
	}
	return writeProfile(a.out, prof, append([]string{"Cost-model profile written by: mosaic " + strings.Join(os.Args[1:], " ")}, f.ProfileNote(a.files)...)...)
}

// printForwardCheck prints the fitted coefficients, each point and the MAPEs; src names the
// profile predicted with when nothing was fitted.
func printForwardCheck(stdout io.Writer, f *calibrate.ForwardCheck, src string) error {
	w := bufio.NewWriter(stdout)
	if f.Fit != nil {
		c := f.Fit.Coef
		fmt.Fprintf(w, "# fitted on %d of %d points (MAPE %.2f%% on them): compute_efficiency %.4f, memory_efficiency %.4f, attention_efficiency %.4f",
			f.Fitted, f.Points, f.Fit.MAPE, c.ComputeEfficiency, c.MemoryEfficiency, c.AttentionEfficiency)
		if c.AttentionComputeEfficiency > 0 {
			fmt.Fprintf(w, ", attention_compute_efficiency %.4f", c.AttentionComputeEfficiency)
		}
		if c.LayerLatencyUS > 0 {
			fmt.Fprintf(w, ", layer_latency_us %.2f", c.LayerLatencyUS)
		}
		fmt.Fprintln(w)
		src = "coefficients fitted above"
	}
	fmt.Fprintf(w, "# measured forward passes on %s vs the cost model's GPU part (no engine overheads; at TP > 1 one GPU's shard, no all-reduce), %s\n", f.GPU.Name, src)
	fmt.Fprintf(w, "%-28s %3s %-8s %5s %7s %11s %12s %9s %8s\n", "model", "tp", "phase", "B", "context", "measured_ms", "predicted_ms", "error_pct", "set")
	for _, r := range f.Rows {
		fmt.Fprintf(w, "%-28s %3d %-8s %5d %7d %11.3f %12.3f %+9.2f %8s\n", r.Model.ID, r.TP, r.Phase, r.Batch, r.Context, r.Seconds*1e3, r.Predicted*1e3, r.ErrorPct(), r.Set)
	}
	for _, g := range f.Groups {
		fmt.Fprintf(w, "MAPE %.2f%% over %d points: %s\n", calibrate.ForwardMAPE(g.Preds), len(g.Preds), g.Key)
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d points\n", f.MAPE(), len(f.Rows))
	return w.Flush()
}

// calibrateCPU fits engine CPU overheads to Vidur's measured CPU times and prints the predicted
// steady decode throughput of one model at batch sizes 1-256 under three sets of overheads
// (calibrate.CompareOverheads).
func calibrateCPU(stdout io.Writer, a *calibrateArgs, cat *sim.Catalog, prof *sim.Profile) error {
	path := a.files[0]
	rows, err := calibrate.ReadCPUOverheads(path)
	if err != nil {
		return err
	}
	fit, err := calibrate.FitCPUOverheads(rows)
	if err != nil {
		return err
	}
	modelName := calibrate.DefaultDecodeModel
	if len(a.models) == 1 {
		modelName = a.models[0]
	} else if len(a.models) > 1 {
		return fmt.Errorf("%w: --cpu-overheads takes one --model", errUsage)
	}
	m, err := cat.Model(modelName)
	if err != nil {
		return err
	}
	var gpus []string
	if a.gpu != "" {
		gpus = []string{a.gpu}
	}
	sets := []calibrate.NamedOverheads{{Name: "vllm-0.6 fit"},
		{Name: "vidur cpu", Overheads: &calibrate.Overheads{IterationMS: fit.Engine.FixedMS, PerSeqMS: fit.Engine.PerSeqMS}},
		{Name: "none", Overheads: &calibrate.Overheads{}}}
	table, err := calibrate.CompareOverheads(cat, prof, m, gpus, sets, calibrate.DecodeBatches, a.context)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "# %s: %d rows (%s, TP %d, batch %d-%d)\n", filepath.Base(path), len(rows), rows[0].Model, rows[0].TP, rows[0].Batch, rows[len(rows)-1].Batch)
	fmt.Fprintf(w, "fit: schedule + sampler + prepare inputs + process outputs = %.3f ms + %.4f ms/seq (max residual %.1f%%)\n", fit.Engine.FixedMS, fit.Engine.PerSeqMS, fit.Engine.MaxResidualPct)
	fmt.Fprintf(w, "fit: the same + Ray communication     = %.3f ms + %.4f ms/seq (max residual %.1f%%)\n", fit.WithRay.FixedMS, fit.WithRay.PerSeqMS, fit.WithRay.MaxResidualPct)
	fmt.Fprintf(w, "\n# %s, every sequence decoding with %d cached tokens; step = one engine iteration\n", m.ID, a.context)
	fmt.Fprintf(w, "%-10s %-12s %4s %9s %9s %10s %-8s %8s %11s %12s %9s\n", "gpu", "overheads", "B", "step_ms", "tok_s", "linear_ms", "bound", "attn_ms", "overhead_ms", "kv_max_batch", "floor_ms")
	for _, d := range table {
		fmt.Fprintf(w, "%-10s %-12s %4d %9.2f %9.0f %10.2f %-8s %8.2f %11.2f %12d %9.2f\n", d.GPU.Name, d.Overheads, d.Batch, d.Seconds*1e3, d.Throughput(),
			d.Linear*1e3, d.LinearBound, d.Attention*1e3, d.Overhead*1e3, d.KVMaxBatch, d.Floor*1e3)
	}
	return w.Flush()
}

// ServingBatches are the batch sizes of mosaic calibrate serving's decode-throughput table.
var servingBatches = []int{64, 128, 256, 512}

// calibrateServing fits engine overheads to published steady-state serving runs and prints each
// run's prediction before and after, then the decode throughput of one model and GPU at batch
// 64-512 with the profile's overheads, the fit and none.
func calibrateServing(stdout io.Writer, a *calibrateArgs, cat *sim.Catalog, prof *sim.Profile) error {
	path := a.files[0]
	rows, err := calibrate.ReadServing(path)
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].InputTokens *= a.inputScale
	}
	fit, err := calibrate.FitServing(cat, prof, rows)
	if err != nil {
		return err
	}
	before := fit.Profile
	modelName, gpuName := calibrate.DefaultDecodeModel, "H100-80GB"
	if len(a.models) > 1 {
		return fmt.Errorf("%w: calibrate serving takes one --model", errUsage)
	} else if len(a.models) == 1 {
		modelName = a.models[0]
	}
	if a.gpu != "" {
		gpuName = a.gpu
	}
	m, err := cat.Model(modelName)
	if err != nil {
		return err
	}
	fitted := &calibrate.Overheads{IterationMS: fit.IterationMS, PerSeqMS: fit.PerSeqMS}
	sets := []calibrate.NamedOverheads{{Name: "profile"}, {Name: "serving fit", Overheads: fitted}, {Name: "none", Overheads: &calibrate.Overheads{}}}
	table, err := calibrate.CompareOverheads(cat, prof, m, []string{gpuName}, sets, servingBatches, a.context)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "# %s: %d runs (prompt lengths x %g)\n", filepath.Base(path), len(rows), a.inputScale)
	fmt.Fprintf(w, "fit: %.3f ms per iteration + %.4f ms per sequence\n", fit.IterationMS, fit.PerSeqMS)
	fmt.Fprintf(w, "\n# time per output token, ms: measured; predicted on the GPU alone, with the profile's overheads, the fit, and a fit without the run\n")
	fmt.Fprintf(w, "%-30s %-10s %-12s %2s %2s %6s %7s %6s %6s %9s %7s %8s %7s %8s %7s %9s %7s\n", "run", "gpu", "model", "tp", "w", "N", "prompt/s", "in", "out",
		"measured", "gpu", "profile", "err%", "fit", "err%", "held-out", "err%")
	held := map[int]calibrate.ServingPrediction{}
	for _, p := range fit.HeldOut {
		held[p.Row.Line] = p
	}
	for i, p := range fit.Fitted {
		b := before[i]
		h, ok := held[p.Row.Line]
		ho, hoErr := "-", "-"
		if ok {
			ho, hoErr = fmt.Sprintf("%.2f", h.StepMS), fmt.Sprintf("%+.1f", h.ErrorPct())
		}
		fmt.Fprintf(w, "%-30s %-10s %-12s %2d %2d %6.0f %7.2f %6.0f %6.0f %9.2f %7.2f %8.2f %+7.1f %8.2f %+7.1f %9s %7s\n", p.Row.ID, p.Row.GPU, p.Row.Model, p.Row.TP, p.Row.WeightBytes,
			p.Row.InFlight, p.Row.PromptsPerS, p.Row.InputTokens, p.Row.OutputTokens, p.Row.TPOTMS, p.GPUMS, b.StepMS, b.ErrorPct(), p.StepMS, p.ErrorPct(), ho, hoErr)
	}
	fmt.Fprintf(w, "MAPE over the fit runs: profile %.1f%%, fit %.1f%%, held out %.1f%%", servingMAPE(before, "fit"), servingMAPE(fit.Fitted, "fit"), servingMAPE(fit.HeldOut, "fit"))
	if n := servingMAPE(fit.Fitted, "check"); n >= 0 {
		fmt.Fprintf(w, "; over the check runs: profile %.1f%%, fit %.1f%%", servingMAPE(before, "check"), n)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "\n# %s (weights of %d bytes), every sequence decoding with %d cached tokens; step = one engine iteration\n", m.ID, m.DtypeBytes, a.context)
	fmt.Fprintf(w, "%-10s %-12s %4s %9s %9s %11s %12s\n", "gpu", "overheads", "B", "step_ms", "tok_s", "overhead_ms", "kv_max_batch")
	over := false
	for _, d := range table {
		mark := ""
		if d.Batch > d.KVMaxBatch {
			mark, over = " *", true
		}
		fmt.Fprintf(w, "%-10s %-12s %4d %9.2f %9.0f %11.2f %12d%s\n", d.GPU.Name, d.Overheads, d.Batch, d.Seconds*1e3, d.Throughput(), d.Overhead*1e3, d.KVMaxBatch, mark)
	}
	if over {
		fmt.Fprintln(w, "* more sequences than the KV cache holds at this context (0: the model does not fit): the step's cost, not a batch the engine forms")
	}
	return w.Flush()
}

// servingMAPE is the mean absolute percentage error of the predictions of the runs of one
// set ("fit" or "check"), or -1 when there are none.
func servingMAPE(ps []calibrate.ServingPrediction, set string) float64 {
	var s float64
	n := 0
	for _, p := range ps {
		if p.Row.Set == set {
			s += math.Abs(p.ErrorPct())
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return s / float64(n)
}
