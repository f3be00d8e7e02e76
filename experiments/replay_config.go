package experiments

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/sim"
)

// The [replay] table: its checks, and the backend configuration it resolves to.

// replayConfig validates [replay] and builds the backend configuration.
func (r *Resolved) replayConfig() (replay.Config, error) {
	cfg := r.replayServers()
	for _, step := range []func(*replay.Config) error{r.replayDevices, r.replayCaching, r.replayEndpoints, r.replayLimits, r.replayAPI} {
		if err := step(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// replayServers is the backend configuration of the cluster and its models as the experiment
// resolves them, with [replay]'s settings that need no check.
func (r *Resolved) replayServers() replay.Config {
	rp := r.Experiment.Replay
	cfg := replay.Config{Command: rp.Command, Env: rp.Env, HealthTimeout: rp.HealthTimeout,
		Timeouts:       replay.Timeouts{Connect: rp.ConnectTimeout, FirstToken: rp.FirstTokenTimeout, Idle: rp.IdleTimeout, Request: rp.RequestTimeout},
		MaxConcurrency: rp.MaxConcurrency, Retries: DefaultRetries, TimeScale: rp.TimeScale, StopOnDeadWorker: true,
		Seed: uint64(r.Seed), AdmissionPoll: replay.DefaultAdmissionPoll}
	// Each worker serves a model with its group's engine settings, and only the models its
	// GPUs can hold; its devices are its GPUs' numbers until replayDevices maps them.
	for gi, g := range r.Groups {
		models := map[string]replay.Model{}
		for _, m := range r.Models {
			if gm := m.OnGroup[gi]; gm.Cost != nil {
				models[m.Name] = replay.Model{Name: m.Name, Arch: m.Arch.ID, Utilization: m.Memory, MaxNumSeqs: gm.Engine.MaxNumSeqs,
					MaxTokens: gm.Engine.MaxBatchedTokens, ChunkedPrefill: gm.Engine.ChunkedPrefill, SchedulingPolicy: gm.Engine.SchedulingPolicy,
					Vocab: m.Arch.Vocab}
			}
		}
		for w := g.First; w < g.First+g.Count; w++ {
			cfg.Workers = append(cfg.Workers, replay.Worker{Hardware: replay.WorkerHardware{GPUName: g.GPU.Name, Devices: r.GPUsOf(w)}, Models: models})
		}
	}
	return cfg
}

// replayCaching checks and applies [replay] prefix_caching and admission_poll.
func (r *Resolved) replayCaching(cfg *replay.Config) error {
	e := r.Experiment
	rp := e.Replay
	switch rp.PrefixCaching {
	case "":
		cfg.PrefixCaching = len(r.Models) > 0 && r.Models[0].PrefixCaching
	case "off":
	case "workload":
		cfg.PrefixCaching = true
	default:
		return e.errorf("replay.prefix_caching", "unknown value %q (known: off, workload)", rp.PrefixCaching)
	}
	if rp.AdmissionPoll != nil {
		if *rp.AdmissionPoll < 0 || (*rp.AdmissionPoll > 0 && *rp.AdmissionPoll < time.Millisecond) {
			return e.errorf("replay.admission_poll", "%v is not a duration of at least 1ms (or \"0s\" for none)", *rp.AdmissionPoll)
		}
		cfg.AdmissionPoll = *rp.AdmissionPoll
	}
	return nil
}

// replayEndpoints checks [replay] mode and the endpoints, which must serve every model on every
// worker that can hold it.
func (r *Resolved) replayEndpoints(cfg *replay.Config) error {
	e := r.Experiment
	rp := e.Replay
	W := r.NumWorkers()
	switch rp.Mode {
	case "":
	case "attach":
		if len(rp.Endpoints) == 0 {
			return e.errorf("replay.mode", "attach needs [[replay.endpoint]] tables (worker, url[, model])")
		}
	case "launch":
		if len(rp.Endpoints) > 0 {
			return e.errorf("replay.endpoint", "launch mode starts its own servers: remove the endpoints or use mode = \"attach\"")
		}
	default:
		return e.errorf("replay.mode", "unknown mode %q (known: attach, launch)", rp.Mode)
	}
	for i, ep := range rp.Endpoints {
		key := fmt.Sprintf("replay.endpoint[%d]", i)
		if ep.Worker < 0 || ep.Worker >= W {
			return e.errorf(key+".worker", "no worker %d (the cluster has %d)", ep.Worker, W)
		}
		if ep.Model != "" {
			if _, ok := r.Model(ep.Model); !ok {
				return e.errorf(key+".model", "no [[model]] is named %q", ep.Model)
			}
		}
		if ep.URL == "" {
			return e.errorf(key+".url", "missing")
		}
		u, err := url.Parse(ep.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return e.errorf(key+".url", "%q is not an http(s) URL such as http://127.0.0.1:8000", ep.URL)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return e.errorf(key+".url", "%q has an invalid port", ep.URL)
			}
		}
		cfg.Endpoints = append(cfg.Endpoints, replay.Endpoint{Worker: ep.Worker, Model: ep.Model, URL: ep.URL})
	}
	if len(cfg.Endpoints) > 0 {
		// Every worker needs a server for every model a policy may load there.
		for w := 0; w < W; w++ {
			for _, m := range r.Models {
				if r.On(m, w).Cost == nil {
					continue // its GPUs cannot hold the model: no policy loads it there
				}
				if !covered(cfg.Endpoints, w, m.Name) {
					return e.errorf("replay.endpoint", "no endpoint serves model %s on worker %d: list one with worker = %d (and model = %q, or no model for all of the worker's models)", m.Name, w, w, m.Name)
				}
			}
		}
		if rp.HealthTimeout == 0 {
			cfg.HealthTimeout = time.Minute // attached servers are already up
		}
	}
	return nil
}

// replayLimits checks and applies the calls' limits: concurrency, retries, a dead worker, the
// time scale and the timeouts.
func (r *Resolved) replayLimits(cfg *replay.Config) error {
	e := r.Experiment
	rp := e.Replay
	if rp.MaxConcurrency < 0 || (rp.MaxConcurrency == 0 && e.has("replay.max_concurrency")) {
		return e.errorf("replay.max_concurrency", "must be at least 1, got %d (leave it out for the engine's max_num_seqs)", rp.MaxConcurrency)
	}
	if rp.Retries != nil {
		if *rp.Retries < 0 {
			return e.errorf("replay.retries", "must not be negative")
		}
		cfg.Retries = *rp.Retries
	}
	switch rp.OnDeadWorker {
	case "", "stop":
	case "continue":
		cfg.StopOnDeadWorker = false
	default:
		return e.errorf("replay.on_dead_worker", "unknown value %q (known: stop, continue)", rp.OnDeadWorker)
	}
	if rp.TimeScale < 0 {
		return e.errorf("replay.time_scale", "must be positive")
	}
	for name, d := range map[string]time.Duration{"health_timeout": rp.HealthTimeout, "request_timeout": rp.RequestTimeout,
		"connect_timeout": rp.ConnectTimeout, "first_token_timeout": rp.FirstTokenTimeout, "idle_timeout": rp.IdleTimeout} {
		if d < 0 || (d == 0 && e.has("replay."+name)) {
			return e.errorf("replay."+name, "must be positive, got %v", d)
		}
		if d != 0 && d < time.Millisecond {
			return e.errorf("replay."+name, "%v is too short; write a duration with its unit, e.g. \"600s\"", d)
		}
	}
	if rp.RetryBackoff < 0 || (rp.RetryBackoff == 0 && e.has("replay.retry_backoff")) || (rp.RetryBackoff > 0 && rp.RetryBackoff < time.Millisecond) {
		return e.errorf("replay.retry_backoff", "%v is not a duration of at least 1ms; write it with its unit, e.g. \"0.5s\"", rp.RetryBackoff)
	}
	cfg.RetryBackoff = rp.RetryBackoff
	return nil
}

// replayAPI checks and applies the servers' protocol and its settings, and the API key.
func (r *Resolved) replayAPI(cfg *replay.Config) error {
	e := r.Experiment
	rp := e.Replay
	switch replay.API(rp.API) {
	case "", replay.APIOpenAI:
		cfg.API = replay.APIOpenAI
	case replay.APIOllama:
		cfg.API = replay.APIOllama
		if len(rp.Endpoints) == 0 {
			return e.errorf("replay.api", "ollama replays attached servers: list each worker's `ollama serve` in [[replay.endpoint]] tables (worker, url)")
		}
		if e.Engine.SchedulingPolicy == sim.SchedulingPriority {
			return e.errorf("replay.api", "ollama has no request priority, but engine.scheduling_policy is %q", sim.SchedulingPriority)
		}
	default:
		return e.errorf("replay.api", "unknown API %q (known: openai, ollama)", rp.API)
	}
	if rp.PromptWords < 0 || (rp.PromptWords > 0 && rp.PromptWords < 2) || (rp.PromptWords == 0 && e.has("replay.prompt_words")) {
		return e.errorf("replay.prompt_words", "must be at least 2, got %d", rp.PromptWords)
	}
	if rp.PromptWords > 0 && cfg.API != replay.APIOllama {
		return e.errorf("replay.prompt_words", "only text prompts (api = \"ollama\") draw words; the openai API sends token IDs")
	}
	cfg.PromptWords = rp.PromptWords
	cfg.ResetPrefixCache = len(cfg.Endpoints) > 0 && cfg.API == replay.APIOpenAI
	if rp.ResetPrefixCache != nil {
		cfg.ResetPrefixCache = *rp.ResetPrefixCache && len(cfg.Endpoints) > 0
	}
	if rp.APIKeyEnv != "" {
		cfg.APIKey = os.Getenv(rp.APIKeyEnv)
		if cfg.APIKey == "" {
			return e.errorf("replay.api_key_env", "the environment variable %s is empty or unset", rp.APIKeyEnv)
		}
	}
	return nil
}

// replayDevices gives every worker its CUDA devices: its GPUs (Resolved.GPUsOf: as many as
// its group's TP degree, numbered group by group), mapped through [replay] gpus when it is
// given.
func (r *Resolved) replayDevices(cfg *replay.Config) error {
	e := r.Experiment
	gpus := e.Replay.GPUs
	total := r.NumGPUs()
	if len(gpus) > 0 && len(gpus) != total {
		if total == r.NumWorkers() {
			return e.errorf("replay.gpus", "lists %d devices for %d workers", len(gpus), total)
		}
		return e.errorf("replay.gpus", "lists %d devices for %d workers of %d GPUs in all (%s): list one device per GPU, the workers taking them in order",
			len(gpus), r.NumWorkers(), total, strings.Join(r.Hardware(), ", "))
	}
	seen := map[int]bool{}
	for _, d := range gpus {
		if d < 0 {
			return e.errorf("replay.gpus", "device %d is negative", d)
		}
		if seen[d] {
			return e.errorf("replay.gpus", "device %d is listed twice: each GPU belongs to one worker", d)
		}
		seen[d] = true
	}
	if len(gpus) > 0 {
		for _, wk := range cfg.Workers {
			for i, d := range wk.Hardware.Devices {
				wk.Hardware.Devices[i] = gpus[d]
			}
		}
	}
	return nil
}

func covered(eps []replay.Endpoint, w int, model string) bool {
	for _, ep := range eps {
		if ep.Worker == w && (ep.Model == "" || ep.Model == model) {
			return true
		}
	}
	return false
}

// ValidateReplay checks the experiment's [replay] table.
func (r *Resolved) ValidateReplay() error {
	_, err := r.replayConfig()
	return err
}
