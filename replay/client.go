package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// request is the body of a streaming /v1/completions request, with vLLM's extensions.
type request struct {
	Model         string        `json:"model"`
	Prompt        string        `json:"prompt"`
	MaxTokens     int           `json:"max_tokens"`
	MinTokens     int           `json:"min_tokens"`
	IgnoreEOS     bool          `json:"ignore_eos"`
	Temperature   float64       `json:"temperature"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
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
	Sent, FirstToken, End time.Time
	CompletionTokens      int
}

// errRetryable marks failures worth another try: refused connections, 5xx, timeouts, a short
// stream or a wrong token count.
var errRetryable = errors.New("retryable")

// SyntheticPrompt is a prompt of n whitespace-separated words ("the"), which tokenizers of
// common models (and the emulator) count as about n tokens.
func SyntheticPrompt(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.TrimSpace(strings.Repeat("the ", n))
}

// stream sends one streaming completion request to base (the server's root URL) and reads it
// to the end.
func stream(ctx context.Context, hc *http.Client, base, apiKey string, req request) (completion, error) {
	var c completion
	body, err := json.Marshal(req)
	if err != nil {
		return c, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return c, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+apiKey)
	}
	c.Sent = time.Now()
	resp, err := hc.Do(hr)
	if err != nil {
		return c, fmt.Errorf("%w: %v", errRetryable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			err = fmt.Errorf("%w: %v", errRetryable, err)
		}
		return c, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	done := false
	usage := -1
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return c, fmt.Errorf("%w: bad stream chunk: %v", errRetryable, err)
		}
		if ch.Error != nil {
			return c, fmt.Errorf("%w: server error in stream: %s", errRetryable, ch.Error.Message)
		}
		if len(ch.Choices) > 0 && c.FirstToken.IsZero() {
			c.FirstToken = time.Now()
		}
		if ch.Usage != nil {
			usage = ch.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("%w: reading the stream: %v", errRetryable, err)
	}
	c.End = time.Now()
	if !done {
		return c, fmt.Errorf("%w: the stream ended without [DONE]", errRetryable)
	}
	if usage < 0 {
		return c, errors.New("the stream carried no usage (stream_options.include_usage unsupported?)")
	}
	c.CompletionTokens = usage
	if usage != req.MaxTokens {
		return c, fmt.Errorf("%w: the server produced %d tokens, %d were asked", errRetryable, usage, req.MaxTokens)
	}
	return c, nil
}

// healthy reports whether GET base/health answers 200.
func healthy(ctx context.Context, hc *http.Client, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// servedModels lists GET base/v1/models.
func servedModels(ctx context.Context, hc *http.Client, base, apiKey string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/models", nil)
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
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: HTTP %d", resp.StatusCode)
	}
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	var ids []string
	for _, d := range out.Data {
		ids = append(ids, d.ID)
	}
	return ids, nil
}
