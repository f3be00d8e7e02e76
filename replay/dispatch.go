package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/traces"
)

// job is one submitted call waiting for, or holding, a place on its server.
type job struct {
	seq       uint64 // submission order on the worker
	call      *traces.Call
	ref       backend.CallRef
	srv       *server
	submitted time.Duration
	// priority is the call's engine priority (backend.Backend.Submit): on a server that
	// schedules by priority, the queue is in (priority, seq) order and the request carries it.
	priority int
	// cancelled says the Driver cancelled the call, and s is its open stream (both under the
	// dispatcher's mu): cancelling closes the stream, so the server aborts the request.
	cancelled bool
	s         *stream
	// held says the call was submitted open (prefill-decode overlap) and waits for its last
	// input before it is queued (see Backend.Grow).
	held bool
	// eligible is when the call could first have been sent (real time): it was at the head of
	// its server's queue and the server had room. Its sending later is the replay's own lag.
	eligible time.Time
	// ended is when its last attempt's stream ended (real time; zero: not known).
	ended time.Time
}

// errCancelled is the cause of a stream closed because its call was cancelled.
var errCancelled = errors.New("the call was cancelled")

// dispatcher sends one worker's calls in submission order, at most srv.limit in flight per
// server; the calls queued for a server that schedules by priority go in (priority,
// submission) order instead, as the server's own waiting queue would take them. Sends are
// serialised: a request goes out only once the previous one's response headers have arrived,
// so the server has queued the previous call first.
type dispatcher struct {
	b      *Backend
	worker int
	wake   chan struct{} // capacity 1: a submission or a finished call

	mu       sync.Mutex
	seq      uint64
	queues   map[*server][]*job // per server, in submission order (priority servers: in (priority, seq) order)
	inflight map[*server]int
	jobs     map[int]*job // queued or in flight, by call ID

	sendMu sync.Mutex // held while a request is sent and its headers awaited
	// prefills are the overlap's prefill-only requests under way.
	prefills prefillGroup
}

func newDispatcher(b *Backend, worker int) *dispatcher {
	return &dispatcher{b: b, worker: worker, wake: make(chan struct{}, 1), queues: map[*server][]*job{}, inflight: map[*server]int{},
		jobs: map[int]*job{}}
}

func (d *dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// push queues a submitted call; it never blocks.
func (d *dispatcher) push(j *job) {
	d.mu.Lock()
	d.seq++
	j.seq = d.seq
	q := d.queues[j.srv]
	i := len(q)
	if j.srv.model.priority() {
		// After every queued call of the same or a lower priority value: vLLM's
		// PriorityRequestQueue order, (priority, arrival).
		for i > 0 && q[i-1].priority > j.priority {
			i--
		}
		if i == 0 && len(q) > 0 {
			q[0].eligible = time.Time{} // no longer the head: it could not be sent next
		}
	}
	d.queues[j.srv] = slices.Insert(q, i, j)
	d.jobs[j.call.ID] = j
	d.markEligible(j.srv, time.Now())
	d.mu.Unlock()
	d.signal()
}

// markEligible records, under mu, that the head of srv's queue may be sent from at on, if the
// server has room and the head has no earlier mark.
func (d *dispatcher) markEligible(srv *server, at time.Time) {
	if q := d.queues[srv]; len(q) > 0 && d.inflight[srv] < srv.limit && q[0].eligible.IsZero() {
		q[0].eligible = at
	}
}

// cancel cancels a call: one still queued is dropped and reported at once; one sent has its
// stream closed (the server aborts it) and is reported when its reader sees it end.
func (d *dispatcher) cancel(id int) error {
	d.mu.Lock()
	j := d.jobs[id]
	if j == nil {
		// It has finished: its EventDone (or EventFailed) is on its way, as the contract
		// allows.
		d.mu.Unlock()
		return nil
	}
	j.cancelled = true
	if j.held {
		// Held open: nothing of it is in flight but its prefills.
		delete(d.jobs, id)
		d.mu.Unlock()
		now := d.b.Now()
		go d.b.emit(backend.Event{Kind: backend.EventCancelled, At: now, Worker: backend.WorkerID(d.worker), Model: j.call.Model,
			Call: &j.ref, Timing: backend.CallTiming{Submitted: j.submitted, Started: now, FirstToken: now, End: now}})
		return nil
	}
	q := d.queues[j.srv]
	for i, x := range q {
		if x == j {
			d.queues[j.srv] = append(q[:i:i], q[i+1:]...)
			if len(d.queues[j.srv]) == 0 {
				delete(d.queues, j.srv)
			}
			delete(d.jobs, id)
			d.mu.Unlock()
			now := d.b.Now()
			go d.b.emit(backend.Event{Kind: backend.EventCancelled, At: now, Worker: backend.WorkerID(d.worker), Model: j.call.Model,
				Call: &j.ref, Timing: backend.CallTiming{Submitted: j.submitted, Started: now, FirstToken: now, End: now}})
			return nil
		}
	}
	s := j.s
	d.mu.Unlock()
	if s != nil {
		s.cancel(errCancelled)
	}
	return nil
}

// cancelled reports whether j was cancelled.
func (d *dispatcher) cancelled(j *job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return j.cancelled
}

// next takes, among the heads of the queues of servers with room, the earliest submitted call
// (a priority server's head is its queue's first in (priority, submission) order), waiting
// until there is one; nil when the backend closes.
func (d *dispatcher) next() *job {
	for {
		d.mu.Lock()
		var best *job
		for srv, q := range d.queues {
			if len(q) > 0 && d.inflight[srv] < srv.limit && (best == nil || q[0].seq < best.seq) {
				best = q[0]
			}
		}
		if best != nil {
			q := d.queues[best.srv]
			q[0] = nil
			if len(q) == 1 {
				delete(d.queues, best.srv)
			} else {
				d.queues[best.srv] = q[1:]
			}
			d.inflight[best.srv]++
			if best.eligible.IsZero() {
				best.eligible = time.Now()
			}
			d.markEligible(best.srv, time.Now())
			d.mu.Unlock()
			return best
		}
		d.mu.Unlock()
		select {
		case <-d.wake:
		case <-d.b.ctx.Done():
			return nil
		}
	}
}

// release gives a finished call's place back; ended is when the call's stream ended (its
// successor in the place could have been sent from then on).
func (d *dispatcher) release(srv *server, ended time.Time) {
	d.mu.Lock()
	d.inflight[srv]--
	if d.inflight[srv] == 0 {
		delete(d.inflight, srv)
	}
	d.markEligible(srv, ended)
	d.mu.Unlock()
	d.signal()
}

// run sends calls until the backend closes.
func (d *dispatcher) run() {
	for {
		j := d.next()
		if j == nil {
			return
		}
		att := d.send(j)
		go d.finish(j, att)
	}
}

// attempt is one try of a call: the stream once its headers arrived, or why it failed. An
// attempt sent to a server that answers the headers only with the first token (Ollama) is
// pending until then.
type attempt struct {
	s    *stream
	err  error
	t    *tracked
	sent time.Time
	// pending delivers the attempt once its headers arrived (nil: it is complete).
	pending chan attempt
}

// wait waits for a pending attempt's headers.
func (a attempt) wait() attempt {
	if a.pending == nil {
		return a
	}
	r := <-a.pending
	r.sent = a.sent
	return r
}

// send opens one attempt of j. The worker's send lock is held until the server has taken the
// request: until its response headers arrived, for servers that answer them when they queue
// the request (vLLM, the emulator), or until it was written, for one that answers them with
// the first token (Ollama; the attempt is then pending).
func (d *dispatcher) send(j *job) attempt {
	b := d.b
	req := b.request(j.call, j.call.OutputTokens, j.srv.priorityField(j.priority))
	d.sendMu.Lock()
	sent := time.Now()
	if !j.eligible.IsZero() {
		lag := sent.Sub(j.eligible)
		b.over.record(func(o *overheads) { o.lag += lag; o.sends.add(lag) })
		j.eligible = time.Time{} // a retry is not the dispatcher's lag
	}
	if b.cfg.API.headersWithFirstToken() {
		wrote := make(chan struct{})
		res := make(chan attempt, 1)
		go func() { res <- d.open(j, req, wrote) }()
		select {
		case <-wrote:
			d.sendMu.Unlock()
			return attempt{sent: sent, pending: res}
		case a := <-res:
			d.sendMu.Unlock()
			a.sent = sent
			return a
		}
	}
	defer d.sendMu.Unlock()
	a := d.open(j, req, nil)
	a.sent = sent
	return a
}

// open sends req for j and waits for its response headers; wrote, when set, is closed once
// the request is written.
func (d *dispatcher) open(j *job, req request, wrote chan struct{}) attempt {
	b := d.b
	s, err := open(b.ctx, j.srv.hc, j.srv.url, b.cfg.APIKey, req, b.cfg.Timeouts, wrote)
	if err != nil {
		return attempt{err: err}
	}
	b.over.record(func(o *overheads) {
		o.dispatch.add(b.real(b.virtual(s.c.Sent) - j.submitted))
		o.headers.add(s.c.Accepted.Sub(s.c.Sent))
	})
	t := &tracked{sent: s.c.Sent}
	if j.srv.adm != nil {
		j.srv.adm.add(t)
	}
	d.mu.Lock()
	j.s = s
	if j.cancelled {
		s.cancel(errCancelled)
	}
	d.mu.Unlock()
	return attempt{s: s, t: t}
}

// request is the completion request of call c with maxTokens output tokens, its prompt in the
// form the servers' API takes; priority, when not nil, is its "priority" field.
func (b *Backend) request(c *traces.Call, maxTokens int, priority *int) request {
	req := request{Model: c.Model, MaxTokens: maxTokens, Stream: true,
		StreamOptions: streamOptions{IncludeUsage: true}, CacheSalt: b.cfg.CacheSalt, Priority: priority, promptTokens: c.InputTokens}
	switch b.cfg.API {
	case APIOllama:
		req.Prompt = PromptText(b.cfg.Seed, c.Query, c.ID, c.InputTokens-1, b.prefixOf(c), b.cfg.PromptWords)
		seed := 0
		req.Seed = &seed
		req.CacheSalt = "" // Ollama has none: each policy unloads its models at its end
	default:
		req.Prompt = b.prompt(c)
		req.MinTokens, req.IgnoreEOS = maxTokens, true
		req.StreamOptions.ContinuousUsage = true
	}
	return req
}

// priorityField is the "priority" field of a request of the given priority to s: the
// priority on a server that schedules by priority, nil (left out) on any other.
func (s *server) priorityField(priority int) *int {
	if !s.model.priority() {
		return nil
	}
	return &priority
}

// checkPriority refuses a priority other than 0 for a call to a server that schedules first
// come first served (vLLM V1 would ignore it, V0 refused it): the experiment's engine would
// not honour it.
func (s *server) checkPriority(w backend.WorkerID, c *traces.Call, priority int) error {
	if priority != 0 && !s.model.priority() {
		return fmt.Errorf("replay: call %d (query %d, %s) on worker %d: priority %d, but the engine schedules first come first served (scheduling_policy = %q schedules by priority)",
			c.ID, c.Query, c.Model, w, priority, SchedulingPriority)
	}
	return nil
}

// prompt is the call's prompt as token IDs.
func (b *Backend) prompt(c *traces.Call) []int {
	return PromptIDs(b.cfg.Seed, c.Query, c.ID, c.InputTokens, b.prefixOf(c), b.vocab[c.Model])
}

// sharedPrefix is how many leading tokens of c's prompt are its query's shared prefix (the
// question, the same tokens in every call of the query that carries it), which a server's
// prefix cache may serve: the workload's PrefixTokens.
func sharedPrefix(c *traces.Call) int { return c.PrefixTokens }

// finish reads the call's stream, retrying as configured, then frees its place and reports it.
func (d *dispatcher) finish(j *job, att attempt) {
	ev := d.complete(j, att)
	d.mu.Lock()
	delete(d.jobs, j.call.ID)
	d.mu.Unlock()
	ended := j.ended
	if ended.IsZero() {
		ended = time.Now()
	}
	d.release(j.srv, ended)
	ev.Call = &j.ref
	ev.Timing.Submitted = j.submitted
	d.b.emit(ev)
}

func (d *dispatcher) complete(j *job, att attempt) backend.Event {
	b, c, srv, w := d.b, j.call, j.srv, d.worker
	backoff := b.cfg.RetryBackoff // in the experiment's time
	err := att.err
	first := att.sent // the first attempt's sending
	attempts := 1
	var comp completion // the last attempt's
	for try := 0; ; try++ {
		if try > 0 {
			slog.Warn("retrying call", "call", c.ID, "query", c.Query, "model", c.Model, "worker", w, "url", srv.url, "attempt", try+1, "err", err)
			// The backoff is a span of the experiment's time: at time scale s it waits 1/s as
			// long in real time, so that it costs the results what it would cost on the GPUs.
			select {
			case <-time.After(b.real(backoff)):
			case <-b.ctx.Done():
				return backend.Event{Kind: backend.EventFailed, At: b.Now(), Worker: backend.WorkerID(w), Model: c.Model, Err: b.ctx.Err()}
			}
			backoff *= 2
			att = d.send(j)
			err = att.err
			attempts++
		}
		att = att.wait()
		comp = completion{Sent: att.sent}
		if att.s != nil {
			comp, err = att.s.read(func(at time.Time) {
				if srv.adm != nil {
					srv.adm.firstToken(att.t, at)
				}
			})
			if srv.adm != nil {
				srv.adm.remove(att.t)
			}
			j.ended = comp.Last
			if err == nil {
				j.ended = comp.End
				started := att.t.started(comp.FirstToken)
				b.over.record(func(o *overheads) { o.served += comp.End.Sub(comp.Sent) })
				return backend.Event{Kind: backend.EventDone, At: b.virtual(comp.End), Worker: backend.WorkerID(w), Model: c.Model,
					Timing:   backend.CallTiming{Started: b.virtual(started), FirstToken: b.virtual(comp.FirstToken), End: b.virtual(comp.End)},
					Attempts: attempts, RetryLost: b.virtual(comp.Sent) - b.virtual(first)}
			}
			if d.cancelled(j) {
				// Closed by Cancel: the server aborted the request. The tokens are those
				// streamed before the abort (one per chunk).
				end := time.Now()
				first := comp.FirstToken
				if first.IsZero() {
					first = end
				}
				started := att.t.started(first)
				return backend.Event{Kind: backend.EventCancelled, At: b.virtual(end), Worker: backend.WorkerID(w), Model: c.Model,
					Produced: comp.Streamed, Timing: backend.CallTiming{Started: b.virtual(started), FirstToken: b.virtual(first), End: b.virtual(end)}}
			}
		}
		if d.cancelled(j) {
			now := b.Now()
			return backend.Event{Kind: backend.EventCancelled, At: now, Worker: backend.WorkerID(w), Model: c.Model,
				Timing: backend.CallTiming{Started: now, FirstToken: now, End: now}}
		}
		if !isRetryable(err) || try >= b.cfg.Retries || b.ctx.Err() != nil {
			break
		}
	}
	dead := false
	select {
	case <-srv.exit:
		dead = true
	default:
		// An attached server: dead when it no longer answers its health check.
		if srv.cmd == nil {
			hctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			dead = !healthy(hctx, b.control, srv.url, b.cfg.API)
			cancel()
		}
	}
	if dead && b.ctx.Err() == nil {
		b.markDead(fmt.Errorf("worker %d: the server of %s (%s) is gone: %v", w, c.Model, srv.url, err))
	}
	// A failed call keeps what its last attempt observed: when it was sent, its first token
	// if one came, and its last byte (or the failure, when nothing came back).
	now := time.Now()
	sent, last := comp.Sent, comp.Last
	if sent.IsZero() {
		sent = now
	}
	if last.IsZero() {
		last = now
	}
	ft := comp.FirstToken
	if ft.IsZero() {
		ft = last
	}
	tries := ""
	if attempts > 1 {
		tries = fmt.Sprintf(" after %d attempts", attempts)
	}
	return backend.Event{Kind: backend.EventFailed, At: b.Now(), Worker: backend.WorkerID(w), Model: c.Model,
		Timing:   backend.CallTiming{Started: b.virtual(sent), FirstToken: b.virtual(ft), End: b.virtual(last)},
		Attempts: attempts, RetryLost: b.virtual(sent) - b.virtual(first),
		Err: fmt.Errorf("call %d (query %d, %s) on worker %d (%s)%s: %w", c.ID, c.Query, c.Model, w, srv.url, tries, err)}
}

// Cancel implements backend.Backend: a queued call is dropped; a sent one has its stream
// closed, so the server aborts the request and frees its KV cache.
func (b *Backend) Cancel(w backend.WorkerID, call int) error {
	if w < 0 || int(w) >= len(b.dispatchers) {
		return fmt.Errorf("replay: no worker %d", w)
	}
	return b.dispatchers[w].cancel(call)
}

// Submit implements backend.Backend: the call joins its worker's dispatch queue. A priority
// other than 0 is refused for a model whose engine schedules first come first served.
func (b *Backend) Submit(w backend.WorkerID, c *traces.Call, priority int) error {
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
	ref := backend.CallRef{ID: c.ID, Query: c.Query, Role: c.Role, Layer: c.Layer, Model: c.Model, InputTokens: c.InputTokens}
	submitted := b.Now()
	b.begin()
	if t, ok := b.cfg.Finished[c.ID]; ok {
		// Done in the interrupted run: complete at once with what was measured then.
		go b.emit(backend.Event{Kind: backend.EventDone, At: submitted, Worker: w, Model: c.Model, Call: &ref, Timing: t})
		return nil
	}
	b.dispatchers[w].push(&job{call: c, ref: ref, srv: srv, submitted: submitted, priority: priority})
	return nil
}
