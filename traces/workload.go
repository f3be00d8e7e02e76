package traces

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Roles of the calls the built-in generators make. A role is a free-form label for reporting;
// nothing in the pipeline depends on its value.
const (
	// RoleExpert is one of the k experts a MoA query is routed to.
	RoleExpert = "expert"
	// RoleAggregator synthesises the responses of the calls it reads.
	RoleAggregator = "aggregator"
	// RoleProposer is a proposer of a layered MoA (Together-MoA).
	RoleProposer = "proposer"
	// RoleAgent is a leaf agent of a fan-in tree (Faster-MoA).
	RoleAgent = "agent"
	// RoleTool is a step that takes time but no worker (a tool call, a retrieval, a wait).
	RoleTool = "tool"
)

// Call is one step of a query's call graph: an LLM call that a model serves on a worker, or a
// tool step (Model "") that takes Tool time and no worker.
//
// A call's prompt is its own PromptTokens (template and question) followed by the forwarded
// output of each of its Inputs, in order; InputTokens is their sum. The first PrefixTokens of
// the prompt are the query's shared prefix (the question): two calls of one query share
// min(PrefixTokens) leading tokens and nothing else, which prefix caching and replay honour.
type Call struct {
	// ID is unique within the workload: calls are numbered 0, 1, 2, ... in query order and,
	// within a query, in the order of Query.Calls.
	ID int
	// Query is the query's ID; Node the call's index in Query.Calls.
	Query, Node int
	// Role labels the call for reporting (RoleExpert, RoleAggregator, ...).
	Role string
	// Layer is the call's depth in the graph: 0 without inputs, else one more than the deepest
	// of its inputs.
	Layer int
	// Model is the experiment's name of the model that serves the call ("" for a tool step).
	Model string
	// Tool is how long a tool step takes (0 for an LLM call).
	Tool time.Duration
	// PromptTokens is the call's own prompt (template and question); PrefixTokens how many of
	// them lead the prompt as the query's shared prefix (0 <= PrefixTokens <= PromptTokens).
	PromptTokens, PrefixTokens int
	// Inputs are the calls whose responses the prompt carries, in prompt order.
	Inputs []Input
	// InputTokens is the whole prompt: PromptTokens plus every input's Tokens.
	InputTokens  int
	OutputTokens int
	// Answer is the answer extracted from the response ("" when none could be read), as given
	// when every input answers as the workload says; Synth (when set) derives it at run time
	// from what the inputs really answered.
	Answer string
	// Gate marks a call the aggregation rule may skip once its inputs are done: a skipped
	// call's answer is its inputs' majority answer.
	Gate bool
	// Confidence is the call's own confidence in its answer, in [0, 1] (say exp of the mean
	// log-probability of its tokens; 0 when unknown): what an early exit may require.
	Confidence float64
	// Synth, when set, derives the answer from the inputs' actual answers (see Synthesis).
	Synth *Synthesis
}

// Input is one edge of the call graph: the call reads Tokens tokens of the response of the
// call at node From of the same query (the response with its reasoning stripped, say).
type Input struct {
	From   int
	Tokens int
}

// IsTool reports whether the call is a tool step (no model, no worker).
func (c *Call) IsTool() bool { return c.Model == "" }

// Label is the call's role and, above the first layer, its layer: "expert", "proposer L2".
func (c *Call) Label() string {
	if c.Layer == 0 {
		return c.Role
	}
	return fmt.Sprintf("%s L%d", c.Role, c.Layer)
}

// Query is one query: a directed acyclic graph of calls, with the question's dataset,
// category (the skill used for routing) and gold answer.
type Query struct {
	ID int
	// Dataset and Category (the skill used for routing) of the question.
	Dataset  string
	Category string
	Gold     string
	// Arrival is when the query reaches the system (0 for an offline batch).
	Arrival time.Duration
	// Calls are the query's calls; Call.Node is the index here and Input.From refers to it.
	Calls []Call
}

// Workload is the queries of an experiment.
type Workload struct {
	Name    string
	Queries []Query
	// Format is the JSONL version the workload was read from (0: built in memory).
	Format int
	// Fitted records what the generator solved or derived rather than read (nil when nothing
	// was): run.json carries it, so that a calibrated input is never mistaken for an observed
	// one.
	Fitted *Fitted
}

// Fitted is what a generator solved or derived for a workload.
type Fitted struct {
	// Votes is the vote model with its calibrated error correlation and difficulty, and
	// ExpectedShares the vote-pattern shares it gives in expectation (Generate with vote
	// targets).
	Votes          *VoteSpec   `json:"votes,omitempty"`
	ExpectedShares *VoteShares `json:"expected_shares,omitempty"`
	// Aggregator is the aggregator's answer model per vote pattern, with the break and rescue
	// probabilities solved for the accuracy changes of AggregatorSpec.Fit.
	Aggregator *Synthesizer `json:"aggregator,omitempty"`
	// Strengths are the experts' normalized global strengths under keyword routing (the
	// squared, shifted profile sums), by expert name.
	Strengths map[string]float64 `json:"routing_strengths,omitempty"`
}

// NumCalls is the number of calls of the workload.
func (w *Workload) NumCalls() int {
	n := 0
	for i := range w.Queries {
		n += len(w.Queries[i].Calls)
	}
	return n
}

// Layers is the number of layers of the deepest query graph.
func (w *Workload) Layers() int {
	n := 0
	for i := range w.Queries {
		for j := range w.Queries[i].Calls {
			n = max(n, w.Queries[i].Calls[j].Layer+1)
		}
	}
	return n
}

// Sinks returns the nodes no other call of the query reads: the query's final calls. A query
// is complete when its sinks are; its answer is theirs (their top answer when there are
// several, as when k experts vote without an aggregator).
func (q *Query) Sinks() []int {
	read := make([]bool, len(q.Calls))
	for i := range q.Calls {
		for _, in := range q.Calls[i].Inputs {
			if in.From >= 0 && in.From < len(read) {
				read[in.From] = true
			}
		}
	}
	var out []int
	for i, r := range read {
		if !r {
			out = append(out, i)
		}
	}
	return out
}

// IsFinal reports whether node is one of the query's final calls that reads other calls: the
// calls of the "final stage" (the aggregator of a MoA query). A query without an aggregator
// has none.
func (q *Query) IsFinal(node int) bool {
	c := &q.Calls[node]
	if len(c.Inputs) == 0 {
		return false
	}
	for i := range q.Calls {
		for _, in := range q.Calls[i].Inputs {
			if in.From == node {
				return false
			}
		}
	}
	return true
}

// InputAnswers returns the answers of the LLM calls node reads, in input order, as the
// workload gives them: its votes (a tool step does not vote; an LLM call without an answer
// votes for nothing).
func (q *Query) InputAnswers(node int) []string {
	c := &q.Calls[node]
	out := make([]string, 0, len(c.Inputs))
	for _, in := range c.Inputs {
		if p := &q.Calls[in.From]; !p.IsTool() {
			out = append(out, p.Answer)
		}
	}
	return out
}

// FinalAnswer is the query's answer when every call runs as the workload says: the answer of
// its one final call, or the top answer of its final calls.
func (q *Query) FinalAnswer() string {
	sinks := q.Sinks()
	if len(sinks) == 1 {
		return q.Calls[sinks[0]].Answer
	}
	answers := make([]string, len(sinks))
	for i, s := range sinks {
		answers[i] = q.Calls[s].Answer
	}
	a, _ := TopAnswer(answers)
	return a
}

// finish numbers a query's calls from firstID, sets their query and node, checks the graph
// (inputs that exist, no self-edge, no cycle, token counts that add up) and fills in each
// call's layer. It returns the first problem, naming the call as "calls[i]".
func (q *Query) finish(firstID int) error {
	n := len(q.Calls)
	if n == 0 {
		return fmt.Errorf("no calls")
	}
	for i := range q.Calls {
		c := &q.Calls[i]
		c.ID, c.Query, c.Node = firstID+i, q.ID, i
		// where and iw name a call and an input in errors, made only for one.
		where := func() string { return fmt.Sprintf("calls[%d]", i) }
		switch {
		case c.Model == "" && c.Tool <= 0:
			return fmt.Errorf("%s: no model: an LLM call names its model, a tool step its duration", where())
		case c.Model != "" && c.Tool != 0:
			return fmt.Errorf("%s: both a model (%q) and a tool duration: a call is one or the other", where(), c.Model)
		case c.PromptTokens < 0:
			return fmt.Errorf("%s: prompt tokens must not be negative, got %d", where(), c.PromptTokens)
		case c.Model != "" && c.OutputTokens <= 0:
			return fmt.Errorf("%s: output tokens must be positive, got %d", where(), c.OutputTokens)
		case c.Model == "" && (c.PromptTokens != 0 || c.OutputTokens != 0 || c.PrefixTokens != 0):
			return fmt.Errorf("%s: a tool step has no prompt or output tokens", where())
		case c.PrefixTokens < 0 || c.PrefixTokens > c.PromptTokens:
			return fmt.Errorf("%s: prefix tokens %d outside [0, prompt tokens = %d]", where(), c.PrefixTokens, c.PromptTokens)
		case c.Gate && len(c.Inputs) == 0:
			return fmt.Errorf("%s: a gated call needs inputs whose answers decide whether it runs", where())
		}
		sum := c.PromptTokens
		var seen map[int]bool // for many inputs; a few are compared with each other
		if len(c.Inputs) > 16 {
			seen = make(map[int]bool, len(c.Inputs))
		}
		for j, in := range c.Inputs {
			iw := func() string { return fmt.Sprintf("%s.inputs[%d]", where(), j) }
			switch {
			case in.From == i:
				return fmt.Errorf("%s: the call reads itself", iw())
			case in.From < 0 || in.From >= n:
				return fmt.Errorf("%s: reads call %d, but the query has calls 0-%d", iw(), in.From, n-1)
			case seen != nil && seen[in.From] || seen == nil && readsEarlier(c.Inputs[:j], in.From):
				return fmt.Errorf("%s: reads call %d twice", iw(), in.From)
			case in.Tokens < 0:
				return fmt.Errorf("%s: tokens must not be negative, got %d", iw(), in.Tokens)
			case in.Tokens > q.Calls[in.From].OutputTokens:
				return fmt.Errorf("%s: forwards %d tokens, more than call %d's %d output tokens", iw(), in.Tokens, in.From, q.Calls[in.From].OutputTokens)
			case c.Model == "" && in.Tokens != 0:
				return fmt.Errorf("%s: a tool step reads no tokens, got %d", iw(), in.Tokens)
			}
			if seen != nil {
				seen[in.From] = true
			}
			sum += in.Tokens
		}
		if c.Model != "" && sum <= 0 {
			return fmt.Errorf("%s: an LLM call needs a prompt: prompt tokens and inputs sum to %d", where(), sum)
		}
		if c.InputTokens == 0 {
			c.InputTokens = sum
		} else if c.InputTokens != sum {
			return fmt.Errorf("%s: input tokens %d do not add up: prompt %d + inputs %d = %d", where(), c.InputTokens, c.PromptTokens, sum-c.PromptTokens, sum)
		}
	}
	order, cycle := topoOrder(q.Calls)
	if order == nil && cycle == nil {
		// Every call reads only calls before it: they are in order already.
		for i := range q.Calls {
			c := &q.Calls[i]
			c.Layer = 0
			for _, in := range c.Inputs {
				c.Layer = max(c.Layer, q.Calls[in.From].Layer+1)
			}
		}
		return nil
	}
	if cycle != nil {
		parts := make([]string, len(cycle))
		for i, c := range cycle {
			parts[i] = fmt.Sprint(c)
		}
		return fmt.Errorf("calls[%d].inputs: calls %s form a cycle (each reads the next)", cycle[0], strings.Join(parts, " -> "))
	}
	for _, i := range order {
		c := &q.Calls[i]
		c.Layer = 0
		for _, in := range c.Inputs {
			c.Layer = max(c.Layer, q.Calls[in.From].Layer+1)
		}
	}
	return nil
}

// readsEarlier reports whether inputs read node.
func readsEarlier(inputs []Input, node int) bool {
	for _, in := range inputs {
		if in.From == node {
			return true
		}
	}
	return false
}

// topoOrder returns the nodes inputs first, or, when the graph has a cycle, the cycle as a path
// of nodes each of which reads the next, ending where it starts; neither (nil, nil) when every
// node reads only nodes before it, the order they are in.
func topoOrder(calls []Call) (order, cycle []int) {
	inOrder := true
	for i := range calls {
		for _, in := range calls[i].Inputs {
			inOrder = inOrder && in.From < i
		}
	}
	if inOrder {
		return nil, nil
	}
	const (
		unseen = iota
		active
		done
	)
	state := make([]int, len(calls))
	var path []int
	var visit func(i int) bool
	visit = func(i int) bool {
		state[i] = active
		path = append(path, i)
		for _, in := range calls[i].Inputs {
			switch state[in.From] {
			case active:
				start := slices.Index(path, in.From)
				cycle = append(slices.Clone(path[start:]), in.From)
				return false
			case unseen:
				if !visit(in.From) {
					return false
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = done
		order = append(order, i)
		return true
	}
	for i := range calls {
		if state[i] == unseen && !visit(i) {
			return nil, cycle
		}
	}
	return order, nil
}

// Finish numbers every call (IDs 0, 1, 2, ... in query order), sets their query, node and
// layer, and checks every query graph (see Validate). Generators and readers call it last.
func (w *Workload) Finish() error {
	id := 0
	for qi := range w.Queries {
		q := &w.Queries[qi]
		if q.ID != qi {
			return fmt.Errorf("workload %q: query %d has id %d: query ids run 0, 1, 2, ... in order", w.Name, qi, q.ID)
		}
		if err := q.finish(id); err != nil {
			return fmt.Errorf("workload %q: query %d: %w", w.Name, qi, err)
		}
		id += len(q.Calls)
	}
	return nil
}

// Validate checks the workload's invariants, the ones ReadJSONL enforces on input: at least one
// query, query IDs 0, 1, 2, ... in order, call IDs, queries, nodes and layers as Finish sets
// them, and every query graph sound: each LLM call names its model and has positive prompt and
// output tokens, each tool step a positive duration; inputs name other calls of the query, at
// most once each, without cycles, forward no more than their call's output, and add up to the
// call's input tokens; a gated call has inputs; arrivals lie in [0, MaxArrival].
func (w *Workload) Validate() error {
	if len(w.Queries) == 0 {
		return fmt.Errorf("workload %q: no queries", w.Name)
	}
	id := 0
	for qi := range w.Queries {
		q := &w.Queries[qi]
		fail := func(format string, args ...any) error {
			return fmt.Errorf("workload %q: query %d: %s", w.Name, qi, fmt.Sprintf(format, args...))
		}
		if q.ID != qi {
			return fail("id is %d: query ids run 0, 1, 2, ... in order", q.ID)
		}
		if q.Arrival < 0 || q.Arrival > MaxArrival {
			return fail("arrival %v is outside [0, %v]", q.Arrival, MaxArrival)
		}
		check := *q
		check.Calls = slices.Clone(q.Calls)
		if err := check.finish(id); err != nil {
			return fail("%v", err)
		}
		for i := range q.Calls {
			got, want := &q.Calls[i], &check.Calls[i]
			if got.ID != want.ID || got.Query != want.Query || got.Node != want.Node || got.Layer != want.Layer || got.InputTokens != want.InputTokens {
				return fail("calls[%d] has id %d, query %d, node %d, layer %d, input tokens %d: want %d, %d, %d, %d, %d (see Workload.Finish)",
					i, got.ID, got.Query, got.Node, got.Layer, got.InputTokens, want.ID, want.Query, want.Node, want.Layer, want.InputTokens)
			}
		}
		id += len(q.Calls)
	}
	return nil
}
