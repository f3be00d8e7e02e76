package traces

import (
	"fmt"
	"math"
	"math/rand/v2"
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
	g, err := newGraphGen(&spec, seed)
	if err != nil {
		return nil, err
	}
	wl := &Workload{Name: spec.Name, Queries: make([]Query, g.queries())}
	for qi := range wl.Queries {
		if err := g.next(&wl.Queries[qi], qi); err != nil {
			return nil, err
		}
	}
	if err := wl.Finish(); err != nil {
		return nil, err
	}
	return wl, nil
}

// graphGen draws the queries of a graph workload: it holds the spec, what is derived from it
// once (the answer letters, which nodes answer, their vote-model logits), the random streams,
// and the per-node state of the query being drawn.
type graphGen struct {
	spec *GraphSpec
	// voteSpec is spec.Votes with the default number of options filled in; letters are its
	// answer letters.
	voteSpec VoteSpec
	letters  []string
	// answering says which nodes give an answer; anyAnswer whether any does.
	answering []bool
	anyAnswer bool
	// logits are the nodes' marginal logits of a right answer.
	logits []float64
	// synth is the copy of spec.Synth every synthesising call of the workload points to.
	synth Synthesizer
	// The named random streams (see GenerateGraph), and the questions picked (with a
	// question list).
	questions, prompts, goldStream, votes, aggStream, lengths, tools *rand.Rand
	picks                                                            []int
	// tpw is the tokens per word of questions, dataset the queries' dataset without them.
	tpw     float64
	dataset string
	// forward and answers are, by node, the tokens a node's readers get and its answer in the
	// query being drawn; in is scratch for a node's input answers.
	forward []int
	answers []string
	in      []string
}

// newGraphGen prepares the drawing of spec's queries from seed: it checks the number of answer
// options, works out which nodes answer and their logits, and opens the random streams.
func newGraphGen(spec *GraphSpec, seed uint64) (*graphGen, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	v := spec.Votes
	if v.Options == 0 {
		v.Options = DefaultOptions
	}
	if v.Options < 2 || v.Options > MaxOptions {
		return nil, fmt.Errorf("workload %q: votes: options must be in [2, %d], got %d", spec.Name, MaxOptions, v.Options)
	}
	g := &graphGen{spec: spec, voteSpec: v, letters: make([]string, v.Options), tpw: spec.TokensPerWord, dataset: spec.Dataset}
	if g.tpw == 0 {
		g.tpw = DefaultTokensPerWord
	}
	if g.dataset == "" {
		g.dataset = spec.Name
	}
	for i := range g.letters {
		g.letters[i] = answerLetter(i)
	}
	memo := make([]int8, len(spec.Nodes))
	g.answering = make([]bool, len(spec.Nodes))
	for i := range spec.Nodes {
		g.answering[i] = spec.answers(i, memo)
		g.anyAnswer = g.anyAnswer || g.answering[i]
	}
	g.logits = make([]float64, len(spec.Nodes))
	for i, n := range spec.Nodes {
		g.logits[i] = marginalLogit(n.Accuracy, spec.Votes.Difficulty)
	}
	g.questions, g.prompts, g.goldStream = genStream(seed, "questions"), genStream(seed, "prompts"), genStream(seed, "gold")
	g.votes, g.aggStream, g.lengths, g.tools = genStream(seed, "votes"), genStream(seed, "aggregator"), genStream(seed, "lengths"), genStream(seed, "tools")
	if spec.Questions != nil {
		g.picks = pickQuestions(len(spec.Questions), spec.Queries, g.questions)
	}
	g.synth = spec.Synth
	g.forward = make([]int, len(spec.Nodes))
	g.answers = make([]string, len(spec.Nodes))
	return g, nil
}

// queries is the number of queries the spec draws.
func (g *graphGen) queries() int {
	if g.spec.Questions != nil {
		return len(g.picks)
	}
	return g.spec.Queries
}

// next draws query qi (the one after the last drawn) into q: its source, then its calls.
func (g *graphGen) next(q *Query, qi int) error {
	src, err := g.source(qi)
	if err != nil {
		return err
	}
	return g.query(q, qi, src)
}

// graphSource is where a query of a graph workload comes from: its dataset, category and gold
// answer ("" when unknown) and its question's length in tokens.
type graphSource struct {
	dataset, category, gold string
	question                int
}

// source draws query qi's source (in query order): its picked question (its words converted
// at the spec's tokens per word), or else a question length drawn from PromptTokens.
func (g *graphGen) source(qi int) (graphSource, error) {
	if g.spec.Questions != nil {
		q := g.spec.Questions[g.picks[qi]]
		return graphSource{q.Dataset, q.Category, q.Gold, int(math.Round(float64(q.Words) * g.tpw))}, nil
	}
	n, err := drawLength(g.spec.PromptTokens, g.prompts)
	if err != nil {
		return graphSource{}, fmt.Errorf("workload %q: prompt tokens: %w", g.spec.Name, err)
	}
	return graphSource{dataset: g.dataset, question: n}, nil
}

// graphQuery is what the calls of one query share: its question's length, its gold answer,
// the wrong answer letters and the query's draws of the vote model.
type graphQuery struct {
	question     int
	gold         string
	wrong        []string
	z, attractor float64
}

// query draws query qi from src into q: its gold answer when src has none and a node answers,
// its vote-model draws, then every node's call in order.
func (g *graphGen) query(q *Query, qi int, src graphSource) error {
	gold := src.gold
	if gold == "" && g.anyAnswer {
		gold = g.letters[g.goldStream.IntN(len(g.letters))]
	}
	wrong := slices.DeleteFunc(slices.Clone(g.letters), func(l string) bool { return l == gold })
	z, attractor := g.votes.NormFloat64(), g.votes.Float64()
	gq := &graphQuery{question: src.question, gold: gold, wrong: wrong, z: z, attractor: attractor}
	*q = Query{ID: qi, Dataset: src.dataset, Category: src.category, Gold: gold, Calls: make([]Call, len(g.spec.Nodes))}
	for i := range g.spec.Nodes {
		if err := g.call(&q.Calls[i], i, gq); err != nil {
			return err
		}
	}
	return nil
}

// call draws node i's call of query gq into c: every node draws its three vote uniforms and
// two synthesis uniforms first, whether it uses them or not, then a tool step its duration
// and a model call its lengths and answer.
func (g *graphGen) call(c *Call, i int, gq *graphQuery) error {
	n := &g.spec.Nodes[i]
	*c = Call{Role: n.Role}
	u := [3]float64{g.votes.Float64(), g.votes.Float64(), g.votes.Float64()}
	ua := [2]float64{g.aggStream.Float64(), g.aggStream.Float64()}
	for _, from := range n.Inputs {
		c.Inputs = append(c.Inputs, Input{From: from, Tokens: g.forward[from]})
	}
	if n.Model == "" {
		return g.toolCall(c, i)
	}
	return g.modelCall(c, i, gq, u, ua)
}

// toolCall makes c, node i's call, a tool step: it draws its duration; it reads no tokens,
// forwards none and gives no answer.
func (g *graphGen) toolCall(c *Call, i int) error {
	n := &g.spec.Nodes[i]
	ms, err := drawLength(n.Tool, g.tools)
	if err != nil {
		return fmt.Errorf("workload %q: node %q: tool duration: %w", g.spec.Name, n.Name, err)
	}
	c.Tool = time.Duration(ms) * time.Millisecond
	for j := range c.Inputs {
		c.Inputs[j].Tokens = 0
	}
	g.forward[i] = 0
	g.answers[i] = ""
	return nil
}

// modelCall fills in c, node i's call on its model: its prompt, its output length, its answer
// (with the vote uniforms u and synthesis uniforms ua) and the tokens it forwards.
func (g *graphGen) modelCall(c *Call, i int, gq *graphQuery, u [3]float64, ua [2]float64) error {
	n := &g.spec.Nodes[i]
	c.Model = n.Model
	c.PromptTokens = n.TemplateTokens
	if n.Question {
		c.PromptTokens += gq.question
		c.PrefixTokens = gq.question
	}
	c.Gate = n.Gate
	out, err := drawLength(n.Output, g.lengths)
	if err != nil {
		return fmt.Errorf("workload %q: node %q: output tokens: %w", g.spec.Name, n.Name, err)
	}
	out = g.answer(c, i, gq, u, ua, out)
	g.answers[i] = c.Answer
	c.OutputTokens = out
	g.forward[i] = out
	if n.Forward != nil {
		f, err := drawLength(n.Forward, g.lengths)
		if err != nil {
			return fmt.Errorf("workload %q: node %q: forward tokens: %w", g.spec.Name, n.Name, err)
		}
		g.forward[i] = min(f, out)
	}
	return nil
}

// answer sets the answer of c, node i's call, if the node answers: synthesised from the
// answers it reads (with ua), or else cast by the vote model (with u). It returns the call's
// output length, out, scaled by the readers' agreement for a synthesising call.
func (g *graphGen) answer(c *Call, i int, gq *graphQuery, u [3]float64, ua [2]float64, out int) int {
	n := &g.spec.Nodes[i]
	g.in = g.in[:0]
	reads := false
	for _, from := range n.Inputs {
		if g.spec.Nodes[from].Model != "" {
			g.in = append(g.in, g.answers[from]) // a tool step does not vote
		}
		reads = reads || g.answering[from]
	}
	switch {
	case !g.answering[i]:
	case reads:
		syn := &Synthesis{By: &g.synth, Gold: gq.gold, Wrong: gq.wrong, U: ua}
		c.Synth = syn
		c.Answer = syn.Answer(g.in)
		scale := n.DisagreementScale
		if scale == 0 {
			scale = 1
		}
		out = scaleAggregatorOutput(out, Confidence(g.in), len(g.in), scale, n.Output.Max())
	default:
		v := g.voteSpec
		if a := voteAnswer(g.logits[i], gq.z, gq.attractor, u, v.ErrorCorrelation, v.Difficulty, len(gq.wrong)); a < 0 {
			c.Answer = gq.gold
		} else {
			c.Answer = gq.wrong[a]
		}
	}
	return out
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
