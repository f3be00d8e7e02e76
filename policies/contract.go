// Package policies holds the contract every Mixture-of-Agents scheduling policy is written
// against, the Driver that runs the MoA pipeline over any Backend, and the aggregation rules.
// Each policy lives in its own subpackage (roundrobin, dataparallel, ...) and sees only this
// package's types, so the same policy value runs in the simulator (sim/cluster) and on real
// servers (replay) unchanged.
//
// A query is a graph of calls (traces.Query). The flow: the Driver releases a call when every
// call it reads is done (a query's first layer when the query arrives); a gated call is first
// put to the aggregation Rule, which runs it or skips it (its answer is then its inputs'
// majority); tool steps take their time without a worker. The Driver tells the Policy through
// Events and carries out the Policy's Actions (load or unload a model on a worker, submit a
// ready call to a worker, wake me at t) on the Backend after checking them. The Backend
// reports loads and finished calls back as Events.
package policies

import (
	"context"
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// WorkerID numbers the workers (GPUs) from 0.
type WorkerID int

// Backend executes work on workers and reports what happened. sim/cluster advances a virtual
// clock; replay talks to inference servers and funnels their completions into one channel.
//
// Contract: Load, Unload, Submit, Cancel and WakeAt return at once; each Load completes later
// with one EventLoaded (or EventFailed), each Unload with one EventUnloaded, each Submit with
// one EventDone, EventFailed or, once Cancel was asked for it, EventCancelled (a call that
// finished before the cancellation took effect still reports EventDone), each WakeAt with one
// EventTimer. Cancel stops a submitted call at the engine's next iteration and frees its KV
// cache, as an inference server aborts a request whose client went away; EventCancelled
// carries the output tokens it produced. Next blocks until the next event and returns events
// in non-decreasing At order; it returns ErrIdle when nothing is pending. The Driver calls a
// Backend from one goroutine only.
type Backend interface {
	Now() time.Duration
	Load(w WorkerID, model string) error
	Unload(w WorkerID, model string) error
	Submit(w WorkerID, c *traces.Call) error
	Cancel(w WorkerID, call int) error
	WakeAt(t time.Duration)
	Next(ctx context.Context) (Event, error)
}

// ErrIdle is returned by Backend.Next when no load, call or timer is pending.
var ErrIdle = fmt.Errorf("policies: backend has nothing pending")

// EventKind says what an Event reports.
type EventKind int

// The events a Policy sees. Backends produce Loaded, Unloaded, Done, Failed and Timer; the
// Driver adds Released and Skipped, and passes a Timer on to the policy only when the policy
// asked for it (ActWake).
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
	// EventSkipped.
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
	// Submitted is when the Driver handed the call to the backend (Backend.Submit).
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
// distributions of ModelInfo).
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
	// Open marks a call released before its inputs finished (prefill-decode overlap,
	// Driver.SetOverlap): submitted now, its worker prefills its prompt as they finish;
	// InputTokens is then the prompt it will have if they all run.
	Open bool
}

// ActionKind says what an Action asks for.
type ActionKind int

// The actions a Policy can take.
const (
	// ActLoad loads Model on Worker (it must fit the worker's memory next to what it holds).
	ActLoad ActionKind = iota
	// ActUnload unloads Model from Worker (it must have no calls in flight there).
	ActUnload
	// ActSubmit submits ready call CallID to Worker (which must hold the call's model).
	ActSubmit
	// ActWake asks for an EventTimer at time At (at once if At is past): the hook of policies
	// that re-plan periodically.
	ActWake
	// ActCancel cancels call CallID, ready or submitted: it will not run, or stops where it
	// is. The calls that read it see it as finished without an answer.
	ActCancel
)

// Action is a decision of a Policy.
type Action struct {
	Kind   ActionKind
	Worker WorkerID
	Model  string
	CallID int
	At     time.Duration
}

// Load, Unload, Submit and WakeAt build actions.
func Load(w WorkerID, model string) Action   { return Action{Kind: ActLoad, Worker: w, Model: model} }
func Unload(w WorkerID, model string) Action { return Action{Kind: ActUnload, Worker: w, Model: model} }
func Submit(w WorkerID, call int) Action     { return Action{Kind: ActSubmit, Worker: w, CallID: call} }
func WakeAt(t time.Duration) Action          { return Action{Kind: ActWake, At: t} }

// Cancel builds an ActCancel action.
func Cancel(call int) Action { return Action{Kind: ActCancel, CallID: call} }

func (a Action) String() string {
	switch a.Kind {
	case ActLoad:
		return fmt.Sprintf("load %s on worker %d", a.Model, a.Worker)
	case ActUnload:
		return fmt.Sprintf("unload %s from worker %d", a.Model, a.Worker)
	case ActWake:
		return fmt.Sprintf("wake at %v", a.At)
	case ActCancel:
		return fmt.Sprintf("cancel call %d", a.CallID)
	default:
		return fmt.Sprintf("submit call %d to worker %d", a.CallID, a.Worker)
	}
}

// Policy is an event-driven controller over a read-only View of the cluster. Offline planners
// (round-robin, data-parallel, MOSAIC's ILP) compute their plan in Start and replay it in
// OnEvent; online policies decide as events arrive.
//
// Contract: Start is called once, before any event; OnEvent once per event, in order. Both
// return actions the Driver carries out in order; an action that breaks an invariant (a call
// not ready or already submitted, a worker that does not hold the call's model, a load that
// does not fit) fails the run with an error that names the policy and the action. A policy
// must not keep the View beyond the call. The run ends when every query is complete; a policy
// that leaves work undone with nothing in flight fails the run as stalled.
type Policy interface {
	Name() string
	Start(v View) ([]Action, error)
	OnEvent(e Event, v View) []Action
}

// ModelInfo is what a policy may know about a model: its architecture, its cost model on the
// cluster's GPU (the "offline profile") and its output-length distribution. On a mixed cluster
// (workers of different GPU types or tensor-parallel degrees) Workers holds the model's cost
// on each worker; read a worker's through On and CanRun, which also serve uniform clusters.
type ModelInfo struct {
	Name   string
	Arch   *sim.Model
	Cost   *sim.CostModel
	Engine sim.EngineConfig
	// Output is the profiled output-length distribution of the model's calls (nil if unknown).
	Output traces.LengthDist
	// Memory is the fraction of a worker's memory the model's engine takes
	// (its gpu_memory_utilization); models fit together while their fractions sum to <= 1.
	Memory float64
	// LoadTime is the predicted time to load the model.
	LoadTime time.Duration
	// Workers is the model on each worker, by WorkerID, when the workers differ (a mixed
	// cluster: see WorkerCost); nil when every worker is alike, and Cost, Engine and LoadTime
	// then hold on each. On a mixed cluster Cost, Engine and LoadTime are the first worker's
	// that can run the model.
	Workers []WorkerCost
}

// View is the read-only state of the cluster and the work, as the Driver knows it.
type View interface {
	Now() time.Duration
	Workers() int
	// Models lists the experiment's models.
	Models() []ModelInfo
	Model(name string) (ModelInfo, bool)
	// Holds lists the models loaded (not loading) on w, in load order.
	Holds(w WorkerID) []string
	// Loading lists the models being loaded on w.
	Loading(w WorkerID) []string
	// Fits reports whether model could be loaded on w next to what it holds and is loading.
	Fits(w WorkerID, model string) bool
	// InFlight counts calls submitted to w (of model, or of any model when model is "") and not done.
	InFlight(w WorkerID, model string) int
	// Ready lists calls released and not yet submitted, in release order.
	Ready() []CallRef
	// Expected counts the calls of a layer and model that will run in total, as far as known:
	// every call not skipped so far, those of queries yet to arrive included (a gated call may
	// still be skipped). AnyLayer counts every layer; model "" counts every model and the
	// tool steps.
	Expected(layer int, model string) int
	// Remaining counts the calls of a layer and model not yet finished, as Expected does.
	Remaining(layer int, model string) int
	// Layers is the number of layers of the deepest query graph; Queries the number of
	// queries.
	Layers() int
	Queries() int
}

// AnyLayer makes View.Expected and View.Remaining count every layer.
const AnyLayer = -1

// LayersDone reports whether every call of the layers below layer has finished: the stage
// barrier of policies that run a graph layer by layer (the aggregator stage after the expert
// stage).
func LayersDone(v View, layer int) bool {
	for l := range layer {
		if v.Remaining(l, "") > 0 {
			return false
		}
	}
	return true
}
