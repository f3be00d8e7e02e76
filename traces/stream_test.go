package traces_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

// drain reads every query of a stream.
func drain(t *testing.T, s *traces.Stream) []traces.Query {
	t.Helper()
	var out []traces.Query
	for {
		q, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, *q)
	}
}

// counts counts a held workload's calls by layer and model.
func counts(wl *traces.Workload) traces.CallCounts {
	var c traces.CallCounts
	for _, q := range wl.Queries {
		for _, call := range q.Calls {
			for len(c) <= call.Layer {
				c = append(c, map[string]int{})
			}
			c[call.Layer][call.Model]++
		}
	}
	return c
}

// checkStream checks that a stream yields exactly the held workload, arrivals applied, and
// counts its calls as the workload holds them.
func checkStream(t *testing.T, wl *traces.Workload, a traces.Arrivals, seed uint64, s *traces.Stream) {
	t.Helper()
	require.NoError(t, a.Apply(wl, seed))
	require.Equal(t, len(wl.Queries), s.Len())
	c, err := s.Counts()
	require.NoError(t, err)
	require.Equal(t, counts(wl), c)
	require.Equal(t, wl.NumCalls(), c.Total())
	got := drain(t, s)
	require.Equal(t, wl.Queries, got)
}

// TestStreamMoAMatchesGenerate: a streamed MoA workload is query for query the generated
// one with its arrivals, under each arrival process and with a question list.
func TestStreamMoAMatchesGenerate(t *testing.T) {
	spec := paperSpec(t)
	spec.Queries = 300
	for _, a := range []traces.Arrivals{
		{},
		{Rate: 0.5},
		{Process: traces.ArrivalsGamma, Rate: 2, CV: 3},
		{Process: traces.ArrivalsTrace, Rate: 1, Gaps: []float64{0.5, 2, 0.1}},
	} {
		s, err := traces.StreamMoA(spec, 7, a)
		require.NoError(t, err)
		checkStream(t, generate(t, spec, 7), a, 7, s)
	}
	qs := make([]traces.Question, 40)
	for i := range qs {
		qs[i] = traces.Question{Dataset: "d", Category: []string{"math", "law", ""}[i%3], Index: i, Words: 10 + i, Gold: []string{"", "B"}[i%2]}
	}
	spec.Questions, spec.PromptTokens, spec.Skills, spec.Queries = qs, nil, nil, 70
	s, err := traces.StreamMoA(spec, 3, traces.Arrivals{Rate: 1})
	require.NoError(t, err)
	checkStream(t, generate(t, spec, 3), traces.Arrivals{Rate: 1}, 3, s)
	// Without an aggregator, one layer.
	spec.Aggregator = traces.AggregatorSpec{}
	s, err = traces.StreamMoA(spec, 3, traces.Arrivals{Rate: 1})
	require.NoError(t, err)
	checkStream(t, generate(t, spec, 3), traces.Arrivals{Rate: 1}, 3, s)
}

// TestStreamMoARefusesWholeWorkloadSpecs: a spec solved over every query does not stream.
func TestStreamMoARefusesWholeWorkloadSpecs(t *testing.T) {
	spec := paperSpec(t)
	spec.Votes.Unanimous = 0.3
	_, err := traces.StreamMoA(spec, 1, traces.Arrivals{Rate: 1})
	require.ErrorIs(t, err, traces.ErrNotStreamable)
	spec = paperSpec(t)
	kr := traces.DefaultKeywordRouting(100)
	spec.Keywords = &kr
	_, err = traces.StreamMoA(spec, 1, traces.Arrivals{Rate: 1})
	require.ErrorIs(t, err, traces.ErrNotStreamable)
}

// TestStreamGraphMatchesGenerate: a streamed graph workload (tool steps included) is query for
// query the generated one with its arrivals.
func TestStreamGraphMatchesGenerate(t *testing.T) {
	spec := dagSpec(t)
	for _, a := range []traces.Arrivals{{}, {Rate: 0.3}} {
		wl, err := traces.GenerateGraph(spec, 5)
		require.NoError(t, err)
		s, err := traces.StreamGraph(spec, 5, a)
		require.NoError(t, err)
		checkStream(t, wl, a, 5, s)
	}
}

// TestStreamArrivalLimit: a stream fails at the query that would arrive too late, as Apply
// does.
func TestStreamArrivalLimit(t *testing.T) {
	spec := paperSpec(t)
	spec.Queries = 3
	a := traces.Arrivals{Process: traces.ArrivalsTrace, Gaps: []float64{float64(traces.MaxArrival/time.Second) / 2}}
	s, err := traces.StreamMoA(spec, 1, a)
	require.NoError(t, err)
	wl := generate(t, spec, 1)
	want := a.Apply(wl, 1)
	require.Error(t, want)
	for {
		if _, err = s.Next(); err != nil {
			break
		}
	}
	require.EqualError(t, err, want.Error())
}

// dagSpec is an agent program: an answering call, a tool step, calls that read them, a
// synthesising final call, with lognormal lengths.
func dagSpec(t *testing.T) traces.GraphSpec {
	a := node("a", "A", 10)
	a.Answers, a.Accuracy, a.Output = true, 0.6, lognormal(t, 300, 2000, 4096)
	tool := traces.NodeSpec{Name: "search", Role: traces.RoleTool, Tool: traces.Uniform{Lo: 100, Hi: 3000}, Inputs: []int{0}}
	b := node("b", "B", 20)
	b.Inputs, b.Question = []int{1}, false
	a2 := node("a2", "A", 10)
	a2.Answers, a2.Accuracy, a2.Forward = true, 0.7, traces.Uniform{Lo: 1, Hi: 50}
	c := node("c", "C", 40)
	c.Inputs, c.Gate, c.Output = []int{0, 1, 3}, true, lognormal(t, 500, 3000, 8192)
	return traces.GraphSpec{Name: "g", Queries: 200, PromptTokens: traces.Uniform{Lo: 5, Hi: 500},
		Nodes: []traces.NodeSpec{a, tool, b, a2, c}, Synth: traces.SimpleSynthesizer(0.3, 0.9),
		Votes: traces.VoteSpec{Options: 5, ErrorCorrelation: 0.4, Difficulty: 1}}
}
