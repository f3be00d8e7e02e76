// Package policies holds the contract every Mixture-of-Agents scheduling policy is written
// against, the Driver that runs the MoA pipeline over any Backend, and the aggregation rules.
// Each policy lives in its own subpackage (roundrobin, dataparallel, ...) and sees only this
// package's types, so the same policy value runs in the simulator (simulated) and on real
// servers (replay) unchanged.
//
// A query is a graph of calls (traces.Query). The flow: the Driver releases a call when every
// call it reads is done (a query's first layer when the query arrives); a gated call is first
// put to the aggregation Rule, which runs it or skips it (its answer is then its inputs'
// majority); tool steps take their time without a worker. The Driver tells the Policy through
// Events and carries out the Policy's Actions (load or unload a model on a worker, submit a
// ready call to a worker, wake me at t) on the Backend after checking them. The Backend
// reports loads and finished calls back as Events.
//
// # The pieces
//
//   - The Policy contract: Policy (Name, Start, OnEvent) returns Actions (Load, Unload,
//     Submit, WakeAt, Cancel) in answer to Events (a model loaded or unloaded, calls
//     released, done, failed, skipped or cancelled, a timer); it knows a model through its
//     ModelInfo (architecture, cost model, engine, output-length profile, memory share, load
//     time, and on a mixed cluster its cost on each worker: WorkerCost).
//   - The View: the read-only state a policy decides on (the clock, what each worker holds,
//     is loading and has in flight, the ready calls, the calls expected and remaining per
//     layer and model), valid only during the call that received it.
//   - The Driver: NewDriver(backend, policy, rule, workload, models, workers) checks the
//     workload against the models (each name listed once); Run releases calls, consults the
//     rule, checks and carries out the policy's actions, keeps the invariants listed on
//     Driver, and fails a run that stalls or thrashes. It is the View the policy sees.
//     SetOverlap and SetEarlyExit turn on Faster-MoA's prefill-decode overlap and early exit.
//   - The rules: Rule decides a gated call from its inputs' answers; ConfidenceSkip is
//     MOSAIC's confidence-aware aggregation (NeverSkip always aggregates), DynamicThreshold a
//     load-aware variant (LoadRule), and EarlyExit cancels inputs once enough of them agree.
//   - The results: Run returns a Result, what happened to every call (CallRecord), load
//     (LoadRecord) and query (QueryOutcome); Summary gives the headline figures (makespan,
//     latencies, accuracy, GPU busy share), WorkerIntervals each worker's timeline.
//
// # Reading guide
//
// Start with ExamplePolicy (example_test.go): a whole policy in twenty lines, run by the
// Driver on the simulated cluster over a hand-built workload. Then read, in this order:
//
//  1. contract.go: Action, Policy and its contract, ModelInfo, View, LayersDone; and
//     workers.go, how a model runs on each worker of a mixed cluster (On, CanRun, CanLoad).
//  2. package backend (policies/backend): the Backend contract and the Events, which this
//     package re-exports; a policy author needs only the names here.
//  3. rule.go: Rule and Decision, ConfidenceSkip, then EarlyExit and DynamicThreshold.
//  4. The Driver, in pieces: driver.go (its doc comment, the invariants; NewDriver, Run and
//     handle, the event loop, and finish, a call's end), driver_release.go (how calls become
//     ready: arrive, start, settle; what a step caused is gathered in an effects value),
//     driver_gates.go (decide: the rule on a gated call; early exit and cancel),
//     driver_timers.go (arrivals, tool steps, wake-ups), driver_actions.go (do: the checks on
//     each action) and driver_view.go (what a policy may read).
//  5. result.go: Result, its records and Summary.
//  6. roundrobin, the smallest real policy (an offline plan computed in Start and replayed in
//     OnEvent); then dataparallel; online (decides as calls become ready); mosaic with solver (the
//     ILP placement).
//
// The Driver's tests run it on the simulated cluster: simulated's tests, and its driver
// scenarios in simulated/testdata (each a workload, a policy run and its event timeline).
// internal/policytest holds a recording fake Backend whose timing can be followed by hand.
package policies

import (
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// The Backend's vocabulary lives in the leaf package policies/backend, which the backends
// (simulated, replay) import instead of this package; the names below re-export it, so a
// policy sees only this package's names.

// WorkerID is the backend package's WorkerID: workers (GPUs) numbered from 0.
type WorkerID = backend.WorkerID

// Backend is the backend package's Backend: what executes work on workers for the Driver.
type Backend = backend.Backend

// ErrIdle is the backend package's ErrIdle, returned by Backend.Next when nothing is pending.
var ErrIdle = backend.ErrIdle

// EventKind is the backend package's EventKind: what an Event reports.
type EventKind = backend.EventKind

// The events a Policy sees: the backend package's (see its EventKind constants). Backends
// produce Loaded, Unloaded, Done, Failed and Timer; the Driver adds Released and Skipped, and
// passes a Timer on to the policy only when the policy asked for it (ActWake).
const (
	// EventLoaded is the backend package's EventLoaded.
	EventLoaded = backend.EventLoaded
	// EventUnloaded is the backend package's EventUnloaded.
	EventUnloaded = backend.EventUnloaded
	// EventDone is the backend package's EventDone.
	EventDone = backend.EventDone
	// EventFailed is the backend package's EventFailed.
	EventFailed = backend.EventFailed
	// EventTimer is the backend package's EventTimer.
	EventTimer = backend.EventTimer
	// EventReleased is the backend package's EventReleased: calls became ready.
	EventReleased = backend.EventReleased
	// EventSkipped is the backend package's EventSkipped: the rule skipped a gated call.
	EventSkipped = backend.EventSkipped
	// EventCancelled is the backend package's EventCancelled: a call was cancelled.
	EventCancelled = backend.EventCancelled
)

// Event is the backend package's Event: something that happened.
type Event = backend.Event

// CallTiming is the backend package's CallTiming: when a call went through a worker.
type CallTiming = backend.CallTiming

// CallRef is the backend package's CallRef: what a policy may know about a call.
type CallRef = backend.CallRef

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
	// Priority is a submitted call's priority on its worker's engine, vLLM's per-request
	// priority: a lower value is served first. An engine that schedules by priority (vLLM's
	// --scheduling-policy priority) orders its waiting calls by (priority, submission) and
	// preempts the running call that is last in that order; 0 for every call is FCFS.
	Priority int
}

// Load, Unload, Submit and WakeAt build actions.
func Load(w WorkerID, model string) Action   { return Action{Kind: ActLoad, Worker: w, Model: model} }
func Unload(w WorkerID, model string) Action { return Action{Kind: ActUnload, Worker: w, Model: model} }
func Submit(w WorkerID, call int) Action     { return Action{Kind: ActSubmit, Worker: w, CallID: call} }
func WakeAt(t time.Duration) Action          { return Action{Kind: ActWake, At: t} }

// SubmitPriority builds an ActSubmit action that carries the call's engine priority (lower is
// served first; see Action.Priority).
func SubmitPriority(w WorkerID, call, priority int) Action {
	return Action{Kind: ActSubmit, Worker: w, CallID: call, Priority: priority}
}

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

// LayerModel names the calls of one model in one layer of the call graphs (the experts of a
// MoA query are layer 0, its aggregator layer 1): output lengths that differ by layer are given
// per LayerModel.
type LayerModel struct {
	Layer int
	Model string
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
	// Workers is the model on each worker, by WorkerID (see WorkerCost): on a mixed cluster the
	// workers differ in GPU type and tensor-parallel degree; on a cluster of one kind of
	// worker every entry is alike (Alike). Cost, Engine and LoadTime are the first worker's
	// that can run the model. A model given to NewDriver without Workers runs alike on every
	// worker (OnEvery).
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
	// Holding reports whether model is loaded (not loading) on w: Holds without its copy.
	Holding(w WorkerID, model string) bool
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
