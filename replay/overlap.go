package replay

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/traces"
)

// Prefill-decode overlap on real servers (backend.Grower). An OpenAI-compatible server cannot
// hold a request whose prompt is still growing, so replay approximates it with the server's
// automatic prefix cache: when an open call is submitted, and again each time an input's output
// joins its prompt, a prefill-only request (max_tokens 1) of the prompt known so far is sent;
// when its last input is in, the call itself is queued on its worker with its whole prompt,
// whose leading blocks the cache then serves. Prompts grow by appending (PromptIDs draws a
// call's own tokens by position), so each prefill extends the previous one. The approximation
// differs from the simulated engine's growing sequence in that the cached blocks are not held:
// the server may evict them under memory pressure, and the call queues again behind the
// worker's other calls when it closes. It needs prefix caching on the servers ([replay]
// prefix_caching = "workload"); without it the prefills are wasted work, and the first open
// call draws a warning.

var _ backend.Grower = (*Backend)(nil)

// SubmitOpen implements backend.Grower: the call is held on its worker and its known prompt
// is prefilled.
func (b *Backend) SubmitOpen(w backend.WorkerID, c *traces.Call, priority int) error {
	if w < 0 || int(w) >= len(b.dispatchers) {
		return fmt.Errorf("replay: no worker %d", w)
	}
	b.mu.Lock()
	srv := b.servers[serverKey{int(w), c.Model}]
	b.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("replay: worker %d does not hold %s", w, c.Model)
	}
	if err := srv.checkPriority(w, c, priority); err != nil {
		return err
	}
	b.warnOverlap.Do(func() {
		if !b.cfg.PrefixCaching {
			slog.Warn("prefill-decode overlap on replay works through the servers' prefix cache, which is off: the early prefills are wasted work ([replay] prefix_caching = \"workload\" turns it on)")
		}
	})
	cp := *c
	ref := backend.CallRef{ID: c.ID, Query: c.Query, Role: c.Role, Layer: c.Layer, Model: c.Model, InputTokens: c.InputTokens}
	b.begin()
	d := b.dispatchers[w]
	j := &job{call: &cp, ref: ref, srv: srv, submitted: b.Now(), held: true, priority: priority}
	d.mu.Lock()
	d.jobs[c.ID] = j
	d.mu.Unlock()
	if _, ok := b.cfg.Finished[c.ID]; !ok {
		d.prefill(j.srv, &cp, priority)
	}
	return nil
}

// Grow implements backend.Grower: the tokens join the held call's prompt and are prefilled;
// with close, the call joins its worker's queue.
func (b *Backend) Grow(w backend.WorkerID, id int, tokens int, close bool) error {
	if w < 0 || int(w) >= len(b.dispatchers) {
		return fmt.Errorf("replay: no worker %d", w)
	}
	d := b.dispatchers[w]
	d.mu.Lock()
	j := d.jobs[id]
	if j == nil || !j.held {
		d.mu.Unlock()
		return fmt.Errorf("replay: call %d is not held open on worker %d", id, w)
	}
	j.call.InputTokens += tokens
	cp := *j.call
	if close {
		j.held = false
		delete(d.jobs, id) // push files it again
	}
	d.mu.Unlock()
	if !close {
		if tokens > 0 {
			d.prefill(j.srv, &cp, j.priority)
		}
		return nil
	}
	j.ref.InputTokens = cp.InputTokens
	if t, ok := b.cfg.Finished[id]; ok {
		go b.emit(backend.Event{Kind: backend.EventDone, At: b.Now(), Worker: w, Model: cp.Model, Call: &j.ref, Timing: t})
		return nil
	}
	d.push(j)
	return nil
}

// prefill sends a prefill-only request of c's prompt as it stands, with the call's priority,
// in the worker's send order, and reads it to its end in the background; its failure only
// costs the cache hit.
func (d *dispatcher) prefill(srv *server, c *traces.Call, priority int) {
	b := d.b
	req := b.request(c, 1, srv.priorityField(priority))
	req.MinTokens, req.StreamOptions.ContinuousUsage = 0, false
	d.prefills.Add(1)
	go func() {
		defer d.prefills.Done()
		d.sendMu.Lock()
		s, err := open(b.ctx, srv.hc, srv.url, b.cfg.APIKey, req, b.cfg.Timeouts, nil)
		d.sendMu.Unlock()
		if err == nil {
			_, err = s.read(nil)
		}
		if err != nil && b.ctx.Err() == nil {
			slog.Debug("overlap prefill failed", "call", c.ID, "worker", d.worker, "url", srv.url, "err", err)
		}
	}()
}

// prefillGroup counts a dispatcher's prefill-only requests under way.
type prefillGroup = sync.WaitGroup
