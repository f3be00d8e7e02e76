package sim_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// costModel binds a catalog model to a catalog GPU with the built-in profile's coefficients.
func costModel(tb testing.TB, gpu, model string) *sim.CostModel {
	tb.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU(gpu)
	require.NoError(tb, err)
	m, err := cat.Model(model)
	require.NoError(tb, err)
	cm, err := sim.NewCostModel(m, g, sim.DefaultProfile().For(g))
	require.NoError(tb, err)
	return cm
}

func newEngine(tb testing.TB, cfg sim.EngineConfig) *sim.Engine {
	tb.Helper()
	eng, err := sim.NewEngine(cfg, costModel(tb, "A100-80GB", "llama-3-8b"))
	require.NoError(tb, err)
	return eng
}

// record is a deep copy of an Iteration, whose slices the engine reuses.
type record struct {
	Duration      time.Duration
	Steps         int
	Seqs          int
	PrefillTokens int
	Produced      []sim.Produced
	FirstToken    []uint64
	Finished      []uint64
	Preempted     []uint64
	Admitted      []uint64
}

func snapshot(it *sim.Iteration) record {
	return record{
		Duration:      it.Duration,
		Steps:         it.Steps,
		Seqs:          it.Seqs,
		PrefillTokens: it.PrefillTokens,
		Produced:      slices.Clone(it.Produced),
		FirstToken:    slices.Clone(it.FirstToken),
		Finished:      slices.Clone(it.Finished),
		Preempted:     slices.Clone(it.Preempted),
		Admitted:      slices.Clone(it.Admitted),
	}
}

// randomRequests draws n requests whose full sequence fits both the cache and, for engines
// without chunked prefill, the token budget.
func randomRequests(rng *rand.Rand, n, maxPrompt, maxOutput int) []sim.Request {
	reqs := make([]sim.Request, n)
	for i := range reqs {
		reqs[i] = sim.Request{
			ID:           uint64(i + 1),
			PromptTokens: 1 + rng.IntN(maxPrompt),
			OutputTokens: 1 + rng.IntN(maxOutput),
		}
	}
	return reqs
}

// checker drives an engine and checks its invariants after every call: tokens are conserved,
// each request gets its first token and finishes exactly once, the KV cache never overflows,
// the batch respects its caps, and preemption always evicts the most recently admitted
// sequence (with priority set, the running sequence last in (priority, arrival) order).
type checker struct {
	// priority says the engine schedules by priority; arrival numbers the requests added.
	priority bool
	arrival  map[uint64]int
	prio     map[uint64]int
	t        *testing.T
	eng      *sim.Engine
	cfg      sim.EngineConfig
	want     map[uint64]int // output tokens of every added request
	tokens   map[uint64]int
	first    map[uint64]int
	done     map[uint64]int
	// decoding marks sequences whose prompt (or recomputation) is done.
	decoding map[uint64]bool
	running  []uint64 // admission order, as the engine's promises imply it
	order    []uint64 // finish order
	records  []record
	steps    uint64
	busy     time.Duration
}

func newChecker(t *testing.T, eng *sim.Engine) *checker {
	return &checker{
		t: t, eng: eng, cfg: eng.Config(),
		want: map[uint64]int{}, tokens: map[uint64]int{}, first: map[uint64]int{}, done: map[uint64]int{},
		decoding: map[uint64]bool{}, arrival: map[uint64]int{}, prio: map[uint64]int{},
	}
}

func (c *checker) add(r sim.Request) {
	require.NoError(c.t, c.eng.Add(r))
	c.want[r.ID] = r.OutputTokens
	c.arrival[r.ID], c.prio[r.ID] = len(c.arrival), r.Priority
}

// victim is the index in running of the sequence the engine must preempt next.
func (c *checker) victim() int {
	if !c.priority {
		return len(c.running) - 1
	}
	v := 0
	for i, id := range c.running {
		w := c.running[v]
		if c.prio[id] > c.prio[w] || c.prio[id] == c.prio[w] && c.arrival[id] > c.arrival[w] {
			v = i
		}
	}
	return v
}

func (c *checker) call(advance bool) record {
	t := c.t
	var it *sim.Iteration
	if advance {
		it = c.eng.Advance(0)
	} else {
		it = c.eng.Step()
	}
	rec := snapshot(it)
	c.records = append(c.records, rec)
	c.steps += uint64(rec.Steps)
	c.busy += rec.Duration

	usage := c.eng.KVUsage()
	require.GreaterOrEqual(t, usage, 0.0, "KV usage")
	require.LessOrEqual(t, usage, 1.0, "KV usage")
	require.LessOrEqual(t, rec.Seqs, c.cfg.MaxNumSeqs, "batch larger than max_num_seqs")
	require.LessOrEqual(t, rec.PrefillTokens, c.cfg.MaxBatchedTokens, "prefill beyond the token budget")
	if rec.Steps == 1 {
		// One iteration: prompt chunks plus one token per decoding sequence fit the budget.
		decodes := 0
		for _, p := range rec.Produced {
			if c.decoding[p.ID] {
				decodes++
			}
		}
		require.LessOrEqual(t, rec.PrefillTokens+decodes, c.cfg.MaxBatchedTokens, "iteration beyond the token budget")
	}
	require.GreaterOrEqual(t, rec.Duration, time.Duration(0))
	if rec.Steps == 0 {
		require.Zero(t, rec.Duration)
		require.Empty(t, rec.Produced)
	} else {
		require.Positive(t, rec.Duration)
	}

	// Preemption evicts from the end of the running batch (priority: the last in priority
	// order), before anything is admitted.
	for _, id := range rec.Preempted {
		require.NotEmpty(t, c.running, "preempted %d with nothing running", id)
		v := c.victim()
		require.Equal(t, c.running[v], id, "preempted %d, but the victim is %d (running %v)", id, c.running[v], c.running)
		c.running = slices.Delete(c.running, v, v+1)
		c.decoding[id] = false
	}
	if !c.cfg.ChunkedPrefill && len(rec.Admitted) > 0 {
		// V0: an iteration that admits runs only the admitted prompts, each to its end.
		ids := make([]uint64, 0, len(rec.Produced))
		for _, p := range rec.Produced {
			ids = append(ids, p.ID)
		}
		require.Equal(t, rec.Admitted, ids, "a V0 prefill iteration must run only, and all of, its new prompts")
	}
	for _, id := range rec.Admitted {
		_, known := c.want[id]
		require.True(t, known, "admitted unknown request %d", id)
		require.NotContains(t, c.running, id, "admitted %d twice", id)
		c.running = append(c.running, id)
	}
	for _, p := range rec.Produced {
		require.Contains(t, c.running, p.ID, "request %d produced tokens while not running", p.ID)
		require.Positive(t, p.Tokens)
		require.LessOrEqual(t, p.Tokens, rec.Steps)
		c.tokens[p.ID] += p.Tokens
		c.decoding[p.ID] = true
		require.LessOrEqual(t, c.tokens[p.ID], c.want[p.ID], "request %d produced more than it asked for", p.ID)
	}
	for _, id := range rec.FirstToken {
		c.first[id]++
		require.Equal(t, 1, c.first[id], "request %d got its first token twice", id)
		require.Equal(t, c.tokens[id], rec.produced(id), "first token of %d outside the iteration's production", id)
	}
	for _, id := range rec.Finished {
		c.done[id]++
		require.Equal(t, 1, c.done[id], "request %d finished twice", id)
		require.Equal(t, c.want[id], c.tokens[id], "request %d finished with the wrong number of tokens", id)
		i := slices.Index(c.running, id)
		require.GreaterOrEqual(t, i, 0, "finished %d was not running", id)
		c.running = slices.Delete(c.running, i, i+1)
		c.order = append(c.order, id)
	}
	require.Equal(t, len(c.running), c.eng.Running(), "running batch")
	st := c.eng.Stats()
	require.Equal(t, c.steps, st.Steps)
	require.Equal(t, c.busy, st.Busy)
	return rec
}

func (r record) produced(id uint64) int {
	for _, p := range r.Produced {
		if p.ID == id {
			return p.Tokens
		}
	}
	return 0
}

// drain calls the engine until it is idle and checks the end state.
func (c *checker) drain(advance bool) {
	t := c.t
	stalled := 0
	for i := 0; !c.eng.Idle(); i++ {
		require.Less(t, i, 1_000_000, "engine did not drain")
		rec := c.call(advance)
		if rec.Steps == 0 && len(rec.Preempted) == 0 {
			stalled++
			require.Less(t, stalled, 3, "engine stalled with work queued")
		} else {
			stalled = 0
		}
	}
	c.finalCheck()
}

func (c *checker) finalCheck() {
	t := c.t
	require.Zero(t, c.eng.Waiting())
	require.Zero(t, c.eng.Running())
	assert.Zero(t, c.eng.KVUsage(), "KV blocks leaked")
	assert.Len(t, c.order, len(c.want), "every request finishes")
	for id, want := range c.want {
		assert.Equal(t, want, c.tokens[id], "tokens of request %d", id)
		assert.Equal(t, 1, c.first[id], "first tokens of request %d", id)
		assert.Equal(t, 1, c.done[id], "finishes of request %d", id)
	}
	preempted := 0
	for _, r := range c.records {
		preempted += len(r.Preempted)
	}
	assert.Equal(t, preempted, c.eng.Stats().Preemptions)
}

type engineCase struct {
	name string
	cfg  sim.EngineConfig
}

// engineCases are small caches (so that preemption happens), with small and large batches,
// chunked prefill on and off.
func engineCases() []engineCase {
	var cases []engineCase
	for _, chunked := range []bool{true, false} {
		for _, seqs := range []int{2, 5, 64} {
			for _, blocks := range []int{40, 400} {
				cases = append(cases, engineCase{
					name: fmt.Sprintf("chunked=%t/seqs=%d/blocks=%d", chunked, seqs, blocks),
					cfg: sim.EngineConfig{
						MaxNumSeqs: seqs, MaxBatchedTokens: 512, ChunkedPrefill: chunked,
						BlockSize: 16, NumBlocks: blocks, WatermarkBlocks: 1,
					},
				})
			}
		}
	}
	return cases
}

var seeds = []uint64{1, 2, 3, 4, 5}

// workload fits every configuration of engineCases: at most 300 + 200 = 500 tokens, which is
// within the 512-token budget and the 39 usable blocks of 16 tokens.
func workload(seed uint64) []sim.Request {
	return randomRequests(sim.Stream(seed, "engine-test"), 40, 300, 200)
}

func TestEngineInvariants(t *testing.T) {
	for _, tc := range engineCases() {
		for _, seed := range seeds {
			for _, advance := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/seed=%d/advance=%t", tc.name, seed, advance), func(t *testing.T) {
					c := newChecker(t, newEngine(t, tc.cfg))
					reqs := workload(seed)
					// Half up front, the rest trickling in between calls.
					for _, r := range reqs[:len(reqs)/2] {
						c.add(r)
					}
					rng := sim.Stream(seed, "arrivals")
					for _, r := range reqs[len(reqs)/2:] {
						for k := rng.IntN(4); k > 0 && !c.eng.Idle(); k-- {
							c.call(advance)
						}
						c.add(r)
					}
					c.drain(advance)
				})
			}
		}
	}
}

// TestAdvanceMatchesStep checks that Advance's closed-form decode stretches give the results
// of stepping one iteration at a time.
func TestAdvanceMatchesStep(t *testing.T) {
	for _, tc := range engineCases() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				assertAdvanceMatchesStep(t, func() *sim.Engine { return newEngine(t, tc.cfg) }, seed)
			})
		}
	}
}

// assertAdvanceMatchesStep drains workload(seed) from two fresh engines, one stepping and one
// advancing, and compares what they did.
func assertAdvanceMatchesStep(t *testing.T, engine func() *sim.Engine, seed uint64) {
	t.Helper()
	run := func(advance bool) *checker {
		c := newChecker(t, engine())
		for _, r := range workload(seed) {
			c.add(r)
		}
		c.drain(advance)
		return c
	}
	step, adv := run(false), run(true)
	assert.Equal(t, step.order, adv.order, "finish order")
	assert.Equal(t, step.tokens, adv.tokens, "tokens per request")
	assert.Equal(t, firstOrder(step.records), firstOrder(adv.records), "first-token order")
	assert.Equal(t, step.steps, adv.steps, "iterations")
	assert.Equal(t, step.eng.Stats().Preemptions, adv.eng.Stats().Preemptions, "preemptions")
	assert.LessOrEqual(t, len(adv.records), len(step.records))
	tol := time.Duration(step.steps) * time.Microsecond
	assert.InDelta(t, float64(step.busy), float64(adv.busy), float64(tol), "total duration")
	// Finish times too, not only the total.
	sf, af := finishTimes(step.records), finishTimes(adv.records)
	for id, want := range sf {
		assert.InDelta(t, float64(want), float64(af[id]), float64(tol), "finish time of %d", id)
	}
}

// With a launch floor, Advance's closed-form stretches still match single steps: one floor
// lies between the GPU parts of the workload's smallest and largest decode batches, so
// stretches cross it as their contexts grow; the other lies above them all.
func TestAdvanceMatchesStepLaunchFloor(t *testing.T) {
	cm := costModel(t, "A100-80GB", "llama-3-8b")
	decode := func(n, ctx int) sim.Batch {
		return sim.Batch{Tokens: n, AttentionPairs: float64(ctx), KVTokens: float64(ctx), Seqs: n, Sampled: n}
	}
	lo, _ := cm.IterationParts(decode(1, 1))
	hi, _ := cm.IterationParts(decode(64, 64*500))
	require.Less(t, lo, hi)
	for _, floor := range []float64{(lo + hi) / 2, 2 * hi} {
		coef := cm.Coef
		coef.LaunchFloorMS = floor * 1e3
		floored, err := sim.NewCostModel(cm.Model, cm.GPU, coef)
		require.NoError(t, err)
		gpu, over := floored.IterationParts(decode(1, 1))
		require.InDelta(t, floor, gpu, 1e-12, "a small decode's GPU part is the floor")
		gpu, _ = floored.IterationParts(decode(64, 64*500))
		require.InDelta(t, max(floor, hi), gpu, 1e-12)
		require.Positive(t, over)
		for _, tc := range engineCases() {
			for _, seed := range seeds[:2] {
				t.Run(fmt.Sprintf("floor=%.1fms/%s/seed=%d", floor*1e3, tc.name, seed), func(t *testing.T) {
					assertAdvanceMatchesStep(t, func() *sim.Engine {
						eng, err := sim.NewEngine(tc.cfg, floored)
						require.NoError(t, err)
						return eng
					}, seed)
				})
			}
		}
	}
}

// TestAdvanceMatchesStepBlockSizes covers the block sizes at the edges of Advance's
// block-counting (1 token per block, the 64-entry fast path and beyond it).
func TestAdvanceMatchesStepBlockSizes(t *testing.T) {
	for _, bs := range []int{1, 7, 16, 64, 65, 128} {
		for _, chunked := range []bool{true, false} {
			t.Run(fmt.Sprintf("block_size=%d/chunked=%t", bs, chunked), func(t *testing.T) {
				cfg := sim.EngineConfig{
					MaxNumSeqs: 8, MaxBatchedTokens: 512, ChunkedPrefill: chunked,
					BlockSize: bs, NumBlocks: 640/bs + 2, WatermarkBlocks: 1,
				}
				assertAdvanceMatchesStep(t, func() *sim.Engine { return newEngine(t, cfg) }, uint64(bs))
			})
		}
	}
}

// TestAdvanceOneTokenPromptChunk: when chunked prefill leaves exactly one prompt token for the
// next iteration, that iteration computes the last prompt token and samples the first output
// token. Advance must report it as a first token, as Step does, even though the iteration
// looks like a decode (one token to compute).
func TestAdvanceOneTokenPromptChunk(t *testing.T) {
	for _, tt := range []struct {
		name   string
		prompt int
		output int
	}{
		{"one token left", 101, 5},
		{"one token left, one output", 101, 1},
		{"two tokens left", 102, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 100, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 64}
			run := func(advance bool) *checker {
				c := newChecker(t, newEngine(t, cfg))
				c.add(sim.Request{ID: 1, PromptTokens: tt.prompt, OutputTokens: tt.output})
				first := c.call(false) // a 100-token chunk
				require.Equal(t, 100, first.PrefillTokens)
				require.Empty(t, first.Produced)
				c.drain(advance)
				return c
			}
			step, adv := run(false), run(true)
			assert.Equal(t, []uint64{1}, firstOrder(step.records), "Step reports the first token")
			assert.Equal(t, []uint64{1}, firstOrder(adv.records),
				"Advance reports the first token (engine.go steadySteps takes a 1-token prompt remainder for a decode)")
			assert.Equal(t, tt.prompt, prefill(step.records), "Step counts every prompt token as prefill")
			assert.Equal(t, tt.prompt, prefill(adv.records), "Advance counts every prompt token as prefill")
		})
	}
}

func prefill(recs []record) int {
	n := 0
	for _, r := range recs {
		n += r.PrefillTokens
	}
	return n
}

func firstOrder(recs []record) []uint64 {
	var ids []uint64
	for _, r := range recs {
		ids = append(ids, r.FirstToken...)
	}
	return ids
}

func finishTimes(recs []record) map[uint64]time.Duration {
	out := map[uint64]time.Duration{}
	var now time.Duration
	for _, r := range recs {
		now += r.Duration
		for _, id := range r.Finished {
			out[id] = now
		}
	}
	return out
}

func TestEngineDeterministic(t *testing.T) {
	for _, tc := range engineCases() {
		for _, advance := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/advance=%t", tc.name, advance), func(t *testing.T) {
				run := func() []record {
					c := newChecker(t, newEngine(t, tc.cfg))
					for _, r := range workload(7) {
						c.add(r)
					}
					c.drain(advance)
					return c.records
				}
				require.Equal(t, run(), run())
			})
		}
	}
}

// TestRenewMatchesNew checks that an engine renewed after a run (reusing its buffers) runs
// the next work exactly as a new one, and that Renew refuses an engine holding sequences.
func TestRenewMatchesNew(t *testing.T) {
	for _, tc := range engineCases() {
		t.Run(tc.name, func(t *testing.T) {
			run := func(e *sim.Engine) []record {
				c := newChecker(t, e)
				for _, r := range workload(7) {
					c.add(r)
				}
				c.drain(false)
				return c.records
			}
			used := newEngine(t, tc.cfg)
			run(used)
			renewed, ok := used.Renew()
			require.True(t, ok)
			require.True(t, used.Idle())
			// The renewed engine's buffers are empty rather than nil: the same iterations.
			norm := func(rs []record) []record {
				for i := range rs {
					r := &rs[i]
					for _, l := range []*[]uint64{&r.FirstToken, &r.Finished, &r.Preempted, &r.Admitted} {
						if len(*l) == 0 {
							*l = nil
						}
					}
					if len(r.Produced) == 0 {
						r.Produced = nil
					}
				}
				return rs
			}
			require.Equal(t, norm(run(newEngine(t, tc.cfg))), norm(run(renewed)))

			busy := newEngine(t, tc.cfg)
			require.NoError(t, busy.Add(sim.Request{ID: 1, PromptTokens: 10, OutputTokens: 10}))
			_, ok = busy.Renew()
			require.False(t, ok)
		})
	}
}

func TestAddRejects(t *testing.T) {
	// 20 blocks of 16 tokens, 2 kept as watermark: 288 tokens fit one sequence.
	cfg := func(chunked bool) sim.EngineConfig {
		return sim.EngineConfig{
			MaxNumSeqs: 4, MaxBatchedTokens: 256, ChunkedPrefill: chunked,
			BlockSize: 16, NumBlocks: 20, WatermarkBlocks: 2,
		}
	}
	tests := []struct {
		name    string
		chunked bool
		req     sim.Request
		wantErr string // empty: accepted
	}{
		{"zero prompt", true, sim.Request{ID: 1, PromptTokens: 0, OutputTokens: 5}, "must be positive"},
		{"negative prompt", true, sim.Request{ID: 1, PromptTokens: -3, OutputTokens: 5}, "must be positive"},
		{"zero output", true, sim.Request{ID: 1, PromptTokens: 5, OutputTokens: 0}, "must be positive"},
		{"negative output", false, sim.Request{ID: 1, PromptTokens: 5, OutputTokens: -1}, "must be positive"},
		{"fills the cache exactly", true, sim.Request{ID: 1, PromptTokens: 200, OutputTokens: 88}, ""},
		{"one token too many for the cache", true, sim.Request{ID: 1, PromptTokens: 200, OutputTokens: 89}, "KV blocks"},
		{"far too large for the cache", true, sim.Request{ID: 1, PromptTokens: 5_000, OutputTokens: 1}, "KV blocks"},
		{"beyond the model's context", true, sim.Request{ID: 1, PromptTokens: 8_000, OutputTokens: 193}, "max_model_len 8192"},
		{"chunked prompt beyond the budget", true, sim.Request{ID: 1, PromptTokens: 280, OutputTokens: 1}, ""},
		{"V0 sequence within the budget", false, sim.Request{ID: 1, PromptTokens: 200, OutputTokens: 56}, ""},
		{"V0 sequence beyond the budget", false, sim.Request{ID: 1, PromptTokens: 200, OutputTokens: 57}, "token budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := newEngine(t, cfg(tt.chunked))
			err := eng.Add(tt.req)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, 1, eng.Waiting())
				// An accepted request must also be servable.
				c := newChecker(t, eng)
				c.want[tt.req.ID] = tt.req.OutputTokens
				c.drain(true)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			assert.True(t, eng.Idle(), "a rejected request must not be queued")
		})
	}
}

func TestEngineConfigValidate(t *testing.T) {
	ok := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 64, BlockSize: 16, NumBlocks: 8, WatermarkBlocks: 1}
	tests := []struct {
		name string
		edit func(*sim.EngineConfig)
	}{
		{"no sequences", func(c *sim.EngineConfig) { c.MaxNumSeqs = 0 }},
		{"budget below max_num_seqs", func(c *sim.EngineConfig) { c.MaxBatchedTokens = 3 }},
		{"no block size", func(c *sim.EngineConfig) { c.BlockSize = 0 }},
		{"no blocks", func(c *sim.EngineConfig) { c.NumBlocks = 0 }},
		{"negative watermark", func(c *sim.EngineConfig) { c.WatermarkBlocks = -1 }},
		{"watermark is the whole cache", func(c *sim.EngineConfig) { c.WatermarkBlocks = 8 }},
	}
	require.NoError(t, ok.Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			require.Error(t, cfg.Validate())
			_, err := sim.NewEngine(cfg, costModel(t, "A100-80GB", "llama-3-8b"))
			require.Error(t, err)
		})
	}
}

// TestPreemption fills a tiny cache with sequences that all grow, so the engine must evict;
// checker.call verifies on every iteration that the victim is the most recently admitted.
func TestPreemption(t *testing.T) {
	for _, chunked := range []bool{true, false} {
		for _, advance := range []bool{false, true} {
			t.Run(fmt.Sprintf("chunked=%t/advance=%t", chunked, advance), func(t *testing.T) {
				eng := newEngine(t, sim.EngineConfig{
					MaxNumSeqs: 8, MaxBatchedTokens: 512, ChunkedPrefill: chunked,
					BlockSize: 16, NumBlocks: 24, WatermarkBlocks: 0,
				})
				c := newChecker(t, eng)
				// Four prompts of 4 blocks that grow to 9 blocks each: 36 > 24.
				for id := uint64(1); id <= 4; id++ {
					c.add(sim.Request{ID: id, PromptTokens: 64, OutputTokens: 80})
				}
				c.drain(advance)
				st := eng.Stats()
				require.Positive(t, st.Preemptions)
				// The first victim is the last of the four admitted together.
				for _, r := range c.records {
					if len(r.Preempted) > 0 {
						assert.Equal(t, uint64(4), r.Preempted[0])
						break
					}
				}
			})
		}
	}
}

func TestServeArrivals(t *testing.T) {
	for _, chunked := range []bool{true, false} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("chunked=%t/seed=%d", chunked, seed), func(t *testing.T) {
				eng := newEngine(t, sim.EngineConfig{
					MaxNumSeqs: 6, MaxBatchedTokens: 512, ChunkedPrefill: chunked,
					BlockSize: 16, NumBlocks: 60, WatermarkBlocks: 1,
				})
				rng := sim.Stream(seed, "serve")
				reqs := randomRequests(rng, 50, 300, 200)
				arrivals := make([]sim.Arrival, len(reqs))
				var want int64
				var last time.Duration
				for i, r := range reqs {
					// Out of order, with ties and with gaps during which the engine idles.
					at := time.Duration(rng.IntN(40)) * 50 * time.Millisecond
					arrivals[i] = sim.Arrival{At: at, Request: r}
					want += int64(r.OutputTokens)
					last = max(last, at)
				}
				res, err := sim.Serve(eng, arrivals)
				require.NoError(t, err)
				assert.Equal(t, len(reqs), res.Requests)
				assert.Equal(t, want, res.OutputTokens)
				assert.GreaterOrEqual(t, res.Makespan, last, "makespan before the last arrival")
				require.Len(t, res.Times, len(reqs))
				var latest time.Duration
				for i, tm := range res.Times {
					a := arrivals[i]
					assert.Equal(t, a.ID, tm.ID, "times are in the order given")
					assert.Equal(t, a.At, tm.Arrival)
					assert.Greater(t, tm.FirstToken, tm.Arrival, "request %d got a token before it arrived", a.ID)
					assert.GreaterOrEqual(t, tm.Finish, tm.FirstToken, "request %d", a.ID)
					if a.OutputTokens == 1 {
						assert.Equal(t, tm.FirstToken, tm.Finish, "request %d", a.ID)
					}
					latest = max(latest, tm.Finish)
				}
				assert.Equal(t, latest, res.Makespan)
				assert.True(t, eng.Idle())
				assert.LessOrEqual(t, res.Stats.Busy, res.Makespan)
			})
		}
	}
}

func TestServeErrors(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 256, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 32}
	tests := []struct {
		name    string
		reqs    []sim.Arrival
		wantErr string
	}{
		{"duplicate id", []sim.Arrival{
			{Request: sim.Request{ID: 1, PromptTokens: 10, OutputTokens: 1}},
			{At: time.Second, Request: sim.Request{ID: 1, PromptTokens: 10, OutputTokens: 1}},
		}, "duplicate request id 1"},
		{"too large for the cache", []sim.Arrival{
			{Request: sim.Request{ID: 1, PromptTokens: 10, OutputTokens: 1}},
			{At: time.Second, Request: sim.Request{ID: 2, PromptTokens: 1000, OutputTokens: 1}},
		}, "request 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sim.Serve(newEngine(t, cfg), tt.reqs)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	t.Run("no requests", func(t *testing.T) {
		res, err := sim.Serve(newEngine(t, cfg), nil)
		require.NoError(t, err)
		assert.Zero(t, res.Makespan)
		assert.Zero(t, res.OutputThroughput())
	})
}

// TestEngineRealisticCache runs long sequences on a cache sized by the cost model, where
// sequences outgrow the cache in the middle of long decode stretches.
func TestEngineRealisticCache(t *testing.T) {
	cat := sim.DefaultCatalog()
	m, err := cat.Model("llama-2-7b")
	require.NoError(t, err)
	g, err := cat.GPU("A100-40GB")
	require.NoError(t, err)
	cm, err := sim.NewCostModel(m, g, sim.DefaultProfile().For(g))
	require.NoError(t, err)
	blocks, err := cm.KVBlocks(0.9, 4096, 16)
	require.NoError(t, err)
	cfg := sim.EngineConfig{
		MaxNumSeqs: 256, MaxBatchedTokens: 4096, ChunkedPrefill: true,
		BlockSize: 16, NumBlocks: blocks, WatermarkBlocks: blocks / 100,
	}
	run := func(advance bool) *checker {
		eng, err := sim.NewEngine(cfg, cm)
		require.NoError(t, err)
		c := newChecker(t, eng)
		for id := uint64(1); id <= 32; id++ {
			c.add(sim.Request{ID: id, PromptTokens: 2048, OutputTokens: 2048})
		}
		c.drain(advance)
		return c
	}
	step, adv := run(false), run(true)
	require.Positive(t, step.eng.Stats().Preemptions, "32 sequences of 4096 tokens must outgrow %d blocks", blocks)
	assert.Equal(t, step.order, adv.order)
	assert.Equal(t, step.steps, adv.steps)
	assert.Equal(t, step.eng.Stats().Preemptions, adv.eng.Stats().Preemptions)
	assert.InDelta(t, float64(step.busy), float64(adv.busy), float64(time.Duration(step.steps)*time.Microsecond))
	assert.Less(t, len(adv.records), len(step.records)/10, "Advance should cover decode stretches in few calls")
}

// TestAdvanceHorizon checks that Advance(h) stops at the first iteration boundary at or after
// h, as the same engine stepped one iteration at a time would reach it.
func TestAdvanceHorizon(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 2048, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 1000}
	prepare := func() *sim.Engine {
		eng := newEngine(t, cfg)
		for id := uint64(1); id <= 4; id++ {
			require.NoError(t, eng.Add(sim.Request{ID: id, PromptTokens: 100 * int(id), OutputTokens: 500}))
		}
		eng.Step() // prefill: the batch then decodes steadily
		return eng
	}
	tests := []struct {
		name    string
		horizon time.Duration
	}{
		{"within the first iteration", time.Microsecond},
		{"a few iterations", 50 * time.Millisecond},
		{"exactly at a boundary", 0}, // filled in below
		{"beyond the next finish", time.Hour},
	}
	// The boundary after three single steps.
	ref := prepare()
	var three time.Duration
	for range 3 {
		three += ref.Step().Duration
	}
	tests[2].horizon = three
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adv := prepare()
			it := adv.Advance(tt.horizon)
			got := snapshot(it)
			step := prepare()
			var elapsed time.Duration
			n := 0
			for n < got.Steps || (elapsed < tt.horizon && len(got.Finished) == 0) {
				rec := step.Step()
				require.Empty(t, rec.Admitted)
				require.Empty(t, rec.Preempted)
				elapsed += rec.Duration
				n++
				if len(rec.Finished) > 0 {
					assert.Equal(t, rec.Finished, got.Finished)
					break
				}
			}
			assert.Equal(t, n, got.Steps, "iterations covered")
			assert.InDelta(t, float64(elapsed), float64(got.Duration), float64(time.Duration(n)*time.Microsecond))
			if len(got.Finished) == 0 {
				assert.GreaterOrEqual(t, got.Duration+time.Duration(n), tt.horizon, "stopped before the horizon")
			}
		})
	}
}

func TestAbort(t *testing.T) {
	for _, chunked := range []bool{true, false} {
		eng := newEngine(t, sim.EngineConfig{MaxNumSeqs: 2, MaxBatchedTokens: 512, ChunkedPrefill: chunked, BlockSize: 16, NumBlocks: 64, WatermarkBlocks: 0})
		for i := 1; i <= 4; i++ {
			require.NoError(t, eng.Add(sim.Request{ID: uint64(i), PromptTokens: 100, OutputTokens: 50}))
		}
		eng.Step() // 1 and 2 running, 3 and 4 waiting
		require.Equal(t, 2, eng.Running())
		for range 4 {
			eng.Step() // decodes
		}
		before := eng.KVUsage()
		produced, ok := eng.Abort(1)
		assert.True(t, ok, "a running request")
		assert.Equal(t, 5, produced, "the tokens it produced: one per iteration, the first with its prefill")
		assert.Less(t, eng.KVUsage(), before, "its blocks are freed")
		produced, ok = eng.Abort(4)
		assert.True(t, ok, "a waiting request")
		assert.Zero(t, produced)
		_, ok = eng.Abort(4)
		assert.False(t, ok, "already gone")
		_, ok = eng.Abort(99)
		assert.False(t, ok)
		var finished []uint64
		for i := 0; i < 10000 && !eng.Idle(); i++ {
			finished = append(finished, eng.Advance(0).Finished...)
		}
		assert.ElementsMatch(t, []uint64{2, 3}, finished, "chunked=%v", chunked)
	}
}

// The steady plan follows every change of the engine's state: a request that could join the
// batch ends the stretch, aborting it restores the stretch, growing or aborting a running
// sequence changes it, and a plan's duration is that of its iterations run one by one.
func TestSteadyPlanFollowsChanges(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 8, MaxBatchedTokens: 2048, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 1000}
	eng := newEngine(t, cfg)
	for id := uint64(1); id <= 3; id++ {
		require.NoError(t, eng.Add(sim.Request{ID: id, PromptTokens: 100 * int(id), OutputTokens: 200 + int(id)}))
	}
	eng.Step() // prefill: the batch then decodes steadily
	k, d := eng.SteadyPlan()
	require.Equal(t, 200, k, "steps until request 1 finishes")
	require.Positive(t, d)

	require.NoError(t, eng.Add(sim.Request{ID: 4, PromptTokens: 50, OutputTokens: 10}))
	k4, _ := eng.SteadyPlan()
	assert.Zero(t, k4, "a waiting request that fits ends the steady stretch")
	_, ok := eng.Abort(4)
	require.True(t, ok)
	k5, d5 := eng.SteadyPlan()
	assert.Equal(t, k, k5)
	assert.Equal(t, d, d5)

	_, ok = eng.Abort(1)
	require.True(t, ok)
	k6, d6 := eng.SteadyPlan()
	assert.Equal(t, 201, k6, "steps until request 2 finishes")
	first := snapshot(eng.RunSteady(k6 - 1))
	assert.Empty(t, first.Finished)
	k7, _ := eng.SteadyPlan()
	assert.Equal(t, 1, k7)
	last := snapshot(eng.RunSteady(1))
	assert.Equal(t, []uint64{2}, last.Finished)
	assert.InDelta(t, d6.Seconds(), (first.Duration + last.Duration).Seconds(), 1e-6)
	assert.Panics(t, func() { eng.RunSteady(2) }, "request 3 has one token left")

	// An open request waiting for more prompt takes no part; growing it ends the stretch.
	require.NoError(t, eng.Add(sim.Request{ID: 9, PromptTokens: 40, OutputTokens: 10, Open: true}))
	eng.Step() // prefills what request 9 has; request 3 decodes its last token
	require.NoError(t, eng.Add(sim.Request{ID: 10, PromptTokens: 40, OutputTokens: 50}))
	eng.Step()
	eng.Step()
	k8, _ := eng.SteadyPlan()
	require.Positive(t, k8, "request 10 decodes while 9 waits")
	require.NoError(t, eng.Grow(9, 16, false))
	k9, _ := eng.SteadyPlan()
	assert.Zero(t, k9, "request 9 has prompt to prefill")
}

// An engine without chunked prefill rejects open requests: it would never prefill what Grow
// adds to a running sequence.
func TestOpenRequestNeedsChunkedPrefill(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 2048, ChunkedPrefill: false, BlockSize: 16, NumBlocks: 200}
	eng := newEngine(t, cfg)
	err := eng.Add(sim.Request{ID: 1, PromptTokens: 40, OutputTokens: 10, Open: true})
	assert.ErrorContains(t, err, "request 1: an open request (prefill-decode overlap) needs chunked prefill")
	require.NoError(t, eng.Add(sim.Request{ID: 2, PromptTokens: 40, OutputTokens: 10}))
}

// Open requests do not count against max_num_seqs while they wait, so once they close the
// batch can hold more sequences than the token budget has tokens: each iteration then decodes
// only as many as the budget allows, and no closed-form stretch (which decodes them all)
// is planned. Advance gives what Step gives.
func TestMoreDecodersThanBudget(t *testing.T) {
	cfg := sim.EngineConfig{MaxNumSeqs: 2, MaxBatchedTokens: 2, ChunkedPrefill: true, BlockSize: 16, NumBlocks: 1000}
	run := func(advance bool) []record {
		eng := newEngine(t, cfg)
		require.NoError(t, eng.Add(sim.Request{ID: 1, PromptTokens: 1, OutputTokens: 10, Open: true}))
		require.NoError(t, eng.Add(sim.Request{ID: 2, PromptTokens: 1, OutputTokens: 10, Open: true}))
		require.NoError(t, eng.Add(sim.Request{ID: 3, PromptTokens: 1, OutputTokens: 10}))
		require.NoError(t, eng.Add(sim.Request{ID: 4, PromptTokens: 1, OutputTokens: 10}))
		var out []record
		out = append(out, snapshot(eng.Step()), snapshot(eng.Step()))
		require.NoError(t, eng.Grow(1, 0, true))
		require.NoError(t, eng.Grow(2, 0, true))
		for i := 0; i < 100 && !eng.Idle(); i++ {
			if eng.Running() > 2 {
				k, _ := eng.SteadyPlan()
				require.Zero(t, k, "%d sequences, a budget of 2 tokens: no steady stretch", eng.Running())
			}
			var it *sim.Iteration
			if advance {
				it = eng.Advance(0)
			} else {
				it = eng.Step()
			}
			require.LessOrEqual(t, it.Seqs, 2, "iteration %d", i)
			out = append(out, snapshot(it))
		}
		require.True(t, eng.Idle())
		return out
	}
	step, adv := run(false), run(true)
	assert.Equal(t, 4*10, tokensOf(step), "every request produced its tokens")
	assert.Equal(t, tokensOf(step), tokensOf(adv))
	steps := func(rs []record) (n int, d time.Duration) {
		for _, r := range rs {
			n, d = n+r.Steps, d+r.Duration
		}
		return n, d
	}
	ns, ds := steps(step)
	na, da := steps(adv)
	assert.Equal(t, ns, na, "iterations")
	assert.InDelta(t, float64(ds), float64(da), float64(ns)*float64(time.Microsecond), "duration")
	fa := finishTimes(adv)
	for id, want := range finishTimes(step) {
		assert.InDelta(t, float64(want), float64(fa[id]), float64(ns)*float64(time.Microsecond), "finish time of %d", id)
	}
}

func tokensOf(rs []record) int {
	n := 0
	for _, r := range rs {
		for _, p := range r.Produced {
			n += p.Tokens
		}
	}
	return n
}
