package ollamatest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/gguf"
	"github.com/mosaic-sched/mosaic/internal/ollamatest"
)

// params are the model parameters the tests register: one thread (two would fight over a
// loaded 2-core machine), and a per-slot context that holds the longest prompt and answer.
var params = map[string]any{"num_thread": 1, "num_ctx": 2048}

func model(t testing.TB, seed uint64) []byte {
	t.Helper()
	b, err := gguf.Llama(gguf.Spec{Seed: seed})
	require.NoError(t, err)
	return b
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "ollama")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv(ollamatest.EnvBinary, fake)
	p, err := ollamatest.Find()
	require.NoError(t, err)
	assert.Equal(t, fake, p)

	t.Setenv(ollamatest.EnvBinary, filepath.Join(dir, "missing"))
	_, err = ollamatest.Find()
	require.Error(t, err)
	assert.True(t, errors.Is(err, ollamatest.ErrNotFound))
	assert.Contains(t, err.Error(), "make ollama")

	root, err := ollamatest.RepoRoot()
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(root, "go.mod"))
}

// A server that cannot start (here: not an ollama at all) is an error that carries its log.
func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "ollama")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho broken install >&2\nexit 3\n"), 0o755))
	_, err := ollamatest.Start(context.Background(), ollamatest.Options{Binary: fake, StartTimeout: 5 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "broken install")
}

// The property replay's tests rely on: through /v1/completions, a prompt of N words is N+1
// prompt tokens (BOS), and an answer is exactly max_tokens tokens, finish reason "length",
// with a usage chunk and [DONE] - concurrently, on two models.
func TestExactTokenCounts(t *testing.T) {
	s := ollamatest.StartTest(t, ollamatest.Options{NumParallel: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	spec := gguf.Spec{}
	for _, seed := range []uint64{1, 2} {
		require.NoError(t, ollamatest.Create(ctx, s.URL, fmt.Sprintf("count%d", seed), model(t, seed), params))
	}
	ids, err := ollamatest.Models(ctx, s.URL)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"count1:latest", "count2:latest"}, ids)

	type tc struct {
		model            string
		first, n, maxTok int
	}
	cases := []tc{
		{"count1", 0, 10, 1},
		{"count1", 5, 200, 50},
		{"count2", 700, 1000, 20},
		{"count2", 3, 10, 200},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() {
			got, err := ollamatest.StreamCompletion(ctx, s.URL, c.model, spec.Text(c.first, c.n), c.maxTok)
			if !assert.NoError(t, err, "%+v", c) {
				return
			}
			assert.True(t, got.Complete(), "%+v: stream ended without finish reason, usage or [DONE]: %+v", c, got)
			assert.Equal(t, "length", got.FinishReason, "%+v", c)
			if assert.NotNil(t, got.Usage, "%+v", c) {
				assert.Equal(t, c.n+1, got.Usage.PromptTokens, "%+v: prompt tokens", c)
				assert.Equal(t, c.maxTok, got.Usage.CompletionTokens, "%+v: completion tokens", c)
			}
			assert.Equal(t, c.maxTok, got.TextChunks, "%+v: one chunk a token", c)
			last := (c.first + c.n - 1) % spec.Words()
			assert.Equal(t, spec.Continuation(last, c.maxTok), got.Text, "%+v: the model counts on", c)
		})
	}
	wg.Wait()

	// The native API says the same, and the model stays loaded until it is unloaded.
	r, err := ollamatest.Generate(ctx, s.URL, map[string]any{
		"model": "count1", "prompt": spec.Text(0, 50), "raw": true,
		"options": map[string]any{"num_predict": 40, "temperature": 0},
	})
	require.NoError(t, err)
	assert.Equal(t, 51, r.PromptEvalCount)
	assert.Equal(t, 40, r.EvalCount)
	assert.Equal(t, "length", r.DoneReason)
	assert.True(t, strings.HasPrefix(r.Response, " w50 w51"), r.Response)

	ps, err := ollamatest.PS(ctx, s.URL)
	require.NoError(t, err)
	require.NotEmpty(t, ps)
	require.NoError(t, ollamatest.Unload(ctx, s.URL, "count1"))
	require.NoError(t, ollamatest.Unload(ctx, s.URL, "count2"))
	ps, err = ollamatest.PS(ctx, s.URL)
	require.NoError(t, err)
	assert.Empty(t, ps)
	_, err = ollamatest.Load(ctx, s.URL, "count2", -1)
	require.NoError(t, err)
	ps, err = ollamatest.PS(ctx, s.URL)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, "count2:latest", ps[0].Name)

	v, err := ollamatest.Version(ctx, s.URL)
	require.NoError(t, err)
	t.Logf("server version %q, module %s", v, moduleVersion(s.Binary))
}

func moduleVersion(bin string) string {
	v, err := ollamatest.ModuleVersion(bin)
	if err != nil {
		return err.Error()
	}
	return v
}

// The trap replay must see: Ollama v0.6.5 cuts a generation once a token repeats more than 30
// times in a row, and answers as if nothing happened - HTTP 200, but no finish reason, no usage
// and no [DONE] on /v1, "done": false and no counts on the native API.
func TestRepeatLimit(t *testing.T) {
	s := ollamatest.StartTest(t, ollamatest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := gguf.Spec{Seed: 5, Repeat: true}
	b, err := gguf.Llama(spec)
	require.NoError(t, err)
	require.NoError(t, ollamatest.Create(ctx, s.URL, "parrot", b, params))

	c, err := ollamatest.StreamCompletion(ctx, s.URL, "parrot", spec.Text(0, 20), 100)
	require.NoError(t, err)
	assert.False(t, c.Complete())
	assert.Equal(t, "", c.FinishReason)
	assert.Nil(t, c.Usage)
	assert.False(t, c.Done)
	assert.Equal(t, 31, c.TextChunks)
	assert.Equal(t, strings.Repeat(" w19", 31), c.Text)

	r, err := ollamatest.Generate(ctx, s.URL, map[string]any{
		"model": "parrot", "prompt": spec.Text(0, 20), "options": map[string]any{"num_predict": 100, "temperature": 0},
	})
	require.NoError(t, err)
	assert.False(t, r.Done)
	assert.Equal(t, "", r.DoneReason)
	assert.Zero(t, r.EvalCount)
	t.Logf("native answer: %+v", r)

	// 31 tokens are whole; 32 are cut.
	c, err = ollamatest.StreamCompletion(ctx, s.URL, "parrot", spec.Text(0, 20), 31)
	require.NoError(t, err)
	assert.True(t, c.Complete())
	assert.Equal(t, 31, c.Usage.CompletionTokens)
	c, err = ollamatest.StreamCompletion(ctx, s.URL, "parrot", spec.Text(0, 20), 32)
	require.NoError(t, err)
	assert.False(t, c.Complete())
	assert.Equal(t, 31, c.TextChunks)
}

func TestSameModel(t *testing.T) {
	assert.True(t, ollamatest.SameModel("m", "m:latest"))
	assert.True(t, ollamatest.SameModel("m:latest", "m"))
	assert.True(t, ollamatest.SameModel("a/b:v1", "a/b:v1"))
	assert.False(t, ollamatest.SameModel("m", "m:v1"))
	assert.False(t, ollamatest.SameModel("m", "n"))
	assert.True(t, ollamatest.SameModel("host:11434/m", "host:11434/m:latest"))
}
