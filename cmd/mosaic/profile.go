package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
	outputs := fs.String("outputs", "L", "output lengths to sweep with each prompt length (L: the prompt's length), e.g. L,8 to separate prefill from decode")
	scale := fs.Float64("time-scale", 1, "the server's time scale (an emulator's --time-scale)")
	warmup := fs.Int("warmup", 4, "warm-up requests before measuring")
	maxSeqs := fs.Int("max-num-seqs", sim.DefaultMaxNumSeqs, "the server's max_num_seqs")
	budget := fs.Int("max-batched-tokens", sim.DefaultMaxBatchedTokens, "the server's max_num_batched_tokens")
	util := fs.Float64("gpu-memory-utilization", sim.DefaultGPUMemoryUtilization, "the server's gpu_memory_utilization")
	chunked := fs.Bool("chunked-prefill", true, "whether the server uses chunked prefill")
	apiKeyEnv := fs.String("api-key-env", "", "environment variable holding the server's API key")
	api := fs.String("api", "openai", "the server's API: openai (vLLM, mosaic emulate) or ollama")
	promptWords := fs.Int("prompt-words", replay.DefaultPromptWords, "distinct words of text prompts (ollama)")
	loads := fs.Int("loads", 0, "unload and load the model this many times and fit the profile's start-up time to the loads (ollama; default 3 there)")
	catalog := fs.String("catalog", "", "extra GPUs and models (TOML), for a server whose hardware or model is not built in")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic profile --endpoint URL --model NAME --gpu GPU [--arch HF_ID] [--api openai|ollama] [--catalog F] [-o profile.toml]\n\n"+
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
	case *api != string(replay.APIOpenAI) && *api != string(replay.APIOllama):
		return fmt.Errorf("%w: --api must be openai or ollama, got %q", errUsage, *api)
	case *promptWords < 2:
		return fmt.Errorf("%w: --prompt-words must be at least 2, got %d", errUsage, *promptWords)
	case *loads < 0:
		return fmt.Errorf("%w: --loads must not be negative, got %d", errUsage, *loads)
	case *loads > 0 && *api != string(replay.APIOllama):
		return fmt.Errorf("%w: --loads measures loads through the server's API (--api ollama); a vLLM server serves one model for its life", errUsage)
	}
	loadsGiven := false
	fs.Visit(func(f *flag.Flag) { loadsGiven = loadsGiven || f.Name == "loads" })
	if *api == string(replay.APIOllama) && !loadsGiven {
		*loads = 3
	}
	ls, err := parseCounts(*lengths)
	if err != nil {
		return fmt.Errorf("%w: --lengths: %v", errUsage, err)
	}
	bs, err := parseCounts(*batches)
	if err != nil {
		return fmt.Errorf("%w: --batches: %v", errUsage, err)
	}
	var outs []int
	for _, f := range strings.Split(*outputs, ",") {
		if f = strings.TrimSpace(f); f == "L" || f == "l" {
			outs = append(outs, 0)
			continue
		}
		n, err := parseCounts(f)
		if err != nil {
			return fmt.Errorf("%w: --outputs: %v (or L, the prompt's length)", errUsage, err)
		}
		outs = append(outs, n...)
	}
	cat := sim.DefaultCatalog()
	if *catalog != "" {
		if err := cat.AddFile(*catalog); err != nil {
			return err
		}
	}
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
	prof0, err := replay.Profile(context.Background(), replay.ProfileConfig{URL: *endpoint, Model: *model, APIKey: key,
		Lengths: ls, Batches: bs, Outputs: outs, TimeScale: *scale, Warmup: *warmup, API: replay.API(*api), PromptWords: *promptWords, Loads: *loads,
		Progress: func(x replay.Measurement) {
			slog.Info("measured", "L", x.Length, "out", x.Output, "B", x.Batch, "latency_s", x.Latency)
		}})
	if err != nil {
		return err
	}
	engine := func(cm *sim.CostModel) (sim.EngineConfig, error) {
		eng := sim.EngineConfig{MaxNumSeqs: *maxSeqs, MaxBatchedTokens: *budget, ChunkedPrefill: *chunked, BlockSize: sim.DefaultBlockSize}
		return eng.WithKVCache(cm, *util)
	}
	var cases []calibrate.Case
	for i, x := range prof0.Batches {
		cases = append(cases, calibrate.Case{Row: calibrate.Row{Line: i + 1, Hardware: g.Name, NumGPUs: 1, Framework: "measured",
			Model: m.ID, Length: x.Length, Output: x.Output, Batch: x.Batch, Latency: x.Latency}, GPU: g, Model: m, Engine: engine})
	}
	prof := sim.DefaultProfile()
	fr, err := calibrate.Fit(cases, prof.For(g), calibrate.FitOptions{})
	if err != nil {
		return err
	}
	loadNote := ""
	if len(prof0.Loads) > 0 {
		// The load time is the weights over the load bandwidth plus the start-up: the
		// measured loads fix the start-up at the profile's bandwidth.
		ls := slices.Clone(prof0.Loads)
		slices.Sort(ls)
		med := ls[len(ls)/2]
		fr.Coef.StartupS = max(0, med-m.WeightBytes()/(fr.Coef.LoadGBps*1e9))
		loadNote = fmt.Sprintf("; model loads: median %.3f s over %d (startup_s %.3f)", med, len(ls), fr.Coef.StartupS)
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
	fmt.Fprintf(w, "%-42s %6s %6s %4s %11s %11s %9s\n", "model", "L", "out", "B", "measured_s", "predicted_s", "error_pct")
	for _, p := range preds {
		fmt.Fprintf(w, "%-42s %6d %6d %4d %11.3f %11.3f %+9.2f\n", p.Model.ID, p.Length, p.Outputs(), p.Batch, p.Latency, p.Predicted, p.ErrorPct())
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d rows%s\n", calibrate.MAPE(preds), len(preds), loadNote)
	if err := w.Flush(); err != nil {
		return err
	}
	if *out != "" {
		return writeProfile(*out, prof, "Cost-model profile written by: mosaic "+strings.Join(os.Args[1:], " "),
			fmt.Sprintf("%s on %s, %d measurements, MAPE %.2f%%%s; [gpu.%s] is fitted, [default] is the built-in one.", m.ID, g.Name, len(preds), calibrate.MAPE(preds), loadNote, strings.ToLower(g.Name)))
	}
	return nil
}
