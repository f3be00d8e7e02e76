package ollamatest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/gguf"
	"github.com/mosaic-sched/mosaic/internal/ollamatest"
)

// TestProbe measures how the real server behaves (loads, exact counts over a grid of prompt and
// answer lengths, prompt caching, concurrency, several models) and logs what it sees. It takes about
// 20 s on an idle 2-core machine and runs only with MOSAIC_OLLAMA_PROBE=1, e.g.
//
//	MOSAIC_OLLAMA_PROBE=1 go test ./internal/ollamatest -run TestProbe -v -timeout 20m
func TestProbe(t *testing.T) {
	if os.Getenv("MOSAIC_OLLAMA_PROBE") == "" {
		t.Skip("set MOSAIC_OLLAMA_PROBE=1 to measure the server (about 20 s)")
	}
	s := ollamatest.StartTest(t, ollamatest.Options{NumParallel: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	spec := gguf.Spec{}

	for _, path := range []string{"/", "/health", "/api/version", "/v1/models", "/api/ps", "/api/tags"} {
		resp, err := http.Get(s.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		t.Logf("GET %-13s -> %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	v, err := ollamatest.Version(ctx, s.URL)
	require.NoError(t, err)
	t.Logf("version %q; module %s", v, moduleVersion(s.Binary))

	for _, seed := range []uint64{1, 2, 3} {
		t0 := time.Now()
		require.NoError(t, ollamatest.Create(ctx, s.URL, fmt.Sprintf("m%d", seed), model(t, seed), params))
		t.Logf("create m%d: %v", seed, time.Since(t0).Round(time.Millisecond))
	}
	ids, err := ollamatest.Models(ctx, s.URL)
	require.NoError(t, err)
	t.Logf("/v1/models: %v", ids)

	for range 2 {
		d, err := ollamatest.Load(ctx, s.URL, "m1", -1)
		require.NoError(t, err)
		ps, _ := ollamatest.PS(ctx, s.URL)
		t.Logf("load m1 (keep_alive -1): %v; /api/ps: %+v", d.Round(time.Millisecond), ps)
		t0 := time.Now()
		require.NoError(t, ollamatest.Unload(ctx, s.URL, "m1"))
		t.Logf("unload m1: %v (until /api/ps is empty)", time.Since(t0).Round(time.Millisecond))
	}
	_, err = ollamatest.Load(ctx, s.URL, "m1", -1)
	require.NoError(t, err)

	// Exact counts over the grid, one request at a time.
	t.Logf("%6s %6s | %6s %6s %-7s %5s | %8s %8s %8s", "words", "max", "prompt", "compl", "finish", "done", "ttft", "total", "tok/s")
	for _, n := range []int{10, 200, 1000} {
		for _, m := range []int{1, 50, 500} {
			first := n + m // a prompt no slot has seen: no prompt cache
			c, err := ollamatest.StreamCompletion(ctx, s.URL, "m1", spec.Text(first, n), m)
			require.NoError(t, err)
			require.True(t, c.Complete(), "%d words, %d tokens: %+v", n, m, c)
			assert.Equal(t, n+1, c.Usage.PromptTokens)
			assert.Equal(t, m, c.Usage.CompletionTokens)
			assert.Equal(t, "length", c.FinishReason)
			assert.Equal(t, spec.Continuation((first+n-1)%spec.Words(), m), c.Text)
			t.Logf("%6d %6d | %6d %6d %-7s %5v | %8v %8v %8.0f", n, m, c.Usage.PromptTokens, c.Usage.CompletionTokens,
				c.FinishReason, c.Done, c.TTFT.Round(time.Microsecond*100), c.Elapsed.Round(time.Microsecond*100), rate(c))
		}
	}

	// Longer than a slot's context (num_ctx), and prompt + answer longer than it.
	for _, c := range []struct{ n, m int }{{3000, 10}, {1800, 500}} {
		got, err := ollamatest.StreamCompletion(ctx, s.URL, "m1", spec.Text(0, c.n), c.m)
		require.NoError(t, err)
		t.Logf("%d words, max_tokens %d: complete %v finish %q usage %+v, text ok %v, ttft %v total %v", c.n, c.m,
			got.Complete(), got.FinishReason, got.Usage, got.Text == spec.Continuation((c.n-1)%spec.Words(), c.m),
			got.TTFT.Round(time.Millisecond), got.Elapsed.Round(time.Millisecond))
	}

	// Prompt cache: the same 1000-word prompt twice, then one that shares the first 900 words.
	p := spec.Text(100, 1000)
	for i, prompt := range []string{p, p, spec.Text(100, 900) + " " + spec.Text(0, 100)} {
		c, err := ollamatest.StreamCompletion(ctx, s.URL, "m1", prompt, 1)
		require.NoError(t, err)
		t.Logf("prompt cache, request %d: ttft %v, usage %+v", i, c.TTFT.Round(time.Microsecond*100), c.Usage)
	}
	for i := range 2 {
		r, err := ollamatest.Generate(ctx, s.URL, map[string]any{"model": "m1", "prompt": p,
			"options": map[string]any{"num_predict": 1, "temperature": 0}})
		require.NoError(t, err)
		t.Logf("native, same prompt %d: prompt_eval_count %d prompt_eval_duration %v eval_count %d", i,
			r.PromptEvalCount, time.Duration(r.PromptEvalDuration).Round(time.Microsecond*100), r.EvalCount)
	}

	// Concurrency: k requests of 200 answer tokens at once.
	for _, k := range []int{1, 4, 8} {
		cs := make([]ollamatest.Completion, k)
		starts := make([]time.Time, k)
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range k {
			wg.Go(func() {
				starts[i] = time.Now()
				c, err := ollamatest.StreamCompletion(ctx, s.URL, "m1", spec.Text(10*i, 10), 200)
				assert.NoError(t, err)
				assert.True(t, c.Complete())
				cs[i] = c
			})
		}
		wg.Wait()
		wall := time.Since(t0)
		line := ""
		for i, c := range cs {
			line += fmt.Sprintf(" [ttft %v end %v]", (starts[i].Sub(t0) + c.TTFT).Round(time.Millisecond),
				(starts[i].Sub(t0) + c.Elapsed).Round(time.Millisecond))
		}
		t.Logf("%d concurrent x 200 tokens: wall %v, %.0f tok/s in all;%s", k, wall.Round(time.Millisecond),
			float64(200*k)/wall.Seconds(), line)
	}

	for _, line := range strings.Split(s.Log(), "\n") {
		if strings.Contains(line, "n_ctx_per_seq =") || strings.Contains(line, "n_ctx         =") ||
			strings.Contains(line, "truncating input prompt") || strings.Contains(line, "context limit hit") {
			t.Logf("server log: %s", strings.TrimSpace(line))
		}
	}

	// Several models: load m2 beside m1, then ask m3 without loading it.
	d, err := ollamatest.Load(ctx, s.URL, "m2", -1)
	require.NoError(t, err)
	ps, _ := ollamatest.PS(ctx, s.URL)
	t.Logf("load m2 while m1 loaded: %v; loaded: %v", d.Round(time.Millisecond), names(ps))
	c, err := ollamatest.StreamCompletion(ctx, s.URL, "m3", spec.Text(0, 10), 10)
	require.NoError(t, err)
	ps, _ = ollamatest.PS(ctx, s.URL)
	t.Logf("first request to unloaded m3: ttft %v, complete %v; loaded: %v", c.TTFT.Round(time.Millisecond), c.Complete(), names(ps))
	c, err = ollamatest.StreamCompletion(ctx, s.URL, "m3", spec.Text(0, 10), 10)
	require.NoError(t, err)
	t.Logf("second request to m3: ttft %v", c.TTFT.Round(time.Millisecond))
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, m := range []string{"m1", "m2", "m3"} {
		wg.Go(func() {
			c, err := ollamatest.StreamCompletion(ctx, s.URL, m, spec.Text(0, 10), 300)
			assert.NoError(t, err)
			t.Logf("three models at once: %s ttft %v total %v", m, c.TTFT.Round(time.Millisecond), c.Elapsed.Round(time.Millisecond))
		})
	}
	wg.Wait()
	t.Logf("three models at once: wall %v", time.Since(t0).Round(time.Millisecond))

	// A fourth model with the default OLLAMA_MAX_LOADED_MODELS.
	require.NoError(t, ollamatest.Create(ctx, s.URL, "m4", model(t, 4), params))
	c, err = ollamatest.StreamCompletion(ctx, s.URL, "m4", spec.Text(0, 10), 10)
	require.NoError(t, err)
	ps, _ = ollamatest.PS(ctx, s.URL)
	t.Logf("first request to a fourth model: ttft %v; loaded: %v", c.TTFT.Round(time.Millisecond), names(ps))
}

// TestProbeOneLoaded measures model swaps on a server that holds one model at a time.
func TestProbeOneLoaded(t *testing.T) {
	if os.Getenv("MOSAIC_OLLAMA_PROBE") == "" {
		t.Skip("set MOSAIC_OLLAMA_PROBE=1 to measure the server")
	}
	s := ollamatest.StartTest(t, ollamatest.Options{NumParallel: 4, MaxLoadedModels: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := gguf.Spec{}
	for _, seed := range []uint64{1, 2} {
		require.NoError(t, ollamatest.Create(ctx, s.URL, fmt.Sprintf("m%d", seed), model(t, seed), params))
	}
	_, err := ollamatest.Load(ctx, s.URL, "m1", -1)
	require.NoError(t, err)
	c, err := ollamatest.StreamCompletion(ctx, s.URL, "m2", spec.Text(0, 10), 10)
	require.NoError(t, err)
	ps, _ := ollamatest.PS(ctx, s.URL)
	t.Logf("max 1 loaded: request to m2 while m1 (keep_alive -1) loaded: ttft %v complete %v; loaded: %v",
		c.TTFT.Round(time.Millisecond), c.Complete(), names(ps))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, m := range []string{"m1", "m2", "m1", "m2"} {
		wg.Go(func() {
			start := time.Since(t0)
			c, err := ollamatest.StreamCompletion(ctx, s.URL, m, spec.Text(i, 10), 200)
			assert.NoError(t, err)
			t.Logf("max 1 loaded, 4 at once alternating models: #%d %s ttft %v end %v complete %v", i, m,
				(start + c.TTFT).Round(time.Millisecond), (start + c.Elapsed).Round(time.Millisecond), c.Complete())
		})
	}
	wg.Wait()
}

func rate(c ollamatest.Completion) float64 {
	if c.Usage == nil || c.Usage.CompletionTokens < 2 {
		return 0
	}
	return float64(c.Usage.CompletionTokens-1) / (c.Elapsed - c.TTFT).Seconds()
}

func names(ps []ollamatest.Running) []string {
	var out []string
	for _, r := range ps {
		out = append(out, r.Name)
	}
	return out
}
