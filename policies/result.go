package policies

import (
	"math"
	"sort"
	"time"

	"github.com/mosaic-sched/mosaic/traces"
)

// LoadRecord is one model load on a worker.
type LoadRecord struct {
	Worker     WorkerID
	Model      string
	Start, End time.Duration
}

// CallRecord is one call that ran.
type CallRecord struct {
	Call   *traces.Call
	Worker WorkerID
	Ready  time.Duration
	Timing CallTiming
	// Status is "done" or "failed"; Err says why a call failed.
	Status string
	Err    string
}

// QueryOutcome is how a query ended.
type QueryOutcome struct {
	Skipped    bool
	Confidence float64
	Final      string
	Gold       string
}

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
	if cs, ok := d.rule.(ConfidenceSkip); ok {
		r.Threshold = cs.Threshold
		if cs.Threshold > 1 {
			r.Threshold = math.Inf(1)
		}
	}
	for _, cs := range d.calls {
		if cs.status != callDone && cs.status != callFailed {
			continue
		}
		st := "done"
		if cs.status == callFailed {
			st = "failed"
		}
		r.Calls = append(r.Calls, CallRecord{Call: cs.call, Worker: cs.worker, Ready: cs.ready, Timing: cs.timing, Status: st, Err: cs.err})
	}
	var agg, gold int
	for qi, qs := range d.queries {
		q := &d.workload.Queries[qi]
		r.Queries = append(r.Queries, QueryOutcome{Skipped: qs.decision.Skip, Confidence: qs.decision.Confidence, Final: qs.final, Gold: q.Gold})
		if q.Gold != "" {
			gold++
			if q.Aggregator.Answer == q.Gold {
				agg++
			}
		}
	}
	r.AlwaysAggregate = ratio(agg, gold)
	return r
}

func ratio(a, b int) float64 {
	if b == 0 {
		return nan()
	}
	return float64(a) / float64(b)
}

// Summary is the headline figures of a run.
type Summary struct {
	Queries           int
	ExpertCalls       int
	AggregatorCalls   int // aggregator calls that ran
	AggregatorSkipped int
	FailedCalls       int
	// ExpertStage is when the last expert call finished; AggregatorStage the time from then
	// to the end; E2E when the last call finished.
	ExpertStage, AggregatorStage, E2E time.Duration
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
		if c.Call.Stage == traces.StageExpert {
			s.ExpertCalls++
			s.ExpertStage = max(s.ExpertStage, c.Timing.End)
		} else {
			s.AggregatorCalls++
		}
		if c.Status == "failed" {
			s.FailedCalls++
		}
		s.E2E = max(s.E2E, c.Timing.End)
	}
	for _, l := range r.Loads {
		s.E2E = max(s.E2E, l.End)
	}
	s.AggregatorStage = s.E2E - s.ExpertStage
	var right, gold int
	for _, q := range r.Queries {
		if q.Skipped {
			s.AggregatorSkipped++
		}
		if q.Gold != "" {
			gold++
			if q.Final == q.Gold {
				right++
			}
		}
	}
	s.Accuracy = ratio(right, gold)
	s.AccuracyDeltaPP = 100 * (s.Accuracy - r.AlwaysAggregate)
	var busy time.Duration
	for _, iv := range r.WorkerIntervals() {
		if iv.Kind == "busy" {
			busy += iv.End - iv.Start
		}
	}
	if s.E2E > 0 {
		s.GPUBusyFrac = busy.Seconds() / (float64(r.Workers) * s.E2E.Seconds())
	}
	return s
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
	per := make([][]CallRecord, r.Workers)
	for _, c := range r.Calls {
		per[c.Worker] = append(per[c.Worker], c)
		end = max(end, c.Timing.End)
	}
	loads := make([][]LoadRecord, r.Workers)
	for _, l := range r.Loads {
		loads[l.Worker] = append(loads[l.Worker], l)
		end = max(end, l.End)
	}
	var out []Interval
	for w := 0; w < r.Workers; w++ {
		var spans []Interval
		for _, l := range loads[w] {
			spans = append(spans, Interval{Worker: WorkerID(w), Kind: "load", Model: l.Model, Start: l.Start, End: l.End})
		}
		spans = append(spans, busySpans(WorkerID(w), per[w])...)
		sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
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

// busySpans merges the service spans of calls into busy intervals with their mean batch.
func busySpans(w WorkerID, calls []CallRecord) []Interval {
	type edge struct {
		t     time.Duration
		delta int
		model string
	}
	var edges []edge
	for _, c := range calls {
		if c.Timing.End <= c.Timing.Started {
			continue
		}
		edges = append(edges, edge{c.Timing.Started, +1, c.Call.Model}, edge{c.Timing.End, -1, c.Call.Model})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta // ends before starts at the same instant
	})
	var out []Interval
	n := 0
	var cur Interval
	var area float64
	var last time.Duration
	models := map[string]bool{}
	for _, e := range edges {
		if n > 0 {
			area += float64(n) * (e.t - last).Seconds()
		}
		last = e.t
		if n == 0 && e.delta > 0 {
			cur = Interval{Worker: w, Kind: "busy", Start: e.t}
			area = 0
			clear(models)
		}
		if e.delta > 0 {
			models[e.model] = true
		}
		n += e.delta
		if n == 0 {
			cur.End = e.t
			if d := (cur.End - cur.Start).Seconds(); d > 0 {
				cur.MeanBatch = area / d
			}
			cur.Model = joinKeys(models)
			out = append(out, cur)
		}
	}
	return out
}

func joinKeys(m map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += "+"
		}
		s += k
	}
	return s
}
