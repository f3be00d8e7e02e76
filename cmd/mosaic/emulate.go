package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/sim"
)

// crashStatus is the exit status of an emulator killed by --fault-crash-after.
const crashStatus = 3

// launchTimeEnv is the environment variable in which mosaic replay passes a launched server
// the instant it started it (RFC 3339 with nanoseconds); the emulator's load time counts from
// it. replay.LaunchTimeEnv is the same name.
const launchTimeEnv = "MOSAIC_LAUNCH_TIME"

func runEmulate(args []string, stdout io.Writer) error {
	fs := newFlagSet("emulate", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8000", "host:port to serve on (port 0 picks a free one; the address is printed on stdout)")
	allowRemote := fs.Bool("allow-remote", false, "allow a --listen address other hosts can reach")
	gpuName := fs.String("gpu", "", "GPU from the catalog (required)")
	modelName := fs.String("model", "", "model architecture from the catalog, Hugging Face id or alias (required)")
	servedName := fs.String("served-model-name", "", "model name clients send (default: the model's Hugging Face id)")
	scale := fs.Float64("time-scale", 1, "run S times faster than real time (S > 1) or slower (S < 1)")
	maxSeqs := fs.Int("max-num-seqs", emulate.DefaultMaxNumSeqs, "vLLM max_num_seqs")
	maxTokens := fs.Int("max-batched-tokens", emulate.DefaultMaxBatchedTokens, "vLLM max_num_batched_tokens")
	util := fs.Float64("gpu-memory-utilization", emulate.DefaultGPUMemoryUtilization, "vLLM gpu_memory_utilization: the share of GPU memory for weights and KV cache")
	blockSize := fs.Int("block-size", emulate.DefaultBlockSize, "tokens per KV-cache block")
	tensorParallel := fs.Int("tensor-parallel-size", 1, "as vLLM: the worker is a tensor-parallel group of this many GPUs (1, 2, 4 or 8) holding the model sharded")
	chunked := fs.Bool("chunked-prefill", true, "chunked prefill (vLLM V1); false schedules whole prompts first (V0)")
	// vLLM's own spellings, so that one launch template serves vLLM and the emulator.
	enableChunked := fs.Bool("enable-chunked-prefill", false, "as vLLM: chunked prefill on (the default)")
	noChunked := fs.Bool("no-enable-chunked-prefill", false, "as vLLM: chunked prefill off (--chunked-prefill=false)")
	enablePrefix := fs.Bool("enable-prefix-caching", false, "as vLLM: automatic prefix caching of token-ID prompts on (the default)")
	noPrefix := fs.Bool("no-enable-prefix-caching", false, "as vLLM: automatic prefix caching off")
	loadTime := fs.String("load-time", "auto", `emulated model load time before /health answers 200, divided by the time scale: "auto" (weights / load bandwidth + start-up, from the cost model), 0, or a duration; it counts from $`+launchTimeEnv+` when mosaic replay launched the process`)
	unloadTime := fs.Duration("unload-time", time.Second, "emulated time to stop (free the GPU) on SIGTERM or SIGINT, divided by the time scale, as the simulator charges for an unload")
	profilePath := fs.String("profile", "", "cost-model profile TOML (default: the built-in profile)")
	var catalogs multiFlag
	fs.Var(&catalogs, "catalog", "extra catalog TOML with [[gpu]] and [[model]] entries (repeatable)")
	apiKeyEnv := fs.String("api-key-env", "", "require the API key held in this environment variable as 'Authorization: Bearer KEY'")
	logLevel := fs.String("log-level", "info", "log level on stderr: debug (one line per request), info, warn or error")
	var faults emulate.Faults
	fs.Float64Var(&faults.ErrorRate, "fault-error-rate", 0, "fraction of requests answered with HTTP 500")
	fs.Float64Var(&faults.StallRate, "fault-stall-rate", 0, "fraction of requests whose stream stalls half-way for --fault-stall")
	fs.DurationVar(&faults.Stall, "fault-stall", 0, "real duration of a stall")
	fs.IntVar(&faults.CrashAfter, "fault-crash-after", 0, fmt.Sprintf("exit with status %d on accepting the N-th request (0: never)", crashStatus))
	fs.Float64Var(&faults.WrongTokensRate, "fault-wrong-tokens", 0, "fraction of requests that produce one token fewer than max_tokens")
	fs.Float64Var(&faults.DisconnectRate, "fault-disconnect-rate", 0, "fraction of requests whose connection is dropped half-way through the response")
	fs.Int64Var(&faults.Seed, "fault-seed", 1, "seed of the fault draws")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic emulate --gpu NAME --model ARCH [--listen 127.0.0.1:8000] [--time-scale S] [flags]

Serves the OpenAI-compatible API of one vLLM worker (/v1/completions, /v1/chat/completions,
/v1/models, /health, /metrics, /version, and vLLM's development endpoint POST
/reset_prefix_cache) with no GPU: requests run on the simulator's engine model in real time.
Prompts count one token per word, or per ID when given as token IDs (whose leading blocks the
prefix cache may serve, shared only between requests with the same cache_salt); every request
produces exactly max_tokens tokens.`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, pos)
	}
	if *gpuName == "" || *modelName == "" {
		return fmt.Errorf("%w: --gpu and --model are required", errUsage)
	}
	// Zero means "the default" to the emulator's options: a zero typed here is refused
	// rather than silently replaced.
	switch {
	case !(*scale > 0):
		return fmt.Errorf("%w: --time-scale must be positive, got %g", errUsage, *scale)
	case *maxSeqs < 1:
		return fmt.Errorf("%w: --max-num-seqs must be at least 1, got %d", errUsage, *maxSeqs)
	case *maxTokens < 1:
		return fmt.Errorf("%w: --max-batched-tokens must be at least 1, got %d", errUsage, *maxTokens)
	case !(*util > 0):
		return fmt.Errorf("%w: --gpu-memory-utilization must be in (0, 1], got %g", errUsage, *util)
	case *blockSize < 1:
		return fmt.Errorf("%w: --block-size must be at least 1, got %d", errUsage, *blockSize)
	case *tensorParallel < 1:
		return fmt.Errorf("%w: --tensor-parallel-size must be 1, 2, 4 or 8, got %d", errUsage, *tensorParallel)
	}
	if *enablePrefix && *noPrefix {
		return fmt.Errorf("%w: --enable-prefix-caching and --no-enable-prefix-caching contradict each other", errUsage)
	}
	if *enableChunked && *noChunked {
		return fmt.Errorf("%w: --enable-chunked-prefill and --no-enable-chunked-prefill contradict each other", errUsage)
	}
	if *noChunked {
		*chunked = false
	} else if *enableChunked {
		*chunked = true
	}
	if err := emulate.CheckListen(*listen, *allowRemote); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	opts := emulate.Options{Catalog: sim.DefaultCatalog(), MaxNumSeqs: *maxSeqs, MaxBatchedTokens: *maxTokens,
		GPUMemoryUtilization: *util, BlockSize: *blockSize, NoChunkedPrefill: !*chunked, NoPrefixCaching: *noPrefix,
		TensorParallel: *tensorParallel}
	for _, path := range catalogs {
		if err := opts.Catalog.AddFile(path); err != nil {
			return err
		}
	}
	if *profilePath != "" {
		if opts.Profile, err = sim.LoadProfile(*profilePath, nil); err != nil {
			return err
		}
	}
	cfg, err := emulate.ConfigFor(*gpuName, *modelName, opts)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *servedName != "" {
		cfg.ServedName = *servedName
	}
	cfg.TimeScale = *scale
	cfg.Version = "mosaic-emulate/" + version
	switch lt := strings.TrimSpace(*loadTime); lt {
	case "auto":
	case "0":
		cfg.LoadTime = 0
	default:
		d, err := time.ParseDuration(lt)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: --load-time must be auto, 0 or a non-negative duration, got %q", errUsage, lt)
		}
		cfg.LoadTime = d
	}
	if v := os.Getenv(launchTimeEnv); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("%w: $%s: %v", errUsage, launchTimeEnv, err)
		}
		cfg.LoadStart = t
	}
	if *unloadTime < 0 {
		return fmt.Errorf("%w: --unload-time must not be negative, got %v", errUsage, *unloadTime)
	}
	if *apiKeyEnv != "" {
		cfg.APIKey = os.Getenv(*apiKeyEnv)
		if cfg.APIKey == "" {
			return fmt.Errorf("%w: --api-key-env: the environment variable %s is empty or unset", errUsage, *apiKeyEnv)
		}
	}
	faults.OnCrash = func() {
		logger.Error("injected fault: exiting", "status", crashStatus)
		os.Exit(crashStatus)
	}
	cfg.Faults = faults
	cfg.Logger = logger
	if parseOnly {
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return nil
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv, err := emulate.New(cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	logger.Info("serving", "model", cfg.ServedName, "arch", *modelName, "gpu", *gpuName, "tensor_parallel_size", max(1, *tensorParallel),
		"cuda_visible_devices", os.Getenv("CUDA_VISIBLE_DEVICES"), "listen", ln.Addr().String())
	if _, err := fmt.Fprintf(stdout, "http://%s\n", ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = srv.Serve(ctx, ln)
	if d := time.Duration(float64(*unloadTime) / cfg.TimeScale); err == nil && d > 0 {
		logger.Info("unloading", "for", d)
		time.Sleep(d)
	}
	return err
}
