package policies

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

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
	Loads     []LoadRecord // in completion order
	Queries   []QueryOutcome
	// AlwaysAggregate is the accuracy the workload's aggregator answers give when every query
	// is aggregated (NaN when no query has a gold answer).
	AlwaysAggregate float64
}

func (d *Driver) result() *Result {
	r := &Result{Policy: d.policy.Name(), Rule: d.rule.Name(), Threshold: nan(), Workers: d.workers, Loads: d.loads}
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
	r.Calls = make([]CallRecord, 0, d.done)
	for i := range d.calls {
		cs := &d.calls[i]
		if cs.status == callDone || cs.status == callFailed || (cs.status == callCancelled && cs.ran) {
			r.Calls = append(r.Calls, d.callRecord(i))
		}
	}
	r.Queries = make([]QueryOutcome, 0, len(d.queries))
	var agg, gold int
	for qi := range d.queries {
		q := &d.workload.Queries[qi]
		r.Queries = append(r.Queries, d.outcome(qi))
		if q.Gold != "" {
			gold++
			if q.FinalAnswer() == q.Gold {
				agg++
			}
		}
	}
	r.AlwaysAggregate = ratio(agg, gold)
	return r
}

// finishedAt is when a finished call ended for the calls that read it (a skipped call: when it
// was decided; a cancelled one: when it was cancelled).
func (d *Driver) finishedAt(id int) time.Duration {
	cs := &d.calls[id]
	switch cs.status {
	case callSkipped:
		return cs.ready
	case callCancelled, callCancelling:
		return d.outcomes.cancelledAt[id]
	}
	return cs.timing.End
}

// outcome describes how query qi ended.
func (d *Driver) outcome(qi int) QueryOutcome {
	q := &d.workload.Queries[qi]
	qs := &d.queries[qi]
	o := QueryOutcome{SkippedCalls: qs.skipped, Final: qs.final, Gold: q.Gold, Arrival: q.Arrival, End: qs.end}
	last := -1
	var voters []string
	for i := range q.Calls {
		id := d.first[qi] + i
		if d.childAt[id+1] != d.childAt[id] {
			continue
		}
		cs := &d.calls[id]
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
	if len(voters) == 1 && d.calls[last].final {
		o.Skipped = d.calls[last].status == callSkipped
		o.Confidence = d.calls[last].confidence
	} else {
		o.Confidence = traces.Confidence(voters)
	}
	// The critical path: back from the last final call through the latest-finishing input.
	for id := last; id >= 0; {
		cs := &d.calls[id]
		if cs.status == callDone || cs.status == callFailed {
			if !cs.call.IsTool() {
				o.Queue += max(0, cs.timing.Started-cs.ready)
			}
		}
		next := -1
		for _, in := range cs.call.Inputs {
			p := d.first[qi] + in.From
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
}

// Summary computes the run's headline figures.
func (r *Result) Summary() Summary {
	s := Summary{Queries: len(r.Queries), ModelLoads: len(r.Loads)}
	for _, c := range r.Calls {
		s.E2E = max(s.E2E, c.Timing.End)
		switch c.Status {
		case "failed":
			s.FailedCalls++
		case "cancelled":
			s.CancelledCalls++
			continue
		}
		if c.Final {
			if !c.Call.IsTool() {
				s.AggregatorCalls++
			}
			continue
		}
		s.ExpertStage = max(s.ExpertStage, c.Timing.End)
		if !c.Call.IsTool() {
			s.ExpertCalls++
		}
	}
	for _, l := range r.Loads {
		s.E2E = max(s.E2E, l.End)
	}
	s.AggregatorStage = s.E2E - s.ExpertStage
	var right, gold int
	lat := make([]float64, 0, len(r.Queries))
	ttft := make([]float64, 0, len(r.Queries))
	queue := make([]float64, 0, len(r.Queries))
	for _, q := range r.Queries {
		if q.Skipped {
			s.AggregatorSkipped++
		}
		s.SkippedCalls += q.SkippedCalls
		lat = append(lat, q.Latency().Seconds())
		ttft = append(ttft, q.TTFT().Seconds())
		queue = append(queue, q.Queue.Seconds())
		if q.Gold != "" {
			gold++
			if q.Final == q.Gold {
				right++
			}
		}
	}
	s.Latency, s.TTFT, s.Queue = NewLatencyStats(lat), NewLatencyStats(ttft), NewLatencyStats(queue)
	if len(r.Queries) > 0 {
		first, last := r.Queries[0].Arrival, time.Duration(0)
		for _, q := range r.Queries {
			first, last = min(first, q.Arrival), max(last, q.End)
		}
		if span := (last - first).Seconds(); span > 0 {
			s.Throughput = float64(len(r.Queries)) / span
		}
	}
	s.Accuracy = ratio(right, gold)
	s.AccuracyDeltaPP = 100 * (s.Accuracy - r.AlwaysAggregate)
	if s.E2E > 0 {
		s.GPUBusyFrac = r.BusyTime().Seconds() / (float64(r.Workers) * s.E2E.Seconds())
	}
	return s
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
		slices.Sort(keys)
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
// scheduled) to its end.
func (r *Result) WorkerIntervals() []Interval {
	var end time.Duration
	per := make([][]int32, r.Workers) // indices into r.Calls
	for i := range r.Calls {
		c := &r.Calls[i]
		end = max(end, c.Timing.End)
		if c.Worker >= 0 {
			per[c.Worker] = append(per[c.Worker], int32(i))
		}
	}
	loads := make([][]LoadRecord, r.Workers)
	for _, l := range r.Loads {
		loads[l.Worker] = append(loads[l.Worker], l)
		end = max(end, l.End)
	}
	var out []Interval
	var edges []edge
	for w := 0; w < r.Workers; w++ {
		var spans []Interval
		for _, l := range loads[w] {
			spans = append(spans, Interval{Worker: WorkerID(w), Kind: "load", Model: l.Model, Start: l.Start, End: l.End})
		}
		spans, edges = r.busySpans(WorkerID(w), per[w], spans, edges)
		slices.SortStableFunc(spans, func(a, b Interval) int { return cmp.Compare(a.Start, b.Start) })
		var t time.Duration
		for _, sp := range spans {
			if sp.Start > t {
				out = append(out, Interval{Worker: WorkerID(w), Kind: "idle", Start: t, End: sp.Start})
			}
			out = append(out, sp)
			t = max(t, sp.End)
		}
		if t < end {
			out = append(out, Interval{Worker: WorkerID(w), Kind: "idle", Start: t, End: end})
		}
	}
	return out
}

// edge is a call entering or leaving service at a time: key is twice the time, plus one for
// an entry, so that sorting by key alone puts a time's exits before its entries.
type edge struct {
	key  int64
	call int32
}

func (e edge) at() time.Duration { return time.Duration(e.key >> 1) }
func (e edge) entry() bool       { return e.key&1 == 1 }

// busySpans appends to spans the busy intervals of worker w (merging the service spans of
// calls, the indices of r.Calls it served) with their mean batch. edges is scratch space.
func (r *Result) busySpans(w WorkerID, calls []int32, spans []Interval, edges []edge) ([]Interval, []edge) {
	edges = edges[:0]
	for _, i := range calls {
		c := &r.Calls[i]
		if c.Timing.End <= c.Timing.Started {
			continue
		}
		edges = append(edges, edge{int64(c.Timing.Started)<<1 | 1, i}, edge{int64(c.Timing.End) << 1, i})
	}
	// Ends before starts at the same instant. The order among edges of one instant and one
	// kind changes nothing below (they add no area, and a span opens at the first start and
	// closes at the last end), so an unstable sort is enough.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.key, b.key) })
	n := 0
	var cur Interval
	var area float64
	var last time.Duration
	var models []string // distinct models of the current span (a worker serves a few)
	for _, e := range edges {
		t := e.at()
		if n > 0 {
			area += float64(n) * (t - last).Seconds()
		}
		last = t
		if e.entry() {
			if n == 0 {
				cur = Interval{Worker: w, Kind: "busy", Start: t}
				area = 0
				models = models[:0]
			}
			if m := r.Calls[e.call].Call.Model; !slices.Contains(models, m) {
				models = append(models, m)
			}
			n++
		} else {
			n--
		}
		if n == 0 {
			cur.End = t
			if d := (cur.End - cur.Start).Seconds(); d > 0 {
				cur.MeanBatch = area / d
			}
			cur.Model = joinKeys(models)
			spans = append(spans, cur)
		}
	}
	return spans, edges
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
// (NaN without queries).
func (r *Result) Attainment(o SLO) (share, goodput float64) {
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
