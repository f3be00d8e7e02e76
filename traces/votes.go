package traces

import (
	"fmt"
	"math"
	"slices"
)

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
	Unanimous float64 `json:"unanimous"`
	Majority  float64 `json:"majority"`
	Split     float64 `json:"split"`
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
	if len(answers) <= maxLetterVotes {
		if answer, votes, ok := topLetter(answers); ok {
			return answer, votes
		}
	}
	return topAnswer(answers)
}

// maxLetterVotes is the most answers topLetter counts (its counters are bytes).
const maxLetterVotes = 255

// topLetter is TopAnswer for answers of at most one byte each (a multiple-choice letter, or
// none), counted in a table: the vote of every aggregating call goes through TopAnswer several
// times, and comparing strings pair by pair, branching on each, cost more. ok is false, with
// nothing counted, when an answer is longer. For one-byte strings the byte order is the
// strings' order, so the tie goes to the same answer.
func topLetter(answers []string) (answer string, votes int, ok bool) {
	var counts [256]uint8
	for _, a := range answers {
		switch len(a) {
		case 0:
		case 1:
			counts[a[0]]++
		default:
			return "", 0, false
		}
	}
	for _, a := range answers {
		if len(a) == 0 {
			continue
		}
		if n := int(counts[a[0]]); n > votes || (n == votes && a[0] < answer[0]) {
			answer, votes = a, n
		}
	}
	return answer, votes, true
}

// topAnswer is TopAnswer by comparing the answers pair by pair: a value's first occurrence
// counts all its votes, and a later one fewer, so it neither beats nor ties the best so far.
func topAnswer(answers []string) (answer string, votes int) {
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

// Confidence is C = max_a |{i : a_i = a}| / k over k answers, empty answers voting for
// nothing (0 when there are none).
func Confidence(answers []string) float64 {
	if len(answers) == 0 {
		return 0
	}
	_, votes := TopAnswer(answers)
	return float64(votes) / float64(len(answers))
}

// PatternOfAnswers classifies k answers by how far they agree.
func PatternOfAnswers(answers []string) VotePattern {
	_, votes := TopAnswer(answers)
	return PatternOf(votes, len(answers))
}

// Synthesizer is how an aggregating call answers, by the pattern of the answers it reads (its
// votes): a right unanimous vote is broken (the aggregator answers a wrong letter) with
// probability BreakUnanimous and a wrong one overturned to the right answer with probability
// RescueUnanimous; likewise a strict majority with BreakMajority and RescueMajority (a wrong
// vote not overturned stands). With no strict majority the aggregator works the question out
// itself: right with probability SplitAccuracy, shifted on the logit scale by the query's
// difficulty when the Synthesis carries one (else one of the wrong answers it read).
type Synthesizer struct {
	BreakUnanimous  float64 `json:"break_unanimous"`
	RescueUnanimous float64 `json:"rescue_unanimous"`
	BreakMajority   float64 `json:"break_majority"`
	RescueMajority  float64 `json:"rescue_majority"`
	SplitAccuracy   float64 `json:"split_accuracy"`
}

// SimpleSynthesizer is the answer model of two numbers: it keeps a right strict majority with
// probability keep and answers right with probability accuracy otherwise (a wrong or no
// strict majority).
func SimpleSynthesizer(accuracy, keep float64) Synthesizer {
	return Synthesizer{BreakUnanimous: 1 - keep, BreakMajority: 1 - keep, RescueUnanimous: accuracy, RescueMajority: accuracy, SplitAccuracy: accuracy}
}

// Validate reports the first probability outside [0, 1].
func (s Synthesizer) Validate() error {
	for _, v := range []struct {
		name string
		x    float64
	}{{"break_unanimous", s.BreakUnanimous}, {"rescue_unanimous", s.RescueUnanimous}, {"break_majority", s.BreakMajority},
		{"rescue_majority", s.RescueMajority}, {"split_accuracy", s.SplitAccuracy}} {
		if !(v.x >= 0 && v.x <= 1) {
			return fmt.Errorf("%s must be in [0, 1], got %g", v.name, v.x)
		}
	}
	return nil
}

// Synthesis derives one aggregating call's answer from the answers its inputs give at run
// time, with the call's own random draws, so that a gate that skips an upstream call (whose
// answer then becomes its own inputs' majority) changes what the call answers exactly as the
// answer model says. A workload read from a file has fixed answers and no Synthesis.
type Synthesis struct {
	By *Synthesizer
	// Gold is the query's gold answer ("": unknown, the call follows the top answer); Wrong
	// the answer letters without it.
	Gold  string
	Wrong []string
	// U are the call's two uniform draws: the first decides right or wrong, the second which
	// wrong answer.
	U [2]float64
	// Shift is the query's difficulty on the logit scale (the vote model's difficulty times
	// its deviate), applied to SplitAccuracy.
	Shift float64
}

// Answer returns the call's answer to inputs.
func (s *Synthesis) Answer(inputs []string) string {
	top, votes := TopAnswer(inputs)
	u, uWrong := s.U[0], s.U[1]
	by := s.By
	if s.Gold == "" {
		return top
	}
	wrongLetter := func() string { return s.Wrong[int(uWrong*float64(len(s.Wrong)))] }
	switch PatternOf(votes, len(inputs)) {
	case VoteUnanimous:
		if top == s.Gold {
			if u >= 1-by.BreakUnanimous {
				return wrongLetter()
			}
			return s.Gold
		}
		if u < by.RescueUnanimous {
			return s.Gold
		}
		return top
	case VoteMajority:
		if top == s.Gold {
			if u >= 1-by.BreakMajority {
				return wrongLetter()
			}
			return s.Gold
		}
		if u < by.RescueMajority {
			return s.Gold
		}
		return top
	}
	if u < shiftedAccuracy(by.SplitAccuracy, s.Shift) {
		return s.Gold
	}
	var wrongVotes []string
	for _, a := range inputs {
		if a != s.Gold && a != "" && !slices.Contains(wrongVotes, a) {
			wrongVotes = append(wrongVotes, a)
		}
	}
	if len(wrongVotes) == 0 {
		return wrongLetter()
	}
	slices.Sort(wrongVotes)
	return wrongVotes[int(uWrong*float64(len(wrongVotes)))]
}

// shiftedAccuracy is sigmoid(logit(a) + shift), a itself for 0 and 1.
func shiftedAccuracy(a, shift float64) float64 {
	if shift == 0 || a <= 0 || a >= 1 {
		return a
	}
	return 1 / (1 + math.Exp(-(math.Log(a/(1-a)) + shift)))
}

// answerLetter returns the i-th answer letter: 0 -> "A".
func answerLetter(i int) string { return string(rune('A' + i)) }
