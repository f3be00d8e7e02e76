package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// tokenIDs returns n token IDs starting at first.
func tokenIDs(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// A salt enters the first block's hash only, and the chain carries it: every block of a salted
// prompt differs from the unsalted and the differently salted prompt's, the same salt gives
// the same hashes, and an empty salt is no salt.
func TestBlockHashesSalted(t *testing.T) {
	ids := tokenIDs(1000, 16*5+7) // five full blocks
	plain := sim.BlockHashes(ids, 16)
	require.Len(t, plain, 5)
	assert.Equal(t, plain, sim.BlockHashesSalted(ids, 16, ""), "an empty salt is no salt")
	a := sim.BlockHashesSalted(ids, 16, "policy-a")
	b := sim.BlockHashesSalted(ids, 16, "policy-b")
	require.Len(t, a, 5)
	require.Len(t, b, 5)
	for i := range plain {
		assert.NotEqual(t, plain[i], a[i], "block %d: salted vs unsalted", i)
		assert.NotEqual(t, a[i], b[i], "block %d: two salts", i)
		assert.NotEqual(t, plain[i], b[i], "block %d: salted vs unsalted", i)
	}
	assert.Equal(t, a, sim.BlockHashesSalted(ids, 16, "policy-a"), "the same salt matches")
	// Prompts with the same salt share their common prefix as unsalted ones do.
	other := append(tokenIDs(1000, 40), tokenIDs(9000, 40)...)
	oa := sim.BlockHashesSalted(other, 16, "policy-a")
	assert.Equal(t, a[:2], oa[:2], "two common full blocks")
	assert.NotEqual(t, a[2], oa[2])
	assert.Empty(t, sim.BlockHashesSalted(tokenIDs(1, 15), 16, "x"), "no full block, nothing to hash")
}

// The engine reuses a salted prompt's blocks only for the same salt.
func TestSaltedPrefixCache(t *testing.T) {
	e := cachingEngine(t, 4096)
	ids := tokenIDs(500, 16*10+4)
	add := func(id uint64, salt string) int {
		require.NoError(t, e.Add(sim.Request{ID: id, PromptTokens: len(ids), OutputTokens: 3,
			Blocks: sim.BlockHashesSalted(ids, 16, salt)}))
		return drain(t, e)
	}
	assert.Equal(t, len(ids), add(1, ""))
	assert.Equal(t, len(ids), add(2, "a"), "salted after unsalted: a miss")
	assert.Equal(t, 4, add(3, "a"), "the same salt: ten blocks reused")
	assert.Equal(t, len(ids), add(4, "b"), "another salt: a miss")
	assert.Equal(t, 4, add(5, ""), "unsalted still cached")
}

// ResetPrefixCache forgets every cached block once no block is in use, and refuses, changing
// nothing, while a running sequence holds blocks (as vLLM's reset does); PreemptAll frees them
// first. The lookup counters keep counting.
func TestResetPrefixCache(t *testing.T) {
	e := cachingEngine(t, 4096)
	ids := tokenIDs(500, 16*10+4)
	req := func(id uint64, out int) sim.Request {
		return sim.Request{ID: id, PromptTokens: len(ids), OutputTokens: out, Blocks: sim.BlockHashes(ids, 16)}
	}
	require.NoError(t, e.Add(req(1, 3)))
	assert.Equal(t, len(ids), drain(t, e))

	// A long request runs: the reset is refused and the cache still serves.
	require.NoError(t, e.Add(req(2, 50)))
	it := e.Step()
	assert.Equal(t, 4, it.PrefillTokens, "a hit")
	ok, used := e.ResetPrefixCache()
	assert.False(t, ok)
	assert.Positive(t, used)
	usage := e.KVUsage()
	drain(t, e)
	require.NoError(t, e.Add(req(3, 3)))
	assert.Equal(t, 4, drain(t, e), "the refused reset dropped nothing")
	assert.Positive(t, usage)

	// Idle: the reset succeeds and the next prompt misses.
	ok, used = e.ResetPrefixCache()
	assert.True(t, ok)
	assert.Zero(t, used)
	assert.Zero(t, e.KVUsage())
	require.NoError(t, e.Add(req(4, 3)))
	assert.Equal(t, len(ids), drain(t, e), "after the reset: a miss")
	require.NoError(t, e.Add(req(5, 3)))
	assert.Equal(t, 4, drain(t, e), "and the cache fills again")
	st := e.Stats()
	assert.Equal(t, int64(5*len(ids)), st.PrefixQueried, "the counters keep counting")
	assert.Equal(t, int64(3*160), st.PrefixHit)

	// With running sequences preempted first the reset succeeds; they are recomputed and
	// finish with all their tokens.
	require.NoError(t, e.Add(req(6, 40)))
	require.NoError(t, e.Add(sim.Request{ID: 7, PromptTokens: 100, OutputTokens: 40}))
	produced := map[uint64]int{}
	for range 5 {
		for _, p := range e.Step().Produced {
			produced[p.ID] += p.Tokens
		}
	}
	require.Equal(t, 2, e.Running())
	preempted := e.PreemptAll()
	assert.Equal(t, []uint64{7, 6}, preempted, "the most recently admitted first")
	assert.Zero(t, e.Running())
	assert.Equal(t, 2, e.Waiting())
	assert.Equal(t, 2, e.Stats().Preemptions)
	ok, _ = e.ResetPrefixCache()
	require.True(t, ok)
	var admitted []uint64
	prefill := 0
	for i := 0; i < 1000 && !e.Idle(); i++ {
		it := e.Step()
		admitted = append(admitted, it.Admitted...)
		prefill += it.PrefillTokens
		for _, p := range it.Produced {
			produced[p.ID] += p.Tokens
		}
	}
	assert.Equal(t, []uint64{6, 7}, admitted, "re-admitted oldest first")
	assert.Equal(t, 40, produced[6])
	assert.Equal(t, 40, produced[7])
	assert.Greater(t, prefill, len(ids)+100, "prompts and the outputs so far recomputed, with no cache hit")
	assert.Zero(t, e.KVUsage())
}

// Without prefix caching the reset has nothing to forget; a busy engine still refuses.
func TestResetPrefixCacheOff(t *testing.T) {
	e := newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 4096, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 4096})
	ok, _ := e.ResetPrefixCache()
	assert.True(t, ok)
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 100, OutputTokens: 10}))
	e.Step()
	ok, used := e.ResetPrefixCache()
	assert.False(t, ok)
	assert.Equal(t, 7, used)
	assert.Equal(t, []uint64{1}, e.PreemptAll())
	ok, _ = e.ResetPrefixCache()
	assert.True(t, ok)
	assert.Nil(t, e.PreemptAll(), "nothing runs")
}
