package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

func runProfile(args []string, stdout io.Writer) error {
	fs := newFlagSet("profile", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "the server's root URL, e.g. http://127.0.0.1:8000")
	model := fs.String("model", "", "the model name the server serves")
	arch := fs.String("arch", "", "the catalog architecture of the model (default: --model)")
	gpuName := fs.String("gpu", "", "the catalog GPU the server runs on (required)")
	out := fs.String("o", "", "write the fitted profile to this file")
	lengths := fs.String("lengths", "128,512,2048", "prompt = output lengths to sweep")
	batches := fs.String("batches", "1,8,32,64", "batch sizes to sweep")
	scale := fs.Float64("time-scale", 1, "the server's time scale (an emulator's --time-scale)")
	warmup := fs.Int("warmup", 4, "warm-up requests before measuring")
	maxSeqs := fs.Int("max-num-seqs", sim.DefaultMaxNumSeqs, "the server's max_num_seqs")
	budget := fs.Int("max-batched-tokens", sim.DefaultMaxBatchedTokens, "the server's max_num_batched_tokens")
	util := fs.Float64("gpu-memory-utilization", sim.DefaultGPUMemoryUtilization, "the server's gpu_memory_utilization")
	chunked := fs.Bool("chunked-prefill", true, "whether the server uses chunked prefill")
	apiKeyEnv := fs.String("api-key-env", "", "environment variable holding the server's API key")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic profile --endpoint URL --model NAME --gpu GPU [--arch HF_ID] [-o profile.toml]\n\n"+
			"Measures batch latencies over a sweep of lengths and batch sizes, fits the cost model's coefficients\n"+
			"of the GPU to them, and writes a profile the simulator and the mosaic planner load ([cluster] profile).")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *endpoint == "" || *model == "" || *gpuName == "" {
		return fmt.Errorf("%w: --endpoint, --model and --gpu are required", errUsage)
	}
	switch {
	case !(*scale > 0) || *scale > 1e6:
		return fmt.Errorf("%w: --time-scale must be in (0, 1e6], got %g", errUsage, *scale)
	case *warmup < 0:
		return fmt.Errorf("%w: --warmup must not be negative, got %d", errUsage, *warmup)
	case *maxSeqs < 1:
		return fmt.Errorf("%w: --max-num-seqs must be at least 1, got %d", errUsage, *maxSeqs)
	case *budget < *maxSeqs:
		return fmt.Errorf("%w: --max-batched-tokens (%d) must be at least --max-num-seqs (%d)", errUsage, *budget, *maxSeqs)
	case !(*util > 0) || *util > 1:
		return fmt.Errorf("%w: --gpu-memory-utilization must be in (0, 1], got %g", errUsage, *util)
	}
	ls, err := parseCounts(*lengths)
	if err != nil {
		return fmt.Errorf("%w: --lengths: %v", errUsage, err)
	}
	bs, err := parseCounts(*batches)
	if err != nil {
		return fmt.Errorf("%w: --batches: %v", errUsage, err)
	}
	cat := sim.DefaultCatalog()
	g, err := cat.GPU(*gpuName)
	if err != nil {
		return err
	}
	if *arch == "" {
		*arch = *model
	}
	m, err := cat.Model(*arch)
	if err != nil {
		return fmt.Errorf("%w (give the model's catalog id with --arch)", err)
	}
	key := ""
	if *apiKeyEnv != "" {
		if key = os.Getenv(*apiKeyEnv); key == "" {
			return fmt.Errorf("the environment variable %s is empty or unset", *apiKeyEnv)
		}
	}
	if parseOnly {
		return nil
	}
	ms, err := replay.Profile(context.Background(), replay.ProfileConfig{URL: *endpoint, Model: *model, APIKey: key,
		Lengths: ls, Batches: bs, TimeScale: *scale, Warmup: *warmup,
		Progress: func(x replay.Measurement) { slog.Info("measured", "L", x.Length, "B", x.Batch, "latency_s", x.Latency) }})
	if err != nil {
		return err
	}
	engine := func(cm *sim.CostModel) (sim.EngineConfig, error) {
		eng := sim.EngineConfig{MaxNumSeqs: *maxSeqs, MaxBatchedTokens: *budget, ChunkedPrefill: *chunked, BlockSize: sim.DefaultBlockSize}
		return eng.WithKVCache(cm, *util)
	}
	var cases []calibrate.Case
	for i, x := range ms {
		cases = append(cases, calibrate.Case{Row: calibrate.Row{Line: i + 1, Hardware: g.Name, NumGPUs: 1, Framework: "measured",
			Model: m.ID, Length: x.Length, Batch: x.Batch, Latency: x.Latency}, GPU: g, Model: m, Engine: engine})
	}
	prof := sim.DefaultProfile()
	fr, err := calibrate.Fit(cases, prof.For(g), calibrate.FitOptions{})
	if err != nil {
		return err
	}
	prof.Set(g.Name, fr.Coef)
	if b := calibrate.AtBounds(fr.Coef); len(b) > 0 {
		slog.Warn("fitted coefficients at the edge of their range: the sweep does not constrain them (measure more lengths and batch sizes)", "coefficients", strings.Join(b, ", "))
	}
	preds, err := calibrate.PredictAll(cases, prof)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "%-42s %6s %4s %11s %11s %9s\n", "model", "L", "B", "measured_s", "predicted_s", "error_pct")
	for _, p := range preds {
		fmt.Fprintf(w, "%-42s %6d %4d %11.3f %11.3f %+9.2f\n", p.Model.ID, p.Length, p.Batch, p.Latency, p.Predicted, p.ErrorPct())
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d rows\n", calibrate.MAPE(preds), len(preds))
	if err := w.Flush(); err != nil {
		return err
	}
	if *out != "" {
		return writeProfile(*out, prof, "Cost-model profile written by: mosaic "+strings.Join(os.Args[1:], " "),
			fmt.Sprintf("%s on %s, %d measurements, MAPE %.2f%%; [gpu.%s] is fitted, [default] is the built-in one.", m.ID, g.Name, len(preds), calibrate.MAPE(preds), strings.ToLower(g.Name)))
	}
	return nil
}
