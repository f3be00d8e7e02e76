package traces

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
)

// Percentiles summarises a sample of token counts. Percentiles are nearest-rank: Pq is the
// smallest value with at least q% of the sample at or below it.
type Percentiles struct {
	P50, P90, P99, Max int
	Mean               float64
}

// NewPercentiles summarises values (the zero Percentiles when there are none). values is not
// modified.
func NewPercentiles(values []int) Percentiles {
	if len(values) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := func(q float64) int {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[min(len(s)-1, max(0, i))]
	}
	sum := 0.0
	for _, v := range s {
		sum += float64(v)
	}
	return Percentiles{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// ModelStats is what one model did in one stage of a workload.
type ModelStats struct {
	Model string
	Stage Stage
	// Calls is the model's number of calls in the stage, Share their share of the stage's calls.
	Calls int
	Share float64
	// Output summarises the calls' output tokens.
	Output Percentiles
}

// Summary describes a workload: demand per model, output lengths, how often the experts agree
// and how accurate the answers are.
type Summary struct {
	Name    string
	Queries int
	// K is the number of experts per query (that of the first query).
	K                            int
	ExpertCalls, AggregatorCalls int
	// Experts are the expert models by calls (most first, then by name); Aggregators the
	// aggregator models likewise.
	Experts, Aggregators []ModelStats
	// SelectionRatio is the max/min ratio of calls among the expert models that appear.
	SelectionRatio float64
	// Patterns counts the queries per vote pattern (indexed by VotePattern); Shares are the
	// same as shares of Queries.
	Patterns [3]int
	Shares   VoteShares
	// Graded is the number of queries with a known gold answer; the accuracies are over them.
	Graded int
	// MajorityAccuracy is the share of graded queries whose top expert answer is the gold
	// one, ties between answers broken alphabetically (see TopAnswer).
	MajorityAccuracy float64
	// OracleAccuracy is the share of graded queries where at least one expert is right.
	OracleAccuracy float64
	// AggregatorGraded is the number of graded queries with an aggregator call, and
	// AggregatorAccuracy the share of them the aggregator answers correctly.
	AggregatorGraded   int
	AggregatorAccuracy float64
	// AggregatorByPattern counts the aggregator calls per vote pattern of their query, and
	// AggregatorOutputByPattern is their mean output tokens (0 where there are none).
	AggregatorByPattern       [3]int
	AggregatorOutputByPattern [3]float64
}

// Stats summarises a workload.
func Stats(wl *Workload) Summary {
	s := Summary{Name: wl.Name, Queries: len(wl.Queries), K: wl.ExpertsPerQuery()}
	expertOut, aggOut := map[string][]int{}, map[string][]int{}
	var aggTokens [3]float64
	majorityRight, oracleRight, aggRight := 0, 0, 0
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		for _, c := range q.Experts {
			expertOut[c.Model] = append(expertOut[c.Model], c.OutputTokens)
			s.ExpertCalls++
		}
		top, votes := q.MajorityAnswer()
		pattern := PatternOf(votes, len(q.Experts))
		s.Patterns[pattern]++
		if q.HasAggregator() {
			a := q.Aggregator
			aggOut[a.Model] = append(aggOut[a.Model], a.OutputTokens)
			s.AggregatorCalls++
			s.AggregatorByPattern[pattern]++
			aggTokens[pattern] += float64(a.OutputTokens)
		}
		if q.Gold == "" {
			continue
		}
		s.Graded++
		if top == q.Gold {
			majorityRight++
		}
		if slices.ContainsFunc(q.Experts, func(c Call) bool { return c.Answer == q.Gold }) {
			oracleRight++
		}
		if q.HasAggregator() {
			s.AggregatorGraded++
			if q.Aggregator.Answer == q.Gold {
				aggRight++
			}
		}
	}
	s.Experts = modelStats(expertOut, StageExpert, s.ExpertCalls)
	s.Aggregators = modelStats(aggOut, StageAggregator, s.AggregatorCalls)
	if len(s.Experts) > 0 {
		s.SelectionRatio = float64(s.Experts[0].Calls) / float64(s.Experts[len(s.Experts)-1].Calls)
	}
	if s.Queries > 0 {
		n := float64(s.Queries)
		s.Shares = VoteShares{Unanimous: float64(s.Patterns[VoteUnanimous]) / n, Majority: float64(s.Patterns[VoteMajority]) / n, Split: float64(s.Patterns[VoteSplit]) / n}
	}
	if s.Graded > 0 {
		s.MajorityAccuracy = float64(majorityRight) / float64(s.Graded)
		s.OracleAccuracy = float64(oracleRight) / float64(s.Graded)
	}
	if s.AggregatorGraded > 0 {
		s.AggregatorAccuracy = float64(aggRight) / float64(s.AggregatorGraded)
	}
	for p, n := range s.AggregatorByPattern {
		if n > 0 {
			s.AggregatorOutputByPattern[p] = aggTokens[p] / float64(n)
		}
	}
	return s
}

func modelStats(outputs map[string][]int, stage Stage, total int) []ModelStats {
	out := make([]ModelStats, 0, len(outputs))
	for model, lengths := range outputs {
		out = append(out, ModelStats{Model: model, Stage: stage, Calls: len(lengths), Share: float64(len(lengths)) / float64(total), Output: NewPercentiles(lengths)})
	}
	slices.SortFunc(out, func(a, b ModelStats) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// patternLabel spells a vote pattern as vote counts for small k ("3:0", "2:1", "1:1:1").
func patternLabel(p VotePattern, k int) string {
	switch {
	case k == 3:
		return [...]string{"3:0", "2:1", "1:1:1"}[p]
	case k == 2:
		return [...]string{"2:0", "-", "1:1"}[p]
	case k == 1:
		return [...]string{"1", "-", "-"}[p]
	case p == VoteUnanimous:
		return fmt.Sprintf("%d:0", k)
	case p == VoteMajority:
		return fmt.Sprintf("top > %d/2", k)
	}
	return fmt.Sprintf("top <= %d/2", k)
}

// Write prints the summary as aligned text tables.
func (s Summary) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("workload %q: %d queries, k = %d, %d expert calls, %d aggregator calls\n", s.Name, s.Queries, s.K, s.ExpertCalls, s.AggregatorCalls)
	models := func(title string, ms []ModelStats) {
		if len(ms) == 0 {
			return
		}
		p("%s\tcalls\tshare\tp50\tp90\tp99\tmax\tmean\n", title)
		for _, m := range ms {
			p("%s\t%d\t%.1f%%\t%d\t%d\t%d\t%d\t%.0f\n", m.Model, m.Calls, 100*m.Share, m.Output.P50, m.Output.P90, m.Output.P99, m.Output.Max, m.Output.Mean)
		}
	}
	models("expert model", s.Experts)
	models("aggregator model", s.Aggregators)
	if len(s.Experts) > 0 {
		p("expert selection ratio (max/min calls): %.1f\n", s.SelectionRatio)
	}
	p("vote pattern\tvotes\tqueries\tshare\taggregator calls\tmean aggregator output\n")
	for _, pat := range VotePatterns {
		mean := "-"
		if s.AggregatorByPattern[pat] > 0 {
			mean = fmt.Sprintf("%.0f", s.AggregatorOutputByPattern[pat])
		}
		p("%s\t%s\t%d\t%.1f%%\t%d\t%s\n", pat, patternLabel(pat, s.K), s.Patterns[pat], 100*s.Shares.Of(pat), s.AggregatorByPattern[pat], mean)
	}
	p("accuracy over %d queries with a known gold answer\n", s.Graded)
	p("majority vote (ties go to the alphabetically first answer)\t%.1f%%\n", 100*s.MajorityAccuracy)
	p("oracle (any expert right)\t%.1f%%\n", 100*s.OracleAccuracy)
	if s.AggregatorGraded > 0 {
		p("aggregator (%d graded)\t%.1f%%\n", s.AggregatorGraded, 100*s.AggregatorAccuracy)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ew.err
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

// Write implements io.Writer.
func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}
