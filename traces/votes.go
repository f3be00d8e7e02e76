package traces

// VotePattern classifies the k expert answers of a query by how far they agree. For k = 3 the
// three patterns are 3:0, 2:1 and 1:1:1.
type VotePattern int

const (
	// VoteUnanimous: all k experts gave the same (non-empty) answer.
	VoteUnanimous VotePattern = iota
	// VoteMajority: the top answer has a strict majority (more than k/2 votes) but not all k.
	VoteMajority
	// VoteSplit: no answer has a strict majority.
	VoteSplit
)

// VotePatterns lists the patterns in order, for tables.
var VotePatterns = [...]VotePattern{VoteUnanimous, VoteMajority, VoteSplit}

func (p VotePattern) String() string {
	switch p {
	case VoteUnanimous:
		return "unanimous"
	case VoteMajority:
		return "majority"
	default:
		return "split"
	}
}

// PatternOf classifies a query whose top answer has votes of its k votes.
func PatternOf(votes, k int) VotePattern {
	switch {
	case k > 0 && votes == k:
		return VoteUnanimous
	case 2*votes > k:
		return VoteMajority
	default:
		return VoteSplit
	}
}

// VoteShares is the share of queries in each vote pattern; the three shares sum to 1 for a
// non-empty workload.
type VoteShares struct {
	Unanimous, Majority, Split float64
}

// Of returns the share of one pattern.
func (v VoteShares) Of(p VotePattern) float64 {
	switch p {
	case VoteUnanimous:
		return v.Unanimous
	case VoteMajority:
		return v.Majority
	default:
		return v.Split
	}
}

// TopAnswer returns the most frequent non-empty answer and its number of votes. Ties are
// broken deterministically by taking the alphabetically first answer. Empty answers (none
// could be extracted) vote for nothing; when every answer is empty it returns ("", 0).
func TopAnswer(answers []string) (answer string, votes int) {
	for i, a := range answers {
		if a == "" {
			continue
		}
		n := 0
		for _, b := range answers[i:] {
			if b == a {
				n++
			}
		}
		if n > votes || (n == votes && a < answer) {
			answer, votes = a, n
		}
	}
	return answer, votes
}

// Answers returns the expert calls' answers in order.
func (q *Query) Answers() []string {
	out := make([]string, len(q.Experts))
	for i, c := range q.Experts {
		out[i] = c.Answer
	}
	return out
}

// MajorityAnswer is TopAnswer over the query's expert answers: the answer a skipped
// aggregator leaves as final (alphabetically first among tied answers).
func (q *Query) MajorityAnswer() (answer string, votes int) {
	return TopAnswer(q.Answers())
}

// Confidence is C(q) = max_a |{i : a_i = a}| / k over the non-empty expert answers (0 when the
// query has no experts).
func (q *Query) Confidence() float64 {
	if len(q.Experts) == 0 {
		return 0
	}
	_, votes := q.MajorityAnswer()
	return float64(votes) / float64(len(q.Experts))
}

// VotePattern classifies the query's expert answers.
func (q *Query) VotePattern() VotePattern {
	_, votes := q.MajorityAnswer()
	return PatternOf(votes, len(q.Experts))
}

// HasAggregator reports whether the query carries an aggregator call (a workload built
// without an aggregator model leaves Aggregator.Model empty).
func (q *Query) HasAggregator() bool { return q.Aggregator.Model != "" }

// answerLetter returns the i-th answer letter: 0 -> "A".
func answerLetter(i int) string { return string(rune('A' + i)) }
