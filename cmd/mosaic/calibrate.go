package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

func runCalibrate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	data := fs.String("data", "", "measured batch latencies (CSV in the LLM-Inference-Bench format)")
	framework := fs.String("framework", "vLLM", "keep rows of this framework (empty: all)")
	gpus := fs.Int("gpus", 1, "keep rows measured on this many GPUs")
	gpu := fs.String("gpu", "", "simulate on this catalog GPU, keeping only rows of its hardware")
	var models multiFlag
	fs.Var(&models, "model", "keep only this model (catalog id or alias; repeatable)")
	var operators multiFlag
	fs.Var(&operators, "operators", "operator-level profile (Vidur *__mlp.csv.gz) that pins the fitted GPU's compute efficiency (repeatable)")
	fit := fs.Bool("fit", false, "fit the GPU's cost-model coefficients on the rows before predicting")
	out := fs.String("o", "", "write the (fitted) profile as TOML to this file")
	profile := fs.String("profile", "", "predict with this profile instead of the built-in one")
	catalog := fs.String("catalog", "", "extra GPUs and models (TOML)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic calibrate --data FILE [--framework vLLM] [--gpus 1] [--gpu NAME] [--model M] [--fit] [-o profile.toml]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *data == "" {
		return fmt.Errorf("%w: --data FILE is required", errUsage)
	}
	if *gpus < 1 {
		return fmt.Errorf("%w: --gpus must be at least 1, got %d", errUsage, *gpus)
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
	rows, err := calibrate.ReadFile(*data)
	if err != nil {
		return err
	}
	sel, err := calibrate.Select(rows, cat, calibrate.Filter{Framework: *framework, GPUs: *gpus, GPU: *gpu, Models: models})
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
	var opts calibrate.FitOptions
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
			slog.Info("fitting", "gpu", g.Name, "rows", len(byGPU[g]))
			startCoef := prof.For(g)
			if opts.KeepCompute {
				startCoef.ComputeEfficiency = computeEff
			}
			fr, err := calibrate.Fit(byGPU[g], startCoef, opts)
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
	fmt.Fprintf(w, "%-42s %6s %4s %11s %11s %9s %6s\n", "model", "L", "B", "measured_s", "predicted_s", "error_pct", "preempt")
	for _, p := range preds {
		fmt.Fprintf(w, "%-42s %6d %4d %11.3f %11.3f %+9.2f %6d\n", p.Model.ID, p.Length, p.Batch, p.Latency, p.Predicted, p.ErrorPct(), p.Preemptions)
	}
	ids, groups := calibrate.ByModel(preds)
	for _, id := range ids {
		fmt.Fprintf(w, "MAPE %.2f%% over %d rows of %s\n", calibrate.MAPE(groups[id]), len(groups[id]), id)
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
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		header := []string{
			"Cost-model profile written by: mosaic " + strings.Join(os.Args[1:], " "),
			fmt.Sprintf("GPUs: %s; %d measured rows; MAPE %.2f%%.", strings.Join(names, ", "), len(preds), calibrate.MAPE(preds)),
			"[default] holds the coefficients used for GPUs without their own entry.",
		}
		if err := prof.Write(f, header...); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		slog.Info("profile written", "file", *out)
	}
	return nil
}
