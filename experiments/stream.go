package experiments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// Streamed simulation. A generated workload served online (kind moa, layered, tree or dag,
// drawn by the generator, with arrivals over time) is simulated without holding it: each
// policy's Driver draws the queries from the generator as simulated time reaches them
// (traces.Stream), keeps only those in flight, and hands each query's records on as it ends,
// folded into the summary on the way and, with a results folder, written into calls.csv,
// queries.csv and workers.csv as they come (results.Stream). The files and the summary are
// byte for byte those of the held run (Resolved.Simulate, then Run.WriteInto); the policies
// see the same View.
//
// What does not stream, and is simulated held: offline batches (every query arrives at once),
// workloads read from a trace or built from an answer file, MoA workloads the generator solves
// over every query first (keyword routing, vote-share targets, a fitted aggregator; see
// traces.Stream), single-model batches, sweeps, and replay.

// Sim is an experiment resolved for `mosaic sim`: a streamable workload (see above) is left to
// the generator, and Run draws it as it goes; any other is resolved whole, as Resolve does.
// A streamed workload's Graph.Workload holds its first query only (the workload cut to one
// query: its shape, layers and calls per query, as every query has them).
type Sim struct {
	*Resolved
	// stream draws a fresh copy of the streamed workload (nil: the workload is held).
	stream func() (*traces.Stream, error)
	// queries is the streamed workload's number of queries.
	queries int
}

// ResolveSim resolves the experiment for a simulation (see Sim). A streamed workload is not
// generated here: the experiment is resolved with its workload cut to one query (nothing else
// it resolves depends on the number of queries) and the generator streams every query of the
// real one, checking each call's length as Resolve would (a call too long for its engine
// fails the run when it is drawn, with Resolve's error).
func (e *Experiment) ResolveSim() (*Sim, error) {
	if err := e.queriesFromDuration(); err != nil {
		return nil, err
	}
	if !e.mayStream() {
		return e.resolveHeld()
	}
	cut := *e
	cut.Workload.Queries = 1
	r, err := cut.Resolve()
	if err != nil {
		// Resolving the whole workload says what is wrong (or that nothing is).
		return e.resolveHeld()
	}
	r.Experiment = e
	g := r.Graph
	seed := uint64(e.Seed)
	var open func() (*traces.Stream, error)
	switch {
	case g == nil || g.Arrivals.Offline():
	case g.Spec != nil:
		spec := *g.Spec
		spec.Queries = e.Workload.Queries
		open = func() (*traces.Stream, error) { return traces.StreamMoA(spec, seed, g.Arrivals) }
	case g.Graph != nil:
		spec := *g.Graph
		spec.Queries = e.Workload.Queries
		open = func() (*traces.Stream, error) { return traces.StreamGraph(spec, seed, g.Arrivals) }
	}
	var first *traces.Stream
	if open != nil {
		first, err = open()
	}
	if open == nil || errors.Is(err, traces.ErrNotStreamable) {
		return e.resolveHeld() // held after all
	}
	if err != nil {
		return nil, r.errorf("workload", "%v", err)
	}
	return &Sim{Resolved: r, stream: open, queries: first.Len()}, nil
}

// resolveHeld resolves the whole workload, as Resolve does.
func (e *Experiment) resolveHeld() (*Sim, error) {
	r, err := e.Resolve()
	if err != nil {
		return nil, err
	}
	return &Sim{Resolved: r}, nil
}

// mayStream reports whether the experiment's workload may be streamed: generated call graphs
// of more than one query, served online.
func (e *Experiment) mayStream() bool {
	w := &e.Workload
	switch lower(w.Kind) {
	case KindMoA:
		if w.Trace != "" || w.Answers != "" {
			return false
		}
	case KindLayered, KindTree, KindDAG:
	default:
		return false
	}
	online := w.ArrivalRate > 0 || w.ArrivalTrace != "" || lower(w.ArrivalProcess) == traces.ArrivalsGamma || lower(w.ArrivalProcess) == traces.ArrivalsTrace
	return w.Queries > 1 && online
}

// Streamed reports whether Run streams the workload.
func (s *Sim) Streamed() bool { return s.stream != nil }

// Run simulates every policy of the experiment, as Resolved.Simulate does. A streamed
// workload's calls.csv, queries.csv and workers.csv go into dir as they come (when dir is not
// nil; Run.WriteInto then writes the rest); a held one's are written by Run.WriteInto.
func (s *Sim) Run(ctx context.Context, progress Progress, dir *results.Dir) (*Run, error) {
	if s.stream == nil {
		return s.Simulate(ctx, progress)
	}
	r := s.Resolved
	m := r.Graph
	var files *streamFiles
	if dir != nil {
		var err error
		if files, err = openStreamFiles(dir, len(m.Policies), r.NumWorkers()); err != nil {
			return nil, err
		}
	}
	res := make([]*policies.Result, len(m.Policies))
	pols := make([]policies.Policy, len(m.Policies))
	errs := make([]error, len(m.Policies))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range m.Policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i], pols[i], errs[i] = s.streamPolicy(ctx, i, p, files, progress)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if files != nil {
				files.abort()
			}
			return nil, err
		}
	}
	if files != nil {
		if err := files.commit(); err != nil {
			return nil, err
		}
	}
	run := &Run{Experiment: r, Mode: "sim", Results: res, Policies: pols, queries: s.queries, written: files != nil}
	// The steady rows (an online run's windows and capacities) do not depend on the summaries:
	// they are worked out beside them, on the other core. Both sort copies of every query's
	// latencies (five sorts of a million at a million queries), on the path to the result.
	var steady []*results.SteadyRow
	steadyErr := make(chan error, 1)
	go func() {
		var err error
		steady, err = s.steadyRows(res)
		steadyErr <- err
	}()
	var settleErr error
	for i, x := range res {
		if err := x.Settle(); err != nil {
			settleErr = fmt.Errorf("policy %s: %w", m.Policies[i].Label, err)
			break
		}
	}
	if err := cmp.Or(<-steadyErr, settleErr); err != nil {
		return nil, err
	}
	run.Summaries = Summarize(r.Name, run.Mode, uint64(r.Seed), m.SLO, res)
	for i := range run.Summaries {
		run.Summaries[i].Steady = steady[i]
	}
	return run, nil
}

// steadyRows is Resolved.steadyRows after drawing the stream's first queries for the
// capacity.
func (s *Sim) steadyRows(res []*policies.Result) ([]*results.SteadyRow, error) {
	r, m := s.Resolved, s.Resolved.Graph
	if m.Online && m.sample == nil {
		sample, err := s.firstQueries(capacityQueries)
		if err != nil {
			return nil, err
		}
		m.sample = sample
	}
	return r.steadyRows(res)
}

// streamPolicy simulates policy p, the i-th, over a fresh stream of the workload.
func (s *Sim) streamPolicy(ctx context.Context, i int, p ResolvedPolicy, files *streamFiles, progress Progress) (*policies.Result, policies.Policy, error) {
	r := s.Resolved
	st, err := s.stream()
	if err != nil {
		return nil, nil, r.errorf("workload", "%v", err)
	}
	cl, err := simulated.New(r.clusterConfig())
	if err != nil {
		return nil, nil, err
	}
	pol := p.New()
	src := newPrefetch(&checkedStream{Stream: st, r: r, limits: r.lengthLimits()})
	defer src.stop()
	d, err := policies.NewStreamDriver(cl, pol, p.Rule, src, r.ModelInfos(), r.NumWorkers())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Label, err)
	}
	d.SetEarlyExit(p.Exit)
	d.SetOverlap(p.Overlap)
	if progress != nil {
		d.Progress = func(done, total int) { progress(p.Label, done, total) }
	}
	sink := &rowSink{}
	if files != nil {
		var ws []*results.Section[results.WorkerRow]
		for w := range r.NumWorkers() {
			ws = append(ws, files.workers.Section(i*r.NumWorkers()+w))
		}
		sink.w = newRowWriter(p.Label, r.Graph.SLO, files.calls.Section(i), files.queries.Section(i), ws)
	}
	d.Stream(sink, r.Graph.SLO)
	res, err := d.Run(ctx)
	if werr := sink.close(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Label, err)
	}
	res.Policy = p.Label
	return res, pol, nil
}

// streamFiles are the tables a streamed simulation writes as it goes: a section per policy
// (per policy and worker for workers.csv), joined in policy order as Run.WriteInto writes them.
type streamFiles struct {
	calls   *results.Stream[results.CallRow]
	queries *results.Stream[results.QueryRow]
	workers *results.Stream[results.WorkerRow]
}

func openStreamFiles(dir *results.Dir, policies, workers int) (*streamFiles, error) {
	var f streamFiles
	var err error
	if f.calls, err = results.OpenStream(dir, results.Calls, policies); err != nil {
		return nil, err
	}
	if f.queries, err = results.OpenStream(dir, results.Queries, policies); err != nil {
		f.calls.Abort()
		return nil, err
	}
	if f.workers, err = results.OpenStream(dir, results.Workers, policies*workers); err != nil {
		f.calls.Abort()
		f.queries.Abort()
		return nil, err
	}
	return &f, nil
}

// commit puts the tables in place.
func (f *streamFiles) commit() error {
	if err := f.calls.Commit(); err != nil {
		f.queries.Abort()
		f.workers.Abort()
		return err
	}
	if err := f.queries.Commit(); err != nil {
		f.workers.Abort()
		return err
	}
	return f.workers.Commit()
}

// abort removes what was written.
func (f *streamFiles) abort() {
	f.calls.Abort()
	f.queries.Abort()
	f.workers.Abort()
}

// rowSink hands a policy's streamed records, in batches, to a writer that turns them into
// the rows of its sections on its own goroutine (none without a results folder).
type rowSink struct {
	w *rowWriter
	b *rowBatch
}

// rowBatch is records on their way to the writer. A record's call and query stay as they
// are once the Driver lets them go, so the writer may read them later.
type rowBatch struct {
	calls     []policies.CallRecord
	queries   []queryRecord
	intervals []policies.Interval
}

// queryRecord is how a query ended and how many of its calls ran.
type queryRecord struct {
	q     *traces.Query
	o     policies.QueryOutcome
	calls int
}

// batchRows is how many call rows make a batch.
const batchRows = 4096

// Query implements policies.Sink.
func (s *rowSink) Query(q *traces.Query, o policies.QueryOutcome, calls []policies.CallRecord) error {
	if s.w == nil {
		return nil
	}
	b := s.batch()
	b.calls = append(b.calls, calls...)
	b.queries = append(b.queries, queryRecord{q: q, o: o, calls: len(calls)})
	return s.send(false)
}

// Interval implements policies.Sink.
func (s *rowSink) Interval(iv policies.Interval) error {
	if s.w == nil {
		return nil
	}
	b := s.batch()
	b.intervals = append(b.intervals, iv)
	return s.send(false)
}

// batch is the batch being filled.
func (s *rowSink) batch() *rowBatch {
	if s.b == nil {
		s.b = s.w.batch()
	}
	return s.b
}

// send hands the batch to the writer when it is full (or, with all, whatever it holds).
func (s *rowSink) send(all bool) error {
	b := s.b
	if b == nil || !all && len(b.calls)+len(b.queries)+len(b.intervals) < batchRows {
		return nil
	}
	s.b = nil
	return s.w.send(b)
}

// close sends the last rows and waits for the writer.
func (s *rowSink) close() error {
	if s.w == nil {
		return nil
	}
	err := s.send(true)
	if werr := s.w.close(); err == nil {
		err = werr
	}
	return err
}

// rowWriter writes batches of a policy's records as rows of its sections on its own
// goroutine.
type rowWriter struct {
	policy    string
	slo       policies.SLO
	calls     *results.Section[results.CallRow]
	queries   *results.Section[results.QueryRow]
	intervals []*results.Section[results.WorkerRow]
	full      chan *rowBatch
	empty     chan *rowBatch
	done      chan error
}

func newRowWriter(policy string, slo policies.SLO, calls *results.Section[results.CallRow], queries *results.Section[results.QueryRow],
	intervals []*results.Section[results.WorkerRow]) *rowWriter {
	w := &rowWriter{policy: policy, slo: slo, calls: calls, queries: queries, intervals: intervals,
		full: make(chan *rowBatch, 4), empty: make(chan *rowBatch, 8), done: make(chan error, 1)}
	go w.run()
	return w
}

// run writes the batches sent until the channel closes, then reports the first error.
func (w *rowWriter) run() {
	var err error
	for b := range w.full {
		if err == nil {
			err = w.write(b)
		}
		clear(b.calls)
		clear(b.queries)
		b.calls, b.queries, b.intervals = b.calls[:0], b.queries[:0], b.intervals[:0]
		select {
		case w.empty <- b:
		default:
		}
	}
	w.done <- err
}

// write writes a batch's rows.
func (w *rowWriter) write(b *rowBatch) error {
	for _, c := range b.calls {
		if err := w.calls.Add(CallRow(w.policy, c)); err != nil {
			return err
		}
	}
	for _, r := range b.queries {
		if err := w.queries.Add(queryRow(w.policy, r.q, r.o, r.calls, w.slo)); err != nil {
			return err
		}
	}
	for _, iv := range b.intervals {
		if err := w.intervals[iv.Worker].Add(workerRow(w.policy, iv)); err != nil {
			return err
		}
	}
	return nil
}

// batch returns an empty batch, reused when one is free.
func (w *rowWriter) batch() *rowBatch {
	select {
	case b := <-w.empty:
		return b
	default:
		return &rowBatch{}
	}
}

// send hands a batch to the writer.
func (w *rowWriter) send(b *rowBatch) error {
	w.full <- b
	return nil
}

// close waits for the writer to write what it was sent.
func (w *rowWriter) close() error {
	close(w.full)
	return <-w.done
}

// checkedStream checks each query's calls against their engines as it is drawn, as Resolve
// checks a whole workload (checkLengths), and names what a drawing error concerns.
type checkedStream struct {
	*traces.Stream
	r *Resolved
	// limits are the longest prompt and output each model's calls may have.
	limits map[string]int
	one    traces.Workload
}

// Next implements policies.QuerySource.
func (c *checkedStream) Next() (*traces.Query, error) {
	q, err := c.Stream.Next()
	if err != nil {
		var late *traces.LateArrivalError
		if errors.As(err, &late) {
			return nil, c.r.errorf("workload.arrival_rate", "%v", err)
		}
		return nil, c.r.errorf("workload", "%v", err)
	}
	for i := range q.Calls {
		call := &q.Calls[i]
		if limit, ok := c.limits[call.Model]; ok && call.InputTokens+call.OutputTokens <= limit {
			continue
		}
		if call.IsTool() {
			continue
		}
		// Too long somewhere: Resolve's check says where.
		c.one.Queries = append(c.one.Queries[:0], *q)
		if err := c.r.checkLengths(&c.one); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// lengthLimits gives, by the name its calls write, the longest prompt and output a model's
// calls can have on every group that runs it: what checkLengths lets through.
func (r *Resolved) lengthLimits() map[string]int {
	out := map[string]int{}
	for _, rm := range r.Models {
		limit := rm.Arch.MaxModelLen
		for _, gm := range rm.OnGroup {
			if gm.Cost != nil {
				limit = min(limit, (gm.Engine.NumBlocks-gm.Engine.WatermarkBlocks)*gm.Engine.BlockSize)
			}
		}
		out[rm.Name] = limit
	}
	return out
}

// prefetch draws a stream's queries ahead, in batches, on a goroutine of its own, so that the
// simulation's goroutine does not wait for the generator (the queries are the same, in the
// same order: one goroutine draws them all).
type prefetch struct {
	src    *checkedStream
	counts traces.CallCounts
	cerr   error
	full   chan prefetched
	empty  chan []*traces.Query
	done   chan struct{}
	// batch is the batch being read, cur what is left of it; err ends the stream after it.
	batch, cur []*traces.Query
	err        error
}

// prefetched is a batch of queries, and the error that ended the stream after them (io.EOF
// at its end).
type prefetched struct {
	queries []*traces.Query
	err     error
}

// prefetchBatch is how many queries a batch holds.
const prefetchBatch = 256

// newPrefetch counts src's calls, then starts drawing its queries ahead.
func newPrefetch(src *checkedStream) *prefetch {
	p := &prefetch{src: src, full: make(chan prefetched, 4), empty: make(chan []*traces.Query, 6), done: make(chan struct{})}
	p.counts, p.cerr = src.Counts()
	go p.run()
	return p
}

// run draws batches until the stream ends or stop is called.
func (p *prefetch) run() {
	for {
		var b []*traces.Query
		select {
		case b = <-p.empty:
		default:
			b = make([]*traces.Query, 0, prefetchBatch)
		}
		var err error
		for len(b) < prefetchBatch {
			var q *traces.Query
			if q, err = p.src.Next(); err != nil {
				break
			}
			b = append(b, q)
		}
		select {
		case p.full <- prefetched{queries: b, err: err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// Len implements policies.QuerySource.
func (p *prefetch) Len() int { return p.src.Len() }

// Counts implements policies.QuerySource.
func (p *prefetch) Counts() (traces.CallCounts, error) { return p.counts, p.cerr }

// Next implements policies.QuerySource.
func (p *prefetch) Next() (*traces.Query, error) {
	for len(p.cur) == 0 {
		if p.err != nil {
			return nil, p.err
		}
		if p.batch != nil {
			select {
			case p.empty <- p.batch[:0]: // read to its end: the drawing goroutine may refill it
			default:
			}
		}
		b := <-p.full
		p.batch, p.cur, p.err = b.queries, b.queries, b.err
	}
	q := p.cur[0]
	p.cur[0] = nil
	p.cur = p.cur[1:]
	return q, nil
}

// stop ends the drawing (the Driver has read what it needs, or gave up).
func (p *prefetch) stop() { close(p.done) }

// firstQueries draws the first n queries of the streamed workload (fewer if it has fewer).
func (s *Sim) firstQueries(n int) ([]traces.Query, error) {
	st, err := s.stream()
	if err != nil {
		return nil, err
	}
	out := make([]traces.Query, 0, min(n, st.Len()))
	for len(out) < n {
		q, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *q)
	}
	return out, nil
}
