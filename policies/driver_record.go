package policies

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// The recorder: a streamed run's records are folded into its summary, built into the workers'
// intervals and handed to the sink on a goroutine of their own, so that the Driver's goroutine,
// which the simulation waits on, only notes what happened (folding and handing on took about a
// twentieth of its time). The Driver notes it in batches (recBatch), in the order it happened;
// the recorder takes the batches in the order they were sent, so the sink hears the queries in
// query order and each worker's intervals in time order, as when the Driver handed them on
// itself, and the summary is the same (the intervals only come later among the queries).
//
// A worker's calls reach its timeline a stretch at a time: the Driver gathers their edges and
// hands them over with the worker's bound (Driver.bound) when enough have gathered (the first
// call's at once). Every call that ends after that, its edges still with the Driver, was in
// flight then or was submitted later, so none starts before that bound: the timeline has every
// edge the bound covers when it advances to it. A timeline builds its intervals as one pass
// over the edges in time order however that pass is cut, so the intervals are the same too;
// they only go out a stretch later.

// recorder is a streamed run's goroutine of records: the tally, the workers' timelines and the
// sink are its own once the run has started (see Driver.Stream).
type recorder struct {
	sink  Sink
	tally *Tally
	lines []timeline
	// models names the models of the intervals' edges, by index (Driver.models's).
	models []string
	// sent says intervals went out.
	sent bool
	err  error
	// failed says err is set: the Driver stops at its next batch.
	failed atomic.Bool
	// full carries the batches to the recorder, empty brings them back for reuse; done closes
	// when the recorder has taken the last. closed says full is closed (the Driver's).
	full   chan *recBatch
	empty  chan *recBatch
	done   chan struct{}
	closed bool
}

// recBatch is what the Driver noted, in order: each op takes the next item of its kind.
type recBatch struct {
	ops     []recOp
	queries []recQuery
	recs    []CallRecord
	loads   []LoadRecord
	edges   []edgeList
	// synced, when set, hears whether intervals went out once the batch is done.
	synced chan bool
}

// recKind is what a note says.
type recKind uint8

const (
	// recQueryDone: a query left the window, with its calls' records.
	recQueryDone recKind = iota
	// recLoad: a model load ended.
	recLoad
	// recEdges: a worker's calls' edges, then an advance to the bound (unless held).
	recEdges
	// recFinish: the run ended (at the op's bound); every worker's timeline goes out to it.
	recFinish
)

// recOp is a note.
type recOp struct {
	kind recKind
	// hold keeps a recEdges' intervals back (the run's intervals wait for its end).
	hold  bool
	w     WorkerID
	bound time.Duration
}

// recQuery is a query that left the window, how it ended and how many call records follow.
type recQuery struct {
	q     *traces.Query
	o     QueryOutcome
	calls int
}

// recBatchOps is how many notes make a batch worth sending.
const recBatchOps = 1024

// edgesPerHandover is how many of a worker's call edges the Driver gathers before it hands
// them to the timeline (a variable so that a test can make the stretches short).
var edgesPerHandover = 4096

// newRecorder starts the recorder of a run on workers workers whose models are named models.
func newRecorder(sink Sink, tally *Tally, workers int, models []string) *recorder {
	r := &recorder{sink: sink, tally: tally, lines: make([]timeline, workers), models: models,
		full: make(chan *recBatch, 4), empty: make(chan *recBatch, 8), done: make(chan struct{})}
	for w := range r.lines {
		r.lines[w].w = WorkerID(w)
	}
	go r.run()
	return r
}

// run takes the batches as they come until the channel closes. After an error it only
// recycles them.
func (r *recorder) run() {
	defer close(r.done)
	for b := range r.full {
		if r.err == nil {
			if r.err = r.take(b); r.err != nil {
				r.failed.Store(true)
			}
		}
		if b.synced != nil {
			b.synced <- r.sent
		}
		b.reset()
		select {
		case r.empty <- b:
		default:
		}
	}
}

// take does what a batch noted.
func (r *recorder) take(b *recBatch) error {
	var nq, nr, nl, ne int
	for _, op := range b.ops {
		switch op.kind {
		case recQueryDone:
			q := &b.queries[nq]
			nq++
			calls := b.recs[nr : nr+q.calls]
			nr += q.calls
			for i := range calls {
				r.tally.Call(&calls[i])
			}
			r.tally.Query(q.o)
			if err := r.sink.Query(q.q, q.o, calls); err != nil {
				return err
			}
		case recLoad:
			l := b.loads[nl]
			nl++
			r.lines[l.Worker].addLoad(l)
			r.tally.load(l)
		case recEdges:
			tl := &r.lines[op.w]
			tl.take(&b.edges[ne])
			ne++
			if op.hold || tl.edges() < tl.due {
				continue
			}
			// The next advance waits for as many new edges as are left over (each edge is
			// sorted a bounded number of times however long the bound stays put).
			err := tl.advance(op.bound, r.models, r.emit)
			tl.due = 2 * tl.edges()
			if err != nil {
				return err
			}
		case recFinish:
			for i := range r.lines {
				if err := r.lines[i].finish(op.bound, r.models, r.emit); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// emit hands an interval to the sink.
func (r *recorder) emit(iv Interval) error {
	r.sent = true
	if iv.Kind == "busy" {
		r.tally.busy += iv.End - iv.Start
	}
	return r.sink.Interval(iv)
}

// batch returns an empty batch, reused when one is free.
func (r *recorder) batch() *recBatch {
	select {
	case b := <-r.empty:
		return b
	default:
		return &recBatch{}
	}
}

// stop waits for the recorder to take what it was sent and returns its first error. It may be
// called again.
func (r *recorder) stop() error {
	if !r.closed {
		r.closed = true
		close(r.full)
	}
	<-r.done
	return r.err
}

// reset empties a taken batch, letting go of its calls and queries.
func (b *recBatch) reset() {
	clear(b.queries)
	clear(b.recs)
	for i := range b.edges {
		b.edges[i].reset()
	}
	b.ops, b.queries, b.recs, b.loads, b.edges = b.ops[:0], b.queries[:0], b.recs[:0], b.loads[:0], b.edges[:0]
	b.synced = nil
}

// note notes op in the batch being filled, and returns the batch for op's item.
func (o *streamOut) note(op recOp) *recBatch {
	if o.b == nil {
		o.b = o.rec.batch()
	}
	o.b.ops = append(o.b.ops, op)
	return o.b
}

// send hands the batch being filled to the recorder once it is full (with all, whatever it
// holds), and reports the recorder's error if it failed.
func (o *streamOut) send(all bool) error {
	if o.rec.closed || o.rec.failed.Load() {
		if err := o.rec.stop(); err != nil {
			return err
		}
		return errors.New("policies: a record came after the run's recorder stopped")
	}
	if b := o.b; b != nil && (all || len(b.ops) >= recBatchOps) {
		o.b = nil
		o.rec.full <- b
	}
	return nil
}

// sentIntervals waits for the recorder to take every batch sent and reports whether intervals
// went out.
func (o *streamOut) sentIntervals() (bool, error) {
	if o.b == nil {
		o.b = o.rec.batch()
	}
	synced := make(chan bool, 1)
	o.b.synced = synced
	if err := o.send(true); err != nil {
		return false, err
	}
	return <-synced, nil
}
