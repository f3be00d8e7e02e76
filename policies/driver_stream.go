package policies

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// Streamed workloads and the window. The Driver keeps the calls and queries of a run in a
// window ordered by ID: a held workload (NewDriver) enters it whole, a streamed one
// (NewStreamDriver) a query at a time, as simulated time reaches each arrival. Either way a
// query leaves it from the front once it is complete and every call of its has ended
// (retire): its records go to the Result, or, for a run whose records are streamed (Stream),
// to a Sink, folded into the summary on the way. A slow query holds the window behind it.

// QuerySource is a workload the Driver reads a query at a time (traces.Stream is one).
type QuerySource interface {
	// Len is the number of queries.
	Len() int
	// Counts counts the workload's calls by layer and model, without the calls: what
	// View.Expected and Remaining count before the queries arrive.
	Counts() (traces.CallCounts, error)
	// Next returns the next query: IDs run 0, 1, 2, ..., calls are numbered across queries as
	// traces.Workload.Finish numbers them, and arrivals do not decrease.
	Next() (*traces.Query, error)
}

// NewStreamDriver is NewDriver over a workload read a query at a time: each query is read when
// the one before it arrives, and leaves the Driver once it is done (see retire), so that the
// Driver holds only the queries in flight. The policy sees the same View as with the whole
// workload: Expected and Remaining count the calls of the queries to come from src.Counts.
func NewStreamDriver(b Backend, p Policy, r Rule, src QuerySource, models []ModelInfo, workers int) (*Driver, error) {
	if src.Len() == 0 {
		return nil, errors.New("policies: the workload has no queries")
	}
	d, err := newDriver(b, p, r, models, workers)
	if err != nil {
		return nil, err
	}
	declared, err := src.Counts()
	if err != nil {
		return nil, fmt.Errorf("counting the workload's calls: %w", err)
	}
	d.stream, d.nq, d.layers = src, src.Len(), len(declared)
	d.pending = d.nq
	d.expect = make([][]counts, d.layers)
	for l, byModel := range declared {
		d.expect[l] = make([]counts, len(d.models)+1)
		for model, n := range byModel {
			mi := len(d.models)
			if model != "" {
				var ok bool
				if mi, ok = d.byName.Get(model); !ok {
					return nil, fmt.Errorf("layer %d has %d calls of model %q, which the experiment does not list", l, n, model)
				}
			}
			d.expect[l][mi] = counts{expected: n, remaining: n}
			d.total += n
		}
	}
	d.total0 = d.total
	d.childAt.push(0)
	d.res = &Result{}
	return d, nil
}

// pull reads the next query of a streamed workload into the window.
func (d *Driver) pull() error {
	q, err := d.stream.Next()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the workload ended after %d of its %d queries", d.queries.hi, d.nq)
	}
	if err != nil {
		return err
	}
	if q.Arrival < d.lastArrival {
		return fmt.Errorf("query %d arrives at %v, before the query ahead of it (%v): a streamed workload's queries arrive in order", q.ID, q.Arrival, d.lastArrival)
	}
	d.lastArrival = q.Arrival
	return d.add(q)
}

// Sink receives the records of a run whose records are streamed (Driver.Stream), in order,
// from the run's recorder: one goroutine the Driver starts for the run, which runs behind the
// Driver (a Sink must not read the Driver's or the backend's state). A Sink's error stops the
// run at the Driver's next batch of records; the Sink hears nothing after it.
type Sink interface {
	// Query receives a query as it leaves the Driver, in query order: how it ended, and the
	// records of its calls that ran, in call-ID order (as Result.Calls holds them). q and
	// calls are valid only during the call.
	Query(q *traces.Query, o QueryOutcome, calls []CallRecord) error
	// Interval receives each worker's intervals (as Result.WorkerIntervals gives them), each
	// worker's in time order, as they become final.
	Interval(iv Interval) error
}

// Stream hands the run's records to sink as they become final instead of keeping them: the
// Result then holds no calls, queries, loads or intervals, only their summary (Summary,
// Attainment under slo), folded as they went; the loads go to the sink as the workers'
// intervals of kind "load". Call it before Run.
//
// A worker's interval is final once no call in flight or still to come can start before it
// ends. A call cancelled after it was submitted may report that it started at 0 (a call
// stopped before it started), so in a run with early exit or prefill-decode overlap, which
// cancel such calls, the intervals wait for the end of the run; one whose policy cancels a
// submitted call after intervals went out fails.
func (d *Driver) Stream(sink Sink, slo SLO) {
	d.out = &streamOut{sink: sink, tally: &Tally{workers: d.workers, slo: slo, stream: true},
		pending: make([]edgeList, d.workers), started: make([]bool, d.workers), submits: make([]fifo[submission], d.workers)}
	for _, m := range d.models {
		d.out.models = append(d.out.models, m.Name)
	}
	// Every query's latencies are kept (for their exact percentiles), and what the steady-state
	// window needs of it, in columns whose memory does not grow with the run (see Tally).
	d.res = nil
}

// streamOut is where a streamed run's records go: the Driver notes them for the run's
// recorder (driver_record.go), which folds them into the tally, builds the workers' intervals
// and hands both to the sink.
type streamOut struct {
	sink  Sink
	tally *Tally
	// models names the models of the intervals' edges, by index (Driver.models's).
	models []string
	// rec is the recorder, started with the run, and b the batch of notes being filled.
	rec *recorder
	b   *recBatch
	// pending are each worker's calls' edges not yet handed to the recorder, handed
	// edgesPerHandover at a time once started says the worker's first call went over (at
	// once, so that its intervals go out early); submits are the calls submitted to each
	// worker in submission order (those still in flight bound what is final).
	pending []edgeList
	started []bool
	submits []fifo[submission]
	// hold keeps every interval until the end of the run (cancelled calls may have started
	// at 0).
	hold bool
	// end is when the last call or load ended.
	end time.Duration
}

// submission is a call submitted to a worker at a time.
type submission struct {
	at time.Duration
	id int
}

// ended reports whether the calls of query qs have all ended: done, failed, skipped or
// cancelled and stopped.
func (d *Driver) ended(qs *queryState) bool {
	for id := qs.first; id < qs.first+len(qs.q.Calls); id++ {
		cs := d.cs(id)
		switch cs.status {
		case callDone, callFailed, callSkipped, callCancelled:
			if cs.aborting {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// retire lets the queries at the front of the window go once they are complete and all their
// calls have ended (with force, at the end of the run, as they are): their records go to the
// result, or to the sink, and their states are dropped.
func (d *Driver) retire(force bool) error {
	qi, id := d.queries.lo, d.calls.lo
	for qi < d.queries.hi {
		qs := d.qs(qi)
		if !force && (!qs.complete || !d.ended(qs)) {
			break
		}
		if err := d.emit(qs); err != nil {
			return err
		}
		qi++
		id += len(qs.q.Calls)
	}
	if qi == d.queries.lo {
		return nil
	}
	o := &d.outcomes
	if len(o.errs)+len(o.cancelledAt)+len(o.retried) > 0 {
		for c := d.calls.lo; c < id; c++ {
			delete(o.errs, c)
			delete(o.cancelledAt, c)
			delete(o.retried, c)
		}
	}
	d.child.drop(d.childAt.at(id))
	d.childAt.drop(id)
	d.calls.drop(id)
	d.queries.drop(qi)
	return nil
}

// emit hands on the records of a query leaving the window: its calls that ran and its
// outcome.
func (d *Driver) emit(qs *queryState) error {
	o := d.outcome(qs)
	if qs.q.Gold != "" {
		d.gold++
		if d.workloadAnswer(qs) == qs.q.Gold {
			d.agg++
		}
	}
	if d.res != nil {
		d.res.Calls = d.appendRecords(d.res.Calls, qs)
		d.res.Queries = append(d.res.Queries, o)
		return nil
	}
	b := d.out.note(recOp{kind: recQueryDone})
	n := len(b.recs)
	b.recs = d.appendRecords(b.recs, qs)
	b.queries = append(b.queries, recQuery{q: qs.q, o: o, calls: len(b.recs) - n})
	return d.out.send(false)
}

// appendRecords appends to recs the records of query qs's calls that ran, in call-ID order.
func (d *Driver) appendRecords(recs []CallRecord, qs *queryState) []CallRecord {
	for i := range qs.q.Calls {
		id := qs.first + i
		if st := d.cs(id).status; st == callDone || st == callFailed || (st == callCancelled && d.cs(id).ran) {
			recs = append(recs, d.callRecord(id))
		}
	}
	return recs
}

// workloadAnswer is the query's answer as its workload gives it, every call run
// (traces.Query.FinalAnswer): its final call's, or its final calls' top answer.
func (d *Driver) workloadAnswer(qs *queryState) string {
	answers := d.answers[:0]
	for i := range qs.q.Calls {
		if d.sinkCall(qs.first + i) {
			answers = append(answers, qs.q.Calls[i].Answer)
		}
	}
	d.answers = answers[:0]
	if len(answers) == 1 {
		return answers[0]
	}
	a, _ := traces.TopAnswer(answers)
	return a
}

// submitted notes a call submitted to a worker at now (a streamed run's intervals wait for
// it).
func (d *Driver) submitted(w WorkerID, id int, now time.Duration) {
	if d.out != nil && !d.out.hold {
		d.out.submits[w].push(submission{at: now, id: id})
	}
}

// cancelling notes that a submitted call is being stopped: in a streamed run, intervals then
// wait for the end of the run (see Stream).
func (d *Driver) cancelling() error {
	if d.out == nil || d.out.hold {
		return nil
	}
	d.out.hold = true
	sent, err := d.out.sentIntervals()
	if err != nil {
		return err
	}
	if sent {
		return errors.New("a streamed run's worker intervals already went out, and a call cancelled after its submission may report it started at 0 (see Driver.Stream)")
	}
	return nil
}

// traced gathers a finished call's time on its worker for the worker's timeline, and hands
// what gathered to the recorder when it is enough.
func (d *Driver) traced(id int) error {
	out := d.out
	cs := d.cs(id)
	out.end = max(out.end, cs.timing.End)
	if cs.worker < 0 || cs.timing.End <= cs.timing.Started {
		return nil
	}
	l := &out.pending[cs.worker]
	l.add(cs.timing.Started, cs.timing.End, int32(cs.model))
	if out.started[cs.worker] && l.edges() < edgesPerHandover {
		return nil
	}
	out.started[cs.worker] = true
	return d.handover(cs.worker, !out.hold)
}

// handover hands worker w's gathered edges to the recorder, with (when advance) the bound its
// timeline may advance to.
func (d *Driver) handover(w WorkerID, advance bool) error {
	out := d.out
	op := recOp{kind: recEdges, w: w, hold: !advance}
	if advance {
		op.bound = d.bound(w)
	}
	b := out.note(op)
	// The edges go with the batch; the worker gathers the next ones in the room of a list the
	// batch carried before (it comes back emptied), or in a new one.
	n := len(b.edges)
	var spare edgeList
	if n < cap(b.edges) {
		spare = b.edges[:n+1][n]
	}
	b.edges = append(b.edges, out.pending[w])
	out.pending[w] = spare
	return out.send(false)
}

// bound is the time before which worker w's intervals are final: no call in flight there,
// none to come and no load under way can start earlier.
func (d *Driver) bound(w WorkerID) time.Duration {
	b := d.backend.Now()
	for _, at := range d.ws[w].loading {
		b = min(b, at)
	}
	subs := &d.out.submits[w]
	for subs.base < subs.end() {
		s := subs.at(subs.base)
		if d.inWindow(s.id) {
			if cs := d.cs(s.id); cs.status == callSubmitted || cs.status == callCancelling || cs.aborting {
				b = min(b, s.at)
				break
			}
		}
		subs.drop(subs.base + 1)
	}
	return b
}

// loaded notes a load for its worker's timeline (a streamed run).
func (d *Driver) loaded(l LoadRecord) error {
	d.out.end = max(d.out.end, l.End)
	b := d.out.note(recOp{kind: recLoad})
	b.loads = append(b.loads, l)
	return d.out.send(false)
}

// result is what the run produced: every query has left the window (retire, forced) and, for
// a streamed run, every worker's intervals have gone out.
func (d *Driver) result() (*Result, error) {
	if err := d.retire(true); err != nil {
		return nil, err
	}
	r := d.res
	if r == nil {
		// The rest of each worker's edges, then its whole timeline, to the end of the run.
		out := d.out
		for w := range out.pending {
			if out.pending[w].edges() > 0 {
				if err := d.handover(WorkerID(w), false); err != nil {
					return nil, err
				}
			}
		}
		out.note(recOp{kind: recFinish, bound: out.end})
		if err := out.send(true); err != nil {
			return nil, err
		}
		if err := out.rec.stop(); err != nil {
			return nil, err
		}
		r = &Result{tally: out.tally}
	}
	r.Policy, r.Rule, r.Threshold, r.Workers, r.Loads = d.policy.Name(), d.rule.Name(), nan(), d.workers, d.loads
	if d.exit != nil {
		r.Rule += ", " + d.exit.String()
	}
	if d.overlap {
		r.Rule += ", overlap"
	}
	if cs, ok := d.rule.(ConfidenceSkip); ok {
		r.Threshold = cs.Threshold
		if cs.Threshold > 1 {
			r.Threshold = math.Inf(1)
		}
	}
	r.AlwaysAggregate = ratio(d.agg, d.gold)
	return r, nil
}
