package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// API is the protocol of the inference servers a replay drives.
type API string

const (
	// APIOpenAI is vLLM's OpenAI-compatible server (and `mosaic emulate`): prompts as token
	// IDs on /v1/completions, GET /health, GET /version, a launched server per loaded model
	// (or an attached one that serves it already), vLLM's cache_salt and
	// POST /reset_prefix_cache to keep policies' prefix caches apart.
	APIOpenAI API = "openai"
	// APIOllama is Ollama's server (it vendors llama.cpp): one attached server per worker
	// whose models are loaded and unloaded through its API (POST /api/generate with keep_alive),
	// prompts as text on its /v1/completions, GET / as the health check, GET /api/version. A
	// prompt is a text of words w0, w1, ..., each one token of the served model plus the
	// beginning-of-sequence token (as the models `mosaic` generates for it tokenize them);
	// the prompt tokens the server reports are checked, so any other tokenization fails the
	// call rather than bending the measurement. Ollama has no cache salt: every model a
	// policy loaded is unloaded when the policy ends, which empties its slots' caches.
	APIOllama API = "ollama"
)

// APIs lists the known APIs.
var APIs = []API{APIOpenAI, APIOllama}

func (a API) orDefault() API {
	if a == "" {
		return APIOpenAI
	}
	return a
}

// healthPath is the route that answers 200 when the server is up.
func (a API) healthPath() string {
	if a.orDefault() == APIOllama {
		return "/" // "Ollama is running"
	}
	return "/health"
}

// versionPath answers {"version": "x.y.z"}.
func (a API) versionPath() string {
	if a.orDefault() == APIOllama {
		return "/api/version"
	}
	return "/version"
}

// headersWithFirstToken reports whether the server sends a streamed completion's response
// headers only with its first token (Ollama writes them with its first chunk), not when it
// queues the request (vLLM, the emulator).
func (a API) headersWithFirstToken() bool { return a.orDefault() == APIOllama }

// loadsThroughAPI reports whether models are loaded and unloaded through the server's API
// rather than by launching and stopping a server per model.
func (a API) loadsThroughAPI() bool { return a.orDefault() == APIOllama }

// ollamaGenerate posts a no-prompt generate request that loads (keepAlive -1: for good) or
// unloads (0) model, and returns what the server said it did (its done_reason).
func ollamaGenerate(ctx context.Context, hc *http.Client, base, model string, keepAlive int) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "keep_alive": keepAlive, "stream": false})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/api/generate", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST /api/generate: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	var out struct {
		Done       bool   `json:"done"`
		DoneReason string `json:"done_reason"`
		Error      string `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", fmt.Errorf("POST /api/generate: %w", err)
	}
	if out.Error != "" {
		return "", fmt.Errorf("POST /api/generate: %s", out.Error)
	}
	return out.DoneReason, nil
}

// ollamaLoad loads model on an Ollama server and keeps it loaded.
func ollamaLoad(ctx context.Context, hc *http.Client, base, model string) error {
	reason, err := ollamaGenerate(ctx, hc, base, model, -1)
	if err != nil {
		return fmt.Errorf("loading %s on %s: %w", model, base, err)
	}
	if reason != "load" && reason != "" {
		return fmt.Errorf("loading %s on %s: the server answered done_reason %q, not \"load\"", model, base, reason)
	}
	return nil
}

// ollamaUnload unloads model from an Ollama server and waits until GET /api/ps no longer
// lists it (at most a few seconds).
func ollamaUnload(ctx context.Context, hc *http.Client, base, model string) error {
	if _, err := ollamaGenerate(ctx, hc, base, model, 0); err != nil {
		return fmt.Errorf("unloading %s on %s: %w", model, base, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := get(ctx, hc, base, "/api/ps", "")
		if err != nil {
			return fmt.Errorf("unloading %s on %s: %w", model, base, err)
		}
		var ps struct {
			Models []struct {
				Name  string `json:"name"`
				Model string `json:"model"`
			} `json:"models"`
		}
		if err := json.Unmarshal(data, &ps); err != nil {
			return fmt.Errorf("unloading %s on %s: GET /api/ps: %w", model, base, err)
		}
		loaded := false
		for _, m := range ps.Models {
			loaded = loaded || sameOllamaModel(m.Name, model) || sameOllamaModel(m.Model, model)
		}
		if !loaded {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("unloading %s on %s: still loaded after 10s", model, base)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sameOllamaModel reports whether two Ollama model names are the same model ("m" is "m:latest").
func sameOllamaModel(a, b string) bool {
	norm := func(s string) string {
		if !strings.Contains(s, ":") {
			return s + ":latest"
		}
		return s
	}
	return norm(a) == norm(b)
}
