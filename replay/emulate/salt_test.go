package emulate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// saltedBody is a streaming completion of token-ID prompt p with cache salt salt (none when
// salt is nil).
func saltedBody(p []int, salt any) map[string]any {
	body := idBody(p, 3)
	if salt != nil {
		body["cache_salt"] = salt
	}
	return body
}

// hitsAfter sends one request and returns the prefix-cache hits (tokens) it added.
func hitsAfter(t *testing.T, url string, body map[string]any) float64 {
	t.Helper()
	before := metric(t, url, "vllm:prefix_cache_hits_total")
	got := readStream(t, post(t, context.Background(), url+"/v1/completions", body), time.Now())
	require.True(t, got.done)
	return metric(t, url, "vllm:prefix_cache_hits_total") - before
}

// resetPrefixCache posts /reset_prefix_cache with query q and returns the status and body.
func resetPrefixCache(t *testing.T, url, q string, header ...string) (int, string) {
	t.Helper()
	return do(t, http.MethodPost, url+"/reset_prefix_cache"+q, header...)
}

// A request's cache_salt isolates its cached blocks: only requests with the same salt (or
// both without one) share them, as in vLLM V1.
func TestCacheSalt(t *testing.T) {
	s := start(t, newConfig(t, 1000))
	p := ids(1000, 64) // four blocks of 16; the last token is always computed: 48 can hit
	for _, step := range []struct {
		name string
		salt any
		hits float64
	}{
		{"salt a, first", "a", 0},
		{"salt a again: a hit", "a", 48},
		{"salt b: a miss", "b", 0},
		{"salt b again: a hit", "b", 48},
		{"no salt after salted ones: a miss", nil, 0},
		{"no salt again: a hit", nil, 48},
		{"null is no salt", json.RawMessage("null"), 48},
		{"salt a still cached", "a", 48},
		{"a salt that is a prefix of another is another salt", "a-", 0},
	} {
		assert.Equal(t, step.hits, hitsAfter(t, s.URL(), saltedBody(p, step.salt)), step.name)
	}
	// Chat prompts are words, never cached; a valid salt is accepted there too.
	body := map[string]any{"model": served, "messages": []any{map[string]any{"role": "user", "content": "hi there"}},
		"max_tokens": 2, "cache_salt": "a"}
	resp := post(t, context.Background(), s.URL()+"/v1/chat/completions", body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// cache_salt is validated as vLLM validates it: a non-empty string if given, at most 128
// characters, none of '@', '/', '\' or NUL; else 400 with vLLM's message, naming the parameter.
func TestCacheSaltValidation(t *testing.T) {
	s := start(t, newConfig(t, 1000))
	const empty = "Parameter 'cache_salt' must be a non-empty string if provided."
	const form = `Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\', or NUL.`
	for _, tc := range []struct {
		name string
		salt any
		msg  string // "" for accepted
	}{
		{"empty", "", empty},
		{"a number", 5, empty},
		{"a boolean", true, empty},
		{"a list", []string{"a"}, empty},
		{"an object", map[string]any{"a": 1}, empty},
		{"with a slash", "policy/a", form},
		{"with an at", "a@b", form},
		{"with a backslash", `a\b`, form},
		{"with NUL", "a\x00b", form},
		{"129 characters", strings.Repeat("s", 129), form},
		{"128 characters", strings.Repeat("s", 128), ""},
		{"128 characters of two bytes", strings.Repeat("é", 128), ""},
		{"blank but not empty", " ", ""},
	} {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				body := map[string]any{"model": served, "max_tokens": 2, "cache_salt": tc.salt}
				if path == "/v1/completions" {
					body["prompt"] = ids(1, 20)
				} else {
					body["messages"] = []any{map[string]any{"role": "user", "content": "hi"}}
				}
				resp := post(t, context.Background(), s.URL()+path, body)
				defer resp.Body.Close()
				if tc.msg == "" {
					assert.Equal(t, http.StatusOK, resp.StatusCode)
					return
				}
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
				var e struct {
					Error struct {
						Message string  `json:"message"`
						Type    string  `json:"type"`
						Param   *string `json:"param"`
					} `json:"error"`
				}
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
				assert.Equal(t, tc.msg, e.Error.Message)
				assert.Equal(t, "invalid_request_error", e.Error.Type)
				require.NotNil(t, e.Error.Param)
				assert.Equal(t, "cache_salt", *e.Error.Param)
			})
		}
	}
}

// POST /reset_prefix_cache drops every cached block when nothing runs: the next identical
// prompt misses, the one after hits again, and the counters keep counting. It answers 200
// with an empty body, takes no API key (vLLM checks it on /v1/ only) and refuses a query
// value that is not a boolean.
func TestResetPrefixCache(t *testing.T) {
	cfg := newConfig(t, 1000)
	cfg.APIKey = "secret"
	s := start(t, cfg)
	p := ids(1000, 64)
	send := func() float64 {
		before := metric(t, s.URL(), "vllm:prefix_cache_hits_total")
		resp := post(t, context.Background(), s.URL()+"/v1/completions", saltedBody(p, "run-1"), "Authorization", "Bearer secret")
		got := readStream(t, resp, time.Now())
		require.True(t, got.done)
		return metric(t, s.URL(), "vllm:prefix_cache_hits_total") - before
	}
	assert.Zero(t, send())
	assert.Equal(t, 48.0, send())
	code, body := resetPrefixCache(t, s.URL(), "")
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, body)
	assert.Equal(t, 1.0, metric(t, s.URL(), "mosaic:emulate_prefix_cache_resets_total"))
	assert.Zero(t, metric(t, s.URL(), "mosaic:emulate_prefix_cache_reset_refusals_total"))
	assert.Zero(t, send(), "the reset forgot the prompt's blocks")
	assert.Equal(t, 48.0, send(), "and the cache fills again")
	assert.Equal(t, 2*48.0, metric(t, s.URL(), "vllm:prefix_cache_hits_total"), "the counters keep counting")
	assert.Equal(t, 4*64.0, metric(t, s.URL(), "vllm:prefix_cache_queries_total"))

	for _, q := range []string{"?reset_running_requests=true", "?reset_external=1", "?reset_running_requests=False&reset_external=no"} {
		code, _ = resetPrefixCache(t, s.URL(), q)
		assert.Equal(t, http.StatusOK, code, q)
	}
	assert.Equal(t, 4.0, metric(t, s.URL(), "mosaic:emulate_prefix_cache_resets_total"))
	code, body = resetPrefixCache(t, s.URL(), "?reset_running_requests=maybe")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, `"param":"reset_running_requests"`)
	assert.Contains(t, body, "valid boolean")
	assert.Equal(t, 4.0, metric(t, s.URL(), "mosaic:emulate_prefix_cache_resets_total"))

	code, _ = get(t, s.URL()+"/reset_prefix_cache")
	assert.Equal(t, http.StatusMethodNotAllowed, code, "POST only")
}

// While a request runs (holding KV blocks) a reset is refused, as vLLM's is: nothing is
// dropped, and the answer is still 200. reset_running_requests=true preempts the running
// requests first; they are recomputed and finish with all their tokens.
func TestResetPrefixCacheWhileRunning(t *testing.T) {
	s := start(t, newConfig(t, 20))
	p := ids(1000, 64)
	assert.Zero(t, hitsAfter(t, s.URL(), saltedBody(p, nil)))

	// A long request, running once its first chunk is here.
	const output = 2000
	long := post(t, context.Background(), s.URL()+"/v1/completions", completionBody(200, output, true))
	defer long.Body.Close()
	sc := bufio.NewScanner(long.Body)
	require.True(t, sc.Scan(), "first chunk")
	tokens := strings.Count(sc.Text(), " tok")
	require.Equal(t, 1.0, metric(t, s.URL(), "vllm:num_requests_running"))

	code, body := resetPrefixCache(t, s.URL(), "")
	assert.Equal(t, http.StatusOK, code, "vLLM answers 200 even when it did not reset")
	assert.Empty(t, body)
	assert.Equal(t, 1.0, metric(t, s.URL(), "mosaic:emulate_prefix_cache_reset_refusals_total"))
	assert.Zero(t, metric(t, s.URL(), "mosaic:emulate_prefix_cache_resets_total"))
	ok, err := s.ResetPrefixCache(context.Background(), false)
	require.NoError(t, err)
	assert.False(t, ok, "in-process, the refusal is told")
	assert.Equal(t, 48.0, hitsAfter(t, s.URL(), saltedBody(p, nil)), "nothing was dropped")

	preemptions := metric(t, s.URL(), "vllm:num_preemptions_total")
	code, _ = resetPrefixCache(t, s.URL(), "?reset_running_requests=true")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, 1.0, metric(t, s.URL(), "mosaic:emulate_prefix_cache_resets_total"))
	assert.Equal(t, preemptions+1, metric(t, s.URL(), "vllm:num_preemptions_total"), "the long request was preempted")
	assert.Zero(t, hitsAfter(t, s.URL(), saltedBody(p, nil)), "the cache was reset")

	// The preempted request goes on to its end.
	done := false
	for sc.Scan() {
		line := sc.Text()
		tokens += strings.Count(line, " tok")
		done = done || line == "data: [DONE]"
	}
	require.NoError(t, sc.Err())
	assert.True(t, done)
	assert.Equal(t, output, tokens, "every token")
}
