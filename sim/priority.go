package sim

import "slices"

// Priority scheduling (EngineConfig.SchedulingPolicy "priority"): the waiting queue as a heap
// and the running loop's preemption, as vLLM V1 (v0.11.1) schedules them. See Engine.

// prioLess orders waiting sequences as vLLM V1's PriorityRequestQueue does, by (priority,
// arrival_time): a lower priority value first, then the earlier arrival. Arrivals are
// distinct, so the order is total.
func prioLess(a, b *seqState) bool {
	if a.req.Priority != b.req.Priority {
		return a.req.Priority < b.req.Priority
	}
	return a.arrival < b.arrival
}

// pqPush adds s to the waiting heap.
func (e *Engine) pqPush(s *seqState) {
	e.pq = append(e.pq, s)
	e.pqUp(len(e.pq) - 1)
}

// pqRemove takes the sequence at index i off the waiting heap.
func (e *Engine) pqRemove(i int) {
	n := len(e.pq) - 1
	if i != n {
		e.pq[i] = e.pq[n]
	}
	e.pq[n] = nil
	e.pq = e.pq[:n]
	if i < n {
		e.pqDown(i)
		e.pqUp(i)
	}
}

func (e *Engine) pqUp(i int) {
	h := e.pq
	for i > 0 {
		p := (i - 1) / 2
		if !prioLess(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (e *Engine) pqDown(i int) {
	h := e.pq
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && prioLess(h[c+1], h[c]) {
			c++
		}
		if !prioLess(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// victim is the index in running of the sequence priority scheduling preempts: the last in
// (priority, arrival) order, vLLM V1's max(self.running, key=lambda r: (r.priority,
// r.arrival_time)). running must not be empty.
func (e *Engine) victim() int {
	v := 0
	for i, s := range e.running[1:] {
		if prioLess(e.running[v], s) {
			v = i + 1
		}
	}
	return v
}

// scheduleRunningPriority is scheduleRunning under priority scheduling, after vLLM V1's
// Scheduler.schedule (vllm/v1/core/sched/scheduler.py, v0.11.1): running sequences are visited
// in admission order; while one lacks KV blocks, the running sequence last in (priority,
// arrival) order is preempted. A victim scheduled earlier in this iteration is unscheduled and
// gives back its tokens of the budget (vLLM PR #26661), and the visit goes on from the
// sequence that took the place of the one being scheduled in the shrunk list (PR #26754).
// When the victim is the sequence being scheduled, no further running sequence is scheduled.
func (e *Engine) scheduleRunningPriority(sched []*seqState, budget int) ([]*seqState, int) {
	for i := 0; i < len(e.running); i++ {
		s := e.running[i]
		n := min(s.length()-s.computed, budget)
		if n <= 0 {
			continue
		}
		blocks := e.blocksFor(s.computed+n) - s.blocks - s.cached
		self := false
		for blocks > e.free && !self {
			v := e.victim()
			victim := e.running[v]
			if v < i {
				// Before s in the batch: it was visited. vLLM moves its index back only
				// for a victim it had scheduled, which every running sequence before s is
				// in vLLM (it visits until the budget runs out); here an open sequence
				// stalled for its prompt is visited without being scheduled, and the index
				// follows the list all the same.
				i--
				if victim.chunk > 0 {
					budget += victim.chunk
					if k := slices.Index(sched, victim); k >= 0 {
						sched = slices.Delete(sched, k, k+1)
					}
				}
			}
			e.running = slices.Delete(e.running, v, v+1)
			e.evict(victim)
			self = victim == s
		}
		if self {
			break // s was the last in priority order: it gave up its own blocks
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
