package policies

import (
	"fmt"
	"math"

	"github.com/mosaic-sched/mosaic/traces"
)

// Rule is an aggregation rule, the gate of a gated call (a MoA query's aggregator, or any
// call of a graph marked traces.Call.Gate): from the answers of the calls it reads it decides
// whether the call runs or is skipped, its inputs' majority answer standing for its own.
//
// Contract: the Driver calls Decide when every input of the gated call has finished (done,
// failed, skipped or cancelled) or an early exit let it go on, with the answers of the inputs
// that answered in input order ("" for a failed input or one without an answer; a cancelled or
// unfinished input gives none). Decide must be deterministic and must not keep answers.
type Rule interface {
	Name() string
	Decide(answers []string) Decision
}

// Decision is a Rule's verdict on one gated call.
type Decision struct {
	// Skip says the call does not run; Majority is then its answer.
	Skip bool
	// Majority is the most voted answer ("" when no expert gave one); ties go to the
	// alphabetically first answer (traces.TopAnswer).
	Majority string
	// Votes is the number of inputs that gave the majority answer.
	Votes int
	// Confidence is Votes / k, with k inputs.
	Confidence float64
}

// ConfidenceSkip is MOSAIC's confidence-aware aggregation: with confidence
// C(q) = max_a |{i : a_i = a}| / k, the aggregator is skipped when C(q) >= Threshold and the
// majority answer is final. Threshold 1 skips only unanimous queries; 2/3 also skips 2:1
// majorities of three; a threshold above 1 never skips.
type ConfidenceSkip struct {
	Threshold float64
}

// NeverSkip always runs the aggregator.
func NeverSkip() ConfidenceSkip { return ConfidenceSkip{Threshold: math.Inf(1)} }

// Name implements Rule.
func (r ConfidenceSkip) Name() string {
	if r.Threshold > 1 {
		return "never-skip"
	}
	return fmt.Sprintf("skip C>=%.3g", r.Threshold)
}

// Decide implements Rule.
func (r ConfidenceSkip) Decide(answers []string) Decision {
	m, v := traces.TopAnswer(answers)
	d := Decision{Majority: m, Votes: v}
	if len(answers) > 0 {
		d.Confidence = float64(v) / float64(len(answers))
	}
	// A small tolerance so that T = 2/3 written as 0.6667 or 0.666 still means "two of three".
	d.Skip = v > 0 && d.Confidence >= r.Threshold-1e-3
	return d
}

// EarlyExit is Faster-MoA's runtime early exit (PAPERS.md §2), applied to the inputs of gated
// calls: as they finish, once at least MinFinished have answered and their top answer has at
// least the Agreement share of their answers (and, when MinConfidence > 0, the calls' mean
// traces.Call.Confidence is at least MinConfidence), the gated call goes on with the answers it
// has and its unfinished inputs that no other call waits for are cancelled (their GPU time
// stops at the engine's next iteration). The gated call's own rule then decides on the
// answers it has.
type EarlyExit struct {
	Agreement     float64
	MinFinished   int
	MinConfidence float64
}

// Validate reports an unusable early exit.
func (e EarlyExit) Validate() error {
	switch {
	case !(e.Agreement > 0 && e.Agreement <= 1):
		return fmt.Errorf("early exit: agreement must be in (0, 1], got %g", e.Agreement)
	case e.MinFinished < 1:
		return fmt.Errorf("early exit: min_finished must be at least 1, got %d", e.MinFinished)
	case !(e.MinConfidence >= 0 && e.MinConfidence <= 1):
		return fmt.Errorf("early exit: min_confidence must be in [0, 1], got %g", e.MinConfidence)
	}
	return nil
}

// String describes the early exit for tables: "exit a=1 n=2" (agreement, min finished).
func (e EarlyExit) String() string {
	s := fmt.Sprintf("exit a=%.3g n=%d", e.Agreement, e.MinFinished)
	if e.MinConfidence > 0 {
		s += fmt.Sprintf(" c=%.3g", e.MinConfidence)
	}
	return s
}
