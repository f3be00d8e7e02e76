package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"
)

// request is the body of a streaming /v1/completions request, with vLLM's extensions (left
// out when zero, for servers without them). Prompt is a list of token IDs (see PromptIDs) or
// a text (see PromptWords).
type request struct {
	Model       string  `json:"model"`
	Prompt      any     `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	MinTokens   int     `json:"min_tokens,omitempty"`
	IgnoreEOS   bool    `json:"ignore_eos,omitempty"`
	Temperature float64 `json:"temperature"`
	// Seed fixes the sampler's seed (sent to servers whose greedy decoding is not otherwise
	// reproducible; nil: left out).
	Seed          *int          `json:"seed,omitempty"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
	// CacheSalt keeps the server's prefix cache apart per salt (vLLM V1's cache_salt: a prompt
	// hits only blocks cached under the same salt).
	CacheSalt string `json:"cache_salt,omitempty"`
	// Priority is the request's priority on a server that schedules by priority (vLLM's
	// "priority" field of the completions request, an integer, lower served first; default
	// 0). nil leaves it out, as for every server that schedules first come first served.
	Priority *int `json:"priority,omitempty"`
	// promptTokens is how many tokens the prompt should count (0: not checked).
	promptTokens int
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsage asks for the usage so far in every chunk (vLLM's
	// continuous_usage_stats): the tokens a cancelled call had produced.
	ContinuousUsage bool `json:"continuous_usage_stats,omitempty"`
}

type chunk struct {
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// completion is what one streamed call measured, in real time.
type completion struct {
	// Sent is when the request was sent; Accepted when its response headers arrived (the
	// server has it); FirstToken when the first chunk with a choice arrived; End when the
	// stream ended; Last when the last data arrived (a failed attempt's last byte).
	Sent, Accepted, FirstToken, End, Last time.Time
	CompletionTokens                      int
	// Streamed is the output tokens received so far: the last usage a chunk carried (with
	// continuous usage stats) or the chunks that carried text, whichever is more.
	Streamed int
}

// retryableError marks a failure worth another try: a refused connection, a 5xx, a timeout, a
// short stream or a wrong token count. It reads as the failure it wraps.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// retryable marks err as worth another try.
func retryable(err error) error { return &retryableError{err} }

// isRetryable reports whether err is worth another try.
func isRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

// Timeouts bound one attempt of a call, in real time.
type Timeouts struct {
	// Connect bounds connecting to the server and receiving the response headers.
	Connect time.Duration
	// FirstToken bounds the wait from the response headers to the first token: the time the
	// call may wait in the server's queue and prefill.
	FirstToken time.Duration
	// Idle bounds the silence between two chunks of a stream once the first has arrived.
	Idle time.Duration
	// Request bounds the whole attempt.
	Request time.Duration
}

// stream is one attempt of a streamed completion: open sends it, read reads it to the end.
type stream struct {
	req    request
	cancel context.CancelCauseFunc
	ctx    context.Context
	stop   context.CancelFunc // releases the whole-request timer
	resp   *http.Response
	c      completion
	t      Timeouts

	mu    sync.Mutex
	timer *time.Timer // fires when the stream has been silent too long
}

// Idle-stream failures, the cause of the cancelled request context.
type silenceError struct {
	what string
	d    time.Duration
	key  string
}

func (e *silenceError) Error() string {
	return fmt.Sprintf("%s for %v ([replay] %s)", e.what, e.d, e.key)
}

// open sends the request to base (the server's root URL) and returns once the response
// headers have arrived, or with an error; wrote, when set, is closed once the request has
// been written to the connection (or the attempt failed first).
func open(ctx context.Context, hc *http.Client, base, apiKey string, req request, t Timeouts, wrote chan struct{}) (*stream, error) {
	if wrote != nil {
		var once sync.Once
		signal := func() { once.Do(func() { close(wrote) }) }
		defer signal()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { signal() }})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	s := &stream{req: req, t: t}
	var stop context.CancelFunc = func() {}
	if t.Request > 0 {
		ctx, stop = context.WithTimeout(ctx, t.Request)
	}
	s.stop = stop
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	hr, err := http.NewRequestWithContext(s.ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		s.close()
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+apiKey)
	}
	s.c.Sent = time.Now()
	resp, err := hc.Do(hr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && context.Cause(s.ctx) == nil {
			err = fmt.Errorf("no connection or no response headers within %v ([replay] connect_timeout): %v", t.Connect, err)
		}
		err = retryable(s.why(err))
		s.close()
		return nil, err
	}
	s.c.Accepted = time.Now()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		s.close()
		err := fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			err = retryable(err)
		}
		return nil, err
	}
	s.resp = resp
	if t.FirstToken > 0 {
		s.watch(t.FirstToken, &silenceError{"no token from the server", t.FirstToken, "first_token_timeout"})
	}
	return s, nil
}

// watch (re)arms the silence timer: the request is cancelled with cause if nothing arrives
// within d.
func (s *stream) watch(d time.Duration, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(d, func() { s.cancel(cause) })
}

func (s *stream) close() {
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.cancel(nil)
	s.stop()
}

// why names a timeout's cause in place of a bare "context canceled".
func (s *stream) why(err error) error {
	if cause := context.Cause(s.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		if errors.Is(cause, context.DeadlineExceeded) {
			return fmt.Errorf("the request took longer than %v ([replay] request_timeout)", s.t.Request)
		}
		return cause
	}
	return err
}

// read reads the stream to its end; onFirst, when set, is called when the first token arrives.
// A stream is complete only when it ends with [DONE] after a finish reason and its usage, and
// the usage counts the tokens asked for: anything less (a server that stopped a generation
// early, a proxy that cut the stream) is an error, never a short call.
func (s *stream) read(onFirst func(time.Time)) (completion, error) {
	defer s.close()
	defer s.resp.Body.Close()
	c := &s.c
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	done := false
	usage, prompt := -1, 0
	finish := ""
	chunks := 0
	idle := &silenceError{"no data from the server", s.t.Idle, "idle_timeout"}
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		c.Last = time.Now()
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			// Read the response to its end, so that its connection goes back to the pool.
			for sc.Scan() {
			}
			break
		}
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return *c, retryable(fmt.Errorf("bad stream chunk: %v", err))
		}
		if ch.Error != nil {
			return *c, retryable(fmt.Errorf("server error in stream: %s", ch.Error.Message))
		}
		for _, choice := range ch.Choices {
			if choice.FinishReason != nil && *choice.FinishReason != "" {
				finish = *choice.FinishReason
			}
		}
		if len(ch.Choices) > 0 && (ch.Choices[0].Text != "" || ch.Choices[0].FinishReason == nil) {
			chunks++
		}
		if ch.Usage != nil && ch.Usage.CompletionTokens > 0 {
			usage, prompt = ch.Usage.CompletionTokens, ch.Usage.PromptTokens
		} else if ch.Usage != nil && len(ch.Choices) == 0 {
			usage, prompt = 0, ch.Usage.PromptTokens // a final usage of no tokens
		}
		c.Streamed = max(chunks, usage)
		if len(ch.Choices) > 0 && c.FirstToken.IsZero() {
			c.FirstToken = time.Now()
			if onFirst != nil {
				onFirst(c.FirstToken)
			}
		}
		if !c.FirstToken.IsZero() && s.t.Idle > 0 {
			s.watch(s.t.Idle, idle)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return *c, retryable(errors.New("the stream ended without [DONE]: the server closed the connection mid-stream"))
		}
		return *c, retryable(fmt.Errorf("reading the stream: %v", s.why(err)))
	}
	c.End = time.Now()
	switch {
	case !done && finish == "" && usage < 0:
		return *c, retryable(fmt.Errorf("the stream ended after %d tokens without a finish reason, usage or [DONE]: the server stopped the generation early", chunks))
	case !done:
		return *c, retryable(errors.New("the stream ended without [DONE]"))
	case usage < 0:
		return *c, errors.New("the stream carried no usage (stream_options.include_usage unsupported?)")
	case finish == "":
		return *c, retryable(fmt.Errorf("the stream carried no finish reason (%d tokens)", usage))
	case usage != s.req.MaxTokens:
		return *c, retryable(fmt.Errorf("the server produced %d tokens, %d were asked (finish reason %q)", usage, s.req.MaxTokens, finish))
	case s.req.promptTokens > 0 && prompt > 0 && prompt != s.req.promptTokens:
		return *c, fmt.Errorf("the server counted %d prompt tokens, %d were sent: it truncated the prompt or tokenizes it otherwise", prompt, s.req.promptTokens)
	}
	c.CompletionTokens = usage
	return *c, nil
}

// complete runs one attempt: open, then read.
func complete(ctx context.Context, hc *http.Client, base, apiKey string, req request, t Timeouts) (completion, error) {
	s, err := open(ctx, hc, base, apiKey, req, t, nil)
	if err != nil {
		return completion{}, err
	}
	return s.read(nil)
}

// healthy reports whether the server's health route answers 200.
func healthy(ctx context.Context, hc *http.Client, base string, api API) bool {
	status, _ := probeHealth(ctx, hc, base, api)
	return status == http.StatusOK
}

// probeHealth asks the server's health route (GET /health; Ollama's GET /): the status it
// answered, or 0 and why it did not answer.
func probeHealth(ctx context.Context, hc *http.Client, base string, api API) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+api.healthPath(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// connectError reports whether err says that nothing listens at the address (or it cannot be
// reached at all), as opposed to a server that answers slowly or with an error.
func connectError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// get fetches GET base+path (at most 4 MiB of it); a status other than 200 is an error.
func get(ctx context.Context, hc *http.Client, base, path, apiKey string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return data, nil
}

// servedModels lists GET base/v1/models.
func servedModels(ctx context.Context, hc *http.Client, base, apiKey string) ([]string, error) {
	data, err := get(ctx, hc, base, "/v1/models", apiKey)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	var ids []string
	for _, d := range out.Data {
		ids = append(ids, d.ID)
	}
	return ids, nil
}

// serverVersion asks GET base/version, which vLLM answers with {"version": "0.11.0"} (Ollama:
// GET /api/version); "" when the server does not say.
func serverVersion(ctx context.Context, hc *http.Client, base, apiKey string, api API) string {
	data, err := get(ctx, hc, base, api.versionPath(), apiKey)
	if err != nil {
		return ""
	}
	var out struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(data, &out) != nil {
		return ""
	}
	return out.Version
}
