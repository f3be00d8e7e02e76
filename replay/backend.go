// Package replay runs experiments on real inference servers (vLLM's OpenAI-compatible server,
// one per GPU worker, `mosaic emulate`, or Ollama) through the same backend.Backend contract
// the simulated Backend implements, so the same Driver, policies and rules drive real GPUs
// unchanged.
//
// Each call becomes a streaming /v1/completions request to its worker's server with
// max_tokens = the call's output tokens and ignore_eos, a prompt of exactly the call's input
// length given as token IDs (PromptIDs: calls share leading tokens only where the workload
// says so; Ollama takes text, PromptText), the policy's cache_salt, and
// stream_options.include_usage; a stream that ends without its finish reason, usage or
// [DONE], or with other token counts than asked, is a failed attempt. Completions reach the
// single-threaded Driver through one channel.
//
// Reading guide: backend.go (the Backend: its clock, events, loads and unloads), config.go
// (Config and its defaults), dispatch.go (each worker's ordered sends, retries, failures),
// client.go (one streamed request), servers.go (attached and launched servers, health waits,
// prefix-cache resets), api.go (the servers' protocols: openai, ollama), stats.go (the host's
// lag), admission.go, overlap.go, prompt.go and profile.go.
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
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/traces"
)

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
	vocab       map[string]int         // each model's vocabulary, for synthetic prompts
	// handling is when the last finished call handed to the Driver ended (real time; zero
	// when none is being handled). Only the Driver's goroutine touches it.
	handling time.Time
	// cache sums what the servers' prefix caches served this backend's calls.
	cache PrefixCache
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend; launched servers are stopped by Close. It fails when the process may
// not open enough files for the connections it will hold (after raising the soft limit to
// the hard one if that suffices).
func New(cfg Config) (*Backend, error) {
	if len(cfg.Workers) == 0 {
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
	vocab := map[string]int{}
	for w, wk := range cfg.Workers {
		if len(wk.Hardware.Devices) == 0 {
			return nil, fmt.Errorf("replay: worker %d has no GPU devices", w)
		}
		for name, m := range wk.Models {
			if cfg.API.orDefault() == APIOpenAI && m.Vocab > 0 && m.Vocab < MinVocab {
				return nil, fmt.Errorf("replay: model %s has a vocabulary of %d tokens; synthetic prompts need at least %d", name, m.Vocab, MinVocab)
			}
			switch m.SchedulingPolicy {
			case "", "fcfs":
			case SchedulingPriority:
				if cfg.API != APIOpenAI {
					return nil, fmt.Errorf("replay: model %s schedules by priority, which the %s API does not offer", name, cfg.API)
				}
				if len(cfg.Endpoints) == 0 && !strings.Contains(cfg.Command, "{scheduling_policy}") && !strings.Contains(cfg.Command, "--scheduling-policy") {
					return nil, fmt.Errorf("replay: model %s schedules by priority, but the launch command passes its servers neither {scheduling_policy} nor --scheduling-policy: %s", name, cfg.Command)
				}
			default:
				return nil, fmt.Errorf("replay: model %s: unknown scheduling policy %q (known: fcfs, %s)", name, m.SchedulingPolicy, SchedulingPriority)
			}
			vocab[name] = m.Vocab
		}
	}
	if err := ensureFileLimit(cfg.fileNeed()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{cfg: cfg, start: time.Now(), events: make(chan backend.Event, 1024), ctx: ctx, cancel: cancel,
		control: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, MaxConnsPerHost: 4,
			DialContext: (&net.Dialer{Timeout: cfg.Timeouts.Connect}).DialContext, ResponseHeaderTimeout: cfg.Timeouts.Connect}},
		servers: map[serverKey]*server{}, prefixOf: sharedPrefix, vocab: vocab}
	for w := range cfg.Workers {
		d := newDispatcher(b, w)
		b.dispatchers = append(b.dispatchers, d)
		go d.run()
	}
	return b, nil
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
