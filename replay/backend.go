// Package replay runs experiments on real OpenAI-compatible inference servers (vLLM, one per
// GPU worker, or `mosaic emulate`) through the same backend.Backend contract the simulator
// implements, so the same Driver, policies and rules drive real GPUs unchanged.
//
// Each call becomes a streaming /v1/completions request to its worker's server with
// max_tokens = the call's output tokens and ignore_eos, a prompt of exactly the call's input
// length given as token IDs (PromptIDs: calls share leading tokens only where the workload
// says so), and stream_options.include_usage; completions reach the single-threaded Driver
// through one channel.
//
// # Dispatch
//
// One dispatcher per worker sends the worker's calls in the order the policy submitted them,
// one at a time: it sends the next request only once the server has answered the previous
// one's headers (vLLM and the emulator take a request into their queue before answering), so
// each server's waiting queue holds the calls in the policy's order, as the simulated
// engine's does. At most MaxConcurrency calls of a server are in flight (default: its
// model's max_num_seqs); the rest wait in the dispatcher. Each server has its own connection
// pool of that size, so connections are reused and their number is bounded.
//
// # Servers
//
// Servers are attached (listed endpoints) or launched from a command template when a policy
// loads a model, ready when GET /health answers 200, and stopped as a process group when it
// unloads it. Times are reported in the experiment's time base: real seconds times TimeScale
// (1 for real GPUs; the emulators' --time-scale for emulated ones), so replayed and simulated
// results compare directly.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/traces"
)

// Model is what the replay needs to know of a model to serve it.
type Model struct {
	Name        string  // the experiment's name; the server's served model name
	Arch        string  // Hugging Face id
	Utilization float64 // gpu_memory_utilization
	MaxNumSeqs  int
	MaxTokens   int // max_num_batched_tokens
	// ChunkedPrefill is the engine's scheduler: chunked prefill (vLLM V1's default) or whole
	// prompts first.
	ChunkedPrefill bool
	// Vocab is the model's vocabulary size, which bounds the prompts' token IDs (0: unknown).
	Vocab int
}

// Endpoint attaches a worker (and optionally one of its models) to a running server.
type Endpoint struct {
	Worker int
	Model  string // "" for every model of the worker
	URL    string
}

// Config configures a Backend.
type Config struct {
	Workers int
	Models  map[string]Model
	// Endpoints attach workers to running servers; when empty, servers are launched.
	Endpoints []Endpoint
	// Command is the launch template; placeholders: {model} {arch} {port} {gpu} {gpu_name}
	// {tp} {tensor_parallel} {util} {max_num_seqs} {max_batched_tokens} {time_scale} {worker}
	// {mosaic} {prefix_caching} {chunked_prefill} (see Placeholders).
	Command string
	// Env holds extra environment variables of launched servers (templated likewise).
	Env     map[string]string
	GPUName string
	GPUs    []int // CUDA device of each worker (default: its index)
	// Hardware, when set (one entry per worker), describes each worker's GPUs instead of
	// GPUName and GPUs: its GPU type and CUDA devices, several for a tensor-parallel group (a
	// launched server sees all of them in CUDA_VISIBLE_DEVICES and gets
	// --tensor-parallel-size through {tensor_parallel}).
	Hardware []WorkerHardware
	// PerWorker, when set (one map per worker), says how each model is served on each worker
	// instead of Models: on a mixed cluster a model's engine settings follow the worker's GPUs.
	// A model missing from a worker's map cannot be loaded on it.
	PerWorker []map[string]Model
	LogDir    string
	// HealthTimeout bounds a launch or attach until /health answers 200.
	HealthTimeout time.Duration
	// Timeouts bound each attempt of a call (in real time); zero fields take the defaults
	// (DefaultTimeouts).
	Timeouts Timeouts
	// MaxConcurrency bounds the calls in flight per server (0: the model's MaxNumSeqs).
	MaxConcurrency int
	// Retries of a failed call before it is recorded as failed; backoff doubles from
	// RetryBackoff, a span of the experiment's time (it waits RetryBackoff / TimeScale of real
	// time, so that it costs the results what it would cost on the servers measured).
	Retries      int
	RetryBackoff time.Duration
	// StopOnDeadWorker stops the run (Next returns an error) when a worker's server dies;
	// otherwise its calls fail and the run goes on.
	StopOnDeadWorker bool
	// APIKey is sent as a bearer token (read by the caller from an environment variable).
	APIKey string
	// TimeScale converts real time to the experiment's time (virtual seconds per real second).
	TimeScale float64
	// TimeOffset starts the clock later (a resumed run continues where the interrupted one's
	// last finished call ended).
	TimeOffset time.Duration
	// Finished, when set, lists calls already done in an interrupted run (resume): their
	// submissions complete at once with the recorded timing, without a request.
	Finished map[int]backend.CallTiming
	// Seed keys the prompts' token streams (the experiment's seed).
	Seed uint64
	// PrefixCaching tells launched servers to keep automatic prefix caching on (the workload's
	// shared prefixes then hit the cache, as they would in production) or off (every prompt
	// token is prefilled, as the simulator models it).
	PrefixCaching bool
	// AdmissionPoll is how often (in the experiment's time) the backend reads a busy server's
	// /metrics to tell when its calls leave the waiting queue (CallTiming.Started); 0 turns
	// it off and Started is the send time.
	AdmissionPoll time.Duration
	// API is the servers' protocol (default APIOpenAI).
	API API
	// CacheSalt is sent with every request (vLLM V1's cache_salt), so that the servers' prefix
	// caches serve this run's prompts only from blocks this run computed: one salt per run and
	// policy keeps each policy's measurements free of its predecessors' caches.
	CacheSalt string
	// ResetPrefixCache asks every attached server to drop its prefix cache
	// (POST /reset_prefix_cache, where it offers it) before this backend first uses it.
	ResetPrefixCache bool
	// PromptWords is how many distinct words text prompts draw from (APIOllama; default
	// DefaultPromptWords).
	PromptWords int
}

// DefaultPromptWords is Config.PromptWords' default.
const DefaultPromptWords = 256

// WorkerHardware is one worker's GPUs: their type (a catalog name) and CUDA devices, one per
// GPU of the worker's tensor-parallel group.
type WorkerHardware struct {
	GPUName string
	Devices []int
}

// hardware returns worker w's GPUs.
func (cfg *Config) hardware(w int) WorkerHardware {
	if w < len(cfg.Hardware) {
		return cfg.Hardware[w]
	}
	gpu := w
	if w < len(cfg.GPUs) {
		gpu = cfg.GPUs[w]
	}
	return WorkerHardware{GPUName: cfg.GPUName, Devices: []int{gpu}}
}

// model returns how model is served on worker w, or an error when it cannot be served there.
func (cfg *Config) model(w int, model string) (Model, error) {
	if cfg.PerWorker == nil {
		m, ok := cfg.Models[model]
		if !ok {
			return m, fmt.Errorf("replay: unknown model %q", model)
		}
		return m, nil
	}
	if w < 0 || w >= len(cfg.PerWorker) {
		return Model{}, fmt.Errorf("replay: no worker %d", w)
	}
	m, ok := cfg.PerWorker[w][model]
	if !ok {
		return m, fmt.Errorf("replay: model %q cannot run on worker %d (%s)", model, w, cfg.hardware(w).describe())
	}
	return m, nil
}

// describe names the GPUs: "A100-80GB on GPU 0", "H100-80GB x2 on GPUs 2,3".
func (h WorkerHardware) describe() string {
	if len(h.Devices) > 1 {
		return fmt.Sprintf("%s x%d on GPUs %s", h.GPUName, len(h.Devices), devices(h.Devices))
	}
	return fmt.Sprintf("%s on GPU %s", h.GPUName, devices(h.Devices))
}

// devices joins CUDA device numbers as CUDA_VISIBLE_DEVICES wants them: "2,3".
func devices(ds []int) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ",")
}

// DefaultTimeouts are the timeouts of a call attempt when Config.Timeouts leaves them zero.
var DefaultTimeouts = Timeouts{Connect: 10 * time.Second, FirstToken: 30 * time.Minute, Idle: time.Minute, Request: 2 * time.Hour}

// DefaultRetryBackoff is Config.RetryBackoff's default, in the experiment's time.
const DefaultRetryBackoff = 500 * time.Millisecond

// DefaultAdmissionPoll is Config.AdmissionPoll's default, in the experiment's time.
const DefaultAdmissionPoll = 500 * time.Millisecond

// DefaultCommand launches vLLM (0.8 or later, whose V1 engine takes the --[no-]enable-...
// switches) with the experiment's engine settings.
const DefaultCommand = "vllm serve {arch} --served-model-name {model} --port {port} --gpu-memory-utilization {util} --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_batched_tokens} {chunked_prefill} {prefix_caching} {tensor_parallel}"

// Placeholders documents the launch template's placeholders.
var Placeholders = map[string]string{
	"model":              "the model's experiment name (serve it under this name)",
	"arch":               "the model's Hugging Face id",
	"port":               "a free loopback port",
	"gpu":                "the worker's CUDA devices, comma-separated (one per GPU of a tensor-parallel group)",
	"gpu_name":           "the worker's GPU (catalog name)",
	"tp":                 "the worker's tensor-parallel degree (its number of GPUs)",
	"tensor_parallel":    "--tensor-parallel-size N for a worker of N > 1 GPUs, else nothing",
	"util":               "gpu_memory_utilization",
	"max_num_seqs":       "the engine's max_num_seqs",
	"max_batched_tokens": "the engine's max_num_batched_tokens",
	"time_scale":         "[replay] time_scale",
	"worker":             "the worker's index",
	"mosaic":             "this mosaic binary",
	"prefix_caching":     "--enable-prefix-caching or --no-enable-prefix-caching, as [replay] prefix_caching says",
	"chunked_prefill":    "--enable-chunked-prefill or --no-enable-chunked-prefill, as [engine] chunked_prefill says",
}

// ServerInfo describes a server a run used, for run.json.
type ServerInfo struct {
	Worker int    `json:"worker"`
	Model  string `json:"model"`
	// Version is what GET /version answered ("" when the server has no such route).
	Version string `json:"version"`
	// PrefixCaching is the server's automatic prefix caching as its /metrics report it
	// (vllm:cache_config_info): "on", "off", or "" when they do not say.
	PrefixCaching string `json:"prefix_caching,omitempty"`
	// CacheReset says how the server's prefix cache was emptied before the policy used it:
	// "reset requested" (POST /reset_prefix_cache answered 200), "refused: ..." or "not offered: ..." (the server's
	// answer), "unloaded" (its model was loaded for the policy and is unloaded after it, or
	// its server launched for it), or "" when not asked.
	CacheReset string `json:"cache_reset,omitempty"`
}

// Backend implements backend.Backend over HTTP.
type Backend struct {
	cfg     Config
	start   time.Time
	control *http.Client // health, models, version, metrics: apart from the calls' pools
	events  chan backend.Event
	ctx     context.Context
	cancel  context.CancelFunc

	wg sync.WaitGroup // goroutines that start or stop servers
	// warnOverlap warns once that overlap runs without the servers' prefix cache.
	warnOverlap sync.Once
	mu          sync.Mutex
	pending     int
	servers     map[serverKey]*server
	dispatchers []*dispatcher
	dead        error
	seen        []ServerInfo
	over        overheads
	prefixOf    func(*traces.Call) int // the shared prefix of a call's prompt (sharedPrefix)
	// handling is when the last finished call handed to the Driver ended (real time; zero
	// when none is being handled). Only the Driver's goroutine touches it.
	handling time.Time
	// cache sums what the servers' prefix caches served this backend's calls.
	cache PrefixCache
}

type serverKey struct {
	worker int
	model  string
}

type server struct {
	url   string
	model Model
	limit int          // calls in flight at most
	hc    *http.Client // the server's own connection pool, limit connections
	cmd   *exec.Cmd
	log   *os.File
	exit  chan struct{} // closed when a launched process exits
	info  ServerInfo
	adm   *admission
	// cache0 holds the server's prefix-cache counters when this backend began using it, and
	// lag0 its own lateness (an emulator's mosaic:emulate_finish_lag_seconds_total).
	cache0 PrefixCache
	lag0   float64
}

// PrefixCache counts prompt tokens looked up in servers' prefix caches and found there
// (vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total).
type PrefixCache struct {
	QueriedTokens int64 `json:"queried_tokens"`
	HitTokens     int64 `json:"hit_tokens"`
}

// HitPct is the hits' share of the tokens looked up, in percent (NaN when none was).
func (p PrefixCache) HitPct() float64 {
	if p.QueriedTokens == 0 {
		return math.NaN()
	}
	return 100 * float64(p.HitTokens) / float64(p.QueriedTokens)
}

// serverLagSeries is an emulator's count of how late, in real seconds summed over its finished
// requests, it delivered their last tokens: the lateness of the host it shares with the replay.
const serverLagSeries = "mosaic:emulate_finish_lag_seconds_total"

// prefixCacheOf reads the prefix-cache counters of a server's /metrics (ok false when it has
// none).
func prefixCacheOf(data []byte) (PrefixCache, bool) {
	q, ok1 := sumSeries(data, "vllm:prefix_cache_queries_total")
	h, ok2 := sumSeries(data, "vllm:prefix_cache_hits_total")
	return PrefixCache{QueriedTokens: int64(q), HitTokens: int64(h)}, ok1 && ok2
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend; launched servers are stopped by Close. It fails when the process may
// not open enough files for the connections it will hold (after raising the soft limit to
// the hard one if that suffices).
func New(cfg Config) (*Backend, error) {
	if cfg.Workers <= 0 {
		return nil, errors.New("replay: no workers")
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 20 * time.Minute
	}
	def := DefaultTimeouts
	for _, p := range []struct{ v, d *time.Duration }{
		{&cfg.Timeouts.Connect, &def.Connect}, {&cfg.Timeouts.FirstToken, &def.FirstToken},
		{&cfg.Timeouts.Idle, &def.Idle}, {&cfg.Timeouts.Request, &def.Request},
	} {
		if *p.v <= 0 {
			*p.v = *p.d
		}
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.Command == "" {
		cfg.Command = DefaultCommand
	}
	cfg.API = cfg.API.orDefault()
	if !slices.Contains(APIs, cfg.API) {
		return nil, fmt.Errorf("replay: unknown API %q", cfg.API)
	}
	if cfg.API.loadsThroughAPI() && len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("replay: the %s API replays attached servers: list each worker's endpoint", cfg.API)
	}
	if cfg.PromptWords <= 0 {
		cfg.PromptWords = DefaultPromptWords
	}
	if cfg.MaxConcurrency < 0 {
		return nil, fmt.Errorf("replay: max concurrency must not be negative, got %d", cfg.MaxConcurrency)
	}
	for name, m := range cfg.Models {
		if cfg.API.orDefault() == APIOpenAI && m.Vocab > 0 && m.Vocab < MinVocab {
			return nil, fmt.Errorf("replay: model %s has a vocabulary of %d tokens; synthetic prompts need at least %d", name, m.Vocab, MinVocab)
		}
	}
	if (cfg.Hardware != nil && len(cfg.Hardware) != cfg.Workers) || (cfg.PerWorker != nil && len(cfg.PerWorker) != cfg.Workers) {
		return nil, fmt.Errorf("replay: per-worker hardware and models must list %d workers", cfg.Workers)
	}
	for w, h := range cfg.Hardware {
		if len(h.Devices) == 0 {
			return nil, fmt.Errorf("replay: worker %d has no GPU devices", w)
		}
	}
	if err := ensureFileLimit(cfg.fileNeed()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{cfg: cfg, start: time.Now(), events: make(chan backend.Event, 1024), ctx: ctx, cancel: cancel,
		control: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, MaxConnsPerHost: 4,
			DialContext: (&net.Dialer{Timeout: cfg.Timeouts.Connect}).DialContext, ResponseHeaderTimeout: cfg.Timeouts.Connect}},
		servers: map[serverKey]*server{}, prefixOf: sharedPrefix}
	for w := range cfg.Workers {
		d := newDispatcher(b, w)
		b.dispatchers = append(b.dispatchers, d)
		go d.run()
	}
	return b, nil
}

// limit is the most calls of model m in flight on one server.
func (cfg *Config) limit(m Model) int {
	switch {
	case cfg.MaxConcurrency > 0:
		return cfg.MaxConcurrency
	case m.MaxNumSeqs > 0:
		return m.MaxNumSeqs
	}
	return 256 // vLLM's default max_num_seqs
}

// fileNeed is how many file descriptors a run may hold at once: per worker, the connections
// of as many servers as fit its memory together, plus a margin for the control connections,
// the launched servers' logs and pipes, and the results files.
func (cfg *Config) fileNeed() int {
	most, minUtil := 0, 1.0
	for _, m := range cfg.Models {
		most = max(most, cfg.limit(m))
		if m.Utilization > 0 {
			minUtil = min(minUtil, m.Utilization)
		}
	}
	resident := min(len(cfg.Models), max(1, int(1/minUtil+1e-9)))
	return cfg.Workers*resident*(most+4) + 64
}

// PrefixCache is what the servers' prefix caches served this backend's calls, as their
// /metrics counted it from when the backend began using each server to when it let go of it
// (zero when the servers do not count).
func (b *Backend) PrefixCache() PrefixCache {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cache
}

// Servers lists the servers the backend has used, by worker and model.
func (b *Backend) Servers() []ServerInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]ServerInfo(nil), b.seen...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Worker != out[j].Worker {
			return out[i].Worker < out[j].Worker
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// Now implements backend.Backend: real time since the start, in the experiment's time base.
func (b *Backend) Now() time.Duration { return b.virtual(time.Now()) }

func (b *Backend) virtual(t time.Time) time.Duration {
	return b.cfg.TimeOffset + time.Duration(float64(t.Sub(b.start))*b.cfg.TimeScale)
}

// realTime is the real time at which the experiment's clock read t.
func (b *Backend) realTime(t time.Duration) time.Time {
	return b.start.Add(b.real(t - b.cfg.TimeOffset))
}

func (b *Backend) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / b.cfg.TimeScale)
}

func (b *Backend) begin() {
	b.mu.Lock()
	b.pending++
	b.mu.Unlock()
}

func (b *Backend) emit(ev backend.Event) {
	select {
	case b.events <- ev:
	case <-b.ctx.Done():
	}
}

// Next implements backend.Backend.
func (b *Backend) Next(ctx context.Context) (backend.Event, error) {
	// The Driver asks for the next event once it has acted on the last: the time since a
	// finished call's stream ended is how late the replay acted on it.
	if !b.handling.IsZero() {
		d := time.Since(b.handling)
		b.over.record(func(o *overheads) { o.handling += d })
		b.handling = time.Time{}
	}
	for {
		b.mu.Lock()
		dead, pending := b.dead, b.pending
		b.mu.Unlock()
		if dead != nil && b.cfg.StopOnDeadWorker {
			return backend.Event{}, dead
		}
		if pending == 0 {
			select {
			case ev := <-b.events:
				return b.deliver(ev), nil
			default:
				return backend.Event{}, backend.ErrIdle
			}
		}
		select {
		case ev := <-b.events:
			return b.deliver(ev), nil
		case <-ctx.Done():
			return backend.Event{}, ctx.Err()
		case <-time.After(time.Second):
			// re-check for a dead worker
		}
	}
}

func (b *Backend) deliver(ev backend.Event) backend.Event {
	b.mu.Lock()
	b.pending--
	b.mu.Unlock()
	if ev.Kind == backend.EventDone && ev.Call != nil {
		// A call done in an interrupted run completes at once, without a request: how long
		// it waits behind the others so resumed is no lag of the host.
		if _, resumed := b.cfg.Finished[ev.Call.ID]; !resumed {
			b.handling = b.realTime(ev.At)
		}
	}
	if late := b.Now() - ev.At; late >= 0 && ev.Kind != backend.EventFailed {
		b.over.record(func(o *overheads) { o.pickup.add(b.real(late)) })
	}
	return ev
}

// WakeAt implements backend.Backend.
func (b *Backend) WakeAt(t time.Duration) {
	b.begin()
	go func() {
		d := b.real(t - b.Now())
		if d > 0 {
			select {
			case <-time.After(d):
			case <-b.ctx.Done():
				return
			}
		}
		b.emit(backend.Event{Kind: backend.EventTimer, At: max(t, b.Now())})
	}()
}

// endpoint returns the attached URL of worker w's model, or "".
func (b *Backend) endpoint(w int, model string) string {
	url := ""
	for _, e := range b.cfg.Endpoints {
		if e.Worker == w && e.Model == model {
			return e.URL
		}
		if e.Worker == w && e.Model == "" {
			url = e.URL
		}
	}
	return url
}

// Load implements backend.Backend: attach to the worker's server (waiting for its health
// check and checking it serves the model; through the Ollama API, loading the model), or
// launch one.
func (b *Backend) Load(w backend.WorkerID, model string) error {
	m, err := b.cfg.model(int(w), model)
	if err != nil {
		return err
	}
	b.begin()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		srv, err := b.bring(int(w), m)
		ev := backend.Event{Kind: backend.EventLoaded, Worker: w, Model: model}
		b.mu.Lock()
		if b.ctx.Err() != nil {
			b.mu.Unlock()
			b.release(srv) // the backend is closing: the load no longer matters
			return
		}
		if err == nil {
			b.servers[serverKey{int(w), model}] = srv
			// run.json lists only the servers the run used: not one that came up while it
			// was shutting down.
			if !slices.Contains(b.seen, srv.info) {
				b.seen = append(b.seen, srv.info)
			}
		}
		b.mu.Unlock()
		if err != nil {
			ev.Kind, ev.Err = backend.EventFailed, err
			slog.Error("model load failed", "worker", w, "model", model, "err", err)
		}
		ev.At = b.Now()
		b.emit(ev)
	}()
	return nil
}

// release lets go of a server the backend no longer uses: a launched one is stopped, a
// model loaded through the API unloaded.
func (b *Backend) release(srv *server) {
	if srv == nil {
		return
	}
	if b.cfg.API == APIOpenAI {
		// What the server's prefix cache served this backend's calls.
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeouts.Connect)
		if data, err := get(ctx, b.control, srv.url, "/metrics", b.cfg.APIKey); err == nil {
			if pc, ok := prefixCacheOf(data); ok {
				b.mu.Lock()
				b.cache.QueriedTokens += pc.QueriedTokens - srv.cache0.QueriedTokens
				b.cache.HitTokens += pc.HitTokens - srv.cache0.HitTokens
				b.mu.Unlock()
			}
			if lag, ok := sumSeries(data, serverLagSeries); ok {
				b.over.record(func(o *overheads) { o.server += time.Duration((lag - srv.lag0) * float64(time.Second)) })
			}
		}
		cancel()
	}
	if b.cfg.API.loadsThroughAPI() && srv.cmd == nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeouts.Connect+10*time.Second)
		if err := ollamaUnload(ctx, b.control, srv.url, srv.model.Name); err != nil {
			slog.Warn("unloading a model", "worker", srv.info.Worker, "model", srv.model.Name, "err", err)
		}
		cancel()
	}
	stop(srv)
}

func (b *Backend) bring(w int, m Model) (*server, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.HealthTimeout)
	defer cancel()
	if url := b.endpoint(w, m.Name); url != "" || len(b.cfg.Endpoints) > 0 {
		if url == "" {
			return nil, fmt.Errorf("no endpoint is listed for worker %d and model %s", w, m.Name)
		}
		srv := b.newServer(w, m, url)
		if err := b.waitHealthy(ctx, srv, nil); err != nil {
			return nil, err
		}
		ids, err := servedModels(ctx, b.control, url, b.cfg.APIKey)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", url, err)
		}
		found := false
		for _, id := range ids {
			found = found || id == m.Name || (b.cfg.API == APIOllama && sameOllamaModel(id, m.Name))
		}
		if !found {
			if b.cfg.API == APIOllama {
				return nil, fmt.Errorf("%s has models %v, not %s (create it there first: ollama create %s)", url, ids, m.Name, m.Name)
			}
			return nil, fmt.Errorf("%s serves %v, not %s (give the server --served-model-name %s)", url, ids, m.Name, m.Name)
		}
		if b.cfg.API.loadsThroughAPI() {
			if err := ollamaLoad(ctx, b.control, url, m.Name); err != nil {
				return nil, err
			}
			srv.info.CacheReset = "unloaded"
		} else if b.cfg.ResetPrefixCache {
			srv.info.CacheReset = resetPrefixCache(ctx, b.control, url, b.cfg.APIKey)
		}
		b.describe(ctx, srv)
		return srv, nil
	}
	srv, err := b.launch(ctx, w, m)
	if err == nil {
		srv.info.CacheReset = "unloaded"
		b.describe(ctx, srv)
	}
	return srv, err
}

// resetPrefixCache asks a server to drop its prefix cache (vLLM's POST /reset_prefix_cache,
// which its API server offers when started with VLLM_SERVER_DEV_MODE=1, and the emulator
// always) and says what came of it, for run.json.
func resetPrefixCache(ctx context.Context, hc *http.Client, base, apiKey string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/reset_prefix_cache", nil)
	if err != nil {
		return "not offered: " + err.Error()
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		slog.Warn("could not reset the server's prefix cache", "url", base, "err", err)
		return "not offered: " + err.Error()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		// vLLM answers 200 whether or not it reset (it refuses, silently, while requests
		// still hold blocks); the cache salt covers what a refused reset leaves.
		return "reset requested"
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		slog.Warn("the server offers no POST /reset_prefix_cache (vLLM: start it with VLLM_SERVER_DEV_MODE=1): the policy's cache salt alone keeps earlier runs' blocks from serving it", "url", base)
		return fmt.Sprintf("not offered: HTTP %d", resp.StatusCode)
	}
	msg := strings.TrimSpace(string(body))
	slog.Warn("the server refused to reset its prefix cache: the policy's cache salt alone keeps earlier runs' blocks from serving it", "url", base, "status", resp.StatusCode, "answer", msg)
	return fmt.Sprintf("refused: HTTP %d %s", resp.StatusCode, msg)
}

// newServer returns the server of worker w's model m at url, with its own connection pool.
func (b *Backend) newServer(w int, m Model, url string) *server {
	limit := b.cfg.limit(m)
	headers := b.cfg.Timeouts.Connect
	if b.cfg.API.headersWithFirstToken() {
		headers = b.cfg.Timeouts.FirstToken // the headers come with the first token
	}
	tr := &http.Transport{
		MaxConnsPerHost: limit, MaxIdleConnsPerHost: limit, IdleConnTimeout: 90 * time.Second,
		DialContext:           (&net.Dialer{Timeout: b.cfg.Timeouts.Connect, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: headers,
	}
	return &server{url: url, model: m, limit: limit, hc: &http.Client{Transport: tr},
		info: ServerInfo{Worker: w, Model: m.Name}}
}

// describe records the server's version and prefix caching, and warns when the latter is
// not what the experiment asks for (an attached server keeps its own setting).
func (b *Backend) describe(ctx context.Context, srv *server) {
	srv.info.Version = serverVersion(ctx, b.control, srv.url, b.cfg.APIKey, b.cfg.API)
	if b.cfg.API == APIOpenAI {
		if data, err := get(ctx, b.control, srv.url, "/metrics", ""); err == nil {
			srv.info.PrefixCaching = prefixCachingOf(data)
			srv.cache0, _ = prefixCacheOf(data)
			srv.lag0, _ = sumSeries(data, serverLagSeries)
		}
	}
	want := map[bool]string{true: "on", false: "off"}[b.cfg.PrefixCaching]
	if pc := srv.info.PrefixCaching; pc != "" && pc != want {
		slog.Warn("the server's prefix caching is not what [replay] prefix_caching asks for: shared prompt prefixes will be measured as the server caches them",
			"worker", srv.info.Worker, "model", srv.model.Name, "url", srv.url, "server", pc, "experiment", want)
	}
	slog.Info("server ready", "worker", srv.info.Worker, "model", srv.model.Name, "url", srv.url, "version", srv.info.Version,
		"prefix_caching", srv.info.PrefixCaching, "cache", srv.info.CacheReset, "max_in_flight", srv.limit)
	b.startAdmission(srv)
}

// Preflight checks, before a run, that every attached endpoint answers its health check:
// one that refuses the connection, or cannot be reached, fails within the connect timeout
// with its URL and the cause, before any policy starts.
func (b *Backend) Preflight(ctx context.Context) error {
	seen := map[string]bool{}
	var urls []string
	for _, e := range b.cfg.Endpoints {
		if !seen[e.URL] {
			seen[e.URL] = true
			urls = append(urls, e.URL)
		}
	}
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, b.cfg.Timeouts.Connect)
			defer cancel()
			for {
				_, err := probeHealth(pctx, b.control, u, b.cfg.API)
				if err == nil {
					return
				}
				if pctx.Err() != nil || !connectError(err) {
					errs[i] = fmt.Errorf("%s does not answer %s (within [replay] connect_timeout = %v): %v", u, b.cfg.API.healthPath(), b.cfg.Timeouts.Connect, err)
					return
				}
				// Refused: it may be starting; try again until the connect timeout.
				select {
				case <-pctx.Done():
					errs[i] = fmt.Errorf("%s refuses connections (for [replay] connect_timeout = %v): %v: is the server running, and is the URL right?", u, b.cfg.Timeouts.Connect, err)
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitHealthy polls srv's health route until it answers 200. A server that answers while it
// is still loading gets its connection pool filled meanwhile (warm), so that the first calls
// do not each wait for a new connection. An attached server (exited nil) that still refuses
// connections after the connect timeout fails at once: it is not starting, it is not there.
// The error of a wait that times out says what the server last answered.
func (b *Backend) waitHealthy(ctx context.Context, srv *server, exited chan struct{}) error {
	url := srv.url
	// Poll often enough that the wait adds little to a load time in the experiment's time
	// base (emulators run faster than real time).
	every := min(50*time.Millisecond, max(5*time.Millisecond, time.Duration(float64(50*time.Millisecond)/b.cfg.TimeScale)))
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	last := start
	var warmed chan struct{}
	seen := "nothing yet"
	for {
		status, err := probeHealth(ctx, b.control, url, b.cfg.API)
		switch {
		case status == http.StatusOK:
			if warmed != nil {
				select {
				case <-warmed:
				case <-ctx.Done():
				}
			}
			return nil
		case status != 0:
			seen = fmt.Sprintf("HTTP %d", status)
			if warmed == nil && b.cfg.API == APIOpenAI {
				warmed = make(chan struct{})
				go func() {
					defer close(warmed)
					b.warm(ctx, srv)
				}()
			}
		case err != nil && ctx.Err() == nil:
			seen = err.Error()
			if exited == nil && connectError(err) && time.Since(start) > b.cfg.Timeouts.Connect {
				return fmt.Errorf("%s refuses connections (for [replay] connect_timeout = %v): %v: is the server running, and is the URL right?", url, b.cfg.Timeouts.Connect, err)
			}
		}
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			slog.Info("waiting for the server to become healthy", "url", url, "waited", time.Since(start).Round(time.Second), "timeout", b.cfg.HealthTimeout, "last_seen", seen)
		}
		select {
		case <-ctx.Done():
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			return fmt.Errorf("%s did not answer GET %s with 200 within %v ([replay] health_timeout); it last answered: %s", url, b.cfg.API.healthPath(), b.cfg.HealthTimeout, seen)
		case <-exited:
			return fmt.Errorf("the server for %s exited before it was healthy (last seen: %s)", url, seen)
		case <-tick.C:
		}
	}
}

// warm opens up to 64 of srv's connections (GET /metrics on each at once) and leaves them
// idle in its pool.
func (b *Backend) warm(ctx context.Context, srv *server) {
	n := min(srv.limit, 64)
	resps := make(chan *http.Response, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(srv.url, "/")+"/metrics", nil)
			if err != nil {
				return
			}
			if resp, err := srv.hc.Do(req); err == nil {
				resps <- resp // its connection stays busy until every request has one
			}
		}()
	}
	wg.Wait()
	close(resps)
	for resp := range resps {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Expand fills a command or environment template.
func Expand(tmpl string, vars map[string]string) string {
	for k, v := range vars {
		tmpl = strings.ReplaceAll(tmpl, "{"+k+"}", v)
	}
	return tmpl
}

// LaunchTimeEnv names the environment variable that tells a launched server when mosaic
// started it (RFC 3339 with nanoseconds): `mosaic emulate` counts its load time from it, so
// that its own process start-up is inside the load time, as a real server's is.
const LaunchTimeEnv = "MOSAIC_LAUNCH_TIME"

func (b *Backend) launch(ctx context.Context, w int, m Model) (*server, error) {
	began := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	hw := b.cfg.hardware(w)
	gpu := devices(hw.Devices)
	tp := ""
	if len(hw.Devices) > 1 {
		tp = "--tensor-parallel-size " + strconv.Itoa(len(hw.Devices))
	}
	self, _ := os.Executable()
	vars := map[string]string{
		"model": m.Name, "arch": m.Arch, "port": strconv.Itoa(port), "gpu": gpu,
		"gpu_name": hw.GPUName, "tp": strconv.Itoa(len(hw.Devices)), "tensor_parallel": tp,
		"util":         strconv.FormatFloat(m.Utilization, 'g', -1, 64),
		"max_num_seqs": strconv.Itoa(m.MaxNumSeqs), "max_batched_tokens": strconv.Itoa(m.MaxTokens),
		"time_scale": strconv.FormatFloat(b.cfg.TimeScale, 'g', -1, 64), "worker": strconv.Itoa(w), "mosaic": self,
		"prefix_caching":  map[bool]string{true: "--enable-prefix-caching", false: "--no-enable-prefix-caching"}[b.cfg.PrefixCaching],
		"chunked_prefill": map[bool]string{true: "--enable-chunked-prefill", false: "--no-enable-chunked-prefill"}[m.ChunkedPrefill],
	}
	args := strings.Fields(Expand(b.cfg.Command, vars))
	if len(args) == 0 {
		return nil, errors.New("the launch command is empty")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+gpu, LaunchTimeEnv+"="+began.Format(time.RFC3339Nano))
	for k, v := range b.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+Expand(v, vars))
	}
	// Its own process group (a terminal's hang-up does not reach it, and stop ends the whole
	// group), and killed with mosaic if mosaic dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	srv := b.newServer(w, m, "http://127.0.0.1:"+strconv.Itoa(port))
	srv.cmd, srv.exit = cmd, make(chan struct{})
	if b.cfg.LogDir != "" {
		if err := os.MkdirAll(b.cfg.LogDir, 0o755); err != nil {
			return nil, err
		}
		name := filepath.Join(b.cfg.LogDir, fmt.Sprintf("worker%d-%s-%d.log", w, m.Name, port))
		f, err := os.Create(name)
		if err != nil {
			return nil, err
		}
		srv.log = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	started := make(chan error, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Pdeathsig fires when the thread that started the child exits: keep this goroutine on
		// its thread until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			close(srv.exit)
			if srv.log != nil {
				srv.log.Close()
			}
			started <- fmt.Errorf("starting %q: %w", args[0], err)
			return
		}
		started <- nil
		err := cmd.Wait()
		close(srv.exit)
		if srv.log != nil {
			srv.log.Close()
		}
		b.mu.Lock()
		_, current := b.servers[serverKey{w, m.Name}]
		b.mu.Unlock()
		if current && b.ctx.Err() == nil {
			b.markDead(fmt.Errorf("worker %d: the server of %s (%s) exited: %v", w, m.Name, srv.url, err))
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	slog.Info("server launched", "worker", w, "model", m.Name, "gpus", gpu, "pid", cmd.Process.Pid, "url", srv.url)
	if err := b.waitHealthy(ctx, srv, srv.exit); err != nil {
		stop(srv)
		return nil, err
	}
	return srv, nil
}

func (b *Backend) markDead(err error) {
	slog.Error("worker dead", "err", err)
	b.mu.Lock()
	if b.dead == nil {
		b.dead = err
	}
	b.mu.Unlock()
}

// stop ends a launched server's process group (SIGTERM, then SIGKILL after 10 s), and the
// polling and the idle connections of any server.
func stop(s *server) {
	if s == nil {
		return
	}
	if s.adm != nil {
		s.adm.close()
	}
	defer s.hc.CloseIdleConnections()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exit
	}
}

// Unload implements backend.Backend: a launched server is stopped, a model loaded through the
// API unloaded; an attached server is left running.
func (b *Backend) Unload(w backend.WorkerID, model string) error {
	key := serverKey{int(w), model}
	b.mu.Lock()
	srv := b.servers[key]
	delete(b.servers, key)
	b.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("replay: worker %d does not hold %s", w, model)
	}
	b.begin()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.release(srv)
		b.emit(backend.Event{Kind: backend.EventUnloaded, At: b.Now(), Worker: w, Model: model})
	}()
	return nil
}

// Close stops every launched server and unloads every model loaded through the API (waiting
// for them), and abandons what is in flight.
func (b *Backend) Close() {
	b.over.log(b.cfg.TimeScale)
	b.mu.Lock()
	b.cancel()
	srvs := make([]*server, 0, len(b.servers))
	for _, s := range b.servers {
		srvs = append(srvs, s)
	}
	b.servers = map[serverKey]*server{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range srvs {
		wg.Add(1)
		go func() { defer wg.Done(); b.release(s) }()
	}
	wg.Wait()
	b.wg.Wait()
	for _, d := range b.dispatchers {
		d.prefills.Wait()
	}
}
