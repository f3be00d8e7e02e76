package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seqView is a running sequence as the general path would hold it.
type seqView struct {
	ID                                           uint64
	Computed, Generated, Blocks, Cached, Preempt int
}

// view lists e's running sequences with the decoders brought up to date (without changing e),
// and checks the fast path's bookkeeping: running = others + decoders in admission order, and
// the aggregates agree with the decoders.
func view(t *testing.T, e *Engine) []seqView {
	t.Helper()
	var out []seqView
	var others []*seqState
	dec, base := 0, 0
	cross := make([][]*seqState, e.cfg.BlockSize)
	for i, s := range e.running {
		if i > 0 {
			require.Less(t, e.running[i-1].order, s.order, "running in admission order")
		}
		v := seqView{ID: s.req.ID, Computed: s.computed, Generated: s.generated, Blocks: s.blocks, Cached: s.cached, Preempt: int(s.preemptions)}
		if s.decoding {
			d := e.epoch - s.at
			v.Computed += d
			v.Generated += d
			v.Blocks = e.blocksFor(v.Computed) - s.cached
			dec++
			base += s.computed - s.at
			r := e.crossRes(s)
			cross[r] = append(cross[r], s)
			h := slices.IndexFunc(e.ends, func(r endRef) bool { return r.s == s })
			require.GreaterOrEqual(t, h, 0, "decoder %d on the heap", s.req.ID)
			require.Equal(t, newEndRef(s), e.ends[h], "heap key of %d", s.req.ID)
			require.Equal(t, e.blocksFor(s.computed), s.blocks+s.cached, "blocks of decoder %d", s.req.ID)
		} else {
			others = append(others, s)
		}
		out = append(out, v)
	}
	require.Equal(t, len(others), len(e.others), "others")
	for i := range others {
		require.Same(t, others[i], e.others[i], "others[%d]", i)
	}
	require.Equal(t, dec, e.dec)
	require.Equal(t, dec, len(e.ends))
	require.Equal(t, base, e.decBase)
	for r := range cross {
		require.Equal(t, len(cross[r]), len(e.crossing[r]), "crossing[%d]", r)
		for i := range cross[r] {
			require.Same(t, cross[r][i], e.crossing[r][i], "crossing[%d][%d]", r, i)
		}
	}
	for i := 1; i < len(e.ends); i++ {
		require.False(t, endsLess(&e.ends[i], &e.ends[(i-1)/2]), "heap order at %d", i)
	}
	return out
}

// TestFastPathMatchesGeneral drives an engine on the fast path and one on the general path
// (every sequence visited in every iteration, as before decoders were grouped) with the same
// random work: arrivals (some open, some sharing prefixes), Grow, Abort, Step, Advance with
// horizons, and planned stretches run whole or cut. Every iteration, plan and state must be
// identical, over engines that preempt, cut prompts by the token budget, run V0 or chunked
// prefill, cache prefixes and use block sizes that are not powers of two.
func TestFastPathMatchesGeneral(t *testing.T) {
	type config struct {
		name string
		cfg  EngineConfig
		// crowded: short prompts, half of them open, and a token budget the size of the
		// batch cap, so closed open sequences overfill the batch and the general path runs.
		crowded bool
	}
	var configs []config
	for _, chunked := range []bool{true, false} {
		for _, prefix := range []bool{false, true} {
			for _, bs := range []int{16, 7, 1} {
				for _, tight := range []bool{false, true} {
					c := EngineConfig{MaxNumSeqs: 32, MaxBatchedTokens: 1024, ChunkedPrefill: chunked, BlockSize: bs,
						NumBlocks: 40000 / bs, WatermarkBlocks: 400 / bs, PrefixCaching: prefix}
					if tight { // preemptions, and prompts cut by the budget
						c.MaxNumSeqs, c.MaxBatchedTokens, c.NumBlocks, c.WatermarkBlocks = 12, 700, 2400/bs, 16/bs
					}
					configs = append(configs, config{name: fmt.Sprintf("chunked=%t/prefix=%t/bs=%d/tight=%t", chunked, prefix, bs, tight), cfg: c})
				}
				if chunked {
					c := EngineConfig{MaxNumSeqs: 4, MaxBatchedTokens: 6, ChunkedPrefill: true, BlockSize: bs,
						NumBlocks: 4000 / bs, WatermarkBlocks: 16 / bs, PrefixCaching: prefix}
					configs = append(configs, config{name: fmt.Sprintf("crowded/prefix=%t/bs=%d", prefix, bs), cfg: c, crowded: true})
				}
			}
		}
	}
	cat := DefaultCatalog()
	g, err := cat.GPU("A100-80GB")
	require.NoError(t, err)
	m, err := cat.Model("llama-3-8b")
	require.NoError(t, err)
	cm, err := NewCostModel(m, g, DefaultProfile().For(g))
	require.NoError(t, err)
	steady, preempted, grouped, fallbacks := 0, 0, 0, 0
	for _, c := range configs {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", c.name, seed), func(t *testing.T) {
				fast, err := NewEngine(c.cfg, cm)
				require.NoError(t, err)
				gen, err := NewEngine(c.cfg, cm)
				require.NoError(t, err)
				gen.general = true
				rng := rand.New(rand.NewPCG(seed, 7))
				var ids, open []uint64
				next := uint64(1)
				same := func(what string, a, b *Iteration) {
					require.Equal(t, snapshotIt(b), snapshotIt(a), what)
					if len(a.Preempted) > 0 {
						preempted++
					}
				}
				check := func(op int) {
					require.Equal(t, view(t, gen), view(t, fast), "state after op %d", op)
					require.Equal(t, gen.free, fast.free, "free blocks after op %d", op)
					require.Equal(t, gen.Stats(), fast.Stats(), "stats after op %d", op)
					require.Equal(t, gen.Idle(), fast.Idle())
					require.Equal(t, gen.Waiting(), fast.Waiting())
					if fast.dec > 0 {
						grouped++
					}
				}
				for op := 0; op < 1200; op++ {
					switch x := rng.IntN(100); {
					case x < 25:
						r := Request{ID: next, PromptTokens: 1 + rng.IntN(500), OutputTokens: 1 + rng.IntN(250)}
						if c.crowded {
							r.PromptTokens = 1 + rng.IntN(12)
						}
						if rng.IntN(3) == 0 {
							r.PrefixKey, r.PrefixTokens = uint64(1+rng.IntN(3)), 64+rng.IntN(200)
						}
						if c.cfg.ChunkedPrefill && (rng.IntN(5) == 0 || c.crowded && rng.IntN(2) == 0) {
							r.Open = true
							open = append(open, r.ID)
						}
						next++
						ids = append(ids, r.ID)
						ea, eb := fast.Add(r), gen.Add(r)
						require.Equal(t, eb, ea)
					case x < 32 && len(open) > 0:
						i := rng.IntN(len(open))
						id, n, close := open[i], rng.IntN(120), rng.IntN(2) == 0
						ea, eb := fast.Grow(id, n, close), gen.Grow(id, n, close)
						require.Equal(t, eb, ea)
						if close || ea != nil {
							open = slices.Delete(open, i, i+1)
						}
					case x < 35 && len(ids) > 0:
						id := ids[rng.IntN(len(ids))]
						na, oka := fast.Abort(id)
						nb, okb := gen.Abort(id)
						require.Equal(t, []any{nb, okb}, []any{na, oka}, "abort %d", id)
						if i := slices.Index(open, id); i >= 0 {
							open = slices.Delete(open, i, i+1)
						}
					case x < 60:
						same("step", fast.Step(), gen.Step())
					case x < 75:
						h := time.Duration(rng.IntN(3)) * time.Duration(rng.Int64N(int64(time.Second)))
						same("advance", fast.Advance(h), gen.Advance(h))
					default:
						ka, da := fast.SteadyPlan()
						kb, db := gen.SteadyPlan()
						require.Equal(t, []any{kb, db}, []any{ka, da}, "plan at op %d", op)
						if ka == 0 {
							continue
						}
						steady++
						k := ka
						if rng.IntN(2) == 0 {
							d := time.Duration(rng.Float64() * float64(da))
							k = fast.StepsToReach(ka, d)
							require.Equal(t, gen.StepsToReach(kb, d), k)
						}
						same("stretch", fast.RunSteady(k), gen.RunSteady(k))
					}
					check(op)
				}
				for i := 0; i < 100000 && !(fast.Idle() && gen.Idle()); i++ {
					for _, id := range open {
						require.NoError(t, fast.Grow(id, 0, true))
						require.NoError(t, gen.Grow(id, 0, true))
					}
					open = open[:0]
					same("drain", fast.Advance(0), gen.Advance(0))
					check(-1)
				}
				require.True(t, fast.Idle(), "drained")
				fallbacks += fast.fallbacks
			})
		}
	}
	// The random work must reach the cases the fast path hands over or covers in closed form.
	require.Positive(t, steady, "planned stretches")
	require.Positive(t, preempted, "preemptions")
	require.Positive(t, grouped, "states with grouped decoders")
	require.Positive(t, fallbacks, "iterations on the general path")
	t.Logf("%d planned stretches, %d preempting iterations, %d grouped states, %d general-path iterations", steady, preempted, grouped, fallbacks)
}

// snapshotIt copies an iteration, whose slices the engine reuses.
func snapshotIt(it *Iteration) Iteration {
	c := *it
	c.Produced = slices.Clone(it.Produced)
	c.FirstToken = slices.Clone(it.FirstToken)
	c.Finished = slices.Clone(it.Finished)
	c.Preempted = slices.Clone(it.Preempted)
	c.Admitted = slices.Clone(it.Admitted)
	return c
}

// TestPlace checks that place finds every sequence of lists in admission order whose orders
// are spread in several ways (consecutive, with random gaps, in runs split by far jumps),
// thinned at random as finished sequences leave, down to a single one.
func TestPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		n := 1 + rng.IntN(300)
		var list []*seqState
		order := uint64(rng.IntN(1000))
		for range n {
			switch trial % 3 {
			case 0:
				order++
			case 1:
				order += 1 + uint64(rng.IntN(50))
			default: // most orders bunched at one end, a few far away
				if rng.IntN(10) == 0 {
					order += 10000
				} else {
					order++
				}
			}
			list = append(list, &seqState{order: order})
		}
		// Thin the list as finished sequences leave it.
		keep := list[:0]
		for _, s := range list {
			if rng.IntN(3) > 0 || len(keep) == 0 {
				keep = append(keep, s)
			}
		}
		for i, s := range keep {
			require.Equal(t, i, place(keep, s), "trial %d: the sequence at %d of %d", trial, i, len(keep))
		}
	}
}

// TestEndsHeap pushes decoders with random ends (many equal) onto the finish heap, takes some
// off from anywhere (preemptions) and pops the top (finishes) in between, and requires after
// every step that the heap holds exactly the decoders left, in heap order, and that the top
// is an earliest end.
func TestEndsHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for trial := range 200 {
		e := &Engine{}
		in := map[*seqState]bool{}
		check := func(step int) {
			require.Len(t, e.ends, len(in), "trial %d, step %d", trial, step)
			seen := map[*seqState]bool{}
			for i, r := range e.ends {
				require.True(t, in[r.s] && !seen[r.s], "trial %d, step %d: a decoder not on the heap, or twice", trial, step)
				seen[r.s] = true
				if i > 0 {
					require.LessOrEqual(t, e.ends[(i-1)/2].end, r.end, "trial %d, step %d: heap order at %d", trial, step, i)
				}
			}
		}
		for step := range 300 {
			switch k := rng.IntN(10); {
			case k < 5 || len(e.ends) == 0:
				s := &seqState{}
				e.ends = append(e.ends, endRef{end: rng.IntN(40), s: s})
				e.endsUp(len(e.ends) - 1)
				in[s] = true
			case k < 8:
				top := e.ends[0]
				for _, r := range e.ends {
					require.LessOrEqual(t, top.end, r.end, "trial %d, step %d: the top is not an earliest end", trial, step)
				}
				e.endsRemove(top.s)
				delete(in, top.s)
			default:
				s := e.ends[rng.IntN(len(e.ends))].s
				e.endsRemove(s)
				delete(in, s)
			}
			check(step)
		}
	}
}
