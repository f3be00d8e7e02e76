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

// emulateFlags holds the values of mosaic emulate's flags.
type emulateFlags struct {
	listen, gpuName, modelName, servedName string
	allowRemote                            bool
	scale, util                            float64
	maxSeqs, maxTokens, blockSize          int
	tensorParallel                         int
	chunked, enableChunked, noChunked      bool
	enablePrefix, noPrefix                 bool
	schedulingPolicy                       string
	loadTime                               string
	unloadTime                             time.Duration
	profilePath                            string
	catalogs                               multiFlag
	apiKeyEnv, logLevel                    string
	faults                                 emulate.Faults
}

// runEmulate is mosaic emulate: it parses and checks the flags, builds the emulated worker's
// configuration and serves it (only checks it, with parseOnly).
func runEmulate(args []string, stdout io.Writer) error {
	f, err := parseEmulateFlags(args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := f.config(logger)
	if err != nil {
		return err
	}
	if parseOnly {
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return nil
	}
	return serveEmulator(cfg, f, logger, stdout)
}

// newEmulateFlagSet registers mosaic emulate's flags, with their defaults, into f and returns
// the flag set, whose usage describes the command.
func newEmulateFlagSet(f *emulateFlags) *flag.FlagSet {
	fs := newFlagSet("emulate", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8000", "host:port to serve on (port 0 picks a free one; the address is printed on stdout)")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow a --listen address other hosts can reach")
	fs.StringVar(&f.gpuName, "gpu", "", "GPU from the catalog (required)")
	fs.StringVar(&f.modelName, "model", "", "model architecture from the catalog, Hugging Face id or alias (required)")
	fs.StringVar(&f.servedName, "served-model-name", "", "model name clients send (default: the model's Hugging Face id)")
	fs.Float64Var(&f.scale, "time-scale", 1, "run S times faster than real time (S > 1) or slower (S < 1)")
	fs.IntVar(&f.maxSeqs, "max-num-seqs", emulate.DefaultMaxNumSeqs, "vLLM max_num_seqs")
	fs.IntVar(&f.maxTokens, "max-batched-tokens", emulate.DefaultMaxBatchedTokens, "vLLM max_num_batched_tokens")
	fs.Float64Var(&f.util, "gpu-memory-utilization", emulate.DefaultGPUMemoryUtilization, "vLLM gpu_memory_utilization: the share of GPU memory for weights and KV cache")
	fs.IntVar(&f.blockSize, "block-size", emulate.DefaultBlockSize, "tokens per KV-cache block")
	fs.IntVar(&f.tensorParallel, "tensor-parallel-size", 1, "as vLLM: the worker is a tensor-parallel group of this many GPUs (1, 2, 4 or 8) holding the model sharded")
	fs.BoolVar(&f.chunked, "chunked-prefill", true, "chunked prefill (vLLM V1); false schedules whole prompts first (V0)")
	// vLLM's own spellings, so that one launch template serves vLLM and the emulator.
	fs.BoolVar(&f.enableChunked, "enable-chunked-prefill", false, "as vLLM: chunked prefill on (the default)")
	fs.BoolVar(&f.noChunked, "no-enable-chunked-prefill", false, "as vLLM: chunked prefill off (--chunked-prefill=false)")
	fs.BoolVar(&f.enablePrefix, "enable-prefix-caching", false, "as vLLM: automatic prefix caching of token-ID prompts on (the default)")
	fs.BoolVar(&f.noPrefix, "no-enable-prefix-caching", false, "as vLLM: automatic prefix caching off")
	fs.StringVar(&f.schedulingPolicy, "scheduling-policy", sim.SchedulingFCFS, `as vLLM: "fcfs", or "priority" to serve requests by their "priority" field (lower first; fcfs refuses any but 0)`)
	fs.StringVar(&f.loadTime, "load-time", "auto", `emulated model load time before /health answers 200, divided by the time scale: "auto" (weights / load bandwidth + start-up, from the cost model), 0, or a duration; it counts from $`+launchTimeEnv+` when mosaic replay launched the process`)
	fs.DurationVar(&f.unloadTime, "unload-time", time.Second, "emulated time to stop (free the GPU) on SIGTERM or SIGINT, divided by the time scale, as the simulator charges for an unload")
	fs.StringVar(&f.profilePath, "profile", "", "cost-model profile TOML (default: the built-in profile)")
	fs.Var(&f.catalogs, "catalog", "extra catalog TOML with [[gpu]] and [[model]] entries (repeatable)")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "", "require the API key held in this environment variable as 'Authorization: Bearer KEY'")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: debug (one line per request), info, warn or error")
	fs.Float64Var(&f.faults.ErrorRate, "fault-error-rate", 0, "fraction of requests answered with HTTP 500")
	fs.Float64Var(&f.faults.StallRate, "fault-stall-rate", 0, "fraction of requests whose stream stalls half-way for --fault-stall")
	fs.DurationVar(&f.faults.Stall, "fault-stall", 0, "real duration of a stall")
	fs.IntVar(&f.faults.CrashAfter, "fault-crash-after", 0, fmt.Sprintf("exit with status %d on accepting the N-th request (0: never)", crashStatus))
	fs.Float64Var(&f.faults.WrongTokensRate, "fault-wrong-tokens", 0, "fraction of requests that produce one token fewer than max_tokens")
	fs.Float64Var(&f.faults.DisconnectRate, "fault-disconnect-rate", 0, "fraction of requests whose connection is dropped half-way through the response")
	fs.Int64Var(&f.faults.Seed, "fault-seed", 1, "seed of the fault draws")
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
	return fs
}

// parseEmulateFlags parses mosaic emulate's arguments and checks them (see check): no
// positional arguments, --gpu and --model given.
func parseEmulateFlags(args []string) (*emulateFlags, error) {
	f := &emulateFlags{}
	pos, err := parseInterspersed(newEmulateFlagSet(f), args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, pos)
	}
	if f.gpuName == "" || f.modelName == "" {
		return nil, fmt.Errorf("%w: --gpu and --model are required", errUsage)
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// check refuses out-of-range engine settings, contradictory vLLM switches and a --listen
// address other hosts can reach without --allow-remote, and settles chunked prefill from
// vLLM's spellings.
func (f *emulateFlags) check() error {
	// Zero means "the default" to the emulator's options: a zero typed here is refused
	// rather than silently replaced.
	switch {
	case !(f.scale > 0):
		return fmt.Errorf("%w: --time-scale must be positive, got %g", errUsage, f.scale)
	case f.maxSeqs < 1:
		return fmt.Errorf("%w: --max-num-seqs must be at least 1, got %d", errUsage, f.maxSeqs)
	case f.maxTokens < 1:
		return fmt.Errorf("%w: --max-batched-tokens must be at least 1, got %d", errUsage, f.maxTokens)
	case !(f.util > 0):
		return fmt.Errorf("%w: --gpu-memory-utilization must be in (0, 1], got %g", errUsage, f.util)
	case f.blockSize < 1:
		return fmt.Errorf("%w: --block-size must be at least 1, got %d", errUsage, f.blockSize)
	case f.tensorParallel < 1:
		return fmt.Errorf("%w: --tensor-parallel-size must be 1, 2, 4 or 8, got %d", errUsage, f.tensorParallel)
	}
	if f.enablePrefix && f.noPrefix {
		return fmt.Errorf("%w: --enable-prefix-caching and --no-enable-prefix-caching contradict each other", errUsage)
	}
	if f.enableChunked && f.noChunked {
		return fmt.Errorf("%w: --enable-chunked-prefill and --no-enable-chunked-prefill contradict each other", errUsage)
	}
	if f.noChunked {
		f.chunked = false
	} else if f.enableChunked {
		f.chunked = true
	}
	if err := emulate.CheckListen(f.listen, f.allowRemote); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// options returns the emulator's options the flags set: the built-in catalog with the
// --catalog files added, the --profile, and the engine settings.
func (f *emulateFlags) options() (emulate.Options, error) {
	opts := emulate.Options{Catalog: sim.DefaultCatalog(), MaxNumSeqs: f.maxSeqs, MaxBatchedTokens: f.maxTokens,
		GPUMemoryUtilization: f.util, BlockSize: f.blockSize, NoChunkedPrefill: !f.chunked, NoPrefixCaching: f.noPrefix,
		SchedulingPolicy: f.schedulingPolicy,
		TensorParallel:   f.tensorParallel}
	for _, path := range f.catalogs {
		if err := opts.Catalog.AddFile(path); err != nil {
			return opts, err
		}
	}
	if f.profilePath != "" {
		var err error
		if opts.Profile, err = sim.LoadProfile(f.profilePath, nil); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// config builds the emulated worker's configuration from the flags, the launch time
// $MOSAIC_LAUNCH_TIME and the API key's environment variable; logger receives the server's
// logs, and an injected crash is logged there before the process exits.
func (f *emulateFlags) config(logger *slog.Logger) (emulate.Config, error) {
	opts, err := f.options()
	if err != nil {
		return emulate.Config{}, err
	}
	cfg, err := emulate.ConfigFor(f.gpuName, f.modelName, opts)
	if err != nil {
		return emulate.Config{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.servedName != "" {
		cfg.ServedName = f.servedName
	}
	cfg.TimeScale = f.scale
	cfg.Version = "mosaic-emulate/" + version
	if err := f.setLoadTiming(&cfg); err != nil {
		return emulate.Config{}, err
	}
	if f.unloadTime < 0 {
		return emulate.Config{}, fmt.Errorf("%w: --unload-time must not be negative, got %v", errUsage, f.unloadTime)
	}
	if f.apiKeyEnv != "" {
		cfg.APIKey = os.Getenv(f.apiKeyEnv)
		if cfg.APIKey == "" {
			return emulate.Config{}, fmt.Errorf("%w: --api-key-env: the environment variable %s is empty or unset", errUsage, f.apiKeyEnv)
		}
	}
	faults := f.faults
	faults.OnCrash = func() {
		logger.Error("injected fault: exiting", "status", crashStatus)
		os.Exit(crashStatus)
	}
	cfg.Faults = faults
	cfg.Logger = logger
	return cfg, nil
}

// setLoadTiming sets cfg's load time from --load-time (auto keeps the cost model's) and its
// load start from $MOSAIC_LAUNCH_TIME, when mosaic replay launched the process.
func (f *emulateFlags) setLoadTiming(cfg *emulate.Config) error {
	switch lt := strings.TrimSpace(f.loadTime); lt {
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
	return nil
}

// serveEmulator listens on --listen, prints the address it serves on to stdout and serves
// cfg's emulated worker until SIGINT or SIGTERM, then takes the emulated unload time
// (--unload-time divided by the time scale) before returning.
func serveEmulator(cfg emulate.Config, f *emulateFlags, logger *slog.Logger, stdout io.Writer) error {
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv, err := emulate.New(cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	logger.Info("serving", "model", cfg.ServedName, "arch", f.modelName, "gpu", f.gpuName, "tensor_parallel_size", max(1, f.tensorParallel),
		"cuda_visible_devices", os.Getenv("CUDA_VISIBLE_DEVICES"), "listen", ln.Addr().String())
	if _, err := fmt.Fprintf(stdout, "http://%s\n", ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = srv.Serve(ctx, ln)
	if d := time.Duration(float64(f.unloadTime) / cfg.TimeScale); err == nil && d > 0 {
		logger.Info("unloading", "for", d)
		time.Sleep(d)
	}
	return err
}
