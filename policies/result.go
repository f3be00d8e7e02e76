package policies

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/radix"
	"github.com/mosaic-sched/mosaic/internal/spill"
	"github.com/mosaic-sched/mosaic/traces"
)

// LoadRecord is one model load on a worker.
type LoadRecord struct {
	Worker     WorkerID
	Model      string
	Start, End time.Duration
}

// CallRecord is one call that ran (a tool step included).
type CallRecord struct {
	Call *traces.Call
	// Worker served the call (-1 for a tool step).
	Worker WorkerID
	Ready  time.Duration
	Timing CallTiming
	// Status is "done", "failed" or "cancelled" (a call stopped before its end); Err says why
	// a call failed.
	Status string
	Err    string
	// Produced is the output tokens the call produced: all of them when done, those before
	// it stopped when cancelled (a failed call: those asked for).
	Produced int
	// Final marks a final call of its query that reads others (the final stage).
	Final bool
	// Attempts is how many times the call was sent (1 unless replay retried it), and
	// RetryLost the time its failed attempts cost before its last (Timing) was sent.
	Attempts  int
	RetryLost time.Duration
}

// QueryOutcome is how a query ended.
type QueryOutcome struct {
	// Skipped says the rule skipped the query's final call (a MoA query's aggregator);
	// SkippedCalls counts every call of the query the rule skipped.
	Skipped      bool
	SkippedCalls int
	// Confidence is the top vote share of the answers that decided the query (its final
	// call's inputs, or its final calls).
	Confidence float64
	Final      string
	Gold       string
	// Arrival is when the query arrived, End when its last final call finished (or was
	// skipped), FirstToken when its final call produced its first token (End if it was
	// skipped; the latest over several final calls), and Queue the time its critical path
	// (from the last final call back through the latest-finishing input each time) spent
	// waiting to be scheduled.
	Arrival, End, FirstToken, Queue time.Duration
}

// Latency is the query's end-to-end latency: from its arrival to its final answer.
func (q QueryOutcome) Latency() time.Duration { return q.End - q.Arrival }

// TTFT is the time from the query's arrival to its final call's first token.
func (q QueryOutcome) TTFT() time.Duration { return q.FirstToken - q.Arrival }

// Result is what a Driver run produced.
type Result struct {
	Policy string
	Rule   string
	// Threshold is the rule's T when it is a ConfidenceSkip (+Inf: never skips; NaN: other rules).
	Threshold float64
	Workers   int
	Calls     []CallRecord // in call-id order
	Loads     []LoadRecord // in completion order (none when streamed: see Driver.Stream)
	Queries   []QueryOutcome
	// AlwaysAggregate is the accuracy the workload's aggregator answers give when every query
	// is aggregated (NaN when no query has a gold answer).
	AlwaysAggregate float64
	// tally is a streamed run's summary of its calls and queries (Driver.Stream), which the
	// Result does not hold.
	tally *Tally
}

// Streamed reports whether the run's calls, queries and intervals went to a Sink as they
// came (Driver.Stream) instead of into the Result, which then holds their summary only.
func (r *Result) Streamed() bool { return r.tally != nil }

// finishedAt is when a finished call ended for the calls that read it (a skipped call: when it
// was decided; a cancelled one: when it was cancelled).
func (d *Driver) finishedAt(id int) time.Duration {
	cs := d.cs(id)
	switch cs.status {
	case callSkipped:
		return cs.ready
	case callCancelled, callCancelling:
		return d.outcomes.cancelledAt[id]
	}
	return cs.timing.End
}

// outcome describes how query qs ended.
func (d *Driver) outcome(qs *queryState) QueryOutcome {
	q := qs.q
	o := QueryOutcome{SkippedCalls: qs.skipped, Final: qs.final, Gold: q.Gold, Arrival: q.Arrival, End: qs.end}
	last := -1
	var voters []string
	for i := range q.Calls {
		id := qs.first + i
		if !d.sinkCall(id) {
			continue
		}
		cs := d.cs(id)
		if cs.status != callCancelled && cs.status != callCancelling {
			voters = append(voters, cs.answer)
		}
		ft := cs.timing.FirstToken
		if cs.status == callSkipped || ft == 0 {
			ft = d.finishedAt(id)
		}
		o.FirstToken = max(o.FirstToken, ft)
		if last < 0 || d.finishedAt(id) > d.finishedAt(last) {
			last = id
		}
	}
	if len(voters) == 1 && d.cs(last).final {
		o.Skipped = d.cs(last).status == callSkipped
		o.Confidence = d.cs(last).confidence
	} else {
		o.Confidence = traces.Confidence(voters)
	}
	// The critical path: back from the last final call through the latest-finishing input.
	for id := last; id >= 0; {
		cs := d.cs(id)
		if cs.status == callDone || cs.status == callFailed {
			if !cs.call.IsTool() {
				o.Queue += max(0, cs.timing.Started-cs.ready)
			}
		}
		next := -1
		for _, in := range cs.call.Inputs {
			p := qs.first + in.From
			if next < 0 || d.finishedAt(p) > d.finishedAt(next) {
				next = p
			}
		}
		id = next
	}
	return o
}

func ratio(a, b int) float64 {
	if b == 0 {
		return nan()
	}
	return float64(a) / float64(b)
}

// Restrict returns the result over the queries keep marks only (their calls and outcomes),
// with always, the accuracy of always aggregating those queries, in place of AlwaysAggregate:
// what a run with failed calls can still be summarised over. Loads stay, as they were.
func (r *Result) Restrict(keep []bool, always float64) *Result {
	out := *r
	out.AlwaysAggregate = always
	out.Calls = make([]CallRecord, 0, len(r.Calls))
	for _, c := range r.Calls {
		if q := c.Call.Query; q >= 0 && q < len(keep) && keep[q] {
			out.Calls = append(out.Calls, c)
		}
	}
	out.Queries = make([]QueryOutcome, 0, len(r.Queries))
	for qi, q := range r.Queries {
		if qi < len(keep) && keep[qi] {
			out.Queries = append(out.Queries, q)
		}
	}
	return &out
}

// Summary is the headline figures of a run.
type Summary struct {
	Queries int
	// ExpertCalls counts the calls that ran before the final stage (every call but the final
	// ones: a MoA query's experts), AggregatorCalls the final calls that ran (its aggregator),
	// AggregatorSkipped the final calls the rule skipped, and SkippedCalls every call the rule
	// skipped, at any layer. Tool steps are not counted.
	ExpertCalls       int
	AggregatorCalls   int
	AggregatorSkipped int
	SkippedCalls      int
	FailedCalls       int
	// CancelledCalls counts the calls stopped after they were submitted (an early exit, a
	// policy's cancellation); their GPU time counts, their answers do not.
	CancelledCalls int
	// ExpertStage is when the last call before the final stage finished; AggregatorStage the
	// time from then to the end; E2E when the last call finished.
	ExpertStage, AggregatorStage, E2E time.Duration
	// Latency summarises the queries' end-to-end latencies, TTFT their times to the final
	// call's first token and Queue their critical paths' queueing delays (seconds).
	Latency, TTFT, Queue LatencyStats
	// Throughput is queries per second from the first arrival to the last answer.
	Throughput float64
	// Accuracy is the share of queries (with a gold answer) whose final answer is right;
	// AccuracyDeltaPP its difference to always aggregating, in percentage points.
	Accuracy, AccuracyDeltaPP float64
	// GPUBusyFrac is the busy share of workers x E2E; ModelLoads counts loads.
	GPUBusyFrac float64
	ModelLoads  int
	// Retries counts the attempts of calls after their first (replay).
	Retries int
}

// FirstError is the error of the first failed call that says one, in call order ("" when
// none does).
func (r *Result) FirstError() string {
	if r.tally != nil {
		return r.tally.firstErr
	}
	for _, c := range r.Calls {
		if c.Status == "failed" && c.Err != "" {
			return c.Err
		}
	}
	return ""
}

// Settle works out a streamed result's latency summaries, reading back what its run wrote out
// of memory (see Tally), and returns the error that kept it from doing so. Call it before
// Summary, which otherwise logs that error and gives NaN latencies. A held result has
// nothing to settle.
func (r *Result) Settle() error {
	if r.tally == nil {
		return nil
	}
	return r.tally.settle()
}

// Summary computes the run's headline figures.
func (r *Result) Summary() Summary {
	t := r.tally
	if t == nil {
		t = r.fold(SLO{})
		t.busy = r.BusyTime()
	}
	return t.summary(r.Loads, r.AlwaysAggregate)
}

// fold tallies the result's calls and queries.
func (r *Result) fold(slo SLO) *Tally {
	t := NewTally(r.Workers, slo)
	t.lat = make([]time.Duration, 0, len(r.Queries))
	t.ttft = make([]time.Duration, 0, len(r.Queries))
	t.queue = make([]time.Duration, 0, len(r.Queries))
	for i := range r.Calls {
		t.Call(&r.Calls[i])
	}
	for _, q := range r.Queries {
		t.Query(q)
	}
	return t
}

// Tally folds a run's calls and queries into its headline figures as they come, without
// holding their records: a streamed run's summary (Driver.Stream), and, over a held Result's
// records, Result.Summary. Only the queries' latencies are kept, for their exact percentiles
// (24 bytes a query), and in a streamed run each query's arrival and SLO bit for the
// steady-state window; a streamed run keeps them in columns whose memory does not grow with
// the run (see columns).
type Tally struct {
	workers int
	slo     SLO
	s       Summary
	// e2e is when the last call ended; stage the last call before the final stage.
	e2e, stage time.Duration
	// A held run's queries' latencies, times to first token and queueing delays.
	lat, ttft, queue []time.Duration
	right, gold      int
	// first and last are the first arrival and the last end; met counts the queries that
	// met the SLO.
	first, last time.Duration
	met         int
	// busy is the workers' busy time (a streamed run's, from its intervals).
	busy time.Duration
	// loads counts a streamed run's model loads and loadEnd is when the last one ended (a
	// held run's are in Result.Loads).
	loads   int
	loadEnd time.Duration
	// ends holds, by layer and worker, when the last call of the layer ended there.
	ends [][]time.Duration
	// firstErr is the first failed call's error that says one.
	firstErr string
	// A streamed run's tally (stream) keeps its queries' latencies in query order in cols,
	// with what the steady-state window (Result.Window) needs: each query's arrival, and
	// whether it met the SLO (a bit of met, by query order). stats holds the latencies'
	// summaries once computed (settle), statsErr the error reading them back.
	cols     *columns
	metBits  []uint64
	stats    *[3]LatencyStats
	statsErr error
	stream   bool
	// A streamed run's columns live outside the collected heap and in temporary files,
	// released once the tally is unreachable: a tally must not be copied, and a method that
	// reads them keeps the tally alive until it is done (runtime.KeepAlive).
	_ noCopy
}

// noCopy makes go vet report a copied Tally (its copylocks check).
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// spillChunk is how many values a streamed tally's column holds in memory before it writes
// them to a temporary file (a variable for tests).
var spillChunk = spill.DefaultChunk

// columns are a streamed tally's: each query's end-to-end latency, time to first token,
// queueing delay and arrival, in query order. Each keeps up to spillChunk values in memory
// (outside the collected heap) and older ones in an unlinked temporary file in os.TempDir
// (internal/spill): 32 bytes a query that a long run would otherwise hold to its end (ten
// million queries: 320 MB, and as much again to sort them), so that its memory stays flat as
// it grows.
type columns struct {
	lat, ttft, queue, arrival *spill.Column[time.Duration]
}

// release frees the columns' memory and files.
func (c *columns) release() {
	for _, col := range []*spill.Column[time.Duration]{c.lat, c.ttft, c.queue, c.arrival} {
		col.Release()
	}
}

// makeColumns gives a streamed tally its columns, released once it is unreachable. The
// latencies' are written out in sorted runs too, as they come, on the recorder's goroutine, so
// that their percentiles at the end of the run take a merge, not a sort.
func (t *Tally) makeColumns() {
	col := func(sorted bool) *spill.Column[time.Duration] {
		c := spill.New[time.Duration](spillChunk, "")
		if sorted {
			c.KeepRuns()
		}
		return c
	}
	t.cols = &columns{lat: col(true), ttft: col(true), queue: col(true), arrival: col(false)}
	runtime.AddCleanup(t, (*columns).release, t.cols)
}

// NewTally returns an empty tally of a run on workers workers whose queries are held to slo.
func NewTally(workers int, slo SLO) *Tally { return &Tally{workers: workers, slo: slo} }

// Call adds a call that ran (in call-ID order, for Result.FirstError).
func (t *Tally) Call(c *CallRecord) {
	s := &t.s
	t.e2e = max(t.e2e, c.Timing.End)
	s.Retries += max(0, c.Attempts-1)
	if c.Worker >= 0 {
		for len(t.ends) <= c.Call.Layer {
			t.ends = append(t.ends, make([]time.Duration, t.workers))
		}
		t.ends[c.Call.Layer][c.Worker] = max(t.ends[c.Call.Layer][c.Worker], c.Timing.End)
	}
	switch c.Status {
	case "failed":
		s.FailedCalls++
		if t.firstErr == "" {
			t.firstErr = c.Err
		}
	case "cancelled":
		s.CancelledCalls++
		return
	}
	if c.Final {
		if !c.Call.IsTool() {
			s.AggregatorCalls++
		}
		return
	}
	t.stage = max(t.stage, c.Timing.End)
	if !c.Call.IsTool() {
		s.ExpertCalls++
	}
}

// Query adds a query's outcome.
func (t *Tally) Query(q QueryOutcome) {
	s := &t.s
	if s.Queries == 0 {
		t.first = q.Arrival
	}
	s.Queries++
	if q.Skipped {
		s.AggregatorSkipped++
	}
	s.SkippedCalls += q.SkippedCalls
	if !t.stream {
		t.lat = append(t.lat, q.Latency())
		t.ttft = append(t.ttft, q.TTFT())
		t.queue = append(t.queue, q.Queue)
	}
	if q.Gold != "" {
		t.gold++
		if q.Final == q.Gold {
			t.right++
		}
	}
	t.first, t.last = min(t.first, q.Arrival), max(t.last, q.End)
	if t.slo.Met(q) {
		t.met++
	}
	if t.stream {
		t.addStreamed(q.Latency(), q.TTFT(), q.Queue, q.Arrival, t.slo.Met(q))
	}
}

// load adds a model load (a streamed run's; a held Result keeps its loads).
func (t *Tally) load(l LoadRecord) {
	t.loads++
	t.loadEnd = max(t.loadEnd, l.End)
}

// addStreamed adds a query's latencies, arrival and whether it met the SLO to a streamed
// tally's columns.
func (t *Tally) addStreamed(lat, ttft, queue, at time.Duration, met bool) {
	if t.cols == nil {
		t.makeColumns()
	}
	c := t.cols
	i := c.arrival.Len()
	if i%64 == 0 {
		t.metBits = append(t.metBits, 0)
	}
	if met {
		t.metBits[i/64] |= 1 << (i % 64)
	}
	c.lat.Append(lat)
	c.ttft.Append(ttft)
	c.queue.Append(queue)
	c.arrival.Append(at)
}

// metAt reports whether the i-th query of a streamed tally met the SLO.
func (t *Tally) metAt(i int) bool { return t.metBits[i/64]&(1<<(i%64)) != 0 }

// summary computes the headline figures with the run's loads and the accuracy of always
// aggregating.
func (t *Tally) summary(loads []LoadRecord, always float64) Summary {
	s := t.s
	s.ModelLoads = len(loads) + t.loads
	s.E2E, s.ExpertStage = max(t.e2e, t.loadEnd), t.stage
	for _, l := range loads {
		s.E2E = max(s.E2E, l.End)
	}
	s.AggregatorStage = s.E2E - s.ExpertStage
	s.Latency, s.TTFT, s.Queue = t.latencyStats()
	if s.Queries > 0 {
		if span := (t.last - t.first).Seconds(); span > 0 {
			s.Throughput = float64(s.Queries) / span
		}
	}
	s.Accuracy = ratio(t.right, t.gold)
	s.AccuracyDeltaPP = 100 * (s.Accuracy - always)
	if s.E2E > 0 {
		s.GPUBusyFrac = t.busy.Seconds() / (float64(t.workers) * s.E2E.Seconds())
	}
	return s
}

// latencyStats summarises the queries' latencies, times to first token and queueing delays. A
// held run's tally sorts them in place; a streamed run's reads its columns in sorted order
// once (settle) and keeps the summaries, NaN where they could not be read back.
func (t *Tally) latencyStats() (lat, ttft, queue LatencyStats) {
	if !t.stream {
		return latencyStats(t.lat), latencyStats(t.ttft), latencyStats(t.queue)
	}
	if err := t.settle(); err != nil {
		slog.Error("a streamed run's latency summaries are missing", "err", err)
	}
	return t.stats[0], t.stats[1], t.stats[2]
}

// settle works out a streamed tally's latency summaries, once, and returns the error that
// kept them from being read back, if any.
func (t *Tally) settle() error {
	if t.stats != nil {
		return t.statsErr
	}
	defer runtime.KeepAlive(t) // its columns may be off the heap (columns)
	t.stats = new([3]LatencyStats)
	if t.cols == nil {
		return nil
	}
	for i, c := range []*spill.Column[time.Duration]{t.cols.lat, t.cols.ttft, t.cols.queue} {
		if t.stats[i], t.statsErr = sortedStats(c, 0); t.statsErr != nil {
			t.statsErr = fmt.Errorf("reading a streamed run's query latencies back: %w", t.statsErr)
			nan := nan()
			for j := range t.stats {
				t.stats[j] = LatencyStats{Mean: nan, P50: nan, P90: nan, P99: nan, Max: nan}
			}
			break
		}
	}
	return t.statsErr
}

// attainment is Result.Attainment under the tally's SLO.
func (t *Tally) attainment() (share, goodput float64) {
	if t.s.Queries == 0 {
		return nan(), nan()
	}
	share = float64(t.met) / float64(t.s.Queries)
	goodput = nan()
	if span := (t.last - t.first).Seconds(); span > 0 {
		goodput = float64(t.met) / span
	}
	return share, goodput
}

// latencyStats summarises durations as NewLatencyStats summarises their seconds, sorting them
// in place (seconds keep the durations' order, so the sorted seconds are the same).
func latencyStats(d []time.Duration) LatencyStats {
	radix.Sort(d)
	var a statsOf
	a.start(len(d))
	a.add(d)
	return a.stats()
}

// sortedStats is latencyStats of a column's values from the from-th on.
func sortedStats(c *spill.Column[time.Duration], from int) (LatencyStats, error) {
	var a statsOf
	a.start(c.Len() - from)
	err := spill.Sorted(c, from, a.add)
	return a.stats(), err
}

// statsOf summarises n durations handed to add in increasing order, a block at a time: their
// seconds summed in that order, and the ranks' and the last.
type statsOf struct {
	n, seen int
	sum     float64
	// ranks are the indices of the 50th, 90th and 99th percentiles, at their values.
	ranks [3]int
	at    [3]time.Duration
	last  time.Duration
}

// start readies the summary of n durations.
func (a *statsOf) start(n int) {
	*a = statsOf{n: n}
	for i, q := range [3]float64{0.5, 0.9, 0.99} {
		a.ranks[i] = min(n-1, max(0, int(math.Ceil(q*float64(n)))-1))
	}
}

// add takes the next durations, in increasing order.
func (a *statsOf) add(d []time.Duration) {
	for i, r := range a.ranks {
		if r >= a.seen && r < a.seen+len(d) {
			a.at[i] = d[r-a.seen]
		}
	}
	for _, v := range d {
		a.sum += v.Seconds()
	}
	if len(d) > 0 {
		a.last = d[len(d)-1]
	}
	a.seen += len(d)
}

// stats is the summary (zero without durations).
func (a *statsOf) stats() LatencyStats {
	if a.n == 0 {
		return LatencyStats{}
	}
	return LatencyStats{Mean: a.sum / float64(a.n), P50: a.at[0].Seconds(), P90: a.at[1].Seconds(), P99: a.at[2].Seconds(), Max: a.last.Seconds()}
}

// StageEnds gives, by layer and worker, when the last call of the layer that ran there ended
// (0: none): what planned stages are checked against.
func (r *Result) StageEnds() [][]time.Duration {
	if r.tally != nil {
		return r.tally.ends
	}
	t := NewTally(r.Workers, SLO{})
	for i := range r.Calls {
		t.Call(&r.Calls[i])
	}
	return t.ends
}

// BusyTime is the workers' busy time summed: the length of their busy intervals
// (WorkerIntervals) without building them.
func (r *Result) BusyTime() time.Duration {
	served := make([]int, r.Workers)
	for i := range r.Calls {
		if w := r.Calls[i].Worker; w >= 0 {
			served[w]++
		}
	}
	per := make([][]int64, r.Workers) // edge keys, as busySpans makes them
	for w, n := range served {
		per[w] = make([]int64, 0, 2*n)
	}
	for i := range r.Calls {
		c := &r.Calls[i]
		if c.Worker < 0 || c.Timing.End <= c.Timing.Started {
			continue
		}
		per[c.Worker] = append(per[c.Worker], int64(c.Timing.Started)<<1|1, int64(c.Timing.End)<<1)
	}
	var busy time.Duration
	for _, keys := range per {
		radix.Sort(keys)
		n, start := 0, int64(0)
		for _, k := range keys {
			if k&1 == 1 {
				if n == 0 {
					start = k >> 1
				}
				n++
				continue
			}
			if n--; n == 0 {
				busy += time.Duration(k>>1 - start)
			}
		}
	}
	return busy
}

// Interval is a span of one worker's time: "load" (a model loading), "busy" (at least one
// call being served) or "idle".
type Interval struct {
	Worker     WorkerID
	Kind       string
	Model      string // the loading model, or the models served while busy ("+"-joined)
	Start, End time.Duration
	// MeanBatch is the time-averaged number of calls in service during a busy interval.
	MeanBatch float64
}

// WorkerIntervals splits every worker's time from 0 to the end of the run into load, busy and
// idle intervals, ordered by worker and time. A call is in service from its start (first
// scheduled) to its end. A streamed Result has none (they went to its Sink).
func (r *Result) WorkerIntervals() []Interval {
	if r.tally != nil {
		return nil
	}
	var end time.Duration
	lines := make([]timeline, r.Workers)
	for w := range lines {
		lines[w].w = WorkerID(w)
	}
	var models []string
	for i := range r.Calls {
		c := &r.Calls[i]
		end = max(end, c.Timing.End)
		if c.Worker < 0 || c.Timing.End <= c.Timing.Started {
			continue
		}
		m := slices.Index(models, c.Call.Model)
		if m < 0 {
			m = len(models)
			models = append(models, c.Call.Model)
		}
		lines[c.Worker].add(c.Timing.Started, c.Timing.End, int32(m))
	}
	for _, l := range r.Loads {
		lines[l.Worker].addLoad(l)
		end = max(end, l.End)
	}
	var out []Interval
	for w := range lines {
		_ = lines[w].finish(end, models, func(iv Interval) error {
			out = append(out, iv)
			return nil
		})
	}
	return out
}

// timeline builds one worker's intervals from the calls it served (each from its start to its
// end) and its loads, a stretch at a time: advance turns the calls' edges before a bound into
// busy intervals and hands on, in time order, the intervals that start before it (with the
// idle ones between), so that a run can give them out as it goes.
type timeline struct {
	w WorkerID
	// The calls' edges not yet turned into intervals.
	edgeList
	// packed is sortStarts' scratch.
	packed []int64
	// The busy interval under way: n calls in service, its span so far, the area under the
	// number in service, the last edge's time and the models served.
	n      int
	cur    Interval
	area   float64
	last   time.Duration
	models []string
	// busy are the busy intervals ended and loads the loads (by start, in order of their
	// ends among equal starts), not yet handed on; t is where the handed-on timeline ends.
	busy, loads []Interval
	t           time.Duration
	// due is how many edges make the next stretch worth building (a streamed run).
	due int
}

// edge is a call entering or leaving service at a time: key is twice the time, plus one for
// an entry, so that sorting by key alone puts a time's exits before its entries; model
// numbers the call's model.
type edge struct {
	key   int64
	model int32
}

func (e edge) at() time.Duration { return time.Duration(e.key >> 1) }
func (e edge) entry() bool       { return e.key&1 == 1 }

// edgeList is calls' edges: their entries, and the keys of their exits. Calls are added as
// they end, so the exits mostly come in order (endsUnsorted says one did not): only the
// entries need sorting, and the two lists are then merged (timeline.advance).
type edgeList struct {
	starts       []edge
	ends         []int64
	endsUnsorted bool
}

// add adds a call in service from start to end (end > start).
func (l *edgeList) add(start, end time.Duration, model int32) {
	l.starts = append(l.starts, edge{int64(start)<<1 | 1, model})
	key := int64(end) << 1
	if n := len(l.ends); n > 0 && l.ends[n-1] > key {
		l.endsUnsorted = true
	}
	l.ends = append(l.ends, key)
}

// edges is how many edges the list holds.
func (l *edgeList) edges() int { return len(l.starts) + len(l.ends) }

// take moves the edges of from to the end of l, emptying from.
func (l *edgeList) take(from *edgeList) {
	if n := len(l.ends); n > 0 && len(from.ends) > 0 && l.ends[n-1] > from.ends[0] {
		l.endsUnsorted = true
	}
	l.endsUnsorted = l.endsUnsorted || from.endsUnsorted
	l.starts = append(l.starts, from.starts...)
	l.ends = append(l.ends, from.ends...)
	from.reset()
}

// reset empties the list, keeping its room.
func (l *edgeList) reset() {
	l.starts, l.ends, l.endsUnsorted = l.starts[:0], l.ends[:0], false
}

// addLoad adds a load: after the loads that start no later, as a stable sort by start of the
// loads in the order they ended keeps them.
func (tl *timeline) addLoad(l LoadRecord) {
	iv := Interval{Worker: l.Worker, Kind: "load", Model: l.Model, Start: l.Start, End: l.End}
	i := len(tl.loads)
	for i > 0 && tl.loads[i-1].Start > iv.Start {
		i--
	}
	tl.loads = slices.Insert(tl.loads, i, iv)
}

// sortStarts sorts the entries by key; models bounds their model numbers. When every key
// leaves room below it for a model number, each entry is packed into one integer, key above
// model, and the integers are sorted by their bytes (radix.Sort): entries of one key then come
// by model, an order as good as any (see advance). A comparison sort of the entries took about
// 3% of the instructions of a streamed run's simulation.
func (tl *timeline) sortStarts(models int) {
	shift := bits.Len(uint(models))
	limit := int64(1) << (62 - shift) // keys are non-negative: twice a time, plus one
	packed := tl.packed[:0]
	for _, e := range tl.starts {
		if e.key >= limit {
			slices.SortFunc(tl.starts, func(a, b edge) int { return cmp.Compare(a.key, b.key) })
			return
		}
		packed = append(packed, e.key<<shift|int64(e.model))
	}
	radix.Sort(packed)
	mask := int64(1)<<shift - 1
	for i, p := range packed {
		tl.starts[i] = edge{key: p >> shift, model: int32(p & mask)}
	}
	tl.packed = packed[:0]
}

// advance builds the busy intervals from the edges before bound, then hands to emit, in
// order, the intervals that start before bound and before the busy interval still under way
// (no later call or load can start before bound). models names the edges' models.
func (tl *timeline) advance(bound time.Duration, models []string, emit func(Interval) error) error {
	// Ends before starts at the same instant: an exit's key is even, an entry's odd, so the
	// two lists, each by key, merge without ties. The order among edges of one instant and one
	// kind changes nothing below (they add no area, and a span opens at the first start and
	// closes at the last end), so an unstable sort is enough.
	tl.sortStarts(len(models))
	if tl.endsUnsorted {
		slices.Sort(tl.ends)
		tl.endsUnsorted = false
	}
	i, j := 0, 0
	for {
		var e edge
		switch {
		case i < len(tl.starts) && (j == len(tl.ends) || tl.starts[i].key < tl.ends[j]):
			e = tl.starts[i]
		case j < len(tl.ends):
			e = edge{key: tl.ends[j]}
		default:
			e.key = -1
		}
		if e.key < 0 || e.at() >= bound {
			break
		}
		if e.entry() {
			i++
		} else {
			j++
		}
		t := e.at()
		if tl.n > 0 {
			tl.area += float64(tl.n) * (t - tl.last).Seconds()
		}
		tl.last = t
		if e.entry() {
			if tl.n == 0 {
				tl.cur = Interval{Worker: tl.w, Kind: "busy", Start: t}
				tl.area = 0
				tl.models = tl.models[:0]
			}
			if m := models[e.model]; !slices.Contains(tl.models, m) {
				tl.models = append(tl.models, m)
			}
			tl.n++
		} else {
			tl.n--
		}
		if tl.n == 0 {
			tl.cur.End = t
			if d := (tl.cur.End - tl.cur.Start).Seconds(); d > 0 {
				tl.cur.MeanBatch = tl.area / d
			}
			tl.cur.Model = joinKeys(tl.models)
			tl.busy = append(tl.busy, tl.cur)
		}
	}
	tl.starts = tl.starts[:copy(tl.starts, tl.starts[i:])]
	tl.ends = tl.ends[:copy(tl.ends, tl.ends[j:])]
	if tl.n > 0 {
		bound = min(bound, tl.cur.Start)
	}
	// Loads and busy intervals by start, loads first among equal starts (a stable sort of
	// the loads followed by the busy intervals), idle time between them.
	nl, nb := 0, 0
	for {
		var iv Interval
		switch {
		case nl < len(tl.loads) && (nb == len(tl.busy) || tl.loads[nl].Start <= tl.busy[nb].Start):
			iv = tl.loads[nl]
		case nb < len(tl.busy):
			iv = tl.busy[nb]
		}
		if iv.Kind == "" || iv.Start >= bound {
			break
		}
		if iv.Kind == "load" {
			nl++
		} else {
			nb++
		}
		if iv.Start > tl.t {
			if err := emit(Interval{Worker: tl.w, Kind: "idle", Start: tl.t, End: iv.Start}); err != nil {
				return err
			}
		}
		if err := emit(iv); err != nil {
			return err
		}
		tl.t = max(tl.t, iv.End)
	}
	tl.loads = tl.loads[:copy(tl.loads, tl.loads[nl:])]
	tl.busy = tl.busy[:copy(tl.busy, tl.busy[nb:])]
	return nil
}

// finish hands on the rest of the timeline, up to end (the end of the run).
func (tl *timeline) finish(end time.Duration, models []string, emit func(Interval) error) error {
	if err := tl.advance(math.MaxInt64, models, emit); err != nil {
		return err
	}
	if tl.t < end {
		return emit(Interval{Worker: tl.w, Kind: "idle", Start: tl.t, End: end})
	}
	return nil
}

// joinKeys joins distinct names in sorted order with "+"; it sorts names in place.
func joinKeys(names []string) string {
	sort.Strings(names)
	return strings.Join(names, "+")
}

// LatencyStats summarises a sample of latencies in seconds, vLLM-benchmark style: mean,
// median, p90 and p99 (nearest rank), and the largest.
type LatencyStats struct {
	Mean, P50, P90, P99, Max float64
}

// NewLatencyStats summarises values (the zero value when there are none).
func NewLatencyStats(values []float64) LatencyStats {
	if len(values) == 0 {
		return LatencyStats{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[min(len(s)-1, max(0, i))]
	}
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return LatencyStats{Mean: sum / float64(len(s)), P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: s[len(s)-1]}
}

// SLO is a per-query service level objective: a query meets it when its end-to-end latency
// is at most E2E and its time to the final call's first token at most TTFT (a zero bound is
// not checked).
type SLO struct {
	E2E, TTFT time.Duration
}

// Set reports whether the SLO bounds anything.
func (o SLO) Set() bool { return o.E2E > 0 || o.TTFT > 0 }

// Met reports whether query q meets the SLO.
func (o SLO) Met(q QueryOutcome) bool {
	return (o.E2E <= 0 || q.Latency() <= o.E2E) && (o.TTFT <= 0 || q.TTFT() <= o.TTFT)
}

// Attainment is the share of the result's queries that meet the SLO, and Goodput the rate of
// such queries per second over the span from the first arrival to the last query's end
// (NaN without queries). A streamed Result answers under the SLO its run was given
// (Driver.Stream) whatever o says.
func (r *Result) Attainment(o SLO) (share, goodput float64) {
	if r.tally != nil {
		return r.tally.attainment()
	}
	if len(r.Queries) == 0 {
		return nan(), nan()
	}
	met := 0
	first, last := r.Queries[0].Arrival, time.Duration(0)
	for _, q := range r.Queries {
		if o.Met(q) {
			met++
		}
		first = min(first, q.Arrival)
		last = max(last, q.End)
	}
	share = float64(met) / float64(len(r.Queries))
	goodput = nan()
	if span := (last - first).Seconds(); span > 0 {
		goodput = float64(met) / span
	}
	return share, goodput
}
