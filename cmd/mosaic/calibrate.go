package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

func runCalibrate(args []string, stdout io.Writer) error {
	fs := newFlagSet("calibrate", flag.ContinueOnError)
	data := fs.String("data", "", "measured batch latencies (CSV in the LLM-Inference-Bench format)")
	splitwise := fs.String("splitwise", "", "check iteration times against Splitwise's performance model (CSV): fit per GPU leaving one tensor-parallel degree out at a time (or the --holdout rows) and report the held-out errors")
	var forwards multiFlag
	fs.Var(&forwards, "forward", "compare the cost model's GPU time with a forward-pass profile (CSV written by tools/profile_forward.py; repeatable); needs --gpu")
	cpuOverheads := fs.String("cpu-overheads", "", "fit engine CPU overheads per iteration and per sequence to Vidur's CPU-overhead profile and print the predicted decode throughput at batch 1-256 with them, with the built-in profile's and with none (--gpu, --model, --context)")
	tp := fs.Int("tp", 0, "with --forward: the tensor-parallel degree whose one-GPU shard the profile measured (default: the file's tp column, else 1)")
	context := fs.Int("context", 1024, "with --cpu-overheads: the context (cached tokens) of every decoding sequence")
	framework := fs.String("framework", "vLLM", "keep rows of this framework (empty: all)")
	gpus := fs.String("gpus", "1", "keep rows measured on this many GPUs (a comma-separated list: 1,2,4); a row on n GPUs runs at tensor-parallel degree n (times the GPU's measured_unit)")
	gpu := fs.String("gpu", "", "simulate on this catalog GPU, keeping only rows of its hardware")
	var models multiFlag
	fs.Var(&models, "model", "keep only this model (catalog id or alias; repeatable)")
	var operators multiFlag
	fs.Var(&operators, "operators", "operator-level profile (Vidur *__mlp.csv.gz) that pins the fitted GPU's compute efficiency (repeatable)")
	fit := fs.Bool("fit", false, "fit the GPU's cost-model coefficients on the rows before predicting")
	holdout := fs.String("holdout", "", "with --fit: leave rows out of the fit and report them apart, KEY=V1,V2 (keys: gpus, L, B, model; with --forward: B, L = context, model, tp), e.g. gpus=4,8")
	var fitOnly multiFlag
	var fitAlso multiFlag
	fs.Var(&fitAlso, "fit-also", "with --fit or --splitwise: fit this coefficient too, beside the default set or --fit-only (profile key, repeatable), e.g. launch_floor_ms (an eager engine's launch floor), attention_compute_efficiency or paged_attention_v1_factor")
	fs.Var(&fitOnly, "fit-only", "with --fit or --splitwise: fit only this coefficient (profile key, repeatable). Default with --fit: all but load_gbps, startup_s, link_efficiency, launch_floor_ms, attention_compute_efficiency and paged_attention_v1_factor, and allreduce_hop_us only when the rows span two tensor-parallel degrees above 1; with --splitwise: the efficiencies but attention_compute_efficiency, the two overheads and the all-reduce coefficients")
	out := fs.String("o", "", "write the (fitted) profile as TOML to this file")
	profile := fs.String("profile", "", "predict with this profile instead of the built-in one")
	catalog := fs.String("catalog", "", "extra GPUs and models (TOML)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic calibrate --data FILE [--framework vLLM] [--gpus 1[,2,4]] [--gpu NAME] [--model M] [--fit [--holdout KEY=V,...] [--fit-only KEY]] [-o profile.toml]\n       mosaic calibrate --splitwise FILE [--holdout tp=8] [--model llama2-70b]\n       mosaic calibrate --forward FILE [--forward FILE2] --gpu NAME [--model M] [--tp N] [--fit [--fit-also layer_latency_us] [--holdout model=llama-3-70b] [-o profile.toml]]\n       mosaic calibrate --cpu-overheads FILE [--gpu NAME] [--model M] [--context C]\n\nexamples:\n  mosaic calibrate --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 4 --gpu A100-40GB\n  mosaic calibrate --data ../shared/data/profiles/argonne_inference_bench_no_h100.csv --gpus 2,4,8 --gpu MI300X --fit --holdout tp=8")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	modes := 0
	forward := strings.Join(forwards, ",")
	for _, f := range []string{*data, *splitwise, forward, *cpuOverheads} {
		if f != "" {
			modes++
		}
	}
	switch {
	case modes == 0:
		return fmt.Errorf("%w: --data FILE is required (or one of --splitwise, --forward, --cpu-overheads)", errUsage)
	case modes > 1:
		return fmt.Errorf("%w: give exactly one of --data, --splitwise, --forward and --cpu-overheads", errUsage)
	}
	if *context < 0 {
		return fmt.Errorf("%w: --context must not be negative, got %d", errUsage, *context)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["tp"] && forward == "":
		return fmt.Errorf("%w: --tp is for --forward (with --data, --gpus gives the TP degree)", errUsage)
	case *tp < 0 || (given["tp"] && *tp == 0):
		return fmt.Errorf("%w: --tp must be positive, got %d", errUsage, *tp)
	case forward != "" && (given["gpus"] || len(operators) > 0 || given["framework"]):
		return fmt.Errorf("%w: --gpus, --framework and --operators are for --data; --forward takes --tp and each file's tp column", errUsage)
	}
	gpuCounts, err := parseCounts(*gpus)
	if err != nil {
		return fmt.Errorf("%w: --gpus: %v", errUsage, err)
	}
	held, err := parseHoldout(*holdout)
	if err != nil {
		return fmt.Errorf("%w: --holdout: %v", errUsage, err)
	}
	if (held != nil || len(fitOnly) > 0 || len(fitAlso) > 0) && !*fit && *splitwise == "" {
		return fmt.Errorf("%w: --holdout, --fit-only and --fit-also need --fit (or --splitwise)", errUsage)
	}
	fittable := calibrate.FittableCoefficients()
	for _, f := range []struct {
		flag string
		keys []string
	}{{"--fit-only", fitOnly}, {"--fit-also", fitAlso}} {
		for _, k := range f.keys {
			if !slices.Contains(fittable, k) {
				return fmt.Errorf("%w: %s %q: not a fittable coefficient (%s)", errUsage, f.flag, k, strings.Join(fittable, ", "))
			}
		}
	}
	if parseOnly {
		return nil
	}
	cat := sim.DefaultCatalog()
	if *catalog != "" {
		if err := cat.AddFile(*catalog); err != nil {
			return err
		}
	}
	prof := sim.DefaultProfile()
	if *profile != "" {
		if prof, err = sim.LoadProfile(*profile, nil); err != nil {
			return err
		}
	}
	switch {
	case *splitwise != "":
		return calibrateSplitwise(stdout, *splitwise, cat, prof, models, held, calibrate.FitOptions{Only: fitOnly, Also: fitAlso})
	case forward != "":
		return calibrateForward(stdout, forwards, cat, prof, *gpu, models, forwardOptions{
			fit: *fit, held: held, opts: calibrate.FitOptions{Only: fitOnly, Also: fitAlso}, tp: *tp, out: *out})
	case *cpuOverheads != "":
		if *context < 1 {
			return fmt.Errorf("%w: --context must be positive, got %d", errUsage, *context)
		}
		return calibrateCPU(stdout, *cpuOverheads, cat, prof, *gpu, models, *context)
	}
	rows, err := calibrate.ReadFile(*data)
	if err != nil {
		return err
	}
	sel, err := calibrate.Select(rows, cat, calibrate.Filter{Framework: *framework, GPUCounts: gpuCounts, GPU: *gpu, Models: models})
	if err != nil {
		return fmt.Errorf("%s: %w", *data, err)
	}
	reasons := make([]string, 0, len(sel.Skipped))
	for r := range sel.Skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		slog.Warn("rows skipped", "count", sel.Skipped[r], "reason", r)
	}
	byGPU := map[*sim.GPU][]calibrate.Case{}
	var gpuOrder []*sim.GPU
	for _, c := range sel.Cases {
		if _, ok := byGPU[c.GPU]; !ok {
			gpuOrder = append(gpuOrder, c.GPU)
		}
		byGPU[c.GPU] = append(byGPU[c.GPU], c)
	}
	w := bufio.NewWriter(stdout)
	opts := calibrate.FitOptions{Only: fitOnly, Also: fitAlso}
	computeEff := 0.0
	for _, path := range operators {
		if len(gpuOrder) != 1 {
			return fmt.Errorf("%w: --operators needs the rows of a single GPU; choose one with --gpu", errUsage)
		}
		rows, err := calibrate.ReadOperators(path)
		if err != nil {
			return err
		}
		m, err := calibrate.OperatorModel(path, cat)
		if err != nil {
			return err
		}
		le, err := calibrate.FitLinear(rows, m, gpuOrder[0])
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(w, "operators %s: %s, %d rows: compute efficiency %.3f (median, >= 1024 tokens), weight-streaming efficiency %.3f against %s's %g GB/s\n",
			filepath.Base(path), m.ID, le.Rows, le.Compute, le.Memory, gpuOrder[0].Name, gpuOrder[0].HBMGBps)
		computeEff += le.Compute / float64(len(operators))
		opts.KeepCompute = true
	}
	if *fit {
		for _, g := range gpuOrder {
			start := time.Now()
			var fitCases []calibrate.Case
			for _, c := range byGPU[g] {
				if !held.matches(c) {
					fitCases = append(fitCases, c)
				}
			}
			if len(fitCases) == 0 {
				return fmt.Errorf("%w: --holdout leaves no rows of %s to fit", errUsage, g.Name)
			}
			slog.Info("fitting", "gpu", g.Name, "rows", len(fitCases), "held_out", len(byGPU[g])-len(fitCases))
			startCoef := prof.For(g)
			if opts.KeepCompute {
				startCoef.ComputeEfficiency = computeEff
			}
			fr, err := calibrate.Fit(fitCases, startCoef, opts)
			if err != nil {
				return err
			}
			slog.Info("fitted", "gpu", g.Name, "mape_pct", fmt.Sprintf("%.2f", fr.MAPE), "evaluations", fr.Evaluations, "wall", time.Since(start).Round(time.Millisecond))
			prof.Set(g.Name, fr.Coef)
			if b := calibrate.AtBounds(fr.Coef); len(b) > 0 {
				slog.Warn("fitted coefficients at the edge of their range: the rows do not constrain them", "gpu", g.Name, "coefficients", strings.Join(b, ", "))
			}
			if len(gpuOrder) == 1 {
				// GPUs without measurements take the efficiencies fitted here.
				prof.Default = fr.Coef
			}
		}
	}
	preds, err := calibrate.PredictAll(sel.Cases, prof)
	if err != nil {
		return err
	}
	calibrate.Sort(preds)
	set := func(p calibrate.Prediction) string {
		switch {
		case !*fit:
			return "-"
		case held.matches(p.Case):
			return "held-out"
		}
		return "fitted"
	}
	fmt.Fprintf(w, "%-42s %3s %6s %4s %11s %11s %9s %6s %8s\n", "model", "tp", "L", "B", "measured_s", "predicted_s", "error_pct", "preempt", "set")
	for _, p := range preds {
		fmt.Fprintf(w, "%-42s %3d %6d %4d %11.3f %11.3f %+9.2f %6d %8s\n", p.Model.ID, p.TP, p.Length, p.Batch, p.Latency, p.Predicted, p.ErrorPct(), p.Preemptions, set(p))
	}
	ids, groups := calibrate.ByModel(preds)
	for _, id := range ids {
		fmt.Fprintf(w, "MAPE %.2f%% over %d rows of %s\n", calibrate.MAPE(groups[id]), len(groups[id]), id)
	}
	byTP := calibrate.GroupBy(preds, func(p calibrate.Prediction) string {
		if *fit && held != nil {
			return calibrate.HardwareTP(p) + " " + set(p)
		}
		return calibrate.HardwareTP(p)
	})
	sort.SliceStable(byTP, func(i, j int) bool { return byTP[i].Key < byTP[j].Key })
	if len(byTP) > 1 || held != nil {
		for _, g := range byTP {
			fmt.Fprintf(w, "MAPE %.2f%% over %d rows of %s\n", calibrate.MAPE(g.Preds), len(g.Preds), g.Key)
		}
	}
	if held != nil {
		for _, g := range calibrate.GroupBy(preds, set) {
			fmt.Fprintf(w, "MAPE %.2f%% over %d %s rows (held out: %s)\n", calibrate.MAPE(g.Preds), len(g.Preds), g.Key, *holdout)
		}
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d rows\n", calibrate.MAPE(preds), len(preds))
	if err := w.Flush(); err != nil {
		return err
	}
	if *out != "" {
		var names []string
		for _, g := range gpuOrder {
			names = append(names, g.Name)
		}
		return writeProfile(*out, prof,
			"Cost-model profile written by: mosaic "+strings.Join(os.Args[1:], " "),
			fmt.Sprintf("GPUs: %s; %d measured rows; MAPE %.2f%%.", strings.Join(names, ", "), len(preds), calibrate.MAPE(preds)),
			"[default] holds the coefficients used for GPUs without their own entry.")
	}
	return nil
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

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers separated by commas, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// holdoutSpec selects the rows a fit leaves out: KEY=V1,V2 with KEY one of gpus, tp, L, B,
// model.
type holdoutSpec struct {
	key    string
	ints   []int
	models []string
}

func parseHoldout(s string) (*holdoutSpec, error) {
	if s == "" {
		return nil, nil
	}
	key, vals, ok := strings.Cut(s, "=")
	if !ok || vals == "" {
		return nil, fmt.Errorf("want KEY=V1,V2 (keys: gpus, tp, L, B, model), got %q", s)
	}
	h := &holdoutSpec{key: strings.TrimSpace(key)}
	switch h.key {
	case "gpus", "tp", "L", "B":
		n, err := parseCounts(vals)
		if err != nil {
			return nil, err
		}
		h.ints = n
	case "model":
		for _, m := range strings.Split(vals, ",") {
			h.models = append(h.models, strings.ToLower(strings.TrimSpace(m)))
		}
	default:
		return nil, fmt.Errorf("unknown key %q (keys: gpus, tp, L, B, model)", h.key)
	}
	return h, nil
}

// matches reports whether the spec holds c out; a nil spec holds nothing out.
func (h *holdoutSpec) matches(c calibrate.Case) bool {
	if h == nil {
		return false
	}
	switch h.key {
	case "gpus":
		return slices.Contains(h.ints, c.NumGPUs)
	case "tp":
		return slices.Contains(h.ints, c.TP)
	case "L":
		return slices.Contains(h.ints, c.Length)
	case "B":
		return slices.Contains(h.ints, c.Batch)
	case "model":
		for _, m := range h.models {
			if strings.EqualFold(c.Model.ID, m) || slices.ContainsFunc(c.Model.Aliases, func(a string) bool { return strings.EqualFold(a, m) }) {
				return true
			}
		}
	}
	return false
}

// calibrateSplitwise checks the cost model's iteration times against Splitwise's measured
// prompt and token times: per GPU it fits the coefficients on all tensor-parallel degrees but
// one and predicts that one, for each degree in turn (or fits on the rows --holdout leaves and
// predicts those it holds out), and prints every held-out point and the MAPE per GPU, degree
// and kind.
func calibrateSplitwise(stdout io.Writer, path string, cat *sim.Catalog, prof *sim.Profile, models []string, held *holdoutSpec, opts calibrate.FitOptions) error {
	points, err := calibrate.ReadSplitwise(path)
	if err != nil {
		return err
	}
	cases, skipped, err := calibrate.SelectIterations(points, cat, models)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	logSkipped(skipped)
	if held != nil && held.key != "tp" && held.key != "B" && held.key != "model" {
		return fmt.Errorf("%w: --holdout with --splitwise takes tp, B or model", errUsage)
	}
	isHeld := func(c calibrate.IterationCase, fold int) bool {
		if held == nil {
			return c.TP == fold
		}
		return held.matches(calibrate.Case{Row: calibrate.Row{Batch: c.Batch}, Model: c.Model, TP: c.TP})
	}
	var gpus []*sim.GPU
	byGPU := map[*sim.GPU][]calibrate.IterationCase{}
	for _, c := range cases {
		if _, ok := byGPU[c.GPU]; !ok {
			gpus = append(gpus, c.GPU)
		}
		byGPU[c.GPU] = append(byGPU[c.GPU], c)
	}
	w := bufio.NewWriter(stdout)
	if held == nil {
		fmt.Fprintln(w, "# leave-one-TP-out: each GPU's coefficients are fitted on its other tensor-parallel degrees and predict the held-out one")
	} else {
		fmt.Fprintf(w, "# coefficients fitted per GPU on the rows --holdout %s leaves; the held-out rows are predicted\n", held.String())
	}
	fmt.Fprintf(w, "%-10s %3s %6s %4s %5s %-6s %11s %12s %9s\n", "gpu", "tp", "P", "B", "T", "kind", "measured_ms", "predicted_ms", "error_pct")
	var all []calibrate.IterationPrediction
	for _, g := range gpus {
		folds := []int{0}
		if held == nil {
			folds = folds[:0]
			for _, c := range byGPU[g] {
				if !slices.Contains(folds, c.TP) {
					folds = append(folds, c.TP)
				}
			}
			sort.Ints(folds)
		}
		for _, fold := range folds {
			var fitCases, test []calibrate.IterationCase
			for _, c := range byGPU[g] {
				if isHeld(c, fold) {
					test = append(test, c)
				} else {
					fitCases = append(fitCases, c)
				}
			}
			if len(fitCases) == 0 || len(test) == 0 {
				return fmt.Errorf("%w: %s: the split leaves no rows to fit or none to predict", errUsage, g.Name)
			}
			fr, err := calibrate.FitIterations(fitCases, prof.For(g), opts)
			if err != nil {
				return err
			}
			slog.Info("fitted", "gpu", g.Name, "held_out_tp", fold, "rows", len(fitCases), "mape_pct", fmt.Sprintf("%.2f", fr.MAPE),
				"compute_eff", fmt.Sprintf("%.3f", fr.Coef.ComputeEfficiency), "memory_eff", fmt.Sprintf("%.3f", fr.Coef.MemoryEfficiency),
				"iter_ms", fmt.Sprintf("%.2f", fr.Coef.IterationOverheadMS), "allreduce_us", fmt.Sprintf("%.1f", fr.Coef.AllReduceUS),
				"hop_us", fmt.Sprintf("%.2f", fr.Coef.AllReduceHopUS), "link_eff", fmt.Sprintf("%.3f", fr.Coef.LinkEfficiency),
				"floor_ms", fmt.Sprintf("%.2f", fr.Coef.LaunchFloorMS))
			for _, c := range test {
				p, err := calibrate.PredictIteration(c, fr.Coef)
				if err != nil {
					return err
				}
				all = append(all, p)
				fmt.Fprintf(w, "%-10s %3d %6d %4d %5d %-6s %11.2f %12.2f %+9.2f\n", g.Name, c.TP, c.Prompt, c.Batch, c.Tokens, c.Kind,
					c.Seconds*1e3, p.Predicted*1e3, p.ErrorPct())
			}
		}
	}
	groups := map[string][]calibrate.IterationPrediction{}
	var keys []string
	for _, p := range all {
		for _, k := range []string{fmt.Sprintf("%s TP%d %s", p.GPU.Name, p.TP, p.Kind), fmt.Sprintf("%s TP%d", p.GPU.Name, p.TP)} {
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], p)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "held-out MAPE %.2f%% over %d points of %s\n", calibrate.IterationMAPE(groups[k]), len(groups[k]), k)
	}
	fmt.Fprintf(w, "held-out MAPE %.2f%% over %d points\n", calibrate.IterationMAPE(all), len(all))
	return w.Flush()
}

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

// String is the spec as given.
func (h *holdoutSpec) String() string {
	if h == nil {
		return ""
	}
	var vals []string
	for _, n := range h.ints {
		vals = append(vals, strconv.Itoa(n))
	}
	vals = append(vals, h.models...)
	return h.key + "=" + strings.Join(vals, ",")
}

// forwardOptions are calibrateForward's flags beyond the file, GPU and model.
type forwardOptions struct {
	fit  bool
	held *holdoutSpec
	opts calibrate.FitOptions
	tp   int    // 0: from the file
	out  string // -o: the fitted profile
}

// calibrateForward compares the cost model's GPU part (roofline terms, no engine overheads, no
// all-reduce) with forward-pass profiles written by tools/profile_forward.py; with fit, it
// first fits the GPU's efficiencies on the points fo.held leaves. Each point's model is the
// file's model column (a catalog name) unless --model names one for all, and its
// tensor-parallel degree the tp column (1 without it) unless --tp gives it.
func calibrateForward(stdout io.Writer, paths []string, cat *sim.Catalog, prof *sim.Profile, gpuName string, models []string, fo forwardOptions) error {
	if gpuName == "" {
		return fmt.Errorf("%w: --forward needs --gpu (the catalog GPU the profile was measured on)", errUsage)
	}
	if fo.held != nil && !slices.Contains([]string{"B", "L", "model", "tp"}, fo.held.key) {
		return fmt.Errorf("%w: --holdout with --forward takes B (batch size), L (context length), model or tp", errUsage)
	}
	if fo.out != "" && !fo.fit {
		return fmt.Errorf("%w: -o with --forward writes fitted coefficients: add --fit", errUsage)
	}
	if len(models) > 1 {
		return fmt.Errorf("%w: --forward takes at most one --model (else each file's model column)", errUsage)
	}
	for i, p := range paths {
		if slices.Contains(paths[:i], p) {
			return fmt.Errorf("%w: --forward %s is given twice", errUsage, p)
		}
	}
	for _, k := range append(append([]string(nil), fo.opts.Only...), fo.opts.Also...) {
		if !slices.Contains(calibrate.ForwardFittable, k) {
			return fmt.Errorf("%w: %s does not enter a bare forward pass's time; --forward fits %s", errUsage, k, strings.Join(calibrate.ForwardFittable, ", "))
		}
	}
	g, err := cat.GPU(gpuName)
	if err != nil {
		return err
	}
	sets, err := forwardSets(paths, cat, g, models, fo.tp)
	if err != nil {
		return err
	}
	held := func(s calibrate.ForwardSet, p calibrate.ForwardPoint) bool {
		return fo.held.matches(calibrate.Case{Row: calibrate.Row{Batch: p.Batch, Length: p.Context}, Model: s.Model, TP: s.TP})
	}
	total := 0
	for _, s := range sets {
		total += len(s.Points)
	}
	coef := prof.For(g)
	w := bufio.NewWriter(stdout)
	if fo.fit {
		var fitSets []calibrate.ForwardSet
		n := 0
		for _, s := range sets {
			fs := calibrate.ForwardSet{Model: s.Model, TP: s.TP}
			for _, p := range s.Points {
				if !held(s, p) {
					fs.Points = append(fs.Points, p)
				}
			}
			n += len(fs.Points)
			fitSets = append(fitSets, fs)
		}
		if n == 0 || (fo.held != nil && n == total) {
			return fmt.Errorf("%w: --holdout %s leaves no points to fit or none to predict", errUsage, fo.held.String())
		}
		fr, err := calibrate.FitForward(fitSets, g, coef, fo.opts)
		if err != nil {
			return err
		}
		coef = fr.Coef
		fmt.Fprintf(w, "# fitted on %d of %d points (MAPE %.2f%% on them): compute_efficiency %.4f, memory_efficiency %.4f, attention_efficiency %.4f",
			n, total, fr.MAPE, coef.ComputeEfficiency, coef.MemoryEfficiency, coef.AttentionEfficiency)
		if coef.AttentionComputeEfficiency > 0 {
			fmt.Fprintf(w, ", attention_compute_efficiency %.4f", coef.AttentionComputeEfficiency)
		}
		if coef.LayerLatencyUS > 0 {
			fmt.Fprintf(w, ", layer_latency_us %.2f", coef.LayerLatencyUS)
		}
		fmt.Fprintln(w)
		if b := calibrate.AtBounds(coef); len(b) > 0 {
			slog.Warn("fitted coefficients at the edge of their range: the points do not constrain them", "gpu", g.Name, "coefficients", strings.Join(b, ", "))
		}
		prof.Set(g.Name, coef)
	}
	src := "profile " + prof.Source
	if fo.fit {
		src = "coefficients fitted above"
	}
	fmt.Fprintf(w, "# measured forward passes on %s vs the cost model's GPU part (no engine overheads; at TP > 1 one GPU's shard, no all-reduce), %s\n", g.Name, src)
	fmt.Fprintf(w, "%-28s %3s %-8s %5s %7s %11s %12s %9s %8s\n", "model", "tp", "phase", "B", "context", "measured_ms", "predicted_ms", "error_pct", "set")
	set := func(s calibrate.ForwardSet, p calibrate.ForwardPoint) string {
		switch {
		case !fo.fit:
			return "-"
		case held(s, p):
			return "held-out"
		}
		return "fitted"
	}
	groups := map[string][]calibrate.ForwardPrediction{}
	var keys []string
	add := func(k string, p calibrate.ForwardPrediction) {
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	var all []calibrate.ForwardPrediction
	for _, s := range sets {
		cm, err := sim.NewCostModel(s.Model, g, coef, sim.WithTP(s.TP))
		if err != nil {
			return err
		}
		shape := fmt.Sprintf("%s TP %d", s.Model.ID, s.TP)
		for _, p := range calibrate.PredictForward(s.Points, cm) {
			st := set(s, p.ForwardPoint)
			fmt.Fprintf(w, "%-28s %3d %-8s %5d %7d %11.3f %12.3f %+9.2f %8s\n", s.Model.ID, s.TP, p.Phase, p.Batch, p.Context, p.Seconds*1e3, p.Predicted*1e3, p.ErrorPct(), st)
			all = append(all, p)
			add(shape+" "+p.Phase, p)
			if len(sets) > 1 {
				add(shape, p)
			}
			if fo.held != nil {
				add(shape+" "+p.Phase+" "+st, p)
				add(st, p)
			}
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "MAPE %.2f%% over %d points: %s\n", calibrate.ForwardMAPE(groups[k]), len(groups[k]), k)
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d points\n", calibrate.ForwardMAPE(all), len(all))
	if err := w.Flush(); err != nil {
		return err
	}
	if fo.out != "" {
		var files []string
		for _, p := range paths {
			files = append(files, filepath.Base(p))
		}
		return writeProfile(fo.out, prof,
			"Cost-model profile written by: mosaic "+strings.Join(os.Args[1:], " "),
			fmt.Sprintf("%s's efficiencies fitted on forward passes (tools/profile_forward.py: %s; %d points);", g.Name, strings.Join(files, ", "), total),
			"the engine overheads are the starting profile's: a bare forward pass does not measure them.")
	}
	return nil
}

// forwardSets reads forward-pass profiles of GPU g and groups their points by model shape
// (model, TP), in the order the shapes first appear: a point's model is its model column unless
// models names one (which must then agree with a column naming a catalog model), its degree its
// tp column, or tp (> 0) for points without one, else 1. A gpu column naming another catalog
// GPU than g is an error.
func forwardSets(paths []string, cat *sim.Catalog, g *sim.GPU, models []string, tp int) ([]calibrate.ForwardSet, error) {
	var sets []calibrate.ForwardSet
	for _, path := range paths {
		points, err := calibrate.ReadForward(path)
		if err != nil {
			return nil, err
		}
		for _, p := range points {
			if p.GPU != "" {
				if pg, err := cat.GPU(p.GPU); err == nil && pg != g {
					return nil, fmt.Errorf("%s:%d: column \"gpu\" is %s, but --gpu %s", path, p.Line, pg.Name, g.Name)
				}
			}
			var m *sim.Model
			switch {
			case len(models) == 1:
				if m, err = cat.Model(models[0]); err != nil {
					return nil, err
				}
				if p.Model != "" {
					if pm, err := cat.Model(p.Model); err == nil && pm != m {
						return nil, fmt.Errorf("%s:%d: column \"model\" is %s, but --model %s", path, p.Line, pm.ID, m.ID)
					}
				}
			case p.Model == "":
				return nil, fmt.Errorf("%s:%d: column \"model\" is empty: give --model", path, p.Line)
			default:
				if m, err = cat.Model(p.Model); err != nil {
					return nil, fmt.Errorf("%s:%d: column \"model\": %w (or give --model)", path, p.Line, err)
				}
			}
			deg := max(p.TP, 1)
			if tp > 0 {
				if p.TP != 0 && p.TP != tp {
					return nil, fmt.Errorf("%s:%d: column \"tp\" is %d, but --tp %d", path, p.Line, p.TP, tp)
				}
				deg = tp
			}
			if err := sim.ValidTP(m, deg); err != nil {
				return nil, fmt.Errorf("%s:%d: %s at TP %d: %w", path, p.Line, m.ID, deg, err)
			}
			i := slices.IndexFunc(sets, func(s calibrate.ForwardSet) bool { return s.Model == m && s.TP == deg })
			if i < 0 {
				sets = append(sets, calibrate.ForwardSet{Model: m, TP: deg})
				i = len(sets) - 1
			}
			sets[i].Points = append(sets[i].Points, p)
		}
	}
	return sets, nil
}

// calibrateCPU fits engine CPU overheads to Vidur's measured CPU times and prints the predicted
// steady decode throughput of one model at batch sizes 1-256 under three sets of overheads:
// the built-in profile's (fitted on vLLM 0.6 end-to-end latencies), Vidur's measured CPU
// times, and none (the GPU alone).
func calibrateCPU(stdout io.Writer, path string, cat *sim.Catalog, prof *sim.Profile, gpuName string, models []string, context int) error {
	rows, err := calibrate.ReadCPUOverheads(path)
	if err != nil {
		return err
	}
	engine, err := calibrate.FitOverheadLine(rows, calibrate.CPUOverheadRow.Engine)
	if err != nil {
		return err
	}
	withRay, err := calibrate.FitOverheadLine(rows, func(r calibrate.CPUOverheadRow) float64 { return r.Engine() + r.RayComm })
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "# %s: %d rows (%s, TP %d, batch %d-%d)\n", filepath.Base(path), len(rows), rows[0].Model, rows[0].TP, rows[0].Batch, rows[len(rows)-1].Batch)
	fmt.Fprintf(w, "fit: schedule + sampler + prepare inputs + process outputs = %.3f ms + %.4f ms/seq (max residual %.1f%%)\n", engine.FixedMS, engine.PerSeqMS, engine.MaxResidualPct)
	fmt.Fprintf(w, "fit: the same + Ray communication     = %.3f ms + %.4f ms/seq (max residual %.1f%%)\n", withRay.FixedMS, withRay.PerSeqMS, withRay.MaxResidualPct)
	modelName := "llama-3-8b"
	if len(models) == 1 {
		modelName = models[0]
	} else if len(models) > 1 {
		return fmt.Errorf("%w: --cpu-overheads takes one --model", errUsage)
	}
	m, err := cat.Model(modelName)
	if err != nil {
		return err
	}
	gpuNames := []string{"A100-80GB", "H100-80GB"}
	if gpuName != "" {
		gpuNames = []string{gpuName}
	}
	fmt.Fprintf(w, "\n# %s, every sequence decoding with %d cached tokens; step = one engine iteration\n", m.ID, context)
	fmt.Fprintf(w, "%-10s %-12s %4s %9s %9s %10s %-8s %8s %11s %12s %9s\n", "gpu", "overheads", "B", "step_ms", "tok_s", "linear_ms", "bound", "attn_ms", "overhead_ms", "kv_max_batch", "floor_ms")
	for _, name := range gpuNames {
		g, err := cat.GPU(name)
		if err != nil {
			return err
		}
		base := prof.For(g)
		vidur := base
		vidur.IterationOverheadMS, vidur.PerSeqOverheadMS = engine.FixedMS, engine.PerSeqMS
		none := base
		none.IterationOverheadMS, none.PerSeqOverheadMS = 0, 0
		for _, set := range []struct {
			name string
			coef sim.Coefficients
		}{{"vllm-0.6 fit", base}, {"vidur cpu", vidur}, {"none", none}} {
			cm, err := sim.NewCostModel(m, g, set.coef)
			if err != nil {
				return err
			}
			kvMax := 0
			if eng, err := sim.DefaultEngine().WithKVCache(cm, sim.DefaultGPUMemoryUtilization); err == nil {
				kvMax = eng.NumBlocks * eng.BlockSize / (context + 1)
			}
			for _, b := range []int{1, 16, 64, 128, 192, 256} {
				d := calibrate.DecodeBreakdown(cm, b, context)
				fmt.Fprintf(w, "%-10s %-12s %4d %9.2f %9.0f %10.2f %-8s %8.2f %11.2f %12d %9.2f\n", g.Name, set.name, b, d.Seconds*1e3, d.Throughput(),
					d.Linear*1e3, d.LinearBound, d.Attention*1e3, d.Overhead*1e3, kvMax, d.Floor*1e3)
			}
		}
	}
	return w.Flush()
}
