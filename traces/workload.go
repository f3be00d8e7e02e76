package traces

import "time"

// Stage is the MoA stage a call belongs to.
type Stage int

const (
	// StageExpert is a call to one of the k experts a query is routed to.
	StageExpert Stage = iota
	// StageAggregator is the call that synthesises the experts' answers.
	StageAggregator
)

func (s Stage) String() string {
	if s == StageAggregator {
		return "aggregator"
	}
	return "expert"
}

// Call is one LLM call of a Mixture-of-Agents query.
type Call struct {
	// ID is unique within a workload: query q's expert call i has ID q*(k+1)+i and its
	// aggregator call q*(k+1)+k, where k is the number of experts per query.
	ID    int
	Query int
	Stage Stage
	// Model is the experiment's name of the model that serves the call.
	Model        string
	InputTokens  int
	OutputTokens int
	// ForwardTokens is how many tokens of an expert's response the aggregator's prompt
	// carries (the response with its reasoning stripped).
	ForwardTokens int
	// Answer is the answer extracted from the response ("" when none could be read).
	Answer string
}

// Query is one Mixture-of-Agents query: k expert calls, then (unless the aggregation rule
// skips it) one aggregator call.
type Query struct {
	ID int
	// Dataset and Category (the skill used for routing) of the question.
	Dataset  string
	Category string
	// PromptTokens is the expert prompt: question plus prompt template.
	PromptTokens int
	Gold         string
	// Arrival is when the query reaches the system (0 for an offline batch).
	Arrival    time.Duration
	Experts    []Call
	Aggregator Call
}

// Workload is the queries of an experiment.
type Workload struct {
	Name    string
	Queries []Query
}

// ExpertsPerQuery returns k, the number of expert calls per query (0 for an empty workload).
func (w *Workload) ExpertsPerQuery() int {
	if len(w.Queries) == 0 {
		return 0
	}
	return len(w.Queries[0].Experts)
}
