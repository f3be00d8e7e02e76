package ollamatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Usage is the usage object of an OpenAI-style completion.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Completion is what a streamed POST /v1/completions returned.
type Completion struct {
	Text         string        // the concatenated text of the chunks
	TextChunks   int           // chunks that carried text
	FinishReason string        // the last finish_reason seen ("length", "stop"); empty if none
	Usage        *Usage        // the usage chunk (choices: []); nil if none came
	Done         bool          // whether "data: [DONE]" ended the stream
	TTFT         time.Duration // from sending the request to the first chunk with text
	Elapsed      time.Duration // from sending the request to the end of the stream
}

// Complete reports whether the stream ended properly: a finish reason, a usage chunk and
// [DONE]. Ollama v0.6.5 ends a stream without any of them when its repeat limit cuts a
// generation (a token repeated more than 30 times in a row).
func (c Completion) Complete() bool { return c.FinishReason != "" && c.Usage != nil && c.Done }

// StreamCompletion sends POST /v1/completions with stream, stream_options.include_usage,
// max_tokens and temperature 0, and reads the server-sent events to the end.
func StreamCompletion(ctx context.Context, url, model, prompt string, maxTokens int) (Completion, error) {
	body, err := json.Marshal(map[string]any{
		"model":          model,
		"prompt":         prompt,
		"max_tokens":     maxTokens,
		"temperature":    0,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	})
	if err != nil {
		return Completion{}, fmt.Errorf("ollamatest: completion: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return Completion{}, fmt.Errorf("ollamatest: completion: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Completion{}, fmt.Errorf("ollamatest: completion %s: %w", model, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return Completion{}, fmt.Errorf("ollamatest: completion %s: HTTP %d: %s", model, resp.StatusCode, b)
	}
	var c Completion
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue // blank separator lines, comments
		}
		if data == "[DONE]" {
			c.Done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *Usage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return c, fmt.Errorf("ollamatest: completion %s: bad chunk %q: %w", model, data, err)
		}
		if chunk.Error != nil {
			return c, fmt.Errorf("ollamatest: completion %s: error in stream: %s", model, chunk.Error.Message)
		}
		if len(chunk.Choices) == 0 {
			c.Usage = chunk.Usage
			continue
		}
		for _, ch := range chunk.Choices {
			if ch.Text != "" {
				if c.TextChunks == 0 {
					c.TTFT = time.Since(t0)
				}
				c.TextChunks++
				text.WriteString(ch.Text)
			}
			if ch.FinishReason != nil {
				c.FinishReason = *ch.FinishReason
			}
		}
	}
	c.Elapsed = time.Since(t0)
	c.Text = text.String()
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("ollamatest: completion %s: reading stream: %w", model, err)
	}
	return c, nil
}
