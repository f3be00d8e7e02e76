// Package ollamatest runs a real Ollama server (github.com/ollama/ollama, which vendors
// llama.cpp) on this machine's CPU for tests: it finds the binary, starts `ollama serve` on a
// free loopback port with its own scratch folders, registers models written by package gguf
// over HTTP, and stops the server with its runner processes.
//
// The binary is not a Go dependency of this module: `make ollama` builds it into bin/ollama at
// the repository root. Tests call Require (or StartTest), which skip when it is absent.
package ollamatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvBinary names the environment variable that points at the ollama binary.
const EnvBinary = "MOSAIC_OLLAMA"

// TestedVersion is the Ollama release this harness was written and checked against. A binary
// built with `go install` reports version 0.0.0 over HTTP; ModuleVersion reads the release from
// the binary's build information instead.
const TestedVersion = "v0.6.5"

// ErrNotFound is returned (wrapped) by Find when no ollama binary is found.
var ErrNotFound = errors.New("ollama not built: run `make ollama` (it builds github.com/ollama/ollama@" +
	TestedVersion + " into bin/ollama), or set " + EnvBinary + " to an ollama binary")

// Find locates the ollama binary: $MOSAIC_OLLAMA if set, else bin/ollama at the repository
// root (the nearest folder above the working directory with a go.mod), else ollama on PATH.
// The error wraps ErrNotFound and says how to build it.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w (%w)", EnvBinary, p, err, ErrNotFound)
		}
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, "bin", "ollama")
		if executable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p, nil
	}
	return "", ErrNotFound
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// RepoRoot returns the nearest folder at or above the working directory that holds a go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("ollamatest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("ollamatest: no go.mod above the working directory")
		}
		dir = up
	}
}

// ModuleVersion returns the module version the binary was built from, as recorded in its Go
// build information (e.g. "v0.6.5" for `go install github.com/ollama/ollama@v0.6.5`; "(devel)"
// for a build from a checkout).
func ModuleVersion(binary string) (string, error) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return "", fmt.Errorf("ollamatest: build info of %s: %w", binary, err)
	}
	return bi.Main.Version, nil
}

// Require returns the ollama binary, or skips the test with a message that says how to build it.
func Require(t testing.TB) string {
	t.Helper()
	p, err := Find()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return p
}

// Options configures Start. Zero fields leave Ollama's defaults.
type Options struct {
	Binary          string        // the ollama binary; Find() when empty
	Dir             string        // scratch folder for HOME, models and the log; a new temporary folder (removed by Stop) when empty
	NumParallel     int           // OLLAMA_NUM_PARALLEL: requests one loaded model serves at once
	MaxLoadedModels int           // OLLAMA_MAX_LOADED_MODELS
	MaxQueue        int           // OLLAMA_MAX_QUEUE
	KeepAlive       string        // OLLAMA_KEEP_ALIVE, e.g. "-1" (never unload) or "5m"
	Debug           bool          // OLLAMA_DEBUG=1: verbose log
	Env             []string      // further KEY=VALUE variables, applied last
	StartTimeout    time.Duration // how long to wait for the server to answer (default 60 s)
}

// Server is a running `ollama serve`.
type Server struct {
	URL     string // base URL, e.g. http://127.0.0.1:41234
	Dir     string // scratch folder: home/, models/, ollama.log
	LogPath string // the server's stdout and stderr (its runners' output included)
	Binary  string

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error
	rmDir   bool
	stop    sync.Once
	stopErr error
}

// Start starts `ollama serve` on a free 127.0.0.1 port, in its own process group, with HOME,
// OLLAMA_MODELS and the log in a scratch folder, and returns once `GET /` answers 200. Variables
// OLLAMA_* of this process's environment are not passed on. Call Stop when done.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = Find(); err != nil {
			return nil, err
		}
	}
	dir, rm := opts.Dir, false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "ollamatest-"); err != nil {
			return nil, fmt.Errorf("ollamatest: scratch folder: %w", err)
		}
		rm = true
	}
	for _, sub := range []string{"home", "models"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("ollamatest: %w", err)
		}
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	// The free port is found by listening and closing: another process may take it before
	// ollama binds it, in which case ollama exits at once and we try another.
	var lastErr error
	for range 3 {
		s, err := start(ctx, bin, dir, opts, timeout)
		if err == nil {
			s.rmDir = rm
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	if rm {
		os.RemoveAll(dir)
	}
	return nil, lastErr
}

var errExited = errors.New("ollama serve exited")

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("ollamatest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(ctx context.Context, bin, dir string, opts Options, timeout time.Duration) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, "ollama.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ollamatest: log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor

	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"HOME="+filepath.Join(dir, "home"),
		"OLLAMA_HOST="+host,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"),
		"OLLAMA_NOPRUNE=1",
	)
	setInt := func(k string, v int) {
		if v > 0 {
			env = append(env, k+"="+strconv.Itoa(v))
		}
	}
	setInt("OLLAMA_NUM_PARALLEL", opts.NumParallel)
	setInt("OLLAMA_MAX_LOADED_MODELS", opts.MaxLoadedModels)
	setInt("OLLAMA_MAX_QUEUE", opts.MaxQueue)
	if opts.KeepAlive != "" {
		env = append(env, "OLLAMA_KEEP_ALIVE="+opts.KeepAlive)
	}
	if opts.Debug {
		env = append(env, "OLLAMA_DEBUG=1")
	}
	env = append(env, opts.Env...)

	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	fmt.Fprintf(logf, "ollamatest: %s serve on %s (%s)\n", bin, host, time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ollamatest: start %s: %w", bin, err)
	}
	s := &Server{URL: "http://" + host, Dir: dir, LogPath: logPath, Binary: bin, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/", nil)
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("ollamatest: %w (%v) before answering on %s; log:\n%s", errExited, s.waitErr, host, s.LogTail(2000))
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("ollamatest: waiting for ollama serve on %s: %w", host, ctx.Err())
		case <-deadline.C:
			s.Stop()
			return nil, fmt.Errorf("ollamatest: ollama serve on %s did not answer GET / within %v; log:\n%s", host, timeout, s.LogTail(2000))
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM to the server's process group (the server and its runners), waits for the
// server to exit, sends SIGKILL to the group after 5 s, and removes the scratch folder if Start
// made it. It may be called more than once.
func (s *Server) Stop() error {
	s.stop.Do(func() {
		pid := s.cmd.Process.Pid
		signalGroup(pid, false)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			signalGroup(pid, true)
			<-s.done
		}
		// Runners that outlived the server (they share its group) go too.
		signalGroup(pid, true)
		if s.rmDir {
			if err := os.RemoveAll(s.Dir); err != nil {
				s.stopErr = fmt.Errorf("ollamatest: remove %s: %w", s.Dir, err)
			}
		}
	})
	return s.stopErr
}

// PID returns the server's process ID, which is also its process group ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Exited reports whether the server process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", s.LogPath, err)
	}
	return string(b)
}

// LogTail returns at most the last n bytes of the server's log.
func (s *Server) LogTail(n int) string {
	l := s.Log()
	if len(l) > n {
		l = "..." + l[len(l)-n:]
	}
	return l
}

// StartTest starts a server for a test: it skips the test when the binary is absent, fails it
// when the server does not start, and stops the server when the test ends, writing the tail of
// the server's log to the test log if the test failed.
func StartTest(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Require(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ollama log (%s), tail:\n%s", s.LogPath, s.LogTail(6000))
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Create registers a model under name from a GGUF file: it uploads the file as a blob
// (POST /api/blobs/sha256:<digest>), then creates the model (POST /api/create with files and
// parameters, e.g. {"num_thread": 1, "num_ctx": 2048}). Parameters become the model's default
// options: a request through /v1 cannot change them.
func Create(ctx context.Context, url, name string, gguf []byte, params map[string]any) error {
	sum := sha256.Sum256(gguf)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	resp, err := do(ctx, http.MethodPost, url+"/api/blobs/"+digest, "application/octet-stream", bytes.NewReader(gguf))
	if err != nil {
		return fmt.Errorf("ollamatest: upload blob for %s: %w", name, err)
	}
	if resp.status != http.StatusCreated && resp.status != http.StatusOK {
		return fmt.Errorf("ollamatest: upload blob for %s: HTTP %d: %s", name, resp.status, resp.body)
	}
	stream := false
	body, err := json.Marshal(map[string]any{
		"model":      name,
		"files":      map[string]string{name + ".gguf": digest},
		"parameters": params,
		"stream":     &stream,
	})
	if err != nil {
		return fmt.Errorf("ollamatest: create %s: %w", name, err)
	}
	resp, err = do(ctx, http.MethodPost, url+"/api/create", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("ollamatest: create %s: %w", name, err)
	}
	var st struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(resp.body, &st); err != nil || resp.status != http.StatusOK || st.Status != "success" {
		return fmt.Errorf("ollamatest: create %s: HTTP %d: %s", name, resp.status, resp.body)
	}
	return nil
}

// GenerateResult is the final message of a native POST /api/generate (durations in ns).
type GenerateResult struct {
	Model              string `json:"model"`
	Response           string `json:"response"`
	Done               bool   `json:"done"`
	DoneReason         string `json:"done_reason"`
	TotalDuration      int64  `json:"total_duration"`
	LoadDuration       int64  `json:"load_duration"`
	PromptEvalCount    int    `json:"prompt_eval_count"`
	PromptEvalDuration int64  `json:"prompt_eval_duration"`
	EvalCount          int    `json:"eval_count"`
	EvalDuration       int64  `json:"eval_duration"`
}

// Generate sends a non-streaming native POST /api/generate with the given body (model,
// prompt, raw, options, keep_alive, ...) and returns the answer. An answer cut by the repeat
// limit comes back without error but with Done false and no counts: check Done.
func Generate(ctx context.Context, url string, req map[string]any) (GenerateResult, error) {
	req = maps.Clone(req)
	req["stream"] = false
	body, err := json.Marshal(req)
	if err != nil {
		return GenerateResult{}, fmt.Errorf("ollamatest: generate: %w", err)
	}
	resp, err := do(ctx, http.MethodPost, url+"/api/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		return GenerateResult{}, fmt.Errorf("ollamatest: generate %v: %w", req["model"], err)
	}
	var r GenerateResult
	if resp.status != http.StatusOK {
		return r, fmt.Errorf("ollamatest: generate %v: HTTP %d: %s", req["model"], resp.status, resp.body)
	}
	if err := json.Unmarshal(resp.body, &r); err != nil {
		return r, fmt.Errorf("ollamatest: generate %v: %w: %s", req["model"], err, resp.body)
	}
	return r, nil
}

// Load loads a model without generating (an empty-prompt generate) and keeps it loaded for
// keepAlive (-1: until unloaded; a Go duration string such as "5m" also works). It returns
// how long the request took.
func Load(ctx context.Context, url, model string, keepAlive any) (time.Duration, error) {
	t0 := time.Now()
	r, err := Generate(ctx, url, map[string]any{"model": model, "prompt": "", "keep_alive": keepAlive})
	if err != nil {
		return 0, err
	}
	if !r.Done || r.DoneReason != "load" {
		return 0, fmt.Errorf("ollamatest: load %s: done %v, done_reason %q", model, r.Done, r.DoneReason)
	}
	return time.Since(t0), nil
}

// Unload unloads a model (keep_alive 0) and waits until GET /api/ps no longer lists it: the
// server answers "unload" before its scheduler has let the runner go.
func Unload(ctx context.Context, url, model string) error {
	r, err := Generate(ctx, url, map[string]any{"model": model, "prompt": "", "keep_alive": 0})
	if err != nil {
		return err
	}
	if r.DoneReason != "unload" {
		return fmt.Errorf("ollamatest: unload %s: done_reason %q", model, r.DoneReason)
	}
	for {
		ps, err := PS(ctx, url)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ps, func(r Running) bool { return SameModel(r.Name, model) }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ollamatest: unload %s: still loaded: %w", model, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SameModel reports whether two model names are the same model, a missing tag being "latest".
func SameModel(a, b string) bool {
	tag := func(s string) string {
		if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
			return s
		}
		return s + ":latest"
	}
	return tag(a) == tag(b)
}

// Running is one entry of GET /api/ps.
type Running struct {
	Name      string    `json:"name"`
	Model     string    `json:"model"`
	Size      int64     `json:"size"`
	Digest    string    `json:"digest"`
	ExpiresAt time.Time `json:"expires_at"`
	SizeVRAM  int64     `json:"size_vram"`
}

// PS returns the loaded models (GET /api/ps).
func PS(ctx context.Context, url string) ([]Running, error) {
	var out struct {
		Models []Running `json:"models"`
	}
	if err := getJSON(ctx, url+"/api/ps", &out); err != nil {
		return nil, err
	}
	return out.Models, nil
}

// Version returns the version the server reports (GET /api/version); a binary built with
// `go install` reports "0.0.0" (see ModuleVersion).
func Version(ctx context.Context, url string) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	if err := getJSON(ctx, url+"/api/version", &out); err != nil {
		return "", err
	}
	return out.Version, nil
}

// Models returns the IDs of the registered models (GET /v1/models), e.g. "m1:latest".
func Models(ctx context.Context, url string) ([]string, error) {
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := getJSON(ctx, url+"/v1/models", &out); err != nil {
		return nil, err
	}
	ids := make([]string, len(out.Data))
	for i, m := range out.Data {
		ids[i] = m.ID
	}
	return ids, nil
}

func getJSON(ctx context.Context, url string, v any) error {
	resp, err := do(ctx, http.MethodGet, url, "", nil)
	if err != nil {
		return fmt.Errorf("ollamatest: GET %s: %w", url, err)
	}
	if resp.status != http.StatusOK {
		return fmt.Errorf("ollamatest: GET %s: HTTP %d: %s", url, resp.status, resp.body)
	}
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("ollamatest: GET %s: %w", url, err)
	}
	return nil
}

type response struct {
	status int
	body   []byte
}

func do(ctx context.Context, method, url, contentType string, body io.Reader) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return response{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, body: b}, nil
}
