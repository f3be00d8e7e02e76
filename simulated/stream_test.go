package simulated_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// heldSource streams a held workload a query at a time, as a generator's stream would.
type heldSource struct {
	wl   *traces.Workload
	next int
}

func (s *heldSource) Len() int { return len(s.wl.Queries) }

func (s *heldSource) Counts() (traces.CallCounts, error) {
	var c traces.CallCounts
	for _, q := range s.wl.Queries {
		for _, call := range q.Calls {
			for len(c) <= call.Layer {
				c = append(c, map[string]int{})
			}
			c[call.Layer][call.Model]++
		}
	}
	return c, nil
}

func (s *heldSource) Next() (*traces.Query, error) {
	if s.next == len(s.wl.Queries) {
		return nil, io.EOF
	}
	s.next++
	return &s.wl.Queries[s.next-1], nil
}

// collector keeps what a streamed run hands on.
type collector struct {
	calls     []policies.CallRecord
	queries   []policies.QueryOutcome
	intervals []policies.Interval
	// window is the most queries in the Driver at once, as far as the records show: the
	// calls still to come of queries handed on.
	ids []int
}

func (c *collector) Query(q *traces.Query, o policies.QueryOutcome, calls []policies.CallRecord) error {
	for _, r := range calls {
		cp := *r.Call // the Driver's query may go once handed on
		r.Call = &cp
		c.calls = append(c.calls, r)
	}
	c.queries = append(c.queries, o)
	c.ids = append(c.ids, q.ID)
	return nil
}

func (c *collector) Interval(iv policies.Interval) error {
	c.intervals = append(c.intervals, iv)
	return nil
}

// streamCase is a workload and a policy run held and streamed.
type streamCase struct {
	name   string
	wl     func() *traces.Workload
	policy func() policies.Policy
	rule   policies.Rule
	exit   *policies.EarlyExit
	// overlap needs a gated graph.
	overlap bool
	models  int
	workers int
}

// runBoth runs a case held and streamed and returns both results and what the stream handed
// on.
func runBoth(t *testing.T, tc streamCase, slo policies.SLO) (*policies.Result, *policies.Result, *collector) {
	t.Helper()
	infos, setups := setup(t, tc.models)
	var res [2]*policies.Result
	col := &collector{}
	for i := range res {
		cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(tc.workers, setups), UnloadTime: time.Second})
		require.NoError(t, err)
		var d *policies.Driver
		if i == 0 {
			d, err = policies.NewDriver(cl, tc.policy(), tc.rule, tc.wl(), infos, tc.workers)
		} else {
			d, err = policies.NewStreamDriver(cl, tc.policy(), tc.rule, &heldSource{wl: tc.wl()}, infos, tc.workers)
			d.Stream(col, slo)
		}
		require.NoError(t, err)
		d.SetEarlyExit(tc.exit)
		d.SetOverlap(tc.overlap)
		res[i], err = d.Run(context.Background())
		require.NoError(t, err)
	}
	return res[0], res[1], col
}

// A streamed run hands on, query by query, exactly the records, outcomes and worker intervals
// the held run keeps, and summarises them alike: online MoA under the online policy and under
// round-robin's barrier (whose window holds every query), a tree with tool steps and gates
// below the final layer under the mosaic policy, and, with early exit and overlap (whose
// intervals wait for the end of the run), under the online policy.
func TestStreamMatchesHeld(t *testing.T) {
	out := func(q, i int) int { return 100 + (q*37+i*101)%900 }
	moa := func() *traces.Workload {
		wl := workload(300, 3, 4, out, 3)
		for i := range wl.Queries {
			wl.Queries[i].Arrival = time.Duration(i) * 700 * time.Millisecond
		}
		return wl
	}
	tree := func() *traces.Workload { return treeWorkload(t, 80, 1500*time.Millisecond) }
	skip := policies.ConfidenceSkip{Threshold: 1}
	for _, tc := range []streamCase{
		{name: "online moa", wl: moa, policy: func() policies.Policy { return online.New(online.Options{TimeLimit: time.Second}) }, rule: skip, models: 4, workers: 3},
		{name: "round-robin moa", wl: moa, policy: func() policies.Policy { return roundrobin.New() }, rule: skip, models: 4, workers: 3},
		{name: "mosaic tree", wl: tree, policy: func() policies.Policy { return placement.New(placement.Options{TimeLimit: time.Second}) }, rule: policies.ConfidenceSkip{Threshold: 2.0 / 3}, models: 4, workers: 3},
		{name: "online tree, exit and overlap", wl: tree, policy: func() policies.Policy { return online.New(online.Options{TimeLimit: time.Second}) },
			rule: skip, exit: &policies.EarlyExit{Agreement: 1, MinFinished: 2}, overlap: true, models: 4, workers: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slo := policies.SLO{E2E: 90 * time.Second}
			held, streamed, col := runBoth(t, tc, slo)
			require.True(t, streamed.Streamed())
			require.Empty(t, streamed.Calls)
			require.Empty(t, streamed.Queries)
			require.Equal(t, held.Calls, col.calls)
			require.Equal(t, held.Queries, col.queries)
			require.Equal(t, held.WorkerIntervals(), byWorker(col.intervals), "each worker's in order")
			// The loads went to the sink as the workers' "load" intervals (above); the summary
			// counts them.
			require.NotEmpty(t, held.Loads)
			require.Empty(t, streamed.Loads)
			require.Equal(t, held.Summary(), streamed.Summary())
			require.Equal(t, held.StageEnds(), streamed.StageEnds())
			hs, hg := held.Attainment(slo)
			ss, sg := streamed.Attainment(slo)
			require.Equal(t, fmt.Sprint(hs, hg), fmt.Sprint(ss, sg))
			require.Equal(t, fmt.Sprint(held.AlwaysAggregate), fmt.Sprint(streamed.AlwaysAggregate))
			for i, id := range col.ids {
				require.Equal(t, i, id, "queries are handed on in order")
			}
		})
	}
}

// byWorker orders intervals by worker, keeping each worker's in the order given.
func byWorker(ivs []policies.Interval) []policies.Interval {
	return slices.SortedStableFunc(slices.Values(ivs), func(a, b policies.Interval) int { return cmp.Compare(a.Worker, b.Worker) })
}

// streamSteady runs queries MoA queries, one a second, under the online policy on 3 workers,
// their records streamed to sink.
func streamSteady(t *testing.T, queries int, sink policies.Sink) (*policies.Result, error) {
	t.Helper()
	wl := workload(queries, 3, 4, func(q, i int) int { return 200 }, 3)
	for i := range wl.Queries {
		wl.Queries[i].Arrival = time.Duration(i) * time.Second
	}
	infos, setups := setup(t, 4)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(3, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewStreamDriver(cl, online.New(online.Options{TimeLimit: time.Second}), policies.NeverSkip(), &heldSource{wl: wl}, infos, 3)
	require.NoError(t, err)
	d.Stream(sink, policies.SLO{})
	return d.Run(context.Background())
}

// A streamed run's worker intervals go out as they become final, not at the end: the online
// policy's run hands most of them on among its queries' records, before its last query's.
func TestStreamIntervalsGoOutEarly(t *testing.T) {
	const queries = 4000
	sink := countingSink{last: queries}
	res, err := streamSteady(t, queries, &sink)
	require.NoError(t, err)
	require.Equal(t, queries, res.Summary().Queries)
	require.Equal(t, queries, sink.queries)
	t.Logf("%d of %d intervals before the last query's records", sink.early, sink.intervals)
	require.Greater(t, sink.early, sink.intervals/2, "of %d intervals, %d handed on before the last query's records", sink.intervals, sink.early)
}

// A streamed run whose sink fails stops with the sink's error, and the sink hears nothing
// after it, though the run went on meanwhile (the sink is slow to fail).
func TestStreamSinkErrorStopsRun(t *testing.T) {
	sink := &failingSink{failAt: 500}
	_, err := streamSteady(t, 8000, sink)
	require.ErrorContains(t, err, "disk full")
	require.Equal(t, 500, sink.queries, "no query handed on after the failure")
	require.Equal(t, sink.intervals, sink.intervalsAtFailure, "no interval handed on after the failure")
}

// failingSink fails on the failAt-th query, a tenth of a second after it is handed on.
type failingSink struct{ failAt, queries, intervals, intervalsAtFailure int }

func (s *failingSink) Query(*traces.Query, policies.QueryOutcome, []policies.CallRecord) error {
	s.queries++
	if s.queries == s.failAt {
		s.intervalsAtFailure = s.intervals
		time.Sleep(100 * time.Millisecond)
		return errors.New("disk full")
	}
	return nil
}

func (s *failingSink) Interval(policies.Interval) error {
	s.intervals++
	return nil
}

// countingSink counts the records handed on, and the intervals handed on before the records
// of the last query (the last-th).
type countingSink struct{ last, queries, intervals, early int }

func (s *countingSink) Query(q *traces.Query, _ policies.QueryOutcome, _ []policies.CallRecord) error {
	s.queries++
	return nil
}

func (s *countingSink) Interval(iv policies.Interval) error {
	s.intervals++
	if s.queries < s.last {
		s.early++
	}
	return nil
}

// A streamed Driver refuses a source that is not what it declared: queries out of order of
// arrival, or fewer than declared.
func TestStreamSourceChecks(t *testing.T) {
	infos, setups := setup(t, 4)
	for _, tc := range []struct {
		name string
		edit func(wl *traces.Workload) *traces.Workload
		want string
	}{
		{"arrivals out of order", func(wl *traces.Workload) *traces.Workload {
			wl.Queries[5].Arrival = 0
			return wl
		}, "query 5 arrives at 0s, before the query ahead of it"},
		{"short", func(wl *traces.Workload) *traces.Workload { return wl }, "the workload ended after 20 of its 21 queries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wl := workload(20, 3, 4, func(q, i int) int { return 100 }, 0)
			for i := range wl.Queries {
				wl.Queries[i].Arrival = time.Duration(i+1) * time.Second
			}
			src := &heldSource{wl: tc.edit(wl)}
			var s policies.QuerySource = src
			if tc.name == "short" {
				s = longer{src}
			}
			cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(2, setups), UnloadTime: time.Second})
			require.NoError(t, err)
			d, err := policies.NewStreamDriver(cl, online.New(online.Options{TimeLimit: time.Second}), policies.NeverSkip(), s, infos, 2)
			require.NoError(t, err)
			d.Stream(&collector{}, policies.SLO{})
			_, err = d.Run(context.Background())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// longer declares one query more than its source has.
type longer struct{ *heldSource }

func (l longer) Len() int { return l.heldSource.Len() + 1 }

// A streamed run whose policy cancels a submitted call after worker intervals went out
// fails: the cancelled call may report it started at 0, before intervals already final.
func TestStreamCancelAfterIntervalsFails(t *testing.T) {
	infos, setups := setup(t, 1)
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(1, setups), UnloadTime: time.Second})
	require.NoError(t, err)
	d, err := policies.NewStreamDriver(cl, &canceller{victim: 1, queued: 2}, policies.NeverSkip(), &heldSource{wl: cancelWorkload()}, infos, 1)
	require.NoError(t, err)
	d.Stream(&collector{}, policies.SLO{})
	_, err = d.Run(context.Background())
	require.ErrorContains(t, err, "worker intervals already went out")
}
