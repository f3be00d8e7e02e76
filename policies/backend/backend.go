// Package backend is the vocabulary shared by the policies' Driver and the Backends it drives:
// worker IDs, the Backend interface and its optional Grower extension, the Events a Backend
// reports, and what a Backend may know of a call (CallRef) and of its timing (CallTiming).
//
// It is a leaf: it imports only traces and the standard library, so that the simulated
// Backend (simulated) and the real one (replay) implement the contract without importing
// package policies, and the dependency between the simulator and the policies runs one way
// (policies imports sim for its cost model, never the reverse). Package policies re-exports
// every name here (type aliases, constants, variables), and policy authors use those: a
// policy sees only package policies.
package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// WorkerID numbers the workers (GPUs) from 0.
type WorkerID int

// Backend executes work on workers and reports what happened. simulated advances a virtual
// clock; replay talks to inference servers and funnels their completions into one channel.
//
// Contract: Load, Unload, Submit, Cancel and WakeAt return at once; each Load completes later
// with one EventLoaded (or EventFailed), each Unload with one EventUnloaded, each Submit with
// one EventDone, EventFailed or, once Cancel was asked for it, EventCancelled (a call that
// finished before the cancellation took effect still reports EventDone), each WakeAt with one
// EventTimer. Cancel stops a submitted call at the engine's next iteration and frees its KV
// cache, as an inference server aborts a request whose client went away; EventCancelled
// carries the output tokens it produced. Next blocks until the next event and returns events
// in non-decreasing At order; it returns ErrIdle when nothing is pending. The policies' Driver
// calls a Backend from one goroutine only.
//
// Submit's priority is the call's priority on its worker's engine, vLLM's per-request priority
// (the completions request's "priority" field; a lower value is served first). An engine that
// schedules by priority (vLLM's --scheduling-policy priority) orders its waiting calls by
// (priority, arrival) and preempts the running call last in that order; one that schedules
// first come first served refuses a call of any priority but 0 with an error naming the call
// and the worker, rather than ignore it.
type Backend interface {
	Now() time.Duration
	Load(w WorkerID, model string) error
	Unload(w WorkerID, model string) error
	Submit(w WorkerID, c *traces.Call, priority int) error
	Cancel(w WorkerID, call int) error
	WakeAt(t time.Duration)
	Next(ctx context.Context) (Event, error)
}

// ErrIdle is returned by Backend.Next when no load, call or timer is pending.
var ErrIdle = errors.New("backend: nothing pending")

// Grower is implemented by backends that can prefill a call while its inputs still run:
// prefill-decode overlap (Faster-MoA; the policies' Driver.SetOverlap). The simulated cluster
// holds the call as an engine sequence whose prompt grows; replay approximates it with the
// server's prefix cache.
type Grower interface {
	// SubmitOpen submits a call of which only c.InputTokens prompt tokens are known so far
	// (its own prompt and the outputs of the inputs already done): the worker prefills them
	// and holds the call. priority is the call's engine priority, as for Backend.Submit.
	SubmitOpen(w WorkerID, c *traces.Call, priority int) error
	// Grow appends tokens (a finished input's forwarded output) to open call id's prompt;
	// close says every input is in: the call then prefills the rest and decodes.
	Grow(w WorkerID, id int, tokens int, close bool) error
}

// EventKind says what an Event reports.
type EventKind int

// The events a Policy sees. Backends produce Loaded, Unloaded, Done, Failed and Timer (and
// Cancelled, for a submitted call they were asked to cancel); the policies' Driver adds
// Released and Skipped, and passes a Timer on to the policy only when the policy asked for it
// (ActWake).
const (
	EventLoaded EventKind = iota
	EventUnloaded
	EventDone
	EventFailed
	EventTimer
	// EventReleased: calls became ready (Event.Calls): a query's first calls on arrival, or a
	// call whose inputs are all done (and, if gated, that the rule decided to run).
	EventReleased
	// EventSkipped: the rule skipped a gated call (Event.Call) of query Event.Query.
	EventSkipped
	// EventCancelled: a call (Event.Call) was cancelled, by the policy (ActCancel) or by an
	// early exit: a submitted one stopped on Event.Worker after producing Event.Produced
	// output tokens; one never submitted (Event.Worker -1) will not run. A call released open
	// (overlap) and skipped by its rule before it was submitted is withdrawn the same way,
	// after its EventSkipped.
	EventCancelled
)

var eventNames = [...]string{"loaded", "unloaded", "done", "failed", "timer", "released", "skipped", "cancelled"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// Event is something that happened.
type Event struct {
	Kind   EventKind
	At     time.Duration
	Worker WorkerID
	Model  string
	// Call is the finished (or failed) call of EventDone and EventFailed, the skipped call of
	// EventSkipped. A backend's reference is valid until its next call to Next (the simulated
	// cluster reuses it for a later call), and labels the call only; the policies' Driver
	// replaces it with its own before the policy hears the event, every field set as when the
	// call was released (final, ready, inputs, confidence), and never rewritten.
	Call *CallRef
	// Timing of a finished call, filled by the backend.
	Timing CallTiming
	// Calls are the calls released by EventReleased.
	Calls []CallRef
	// Query is the query of EventSkipped's call.
	Query int
	// Produced is the output tokens a cancelled call produced before it stopped.
	Produced int
	// Err says why a load or call failed.
	Err error
	// Attempts is how many times a finished or failed call was sent (replay retries failed
	// attempts; 0 or 1: once), and RetryLost the time from its first attempt's sending to its
	// last's, lost to the failed attempts and their backoff. Timing is the last attempt's.
	Attempts  int
	RetryLost time.Duration
}

// Ends reports whether the event ends a submitted call on its worker: done, failed, or
// cancelled after it was submitted.
func (e Event) Ends() bool {
	switch e.Kind {
	case EventDone, EventFailed:
		return e.Call != nil
	case EventCancelled:
		return e.Worker >= 0
	}
	return false
}

// CallTiming is when a call went through a worker. All times are in the experiment's time base
// (simulated time; in replay, real time since the start times the time scale) and mean the same
// under every backend: Submitted <= Started <= FirstToken <= End.
type CallTiming struct {
	// Submitted is when the policies' Driver handed the call to the backend (Backend.Submit).
	Submitted time.Duration
	// Started is when the worker's engine admitted the call: the start of the first iteration
	// that scheduled it (its prefill), after any wait in the engine's queue or, in replay, in the
	// worker's dispatcher. The simulator knows it exactly. Replay's servers do not report
	// admission per request, so replay estimates it from their waiting count
	// (vllm:num_requests_waiting, polled every [replay] admission_poll): the send time for a call
	// no poll saw waiting, otherwise to within half a poll interval. With polling off, or a
	// server without the gauge, it is the send time.
	Started time.Duration
	// FirstToken is when the first output token was produced (replay: when its chunk arrived).
	FirstToken time.Duration
	// End is when the last output token was produced (replay: when the stream ended).
	End time.Duration
	// Preemptions counts the engine's preemptions of the call (replay cannot observe them: 0).
	Preemptions int
}

// CallRef is what a policy may know about a call: everything but its output (its real output
// length and answer are unknown until it has run; policies plan with the profiled length
// distributions of the policies' ModelInfo).
type CallRef struct {
	ID    int
	Query int
	// Role and Layer label the call (an expert of layer 0, an aggregator of layer 1, ...).
	Role  string
	Layer int
	Model string
	// InputTokens is the call's whole prompt, its inputs' forwarded tokens included.
	InputTokens int
	// Ready is when the call became ready.
	Ready time.Duration
	// Inputs is how many calls this call reads, and Confidence the top vote share of their
	// answers (0 without inputs): known once they are done, and a predictor of an aggregating
	// call's output length (disagreement makes it longer).
	Inputs     int
	Confidence float64
	// Final marks a final call of its query that reads others: the final stage (a MoA query's
	// aggregator).
	Final bool
	// Open marks a call released before its inputs finished (prefill-decode overlap, the
	// policies' Driver.SetOverlap): submitted now, its worker prefills its prompt as they
	// finish; InputTokens is then the prompt it will have if they all run.
	Open bool
}
