package traces

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// GraphSpec describes a workload whose queries all follow one template graph: Together-MoA's
// layers of proposers, Faster-MoA's fan-in tree, an agent program's fan-out and fan-in with
// tool steps. Every query draws its question, its lengths and its answers; the shape is fixed.
type GraphSpec struct {
	// Name of the workload.
	Name string
	// Queries is the number of queries; with Questions, 0 means one per question (as for
	// GenSpec.Queries).
	Queries int
	// Questions is a real question list (prompt length Words*TokensPerWord, dataset,
	// category, gold); if nil, question lengths come from PromptTokens.
	Questions []Question
	// PromptTokens is the question length when Questions is nil.
	PromptTokens LengthDist
	// Dataset names the queries' dataset when Questions is nil (default: Name).
	Dataset string
	// TokensPerWord converts question words to tokens (default DefaultTokensPerWord).
	TokensPerWord float64
	// Nodes is the template graph; a node's Inputs name earlier nodes.
	Nodes []NodeSpec
	// Votes is the answer model of the nodes that answer from scratch (with an Accuracy); its
	// Options also sets the answer letters. The calibration targets are not used here.
	Votes VoteSpec
	// Synth is how a node that reads answering inputs answers (see Synthesizer).
	Synth Synthesizer
}

// NodeSpec is one node of a template graph.
type NodeSpec struct {
	// Name identifies the node in errors.
	Name string
	// Role labels its calls (RoleProposer, RoleAggregator, RoleTool, ...).
	Role string
	// Model serves the node's calls; "" makes the node a tool step that takes Tool
	// milliseconds and no worker.
	Model string
	Tool  LengthDist
	// TemplateTokens is the node's own prompt template; with Question the prompt also
	// carries the question (first, as the query's shared prefix).
	TemplateTokens int
	Question       bool
	// Inputs are the indices of the nodes whose responses the prompt carries.
	Inputs []int
	// Output is the response length; Forward how much of it the nodes that read it get (nil:
	// all of it; always capped at the output).
	Output, Forward LengthDist
	// DisagreementScale multiplies the output of a node that reads answering inputs when they
	// agree, as AggregatorSpec.DisagreementScale does (0 means 1).
	DisagreementScale float64
	// Gate makes the node's calls gated (the aggregation rule may skip them).
	Gate bool
	// Accuracy, when Answers is set and the node reads no answering input, is the
	// probability its answer is right (the vote model of VoteSpec).
	Accuracy float64
	Answers  bool
}

// answers reports whether node i gives an answer: from scratch (Answers) or by reading an
// answering input.
func (g *GraphSpec) answers(i int, memo []int8) bool {
	if memo[i] != 0 {
		return memo[i] > 0
	}
	n := &g.Nodes[i]
	ok := n.Model != "" && n.Answers
	if n.Model != "" && len(n.Inputs) > 0 {
		ok = false
		for _, in := range n.Inputs {
			if g.answers(in, memo) {
				ok = true
			}
		}
	}
	memo[i] = -1
	if ok {
		memo[i] = 1
	}
	return ok
}

func (g *GraphSpec) validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("workload %q: %s", g.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case len(g.Nodes) == 0:
		return fail("the graph has no nodes")
	case g.Queries < 0:
		return fail("queries must not be negative, got %d", g.Queries)
	case g.Questions == nil && g.Queries == 0:
		return fail("queries must be positive when no questions are given")
	case g.Questions != nil && len(g.Questions) == 0:
		return fail("the question list is empty")
	case g.Questions == nil && g.PromptTokens == nil:
		return fail("prompt tokens: a length distribution is needed when no questions are given")
	case g.TokensPerWord < 0 || math.IsNaN(g.TokensPerWord) || math.IsInf(g.TokensPerWord, 0):
		return fail("tokens per word must be positive, got %g", g.TokensPerWord)
	}
	if err := g.Synth.Validate(); err != nil {
		return fail("synthesis: %v", err)
	}
	if g.PromptTokens != nil {
		if err := checkDist(g.PromptTokens); err != nil {
			return fail("prompt tokens: %v", err)
		}
	}
	for i, n := range g.Nodes {
		where := fmt.Sprintf("node %d (%q)", i, n.Name)
		switch {
		case n.Model == "" && n.Tool == nil:
			return fail("%s: neither a model nor a tool duration", where)
		case n.Model != "" && n.Tool != nil:
			return fail("%s: both a model and a tool duration", where)
		case n.Model != "" && n.Output == nil:
			return fail("%s: output tokens: a length distribution is needed", where)
		case n.TemplateTokens < 0:
			return fail("%s: template tokens must not be negative, got %d", where, n.TemplateTokens)
		case n.Model != "" && n.TemplateTokens == 0 && !n.Question && len(n.Inputs) == 0:
			return fail("%s: an empty prompt: give template tokens, the question or inputs", where)
		case !(n.Accuracy >= 0 && n.Accuracy <= 1):
			return fail("%s: accuracy must be in [0, 1], got %g", where, n.Accuracy)
		case !(n.DisagreementScale >= 0) || math.IsInf(n.DisagreementScale, 0):
			return fail("%s: disagreement scale must not be negative, got %g", where, n.DisagreementScale)
		case n.Gate && len(n.Inputs) == 0:
			return fail("%s: a gated node needs inputs", where)
		}
		for _, d := range []LengthDist{n.Tool, n.Output, n.Forward} {
			if d != nil {
				if err := checkDist(d); err != nil {
					return fail("%s: %v", where, err)
				}
			}
		}
		for _, in := range n.Inputs {
			if in < 0 || in >= i {
				return fail("%s: input %d is not an earlier node", where, in)
			}
		}
	}
	return nil
}

// GenerateGraph draws a workload from spec: every query is a copy of the template graph with
// its own question, lengths and answers. Random choices come from named streams of seed
// ("questions", "prompts", "gold", "votes", "aggregator", "lengths", "tools"), so the same
// spec and seed always give the same workload. Every query arrives at time 0 (see Arrivals).
func GenerateGraph(spec GraphSpec, seed uint64) (*Workload, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	tpw := spec.TokensPerWord
	if tpw == 0 {
		tpw = DefaultTokensPerWord
	}
	v := spec.Votes
	if v.Options == 0 {
		v.Options = DefaultOptions
	}
	if v.Options < 2 || v.Options > MaxOptions {
		return nil, fmt.Errorf("workload %q: votes: options must be in [2, %d], got %d", spec.Name, MaxOptions, v.Options)
	}
	letters := make([]string, v.Options)
	for i := range letters {
		letters[i] = answerLetter(i)
	}
	memo := make([]int8, len(spec.Nodes))
	answering := make([]bool, len(spec.Nodes))
	anyAnswer := false
	for i := range spec.Nodes {
		answering[i] = spec.answers(i, memo)
		anyAnswer = anyAnswer || answering[i]
	}
	logits := make([]float64, len(spec.Nodes))
	for i, n := range spec.Nodes {
		logits[i] = marginalLogit(n.Accuracy, spec.Votes.Difficulty)
	}
	questions, prompts, goldStream := genStream(seed, "questions"), genStream(seed, "prompts"), genStream(seed, "gold")
	votes, aggStream, lengths, tools := genStream(seed, "votes"), genStream(seed, "aggregator"), genStream(seed, "lengths"), genStream(seed, "tools")
	dataset := spec.Dataset
	if dataset == "" {
		dataset = spec.Name
	}
	type source struct {
		dataset, category, gold string
		question                int
	}
	var sources []source
	if spec.Questions != nil {
		for _, qi := range pickQuestions(len(spec.Questions), spec.Queries, questions) {
			q := spec.Questions[qi]
			sources = append(sources, source{q.Dataset, q.Category, q.Gold, int(math.Round(float64(q.Words) * tpw))})
		}
	} else {
		sources = make([]source, spec.Queries)
		for i := range sources {
			n, err := drawLength(spec.PromptTokens, prompts)
			if err != nil {
				return nil, fmt.Errorf("workload %q: prompt tokens: %w", spec.Name, err)
			}
			sources[i] = source{dataset: dataset, question: n}
		}
	}
	synth := spec.Synth
	wl := &Workload{Name: spec.Name, Queries: make([]Query, len(sources))}
	forward := make([]int, len(spec.Nodes))
	answers := make([]string, len(spec.Nodes))
	var in []string
	for qi, src := range sources {
		q := &wl.Queries[qi]
		gold := src.gold
		if gold == "" && anyAnswer {
			gold = letters[goldStream.IntN(len(letters))]
		}
		wrong := slices.DeleteFunc(slices.Clone(letters), func(l string) bool { return l == gold })
		z, attractor := votes.NormFloat64(), votes.Float64()
		*q = Query{ID: qi, Dataset: src.dataset, Category: src.category, Gold: gold, Calls: make([]Call, len(spec.Nodes))}
		for i := range spec.Nodes {
			n := &spec.Nodes[i]
			c := &q.Calls[i]
			*c = Call{Role: n.Role}
			u := [3]float64{votes.Float64(), votes.Float64(), votes.Float64()}
			ua := [2]float64{aggStream.Float64(), aggStream.Float64()}
			for _, from := range n.Inputs {
				c.Inputs = append(c.Inputs, Input{From: from, Tokens: forward[from]})
			}
			if n.Model == "" {
				ms, err := drawLength(n.Tool, tools)
				if err != nil {
					return nil, fmt.Errorf("workload %q: node %q: tool duration: %w", spec.Name, n.Name, err)
				}
				c.Tool = time.Duration(ms) * time.Millisecond
				for j := range c.Inputs {
					c.Inputs[j].Tokens = 0
				}
				forward[i] = 0
				answers[i] = ""
				continue
			}
			c.Model = n.Model
			c.PromptTokens = n.TemplateTokens
			if n.Question {
				c.PromptTokens += src.question
				c.PrefixTokens = src.question
			}
			c.Gate = n.Gate
			out, err := drawLength(n.Output, lengths)
			if err != nil {
				return nil, fmt.Errorf("workload %q: node %q: output tokens: %w", spec.Name, n.Name, err)
			}
			in = in[:0]
			reads := false
			for _, from := range n.Inputs {
				if spec.Nodes[from].Model != "" {
					in = append(in, answers[from]) // a tool step does not vote
				}
				reads = reads || answering[from]
			}
			switch {
			case !answering[i]:
			case reads:
				syn := &Synthesis{By: &synth, Gold: gold, Wrong: wrong, U: ua}
				c.Synth = syn
				c.Answer = syn.Answer(in)
				scale := n.DisagreementScale
				if scale == 0 {
					scale = 1
				}
				out = scaleAggregatorOutput(out, Confidence(in), len(in), scale, n.Output.Max())
			default:
				if a := voteAnswer(logits[i], z, attractor, u, v.ErrorCorrelation, v.Difficulty, len(wrong)); a < 0 {
					c.Answer = gold
				} else {
					c.Answer = wrong[a]
				}
			}
			answers[i] = c.Answer
			c.OutputTokens = out
			forward[i] = out
			if n.Forward != nil {
				f, err := drawLength(n.Forward, lengths)
				if err != nil {
					return nil, fmt.Errorf("workload %q: node %q: forward tokens: %w", spec.Name, n.Name, err)
				}
				forward[i] = min(f, out)
			}
		}
	}
	if err := wl.Finish(); err != nil {
		return nil, err
	}
	return wl, nil
}

// LayeredSpec is Together-MoA's layered graph: Layers layers of the same Proposers (layer 0
// reads the question, every later proposer reads every response of the layer below), then one
// aggregator reading the last layer.
type LayeredSpec struct {
	Layers    int
	Proposers []NodeSpec
	// Aggregator is the final node (its Inputs are set here); an empty Model means none (the
	// last layer's proposers then vote).
	Aggregator NodeSpec
}

// Nodes builds the template graph.
func (s LayeredSpec) Nodes() ([]NodeSpec, error) {
	if s.Layers < 1 {
		return nil, fmt.Errorf("layers must be at least 1, got %d", s.Layers)
	}
	if len(s.Proposers) == 0 {
		return nil, fmt.Errorf("no proposers")
	}
	var nodes []NodeSpec
	var prev []int
	for l := range s.Layers {
		var cur []int
		for _, p := range s.Proposers {
			n := p
			n.Name = fmt.Sprintf("%s (layer %d)", p.Name, l+1)
			n.Inputs = slices.Clone(prev)
			if l > 0 {
				n.Answers = false // it synthesises what it reads
			}
			cur = append(cur, len(nodes))
			nodes = append(nodes, n)
		}
		prev = cur
	}
	if s.Aggregator.Model != "" {
		a := s.Aggregator
		a.Inputs = prev
		nodes = append(nodes, a)
	}
	return nodes, nil
}

// TreeSpec is Faster-MoA's fan-in tree: Shape[0] leaf agents, then layers of Shape[i] nodes,
// each reading a contiguous group of Shape[i-1]/Shape[i] nodes of the layer below (9-3-1:
// nine agents in three clusters, three cluster aggregators, one final aggregator). Each
// layer's nodes take the layer's models in turn.
type TreeSpec struct {
	Shape []int
	// Layers are the node templates per layer, cycled over the layer's nodes.
	Layers [][]NodeSpec
	// Dense builds the all-to-all graph Faster-MoA's tree replaces instead: every layer but
	// the last as wide as the first (Together-MoA's layers of n proposers), every node reading
	// every node of the layer below.
	Dense bool
}

// Nodes builds the template graph.
func (s TreeSpec) Nodes() ([]NodeSpec, error) {
	if len(s.Shape) < 2 {
		return nil, fmt.Errorf("a tree needs at least two layers, got shape %v", s.Shape)
	}
	if len(s.Layers) != len(s.Shape) {
		return nil, fmt.Errorf("shape %v has %d layers, but %d layers of models are given", s.Shape, len(s.Shape), len(s.Layers))
	}
	for i, n := range s.Shape {
		switch {
		case n < 1:
			return nil, fmt.Errorf("layer %d of shape %v has %d nodes", i+1, s.Shape, n)
		case len(s.Layers[i]) == 0:
			return nil, fmt.Errorf("layer %d has no models", i+1)
		case i > 0 && s.Shape[i-1]%n != 0:
			return nil, fmt.Errorf("layer %d: %d nodes cannot split the %d below into equal groups", i+1, n, s.Shape[i-1])
		case i > 0 && n > s.Shape[i-1]:
			return nil, fmt.Errorf("layer %d has more nodes (%d) than the layer below (%d): a tree fans in", i+1, n, s.Shape[i-1])
		}
	}
	if last := s.Shape[len(s.Shape)-1]; last != 1 {
		return nil, fmt.Errorf("the last layer of shape %v must have one node, the final aggregator", s.Shape)
	}
	var nodes []NodeSpec
	var prev []int
	for l, count := range s.Shape {
		if s.Dense && l < len(s.Shape)-1 {
			count = s.Shape[0]
		}
		var cur []int
		group := 0
		if l > 0 {
			group = len(prev) / count
		}
		for j := range count {
			n := s.Layers[l][j%len(s.Layers[l])]
			n.Name = fmt.Sprintf("%s (layer %d, node %d)", n.Name, l+1, j+1)
			n.Inputs = nil
			if l > 0 {
				n.Inputs = slices.Clone(prev[j*group : (j+1)*group])
				if s.Dense {
					n.Inputs = slices.Clone(prev)
				}
				n.Answers = false
			}
			cur = append(cur, len(nodes))
			nodes = append(nodes, n)
		}
		prev = cur
	}
	return nodes, nil
}
