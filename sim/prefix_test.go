package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

func cachingEngine(t *testing.T, blocks int) *sim.Engine {
	return newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 4096, ChunkedPrefill: true, BlockSize: 16,
		NumBlocks: blocks, PrefixCaching: true})
}

// drain steps the engine until it is idle and returns the prefill tokens per request's first
// iteration, as far as they can be told apart, and the total prefill.
func drain(t *testing.T, e *sim.Engine) (prefill int) {
	t.Helper()
	for i := 0; i < 100000 && !e.Idle(); i++ {
		prefill += e.Advance(0).PrefillTokens
	}
	require.True(t, e.Idle())
	return prefill
}

// A prompt whose prefix another prompt computed reuses its full blocks (never the last token):
// it prefills only the rest, and the counters say so.
func TestPrefixCacheHit(t *testing.T) {
	e := cachingEngine(t, 4096)
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 1100, OutputTokens: 10, PrefixKey: 7, PrefixTokens: 1000}))
	assert.Equal(t, 1100, drain(t, e))
	require.NoError(t, e.Add(sim.Request{ID: 2, PromptTokens: 1200, OutputTokens: 10, PrefixKey: 7, PrefixTokens: 1000}))
	assert.Equal(t, 1200-992, drain(t, e), "62 blocks of 16 tokens of the 1,000-token prefix are reused")
	require.NoError(t, e.Add(sim.Request{ID: 3, PromptTokens: 1200, OutputTokens: 10, PrefixKey: 8, PrefixTokens: 1000}))
	assert.Equal(t, 1200, drain(t, e), "another prefix: a miss")
	// A prompt that is all prefix still computes its last token.
	require.NoError(t, e.Add(sim.Request{ID: 4, PromptTokens: 992, OutputTokens: 1, PrefixKey: 7, PrefixTokens: 992}))
	assert.Equal(t, 992-976, drain(t, e), "61 blocks reused, the 62nd holds the last token and is computed")
	st := e.Stats()
	assert.Equal(t, int64(1100+1200+1200+992), st.PrefixQueried)
	assert.Equal(t, int64(992+976), st.PrefixHit)
	assert.Zero(t, e.KVUsage(), "cached but unused blocks count as free")
}

// Prompts admitted together cannot reuse each other's blocks (none is computed yet); the one
// after them does.
func TestPrefixCacheSameIteration(t *testing.T) {
	e := cachingEngine(t, 4096)
	for id := uint64(1); id <= 3; id++ {
		require.NoError(t, e.Add(sim.Request{ID: id, PromptTokens: 500, OutputTokens: 5, PrefixKey: 9, PrefixTokens: 480}))
	}
	assert.Equal(t, 1500, drain(t, e))
	require.NoError(t, e.Add(sim.Request{ID: 4, PromptTokens: 500, OutputTokens: 5, PrefixKey: 9, PrefixTokens: 480}))
	assert.Equal(t, 20, drain(t, e))
}

// Under memory pressure unused cached blocks are evicted, least recently used first.
func TestPrefixCacheEviction(t *testing.T) {
	e := cachingEngine(t, 200) // 3,200 tokens of KV
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 1040, OutputTokens: 2, PrefixKey: 1, PrefixTokens: 1024}))
	drain(t, e)
	require.NoError(t, e.Add(sim.Request{ID: 2, PromptTokens: 1040, OutputTokens: 2, PrefixKey: 2, PrefixTokens: 1024}))
	drain(t, e)
	// Key 1 is now the least recently used; a 1,600-token prompt needs 100 blocks, more than
	// the 200 - 2 x 64 cached ones leave, so key 1's blocks go first.
	require.NoError(t, e.Add(sim.Request{ID: 3, PromptTokens: 1600, OutputTokens: 2}))
	drain(t, e)
	require.NoError(t, e.Add(sim.Request{ID: 4, PromptTokens: 1040, OutputTokens: 2, PrefixKey: 2, PrefixTokens: 1024}))
	assert.Equal(t, 16, drain(t, e), "key 2 survived")
	require.NoError(t, e.Add(sim.Request{ID: 5, PromptTokens: 1040, OutputTokens: 2, PrefixKey: 1, PrefixTokens: 1024}))
	assert.Greater(t, drain(t, e), 16, "key 1 was evicted (in part or whole)")
	assert.Zero(t, e.KVUsage())
}

// A sequence using cached blocks that is aborted or preempted releases them; its blocks stay
// reusable.
func TestPrefixCacheAbortAndPreempt(t *testing.T) {
	e := cachingEngine(t, 4096)
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 520, OutputTokens: 2, PrefixKey: 3, PrefixTokens: 512}))
	drain(t, e)
	require.NoError(t, e.Add(sim.Request{ID: 2, PromptTokens: 520, OutputTokens: 500, PrefixKey: 3, PrefixTokens: 512}))
	e.Step()
	assert.Positive(t, e.KVUsage())
	_, ok := e.Abort(2)
	require.True(t, ok)
	assert.Zero(t, e.KVUsage(), "its own blocks and its references are released")
	require.NoError(t, e.Add(sim.Request{ID: 3, PromptTokens: 520, OutputTokens: 2, PrefixKey: 3, PrefixTokens: 512}))
	assert.Equal(t, 8, drain(t, e), "still cached")

	// Preemption: a cache too small for two long sequences.
	small := cachingEngine(t, 80) // 1,280 tokens
	require.NoError(t, small.Add(sim.Request{ID: 1, PromptTokens: 300, OutputTokens: 600, PrefixKey: 4, PrefixTokens: 288}))
	require.NoError(t, small.Add(sim.Request{ID: 2, PromptTokens: 300, OutputTokens: 600, PrefixKey: 4, PrefixTokens: 288}))
	preempted := 0
	for i := 0; i < 100000 && !small.Idle(); i++ {
		preempted += len(small.Advance(0).Preempted)
	}
	assert.Positive(t, preempted)
	assert.Zero(t, small.KVUsage())
	assert.Positive(t, small.Stats().PrefixHit, "a re-admitted sequence reuses the prefix")
}

// Without prefix caching nothing is cached (the counters stay at zero).
func TestPrefixCacheOff(t *testing.T) {
	e := newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 4096, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 4096})
	for id := uint64(1); id <= 2; id++ {
		require.NoError(t, e.Add(sim.Request{ID: id, PromptTokens: 1100, OutputTokens: 10, PrefixKey: 7, PrefixTokens: 1000}))
		assert.Equal(t, 1100, drain(t, e))
	}
	assert.Zero(t, e.Stats().PrefixHit)
}
