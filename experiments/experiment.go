// Package experiments defines the experiment file (TOML), validates it strictly — every error
// names the file, the line and the key — and resolves it into the simulator's objects.
//
// An experiment names a cluster (GPU kind and worker count, or groups of workers of different
// GPU kinds and tensor-parallel degrees), the models it uses (by catalog name), the engine
// settings, and a workload. The single-model batch workload
// (kind = "batch") serves N requests of one model on one GPU; the Mixture-of-Agents workload
// builds on the same [[model]] and [cluster] tables.
package experiments

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
)

// Quickstart is the built-in experiment `mosaic sim` (and `make run`) runs without arguments.
//
//go:embed quickstart.toml
var Quickstart []byte

// QuickstartName is the name quickstart errors are reported under.
const QuickstartName = "experiments/quickstart.toml"

// Experiment is the decoded experiment file.
type Experiment struct {
	// Name names the experiment in tables, figures and results (required).
	Name string `toml:"name"`
	// Seed seeds every random draw of the workload; the same seed gives byte-identical
	// results (default 0; --seed overrides it).
	Seed     int64    `toml:"seed"`
	Cluster  Cluster  `toml:"cluster"`
	Engine   Engine   `toml:"engine"`
	Models   []Model  `toml:"model"`
	Workload Workload `toml:"workload"`
	// Aggregation is the default aggregation rule of the policies.
	Aggregation Aggregation `toml:"aggregation"`
	// Policies are compared on the same workload; the first is the baseline of the speedups.
	Policies []PolicySpec `toml:"policy"`
	// Replay says how `mosaic replay` reaches the inference servers.
	Replay Replay `toml:"replay"`
	// SLO is the per-query latency objective of online serving.
	SLO SLO `toml:"slo"`

	file *tomlx.File
	dir  string // directory of the file, for relative paths
	// overrides are the keys set on the command line (--set, --sweep, --seed).
	overrides map[string]bool
	// durationApplied says workload.queries was set from workload.duration.
	durationApplied bool
	// ownPolicies says the policies were replaced (ReplacePolicies): the file's [[policy]]
	// keys do not apply.
	ownPolicies bool
	// share is what the points of a sweep share while they resolve (nil outside a sweep;
	// see sweepshare.go).
	share *resolveShare
}

// Cluster is the hardware: Workers identical workers of GPU (each a tensor-parallel group of
// TP GPUs), or a mixed cluster given as groups of workers ([[cluster.group]]), not both.
type Cluster struct {
	// GPU is the catalog's GPU of every worker (`mosaic catalog gpus`).
	GPU string `toml:"gpu"`
	// Workers is the number of workers (model instances side by side).
	Workers int `toml:"workers"`
	// TP is the tensor-parallel degree of every worker: a worker is a group of TP GPUs of one
	// node (1, 2, 4 or 8; default 1) that holds each model sharded over its GPUs.
	TP int `toml:"tp"`
	// Groups describe a mixed cluster, one [[cluster.group]] per kind of worker: Count GPUs
	// of type GPU, joined into Count/TP workers of TP GPUs each. Workers (and GPUs) are
	// numbered group by group, in the file's order; each worker runs a model with the cost
	// model of its own GPU type and TP degree.
	Groups []ClusterGroup `toml:"group" json:",omitempty"`
	// Catalog is an optional TOML file of extra GPUs and models.
	Catalog string `toml:"catalog"`
	// Profile is an optional cost-model profile (fitted coefficients).
	Profile string `toml:"profile"`
}

// ClusterGroup is one [[cluster.group]] of a mixed cluster: Count GPUs of type GPU, forming
// Count/TP workers, each a tensor-parallel group of TP GPUs (1, 2, 4 or 8; default 1) of one
// node. TP must divide Count.
type ClusterGroup struct {
	GPU   string `toml:"gpu"`
	Count int    `toml:"count"`
	TP    int    `toml:"tp"`
}

// Engine sets each worker's inference engine; zero values take the preset's values, or vLLM's
// defaults without a preset.
type Engine struct {
	// Preset names an engine preset of the catalog (`mosaic catalog engines`): scheduler
	// defaults and CPU overheads of one engine version. The keys below override it.
	Preset string `toml:"preset"`
	// MaxNumSeqs is vLLM's max_num_seqs: the most sequences in one batch.
	MaxNumSeqs int `toml:"max_num_seqs"`
	// MaxBatchedTokens is vLLM's max_num_batched_tokens: the token budget of one iteration.
	MaxBatchedTokens int `toml:"max_batched_tokens"`
	// ChunkedPrefill splits long prompts over iterations beside decodes (vLLM V1); false
	// schedules whole prompts first (V0).
	ChunkedPrefill *bool `toml:"chunked_prefill"`
	// GPUMemoryUtilization is vLLM's gpu_memory_utilization: the share of a GPU's memory
	// for weights, activations and KV cache.
	GPUMemoryUtilization float64 `toml:"gpu_memory_utilization"`
	// BlockSize is the number of tokens per KV-cache block (at most 256).
	BlockSize int `toml:"block_size"`
	// PrefixCaching turns on vLLM's automatic prefix caching (default: the preset's; off
	// without one): the calls of a query share their question as a prompt prefix
	// (traces.Call.PrefixTokens), and an engine reuses the KV blocks of a prefix it computed.
	// Replay's launched servers follow it unless [replay] prefix_caching says otherwise.
	PrefixCaching *bool `toml:"prefix_caching"`
	// SchedulingPolicy is vLLM's --scheduling-policy: "fcfs" (the default) serves each
	// engine's waiting calls first come first served; "priority" serves them by the priority a
	// policy submits each call with (lower first, then by arrival) and preempts the running
	// call last in that order when the KV cache runs out, as vLLM V1's priority scheduler
	// does (it needs chunked prefill). An FCFS engine refuses a call with a priority other
	// than 0. Replay's launched servers get --scheduling-policy priority and its requests
	// carry their priority.
	SchedulingPolicy string `toml:"scheduling_policy" json:",omitempty"`
	// IterationOverheadMS and PerSeqOverheadMS replace the engine's CPU overheads per
	// iteration and per sequence (milliseconds).
	IterationOverheadMS *float64 `toml:"iteration_overhead_ms"`
	PerSeqOverheadMS    *float64 `toml:"per_seq_overhead_ms"`
	// LaunchFloorMS replaces the launch floor of the engine's iterations (milliseconds): an
	// eager engine's GPU part lasts at least this long (0: an engine with CUDA graphs).
	LaunchFloorMS *float64 `toml:"launch_floor_ms"`
	// LoadGBps and StartupS replace the profile's model-load coefficients: a load takes
	// weight bytes / load_gbps + startup_s seconds.
	LoadGBps *float64 `toml:"load_gbps"`
	StartupS *float64 `toml:"startup_s"`
}

// Model is a model used by the experiment.
type Model struct {
	// Name is how the workload refers to the model.
	Name string `toml:"name"`
	// Arch is the catalog entry: a Hugging Face id or an alias.
	Arch string `toml:"arch"`
	// OutputTokens is the model's output-length distribution.
	OutputTokens *Dist `toml:"output_tokens"`
	// ForwardTokens is how much of an expert response reaches the aggregator (the response
	// with its reasoning stripped); absent: the whole response.
	ForwardTokens *Dist `toml:"forward_tokens"`
	// Accuracy is the probability the model answers an average question right (MoA answers),
	// and AccuracyByCategory the same per question category where it differs.
	Accuracy           *float64           `toml:"accuracy"`
	AccuracyByCategory map[string]float64 `toml:"accuracy_by_category"`
	// Weight is the model's routing popularity (MoA); absent: from the routing skew.
	Weight float64 `toml:"weight"`
	// GPUMemoryUtilization overrides the engine setting for this model (the fraction of a
	// worker's memory its engine takes; models share a worker while their fractions sum to 1).
	GPUMemoryUtilization float64 `toml:"gpu_memory_utilization"`
	// AnswersColumn is the model's name in a workload's answer file (workload.answers).
	AnswersColumn string `toml:"answers_column"`
}

// Workload says what work the cluster serves. Each kind takes its own keys (see
// workloadKeys); a key of another kind is an error.
type Workload struct {
	// Kind is "batch" (Requests requests of one Model), "moa" (Mixture-of-Agents queries: k
	// experts and an aggregator), "layered" (Together-MoA: layers of proposers and an
	// aggregator), "tree" (Faster-MoA's fan-in tree) or "dag" (a graph template of nodes).
	Kind string `toml:"kind"`

	// The queries of the graph kinds: their number and questions ...
	Queries int `toml:"queries"`
	// Questions is a question-list CSV (dataset,index,category,question_chars,
	// question_words,gold); "data:" prefixes a path inside the shared data folder.
	Questions string `toml:"questions"`
	// Dataset selects the questions of one dataset of the list.
	Dataset string `toml:"dataset"`
	// TemplateTokens is the prompt template around the question in every expert call.
	TemplateTokens int `toml:"template_tokens"`
	// TokensPerWord converts a question's words into prompt tokens.
	TokensPerWord float64 `toml:"tokens_per_word"`
	// PromptTokens is the question length when no question list is given.
	PromptTokens *Dist      `toml:"prompt_tokens"`
	Votes        Votes      `toml:"votes"`
	Aggregator   Aggregator `toml:"aggregator"`
	// Gate says which calls of a layered or tree graph the aggregation rule may skip:
	// "final" (the final aggregator, the default), "all" (every call that reads others) or
	// "none".
	Gate string `toml:"gate"`

	// ... and when they arrive (every kind): ArrivalRate queries (or requests) per second,
	// 0 for an offline batch at time 0, by ArrivalProcess "poisson" (the default), "gamma"
	// (gaps with coefficient of variation ArrivalCV) or "trace" (the gaps of ArrivalTrace's
	// ArrivalColumn of timestamps, scaled to ArrivalRate unless it is 0).
	ArrivalRate    float64 `toml:"arrival_rate"`
	ArrivalProcess string  `toml:"arrival_process"`
	ArrivalCV      float64 `toml:"arrival_cv"`
	ArrivalTrace   string  `toml:"arrival_trace"`
	ArrivalColumn  string  `toml:"arrival_column"`
	// Duration is how long queries arrive: with arrival_rate, the workload has rate x
	// duration queries (rounded up), so that the points of a sweep over the rate share one
	// horizon (give queries or duration, not both; generated workloads only).
	Duration time.Duration `toml:"duration"`
	// Warmup is the share of an online run's queries, the first to arrive, that its
	// steady-state figures (summary.csv's window_ columns) leave out (default 0.2).
	Warmup *float64 `toml:"warmup"`

	// moa: the expert pool and routing ...
	Experts []string `toml:"experts"`
	// ExpertsPerQuery is k, the experts each query is routed to (with replacement).
	ExpertsPerQuery int     `toml:"experts_per_query"`
	Routing         Routing `toml:"routing"`
	// ... or a workload file (JSONL, see traces.WriteJSONL; any graph) ...
	Trace string `toml:"trace"`
	// ... or real model answers (an answer file such as RouterBench's ARC answers): every
	// query goes to all experts, whose [[model]] answers_column names their column in the file.
	Answers string `toml:"answers"`

	// layered: Layers layers of the Proposers, then the aggregator.
	Layers    int      `toml:"layers"`
	Proposers []string `toml:"proposers"`

	// tree: Shape nodes per layer (9-3-1), each layer's nodes taking Models[layer] in turn.
	Shape []int `toml:"shape"`
	// Dense (tree) makes every node read every node of the layer below: the dense baseline of
	// Faster-MoA's tree.
	Dense bool `toml:"dense"`
	// Models lists each tree layer's models, from the leaves up.
	Models [][]string `toml:"models"`

	// dag: the graph template.
	Nodes []DAGNode `toml:"node"`

	// batch: Model names the [[model]] the batch uses (default: the only one).
	Model string `toml:"model"`
	// Requests is the number of requests of a batch workload.
	Requests int `toml:"requests"`
	// InputTokens is the prompt-length distribution.
	InputTokens *Dist `toml:"input_tokens"`
	// OutputTokens overrides the model's output-length distribution.
	OutputTokens *Dist `toml:"output_tokens"`
}

// DAGNode is one node of a dag workload's template: an LLM call of Model or a tool step of
// ToolMS milliseconds; Count copies run side by side (a fan-out). Inputs name earlier nodes:
// a node reads every copy of an input, except that a node with as many copies as its input
// reads the copy of its own number (a map over the fan-out).
type DAGNode struct {
	// Name is how other nodes' inputs refer to the node.
	Name string `toml:"name"`
	// Role labels the node's calls in results (default: its name).
	Role  string `toml:"role"`
	Model string `toml:"model"`
	// ToolMS is the duration of a tool step, milliseconds.
	ToolMS *Dist    `toml:"tool_ms"`
	Count  int      `toml:"count"`
	Inputs []string `toml:"inputs"`
	// TemplateTokens is the node's own prompt template; Question (default true) puts the
	// question in the prompt.
	TemplateTokens int   `toml:"template_tokens"`
	Question       *bool `toml:"question"`
	// OutputTokens and ForwardTokens default to the model's.
	OutputTokens  *Dist `toml:"output_tokens"`
	ForwardTokens *Dist `toml:"forward_tokens"`
	// Gate puts the aggregation rule on the node: from its inputs' answers it runs or is
	// skipped (its answer then the inputs' majority).
	Gate bool `toml:"gate"`
	// DisagreementScale shortens the output of a node whose inputs agree (see
	// [workload.aggregator]).
	DisagreementScale float64 `toml:"disagreement_scale"`
}

// Routing is how a MoA query picks its k experts (with replacement). Method "skew" (the
// default) gives the experts a popularity falling geometrically by Skew (the max/min ratio),
// perturbed per skill by SkillSpread. Method "symbolic-moe" runs Symbolic-MoE's recruiting
// rule on the experts' accuracies (see traces.KeywordRouting): demand follows from the data,
// and Validation and the keyword statistics below are its inputs.
type Routing struct {
	Method      string  `toml:"method"`
	Skew        float64 `toml:"skew"`
	SkillSpread float64 `toml:"skill_spread"`
	// Validation is the size of the validation set the experts' profiles come from.
	Validation int `toml:"validation"`
	// Keywords per question, Vocabulary per skill, SharedVocabulary of the common pool, Shared
	// the probability of a common keyword, Zipf the rank law's exponent and Temperature the
	// global strength's (defaults: traces.DefaultKeywordRouting).
	Keywords         int      `toml:"keywords"`
	Vocabulary       int      `toml:"vocabulary"`
	SharedVocabulary int      `toml:"shared_vocabulary"`
	Shared           *float64 `toml:"shared"`
	Zipf             *float64 `toml:"zipf"`
	Temperature      float64  `toml:"temperature"`
}

// Routing methods.
const (
	RoutingSkew        = "skew"
	RoutingSymbolicMoE = "symbolic-moe"
)

// Aggregator is the aggregator model and its behaviour. Its answers follow one of two models:
// the simple one (Accuracy: right with this probability when the experts' strict majority is
// wrong or absent; KeepMajority: keeps a right majority with this probability), or the model
// per vote pattern (traces.Synthesizer): the probabilities of breaking a right and rescuing a
// wrong unanimous vote or strict majority, and SplitAccuracy on a vote without a strict
// majority (default: the aggregator model's own accuracy). FitAccuracyChange solves the
// pattern model's break and rescue probabilities (the given ones are priors) so that skipping
// the aggregator changes accuracy by the given points at T = 1 and T = 2/3, in expectation
// over the vote model: calibrated to those figures, not observed.
type Aggregator struct {
	// Model names the [[model]] that aggregates.
	Model string `toml:"model"`
	// OutputTokens overrides the aggregator model's output-length distribution.
	OutputTokens *Dist `toml:"output_tokens"`
	// TemplateTokens is the aggregation prompt's own template, besides the question and the
	// experts' forwarded answers.
	TemplateTokens int `toml:"template_tokens"`
	// DisagreementScale lengthens the aggregator's output with the experts' disagreement:
	// its mean is scaled by 1 + DisagreementScale x (the share of votes against the majority).
	DisagreementScale float64 `toml:"disagreement_scale"`
	// Accuracy is the simple model's probability of a right answer when the experts' strict
	// majority is wrong or absent.
	Accuracy *float64 `toml:"accuracy"`
	// KeepMajority is the simple model's probability of keeping a right strict majority.
	KeepMajority float64 `toml:"keep_majority"`
	// BreakUnanimous is the pattern model's probability of answering wrong on a right
	// unanimous vote.
	BreakUnanimous *float64 `toml:"break_unanimous"`
	// RescueUnanimous is the pattern model's probability of answering right on a wrong
	// unanimous vote.
	RescueUnanimous *float64 `toml:"rescue_unanimous"`
	// BreakMajority is the pattern model's probability of answering wrong on a right strict
	// majority.
	BreakMajority *float64 `toml:"break_majority"`
	// RescueMajority is the pattern model's probability of answering right on a wrong strict
	// majority.
	RescueMajority *float64 `toml:"rescue_majority"`
	// SplitAccuracy is the pattern model's accuracy on a vote without a strict majority
	// (default: the aggregator model's own accuracy).
	SplitAccuracy *float64 `toml:"split_accuracy"`
	// FitAccuracyChange gives the accuracy changes the pattern model is fitted to (see above).
	FitAccuracyChange *AccuracyChange `toml:"fit_accuracy_change"`
}

// AccuracyChange is the change of accuracy, in percentage points, when the aggregator is
// skipped on unanimous votes (T1) and on strict majorities too (T2_3), against always
// aggregating.
type AccuracyChange struct {
	// T1 is the change at T = 1 (skipping on unanimous votes), percentage points.
	T1 *float64 `toml:"t1"`
	// T23 is the change at T = 2/3 (skipping on strict majorities too), percentage points.
	T23 *float64 `toml:"t2_3"`
}

// Votes is the experts' answer model; Unanimous and Majority are calibration targets for the
// shares of unanimous and strict-majority votes.
type Votes struct {
	// Options is the number of answer letters per question (10 for MMLU-Pro).
	Options int `toml:"options"`
	// ErrorCorrelation, in [0, 1], is the probability that a wrong answer is the query's
	// shared distractor rather than a uniformly random wrong letter.
	ErrorCorrelation float64 `toml:"error_correlation"`
	// Difficulty, >= 0, is the standard deviation of the per-query shift of every expert's
	// log-odds of answering right.
	Difficulty float64 `toml:"difficulty"`
	// Unanimous is the target share of unanimous votes; with it (or Majority) the error
	// correlation and difficulty are solved rather than read.
	Unanimous float64 `toml:"unanimous"`
	// Majority is the target share of strict majorities that are not unanimous.
	Majority float64 `toml:"majority"`
}

// SLO is a per-query service level objective: a query meets it when its end-to-end latency
// (arrival to final answer) is at most E2E and its time to the final call's first token at
// most TTFT; an absent bound is not checked. summary.csv reports the share of queries that
// meet it (slo_attainment) and their rate (request_goodput).
type SLO struct {
	E2E  time.Duration `toml:"e2e"`
	TTFT time.Duration `toml:"ttft"`
}

// Aggregation is the confidence-aware aggregation rule: skip the aggregator when the experts'
// confidence C(q) = max votes / k is at least Threshold (1: unanimous only; 2/3: majorities of
// three too; above 1: never skip).
type Aggregation struct {
	Threshold *float64 `toml:"threshold"`
}

// Replay configures replay on real servers.
type Replay struct {
	// Mode is "launch" (start a server per worker and model from Command) or "attach" (use
	// the running servers of Endpoint). Default: attach when endpoints are listed.
	Mode string `toml:"mode"`
	// Command is the launch template (default: vllm serve ...; see replay.DefaultCommand).
	Command string `toml:"command"`
	// Env holds extra environment variables of launched servers (templated like Command).
	Env       map[string]string `toml:"env"`
	Endpoints []ReplayEndpoint  `toml:"endpoint"`
	// GPUs are the CUDA devices of the workers, one per GPU, taken in worker order: a worker of
	// a tensor-parallel group of TP GPUs takes TP of them (default: 0, 1, 2, ...).
	GPUs []int `toml:"gpus"`
	// HealthTimeout bounds the wait for a launched server's GET /health to answer 200.
	HealthTimeout time.Duration `toml:"health_timeout"`
	// RequestTimeout bounds one attempt of a call (default 2h), ConnectTimeout connecting
	// and the response headers (10s), FirstTokenTimeout the wait from the headers to the
	// first token, queueing included (30m), and IdleTimeout the silence between two chunks
	// of a stream (60s); all in real time. An attempt that runs out is retried, then failed
	// with the reason.
	RequestTimeout    time.Duration `toml:"request_timeout"`
	ConnectTimeout    time.Duration `toml:"connect_timeout"`
	FirstTokenTimeout time.Duration `toml:"first_token_timeout"`
	IdleTimeout       time.Duration `toml:"idle_timeout"`
	// MaxConcurrency bounds the calls in flight per server (default: the model's
	// max_num_seqs); the rest wait in the worker's dispatcher, in submission order.
	MaxConcurrency int `toml:"max_concurrency"`
	// Retries is how many times a call that failed for a retryable reason (a refused
	// connection, a stream cut short, HTTP 5xx) is sent again before it is recorded failed.
	Retries *int `toml:"retries"`
	// RetryBackoff is the wait before a call's first retry, doubling for each further one, in
	// the experiment's time (real time divided by time_scale; default "0.5s"). calls.csv
	// records each call's attempts and the time they lost (retry_lost_s).
	RetryBackoff time.Duration `toml:"retry_backoff"`
	// OnDeadWorker is "stop" (default) or "continue".
	OnDeadWorker string `toml:"on_dead_worker"`
	// APIKeyEnv names the environment variable holding the servers' API key.
	APIKeyEnv string `toml:"api_key_env"`
	// TimeScale is the servers' speed-up (virtual seconds per real second): 1 for real GPUs,
	// the emulators' --time-scale for emulated ones.
	TimeScale float64 `toml:"time_scale"`
	// Telemetry samples GPUs through NVML every this often (default 1s; "0s" turns it off).
	Telemetry *time.Duration `toml:"telemetry"`
	// PrefixCaching is "off" (launched servers get --no-enable-prefix-caching and prefill
	// every prompt token) or "workload" (they keep vLLM's automatic prefix caching, which then
	// serves exactly the prefixes the workload's calls share); default: as [engine]
	// prefix_caching, so that replay measures what the simulator models.
	PrefixCaching string `toml:"prefix_caching"`
	// AdmissionPoll is how often, in the experiment's time, a busy server's /metrics are read
	// to tell when its calls leave the waiting queue (calls.csv start_s; default "0.5s";
	// "0s": start_s is the send time).
	AdmissionPoll *time.Duration `toml:"admission_poll"`
	// API is the servers' protocol: "openai" (vLLM's OpenAI-compatible server or `mosaic
	// emulate`; default) or "ollama" (attached `ollama serve` endpoints, one per worker, whose
	// models are loaded and unloaded through Ollama's API and prompted with text).
	API string `toml:"api"`
	// PromptWords is how many distinct words w0, w1, ... the text prompts of the ollama API
	// draw from (default 256): each must be one token of the served models.
	PromptWords int `toml:"prompt_words"`
	// ResetPrefixCache asks each attached server to drop its prefix cache (POST
	// /reset_prefix_cache, which vLLM offers with VLLM_SERVER_DEV_MODE=1) before each policy
	// uses it, besides the cache salt every request carries (default true).
	ResetPrefixCache *bool `toml:"reset_prefix_cache"`
}

// ReplayEndpoint attaches a worker, or one model of a worker, to a running server.
type ReplayEndpoint struct {
	// Worker is the worker the server stands for.
	Worker int `toml:"worker"`
	// Model is the [[model]] it serves ("" for every model of the worker).
	Model string `toml:"model"`
	// URL is the server's base URL (http or https).
	URL string `toml:"url"`
}

// PolicySpec is one policy to compare.
type PolicySpec struct {
	Name string `toml:"name"`
	// Threshold overrides the experiment's aggregation threshold for this policy.
	Threshold *float64 `toml:"threshold"`
	// Label names the policy in results when the same policy is listed twice.
	Label string `toml:"label"`
	// Mosaic, Pipeline and Online are the options of the policy of that name, each in the
	// policy's own table: `mosaic.order = "plain"` in the [[policy]] table, or a
	// [policy.mosaic] table after it. A table for another policy than the one named is an
	// error.
	Mosaic   *MosaicOptions   `toml:"mosaic" json:",omitempty"`
	Pipeline *PipelineOptions `toml:"pipeline" json:",omitempty"`
	Online   *OnlineOptions   `toml:"online" json:",omitempty"`
	// Plas and Atlas are the options of the program-aware policies plas and atlas.
	Plas  *AttainedOptions `toml:"plas" json:",omitempty"`
	Atlas *AttainedOptions `toml:"atlas" json:",omitempty"`
	// Dispatch orders each model's queue of ready calls when queries arrive over time:
	// "fcfs", "deepest", "sjf", "plas" or "atlas" (online.Orders; default: fcfs, and deepest
	// for the online policy). An offline batch's stage-by-stage policies take none.
	Dispatch string `toml:"dispatch"`
	// EarlyExit turns on Faster-MoA's runtime early exit for this policy's run (any policy):
	// once MinFinished of a gated call's inputs have answered and their top answer has the
	// Agreement share, the rest are cancelled (see policies.EarlyExit).
	EarlyExit *EarlyExitSpec `toml:"early_exit"`
	// Overlap turns on Faster-MoA's prefill-decode overlap for this policy's run: a call that
	// reads others is released when its query arrives and, once submitted, prefills its prompt
	// as its inputs finish (see policies.Driver.SetOverlap). It speeds up the policies that
	// submit calls before their inputs are done (online, pipeline); the stage-by-stage ones
	// submit a stage's calls after the previous stage, when there is nothing left to overlap.
	Overlap bool `toml:"overlap"`
	// DynamicThreshold replaces the policy's fixed threshold by a load-adaptive one
	// (policies.DynamicThreshold): skip at high; at low while the aggregating model has at
	// least backlog calls released and unfinished, for at most budget of the gated calls.
	DynamicThreshold *DynamicThresholdSpec `toml:"dynamic_threshold"`
}

// MosaicOptions are the mosaic policy's options, in its own table of its [[policy]]: dotted keys
// (mosaic.solver_time_limit = "10s") or a [policy.mosaic] table after the [[policy]] header.
type MosaicOptions struct {
	// SolverTimeLimit is a safety net for each placement solve ("10s"): the solver's searches
	// are bounded by counts of steps and end far sooner; one still running when the limit
	// strikes gives way to the heuristic's plan, with a warning.
	SolverTimeLimit time.Duration `toml:"solver_time_limit"`
	// Order is the order of calls within a worker: "longest-first" or "plain".
	Order string `toml:"order"`
	// Prefetch lets workers done with their experts load the aggregator ahead of its stage.
	Prefetch *bool `toml:"prefetch"`
}

// PipelineOptions are the pipeline policy's options, in its own table of its [[policy]]: dotted keys
// (pipeline.solver_time_limit = "10s") or a [policy.pipeline] table after the [[policy]] header.
type PipelineOptions struct {
	// SolverTimeLimit is a safety net for each placement solve (as for mosaic).
	SolverTimeLimit time.Duration `toml:"solver_time_limit"`
}

// OnlineOptions are the online policy's options, in its own table of its [[policy]]: dotted keys
// (online.solver_time_limit = "10s") or a [policy.online] table after the [[policy]] header.
type OnlineOptions struct {
	// SolverTimeLimit is a safety net for each placement solve (as for mosaic).
	SolverTimeLimit time.Duration `toml:"solver_time_limit"`
	// Replan is how often the policy checks whether the mix of calls drifted from its
	// placement ("60s"; "-1s" never).
	Replan *time.Duration `toml:"replan"`
	// MaxInFlight caps the calls in flight per worker (default: the engine's max_num_seqs).
	MaxInFlight int `toml:"max_in_flight"`
}

// AttainedOptions are the options of the program-aware policies plas and atlas (Autellix's
// least-attained-service disciplines), in their own table of the [[policy]]: plas.quantum =
// "10s" or a [policy.plas] table.
type AttainedOptions struct {
	// Placement is where models go: "mosaic" (default: MOSAIC's plan for the expected mix),
	// "round-robin" or "everywhere" (online.Placements).
	Placement string `toml:"placement"`
	// Quantum is the attained service of the first priority level; level k ends at quantum
	// x 2^k (default "10s").
	Quantum time.Duration `toml:"quantum"`
	// Starve is β, the anti-starvation ratio: a queued call moves to the first level once its
	// program's waiting time reaches starve times its service (at least 1 s) (default 8;
	// negative: never).
	Starve *float64 `toml:"starve"`
}

// DynamicThresholdSpec is the dynamic_threshold table of a policy.
type DynamicThresholdSpec struct {
	// High is the threshold without load.
	High *float64 `toml:"high"`
	// Low is the threshold while the aggregating model's backlog is at least Backlog calls.
	Low *float64 `toml:"low"`
	// Backlog is the number of the aggregating model's released, unfinished calls at which
	// the threshold drops to Low.
	Backlog int `toml:"backlog"`
	// Budget is the accuracy budget: the most skips below High, as a share of the gated
	// calls decided.
	Budget *float64 `toml:"budget"`
}

// EarlyExitSpec is the early_exit table of a policy.
type EarlyExitSpec struct {
	// Agreement is the share of the finished inputs' answers their top answer needs for the
	// gated call to go on without the unfinished ones (which are cancelled).
	Agreement *float64 `toml:"agreement"`
	// MinFinished is the number of inputs that must have answered first.
	MinFinished int `toml:"min_finished"`
	// MinConfidence, when positive, is the least mean confidence of the finished calls.
	MinConfidence float64 `toml:"min_confidence"`
}

// Dist is a length distribution: {dist = "fixed", value = N}, {dist = "lognormal", mean = M,
// p99 = P, max = X [, min = 1]}, {dist = "uniform", min = A, max = B} or
// {dist = "empirical", file = "data:traces/azure_conv_2023.csv", column = "GeneratedTokens"
// [, scale = S] [, max = X]} (the observed values of a CSV column, times S: 1.33 tokens per
// word turns a column of words into tokens).
type Dist struct {
	// Dist is the kind: "fixed", "lognormal", "uniform" or "empirical".
	Dist string `toml:"dist"`
	// Value is a fixed distribution's value.
	Value int `toml:"value"`
	// Mean and P99 are a lognormal's mean and 99th percentile.
	Mean float64 `toml:"mean"`
	P99  float64 `toml:"p99"`
	// A lognormal is given by two of mean, p99, median and sigma (the log-scale standard
	// deviation): mean and p99, or sigma with mean or median. CapShare adds runaway
	// generations that run to max, with this probability.
	Median   float64 `toml:"median"`
	Sigma    float64 `toml:"sigma"`
	CapShare float64 `toml:"cap_share"`
	// Min and Max bound the draws (a uniform's range; a lognormal's floor, default 1, and
	// cap; an empirical's cap).
	Min int `toml:"min"`
	Max int `toml:"max"`
	// File and Column name an empirical distribution's CSV file ("data:" prefixes a path in
	// the shared data folder) and column; Scale multiplies its values.
	File   string  `toml:"file"`
	Column string  `toml:"column"`
	Scale  float64 `toml:"scale"`
}

// Load reads and decodes an experiment file. Unknown keys and wrong types are errors.
func Load(path string) (*Experiment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading experiment: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes an experiment from data; name is used in error messages and relative paths
// are resolved against its directory.
func Parse(name string, data []byte) (*Experiment, error) {
	var e Experiment
	f, err := tomlx.Decode(name, data, &e)
	if err != nil {
		return nil, policyOptionHint(err)
	}
	e.file = f
	e.dir = filepath.Dir(name)
	return &e, nil
}

// policyOptionHint explains an unknown key of a [[policy]] table that is a policy's own
// option written outside the policy's options table (order = "plain" for mosaic.order).
func policyOptionHint(err error) error {
	var te *tomlx.Error
	if !errors.As(err, &te) || !strings.HasPrefix(te.Msg, "unknown key") {
		return err
	}
	head, opt, ok := strings.Cut(te.Key, "].")
	if !ok || !strings.HasPrefix(head, "policy[") || strings.Contains(opt, ".") {
		return err
	}
	var where []string
	for _, k := range policyKinds() {
		for _, o := range k.options() {
			if strings.HasSuffix(o, "."+opt) {
				where = append(where, o)
			}
		}
	}
	if len(where) == 0 {
		return err
	}
	hint := *te
	hint.Msg = fmt.Sprintf("%s: a policy's own options go in its options table: write %s (`mosaic catalog policies` lists them)", te.Msg, strings.Join(where, " or "))
	return &hint
}

// errorf returns an error located at key: its line in the file, or the command-line override
// that set it.
func (e *Experiment) errorf(key, format string, args ...any) error {
	for k := range e.overrides {
		if k == key || strings.HasPrefix(k, key+".") || strings.HasPrefix(key, k+".") {
			return fmt.Errorf("--set %s: %s", k, fmt.Sprintf(format, args...))
		}
	}
	if e.ownPolicies && (key == "policy" || strings.HasPrefix(key, "policy[")) {
		return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)) // not the file's [[policy]]
	}
	return e.file.Errorf(key, format, args...)
}

// has reports whether key is given in the file or on the command line (so that an explicit
// zero is an error, not a default).
func (e *Experiment) has(key string) bool {
	return e.overrides[key] || e.fileHas(key)
}

// path resolves a path given in the file relative to the file's directory.
func (e *Experiment) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.dir, p)
}

// File returns the name the experiment was loaded from.
func (e *Experiment) File() string { return e.file.Path }

func modelKey(i int, field string) string {
	k := fmt.Sprintf("model[%d]", i)
	if field != "" {
		k += "." + field
	}
	return k
}

func lower(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
