package replay

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/policies/backend"
)

// A Backend's configuration: the cluster's workers and their GPUs, how each model is served,
// the launch template, the timeouts, retries and the servers' API.

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
	// SchedulingPolicy is the engine's --scheduling-policy, as sim.EngineConfig's: "" or
	// "fcfs", or "priority", with which launched servers get --scheduling-policy priority
	// ({scheduling_policy}), every request carries its call's priority (vLLM's "priority"
	// field) and the worker's dispatcher holds its queued calls in (priority, submission)
	// order. An attached server must have been started so.
	SchedulingPolicy string
	// Vocab is the model's vocabulary size, which bounds the prompts' token IDs (0: unknown).
	Vocab int
}

// SchedulingPriority is Model.SchedulingPolicy's value for vLLM's priority scheduling (the
// simulator's sim.SchedulingPriority; replay does not depend on the simulator).
const SchedulingPriority = "priority"

// priority reports whether the model's engine schedules by priority.
func (m Model) priority() bool { return m.SchedulingPolicy == SchedulingPriority }

// Endpoint attaches a worker (and optionally one of its models) to a running server.
type Endpoint struct {
	Worker int
	Model  string // "" for every model of the worker
	URL    string
}

// Config configures a Backend.
type Config struct {
	// Workers is each worker's GPUs and how it serves each model, in worker order: on a mixed
	// cluster a model's engine settings follow the worker's GPUs. Workers that are alike share
	// one model map (Identical).
	Workers []Worker
	// Endpoints attach workers to running servers; when empty, servers are launched.
	Endpoints []Endpoint
	// Command is the launch template; placeholders: {model} {arch} {port} {gpu} {gpu_name}
	// {tp} {tensor_parallel} {util} {max_num_seqs} {max_batched_tokens} {time_scale} {worker}
	// {mosaic} {prefix_caching} {chunked_prefill} {scheduling_policy} (see Placeholders).
	Command string
	// Env holds extra environment variables of launched servers (templated likewise).
	Env    map[string]string
	LogDir string
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

// Worker is one worker of the cluster: its GPUs and how it serves each model they can hold.
type Worker struct {
	Hardware WorkerHardware
	// Models says how the worker serves each model, by name; a model missing from it cannot be
	// loaded on the worker.
	Models map[string]Model
}

// WorkerHardware is one worker's GPUs: their type (a catalog name) and CUDA devices, one per
// GPU of the worker's tensor-parallel group (a launched server sees all of them in
// CUDA_VISIBLE_DEVICES and gets --tensor-parallel-size through {tensor_parallel}).
type WorkerHardware struct {
	GPUName string
	Devices []int
}

// Identical returns n workers of one GPU of type gpuName each, on CUDA devices 0 to n-1, each
// serving every model as models says: a cluster of one kind of worker.
func Identical(n int, gpuName string, models map[string]Model) []Worker {
	out := make([]Worker, n)
	for w := range out {
		out[w] = Worker{Hardware: WorkerHardware{GPUName: gpuName, Devices: []int{w}}, Models: models}
	}
	return out
}

// model returns how model is served on worker w, or an error when it cannot be served there.
func (cfg *Config) model(w int, model string) (Model, error) {
	if w < 0 || w >= len(cfg.Workers) {
		return Model{}, fmt.Errorf("replay: no worker %d", w)
	}
	m, ok := cfg.Workers[w].Models[model]
	if !ok {
		return m, fmt.Errorf("replay: model %q cannot run on worker %d (%s)", model, w, cfg.Workers[w].Hardware.describe())
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
const DefaultCommand = "vllm serve {arch} --served-model-name {model} --port {port} --gpu-memory-utilization {util} --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_batched_tokens} {chunked_prefill} {prefix_caching} {tensor_parallel} {scheduling_policy}"

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
	"scheduling_policy":  "--scheduling-policy priority when [engine] scheduling_policy is \"priority\", else nothing (vLLM's default, fcfs)",
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
	need := 64
	for _, wk := range cfg.Workers {
		most, minUtil := 0, 1.0
		for _, m := range wk.Models {
			most = max(most, cfg.limit(m))
			if m.Utilization > 0 {
				minUtil = min(minUtil, m.Utilization)
			}
		}
		resident := min(len(wk.Models), max(1, int(1/minUtil+1e-9)))
		need += resident * (most + 4)
	}
	return need
}
