package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// iter is the length of every iteration of tenthEngine's engines.
const iter = 100 * time.Millisecond

// tenthEngine returns an engine of cfg whose every iteration lasts exactly 100 ms: Llama-3-8B on
// an A100 with no CPU overheads and a launch floor of 100 ms, far above the GPU work of the
// small batches below (which the function checks), so that times can be followed by hand.
func tenthEngine(t *testing.T, cfg sim.EngineConfig) *sim.Engine {
	t.Helper()
	cm := costModel(t, "A100-80GB", "llama-3-8b")
	coef := cm.Coef
	coef.IterationOverheadMS, coef.PerSeqOverheadMS, coef.LaunchFloorMS = 0, 0, float64(iter/time.Millisecond)
	floored, err := sim.NewCostModel(cm.Model, cm.GPU, coef)
	require.NoError(t, err)
	gpu, over := cm.IterationParts(sim.Batch{Tokens: 64, AttentionPairs: 64 * 64, KVTokens: 64, Seqs: 8, Sampled: 8})
	require.Less(t, gpu+over, iter.Seconds()/2, "the floor dominates every iteration")
	eng, err := sim.NewEngine(cfg, floored)
	require.NoError(t, err)
	return eng
}

// timeline steps eng until it is idle and returns, for every request, when it finished and
// when it was admitted (each admission, in order), with the iterations' records; the clock is
// the sum of the iterations' durations.
func timeline(t *testing.T, eng *sim.Engine, add map[time.Duration][]sim.Request) (finished map[uint64]time.Duration, admitted []uint64, recs []record) {
	t.Helper()
	finished = map[uint64]time.Duration{}
	var now time.Duration
	for n := 0; ; n++ {
		require.Less(t, n, 1000, "the engine does not drain")
		for _, r := range add[now] {
			require.NoError(t, eng.Add(r))
		}
		delete(add, now)
		if eng.Idle() && len(add) == 0 {
			return finished, admitted, recs
		}
		it := eng.Step()
		rec := snapshot(it)
		require.Equal(t, 1, rec.Steps, "iteration %d did nothing", n+1)
		require.Equal(t, iter, rec.Duration, "iteration %d", n+1)
		now += rec.Duration
		recs = append(recs, rec)
		admitted = append(admitted, rec.Admitted...)
		for _, id := range rec.Finished {
			finished[id] = now
		}
	}
}

// The waiting queue of a priority engine is served by (priority, arrival), computed by hand.
// One sequence at a time (max_num_seqs 1), each of a 4-token prompt (one iteration of prefill,
// which samples the first token) and 2 output tokens (a second iteration decodes the last):
// every request takes two 100 ms iterations. Added together, R1 (priority 5), R2 (1), R3 (1)
// and R4 (0) run R4, then R2 and R3 (equal priorities: by arrival), then R1, finishing at 0.2,
// 0.4, 0.6 and 0.8 s. An FCFS engine runs them in arrival order.
func TestPriorityAdmissionOrder(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 1, MaxBatchedTokens: 64, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 16,
		SchedulingPolicy: sim.SchedulingPriority}
	reqs := []sim.Request{
		{ID: 1, PromptTokens: 4, OutputTokens: 2, Priority: 5},
		{ID: 2, PromptTokens: 4, OutputTokens: 2, Priority: 1},
		{ID: 3, PromptTokens: 4, OutputTokens: 2, Priority: 1},
		{ID: 4, PromptTokens: 4, OutputTokens: 2, Priority: 0},
	}
	fin, adm, _ := timeline(t, tenthEngine(t, cfg), map[time.Duration][]sim.Request{0: reqs})
	assert.Equal(t, []uint64{4, 2, 3, 1}, adm)
	assert.Equal(t, map[uint64]time.Duration{4: 2 * iter, 2: 4 * iter, 3: 6 * iter, 1: 8 * iter}, fin)

	cfg.SchedulingPolicy = ""
	for i := range reqs {
		reqs[i].Priority = 0
	}
	fin, adm, _ = timeline(t, tenthEngine(t, cfg), map[time.Duration][]sim.Request{0: reqs})
	assert.Equal(t, []uint64{1, 2, 3, 4}, adm)
	assert.Equal(t, map[uint64]time.Duration{1: 2 * iter, 2: 4 * iter, 3: 6 * iter, 4: 8 * iter}, fin)
}

// When the KV cache runs out, a priority engine preempts the running sequence last in
// (priority, arrival) order, as vLLM V1 does, not the most recently admitted one; computed by
// hand. Blocks of 4 tokens, 10 blocks, no watermark, at most 4 sequences, every iteration
// 100 ms.
//
//	t=0    A (ID 1, priority 2, prompt 6, output 10) arrives.
//	it 1   [0, 0.1]: A is admitted (2 blocks, 8 free) and prefills; its first token.
//	t=0.1  C (ID 3, priority 1, prompt 4, output 8) arrives, then B (ID 2, priority 0) and E
//	       (ID 5, priority 1), both like C.
//	it 2   [0.1, 0.2]: A decodes (7 tokens in its 2 blocks). B is admitted first (priority 0,
//	       though C arrived before it), then C and E (priority 1, by arrival), a block each
//	       (5 free): running A, B, C, E.
//	it 3   B, C and E reach their 5th token: a block each (2 free).
//	it 4   A reaches its 9th token: a block (1 free; A holds 3, the others 2 each).
//	it 5-6 no new block.
//	it 7   [0.6, 0.7]: A (computing its 12th token) is scheduled; B takes the last free block
//	       for its 9th; C needs one and none is free: the victim is A, the running sequence
//	       last in (priority, arrival) order, although it was admitted first and is already
//	       scheduled (FCFS would take E, the newest). A is unscheduled, its token of the
//	       budget given back, and freed (3 blocks), having produced 6 tokens; C gets a block,
//	       and so does E, which took C's place in the shrunk batch (1 free). The iteration
//	       runs B, C and E.
//	t=0.7  D (ID 4, priority 1, prompt 3, output 2) arrives.
//	it 8   B, C and E decode; D is admitted before the preempted A (priority 1 before 2: a
//	       preempted request goes back by its key, not to the front), taking the last block.
//	it 9   [0.8, 0.9]: B, C and E produce their 8th token and D its 2nd (its 4 tokens in one
//	       block): all four finish at 0.9, freeing every block.
//	it 10  A is admitted and recomputes its 12 tokens, sampling its 7th output token.
//	it 11-13 A decodes its 8th to 10th tokens (a 4th block at its 13th token) and finishes at
//	       1.3.
func TestPriorityPreemptionVictim(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 64, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 10,
		SchedulingPolicy: sim.SchedulingPriority}
	work := func(priorities bool) map[time.Duration][]sim.Request {
		p := func(v int) int {
			if priorities {
				return v
			}
			return 0
		}
		return map[time.Duration][]sim.Request{
			0: {{ID: 1, PromptTokens: 6, OutputTokens: 10, Priority: p(2)}},
			iter: {{ID: 3, PromptTokens: 4, OutputTokens: 8, Priority: p(1)}, {ID: 2, PromptTokens: 4, OutputTokens: 8, Priority: p(0)},
				{ID: 5, PromptTokens: 4, OutputTokens: 8, Priority: p(1)}},
			7 * iter: {{ID: 4, PromptTokens: 3, OutputTokens: 2, Priority: p(1)}},
		}
	}
	eng := tenthEngine(t, cfg)
	fin, _, recs := timeline(t, eng, work(true))
	require.Len(t, recs, 13)
	assert.Equal(t, [][]uint64{{1}, {2, 3, 5}, nil, nil, nil, nil, nil, {4}, nil, {1}, nil, nil, nil}, admittedPer(recs),
		"admissions by iteration: A; B before C and E; D before the preempted A; A again")
	for i, r := range recs {
		if i == 6 {
			assert.Equal(t, []uint64{1}, r.Preempted, "iteration 7 preempts A")
			assert.Equal(t, 3, r.Seqs, "iteration 7 runs B, C and E")
			assert.Equal(t, []sim.Produced{{ID: 2, Tokens: 1}, {ID: 3, Tokens: 1}, {ID: 5, Tokens: 1}}, r.Produced)
			continue
		}
		assert.Empty(t, r.Preempted, "iteration %d", i+1)
	}
	assert.Equal(t, 12, recs[9].PrefillTokens, "iteration 10 recomputes A's 6 prompt and 6 output tokens")
	assert.Equal(t, []uint64{2, 3, 5, 4}, recs[8].Finished)
	assert.Equal(t, map[uint64]time.Duration{2: 9 * iter, 3: 9 * iter, 5: 9 * iter, 4: 9 * iter, 1: 13 * iter}, fin)
	assert.Equal(t, 1, eng.Stats().Preemptions)

	// The same work without priorities on an FCFS engine: C, B and E are admitted in arrival
	// order, and in iteration 7, when B needs a block, E, the most recently admitted, is
	// preempted.
	fcfs := cfg
	fcfs.SchedulingPolicy = ""
	_, _, recs = timeline(t, tenthEngine(t, fcfs), work(false))
	assert.Equal(t, []uint64{3, 2, 5}, recs[1].Admitted, "FCFS admits in arrival order")
	assert.Equal(t, []uint64{5}, recs[6].Preempted, "FCFS preempts the newest")
}

// A victim that was already scheduled in the iteration gives its tokens back to the budget,
// which a later sequence's prompt chunk then uses (vLLM PR #26661); computed by hand. Blocks
// of 4 tokens, 7 blocks, no watermark, a budget of 8 tokens.
//
//	t=0    A (ID 1, priority 1, prompt 7) arrives.
//	it 1   A is admitted and prefills 7 tokens (2 blocks, 5 free).
//	       X (ID 2, priority 0, prompt 3) and P (ID 3, priority 0, prompt 26) arrive.
//	it 2   A decodes its 8th token (1 of the budget); X is admitted with its 3 tokens and P
//	       with the 4 left, a block each (3 free): running A, X, P.
//	it 3   A takes a block for its 9th token and P 2 for its tokens 5 to 10, 6 of the budget
//	       after A's and X's decodes (0 free).
//	it 4   A is scheduled (1 of the budget); X needs a block for its 5th token and none is
//	       free: the victim is A (priority 1, the others 0), which gives back its token and 3
//	       blocks; X takes a block (7 of the budget left) and P prefills 7 tokens, 11 to 17,
//	       in 2 new blocks. Without the budget given back P would prefill 6.
func TestPriorityPreemptionReturnsBudget(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 8, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 7,
		SchedulingPolicy: sim.SchedulingPriority}
	eng := tenthEngine(t, cfg)
	require.NoError(t, eng.Add(sim.Request{ID: 1, PromptTokens: 7, OutputTokens: 20, Priority: 1}))
	recs := []record{snapshot(eng.Step())}
	require.NoError(t, eng.Add(sim.Request{ID: 2, PromptTokens: 3, OutputTokens: 20}))
	require.NoError(t, eng.Add(sim.Request{ID: 3, PromptTokens: 26, OutputTokens: 2}))
	for range 3 {
		recs = append(recs, snapshot(eng.Step()))
	}
	assert.Equal(t, []int{7, 7, 6, 7}, []int{recs[0].PrefillTokens, recs[1].PrefillTokens, recs[2].PrefillTokens, recs[3].PrefillTokens},
		"prompt tokens per iteration")
	assert.Equal(t, [][]uint64{nil, nil, nil, {1}}, [][]uint64{recs[0].Preempted, recs[1].Preempted, recs[2].Preempted, recs[3].Preempted})
	assert.Equal(t, 2, recs[3].Seqs, "iteration 4 runs X and P")
	assert.Equal(t, []sim.Produced{{ID: 2, Tokens: 1}}, recs[3].Produced)
	assert.InDelta(t, 1.0, eng.KVUsage(), 1e-12, "X and P hold all 7 blocks")
}

// admittedPer lists each iteration's admissions (nil for none).
func admittedPer(recs []record) [][]uint64 {
	out := make([][]uint64, len(recs))
	for i, r := range recs {
		if len(r.Admitted) > 0 {
			out[i] = r.Admitted
		}
	}
	return out
}

// A priority engine refuses nothing an FCFS engine accepts, and an FCFS engine refuses a
// request with a priority other than 0 (vLLM V0 raised "Got priority N but Priority scheduling
// is not enabled."; V1 would ignore it).
func TestFCFSRefusesPriority(t *testing.T) {
	eng := newEngine(t, sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 64, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 16})
	err := eng.Add(sim.Request{ID: 7, PromptTokens: 4, OutputTokens: 2, Priority: -3})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "request 7: priority -3")
	assert.Contains(t, err.Error(), "first come first served")
	assert.Zero(t, eng.Waiting(), "the refused request is not queued")
	require.NoError(t, eng.Add(sim.Request{ID: 8, PromptTokens: 4, OutputTokens: 2}))

	prio := newEngine(t, sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 64, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 16,
		SchedulingPolicy: sim.SchedulingPriority})
	require.NoError(t, prio.Add(sim.Request{ID: 7, PromptTokens: 4, OutputTokens: 2, Priority: -3}))
}

func TestSchedulingPolicyValidate(t *testing.T) {
	base := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 64, ChunkedPrefill: true, BlockSize: 4, NumBlocks: 16}
	for _, tc := range []struct {
		policy  string
		chunked bool
		err     string
	}{
		{"", true, ""}, {"fcfs", true, ""}, {"priority", true, ""}, {"fcfs", false, ""},
		{"priority", false, "needs chunked prefill"},
		{"lifo", true, `unknown scheduling policy "lifo"`},
	} {
		t.Run(fmt.Sprintf("%s/chunked=%t", tc.policy, tc.chunked), func(t *testing.T) {
			c := base
			c.SchedulingPolicy, c.ChunkedPrefill = tc.policy, tc.chunked
			if c.ChunkedPrefill {
				c.MaxBatchedTokens = 64
			}
			err := c.Validate()
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// The priority engine's general path matches the invariants of any engine on random work with
// random priorities: tokens conserved, every request finished once, the cache never
// overflowing (checker), and it is deterministic.
func TestPriorityEngineRandomWork(t *testing.T) {
	for _, seed := range seeds[:3] {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			run := func() []record {
				eng := newEngine(t, sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 256, ChunkedPrefill: true, BlockSize: 16,
					NumBlocks: 40, SchedulingPolicy: sim.SchedulingPriority})
				c := newChecker(t, eng)
				c.priority = true
				rng := sim.Stream(seed, "priority-test")
				for _, r := range randomRequests(rng, 60, 200, 150) {
					r.Priority = rng.IntN(4) - 1
					c.add(r)
				}
				c.drain(true)
				require.Positive(t, eng.Stats().Preemptions, "the work preempts")
				return c.records
			}
			assert.Equal(t, run(), run())
		})
	}
}
