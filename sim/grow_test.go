package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// An open request prefills what it has, then waits producing nothing (the engine is idle);
// Grow adds tokens that are prefilled at the next iteration, and the close lets it decode.
func TestGrowOpenRequest(t *testing.T) {
	e := newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 4096, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 1000})
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 500, OutputTokens: 3, Open: true}))
	it := e.Step()
	assert.Equal(t, 500, it.PrefillTokens)
	assert.Empty(t, it.Produced, "an open request samples nothing")
	assert.True(t, e.Idle(), "a stalled open request is no work")
	assert.Equal(t, 0, e.Step().Steps)
	require.NoError(t, e.Grow(1, 40, false))
	it = e.Step()
	assert.Equal(t, 40, it.PrefillTokens)
	assert.Empty(t, it.Produced)
	require.NoError(t, e.Grow(1, 0, true))
	it = e.Step()
	assert.Equal(t, 1, it.PrefillTokens, "nothing new: the last prompt token is computed again to sample")
	assert.Equal(t, []uint64{1}, it.FirstToken)
	for !e.Idle() {
		it = e.Advance(0)
	}
	assert.Equal(t, []uint64{1}, it.Finished)
	assert.ErrorContains(t, e.Grow(1, 1, true), "not in the engine")
	require.NoError(t, e.Add(sim.Request{ID: 2, PromptTokens: 5, OutputTokens: 3}))
	assert.ErrorContains(t, e.Grow(2, 1, true), "not open")
}

// A stalled open request gives its KV blocks to a request that can run (it goes back to the
// queue and is prefilled again later), so parents never wait behind their children.
func TestStalledRequestYields(t *testing.T) {
	e := newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 4096, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 100})
	require.NoError(t, e.Add(sim.Request{ID: 1, PromptTokens: 1200, OutputTokens: 5, Open: true})) // 75 blocks
	e.Step()
	require.True(t, e.Idle())
	require.NoError(t, e.Add(sim.Request{ID: 2, PromptTokens: 600, OutputTokens: 10})) // 38 blocks with its output
	it := e.Step()
	assert.Equal(t, []uint64{1}, it.Preempted, "the stalled request yields")
	assert.Equal(t, []uint64{2}, it.Admitted)
	require.NoError(t, e.Grow(1, 0, true))
	for i := 0; i < 1000 && !e.Idle(); i++ {
		e.Advance(0)
	}
	require.True(t, e.Idle(), "both finish")
	assert.Equal(t, 1, e.Stats().Preemptions)
}
