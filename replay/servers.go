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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The servers a Backend uses: attached ones it checks and, through Ollama's API, loads models
// on; launched ones it starts and stops; the health waits, the prefix-cache resets and
// counters, and the checks that a server is there at all.

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

// launchVars are the values of the launch template's placeholders (Placeholders) for model m
// on worker w, served on port.
func (b *Backend) launchVars(w int, m Model, port int) map[string]string {
	hw := b.cfg.Workers[w].Hardware
	tp := ""
	if len(hw.Devices) > 1 {
		tp = "--tensor-parallel-size " + strconv.Itoa(len(hw.Devices))
	}
	self, _ := os.Executable()
	return map[string]string{
		"model": m.Name, "arch": m.Arch, "port": strconv.Itoa(port), "gpu": devices(hw.Devices),
		"gpu_name": hw.GPUName, "tp": strconv.Itoa(len(hw.Devices)), "tensor_parallel": tp,
		"util":         strconv.FormatFloat(m.Utilization, 'g', -1, 64),
		"max_num_seqs": strconv.Itoa(m.MaxNumSeqs), "max_batched_tokens": strconv.Itoa(m.MaxTokens),
		"time_scale": strconv.FormatFloat(b.cfg.TimeScale, 'g', -1, 64), "worker": strconv.Itoa(w), "mosaic": self,
		"prefix_caching":    map[bool]string{true: "--enable-prefix-caching", false: "--no-enable-prefix-caching"}[b.cfg.PrefixCaching],
		"chunked_prefill":   map[bool]string{true: "--enable-chunked-prefill", false: "--no-enable-chunked-prefill"}[m.ChunkedPrefill],
		"scheduling_policy": map[bool]string{true: "--scheduling-policy " + SchedulingPriority, false: ""}[m.priority()],
	}
}

func (b *Backend) launch(ctx context.Context, w int, m Model) (*server, error) {
	began := time.Now()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	vars := b.launchVars(w, m, port)
	gpu := vars["gpu"]
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
