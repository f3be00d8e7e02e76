package traces_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

// handBuilt makes a k = 3 workload from answers: per query the gold, three expert answers and
// the aggregator's answer ("-" = no aggregator call); expert i of every query is model m<i>
// except where models overrides it, and output tokens count up.
func handBuilt(rows [][5]string, models ...string) *traces.Workload {
	wl := &traces.Workload{Name: "hand"}
	tokens := 0
	for qi, r := range rows {
		q := traces.Query{ID: qi, Gold: r[0]}
		for i := range 3 {
			tokens += 10
			model := []string{"m0", "m1", "m2"}[i]
			if len(models) > 0 {
				model = models[(qi*3+i)%len(models)]
			}
			q.Calls = append(q.Calls, traces.Call{Role: traces.RoleExpert, Model: model, PromptTokens: 10, OutputTokens: tokens, Answer: r[1+i]})
		}
		if r[4] != "-" {
			q.Calls = append(q.Calls, traces.Call{Role: traces.RoleAggregator, Model: "agg", PromptTokens: 17, OutputTokens: 100 * (qi + 1), Answer: r[4],
				Inputs: []traces.Input{{From: 0, Tokens: 1}, {From: 1, Tokens: 1}, {From: 2, Tokens: 1}}, Gate: true})
		}
		wl.Queries = append(wl.Queries, q)
	}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

func TestTopAnswer(t *testing.T) {
	for _, tc := range []struct {
		answers []string
		want    string
		votes   int
		pattern traces.VotePattern
	}{
		{[]string{"A", "A", "A"}, "A", 3, traces.VoteUnanimous},
		{[]string{"B", "C", "B"}, "B", 2, traces.VoteMajority},
		{[]string{"C", "B", "A"}, "A", 1, traces.VoteSplit},
		{[]string{"D", "C", "D", "C"}, "C", 2, traces.VoteSplit},
		{[]string{"D", "C", "D", "C", "D"}, "D", 3, traces.VoteMajority},
		{[]string{"", "", ""}, "", 0, traces.VoteSplit},
		{[]string{"B", "", "B"}, "B", 2, traces.VoteMajority},
		{[]string{"", "C", ""}, "C", 1, traces.VoteSplit},
		{[]string{"E"}, "E", 1, traces.VoteUnanimous},
	} {
		got, votes := traces.TopAnswer(tc.answers)
		assert.Equal(t, tc.want, got, "%v", tc.answers)
		assert.Equal(t, tc.votes, votes, "%v", tc.answers)
		assert.Equal(t, tc.pattern, traces.PatternOf(votes, len(tc.answers)), "%v", tc.answers)
	}
	answers := []string{"A", "B", "A"}
	assert.InDelta(t, 2.0/3, traces.Confidence(answers), 1e-12)
	assert.Equal(t, traces.VoteMajority, traces.PatternOfAnswers(answers))
	assert.Zero(t, traces.Confidence(nil))
}

func TestNewPercentiles(t *testing.T) {
	values := make([]int, 100)
	for i := range values {
		values[99-i] = i + 1
	}
	assert.Equal(t, traces.Percentiles{P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}, traces.NewPercentiles(values))
	assert.Equal(t, 1, values[99], "the input is left unsorted")
	assert.Equal(t, traces.Percentiles{P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}, traces.NewPercentiles([]int{7}))
	assert.Equal(t, traces.Percentiles{}, traces.NewPercentiles(nil))
}

func TestStats(t *testing.T) {
	wl := handBuilt([][5]string{
		// gold, expert answers, aggregator
		{"A", "A", "A", "A", "A"}, // 3:0, right
		{"B", "A", "A", "B", "B"}, // 2:1, majority wrong, oracle right, aggregator rescues
		{"C", "C", "B", "A", "B"}, // 1:1:1, tie goes to A: wrong; oracle right; aggregator wrong
		{"D", "A", "B", "C", "-"}, // 1:1:1, nobody right, no aggregator call
		{"", "C", "C", "", "C"},   // 2:1 (one empty answer), unknown gold: not graded
		{"B", "B", "B", "B", "B"}, // 3:0, right
	})
	s := traces.Stats(wl)
	assert.Equal(t, 6, s.Queries)
	assert.Equal(t, 3, s.K)
	assert.Equal(t, 23, s.Calls)
	assert.Equal(t, 2, s.Layers)
	assert.Equal(t, 18, s.FirstLayerCalls)
	assert.Equal(t, 5, s.FinalCalls)
	assert.Equal(t, [3]int{2, 2, 2}, s.Patterns)
	assert.Equal(t, traces.VoteShares{Unanimous: 1.0 / 3, Majority: 1.0 / 3, Split: 1.0 / 3}, s.Shares)
	assert.Equal(t, 5, s.Graded)
	assert.InDelta(t, 2.0/5, s.MajorityAccuracy, 1e-12)
	assert.InDelta(t, 4.0/5, s.OracleAccuracy, 1e-12)
	assert.Equal(t, 4, s.FinalGraded)
	assert.InDelta(t, 3.0/4, s.FinalAccuracy, 1e-12)
	assert.Equal(t, [3]int{2, 2, 1}, s.FinalByPattern)
	// Aggregator outputs are 100*(query+1): unanimous queries 0 and 5, majority 1 and 4, split 2.
	assert.Equal(t, [3]float64{(100 + 600) / 2.0, (200 + 500) / 2.0, 300}, s.FinalOutputByPattern)

	require.Len(t, s.Models, 4)
	assert.Equal(t, "m0", s.Models[0].Model)
	assert.Equal(t, "expert", s.Models[0].Label)
	assert.Equal(t, 6, s.Models[0].Calls)
	assert.InDelta(t, 1.0/3, s.Models[0].Share, 1e-12)
	// m0's outputs are 10, 40, 70, ..., 160.
	assert.Equal(t, traces.Percentiles{P50: 70, P90: 160, P99: 160, Max: 160, Mean: 85}, s.Models[0].Output)
	assert.Equal(t, 1.0, s.SelectionRatio)
	agg := s.Models[3]
	assert.Equal(t, "aggregator L1", agg.Label)
	assert.Equal(t, 1, agg.Layer)
	assert.Equal(t, 5, agg.Calls)
}

func TestStatsSelectionRatio(t *testing.T) {
	rows := make([][5]string, 4)
	for i := range rows {
		rows[i] = [5]string{"A", "A", "A", "A", "-"}
	}
	// 12 calls cycling through six names weighted 6:3:1:1:1 (by repetition) - a 6:1 ratio.
	s := traces.Stats(handBuilt(rows, "big", "big", "mid", "big", "big", "mid", "big", "mid", "big", "small", "b", "c"))
	require.Len(t, s.Models, 5)
	assert.Equal(t, []string{"big", "mid", "b", "c", "small"}, []string{s.Models[0].Model, s.Models[1].Model, s.Models[2].Model, s.Models[3].Model, s.Models[4].Model})
	assert.Equal(t, 6.0, s.SelectionRatio)
	assert.Zero(t, s.FinalCalls)
	assert.Zero(t, s.FinalGraded)
}

func TestSummaryWrite(t *testing.T) {
	wl := handBuilt([][5]string{
		{"A", "A", "A", "A", "A"},
		{"B", "A", "A", "B", "B"},
		{"C", "C", "B", "A", "B"},
	})
	var b bytes.Buffer
	require.NoError(t, traces.Stats(wl).Write(&b))
	out := b.String()
	for _, want := range []string{
		`workload "hand": 3 queries, 12 calls (0 tool steps), 2 layers; 9 first-layer calls, 3 final calls`,
		"role           model  calls  share   p50  p90  p99  max  mean",
		"expert         m0     3      33.3%   40   70   70   70   40",
		"aggregator L1  agg    3      100.0%  200  300  300  300  200",
		"first-layer selection ratio (max/min calls): 1.0",
		"unanimous     3:0    1        33.3%  1            100",
		"split         1:1:1  1        33.3%  1            300",
		"majority vote (ties go to the alphabetically first answer)  33.3%",
		"oracle (any voter right)                                    100.0%",
		"final call (3 graded)                                       66.7%",
	} {
		assert.Contains(t, out, want)
	}
	if t.Failed() {
		t.Log("\n" + out)
	}
}

// The summary of a generated workload agrees with its spec.
func TestStatsOfGeneratedWorkload(t *testing.T) {
	spec := paperSpec(t)
	s := traces.Stats(generate(t, spec, 1))
	assert.Equal(t, spec.Queries*spec.K, s.FirstLayerCalls)
	assert.Equal(t, spec.Queries, s.FinalCalls)
	assert.Equal(t, spec.Queries, s.Graded)
	assert.GreaterOrEqual(t, s.OracleAccuracy, s.MajorityAccuracy)
	assert.Less(t, s.FinalOutputByPattern[traces.VoteUnanimous], s.FinalOutputByPattern[traces.VoteSplit],
		"agreement shortens the aggregator's output")
	var b bytes.Buffer
	require.NoError(t, s.Write(&b))
	t.Log("\n" + b.String())
}

// TestTopAnswerByLetterMatchesPairwise checks the table count of one-byte answers against
// the pairwise count on random votes: letters, empty answers, and longer answers that make it
// fall back.
func TestTopAnswerByLetterMatchesPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	pool := []string{"", "A", "B", "C", "D", "E", "a", "\x00", "\xff", "AB", "A ", "10"}
	for trial := range 20000 {
		k := rng.IntN(12)
		if trial%50 == 0 {
			k = 200 + rng.IntN(100) // past what the table counts
		}
		answers := make([]string, k)
		letters := 1 + rng.IntN(9) // how many of the pool's first entries to draw from
		for i := range answers {
			answers[i] = pool[rng.IntN(letters)]
			if rng.IntN(20) == 0 {
				answers[i] = pool[rng.IntN(len(pool))]
			}
		}
		wantA, wantV := traces.PairwiseTopAnswer(answers)
		gotA, gotV := traces.TopAnswer(answers)
		require.Equal(t, wantA, gotA, "%q", answers)
		require.Equal(t, wantV, gotV, "%q", answers)
	}
}
