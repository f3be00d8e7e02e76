package sim

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"time"
)

// EngineConfig sets the scheduler of one continuous-batching engine (one GPU worker).
type EngineConfig struct {
	// MaxNumSeqs caps the sequences in one iteration (vLLM max_num_seqs).
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one iteration (vLLM max_num_batched_tokens).
	MaxBatchedTokens int
	// ChunkedPrefill lets a prompt be split over iterations and mixed with decodes (vLLM V1
	// and chunked prefill). Without it an iteration either prefills whole prompts or decodes,
	// and waiting prompts go first (vLLM V0's default scheduler).
	ChunkedPrefill bool
	// BlockSize is the number of tokens per KV-cache block.
	BlockSize int
	// NumBlocks is the KV-cache capacity in blocks.
	NumBlocks int
	// WatermarkBlocks is kept free when admitting a new sequence, so running ones can grow.
	WatermarkBlocks int
	// PrefixCaching keeps the KV blocks of computed prompts for reuse by prompts that start
	// with the same tokens (vLLM's automatic prefix caching; see Request.PrefixKey).
	PrefixCaching bool
	// SchedulingPolicy is vLLM's --scheduling-policy: "" or SchedulingFCFS (the default)
	// serves the waiting queue first come first served and preempts the most recently
	// admitted sequence; SchedulingPriority orders the waiting queue by (Request.Priority,
	// arrival) and preempts the running sequence last in that order (see Engine). Priority
	// scheduling follows vLLM V1's scheduler and needs ChunkedPrefill. Left out of JSON when
	// empty, so that an FCFS engine's description is what it was before the setting existed.
	SchedulingPolicy string `json:",omitempty"`
}

// The engine scheduling policies (EngineConfig.SchedulingPolicy), named as vLLM's
// --scheduling-policy values.
const (
	SchedulingFCFS     = "fcfs"
	SchedulingPriority = "priority"
)

// Priority reports whether the engine schedules by priority (SchedulingPriority).
func (c EngineConfig) Priority() bool { return c.SchedulingPolicy == SchedulingPriority }

// vLLM's engine defaults (vllm serve's max_num_seqs, max_num_batched_tokens with chunked
// prefill, gpu_memory_utilization and block_size). The experiment file, the emulator and the
// profiler start from them.
const (
	DefaultMaxNumSeqs           = 256
	DefaultMaxBatchedTokens     = 8192
	DefaultGPUMemoryUtilization = 0.9
	DefaultBlockSize            = 16
)

// DefaultEngine returns vLLM's default scheduler settings, chunked prefill on, without a KV
// cache: WithKVCache sizes it for a model and GPU.
func DefaultEngine() EngineConfig {
	return EngineConfig{MaxNumSeqs: DefaultMaxNumSeqs, MaxBatchedTokens: DefaultMaxBatchedTokens,
		ChunkedPrefill: true, BlockSize: DefaultBlockSize}
}

// WithKVCache returns c with the KV cache a model's engine has on its GPUs at memory
// utilisation util: the blocks that fit beside the weights and the token budget's activations
// (CostModel.KVBlocks) and vLLM's watermark of 1% of them kept free for running sequences.
// Every engine the tool builds is sized here; the result is validated.
func (c EngineConfig) WithKVCache(cm *CostModel, util float64) (EngineConfig, error) {
	if !(util > 0 && util <= 1) {
		return EngineConfig{}, fmt.Errorf("gpu memory utilization must be in (0, 1], got %g", util)
	}
	if c.BlockSize <= 0 {
		return EngineConfig{}, errors.New("block_size must be positive")
	}
	blocks, err := cm.KVBlocks(util, c.MaxBatchedTokens, c.BlockSize)
	if err != nil {
		return EngineConfig{}, err
	}
	c.NumBlocks = blocks
	c.WatermarkBlocks = blocks / 100
	if err := c.Validate(); err != nil {
		return EngineConfig{}, err
	}
	return c, nil
}

// Validate reports an unusable configuration.
func (c EngineConfig) Validate() error {
	switch {
	case c.MaxNumSeqs <= 0:
		return errors.New("max_num_seqs must be positive")
	case c.MaxBatchedTokens < c.MaxNumSeqs:
		return fmt.Errorf("max_batched_tokens (%d) must be at least max_num_seqs (%d)", c.MaxBatchedTokens, c.MaxNumSeqs)
	case c.BlockSize <= 0:
		return errors.New("block_size must be positive")
	case c.NumBlocks <= 0:
		return errors.New("the KV cache has no blocks")
	case c.WatermarkBlocks < 0 || c.WatermarkBlocks >= c.NumBlocks:
		return errors.New("watermark must be in [0, NumBlocks)")
	}
	return c.validatePolicy()
}

// validatePolicy reports an unknown scheduling policy, or priority scheduling without chunked
// prefill: the engine models vLLM V1's priority scheduler, which runs with chunked prefill;
// the engine without it is vLLM V0's scheduler, whose priority mode also preempted running
// requests for waiting ones of higher priority (V0's _schedule_priority_preemption), which is
// not modelled.
func (c EngineConfig) validatePolicy() error {
	switch c.SchedulingPolicy {
	case "", SchedulingFCFS:
		return nil
	case SchedulingPriority:
		if !c.ChunkedPrefill {
			return errors.New("scheduling policy \"priority\" needs chunked prefill (it follows vLLM V1's scheduler; the engine without chunked prefill is V0's)")
		}
		return nil
	}
	return fmt.Errorf("unknown scheduling policy %q (known: %s, %s)", c.SchedulingPolicy, SchedulingFCFS, SchedulingPriority)
}

// Request is one LLM call as the engine sees it.
type Request struct {
	ID           uint64
	PromptTokens int
	OutputTokens int
	// With prefix caching, a prompt's full blocks are identified by Blocks, the chained hashes
	// of their tokens when the prompt's tokens are known, or else derived: the blocks within
	// its first PrefixTokens tokens are the same for every request with the same PrefixKey
	// (non-zero; a query's question, say), the rest are its own.
	Blocks       []uint64
	PrefixKey    uint64
	PrefixTokens int
	// Open marks a prompt that is still growing (prefill-decode overlap: a call whose inputs
	// are still running). PromptTokens is then what is known so far; the engine prefills it
	// and holds the sequence, producing nothing, until Grow adds the rest and closes it.
	Open bool
	// Priority is vLLM's per-request priority: with priority scheduling a lower value is
	// served first. An FCFS engine refuses any value but 0 (see Engine.Add).
	Priority int
}

// Produced says that a sequence produced Tokens output tokens.
type Produced struct {
	ID     uint64
	Tokens int
}

// Iteration is what one call of Step or Advance did. Its slices are owned by the engine and
// valid until the next call.
type Iteration struct {
	// Duration is the time the iteration(s) took.
	Duration time.Duration
	// Steps is the number of engine iterations covered: 1 for Step; Advance may cover many
	// identical decode iterations at once.
	Steps int
	// Seqs is the number of sequences in each iteration's batch.
	Seqs int
	// PrefillTokens is the number of prompt (or recomputed) tokens processed.
	PrefillTokens int
	// Produced lists the sequences that produced output tokens and how many.
	Produced []Produced
	// FirstToken lists sequences whose first output token was produced.
	FirstToken []uint64
	// Finished lists sequences that produced their last token and left the engine.
	Finished []uint64
	// Preempted lists sequences evicted from the KV cache to be recomputed later.
	Preempted []uint64
	// Admitted lists sequences that entered the running batch (again, after a preemption).
	Admitted []uint64
}

type seqState struct {
	req       Request
	generated int    // output tokens produced
	computed  int    // tokens whose keys and values are in the cache
	blocks    int    // KV blocks held as its own
	cached    int    // leading prompt blocks it uses from the prefix cache (not in blocks)
	chunk     int    // tokens scheduled in the current iteration
	order     uint64 // admission order: the running batch is sorted by it
	arrival   uint64 // arrival order (Add): priority scheduling breaks ties of priority by it
	at        int    // a decoder's epoch (Engine.epoch) of computed, generated and blocks
	// The small fields last, packed (one state per call waiting or running).
	preemptions int32
	decoding    bool // a decoder: computed, generated and blocks are as of epoch at
	mark        bool // produced a token in the current iteration (fast path)
}

// end is the epoch at the end of whose iteration decoder s produces its last token.
func (s *seqState) end() int { return s.at + s.req.OutputTokens - s.generated }

func (s *seqState) length() int { return s.req.PromptTokens + s.generated }

// stalled reports whether s is an open sequence whose known prompt is all computed: it waits
// for Grow and takes no part in iterations.
func (s *seqState) stalled() bool { return s.req.Open && s.computed >= s.req.PromptTokens }

// Engine is a vLLM-like continuous-batching engine as a pure state machine: no clock, no
// goroutines, no I/O. Callers add requests and step it; each step says how long it took (from
// the cost model) and which sequences produced tokens, finished or were preempted. The
// simulator steps it in virtual time, the emulator in real time.
//
// Scheduling follows vLLM: running sequences keep their place in admission order; when a
// running sequence needs a KV block and none is free, the most recently admitted sequence is
// preempted (its blocks freed, its tokens recomputed when it is admitted again from the front of
// the waiting queue); waiting sequences are admitted first-come first-served while the batch,
// the token budget and the KV cache (less the watermark) allow.
//
// With priority scheduling (EngineConfig.SchedulingPolicy "priority") the engine follows vLLM
// V1's scheduler as released in v0.11.1 (vllm/v1/core/sched/scheduler.py, Scheduler.schedule,
// and vllm/v1/core/sched/request_queue.py, PriorityRequestQueue; the policy came with vLLM
// PR #19057, and PRs #26661 and #26754 fixed its preemption's bookkeeping): the
// waiting queue is a heap by (priority, arrival), arrival being the order of Add, and a
// preempted sequence goes back into it by that key rather than to its front. When a running
// sequence needs KV blocks and none are free, the victim is the running sequence with the
// largest (priority, arrival), that is max(self.running, key=lambda r: (r.priority,
// r.arrival_time)); a victim already scheduled in this iteration gives back its tokens of the
// budget, and when the victim is the sequence being scheduled, no further running sequence is
// scheduled in the iteration. As under FCFS, no waiting sequence is admitted in an iteration
// that preempted. vLLM V1 never preempts a running request to admit a waiting one of higher
// priority (V0's _schedule_priority_preemption did; V1 has no such step), and neither does
// the engine: a waiting sequence of higher priority waits for blocks to free up. Priority
// engines take the general path of every iteration (the fast path's grouped decoders assume
// that preemption takes the newest sequences).
type Engine struct {
	cfg     EngineConfig
	cost    *CostModel
	waiting []*seqState // FIFO of new requests, from qhead on
	qhead   int
	front   []*seqState // preempted sequences, served before waiting; the last is next
	// priority is cfg.Priority(): the waiting sequences, new and preempted, are then in pq, a
	// min-heap by (Request.Priority, arrival), and waiting and front stay empty. arrivals
	// numbers the requests as they are added.
	priority bool
	pq       []*seqState
	arrivals uint64
	running  []*seqState // admission order
	free     int
	it       Iteration
	sched    []*seqState // sequences scheduled in the current step
	spare    []*seqState // finished sequences' states, reused by Add
	preempt  bool        // a preemption happened in the current step
	// prefix is the prefix cache (nil without prefix caching); evictable counts its
	// unreferenced blocks, which are part of free.
	prefix    *prefixCache
	evictable int
	// opens counts the open sequences in the engine (Request.Open); while there are none,
	// every running sequence takes part in each iteration.
	opens int
	// plan caches the steady-stretch analysis of the current state (steadySteps), which
	// SteadyPlan, StepsToReach and RunSteady would otherwise repeat; every change of state
	// (Add, Grow, Abort, an iteration) drops it.
	plan steadyPlan
	// blockShift is log2 of the block size when it is a power of two (vLLM's are), else -1:
	// blocksFor then shifts instead of dividing.
	blockShift int

	// Decoders. A running sequence whose prompt is computed and which is not open decodes one
	// token in every iteration that decodes at all, so the engine does not visit it: epoch
	// counts those iterations, and a decoder's computed and generated are its stored values
	// plus epoch - at (materialize). The aggregates below give an iteration's cost, its new
	// KV blocks and the next finish without a pass over the batch; an iteration visits only
	// the others and the decoders that take a new block (preempting, when the cache is full,
	// as the general path does). An iteration in which the token budget would skip a decoder
	// brings every decoder up to date and takes the general path (generalStep). running =
	// others + decoders, each in admission order.
	epoch    int
	dec      int           // number of decoders
	decBase  int           // sum over decoders of computed - at: they hold decBase + dec*epoch tokens
	crossing [][]*seqState // crossing[r]: the decoders that take a new KV block in the iterations ending epoch ≡ r (mod block size), in admission order
	ends     []endRef      // min-heap of the decoders by end, then order
	others   []*seqState   // running sequences that are not decoders, in admission order
	finished []*seqState   // scratch of finishFast
	order    uint64        // the next admission's order
	// omitProduced leaves Iteration.Produced empty (OmitProduced).
	omitProduced bool
	// general makes every iteration take the general path, visiting every sequence (tests
	// compare it with the fast path; priority engines always take it, their victims being
	// chosen by priority); fallbacks counts the iterations that took it otherwise.
	general   bool
	fallbacks int

	// totals
	steps       uint64
	busy        time.Duration
	seqTime     float64 // sum over iterations of Seqs*seconds
	preemptions int
}

// steadyPlan is the analysis of one engine state by steadySteps: k steady decode iterations
// are possible (0: the next iteration is not a plain decode of the whole batch), the first
// sequence finishes after kFinish of them, and ctx0 is the sum of the cached tokens of the n
// active sequences before the first.
type steadyPlan struct {
	ok         bool
	k, kFinish int
	n          int
	ctx0       float64
}

// NewEngine returns an idle engine.
func NewEngine(cfg EngineConfig, cost *CostModel) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, cost: cost, free: cfg.NumBlocks, blockShift: -1, crossing: make([][]*seqState, cfg.BlockSize),
		priority: cfg.Priority()}
	// The fast path's grouped decoders assume that preemption takes the newest sequences.
	e.general = e.priority
	if bs := cfg.BlockSize; bs&(bs-1) == 0 {
		e.blockShift = bits.TrailingZeros(uint(bs))
	}
	if cfg.PrefixCaching {
		e.prefix = newPrefixCache()
	}
	return e, nil
}

// Renew returns a new engine as NewEngine returns it for e's configuration and cost model,
// which takes over e's buffers (and the states of its finished sequences) so that a model
// loaded again does not grow them anew. e must hold no sequence (ok is false otherwise, and
// nothing changes); it is left empty and idle, without its buffers.
func (e *Engine) Renew() (n *Engine, ok bool) {
	if e.Waiting() > 0 || len(e.running) > 0 {
		return nil, false
	}
	n, err := NewEngine(e.cfg, e.cost)
	if err != nil {
		return nil, false
	}
	// The buffers go over emptied, not cleared: the slots past their lengths may still point
	// at states of sequences that finished, which are never read again and are overwritten
	// as the buffers refill. Clearing them all (their capacities, some thousand pointers an
	// engine) at each of a long online run's model swaps (about one every 20 queries) was
	// 0.09 of Renew's 0.21 s in a CPU profile of a million queries; what they keep alive is
	// bounded by the buffers' capacities.
	for r := range e.crossing {
		e.crossing[r] = e.crossing[r][:0]
	}
	if len(e.crossing) == len(n.crossing) {
		n.crossing = e.crossing
	}
	n.waiting, n.front, n.pq, n.running = e.waiting[:0], e.front[:0], e.pq[:0], e.running[:0]
	n.sched, n.ends, n.others, n.finished = e.sched[:0], e.ends[:0], e.others[:0], e.finished[:0]
	n.spare = e.spare
	it := &e.it
	n.it = Iteration{Produced: it.Produced[:0], FirstToken: it.FirstToken[:0], Finished: it.Finished[:0],
		Preempted: it.Preempted[:0], Admitted: it.Admitted[:0]}
	e.waiting, e.qhead, e.front, e.pq, e.running = nil, 0, nil, nil, nil
	e.sched, e.ends, e.others, e.finished, e.spare = nil, nil, nil, nil, nil
	e.crossing = make([][]*seqState, len(e.crossing))
	e.it = Iteration{}
	return n, true
}

// Config returns the engine's configuration.
func (e *Engine) Config() EngineConfig { return e.cfg }

// OmitProduced stops the engine listing in Iteration.Produced the sequences that produced
// tokens, which costs a pass over the batch in every iteration; callers that need only first
// tokens and finishes (the simulator's cluster) call it once, before stepping.
func (e *Engine) OmitProduced() { e.omitProduced = true }

// Add queues a request. A request whose prompt cannot be scheduled by this engine, or whose
// full sequence could never fit the KV cache, is rejected with an error.
func (e *Engine) Add(r Request) error {
	if r.PromptTokens <= 0 || r.OutputTokens <= 0 {
		return fmt.Errorf("request %d: prompt and output tokens must be positive (got %d and %d)", r.ID, r.PromptTokens, r.OutputTokens)
	}
	total := r.PromptTokens + r.OutputTokens
	if limit := e.cost.Model.MaxModelLen; total > limit {
		return fmt.Errorf("request %d: %d tokens exceed %s's max_model_len %d", r.ID, total, e.cost.Model.ID, limit)
	}
	if need := ceilDiv(total, e.cfg.BlockSize); need > e.cfg.NumBlocks-e.cfg.WatermarkBlocks {
		return fmt.Errorf("request %d: %d tokens need %d KV blocks but the cache holds %d", r.ID, total, need, e.cfg.NumBlocks-e.cfg.WatermarkBlocks)
	}
	if !e.cfg.ChunkedPrefill && total > e.cfg.MaxBatchedTokens {
		return fmt.Errorf("request %d: %d tokens exceed the token budget %d and chunked prefill is off", r.ID, total, e.cfg.MaxBatchedTokens)
	}
	if r.Open && !e.cfg.ChunkedPrefill {
		// Without chunked prefill a running sequence never prefills again, so the prompt
		// tokens Grow adds later would never be computed.
		return fmt.Errorf("request %d: an open request (prefill-decode overlap) needs chunked prefill, which this engine runs without", r.ID)
	}
	if r.Priority != 0 && !e.priority {
		// vLLM V0's engine refused such a request ("Got priority N but Priority scheduling
		// is not enabled."); V1's FCFS queue would ignore the priority. A policy's
		// priorities on an FCFS engine are a configuration error either way.
		return fmt.Errorf("request %d: priority %d, but the engine schedules first come first served (scheduling_policy = %q schedules by priority)",
			r.ID, r.Priority, SchedulingPriority)
	}
	e.plan.ok = false
	var s *seqState
	if n := len(e.spare); n > 0 {
		s, e.spare = e.spare[n-1], e.spare[:n-1]
		*s = seqState{req: r}
	} else {
		s = &seqState{req: r}
	}
	if e.priority {
		s.arrival = e.arrivals
		e.arrivals++
		e.pqPush(s)
	} else {
		e.waiting = append(e.waiting, s)
	}
	if r.Open {
		e.opens++
	}
	return nil
}

// Grow adds tokens to the prompt of open request id (an input's output has arrived) and, with
// close, ends its growth: the sequence then prefills what it has not and decodes. When
// nothing is left to prefill at the close, its last prompt token is computed again to sample
// the first output token, as vLLM does after a full prefix-cache hit. An open sequence holds
// its KV blocks while it waits (prefill-decode overlap, Faster-MoA).
func (e *Engine) Grow(id uint64, tokens int, close bool) error {
	s := e.find(id)
	if s == nil {
		return fmt.Errorf("request %d is not in the engine", id)
	}
	if !s.req.Open {
		return fmt.Errorf("request %d is not open", id)
	}
	if tokens < 0 {
		return fmt.Errorf("request %d: cannot grow by %d tokens", id, tokens)
	}
	total := s.req.PromptTokens + tokens + s.req.OutputTokens
	if limit := e.cost.Model.MaxModelLen; total > limit {
		return fmt.Errorf("request %d: %d tokens exceed %s's max_model_len %d", id, total, e.cost.Model.ID, limit)
	}
	if need := ceilDiv(total, e.cfg.BlockSize); need > e.cfg.NumBlocks-e.cfg.WatermarkBlocks {
		return fmt.Errorf("request %d: %d tokens need %d KV blocks but the cache holds %d", id, total, need, e.cfg.NumBlocks-e.cfg.WatermarkBlocks)
	}
	e.plan.ok = false
	s.req.PromptTokens += tokens
	if close {
		s.req.Open = false
		e.opens--
		if s.computed > 0 && s.computed >= s.req.PromptTokens {
			s.computed = s.req.PromptTokens - 1
		}
	}
	return nil
}

// find returns the sequence of request id wherever it is, or nil.
func (e *Engine) find(id uint64) *seqState {
	for _, s := range e.running {
		if s.req.ID == id {
			return s
		}
	}
	for _, s := range e.front {
		if s.req.ID == id {
			return s
		}
	}
	for _, s := range e.waiting[e.qhead:] {
		if s.req.ID == id {
			return s
		}
	}
	for _, s := range e.pq {
		if s.req.ID == id {
			return s
		}
	}
	return nil
}

// active counts the running sequences that take part in iterations (not stalled).
func (e *Engine) active() int {
	if e.opens == 0 {
		return len(e.running)
	}
	n := len(e.running)
	for _, s := range e.others { // decoders never stall
		if s.stalled() {
			n--
		}
	}
	return n
}

// nextWaiting is the sequence admission would take next, or nil.
func (e *Engine) nextWaiting() *seqState {
	if e.priority {
		if len(e.pq) > 0 {
			return e.pq[0]
		}
		return nil
	}
	if n := len(e.front); n > 0 {
		return e.front[n-1]
	}
	if e.qhead < len(e.waiting) {
		return e.waiting[e.qhead]
	}
	return nil
}

func (e *Engine) popWaiting() {
	if e.priority {
		e.pqRemove(0)
		return
	}
	if n := len(e.front); n > 0 {
		e.front[n-1] = nil
		e.front = e.front[:n-1]
		return
	}
	e.waiting[e.qhead] = nil
	e.qhead++
	if e.qhead == len(e.waiting) {
		e.waiting, e.qhead = e.waiting[:0], 0
	} else if e.qhead > 1024 && e.qhead*2 > len(e.waiting) {
		n := copy(e.waiting, e.waiting[e.qhead:])
		clear(e.waiting[n:])
		e.waiting, e.qhead = e.waiting[:n], 0
	}
}

// Idle reports whether the engine has no work.
// Stalled open sequences (Request.Open) wait for Grow and are no work.
func (e *Engine) Idle() bool { return e.Waiting() == 0 && e.active() == 0 }

// Running returns the number of sequences in the running batch.
func (e *Engine) Running() int { return len(e.running) }

// Waiting returns the number of queued sequences.
func (e *Engine) Waiting() int { return len(e.front) + len(e.waiting) - e.qhead + len(e.pq) }

// KVUsage returns the fraction of KV blocks in use.
func (e *Engine) KVUsage() float64 { return 1 - float64(e.free)/float64(e.cfg.NumBlocks) }

// Stats are running totals of an engine.
type Stats struct {
	Steps       uint64
	Busy        time.Duration
	MeanBatch   float64 // time-weighted mean number of sequences per iteration
	Preemptions int
	// PrefixQueried and PrefixHit count prompt tokens looked up in the prefix cache and
	// found there.
	PrefixQueried, PrefixHit int64
}

// Stats returns the engine's totals.
func (e *Engine) Stats() Stats {
	s := Stats{Steps: e.steps, Busy: e.busy, Preemptions: e.preemptions}
	if e.prefix != nil {
		s.PrefixQueried, s.PrefixHit = e.prefix.queried, e.prefix.hit
	}
	if e.busy > 0 {
		s.MeanBatch = e.seqTime / e.busy.Seconds()
	}
	return s
}

func (e *Engine) reset() *Iteration {
	it := &e.it
	it.Duration, it.Steps, it.Seqs, it.PrefillTokens = 0, 0, 0, 0
	it.Produced = it.Produced[:0]
	it.FirstToken = it.FirstToken[:0]
	it.Finished = it.Finished[:0]
	it.Preempted = it.Preempted[:0]
	it.Admitted = it.Admitted[:0]
	e.preempt = false
	e.plan.ok = false
	return it
}

// Step runs exactly one engine iteration. It returns an iteration with Steps = 0 when there is
// nothing to do.
func (e *Engine) Step() *Iteration {
	it := e.reset()
	if e.Idle() {
		return it
	}
	if e.fastStep(it) {
		return it
	}
	e.fallbacks++
	e.sync()
	e.generalStep(it)
	e.rebuild()
	return it
}

// generalStep runs one iteration visiting every running sequence (there are no decoders).
func (e *Engine) generalStep(it *Iteration) {
	sched := e.sched[:0]
	budget := e.cfg.MaxBatchedTokens
	admitted := false
	if !e.cfg.ChunkedPrefill {
		// vLLM V0: whole prompts first; decode only when nothing can be admitted.
		sched, budget, admitted = e.admit(sched, budget)
		if !admitted {
			sched, budget = e.scheduleRunning(sched, budget)
		}
	} else {
		sched, budget = e.scheduleRunning(sched, budget)
		if !e.preempt {
			sched, budget, _ = e.admit(sched, budget)
		}
	}
	_ = budget
	e.sched = sched
	if len(sched) == 0 {
		// Only possible when every running sequence preempted itself; try again next step.
		return
	}
	var b Batch
	addScheduled(&b, it, sched)
	b.Seqs = len(sched)
	sec := e.cost.IterationSeconds(b)
	done := false // a sequence produced its last token (only scheduled ones produce)
	for _, s := range sched {
		s.computed += s.chunk
		s.chunk = 0
		if e.prefix != nil && s.computed <= s.req.PromptTokens+s.chunk {
			e.register(s)
		}
		if s.computed == s.length() && !s.req.Open {
			s.generated++
			if !e.omitProduced {
				it.Produced = append(it.Produced, Produced{ID: s.req.ID, Tokens: 1})
			}
			if s.generated == 1 {
				it.FirstToken = append(it.FirstToken, s.req.ID)
			}
			done = done || s.generated >= s.req.OutputTokens
		}
	}
	if done {
		e.finish(it)
	}
	e.account(it, 1, len(sched), sec)
	clear(sched)
}

// addScheduled adds the work of the scheduled sequences (their chunks) to b, and their
// prefill tokens to it.
func addScheduled(b *Batch, it *Iteration, sched []*seqState) {
	for _, s := range sched {
		c, prior := float64(s.chunk), float64(s.computed)
		b.Tokens += s.chunk
		b.AttentionPairs += c*prior + c*(c+1)/2
		b.KVTokens += prior + c
		if s.computed+s.chunk == s.length() && !s.req.Open {
			b.Sampled++
		}
		if s.chunk > 1 || s.computed < s.req.PromptTokens {
			it.PrefillTokens += s.chunk
		}
	}
}

// scheduleRunning gives every running sequence its next tokens (one for a decode, the rest of
// its prompt within the budget for a prefill), preempting the most recently admitted sequences
// when the KV cache is full.
func (e *Engine) scheduleRunning(sched []*seqState, budget int) ([]*seqState, int) {
	if e.priority {
		return e.scheduleRunningPriority(sched, budget)
	}
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		need := s.length() - s.computed
		if !e.cfg.ChunkedPrefill && need > 1 {
			continue // a V0 engine never leaves a prompt half done; cannot happen
		}
		n := min(need, budget)
		if n <= 0 {
			continue
		}
		blocks := e.blocksFor(s.computed+n) - s.blocks - s.cached
		self := false
		for blocks > e.free && !self {
			victim := e.running[len(e.running)-1]
			e.preemptSeq(victim)
			self = victim == s
		}
		if self {
			break // s was the most recent sequence left: it gave up its own blocks
		}
		e.free -= blocks
		e.reclaim()
		s.blocks += blocks
		s.chunk = n
		budget -= n
		sched = append(sched, s)
	}
	return sched, budget
}

// preemptSeq preempts s, the most recently admitted running sequence.
func (e *Engine) preemptSeq(s *seqState) {
	e.running = e.running[:len(e.running)-1]
	e.evict(s)
}

// evict frees the KV blocks of s, which has left the running batch, and queues it to be
// recomputed.
func (e *Engine) evict(s *seqState) {
	e.dropOther(s)
	e.free += s.blocks
	e.release(s)
	s.blocks, s.computed, s.chunk = 0, 0, 0
	s.preemptions++
	e.preemptions++
	e.preempt = true
	if e.priority {
		// vLLM V1's PriorityRequestQueue has no front: prepend_request adds by (priority,
		// arrival) like any request.
		e.pqPush(s)
	} else {
		// Victims are taken newest first and each goes to the front of the queue, so the
		// last one pushed (the oldest) is admitted first.
		e.front = append(e.front, s)
	}
	e.it.Preempted = append(e.it.Preempted, s.req.ID)
}

// admit moves waiting sequences into the batch, first come first served, while the sequence
// cap, the token budget and the KV cache (less the watermark) allow.
func (e *Engine) admit(sched []*seqState, budget int) ([]*seqState, int, bool) {
	admitted := false
	for e.active() < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.nextWaiting()
		if s == nil {
			break
		}
		hit, unreferenced := e.hits(s)
		n, blocks, ok := e.admitCost(s, hit, budget)
		if !ok {
			break
		}
		if e.free-blocks-unreferenced < e.cfg.WatermarkBlocks {
			// Stalled open sequences give way to work that can run (else parents could wait
			// forever behind their children's prompts): the newest goes back to the queue.
			if e.yieldStalled() {
				continue
			}
			break
		}
		e.popWaiting()
		if hit > 0 {
			e.take(s, hit)
		} else if e.prefix != nil {
			e.prefix.queried += int64(s.req.PromptTokens)
		}
		e.free -= blocks
		e.reclaim()
		s.blocks = blocks
		s.chunk = n
		budget -= n
		s.order = e.order
		e.order++
		e.running = append(e.running, s)
		e.others = append(e.others, s)
		sched = append(sched, s)
		e.it.Admitted = append(e.it.Admitted, s.req.ID)
		admitted = true
	}
	return sched, budget, admitted
}

// yieldStalled preempts the most recently admitted stalled open sequence to the back of the
// waiting queue; it reports whether there was one.
func (e *Engine) yieldStalled() bool {
	if e.opens == 0 {
		return false
	}
	for i := len(e.running) - 1; i >= 0; i-- {
		s := e.running[i]
		if !s.stalled() {
			continue
		}
		e.running = append(e.running[:i], e.running[i+1:]...)
		e.dropOther(s)
		e.free += s.blocks
		e.release(s)
		e.reclaim()
		s.blocks, s.computed, s.chunk = 0, 0, 0
		s.preemptions++
		e.preemptions++
		if e.priority {
			e.pqPush(s) // by its key, as vLLM V1 requeues any request
		} else {
			e.waiting = append(e.waiting, s)
		}
		e.it.Preempted = append(e.it.Preempted, s.req.ID)
		return true
	}
	return false
}

// admitCost is what admitting s takes with hit cached prompt blocks: the tokens it computes in
// this iteration (within budget) and the blocks it allocates as its own; ok is false when its
// prompt does not fit the budget and chunked prefill is off.
func (e *Engine) admitCost(s *seqState, hit, budget int) (tokens, blocks int, ok bool) {
	bs := e.cfg.BlockSize
	n := s.length() - hit*bs
	if n > budget {
		if !e.cfg.ChunkedPrefill {
			return 0, 0, false
		}
		n = budget
	}
	return n, ceilDiv(hit*bs+n, bs) - hit, n > 0
}

// finish removes sequences that produced their last token and frees their blocks.
func (e *Engine) finish(it *Iteration) {
	kept := e.running[:0]
	for _, s := range e.running {
		if s.generated >= s.req.OutputTokens {
			e.free += s.blocks
			e.release(s)
			s.blocks = 0
			it.Finished = append(it.Finished, s.req.ID)
			if len(e.spare) < e.cfg.MaxNumSeqs { // enough for a full batch; the rest go to the GC
				e.spare = append(e.spare, s) // no list holds it past this iteration (stale slots past a buffer's length aside, never read)
			}
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
	e.others = append(e.others[:0], kept...) // no decoders on the general path
}

func (e *Engine) account(it *Iteration, steps, seqs int, sec float64) {
	d := seconds(sec)
	it.Duration, it.Steps, it.Seqs = d, steps, seqs
	e.steps += uint64(steps)
	e.busy += d
	e.seqTime += float64(seqs) * sec
}

// Advance runs the engine forward by one or more iterations and returns what happened. When
// the batch is in a steady decode phase (every running sequence decodes, nothing can be
// admitted) it covers in closed form all iterations up to the next event that changes the
// batch: a sequence finishing, the KV cache running out of blocks, or the first iteration
// boundary at or after horizon (an arrival the caller knows of; 0 means none). Otherwise it
// runs a single Step. Its results equal those of the same number of Steps, up to the rounding
// of durations to nanoseconds.
func (e *Engine) Advance(horizon time.Duration) *Iteration {
	if k := e.steadySteps(); k > 0 {
		if horizon > 0 {
			k = e.stepsToReach(k, horizon.Seconds())
		}
		return e.decodeStretch(k)
	}
	return e.Step()
}

// steadySteps returns how many identical decode iterations can run before the batch changes,
// or 0 when the next iteration is not a plain decode of the whole batch.
func (e *Engine) steadySteps() int {
	if !e.plan.ok {
		e.plan = e.analyse()
	}
	return e.plan.k
}

// analyse works out the steady stretch the current state allows (see steadySteps): a steady
// stretch is one in which every active sequence is a decoder.
func (e *Engine) analyse() steadyPlan {
	n := e.active()
	if n == 0 || n > e.cfg.MaxBatchedTokens || e.admissible() {
		// Nothing to run, more sequences than the token budget (open ones that closed
		// after the batch filled: an iteration leaves some out), or a prompt to admit.
		return steadyPlan{ok: true}
	}
	if e.general {
		return e.analyseAll(n)
	}
	if n != e.dec {
		return steadyPlan{ok: true} // a prompt (or its last token) still to prefill
	}
	// Decode iteration r from now takes crossing[(epoch+r) mod bs] new blocks.
	kBlocks := e.blockSteps(n, func(r int) int { return len(e.crossing[e.residue(e.epoch+r)]) })
	kFinish := e.ends[0].end - e.epoch
	return steadyPlan{ok: true, k: min(kFinish, kBlocks), kFinish: kFinish, n: n, ctx0: float64(e.decBase + n*e.epoch)}
}

// blockSteps is how many decode iterations of n sequences the free KV blocks last, where
// crossings(r) of them take a new block in iteration r (1 <= r <= block size) from now and
// every sequence one block in each block-size iterations: k = q*bs + rem iterations take
// q*n + crossings(1) + ... + crossings(rem) blocks.
func (e *Engine) blockSteps(n int, crossings func(r int) int) int {
	bs := e.cfg.BlockSize
	q := e.free / n
	left := e.free - q*n
	rem := 0
	for r := 1; r < bs; r++ {
		c := crossings(r)
		if c > left {
			break
		}
		left -= c
		rem = r
	}
	return q*bs + rem
}

// analyseAll is analyse visiting every running sequence, for the general path's engine, whose
// decoders are not grouped; n is the number of active sequences.
func (e *Engine) analyseAll(n int) steadyPlan {
	bs := e.cfg.BlockSize
	var cnt [65]int // offsets when bs <= 64; fall back to a slice otherwise
	var counts []int
	if bs < len(cnt) {
		counts = cnt[:bs+1]
	} else {
		counts = make([]int, bs+1)
	}
	kFinish := math.MaxInt
	ctx0 := 0.0
	for _, s := range e.running {
		if e.opens > 0 && s.stalled() {
			continue
		}
		if s.length()-s.computed != 1 || s.generated == 0 {
			return steadyPlan{ok: true} // not a decode: a prompt (or its last token) still to prefill
		}
		kFinish = min(kFinish, s.req.OutputTokens-s.generated)
		ctx0 += float64(s.computed)
		// The first step that needs a new block: the token at position computed+1 opens one
		// when computed is a multiple of the block size.
		r := (s.blocks+s.cached)*bs - s.computed + 1
		counts[r]++
	}
	kBlocks := e.blockSteps(n, func(r int) int { return counts[r] })
	return steadyPlan{ok: true, k: min(kFinish, kBlocks), kFinish: kFinish, n: n, ctx0: ctx0}
}

// admissible reports whether a waiting sequence could join the batch in the next iteration.
func (e *Engine) admissible() bool {
	head := e.nextWaiting()
	n := e.active()
	if head == nil || n >= e.cfg.MaxNumSeqs {
		return false
	}
	budget := e.cfg.MaxBatchedTokens
	if e.cfg.ChunkedPrefill {
		budget -= n
	}
	hit, unreferenced := e.hits(head)
	_, blocks, ok := e.admitCost(head, hit, budget)
	return ok && e.free-blocks-unreferenced >= e.cfg.WatermarkBlocks
}

// stretchSeconds is the duration of k steady decode iterations of the current state's steady
// plan (steadySteps): see CostModel.decodeSeconds.
func (e *Engine) stretchSeconds(k int) float64 {
	if !e.plan.ok {
		e.steadySteps()
	}
	return e.cost.decodeSeconds(e.plan.n, k, e.plan.ctx0)
}

// stepsToReach returns the smallest k' <= k whose stretch lasts at least horizon seconds, or k.
func (e *Engine) stepsToReach(k int, horizon float64) int {
	if e.stretchSeconds(k) < horizon {
		return k
	}
	return sort.Search(k, func(i int) bool { return e.stretchSeconds(i+1) >= horizon }) + 1
}

// decodeStretch runs k steady decode iterations at once.
func (e *Engine) decodeStretch(k int) *Iteration {
	sec := e.stretchSeconds(k)
	n := e.plan.n
	done := k >= e.plan.kFinish // a sequence produces its last token
	it := e.reset()
	if !e.general {
		e.free -= e.newBlocks(k)
		e.epoch += k
		if !e.omitProduced {
			for _, s := range e.running {
				if s.decoding {
					it.Produced = append(it.Produced, Produced{ID: s.req.ID, Tokens: k})
				}
			}
		}
		e.reclaim()
		if done {
			e.finishFast(it, nil)
		}
		e.account(it, k, n, sec)
		return it
	}
	for _, s := range e.running {
		if e.opens > 0 && s.stalled() {
			continue
		}
		s.computed += k
		s.generated += k
		nb := e.blocksFor(s.computed) - s.cached
		e.free -= nb - s.blocks
		s.blocks = nb
		if !e.omitProduced {
			it.Produced = append(it.Produced, Produced{ID: s.req.ID, Tokens: k})
		}
	}
	e.reclaim()
	if done {
		e.finish(it)
	}
	e.account(it, k, n, sec)
	return it
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// residue returns x mod the block size in [0, block size), for x of either sign: a mask when
// the size is a power of two (vLLM's are), so that the decoders' loops divide at no step.
func (e *Engine) residue(x int) int {
	if e.blockShift >= 0 {
		return x & (e.cfg.BlockSize - 1)
	}
	r := x % e.cfg.BlockSize
	if r < 0 {
		r += e.cfg.BlockSize
	}
	return r
}

// blocksFor returns the KV blocks that tokens occupy (tokens >= 0).
func (e *Engine) blocksFor(tokens int) int {
	if e.blockShift >= 0 {
		return (tokens + e.cfg.BlockSize - 1) >> e.blockShift
	}
	return ceilDiv(tokens, e.cfg.BlockSize)
}

// SteadyPlan returns how many identical decode iterations the engine can run before its batch
// changes (a finish or the KV cache running out) and how long they take, without running
// them; steps is 0 when the next iteration is not a plain decode of the whole batch (then call
// Step). A backend that may be interrupted by arrivals plans a stretch, and later runs all of
// it (RunSteady) or the part that has elapsed (StepsToReach).
func (e *Engine) SteadyPlan() (steps int, d time.Duration) {
	k := e.steadySteps()
	if k == 0 {
		return 0, 0
	}
	return k, seconds(e.stretchSeconds(k))
}

// StepsToReach returns the fewest of k planned steady iterations that last at least d (k if
// they all end before d).
func (e *Engine) StepsToReach(k int, d time.Duration) int {
	return e.stepsToReach(k, d.Seconds())
}

// RunSteady runs k steady decode iterations; k must not exceed what SteadyPlan returned.
func (e *Engine) RunSteady(k int) *Iteration {
	if max := e.steadySteps(); k < 1 || k > max {
		panic(fmt.Sprintf("sim: RunSteady(%d) outside the steady plan (%d)", k, max))
	}
	return e.decodeStretch(k)
}

// Abort removes a request wherever it is (waiting, preempted or running) and frees its KV
// blocks, as vLLM aborts a request whose client went away. It returns the output tokens the
// request had produced and whether it was in the engine.
func (e *Engine) Abort(id uint64) (generated int, ok bool) {
	e.plan.ok = false
	e.sync()
	defer e.rebuild()
	if s := e.find(id); s != nil && s.req.Open {
		e.opens--
	}
	for i, s := range e.running {
		if s.req.ID == id {
			e.free += s.blocks
			e.release(s)
			s.blocks = 0
			e.running = append(e.running[:i], e.running[i+1:]...)
			return s.generated, true
		}
	}
	for i, s := range e.front {
		if s.req.ID == id {
			e.front = append(e.front[:i], e.front[i+1:]...)
			return s.generated, true
		}
	}
	for i := e.qhead; i < len(e.waiting); i++ {
		if s := e.waiting[i]; s.req.ID == id {
			e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
			return s.generated, true
		}
	}
	for i, s := range e.pq {
		if s.req.ID == id {
			e.pqRemove(i)
			return s.generated, true
		}
	}
	return 0, false
}
