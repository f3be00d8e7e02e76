package sim

import (
	"cmp"
	"slices"
)

// The fast path of the engine: iterations that leave the decoders (Engine.epoch) grouped, so
// that an iteration costs in the number of sequences that are not plain decodes, not in the
// batch. Each function here gives exactly what the general path (generalStep, analyseAll and
// the general part of decodeStretch) gives for the same state; TestFastPathMatchesGeneral
// drives both with random work and compares every iteration.

// decodes reports whether running sequence s is a plain decode: its prompt and all its output
// but the last token are computed, so each iteration computes that token and samples the next.
func (e *Engine) decodes(s *seqState) bool {
	return !s.req.Open && s.generated > 0 && s.computed == s.length()-1
}

// The decoders' finishes: a min-heap by end, from which a preempted decoder is taken out too.
// Each entry carries its decoder's end, which does not change while it decodes (materialize
// advances at and generated together): comparing ends does not read the decoders' states,
// scattered in memory (a third of finishFast's time in a profile did). Decoders that end
// together may leave the heap in any order: only the earliest end and the set of decoders
// whose end has come are read from it, and finishFast sorts those by admission.
type endRef struct {
	end int
	s   *seqState
}

func newEndRef(s *seqState) endRef { return endRef{end: s.end(), s: s} }

func endsLess(a, b *endRef) bool { return a.end < b.end }

func (e *Engine) endsSwap(i, j int) {
	h := e.ends
	h[i], h[j] = h[j], h[i]
}

func (e *Engine) endsUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !endsLess(&e.ends[i], &e.ends[p]) {
			return
		}
		e.endsSwap(i, p)
		i = p
	}
}

func (e *Engine) endsDown(i int) {
	n := len(e.ends)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && endsLess(&e.ends[c+1], &e.ends[c]) {
			c++
		}
		if !endsLess(&e.ends[c], &e.ends[i]) {
			return
		}
		e.endsSwap(i, c)
		i = c
	}
}

// endsRemove takes decoder s off the heap. A finishing decoder is at the top; a preempted one
// is looked for (the heap's entries do not track their places: writing each moved decoder's
// place into its state, scattered in memory, cost more than these rare scans).
func (e *Engine) endsRemove(s *seqState) {
	if e.ends[0].s == s {
		e.endsPop()
		return
	}
	i, n := slices.IndexFunc(e.ends, func(r endRef) bool { return r.s == s }), len(e.ends)-1
	if i != n {
		e.endsSwap(i, n)
	}
	e.ends[n] = endRef{}
	e.ends = e.ends[:n]
	if i < n {
		e.endsDown(i)
		e.endsUp(i)
	}
}

// endsPop takes the top entry off the heap. The hole it leaves goes down the smaller child at
// each level to a leaf, where the last entry, put there, rises to its place (it came from the
// bottom, so it rarely rises far): a comparison a level instead of two, and one chosen without
// a branch, against a swap a level that guessed a branch at each.
func (e *Engine) endsPop() {
	h := e.ends
	n := len(h) - 1
	last := h[n]
	h[n] = endRef{}
	h = h[:n]
	e.ends = h
	if n == 0 {
		return
	}
	i := 0
	for {
		c := 2*i + 1
		if c+1 >= n {
			if c < n { // an only child
				h[i] = h[c]
				i = c
			}
			break
		}
		// The right child when its end is the smaller: the sign of the difference of two
		// epochs (far from overflowing), so that no branch is guessed.
		c += int(uint64(h[c+1].end-h[c].end) >> 63)
		h[i] = h[c]
		i = c
	}
	for i > 0 {
		p := (i - 1) / 2
		if h[p].end <= last.end {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = last
}

// dropRunning removes fin, in admission order, from running.
func (e *Engine) dropRunning(fin []*seqState) {
	if len(fin) <= 2 { // a move of the tail each
		for _, s := range fin {
			i := place(e.running, s)
			e.running = slices.Delete(e.running, i, i+1)
		}
		return
	}
	// One pass: both lists are in admission order.
	i := place(e.running, fin[0])
	kept, f := e.running[:i], 0
	for _, s := range e.running[i:] {
		if f < len(fin) && s == fin[f] {
			f++
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
}

// shortList is the longest list place scans in order.
const shortList = 16

// byOrder finds where s is or would go in list, which is in admission order.
func byOrder(list []*seqState, s *seqState) (int, bool) {
	return slices.BinarySearchFunc(list, s.order, func(r *seqState, o uint64) int { return cmp.Compare(r.order, o) })
}

// place is the index of s in list, which is in admission order and holds it. It compares
// pointers only: in order through a short list (a crossing list, a sixteenth of the decoders,
// fits in a few cache lines), else outward from where s's order would put it were the orders
// between the list's ends evenly spread. A binary search (byOrder) reads a state, scattered
// in memory, and guesses a branch at every probe, and was a sixth of the fast path's time in
// a profile; the guess reads three states, which for a short list cost more than the scan.
func place(list []*seqState, s *seqState) int {
	n := len(list)
	if n <= shortList {
		for i, x := range list {
			if x == s {
				return i
			}
		}
		panic("sim: a sequence left a list that does not hold it")
	}
	g := 0
	if lo, hi := list[0].order, list[n-1].order; hi > lo && s.order > lo {
		g = min(n-1, int(float64(n-1)*float64(s.order-lo)/float64(hi-lo)))
	}
	for d := 0; g+d < n || g-d >= 0; d++ {
		if i := g + d; i < n && list[i] == s {
			return i
		}
		if i := g - d; d > 0 && i >= 0 && list[i] == s {
			return i
		}
	}
	panic("sim: a sequence left a list that does not hold it")
}

// crossRes is the residue mod the block size of the epochs whose iteration gives decoder s a
// new KV block. A running sequence holds blocksFor(computed) blocks (with its cached ones),
// so it takes a new one in the iteration that starts with computed a multiple of the block
// size: the iteration ending epoch at + j with computed + j - 1 ≡ 0, that is epoch ≡ at -
// computed + 1. The residue does not change as the decoder advances.
func (e *Engine) crossRes(s *seqState) int {
	return e.residue(s.at - s.computed + 1)
}

// join makes running sequence s a decoder as of the current epoch.
func (e *Engine) join(s *seqState) {
	e.group(s)
	e.ends = append(e.ends, newEndRef(s))
	e.endsUp(len(e.ends) - 1)
}

// group counts s as a decoder, but for the heap.
func (e *Engine) group(s *seqState) {
	s.decoding, s.at = true, e.epoch
	e.dec++
	e.decBase += s.computed - s.at
	r := e.crossRes(s)
	list := e.crossing[r]
	if n := len(list); n == 0 || list[n-1].order < s.order {
		e.crossing[r] = append(list, s)
	} else {
		i, _ := byOrder(list, s)
		e.crossing[r] = slices.Insert(list, i, s)
	}
}

// materialize brings decoder s's computed, generated and blocks up to the current epoch (the
// KV blocks were taken from free as the epochs passed).
func (e *Engine) materialize(s *seqState) {
	d := e.epoch - s.at
	s.computed += d
	s.generated += d
	s.at = e.epoch
	s.blocks = e.blocksFor(s.computed) - s.cached
}

// leave ends decoder s's membership; the caller has taken it off the heap.
func (e *Engine) leave(s *seqState) {
	e.materialize(s)
	e.dec--
	e.decBase -= s.computed - s.at
	r := e.crossRes(s)
	i := place(e.crossing[r], s)
	e.crossing[r] = slices.Delete(e.crossing[r], i, i+1)
	s.decoding = false
}

// sync brings every decoder up to date and ungroups them: every running sequence is then in
// others, as the general path expects.
func (e *Engine) sync() {
	if e.dec == 0 {
		return
	}
	for _, s := range e.running {
		if s.decoding {
			e.materialize(s)
			s.decoding = false
		}
	}
	e.dec, e.decBase = 0, 0
	for r := range e.crossing {
		clear(e.crossing[r])
		e.crossing[r] = e.crossing[r][:0]
	}
	clear(e.ends)
	e.ends = e.ends[:0]
	e.others = append(e.others[:0], e.running...)
}

// rebuild groups the running sequences that are plain decodes as decoders (after the general
// path, which leaves none).
func (e *Engine) rebuild() {
	e.sync()
	kept := e.others[:0]
	for _, s := range e.running {
		if !e.general && e.decodes(s) {
			e.group(s) // in admission order: appended to their crossing lists
			e.ends = append(e.ends, newEndRef(s))
		} else {
			kept = append(kept, s)
		}
	}
	clear(e.others[len(kept):])
	e.others = kept
	for i := len(e.ends)/2 - 1; i >= 0; i-- {
		e.endsDown(i)
	}
}

// dropOther removes s from others if it is there (the newest first: preemption takes it).
func (e *Engine) dropOther(s *seqState) {
	for i := len(e.others) - 1; i >= 0; i-- {
		if e.others[i] == s {
			e.others = slices.Delete(e.others, i, i+1)
			return
		}
	}
}

// newBlocks is the KV blocks the decoders take in the next k decode iterations.
func (e *Engine) newBlocks(k int) int {
	if e.dec == 0 {
		return 0
	}
	bs := e.cfg.BlockSize
	q, rem := k/bs, k%bs
	if e.blockShift >= 0 {
		q, rem = k>>e.blockShift, k&(bs-1) // k >= 0
	}
	n := q * e.dec
	for j := 1; j <= rem; j++ {
		n += len(e.crossing[e.residue(e.epoch+j)])
	}
	return n
}

// fastStep runs the next iteration, as generalStep would, visiting only the others and the
// decoders that take a new KV block. It reports false, having changed nothing, when the token
// budget would leave a decoder out (or when general is set).
func (e *Engine) fastStep(it *Iteration) bool {
	if e.general {
		return false
	}
	sched := e.sched[:0]
	budget := e.cfg.MaxBatchedTokens
	decoding := 0 // the decoders that take part in this iteration
	if !e.cfg.ChunkedPrefill {
		// V0: whole prompts first, which leaves the decoders out; decodes when none fits.
		admitted := false
		if sched, budget, admitted = e.admit(sched, budget); !admitted {
			// admit changed nothing. Every running sequence of a V0 engine decodes after
			// the iteration that admitted it, so others are empty but in odd states.
			if len(e.others) > 0 || e.dec > budget {
				return false
			}
			sched, _ = e.scheduleGrouped(sched, budget)
			decoding = e.dec
		}
	} else {
		// scheduleRunning gives a token to each decoder and the rest of their prompt (or the
		// tokens Grow added) to the others, in admission order, while the budget lasts: it
		// may cut only the last running sequence, after every decoder.
		need := e.dec
		if need > budget {
			return false // more decoders than tokens (closed open sequences joined a full batch)
		}
		for _, s := range e.others {
			n := s.length() - s.computed
			if n <= 0 {
				continue
			}
			if need+n > budget && (s != e.running[len(e.running)-1] || need >= budget) {
				return false
			}
			need += n
		}
		var used int
		sched, used = e.scheduleGrouped(sched, budget)
		budget -= e.dec + used
		decoding = e.dec
		if !e.preempt {
			sched, budget, _ = e.admit(sched, budget)
		}
	}
	_ = budget
	e.sched = sched
	var b Batch
	if decoding > 0 {
		// A decode computes one token after computed cached ones: c*prior + c(c+1)/2 pairs
		// with c = 1, as below. Every term is an integer, so the float sums are exact and
		// do not depend on the order.
		ctx := float64(e.decBase + decoding*e.epoch)
		b.Tokens = decoding
		b.AttentionPairs = ctx + float64(decoding)
		b.KVTokens = ctx + float64(decoding)
		b.Sampled = decoding
	}
	addScheduled(&b, it, sched)
	b.Seqs = decoding + len(sched)
	if b.Seqs == 0 {
		return true // nothing could run (the general path returns the same empty iteration)
	}
	sec := e.cost.IterationSeconds(b)
	if decoding > 0 {
		e.epoch++
	}
	done := decoding > 0 && e.ends[0].end <= e.epoch
	for _, s := range sched {
		s.computed += s.chunk
		s.chunk = 0
		if e.prefix != nil && s.computed <= s.req.PromptTokens {
			e.register(s)
		}
		if s.computed == s.length() && !s.req.Open {
			s.generated++
			s.mark = true
			if s.generated == 1 {
				it.FirstToken = append(it.FirstToken, s.req.ID)
			}
			done = done || s.generated >= s.req.OutputTokens
		}
	}
	if !e.omitProduced {
		for _, s := range e.running { // the general path's order: running, then admitted
			if s.mark || s.decoding && decoding > 0 {
				it.Produced = append(it.Produced, Produced{ID: s.req.ID, Tokens: 1})
			}
		}
	}
	for _, s := range sched {
		s.mark = false
	}
	if done {
		e.finishFast(it, sched)
	}
	// Sequences whose prompt is now computed decode from the next iteration on.
	kept := e.others[:0]
	for _, s := range e.others {
		if e.decodes(s) {
			e.join(s)
		} else {
			kept = append(kept, s)
		}
	}
	clear(e.others[len(kept):])
	e.others = kept
	e.account(it, 1, b.Seqs, sec)
	clear(sched)
	return true
}

// scheduleGrouped is scheduleRunning with grouped decoders: it visits, in admission order, the
// others and the decoders that take a new KV block in this iteration (the rest need nothing
// that can run out), preempting the newest sequences while the cache lacks blocks. It
// returns the others scheduled and their tokens; every decoder left runs.
func (e *Engine) scheduleGrouped(sched []*seqState, budget int) ([]*seqState, int) {
	r := (e.epoch + 1) % e.cfg.BlockSize
	used := 0
	i, j := 0, 0
	for {
		// Preemptions take the newest sequences, which lie after both cursors.
		cross := e.crossing[r]
		switch {
		case i < len(cross) && (j >= len(e.others) || cross[i].order < e.others[j].order):
			s := cross[i]
			i++
			if !e.allocate(s, 1) {
				return sched, used
			}
		case j < len(e.others):
			s := e.others[j]
			j++
			need := s.length() - s.computed
			if !e.cfg.ChunkedPrefill && need > 1 {
				continue
			}
			n := min(need, budget-e.dec-used)
			if n <= 0 {
				continue
			}
			if !e.allocate(s, e.blocksFor(s.computed+n)-s.blocks-s.cached) {
				return sched, used
			}
			s.chunk = n
			used += n
			sched = append(sched, s)
		default:
			return sched, used
		}
	}
}

// allocate gives running sequence s blocks new KV blocks, preempting the newest sequences
// while there are too few; it reports false when s itself was preempted.
func (e *Engine) allocate(s *seqState, blocks int) bool {
	for blocks > e.free {
		victim := e.running[len(e.running)-1]
		if victim.decoding {
			e.endsRemove(victim)
			e.leave(victim)
		}
		e.preemptSeq(victim)
		if victim == s {
			return false
		}
	}
	e.free -= blocks
	e.reclaim()
	if !s.decoding {
		s.blocks += blocks
	}
	return true
}

// finishFast removes the sequences that produced their last token: the decoders whose end
// has come and those of sched (not decoders) that are done, in admission order, as finish.
func (e *Engine) finishFast(it *Iteration, sched []*seqState) {
	fin := e.finished[:0]
	for e.dec > 0 && e.ends[0].end <= e.epoch {
		s := e.ends[0].s
		e.endsRemove(s)
		e.leave(s)
		fin = append(fin, s)
	}
	for _, s := range sched {
		if s.generated >= s.req.OutputTokens {
			e.dropOther(s)
			fin = append(fin, s)
		}
	}
	slices.SortFunc(fin, func(a, b *seqState) int { return cmp.Compare(a.order, b.order) })
	e.dropRunning(fin)
	for _, s := range fin {
		e.free += s.blocks
		e.release(s)
		s.blocks = 0
		it.Finished = append(it.Finished, s.req.ID)
		if len(e.spare) < e.cfg.MaxNumSeqs {
			e.spare = append(e.spare, s)
		}
	}
	clear(fin)
	e.finished = fin[:0]
}
