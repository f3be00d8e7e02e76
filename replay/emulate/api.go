package emulate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mosaic-sched/mosaic/sim"
)

// maxBody caps the size of a request body.
const maxBody = 32 << 20

// tokenText is the text of every produced token.
const tokenText = " tok"

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("GET /version", s.handleVersion)
	mux.HandleFunc("GET /v1/models", s.v1(s.handleModels))
	mux.HandleFunc("POST /v1/completions", s.v1(func(w http.ResponseWriter, r *http.Request) { s.handleGenerate(w, r, false) }))
	mux.HandleFunc("POST /v1/chat/completions", s.v1(func(w http.ResponseWriter, r *http.Request) { s.handleGenerate(w, r, true) }))
	mux.HandleFunc("POST /reset_prefix_cache", s.handleResetPrefixCache)
	return mux
}

// apiError is the body of an OpenAI error response.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: apiErrorBody{Message: fmt.Sprintf(format, args...), Type: typ, Code: code}})
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", format, args...)
}

// badParam is badRequest naming the parameter at fault, as vLLM's validation errors do.
func badParam(w http.ResponseWriter, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(apiError{Error: apiErrorBody{Message: msg, Type: "invalid_request_error", Param: &param, Code: "invalid_value"}})
}

// abortIfCrashed drops the connection of a crashed server without an answer.
func (s *Server) abortIfCrashed() {
	select {
	case <-s.crashed:
		panic(http.ErrAbortHandler)
	default:
	}
}

// v1 wraps the /v1/ routes: a dead server drops the connection, the API key is checked (as
// vLLM's --api-key does, only on /v1/), and nothing is served before the model is loaded.
func (s *Server) v1(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.abortIfCrashed()
		if s.cfg.APIKey != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.APIKey)) != 1 {
				writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "missing or incorrect API key")
				return
			}
		}
		if !s.Loaded() {
			writeError(w, http.StatusServiceUnavailable, "server_error", "model_loading", "the model %s is still loading", s.cfg.ServedName)
			return
		}
		h(w, r)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	s.abortIfCrashed()
	if !s.Loaded() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	s.abortIfCrashed()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = s.met.write(w, extra{arriving: s.arriving.Load(), connections: s.conns.Load(), maxConnected: s.maxConns.Load()})
}

// handleVersion answers as vLLM does: {"version": "..."}.
func (s *Server) handleVersion(w http.ResponseWriter, _ *http.Request) {
	s.abortIfCrashed()
	writeJSON(w, map[string]string{"version": s.cfg.Version})
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	body := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: s.cfg.ServedName, Object: "model", Created: s.epoch.Unix(), OwnedBy: "mosaic-emulate",
		Root: s.cfg.Model.ID, MaxModelLen: s.cfg.Model.MaxModelLen}}}
	writeJSON(w, body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// generateRequest holds the fields of a completion or chat completion request that the
// emulator reads; others are accepted and ignored.
type generateRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           *int            `json:"min_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
		// ContinuousUsage adds the usage so far to every chunk (vLLM's
		// stream_options.continuous_usage_stats).
		ContinuousUsage bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	// CacheSalt isolates the request's prefix-cache blocks (vLLM V1's cache_salt; see
	// cacheSalt).
	CacheSalt json.RawMessage `json:"cache_salt"`
	// Priority is vLLM's request priority (an integer, default 0; lower is served first by
	// an engine started with --scheduling-policy priority; see errPriority).
	Priority int `json:"priority"`
}

// errPriority is the message of a request with a priority other than 0 to an engine that
// schedules first come first served. The completion and chat completion requests of vLLM's
// OpenAI-compatible server document their priority field so ("Any priority other than 0 will
// raise an error if the served model does not use priority scheduling.",
// vllm/entrypoints/openai/protocol.py), and the message is the one vLLM's engine raised
// (LLMEngine.add_request in vllm/engine/llm_engine.py, v0.10.x), which the server answers
// with HTTP 400. vLLM V1's own input processing (v0.11.x) no longer checks, and its FCFS queue
// then ignores the priority; the emulator keeps the documented refusal, so that a client that
// relies on priorities on an FCFS server learns of it.
const errPriority = "Got priority %d but Priority scheduling is not enabled."

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptTokens counts the prompt of a completion request: whitespace-separated words of a
// string (or of the only string of a list), or the length of a list of token IDs (or of the
// only such list), which it also returns. Token IDs must not be negative.
func promptTokens(raw json.RawMessage) (int, []int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil, errors.New("prompt is required")
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return len(strings.Fields(str)), nil, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) == 0 {
			return 0, nil, errors.New("prompt is an empty list")
		}
		if len(strs) > 1 {
			return 0, nil, errors.New("the emulator serves one prompt per request; got a list of several")
		}
		return len(strings.Fields(strs[0])), nil, nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) != nil {
		var idLists [][]int
		if json.Unmarshal(raw, &idLists) != nil || len(idLists) == 0 {
			return 0, nil, errors.New("prompt must be a string, a list of strings or a list of token ids")
		}
		if len(idLists) > 1 {
			return 0, nil, errors.New("the emulator serves one prompt per request; got a list of several")
		}
		ids = idLists[0]
	}
	for i, id := range ids {
		if id < 0 {
			return 0, nil, fmt.Errorf("prompt[%d] is %d: token ids must not be negative", i, id)
		}
	}
	return len(ids), ids, nil
}

// maxCacheSalt is the longest cache_salt accepted, in characters.
const maxCacheSalt = 128

// Messages of vLLM's cache_salt validation.
const (
	errSaltEmpty = "Parameter 'cache_salt' must be a non-empty string if provided."
	errSaltForm  = "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL."
)

// cacheSalt reads a request's cache_salt as vLLM V1 validates it: absent or null is no salt;
// anything but a non-empty string is refused with vLLM's message. vLLM's completion and chat
// completion requests check it in a model validator, check_cache_salt_support (in
// vllm/entrypoints/openai/protocol.py, read at vllm-project/vllm commit 0052bed36509, which also
// refuses any salt on the V0 engine; in vllm/entrypoints/openai/completion/protocol.py on
// later commits). Its validate_cache_salt (vllm/entrypoints/generate/base/protocol.py, commit
// 022e555dbb75) adds a second rule, which the emulator applies too so that a salt valid here is
// valid on every vLLM: at most 128 characters, none of '@', '/', '\' or NUL. vLLM answers a
// refused salt with HTTP 400.
func cacheSalt(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var salt string
	if json.Unmarshal(raw, &salt) != nil || salt == "" {
		return "", errors.New(errSaltEmpty)
	}
	if utf8.RuneCountInString(salt) > maxCacheSalt || strings.ContainsAny(salt, "@/\\\x00") {
		return "", errors.New(errSaltForm)
	}
	return salt, nil
}

// chatTokens counts the words of all message contents (strings, or lists of text parts).
func chatTokens(msgs []chatMessage) (int, error) {
	if len(msgs) == 0 {
		return 0, errors.New("messages is required")
	}
	n := 0
	for i, m := range msgs {
		if len(m.Content) == 0 || string(m.Content) == "null" {
			continue
		}
		var str string
		if json.Unmarshal(m.Content, &str) == nil {
			n += len(strings.Fields(str))
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return 0, fmt.Errorf("messages[%d].content must be a string or a list of content parts", i)
		}
		for _, p := range parts {
			n += len(strings.Fields(p.Text))
		}
	}
	return n, nil
}

// drawn are the faults one request suffers.
type drawn struct{ fail, stall, wrong, disconnect bool }

func (s *Server) drawFaults() drawn {
	f := s.cfg.Faults
	s.fmu.Lock()
	defer s.fmu.Unlock()
	// Draw all three every time so that each request's faults depend only on its order.
	a, b, c := s.faults.Float64(), s.faults.Float64(), s.faults.Float64()
	d := s.disconnect.Float64()
	return drawn{fail: a < f.ErrorRate, stall: b < f.StallRate, wrong: c < f.WrongTokensRate, disconnect: d < f.DisconnectRate}
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) handleGenerate(w http.ResponseWriter, hr *http.Request, chat bool) {
	arrived := time.Now()
	var req generateRequest
	body, err := readBody(w, hr)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, "invalid JSON body: %v", err)
		return
	}
	salt, err := cacheSalt(req.CacheSalt)
	if err != nil {
		badParam(w, "cache_salt", err.Error())
		return
	}
	if req.Model != "" && req.Model != s.cfg.ServedName {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "The model `%s` does not exist.", req.Model)
		return
	}
	var (
		prompt int
		ids    []int
	)
	if chat {
		prompt, err = chatTokens(req.Messages)
	} else {
		prompt, ids, err = promptTokens(req.Prompt)
	}
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	maxTokens := req.MaxTokens
	if maxTokens == nil {
		maxTokens = req.MaxCompletionTokens
	}
	switch {
	case maxTokens == nil:
		badRequest(w, "max_tokens is required: the emulator produces exactly max_tokens tokens")
		return
	case *maxTokens <= 0:
		badRequest(w, "max_tokens must be at least 1, got %d", *maxTokens)
		return
	case prompt <= 0:
		badRequest(w, "the prompt is empty")
		return
	case req.MinTokens != nil && (*req.MinTokens < 0 || *req.MinTokens > *maxTokens):
		badRequest(w, "min_tokens must be in [0, max_tokens], got %d", *req.MinTokens)
		return
	case req.N != nil && *req.N != 1:
		badRequest(w, "the emulator supports n = 1 only, got %d", *req.N)
		return
	}
	if req.Priority != 0 && !s.cfg.Engine.Priority() {
		badRequest(w, errPriority, req.Priority)
		return
	}
	// The engine's own admission checks (max_model_len, KV capacity), on a throwaway engine.
	probe, err := sim.NewEngine(s.cfg.Engine, s.cfg.Cost)
	if err == nil {
		err = probe.Add(sim.Request{PromptTokens: prompt, OutputTokens: *maxTokens})
	}
	if err != nil {
		badRequest(w, "%s", strings.TrimPrefix(err.Error(), "request 0: "))
		return
	}
	f := s.drawFaults()
	if f.fail {
		s.met.count(func(v *metricValues) { v.injectedErrors++ })
		s.log.Debug("injected fault: HTTP 500", "prompt_tokens", prompt, "max_tokens", *maxTokens)
		writeError(w, http.StatusInternalServerError, "server_error", "injected_fault", "injected fault: internal server error")
		return
	}
	r := &request{
		id:        s.nextID.Add(1),
		prompt:    prompt,
		maxTokens: *maxTokens,
		output:    *maxTokens,
		priority:  req.Priority,
		arrived:   arrived,
		notify:    make(chan struct{}, 1),
	}
	if f.wrong && r.output > 1 {
		r.output--
	}
	if s.cfg.PrefixCaching && ids != nil {
		r.blocks = sim.BlockHashesSalted(ids, s.cfg.Engine.BlockSize, salt)
	}
	if err := s.enqueue(r); err != nil {
		writeError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "%v", err)
		return
	}
	s.met.count(func(v *metricValues) { v.received++ })
	s.log.Debug("request", "id", r.id, "chat", chat, "stream", req.Stream, "prompt_tokens", prompt,
		"max_tokens", r.maxTokens, "output_tokens", r.output, "stall", f.stall)
	if n := s.cfg.Faults.CrashAfter; n > 0 && s.accepted.Add(1) == int64(n) {
		s.crash()
	}
	s.abortIfCrashed()
	rs := &response{s: s, w: w, req: r, chat: chat, model: s.cfg.ServedName, created: arrived.Unix(), stall: f.stall, disconnect: f.disconnect}
	if chat {
		rs.id = newID("chatcmpl-")
	} else {
		rs.id = newID("cmpl-")
	}
	var ok bool
	if req.Stream {
		so := req.StreamOptions
		ok = rs.stream(hr.Context(), so != nil && so.IncludeUsage, so != nil && so.ContinuousUsage)
	} else {
		ok = rs.whole(hr.Context())
	}
	if !ok {
		r.gone.Store(true)
		s.abort(r.id) // as vLLM does: the engine drops it at the next iteration boundary
		return
	}
	s.log.Debug("request done", "id", r.id, "duration", time.Since(arrived))
}

// handleResetPrefixCache is vLLM's POST /reset_prefix_cache (a development endpoint, served
// by vLLM only with VLLM_SERVER_DEV_MODE=1; the emulator always serves it, as vLLM in that
// mode does, without the API key, which vLLM checks on /v1/ only). Followed: vLLM 0.14.0's
// vllm/entrypoints/serve/cache/api_router.py (reset_prefix_cache; the same at main commit
// 09cb327f1183), Scheduler.reset_prefix_cache in vllm/v1/core/sched/scheduler.py (commit
// 00024d314514) and BlockPool.reset_prefix_cache in vllm/v1/core/block_pool.py. The engine
// resets at its next step boundary and the answer waits for it: HTTP 200 with an empty body,
// whether or not the cache was reset, since vLLM's API server does not check ("Note that we
// currently do not check if the prefix cache is successfully reset in the API server"). The
// reset is refused, dropping nothing, while running requests hold KV blocks (vLLM's
// BlockPool logs "Failed to reset prefix cache because some blocks (N) are not freed yet"),
// unless the query parameter reset_running_requests=true, which preempts them first (they are
// recomputed). reset_external=true also resets a KV connector's cache in vLLM; the emulator has
// none, so it logs vLLM's warning and resets its own cache only. A query value that is not a
// boolean is refused with 400, as vLLM refuses a request that fails validation. The
// emulator's counters mosaic:emulate_prefix_cache_resets_total and
// mosaic:emulate_prefix_cache_reset_refusals_total tell a reset from a refusal.
func (s *Server) handleResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	s.abortIfCrashed()
	q := r.URL.Query()
	var flags [2]bool
	for i, name := range []string{"reset_running_requests", "reset_external"} {
		v, err := queryBool(q[name])
		if err != nil {
			badParam(w, name, name+": "+err.Error())
			return
		}
		flags[i] = v
	}
	running, external := flags[0], flags[1]
	s.log.Info("Resetting prefix cache...", "reset_running_requests", running, "reset_external", external)
	if _, err := s.ResetPrefixCache(r.Context(), running); err != nil {
		s.abortIfCrashed()
		if r.Context().Err() != nil {
			return
		}
		writeError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "%v", err)
		return
	}
	if external {
		s.log.Warn("reset_connector called but no KV connector is configured.")
	}
	w.WriteHeader(http.StatusOK)
}

// queryBool parses a boolean query parameter as vLLM's FastAPI (pydantic) does: absent is
// false; the last value counts; 1, on, t, true, y, yes and 0, off, f, false, n, no in any case.
func queryBool(values []string) (bool, error) {
	if len(values) == 0 {
		return false, nil
	}
	switch strings.ToLower(values[len(values)-1]) {
	case "1", "on", "t", "true", "y", "yes":
		return true, nil
	case "0", "off", "f", "false", "n", "no":
		return false, nil
	}
	return false, errors.New("Input should be a valid boolean, unable to interpret input")
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return nil, fmt.Errorf("reading the request body: %v", err)
	}
	return buf.Bytes(), nil
}

// response writes one request's answer as its tokens arrive.
type response struct {
	s       *Server
	w       http.ResponseWriter
	req     *request
	chat    bool
	id      string
	model   string
	created int64
	stall   bool
	// disconnect drops the connection half-way (an injected fault).
	disconnect bool
}

// drop ends the response without finishing it: the connection is closed under the client
// and the request aborted in the engine, as when a server process dies mid-stream.
func (rs *response) drop() {
	rs.s.log.Debug("injected fault: dropping the connection mid-stream", "id", rs.req.id)
	rs.s.met.count(func(v *metricValues) { v.injectedDisconnects++ })
	rs.req.gone.Store(true)
	rs.s.abort(rs.req.id)
	panic(http.ErrAbortHandler)
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (rs *response) usage(produced int) usage {
	return usage{PromptTokens: rs.req.prompt, CompletionTokens: produced, TotalTokens: rs.req.prompt + produced}
}

func (rs *response) finishReason() string {
	if rs.req.output < rs.req.maxTokens {
		return "stop"
	}
	return "length"
}

// wait blocks until the request progresses; it reports false when the client left.
func (rs *response) wait(ctx context.Context) bool {
	select {
	case <-rs.req.notify:
		return true
	case <-ctx.Done():
		return false
	case <-rs.s.crashed:
		panic(http.ErrAbortHandler)
	}
}

// pause waits d of real time; it reports false when the client left.
func (rs *response) pause(ctx context.Context, d time.Duration) bool {
	rs.s.log.Debug("injected fault: stalling", "id", rs.req.id, "for", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-rs.s.crashed:
		panic(http.ErrAbortHandler)
	}
}

// whole writes a non-streaming response once the request has finished.
func (rs *response) whole(ctx context.Context) bool {
	for {
		produced, done, err := rs.req.state()
		if err != nil {
			writeError(rs.w, http.StatusInternalServerError, "server_error", "engine_error", "%v", err)
			return true
		}
		if done {
			if rs.stall && !rs.pause(ctx, rs.s.cfg.Faults.Stall) {
				return false
			}
			if rs.disconnect {
				rs.drop()
			}
			text := strings.Repeat(tokenText, produced)
			choice := map[string]any{"index": 0, "finish_reason": rs.finishReason(), "logprobs": nil}
			object := "text_completion"
			if rs.chat {
				object = "chat.completion"
				choice["message"] = map[string]any{"role": "assistant", "content": text}
			} else {
				choice["text"] = text
			}
			writeJSON(rs.w, map[string]any{"id": rs.id, "object": object, "created": rs.created, "model": rs.model,
				"choices": []any{choice}, "usage": rs.usage(produced)})
			return true
		}
		if !rs.wait(ctx) {
			return false
		}
	}
}

// stream writes Server-Sent Events: one chunk per delivery of tokens, the last with its
// finish_reason, then the usage chunk if asked for, then [DONE].
func (rs *response) stream(ctx context.Context, includeUsage, continuous bool) bool {
	h := rs.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rs.w.WriteHeader(http.StatusOK)
	flusher, _ := rs.w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	enc := newChunkEncoder(rs)
	write := func(b []byte) bool {
		_, err := rs.w.Write(b)
		return err == nil
	}
	sent := 0
	stallAt := rs.req.output / 2 // the stall fault holds back the tokens after this many
	stalled := false
	for {
		produced, done, err := rs.req.state()
		if err != nil {
			data, _ := json.Marshal(apiError{Error: apiErrorBody{Message: err.Error(), Type: "server_error", Code: "engine_error"}})
			fmt.Fprintf(rs.w, "data: %s\n\ndata: [DONE]\n\n", data)
			flush()
			return true
		}
		limit, finished := produced, done
		stallNow := rs.stall && !stalled && produced > stallAt
		dropNow := rs.disconnect && produced > stallAt
		if stallNow || dropNow {
			limit, finished = stallAt, false
		}
		if limit > sent || finished {
			if rs.chat && sent == 0 && !write(enc.role()) {
				// vLLM opens a chat stream with the assistant's role, sent with the first token.
				return false
			}
			finish := ""
			if finished {
				finish = rs.finishReason()
			}
			chunk := enc.tokens(limit-sent, finish)
			if continuous {
				chunk = enc.withUsage(chunk, rs.usage(limit))
			}
			if !write(chunk) {
				return false
			}
			sent = limit
			if finished {
				if includeUsage && !write(enc.usage(rs.usage(produced))) {
					return false
				}
				ok := write([]byte("data: [DONE]\n\n"))
				flush()
				return ok
			}
			flush()
		}
		if dropNow {
			flush()
			rs.drop()
		}
		if stallNow {
			stalled = true
			if !rs.pause(ctx, rs.s.cfg.Faults.Stall) {
				return false
			}
			continue
		}
		if !rs.wait(ctx) {
			return false
		}
	}
}

// chunkEncoder writes the stream's chunks by hand: a stream sends one per token, so
// reflection-based encoding would cost more than the rest of the emulator.
type chunkEncoder struct {
	head []byte // `data: {"id":...,"choices":`
	chat bool
	buf  []byte
}

func newChunkEncoder(rs *response) *chunkEncoder {
	object := "text_completion"
	if rs.chat {
		object = "chat.completion.chunk"
	}
	str := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	head := fmt.Sprintf(`data: {"id":%s,"object":%s,"created":%d,"model":%s,"choices":`, str(rs.id), str(object), rs.created, str(rs.model))
	return &chunkEncoder{head: []byte(head), chat: rs.chat}
}

func (e *chunkEncoder) role() []byte {
	e.buf = append(append(e.buf[:0], e.head...), `[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	return e.buf
}

// tokens encodes a chunk of n tokens; finish is the finish_reason, empty for null.
func (e *chunkEncoder) tokens(n int, finish string) []byte {
	b := append(e.buf[:0], e.head...)
	if e.chat {
		b = append(b, `[{"index":0,"delta":{"content":"`...)
	} else {
		b = append(b, `[{"index":0,"text":"`...)
	}
	for range n {
		b = append(b, tokenText...)
	}
	if e.chat {
		b = append(b, '"', '}')
	} else {
		b = append(b, '"')
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(append(append(b, '"'), finish...), '"')
	}
	b = append(b, "}]}\n\n"...)
	e.buf = b
	return b
}

// withUsage adds the usage so far to a token chunk (continuous usage stats).
func (e *chunkEncoder) withUsage(chunk []byte, u usage) []byte {
	b := bytes.TrimSuffix(chunk, []byte("}\n\n"))
	b = fmt.Appendf(b, `,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	e.buf = b
	return b
}

func (e *chunkEncoder) usage(u usage) []byte {
	b := append(append(e.buf[:0], e.head...), `[],"usage":`...)
	b = fmt.Appendf(b, `{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	e.buf = b
	return b
}
