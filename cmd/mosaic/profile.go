package main

import (
	"bufio"
	"cmp"
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
	pa, err := parseProfile(args)
	if err != nil || parseOnly {
		return err
	}
	prof, err := replay.Profile(context.Background(), pa.cfg)
	if err != nil {
		return err
	}
	measured := make([]calibrate.Measured, len(prof.Batches))
	for i, x := range prof.Batches {
		measured[i] = calibrate.Measured{Length: x.Length, Output: x.Output, Batch: x.Batch, Latency: x.Latency}
	}
	fit, err := calibrate.FitMeasured(pa.gpu, pa.model, pa.engine, measured, prof.Loads)
	if err != nil {
		return err
	}
	if b := calibrate.AtBounds(fit.Coef); len(b) > 0 {
		slog.Warn("fitted coefficients at the edge of their range: the sweep does not constrain them (measure more lengths and batch sizes)", "coefficients", strings.Join(b, ", "))
	}
	return printProfileFit(stdout, fit, pa.model, pa.gpu, pa.out)
}

// profileArgs is what mosaic profile is asked to do: the sweep to measure, the hardware and
// model to fit, the server's engine, and where to write the profile.
type profileArgs struct {
	cfg    replay.ProfileConfig
	gpu    *sim.GPU
	model  *sim.Model
	engine func(*sim.CostModel) (sim.EngineConfig, error)
	out    string
}

// profileFlags are mosaic profile's flags.
type profileFlags struct {
	endpoint, model, arch, gpu, out, lengths, batches, outputs, apiKeyEnv, api, catalog *string
	scale, util                                                                         *float64
	warmup, maxSeqs, budget, promptWords, loads                                         *int
	chunked                                                                             *bool
}

func newProfileFlags(fs *flag.FlagSet) *profileFlags {
	return &profileFlags{
		endpoint:    fs.String("endpoint", "", "the server's root URL, e.g. http://127.0.0.1:8000"),
		model:       fs.String("model", "", "the model name the server serves"),
		arch:        fs.String("arch", "", "the catalog architecture of the model (default: --model)"),
		gpu:         fs.String("gpu", "", "the catalog GPU the server runs on (required)"),
		out:         fs.String("o", "", "write the fitted profile to this file"),
		lengths:     fs.String("lengths", "128,512,2048", "prompt = output lengths to sweep"),
		batches:     fs.String("batches", "1,8,32,64", "batch sizes to sweep"),
		outputs:     fs.String("outputs", "L", "output lengths to sweep with each prompt length (L: the prompt's length), e.g. L,8 to separate prefill from decode"),
		scale:       fs.Float64("time-scale", 1, "the server's time scale (an emulator's --time-scale)"),
		warmup:      fs.Int("warmup", 4, "warm-up requests before measuring"),
		maxSeqs:     fs.Int("max-num-seqs", sim.DefaultMaxNumSeqs, "the server's max_num_seqs"),
		budget:      fs.Int("max-batched-tokens", sim.DefaultMaxBatchedTokens, "the server's max_num_batched_tokens"),
		util:        fs.Float64("gpu-memory-utilization", sim.DefaultGPUMemoryUtilization, "the server's gpu_memory_utilization"),
		chunked:     fs.Bool("chunked-prefill", true, "whether the server uses chunked prefill"),
		apiKeyEnv:   fs.String("api-key-env", "", "environment variable holding the server's API key"),
		api:         fs.String("api", "openai", "the server's API: openai (vLLM, mosaic emulate) or ollama"),
		promptWords: fs.Int("prompt-words", replay.DefaultPromptWords, "distinct words of text prompts (ollama)"),
		loads:       fs.Int("loads", 0, "unload and load the model this many times and fit the profile's start-up time to the loads (ollama; default 3 there)"),
		catalog:     fs.String("catalog", "", "extra GPUs and models (TOML), for a server whose hardware or model is not built in"),
	}
}

// check rejects flags out of range.
func (f *profileFlags) check() error {
	switch {
	case !(*f.scale > 0) || *f.scale > 1e6:
		return fmt.Errorf("%w: --time-scale must be in (0, 1e6], got %g", errUsage, *f.scale)
	case *f.warmup < 0:
		return fmt.Errorf("%w: --warmup must not be negative, got %d", errUsage, *f.warmup)
	case *f.maxSeqs < 1:
		return fmt.Errorf("%w: --max-num-seqs must be at least 1, got %d", errUsage, *f.maxSeqs)
	case *f.budget < *f.maxSeqs:
		return fmt.Errorf("%w: --max-batched-tokens (%d) must be at least --max-num-seqs (%d)", errUsage, *f.budget, *f.maxSeqs)
	case !(*f.util > 0) || *f.util > 1:
		return fmt.Errorf("%w: --gpu-memory-utilization must be in (0, 1], got %g", errUsage, *f.util)
	case *f.api != string(replay.APIOpenAI) && *f.api != string(replay.APIOllama):
		return fmt.Errorf("%w: --api must be openai or ollama, got %q", errUsage, *f.api)
	case *f.promptWords < 2:
		return fmt.Errorf("%w: --prompt-words must be at least 2, got %d", errUsage, *f.promptWords)
	case *f.loads < 0:
		return fmt.Errorf("%w: --loads must not be negative, got %d", errUsage, *f.loads)
	case *f.loads > 0 && *f.api != string(replay.APIOllama):
		return fmt.Errorf("%w: --loads measures loads through the server's API (--api ollama); a vLLM server serves one model for its life", errUsage)
	}
	return nil
}

// parseProfile reads and checks mosaic profile's command line and resolves its GPU and model.
func parseProfile(args []string) (*profileArgs, error) {
	fs := newFlagSet("profile", flag.ContinueOnError)
	f := newProfileFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic profile --endpoint URL --model NAME --gpu GPU [--arch HF_ID] [--api openai|ollama] [--catalog F] [-o profile.toml]\n\n"+
			"Measures batch latencies over a sweep of lengths and batch sizes, fits the cost model's coefficients\n"+
			"of the GPU to them, and writes a profile the simulator and the mosaic planner load ([cluster] profile).")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 || *f.endpoint == "" || *f.model == "" || *f.gpu == "" {
		return nil, fmt.Errorf("%w: --endpoint, --model and --gpu are required", errUsage)
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	loadsGiven := false
	fs.Visit(func(fl *flag.Flag) { loadsGiven = loadsGiven || fl.Name == "loads" })
	if *f.api == string(replay.APIOllama) && !loadsGiven {
		*f.loads = 3
	}
	pa := &profileArgs{out: *f.out, cfg: replay.ProfileConfig{URL: *f.endpoint, Model: *f.model, TimeScale: *f.scale, Warmup: *f.warmup,
		API: replay.API(*f.api), PromptWords: *f.promptWords, Loads: *f.loads,
		Progress: func(x replay.Measurement) {
			slog.Info("measured", "L", x.Length, "out", x.Output, "B", x.Batch, "latency_s", x.Latency)
		}}}
	if pa.cfg.Lengths, err = parseCounts(*f.lengths); err != nil {
		return nil, fmt.Errorf("%w: --lengths: %v", errUsage, err)
	}
	if pa.cfg.Batches, err = parseCounts(*f.batches); err != nil {
		return nil, fmt.Errorf("%w: --batches: %v", errUsage, err)
	}
	if pa.cfg.Outputs, err = parseOutputs(*f.outputs); err != nil {
		return nil, err
	}
	cat := sim.DefaultCatalog()
	if *f.catalog != "" {
		if err := cat.AddFile(*f.catalog); err != nil {
			return nil, err
		}
	}
	if pa.gpu, err = cat.GPU(*f.gpu); err != nil {
		return nil, err
	}
	if pa.model, err = cat.Model(cmp.Or(*f.arch, *f.model)); err != nil {
		return nil, fmt.Errorf("%w (give the model's catalog id with --arch)", err)
	}
	if *f.apiKeyEnv != "" {
		if pa.cfg.APIKey = os.Getenv(*f.apiKeyEnv); pa.cfg.APIKey == "" {
			return nil, fmt.Errorf("the environment variable %s is empty or unset", *f.apiKeyEnv)
		}
	}
	maxSeqs, budget, chunked, util := *f.maxSeqs, *f.budget, *f.chunked, *f.util
	pa.engine = func(cm *sim.CostModel) (sim.EngineConfig, error) {
		eng := sim.EngineConfig{MaxNumSeqs: maxSeqs, MaxBatchedTokens: budget, ChunkedPrefill: chunked, BlockSize: sim.DefaultBlockSize}
		return eng.WithKVCache(cm, util)
	}
	return pa, nil
}

// parseOutputs reads --outputs: output lengths, or L for the prompt's own (0).
func parseOutputs(s string) ([]int, error) {
	var outs []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "L" || f == "l" {
			outs = append(outs, 0)
			continue
		}
		n, err := parseCounts(f)
		if err != nil {
			return nil, fmt.Errorf("%w: --outputs: %v (or L, the prompt's length)", errUsage, err)
		}
		outs = append(outs, n...)
	}
	return outs, nil
}

// printProfileFit prints each measured batch beside its prediction and the error, and writes
// the fitted profile to out when it is set.
func printProfileFit(stdout io.Writer, fit *calibrate.MeasuredFit, m *sim.Model, g *sim.GPU, out string) error {
	preds, loadNote := fit.Predictions, fit.LoadNote()
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "%-42s %6s %6s %4s %11s %11s %9s\n", "model", "L", "out", "B", "measured_s", "predicted_s", "error_pct")
	for _, p := range preds {
		fmt.Fprintf(w, "%-42s %6d %6d %4d %11.3f %11.3f %+9.2f\n", p.Model.ID, p.Length, p.Outputs(), p.Batch, p.Latency, p.Predicted, p.ErrorPct())
	}
	fmt.Fprintf(w, "MAPE %.2f%% over %d rows%s\n", calibrate.MAPE(preds), len(preds), loadNote)
	if err := w.Flush(); err != nil {
		return err
	}
	if out != "" {
		return writeProfile(out, fit.Profile, "Cost-model profile written by: mosaic "+strings.Join(os.Args[1:], " "),
			fmt.Sprintf("%s on %s, %d measurements, MAPE %.2f%%%s; [gpu.%s] is fitted, [default] is the built-in one.", m.ID, g.Name, len(preds), calibrate.MAPE(preds), loadNote, strings.ToLower(g.Name)))
	}
	return nil
}
