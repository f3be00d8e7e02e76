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
	"strings"
	"sync"
	"time"
)

// request is the body of a streaming /v1/completions request, with vLLM's extensions. Prompt
// is a list of token IDs (see PromptIDs).
type request struct {
	Model         string        `json:"model"`
	Prompt        []int         `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	MinTokens     int           `json:"min_tokens"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	Temperature   float64       `json:"temperature"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsage asks for the usage so far in every chunk (vLLM's
	// continuous_usage_stats): the tokens a cancelled call had produced.
	ContinuousUsage bool `json:"continuous_usage_stats,omitempty"`
}

type chunk struct {
	Choices []struct {
		Text string `json:"text"`
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
	// stream ended.
	Sent, Accepted, FirstToken, End time.Time
	CompletionTokens                int
	// Streamed is the output tokens received so far: the last usage a chunk carried (with
	// continuous usage stats), else the chunks that carried text.
	Streamed int
}

// errRetryable marks failures worth another try: refused connections, 5xx, timeouts, a short
// stream or a wrong token count.
var errRetryable = errors.New("retryable")

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
// headers have arrived, or with an error.
func open(ctx context.Context, hc *http.Client, base, apiKey string, req request, t Timeouts) (*stream, error) {
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
		err = fmt.Errorf("%w: %v", errRetryable, s.why(err))
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
			err = fmt.Errorf("%w: %v", errRetryable, err)
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
func (s *stream) read(onFirst func(time.Time)) (completion, error) {
	defer s.close()
	defer s.resp.Body.Close()
	c := &s.c
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	done := false
	usage := -1
	idle := &silenceError{"no data from the server", s.t.Idle, "idle_timeout"}
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
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
			return *c, fmt.Errorf("%w: bad stream chunk: %v", errRetryable, err)
		}
		if ch.Error != nil {
			return *c, fmt.Errorf("%w: server error in stream: %s", errRetryable, ch.Error.Message)
		}
		if ch.Usage != nil {
			c.Streamed = ch.Usage.CompletionTokens
		} else if len(ch.Choices) > 0 {
			c.Streamed++
		}
		if len(ch.Choices) > 0 && c.FirstToken.IsZero() {
			c.FirstToken = time.Now()
			if onFirst != nil {
				onFirst(c.FirstToken)
			}
		}
		if !c.FirstToken.IsZero() && s.t.Idle > 0 {
			s.watch(s.t.Idle, idle)
		}
		if ch.Usage != nil {
			usage = ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return *c, fmt.Errorf("%w: the stream ended without [DONE]: the server closed the connection mid-stream", errRetryable)
		}
		return *c, fmt.Errorf("%w: reading the stream: %v", errRetryable, s.why(err))
	}
	c.End = time.Now()
	if !done {
		return *c, fmt.Errorf("%w: the stream ended without [DONE]", errRetryable)
	}
	if usage < 0 {
		return *c, errors.New("the stream carried no usage (stream_options.include_usage unsupported?)")
	}
	c.CompletionTokens = usage
	if usage != s.req.MaxTokens {
		return *c, fmt.Errorf("%w: the server produced %d tokens, %d were asked", errRetryable, usage, s.req.MaxTokens)
	}
	return *c, nil
}

// complete runs one attempt: open, then read.
func complete(ctx context.Context, hc *http.Client, base, apiKey string, req request, t Timeouts) (completion, error) {
	s, err := open(ctx, hc, base, apiKey, req, t)
	if err != nil {
		return completion{}, err
	}
	return s.read(nil)
}

// healthy reports whether GET base/health answers 200.
func healthy(ctx context.Context, hc *http.Client, base string) bool {
	return healthStatus(ctx, hc, base) == http.StatusOK
}

// healthStatus is the status GET base/health answers, 0 when none.
func healthStatus(ctx context.Context, hc *http.Client, base string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/health", nil)
	if err != nil {
		return 0
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode
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

// serverVersion asks GET base/version, which vLLM answers with {"version": "0.11.0"}; "" when
// the server does not say.
func serverVersion(ctx context.Context, hc *http.Client, base, apiKey string) string {
	data, err := get(ctx, hc, base, "/version", apiKey)
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
