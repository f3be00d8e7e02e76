package emulate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// minSleep is the shortest wait the engine loop sleeps for: iterations whose deadline is closer
// than this are computed back to back and delivered together (timers are not finer on most
// systems).
const minSleep = time.Millisecond

// Errors a request can end with inside the server.
var (
	errShutdown = errors.New("emulate: the server is shutting down")
	errStalled  = errors.New("emulate: the engine stalled with work queued")
)

// Server is one emulated worker. Create it with New; it serves through Handler (for example
// under httptest) or a listener (Start, Serve). Close stops it.
type Server struct {
	cfg      Config
	log      *slog.Logger
	epoch    time.Time // real time of virtual time 0
	loadedAt time.Time
	mux      *http.ServeMux

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the engine loop has returned

	// arrivals queued for the engine loop
	qmu    sync.Mutex
	queue  []*request
	aborts []uint64     // requests whose clients went away
	resets []*resetCall // prefix-cache resets asked for
	closed bool
	wake   chan struct{}

	nextID   atomic.Uint64
	accepted atomic.Int64
	arriving atomic.Int64 // requests handed to the loop and not yet in the engine

	conns, maxConns atomic.Int64 // open client connections, and the most at once

	fmu        sync.Mutex
	faults     *rand.Rand
	disconnect *rand.Rand

	crashOnce sync.Once
	closeOnce sync.Once
	crashed   chan struct{}

	hmu  sync.Mutex
	http *http.Server
	ln   net.Listener

	met metrics
}

// request is one call in flight. The engine loop writes its progress; the handler reads it.
type request struct {
	id        uint64
	prompt    int
	blocks    []uint64 // hashes of the prompt's full blocks, for the prefix cache (nil: not cached)
	maxTokens int      // what the client asked for
	output    int      // what the engine produces
	priority  int      // vLLM's request priority (0 unless the engine schedules by priority)
	arrived   time.Time
	notify    chan struct{} // capacity 1: progress since the handler last looked

	mu       sync.Mutex
	produced int
	done     bool
	err      error
	gone     atomic.Bool // the client went away
}

func (r *request) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *request) state() (produced int, done bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.produced, r.done, r.err
}

func (r *request) fail(err error) {
	r.mu.Lock()
	if !r.done {
		r.done, r.err = true, err
	}
	r.mu.Unlock()
	r.signal()
}

// New validates the configuration and starts the engine; the load delay starts now.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ecfg := cfg.Engine
	ecfg.PrefixCaching = cfg.PrefixCaching
	eng, err := sim.NewEngine(ecfg, cfg.Cost)
	if err != nil {
		return nil, fmt.Errorf("emulate: %w", err)
	}
	now := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		epoch:      now,
		loadedAt:   loadStart(cfg.LoadStart, now).Add(realDuration(cfg.LoadTime, cfg.TimeScale)),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		wake:       make(chan struct{}, 1),
		faults:     rand.New(rand.NewSource(cfg.Faults.Seed)),
		disconnect: rand.New(rand.NewSource(cfg.Faults.Seed ^ 0x646973636f6e6e)),
		crashed:    make(chan struct{}),
	}
	s.met.init(cfg.ServedName, cfg.Engine, cfg.PrefixCaching)
	s.mux = s.routes()
	gpu := ""
	if cfg.GPU != nil {
		gpu = cfg.GPU.Name
	}
	s.log.Info("emulating a vLLM worker", "gpu", gpu, "model", cfg.Model.ID, "served_model_name", cfg.ServedName,
		"time_scale", cfg.TimeScale, "kv_blocks", cfg.Engine.NumBlocks, "max_num_seqs", cfg.Engine.MaxNumSeqs,
		"load_time", cfg.LoadTime, "prefix_caching", cfg.PrefixCaching, "api_key", cfg.APIKey != "")
	if d := time.Until(s.loadedAt); d > 0 {
		t := time.AfterFunc(d, func() { s.log.Info("model loaded", "model", cfg.ServedName) })
		go func() { <-ctx.Done(); t.Stop() }()
	} else {
		s.log.Info("model loaded", "model", cfg.ServedName)
	}
	go s.loop(eng)
	return s, nil
}

// loadStart is when the load began: start, unless it is zero or later than now.
func loadStart(start, now time.Time) time.Time {
	if start.IsZero() || start.After(now) {
		return now
	}
	return start
}

// Config returns the server's configuration, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler of the OpenAI-compatible API, /health and /metrics.
func (s *Server) Handler() http.Handler { return s.mux }

// Loaded reports whether the load delay has passed.
func (s *Server) Loaded() bool { return !time.Now().Before(s.loadedAt) }

// Start listens on addr (host:port; port 0 picks a free one) and serves in the background
// until Close. It does not check that addr is a loopback address (see CheckListen).
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("emulate: %w", err)
	}
	srv, err := s.attach(ln)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serving", "err", err)
		}
	}()
	return nil
}

// Serve serves on ln until ctx is cancelled or the server is closed, then closes the server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv, err := s.attach(ln)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		s.Close()
		<-errc
		return nil
	case err := <-errc:
		s.Close()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("emulate: %w", err)
	}
}

func (s *Server) attach(ln net.Listener) (*http.Server, error) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.http != nil {
		ln.Close()
		return nil, errors.New("emulate: the server is already listening")
	}
	s.http = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second, ConnState: s.connState}
	s.ln = ln
	s.log.Info("listening", "addr", ln.Addr().String())
	return s.http, nil
}

// connState counts the open client connections.
func (s *Server) connState(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		n := s.conns.Add(1)
		for {
			m := s.maxConns.Load()
			if n <= m || s.maxConns.CompareAndSwap(m, n) {
				break
			}
		}
	case http.StateClosed, http.StateHijacked:
		s.conns.Add(-1)
	}
}

// MaxConnections returns the most client connections that were open at once on the listener
// of Start or Serve.
func (s *Server) MaxConnections() int { return int(s.maxConns.Load()) }

// Addr returns the address Start or Serve listens on, or "" before.
func (s *Server) Addr() string {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL returns the base URL of the listener ("http://127.0.0.1:8000"), or "" before Start.
func (s *Server) URL() string {
	if a := s.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Close stops the engine and the listener; requests in flight end with an error. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.cancel()
	s.hmu.Lock()
	srv := s.http
	s.hmu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close()
	}
	<-s.done
	s.closeOnce.Do(func() {
		if srv != nil {
			mean, worst := s.met.lags()
			s.log.Info("stopped", "max_open_connections", s.MaxConnections(), "requests", s.nextID.Load(),
				"mean_lag_ms", mean*1000, "max_lag_ms", worst*1000)
		}
	})
	return err
}

// crash makes the server behave as a dead process.
func (s *Server) crash() {
	s.crashOnce.Do(func() {
		s.log.Error("injected fault: crashing", "accepted_requests", s.accepted.Load())
		close(s.crashed)
		if s.cfg.Faults.OnCrash != nil {
			s.cfg.Faults.OnCrash()
		}
		s.hmu.Lock()
		srv := s.http
		s.hmu.Unlock()
		if srv != nil {
			go srv.Close()
		}
		s.cancel()
	})
}

// abort asks the engine loop to drop a request whose client went away.
func (s *Server) abort(id uint64) {
	s.qmu.Lock()
	s.aborts = append(s.aborts, id)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue hands a request to the engine loop.
func (s *Server) enqueue(r *request) error {
	s.qmu.Lock()
	if s.closed {
		s.qmu.Unlock()
		return errShutdown
	}
	s.queue = append(s.queue, r)
	s.arriving.Add(1)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// resetCall is one prefix-cache reset for the engine loop to make.
type resetCall struct {
	running bool          // preempt the running requests first (reset_running_requests)
	done    chan struct{} // closed when ok and err are set
	ok      bool
	err     error
}

// ResetPrefixCache resets the engine's prefix cache at its next iteration boundary and waits
// for it, as vLLM's POST /reset_prefix_cache does (see handleResetPrefixCache): every cached
// KV block is forgotten, so that no later prompt is served from blocks computed before. Like
// vLLM it refuses, dropping nothing, while a running request holds KV blocks, and reports
// whether it reset; with running it first preempts the running requests (they are recomputed
// later, as vLLM's reset_running_requests does), and so always resets. Requests still
// waiting are not running: they keep their place and find the cache empty. The prefix-cache
// counters of /metrics keep counting. It returns an error when the server stops first or ctx
// ends (the reset may still happen then).
func (s *Server) ResetPrefixCache(ctx context.Context, running bool) (bool, error) {
	c := &resetCall{running: running, done: make(chan struct{})}
	s.qmu.Lock()
	if s.closed {
		s.qmu.Unlock()
		return false, errShutdown
	}
	s.resets = append(s.resets, c)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-c.done:
		return c.ok, c.err
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.crashed:
		return false, errShutdown
	}
}

// resetPrefix makes reset c on the engine (the loop's).
func (s *Server) resetPrefix(eng *sim.Engine, c *resetCall) {
	preempted := 0
	if c.running {
		preempted = len(eng.PreemptAll())
	}
	ok, used := eng.ResetPrefixCache()
	if ok {
		s.log.Info("Successfully reset prefix cache", "preempted_requests", preempted)
	} else {
		s.log.Warn("Failed to reset prefix cache because some blocks are not freed yet", "blocks", used)
	}
	s.met.count(func(v *metricValues) {
		v.preemptions += int64(preempted)
		if ok {
			v.prefixResets++
		} else {
			v.prefixResetRefusals++
		}
	})
	s.met.setQueue(eng)
	c.ok = ok
	close(c.done)
}

// realDuration is the real time that virtual duration v takes at scale.
func realDuration(v time.Duration, scale float64) time.Duration {
	return time.Duration(float64(v) / scale)
}

// loop owns the engine: it admits queued requests between iterations, steps the engine, and
// delivers each iteration's tokens at its real deadline.
func (s *Server) loop(eng *sim.Engine) {
	defer close(s.done)
	var (
		virtual  time.Duration // the engine's clock, since epoch
		live     = map[uint64]*request{}
		pending  pendingWork
		stuck    int
		timer    = time.NewTimer(time.Hour)
		deadline = func() time.Time { return s.epoch.Add(realDuration(virtual, s.cfg.TimeScale)) }
	)
	timer.Stop()
	// sleepUntil waits for t; it reports false when the server stops first.
	sleepUntil := func(t time.Time) bool {
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-s.ctx.Done():
			timer.Stop()
			return false
		}
	}
	defer func() {
		s.qmu.Lock()
		s.closed = true
		queued := s.queue
		s.queue = nil
		resets := s.resets
		s.resets = nil
		s.qmu.Unlock()
		for _, r := range queued {
			r.fail(errShutdown)
		}
		for _, c := range resets {
			c.err = errShutdown
			close(c.done)
		}
		for _, r := range live {
			r.fail(errShutdown)
		}
	}()
	for {
		if s.ctx.Err() != nil {
			return
		}
		// Admit what arrived, as vLLM does at an iteration boundary.
		s.qmu.Lock()
		arrivals := s.queue
		s.queue = nil
		aborts := s.aborts
		s.aborts = nil
		resets := s.resets
		s.resets = nil
		s.qmu.Unlock()
		for _, id := range aborts {
			if _, ok := eng.Abort(id); ok {
				delete(live, id)
				s.log.Debug("request aborted: its client went away", "id", id)
			}
		}
		if len(aborts) > 0 {
			s.met.setQueue(eng)
		}
		for _, r := range arrivals {
			if eng.Idle() {
				// An idle engine starts the request when it arrives.
				virtual = max(virtual, time.Duration(float64(r.arrived.Sub(s.epoch))*s.cfg.TimeScale))
			}
			if err := eng.Add(sim.Request{ID: r.id, PromptTokens: r.prompt, OutputTokens: r.output, Blocks: r.blocks, Priority: r.priority}); err != nil {
				r.fail(err) // the handler checked already; cannot happen
				continue
			}
			live[r.id] = r
		}
		if len(arrivals) > 0 {
			s.met.setQueue(eng)
			s.arriving.Add(-int64(len(arrivals)))
		}
		// After the arrivals, as vLLM's engine core takes its inputs in order: a request
		// sent before the reset waits, holding no blocks, and finds the cache empty.
		for _, c := range resets {
			s.resetPrefix(eng, c)
		}
		if eng.Idle() {
			if !pending.empty() {
				if !sleepUntil(deadline()) {
					return
				}
				s.deliver(&pending, live, eng, deadline())
			}
			select {
			case <-s.wake:
			case <-s.ctx.Done():
				return
			}
			continue
		}
		it := eng.Step()
		if it.Steps == 0 && len(it.Preempted) == 0 {
			if stuck++; stuck > 2 {
				for id, r := range live {
					r.fail(errStalled)
					delete(live, id)
				}
				s.log.Error("engine stalled with work queued; failing its requests")
				return
			}
			continue
		}
		stuck = 0
		virtual += it.Duration
		pending.add(it)
		switch d := time.Until(deadline()); {
		case d <= 0:
			s.deliver(&pending, live, eng, deadline())
		case d >= minSleep:
			if !sleepUntil(deadline()) {
				return
			}
			s.deliver(&pending, live, eng, deadline())
		default:
			// Less than a timer tick ahead: compute the next iteration first and deliver
			// both at its deadline.
		}
	}
}

// pendingWork accumulates the outcome of iterations whose tokens are not delivered yet.
type pendingWork struct {
	produced  []sim.Produced
	finished  []uint64
	preempted int
	steps     int
	touched   []*request // scratch: the requests a delivery signals
}

func (p *pendingWork) empty() bool { return p.steps == 0 && p.preempted == 0 }

func (p *pendingWork) add(it *sim.Iteration) {
	p.produced = append(p.produced, it.Produced...)
	p.finished = append(p.finished, it.Finished...)
	p.preempted += len(it.Preempted)
	p.steps += it.Steps
}

// deliver publishes pending tokens to their requests and the engine's state to the metrics.
func (s *Server) deliver(p *pendingWork, live map[uint64]*request, eng *sim.Engine, deadline time.Time) {
	lag := max(0, time.Since(deadline).Seconds())
	var promptTokens, generated int64
	touched := p.touched[:0]
	for _, pr := range p.produced {
		r := live[pr.ID]
		if r == nil {
			continue
		}
		r.mu.Lock()
		if r.produced == 0 {
			promptTokens += int64(r.prompt)
		}
		r.produced += pr.Tokens
		r.mu.Unlock()
		generated += int64(pr.Tokens)
		touched = append(touched, r)
	}
	var finishedLength, finishedStop int
	for _, id := range p.finished {
		r := live[id]
		if r == nil {
			continue
		}
		delete(live, id)
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		touched = append(touched, r)
		if r.output < r.maxTokens {
			finishedStop++
		} else {
			finishedLength++
		}
		if r.gone.Load() {
			s.log.Debug("request finished in the engine after its client left", "id", r.id)
		}
	}
	// The metrics first: a client that has seen its last token finds them up to date.
	s.met.update(eng, promptTokens, generated, finishedLength, finishedStop, p.preempted, lag)
	for _, r := range touched {
		r.signal()
	}
	clear(touched)
	p.touched = touched[:0]
	p.produced, p.finished, p.preempted, p.steps = p.produced[:0], p.finished[:0], 0, 0
}
