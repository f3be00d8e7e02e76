package emulate

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// Engine defaults, as vLLM uses them.
const (
	DefaultMaxNumSeqs           = sim.DefaultMaxNumSeqs
	DefaultMaxBatchedTokens     = sim.DefaultMaxBatchedTokens
	DefaultGPUMemoryUtilization = sim.DefaultGPUMemoryUtilization
	DefaultBlockSize            = sim.DefaultBlockSize
)

// Config describes one emulated worker.
type Config struct {
	// GPU and Model are the catalog entries the worker emulates (Model is required; both are
	// reported in logs).
	GPU   *sim.GPU
	Model *sim.Model
	// ServedName is the model name clients must send (vLLM --served-model-name); empty means
	// the model's Hugging Face id.
	ServedName string
	// Cost is the cost model that times the engine's iterations.
	Cost *sim.CostModel
	// Engine is the engine's scheduler configuration.
	Engine sim.EngineConfig
	// TimeScale S: one second of emulated GPU time takes 1/S seconds of real time. Zero means
	// 1; at most 1e6.
	TimeScale float64
	// LoadTime is the emulated time to load the model; /health answers 503 for LoadTime/S of
	// real time after New. Zero disables the delay.
	LoadTime time.Duration
	// LoadStart is when the load began; zero means at New. A launcher sets it to the instant
	// it started the process, so that the process's own start-up is part of the load time,
	// as it is for a real server, instead of coming on top of it.
	LoadStart time.Time
	// PrefixCaching models vLLM's automatic prefix caching for prompts given as token IDs
	// (see the package documentation); vLLM V1 has it on by default.
	PrefixCaching bool
	// Version is what GET /version reports; empty means "mosaic-emulate".
	Version string
	// Faults injects failures; the zero value injects none.
	Faults Faults
	// APIKey, when not empty, is required as "Authorization: Bearer KEY" on /v1/ routes.
	APIKey string
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Faults are failures the emulator injects, each drawn per request from a random source seeded
// with Seed, so a run that sends requests in the same order sees the same faults.
type Faults struct {
	// ErrorRate is the fraction of requests answered with HTTP 500.
	ErrorRate float64
	// StallRate is the fraction of requests whose response stalls for Stall of real time once
	// half of their tokens have been written (non-streaming responses: before being written):
	// a long Stall stops the stream mid-way, as a hung server does.
	StallRate float64
	Stall     time.Duration
	// DisconnectRate is the fraction of requests whose connection the server drops, without
	// finishing the response, once half of their tokens have been written (non-streaming
	// responses: before being written); the request is aborted in the engine. It is drawn
	// from its own random source (seeded with Seed), so adding it leaves the other draws as
	// they were.
	DisconnectRate float64
	// WrongTokensRate is the fraction of requests that produce one token fewer than asked
	// (finish_reason "stop"; usage reports the tokens produced). Requests for one token are
	// exempt.
	WrongTokensRate float64
	// CrashAfter > 0 makes the server die when it accepts its CrashAfter-th request: OnCrash
	// is called, the listener started by Start is closed, and every request in flight or still
	// to come has its connection dropped without a response.
	CrashAfter int
	// OnCrash is called once when the server crashes; `mosaic emulate` exits the process
	// (status 3) from it. Nil means the server only behaves as dead.
	OnCrash func()
	// Seed seeds the random source of the faults.
	Seed int64
}

func (f Faults) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error rate", f.ErrorRate}, {"stall rate", f.StallRate}, {"wrong-tokens rate", f.WrongTokensRate}, {"disconnect rate", f.DisconnectRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("emulate: fault %s must be in [0, 1], got %g", r.name, r.v)
		}
	}
	if f.Stall < 0 || (f.StallRate > 0 && f.Stall == 0) {
		return errors.New("emulate: a stall rate needs a positive stall duration")
	}
	if f.CrashAfter < 0 {
		return fmt.Errorf("emulate: crash-after must not be negative, got %d", f.CrashAfter)
	}
	return nil
}

// Validate checks the configuration as New does, without starting anything.
func (c *Config) Validate() error {
	if c.Model == nil || c.Cost == nil {
		return errors.New("emulate: the config needs a model and its cost model")
	}
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if !(c.TimeScale > 0) || c.TimeScale > 1e6 {
		return fmt.Errorf("emulate: time scale must be in (0, 1e6], got %g", c.TimeScale)
	}
	if c.LoadTime < 0 {
		return fmt.Errorf("emulate: load time must not be negative, got %v", c.LoadTime)
	}
	if c.ServedName == "" {
		c.ServedName = c.Model.ID
	}
	if c.Version == "" {
		c.Version = "mosaic-emulate"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("emulate: engine: %w", err)
	}
	return c.Faults.validate()
}

// Options are the settings ConfigFor takes beyond the GPU and the model; zero values mean the
// defaults (the built-in catalog and profile, vLLM's engine settings).
type Options struct {
	// Catalog and Profile resolve the names; nil means sim.DefaultCatalog() and
	// sim.DefaultProfile().
	Catalog *sim.Catalog
	Profile *sim.Profile
	// MaxNumSeqs, MaxBatchedTokens, GPUMemoryUtilization and BlockSize are vLLM's
	// max_num_seqs, max_num_batched_tokens, gpu_memory_utilization and block_size.
	MaxNumSeqs           int
	MaxBatchedTokens     int
	GPUMemoryUtilization float64
	BlockSize            int
	// NoChunkedPrefill selects vLLM V0's scheduler (whole prompts first) instead of chunked
	// prefill.
	NoChunkedPrefill bool
	// NoPrefixCaching turns automatic prefix caching off (vLLM's --no-enable-prefix-caching).
	NoPrefixCaching bool
	// SchedulingPolicy is vLLM's --scheduling-policy: "" or "fcfs" (the default), or
	// "priority", with which the engine serves requests by their "priority" field (see
	// sim.EngineConfig.SchedulingPolicy); an FCFS engine refuses a priority other than 0.
	SchedulingPolicy string
	// TensorParallel is vLLM's tensor_parallel_size: the worker is a group of that many GPUs
	// (1, 2, 4 or 8; 0 means 1) holding the model sharded (sim.WithTP).
	TensorParallel int
}

// ConfigFor builds the Config of one worker from catalog names, the way experiments resolve a
// model on a GPU: the profile's coefficients for the GPU, the KV cache that fits at the memory
// utilisation, a watermark of 1% of the blocks, and the model's load time. ServedName is the
// model's Hugging Face id and TimeScale 1; set the remaining fields on the result.
func ConfigFor(gpuName, modelName string, o Options) (Config, error) {
	cat, prof := o.Catalog, o.Profile
	if cat == nil {
		cat = sim.DefaultCatalog()
	}
	if prof == nil {
		prof = sim.DefaultProfile()
	}
	g, err := cat.GPU(gpuName)
	if err != nil {
		return Config{}, fmt.Errorf("emulate: %w", err)
	}
	m, err := cat.Model(modelName)
	if err != nil {
		return Config{}, fmt.Errorf("emulate: %w", err)
	}
	tp := orInt(o.TensorParallel, 1)
	switch tp {
	case 1, 2, 4, 8:
	default:
		return Config{}, fmt.Errorf("emulate: tensor parallel size must be 1, 2, 4 or 8, got %d", tp)
	}
	if err := sim.ValidTP(m, tp); err != nil {
		return Config{}, fmt.Errorf("emulate: %w", err)
	}
	if tp > 1 && g.CollectiveGBps(tp) <= 0 {
		return Config{}, fmt.Errorf("emulate: GPU %s has no interconnect in the catalog: cannot run tensor parallelism", g.Name)
	}
	cm, err := sim.NewCostModel(m, g, prof.For(g), sim.WithTP(tp))
	if err != nil {
		return Config{}, fmt.Errorf("emulate: %w", err)
	}
	util := o.GPUMemoryUtilization
	if util == 0 {
		util = DefaultGPUMemoryUtilization
	}
	eng := sim.EngineConfig{
		MaxNumSeqs:       orInt(o.MaxNumSeqs, DefaultMaxNumSeqs),
		MaxBatchedTokens: orInt(o.MaxBatchedTokens, DefaultMaxBatchedTokens),
		ChunkedPrefill:   !o.NoChunkedPrefill,
		BlockSize:        orInt(o.BlockSize, DefaultBlockSize),
	}
	if o.SchedulingPolicy != sim.SchedulingFCFS {
		eng.SchedulingPolicy = o.SchedulingPolicy // FCFS is the empty default
	}
	if eng, err = eng.WithKVCache(cm, util); err != nil {
		return Config{}, fmt.Errorf("emulate: engine: %w", err)
	}
	return Config{GPU: g, Model: m, ServedName: m.ID, Cost: cm, Engine: eng, TimeScale: 1, LoadTime: cm.LoadTime(), PrefixCaching: !o.NoPrefixCaching}, nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// ErrRemote is returned by CheckListen for an address other hosts could reach.
var ErrRemote = errors.New("emulate: the listen address is not a loopback address; pass --allow-remote to serve other hosts")

// CheckListen accepts a host:port that binds only loopback interfaces ("127.0.0.1:8000",
// "[::1]:0", "localhost:8000"), and any address when allowRemote is set. An empty host (all
// interfaces) is remote.
func CheckListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("emulate: listen address %q: %w", addr, err)
	}
	if allowRemote {
		return nil
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return ErrRemote
	}
	return nil
}
