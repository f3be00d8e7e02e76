package traces

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
)

// Defaults of a GenSpec's zero fields.
const (
	// DefaultTokensPerWord converts question words to prompt tokens.
	DefaultTokensPerWord = 1.35
	// DefaultOptions is the number of answer letters of a multiple-choice question (A-D).
	DefaultOptions = 4
	// DefaultSkill is the one skill of a workload generated without questions or skills.
	DefaultSkill = "general"
	// MaxOptions is the largest number of answer letters (A-Z).
	MaxOptions = 26
)

// GenSpec describes a synthetic Mixture-of-Agents workload: which questions arrive, how they
// are routed to k experts out of a pool (skill-based routing with skewed expert demand, as
// Symbolic-MoE does), how long every response is, and what every expert answers.
type GenSpec struct {
	// Name of the workload.
	Name string
	// Queries is the number of queries; 0 means one per question in Questions. With Questions,
	// a smaller number takes a random subset (kept in question order) and a larger one repeats
	// the whole list and then a random subset.
	Queries int
	// Questions is a real question list: the prompt length is Words*TokensPerWord +
	// TemplateTokens, the skill is the Category (the Dataset where the category is empty) and
	// the gold answer is Gold (drawn uniformly where empty; a gold that is not an answer
	// letter, such as AIME's integers, is kept and every letter counts as a wrong answer). If
	// nil, prompt lengths come from PromptTokens and skills uniformly from Skills.
	Questions []Question
	// PromptTokens is the question length when Questions is nil (TemplateTokens is added).
	PromptTokens LengthDist
	// Skills are the skill names drawn uniformly when Questions is nil (default: one skill,
	// DefaultSkill).
	Skills []string
	// Dataset names the queries' dataset when Questions is nil (default: Name).
	Dataset string
	// TemplateTokens is the prompt template added to every question.
	TemplateTokens int
	// TokensPerWord converts question words to tokens (default DefaultTokensPerWord).
	TokensPerWord float64
	// Experts is the expert pool, in order.
	Experts []ExpertSpec
	// K is the number of experts per query, drawn with replacement (as Symbolic-MoE does),
	// weighted by the query's skill profile.
	K int
	// Skew is the target max/min ratio of expert popularity: the default global weights fall
	// geometrically from 1 (first expert) to 1/Skew (last expert). 0 means 1 (uniform).
	// ExpertSpec.Weight > 0 overrides an expert's global weight.
	Skew float64
	// SkillSpread is 0 when every skill routes by the global weights; when > 0, each skill's
	// profile is the global weights times lognormal noise exp(SkillSpread * N(0,1)), drawn per
	// expert from a stream that depends only on the seed and the skill name.
	SkillSpread float64
	// Keywords, when set, routes by Symbolic-MoE's rule from the experts' accuracies (see
	// KeywordRouting) in place of Skew, SkillSpread and the experts' Weight.
	Keywords *KeywordRouting
	// Aggregator is the aggregator model and its behaviour; an empty Model means no aggregator
	// calls (Query.Aggregator.Model is left empty).
	Aggregator AggregatorSpec
	// Votes is the answer model of the experts.
	Votes VoteSpec
}

// ExpertSpec is one expert model of the pool.
type ExpertSpec struct {
	// Name is the experiment's model name.
	Name string
	// Output is the length of the expert's response.
	Output LengthDist
	// Forward is how many tokens of the response the aggregator's prompt carries (the response
	// with its reasoning stripped); nil forwards the whole output. Always capped at the output.
	Forward LengthDist
	// Accuracy is the probability of a correct answer, on average over the questions (a
	// published benchmark accuracy); VoteSpec.Difficulty spreads it per query on the logit
	// scale without moving the average.
	Accuracy float64
	// Weight, when > 0, replaces the expert's global routing weight from Skew.
	Weight float64
	// SkillAccuracy, when it has the query's skill, replaces Accuracy on that skill.
	SkillAccuracy map[string]float64
}

// accuracyOn is the expert's accuracy on a skill.
func (e *ExpertSpec) accuracyOn(skill string) float64 {
	if a, ok := e.SkillAccuracy[skill]; ok {
		return a
	}
	return e.Accuracy
}

// AggregatorSpec is the aggregator model: the length of its response and how its answer
// relates to the experts' answers.
type AggregatorSpec struct {
	// Model is the experiment's model name of the aggregator ("" = no aggregator calls).
	Model string
	// Output is the length of the aggregator's response to a fully split query (see
	// DisagreementScale).
	Output LengthDist
	// TemplateTokens is the aggregator prompt's template, added to the question and the
	// forwarded expert responses.
	TemplateTokens int
	// DisagreementScale multiplies the output length of a unanimous query relative to a fully
	// split one (PAPERS.md: 1,064 vs 2,696 tokens, about 0.39); the multiplier is linear in the
	// confidence C(q) between 1/k (multiplier 1) and 1 (multiplier DisagreementScale), and the
	// result is clamped to [1, Output.Max()]. 0 means 1 (no effect), as does k = 1.
	DisagreementScale float64
	// Accuracy is the probability that the aggregator answers correctly when the experts'
	// strict majority is wrong or there is none; otherwise it repeats the wrong majority or, with
	// no majority, one of the experts' wrong answers.
	Accuracy float64
	// KeepMajority is the probability that the aggregator keeps a correct strict majority
	// (otherwise it answers a wrong letter). 0 means 1.
	KeepMajority float64
	// Patterns, when set, is the answer model per vote pattern (see Synthesizer), in place of
	// Accuracy and KeepMajority; on a query without a strict majority the aggregator then
	// answers with Patterns.SplitAccuracy shifted by the query's difficulty, as an expert would.
	Patterns *Synthesizer
	// Fit, when set (with Patterns), solves Patterns' break and rescue probabilities on the
	// workload's own votes so that skipping the aggregator changes accuracy by exactly these
	// amounts (see FitAccuracy).
	Fit *AccuracyFit
}

// AccuracyFit is a calibration target: the change of accuracy, in percentage points over the
// graded queries, when the aggregator is skipped on unanimous queries (T = 1) and on strict
// majorities too (T = 2/3), against always aggregating.
type AccuracyFit struct {
	T1, T23 float64
}

// VoteSpec is the answer model of the experts. Query q draws a difficulty shift
// δ_q ~ Normal(0, Difficulty) and a shared wrong "attractor" letter; expert i answers correctly
// with probability sigmoid(l_i + δ_q), where l_i is such that its average over δ is Accuracy_i
// (the accuracy measured over a benchmark; Accuracy 0 and 1 are never shifted);
// a wrong answer is the attractor with probability ErrorCorrelation and otherwise a uniformly
// random wrong letter.
type VoteSpec struct {
	// Options is the number of answer letters (default DefaultOptions; 10 for MMLU-Pro).
	Options int `json:"options"`
	// ErrorCorrelation, in [0, 1], is the probability that a wrong answer is the query's
	// attractor distractor rather than a uniformly random wrong letter.
	ErrorCorrelation float64 `json:"error_correlation"`
	// Difficulty, >= 0, is the standard deviation of the per-query logit shift.
	Difficulty float64 `json:"difficulty"`
	// Unanimous and Majority are optional targets for the expected share of queries whose k
	// answers are unanimous, and whose top answer has a strict majority but not every vote.
	// When either is > 0, Generate first calls CalibrateVotes and uses the ErrorCorrelation
	// and Difficulty it solves in place of the given ones.
	Unanimous float64 `json:"unanimous_target,omitempty"`
	Majority  float64 `json:"majority_target,omitempty"`
}

// Generate draws a MoA workload from spec: every query is the two-layer graph of its k expert
// calls (layer 0, role "expert") and, with an aggregator, one gated aggregator call (layer 1)
// that reads every expert. Every random choice comes from its own stream derived from seed
// and a stream name ("questions", "skills", "prompts", "gold", "routing", "votes",
// "aggregator", "lengths"), so the same spec and seed always give the same workload, and
// changing one aspect (say the vote model) leaves the others (routing, lengths) unchanged.
// Every query arrives at time 0 (see Arrivals for online serving).
//
// Expert calls' prompt is the question plus TemplateTokens; the aggregator's own prompt adds
// Aggregator.TemplateTokens, and it reads each expert's response with its reasoning stripped
// (ExpertSpec.Forward). Every call's shared prefix is the question.
func Generate(spec GenSpec, seed uint64) (*Workload, error) {
	p, err := newPlan(spec, seed)
	if err != nil {
		return nil, err
	}
	var fitted Fitted
	if p.votes.Unanimous > 0 || p.votes.Majority > 0 {
		vs, sh, err := p.calibrate()
		if err != nil {
			return nil, err
		}
		p.votes = vs
		fitted.Votes, fitted.ExpectedShares = &vs, &sh
	}
	wl, err := p.build()
	if err != nil {
		return nil, err
	}
	if p.fittedSynth != nil {
		fitted.Aggregator = p.fittedSynth
	}
	if p.nu != nil {
		fitted.Strengths = map[string]float64{}
		for e, x := range p.nu {
			fitted.Strengths[p.spec.Experts[e].Name] = x
		}
	}
	if fitted.Votes != nil || fitted.Aggregator != nil || fitted.Strengths != nil {
		wl.Fitted = &fitted
	}
	return wl, nil
}

// CalibrateVotes solves the vote model for the targets spec.Votes.Unanimous and
// spec.Votes.Majority: the expected shares of unanimous and strict-majority queries over the
// workload's questions and routing (a target of 0 is not matched). With both targets it solves
// ErrorCorrelation and Difficulty; with one, Difficulty alone at the given ErrorCorrelation.
// The expectation is exact up to quadrature (see votemodel.go), so the solution does not depend
// on the answer draws: a workload of Generate is one draw from it, and its realized shares
// scatter around the targets by sampling noise (about sqrt(s(1-s)/n) for n queries). It
// returns the VoteSpec and the expected shares, or an error saying which targets the model
// cannot reach and what it can.
func CalibrateVotes(spec GenSpec, seed uint64) (VoteSpec, VoteShares, error) {
	p, err := newPlan(spec, seed)
	if err != nil {
		return spec.Votes, VoteShares{}, err
	}
	return p.calibrate()
}

// Validate checks the spec and reports the first problem.
func (s *GenSpec) Validate() error {
	_, err := s.normalized()
	return err
}

// normalized validates the spec and returns a copy with defaults filled in.
func (s *GenSpec) normalized() (GenSpec, error) {
	n := *s
	fail := func(format string, args ...any) (GenSpec, error) {
		return GenSpec{}, fmt.Errorf("workload %q: %s", s.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case n.K < 1:
		return fail("k (experts per query) must be at least 1, got %d", n.K)
	case len(n.Experts) == 0:
		return fail("the expert pool is empty: k = %d needs at least one expert", n.K)
	case n.Queries < 0:
		return fail("queries must not be negative, got %d", n.Queries)
	case n.Questions == nil && n.Queries == 0:
		return fail("queries must be positive when no questions are given")
	case n.Questions != nil && len(n.Questions) == 0:
		return fail("the question list is empty")
	case n.Questions == nil && n.PromptTokens == nil:
		return fail("prompt tokens: a length distribution is needed when no questions are given")
	case n.TemplateTokens < 0:
		return fail("template tokens must not be negative, got %d", n.TemplateTokens)
	case n.TokensPerWord < 0 || math.IsNaN(n.TokensPerWord) || math.IsInf(n.TokensPerWord, 0):
		return fail("tokens per word must be positive, got %g", n.TokensPerWord)
	case n.Skew != 0 && !(n.Skew >= 1 && !math.IsInf(n.Skew, 0)):
		return fail("skew is the max/min ratio of expert popularity and must be at least 1 (or 0 for uniform), got %g", n.Skew)
	case !(n.SkillSpread >= 0) || math.IsInf(n.SkillSpread, 0):
		return fail("skill spread must not be negative, got %g", n.SkillSpread)
	}
	if n.TokensPerWord == 0 {
		n.TokensPerWord = DefaultTokensPerWord
	}
	if n.Skew == 0 {
		n.Skew = 1
	}
	if n.Questions == nil {
		if n.Skills == nil {
			n.Skills = []string{DefaultSkill}
		}
		if len(n.Skills) == 0 {
			return fail("the skill list is empty")
		}
		if n.Dataset == "" {
			n.Dataset = n.Name
		}
		if err := checkDist(n.PromptTokens); err != nil {
			return fail("prompt tokens: %v", err)
		}
	}
	for i, e := range n.Experts {
		where := fmt.Sprintf("expert %d (%q)", i, e.Name)
		switch {
		case e.Name == "":
			return fail("expert %d has no name", i)
		case e.Output == nil:
			return fail("%s: output tokens: a length distribution is needed", where)
		case !(e.Accuracy >= 0 && e.Accuracy <= 1):
			return fail("%s: accuracy must be in [0, 1], got %g", where, e.Accuracy)
		case !(e.Weight >= 0) || math.IsInf(e.Weight, 0):
			return fail("%s: weight must not be negative, got %g", where, e.Weight)
		}
		for _, sk := range slices.Sorted(maps.Keys(e.SkillAccuracy)) {
			if a := e.SkillAccuracy[sk]; !(a >= 0 && a <= 1) {
				return fail("%s: accuracy on %q must be in [0, 1], got %g", where, sk, a)
			}
		}
		if err := checkDist(e.Output); err != nil {
			return fail("%s: output tokens: %v", where, err)
		}
		if e.Forward != nil {
			if err := checkDist(e.Forward); err != nil {
				return fail("%s: forward tokens: %v", where, err)
			}
		}
	}
	if n.Keywords != nil {
		k, err := n.Keywords.normalized()
		if err != nil {
			return fail("%v", err)
		}
		n.Keywords = &k
	}
	agg, err := n.Aggregator.normalized()
	if err != nil {
		return fail("%v", err)
	}
	n.Aggregator = agg
	v := &n.Votes
	if v.Options == 0 {
		v.Options = DefaultOptions
	}
	switch {
	case v.Options < 2 || v.Options > MaxOptions:
		return fail("votes: options must be in [2, %d], got %d", MaxOptions, v.Options)
	case !(v.ErrorCorrelation >= 0 && v.ErrorCorrelation <= 1):
		return fail("votes: error correlation must be in [0, 1], got %g", v.ErrorCorrelation)
	case !(v.Difficulty >= 0) || math.IsInf(v.Difficulty, 0):
		return fail("votes: difficulty must not be negative, got %g", v.Difficulty)
	case !(v.Unanimous >= 0 && v.Unanimous <= 1):
		return fail("votes: unanimous share target must be in [0, 1], got %g", v.Unanimous)
	case !(v.Majority >= 0 && v.Majority <= 1):
		return fail("votes: majority share target must be in [0, 1], got %g", v.Majority)
	case v.Unanimous+v.Majority > 1:
		return fail("votes: unanimous (%g) and majority (%g) share targets add up to more than 1", v.Unanimous, v.Majority)
	}
	return n, nil
}

// normalized validates the aggregator and returns a copy with defaults filled in.
func (a AggregatorSpec) normalized() (AggregatorSpec, error) {
	if a.Model != "" {
		if a.Output == nil {
			return a, fmt.Errorf("aggregator %q: output tokens: a length distribution is needed", a.Model)
		}
		if err := checkDist(a.Output); err != nil {
			return a, fmt.Errorf("aggregator %q: output tokens: %v", a.Model, err)
		}
	}
	switch {
	case a.TemplateTokens < 0:
		return a, fmt.Errorf("aggregator template tokens must not be negative, got %d", a.TemplateTokens)
	case !(a.DisagreementScale >= 0) || math.IsInf(a.DisagreementScale, 0):
		return a, fmt.Errorf("aggregator disagreement scale must not be negative, got %g", a.DisagreementScale)
	case !(a.Accuracy >= 0 && a.Accuracy <= 1):
		return a, fmt.Errorf("aggregator accuracy must be in [0, 1], got %g", a.Accuracy)
	case !(a.KeepMajority >= 0 && a.KeepMajority <= 1):
		return a, fmt.Errorf("aggregator keep-majority probability must be in [0, 1], got %g", a.KeepMajority)
	case a.Fit != nil && a.Patterns == nil:
		return a, fmt.Errorf("aggregator: fitting accuracy changes needs the answer model per vote pattern")
	case a.Fit != nil && !(math.Abs(a.Fit.T1) <= 100 && math.Abs(a.Fit.T23) <= 100):
		return a, fmt.Errorf("aggregator: accuracy changes must be within +-100 pp, got %g and %g", a.Fit.T1, a.Fit.T23)
	}
	if p := a.Patterns; p != nil {
		if err := p.Validate(); err != nil {
			return a, fmt.Errorf("aggregator %w", err)
		}
		cp := *p
		a.Patterns = &cp
	}
	if a.DisagreementScale == 0 {
		a.DisagreementScale = 1
	}
	if a.KeepMajority == 0 {
		a.KeepMajority = 1
	}
	return a, nil
}

// checkDist rejects distributions that cannot return a valid length.
func checkDist(d LengthDist) error {
	if d.Max() < 1 {
		return fmt.Errorf("%s: the largest length must be at least 1", d)
	}
	switch d := d.(type) {
	case Uniform:
		if d.Lo < 1 || d.Hi < d.Lo {
			return fmt.Errorf("%s: needs 1 <= lo <= hi", d)
		}
	case *LogNormal:
		if d.MinLen < 1 || d.MaxLen < d.MinLen {
			return fmt.Errorf("%s: needs 1 <= min <= max", d)
		}
	}
	return nil
}

// drawLength draws one length and checks the LengthDist contract.
func drawLength(d LengthDist, r *rand.Rand) (int, error) {
	v := d.Sample(r)
	if v < 1 || v > d.Max() {
		return 0, fmt.Errorf("%s drew %d, outside [1, %d]", d, v, d.Max())
	}
	return v, nil
}

// genStream returns the random source of one named stream of a seeded generator.
func genStream(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// plan holds every draw of a workload that does not depend on the vote model, so that
// calibration can re-cast the votes many times on the same queries, routes and random numbers.
type plan struct {
	spec    GenSpec
	seed    uint64
	votes   VoteSpec
	queries []planQuery
	// acc are the experts' accuracies per skill, and logits their logits at one difficulty
	// (see marginalLogit), computed for logitsD.
	acc     map[string][]float64
	logits  map[string][]float64
	logitsD float64
	// Nu are the experts' normalized global strengths under keyword routing (nil otherwise).
	nu []float64
	// fittedSynth is the aggregator's fitted answer model (nil without Fit).
	fittedSynth *Synthesizer
}

type planQuery struct {
	dataset, skill, gold string
	// prompt is the expert prompt (question and template), question the question alone.
	prompt, question int
	// wrong are the wrong answer labels: the answer letters without the gold one.
	wrong   []string
	experts []int
	// route is the probability that a slot picks each expert (shared by the queries of a
	// skill, except under keyword routing).
	route []float64
	// Vote draws: the difficulty shift's normal deviate, the attractor's uniform, and per
	// expert three uniforms (correct?, attractor?, which wrong letter).
	z, attractor float64
	u            [][3]float64
}

func newPlan(spec GenSpec, seed uint64) (*plan, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	p := &plan{spec: s, seed: seed, votes: s.Votes}
	d := newDrawer(&p.spec, seed)
	fail := func(format string, args ...any) (*plan, error) {
		return nil, fmt.Errorf("workload %q: %s", s.Name, fmt.Sprintf(format, args...))
	}

	// Questions: prompt, skill and gold of every query.
	p.queries = make([]planQuery, d.queries())
	for i := range p.queries {
		if err := d.source(i, &p.queries[i]); err != nil {
			return nil, err
		}
	}

	// Routing: k experts per query, with replacement, by the query's routing weights.
	var keywordRoutes [][]float64
	if s.Keywords != nil {
		keywordRoutes, p.nu, err = p.keywordRoutes()
		if err != nil {
			return fail("routing: %v", err)
		}
	}
	for i := range p.queries {
		var route []float64
		if keywordRoutes != nil {
			route = keywordRoutes[i]
		}
		d.route(&p.queries[i], route)
	}
	p.acc = map[string][]float64{}
	for i := range p.queries {
		p.addSkill(p.queries[i].skill)
	}
	return p, nil
}

// addSkill records the experts' accuracies on a skill (once).
func (p *plan) addSkill(sk string) {
	if _, ok := p.acc[sk]; ok {
		return
	}
	s := &p.spec
	a := make([]float64, len(s.Experts))
	for e := range s.Experts {
		a[e] = s.Experts[e].accuracyOn(sk)
	}
	p.acc[sk] = a
}

// drawer draws the plan of one query at a time: its question (source), then its experts and
// vote draws (route). Each named stream is read in query order and by no one else, so a whole
// workload's plan (newPlan: every source, then every route) and a streamed one (each query's
// source and route in turn) make the same draws.
type drawer struct {
	s       *GenSpec
	seed    uint64
	letters []string
	// wrong memoizes the wrong answer letters of each gold answer.
	wrong map[string][]string
	// picks are the questions' indices in query order (with a question list).
	picks                          []int
	gold, skills, prompts, routing *rand.Rand
	votes                          *rand.Rand
	// global are the experts' global routing weights; cumulative their cumulated weights
	// per skill, and skillRoute each skill's routing probabilities.
	global                 []float64
	cumulative, skillRoute map[string][]float64
}

// newDrawer opens the streams of a normalized spec's query draws.
func newDrawer(s *GenSpec, seed uint64) *drawer {
	d := &drawer{s: s, seed: seed, letters: make([]string, s.Votes.Options), wrong: map[string][]string{},
		gold: genStream(seed, "gold"), skills: genStream(seed, "skills"), prompts: genStream(seed, "prompts"),
		routing: genStream(seed, "routing"), votes: genStream(seed, "votes"),
		global: GlobalWeights(s.Experts, s.Skew), cumulative: map[string][]float64{}, skillRoute: map[string][]float64{}}
	for i := range d.letters {
		d.letters[i] = answerLetter(i)
	}
	if s.Questions != nil {
		d.picks = pickQuestions(len(s.Questions), s.Queries, genStream(seed, "questions"))
	}
	return d
}

// queries is the number of queries the spec draws.
func (d *drawer) queries() int {
	if d.s.Questions != nil {
		return len(d.picks)
	}
	return d.s.Queries
}

// wrongOf returns the answer letters without gold (shared: not to be modified).
func (d *drawer) wrongOf(gold string) []string {
	if w, ok := d.wrong[gold]; ok {
		return w
	}
	w := slices.DeleteFunc(slices.Clone(d.letters), func(l string) bool { return l == gold })
	d.wrong[gold] = w
	return w
}

// source draws query i's question into pq: its dataset, skill, prompt and gold answer.
func (d *drawer) source(i int, pq *planQuery) error {
	s := d.s
	if s.Questions != nil {
		q := s.Questions[d.picks[i]]
		*pq = planQuery{dataset: q.Dataset, skill: q.Category, gold: q.Gold, experts: pq.experts, u: pq.u}
		if pq.skill == "" {
			pq.skill = q.Dataset
		}
		pq.question = int(math.Round(float64(q.Words) * s.TokensPerWord))
		pq.prompt = max(1, pq.question+s.TemplateTokens)
		pq.question = min(pq.question, pq.prompt)
		if pq.gold == "" {
			pq.gold = d.letters[d.gold.IntN(len(d.letters))]
		} else if len(pq.gold) == 1 && pq.gold[0] >= 'A' && pq.gold[0] <= 'Z' && int(pq.gold[0]-'A') >= len(d.letters) {
			return fmt.Errorf("workload %q: %s question %d has gold answer %q, outside the %d answer letters A-%s (set votes.options)",
				s.Name, q.Dataset, q.Index, q.Gold, len(d.letters), d.letters[len(d.letters)-1])
		}
		return nil
	}
	*pq = planQuery{dataset: s.Dataset, skill: d.skill(i), experts: pq.experts, u: pq.u}
	n, err := drawLength(s.PromptTokens, d.prompts)
	if err != nil {
		return fmt.Errorf("workload %q: prompt tokens: %v", s.Name, err)
	}
	pq.prompt, pq.question = n+s.TemplateTokens, n
	pq.gold = d.letters[d.gold.IntN(len(d.letters))]
	return nil
}

// skill is query i's skill: its question's category (or dataset), or a draw from the skills.
func (d *drawer) skill(i int) string {
	if d.s.Questions != nil {
		q := &d.s.Questions[d.picks[i]]
		if q.Category == "" {
			return q.Dataset
		}
		return q.Category
	}
	return d.s.Skills[d.skills.IntN(len(d.s.Skills))]
}

// route draws pq's k experts, with replacement, by the routing weights of its skill (or by
// keyword, its keyword routing probabilities), and its vote draws. pq's slices are reused
// when they have the length.
func (d *drawer) route(pq *planQuery, keyword []float64) {
	s := d.s
	pq.wrong = d.wrongOf(pq.gold)
	var cum []float64
	if keyword != nil {
		pq.route = keyword
		cum = cumulate(pq.route)
	} else {
		cum = d.cum(pq.skill)
		pq.route = d.skillRoute[pq.skill]
	}
	if len(pq.experts) != s.K {
		pq.experts = make([]int, s.K)
	}
	for j := range pq.experts {
		pq.experts[j] = pickWeighted(cum, d.routing.Float64())
	}
	pq.z, pq.attractor = d.votes.NormFloat64(), d.votes.Float64()
	if len(pq.u) != s.K {
		pq.u = make([][3]float64, s.K)
	}
	for j := range pq.u {
		pq.u[j] = [3]float64{d.votes.Float64(), d.votes.Float64(), d.votes.Float64()}
	}
}

// cum returns a skill's cumulated routing weights (its routing probabilities go to
// skillRoute).
func (d *drawer) cum(skill string) []float64 {
	if cum, ok := d.cumulative[skill]; ok {
		return cum
	}
	cum := cumulate(SkillProfile(d.global, d.s.SkillSpread, skill, d.seed))
	d.cumulative[skill] = cum
	route := make([]float64, len(cum))
	for e := range route {
		route[e] = cum[e] / cum[len(cum)-1]
		if e > 0 {
			route[e] -= cum[e-1] / cum[len(cum)-1]
		}
	}
	d.skillRoute[skill] = route
	return cum
}

// logitsAt returns the experts' logits per skill at difficulty d: those whose average over the
// per-query shift is each expert's accuracy.
func (p *plan) logitsAt(d float64) map[string][]float64 {
	if p.logits != nil && p.logitsD == d {
		return p.logits
	}
	p.logits, p.logitsD = map[string][]float64{}, d
	memo := map[float64]float64{}
	for sk, acc := range p.acc {
		l := make([]float64, len(acc))
		for e, a := range acc {
			v, ok := memo[a]
			if !ok {
				v = marginalLogit(a, d)
				memo[a] = v
			}
			l[e] = v
		}
		p.logits[sk] = l
	}
	return p.logits
}

// pickQuestions chooses n of total question indices (n = 0: all), in question order: a random
// subset when n < total, the whole list repeated and then a random subset when n > total.
func pickQuestions(total, n int, r *rand.Rand) []int {
	if n == 0 {
		n = total
	}
	var out []int
	for n >= total {
		for i := range total {
			out = append(out, i)
		}
		n -= total
	}
	if n > 0 {
		subset := r.Perm(total)[:n]
		slices.Sort(subset)
		out = append(out, subset...)
	}
	return out
}

// GlobalWeights returns the pool's global routing weights: geometric from 1 (first expert)
// down to 1/skew (last expert), except where an expert's Weight > 0 overrides its own.
func GlobalWeights(experts []ExpertSpec, skew float64) []float64 {
	w := make([]float64, len(experts))
	for i, e := range experts {
		switch {
		case e.Weight > 0:
			w[i] = e.Weight
		case len(experts) == 1 || skew <= 1:
			w[i] = 1
		default:
			w[i] = math.Pow(skew, -float64(i)/float64(len(experts)-1))
		}
	}
	return w
}

// SkillProfile returns one skill's routing weights: the global weights times lognormal noise
// exp(spread * N(0,1)) per expert, drawn from a stream that depends only on seed and skill
// (spread 0 returns the global weights).
func SkillProfile(global []float64, spread float64, skill string, seed uint64) []float64 {
	out := slices.Clone(global)
	if spread == 0 {
		return out
	}
	r := genStream(seed, "skill/"+skill)
	for i := range out {
		out[i] *= math.Exp(spread * r.NormFloat64())
	}
	return out
}

func cumulate(w []float64) []float64 {
	out := make([]float64, len(w))
	sum := 0.0
	for i, x := range w {
		sum += x
		out[i] = sum
	}
	return out
}

// pickWeighted returns the index drawn by uniform u in [0, 1) from cumulative weights.
func pickWeighted(cum []float64, u float64) int {
	i, _ := slices.BinarySearch(cum, u*cum[len(cum)-1])
	// BinarySearch finds the first cum >= target; an exact hit belongs to the next bucket.
	for i < len(cum)-1 && cum[i] <= u*cum[len(cum)-1] {
		i++
	}
	return i
}

// answer returns expert j's answer to query pq under the vote model: -1 for the gold answer,
// otherwise an index into pq.wrong.
func (p *plan) answer(pq *planQuery, j int, ec, difficulty float64) int {
	return voteAnswer(p.logitsAt(difficulty)[pq.skill][pq.experts[j]], pq.z, pq.attractor, pq.u[j], ec, difficulty, len(pq.wrong))
}

// voteAnswer is the vote model: an answerer with accuracy logit l, on a query of difficulty
// deviate z (scaled by difficulty) and attractor uniform a, answers with its three uniforms u:
// -1 for the gold answer, else the index of one of nWrong wrong answers (the attractor with
// probability ec, otherwise a uniformly random one).
func voteAnswer(l, z, a float64, u [3]float64, ec, difficulty float64, nWrong int) int {
	var correct float64
	switch {
	case math.IsInf(l, 1):
		correct = 1
	case math.IsInf(l, -1):
		correct = 0
	default:
		correct = 1 / (1 + math.Exp(-(l + difficulty*z)))
	}
	if u[0] < correct {
		return -1
	}
	n := float64(nWrong)
	if u[1] < ec {
		return int(a * n)
	}
	return int(u[2] * n)
}

// build casts the votes, draws the aggregator answers and the lengths.
func (p *plan) build() (*Workload, error) {
	b, err := p.newBuilder()
	if err != nil {
		return nil, err
	}
	aggU := p.aggregatorDraws()
	wl := &Workload{Name: p.spec.Name, Queries: make([]Query, len(p.queries))}
	for qi := range p.queries {
		if err := b.query(&wl.Queries[qi], qi, &p.queries[qi], aggU[qi]); err != nil {
			return nil, err
		}
	}
	if err := wl.Finish(); err != nil {
		return nil, err
	}
	return wl, nil
}

// builder casts the calls of one query at a time from its plan: the experts' answers under
// the vote model, the aggregator's from theirs, and every length from the stream "lengths",
// read in query order.
type builder struct {
	p       *plan
	lengths *rand.Rand
	// synth is the aggregator's answer model every aggregator call points to (nil without
	// an aggregator); answers is scratch.
	synth   *Synthesizer
	answers []string
	// The queries' calls, inputs and syntheses are carved from blocks (slab), a few
	// allocations for many queries.
	calls  []Call
	inputs []Input
	syns   []Synthesis
}

// slab is how many queries' worth of calls a block holds.
const slab = 256

// carve returns n elements of *block, with no room to append past them, allocating a block of
// slab times n when it runs short.
func carve[T any](block *[]T, n int) []T {
	if len(*block) < n {
		*block = make([]T, slab*n)
	}
	out := (*block)[:n:n]
	*block = (*block)[n:]
	return out
}

// newBuilder prepares the casting of the plan's queries: it fits the aggregator's answer
// model when the spec asks for it.
func (p *plan) newBuilder() (*builder, error) {
	agg := &p.spec.Aggregator
	synth := agg.synthesizer()
	if agg.Fit != nil && agg.Model != "" {
		fitted, err := p.fitAccuracy()
		if err != nil {
			return nil, err
		}
		synth = fitted
		p.fittedSynth = fitted
	}
	if agg.Model != "" && agg.Patterns != nil && p.votes.Difficulty > 0 {
		// The split accuracy is an average over questions too: the query's shift spreads it.
		cp := *synth
		cp.SplitAccuracy = sigmoidShift(marginalLogit(cp.SplitAccuracy, p.votes.Difficulty), 0)
		synth = &cp
	}
	return &builder{p: p, lengths: genStream(p.seed, "lengths"), synth: synth, answers: make([]string, p.spec.K)}, nil
}

// query casts query qi from its plan pq and its two aggregator uniforms aggU into q (its
// calls not yet numbered: see Workload.Finish).
func (b *builder) query(q *Query, qi int, pq *planQuery, aggU [2]float64) error {
	p := b.p
	s := &p.spec
	k := s.K
	agg := &s.Aggregator
	answers := b.answers
	n := k
	if agg.Model != "" {
		n++
	}
	*q = Query{ID: qi, Dataset: pq.dataset, Category: pq.skill, Gold: pq.gold, Calls: carve(&b.calls, n)[:k]}
	var inputs []Input
	if agg.Model != "" {
		inputs = carve(&b.inputs, k)
	}
	for j := range k {
		e := &s.Experts[pq.experts[j]]
		c := &q.Calls[j]
		*c = Call{Role: RoleExpert, Model: e.Name, PromptTokens: pq.prompt, PrefixTokens: pq.question}
		c.Answer = p.expertAnswer(pq, j)
		answers[j] = c.Answer
		var err error
		if c.OutputTokens, err = drawLength(e.Output, b.lengths); err != nil {
			return fmt.Errorf("workload %q: expert %q: output tokens: %w", s.Name, e.Name, err)
		}
		forward := c.OutputTokens
		if e.Forward != nil {
			f, err := drawLength(e.Forward, b.lengths)
			if err != nil {
				return fmt.Errorf("workload %q: expert %q: forward tokens: %w", s.Name, e.Name, err)
			}
			forward = min(f, c.OutputTokens)
		}
		if inputs != nil {
			inputs[j] = Input{From: j, Tokens: forward}
		}
	}
	if agg.Model != "" {
		syn := &carve(&b.syns, 1)[0]
		*syn = Synthesis{By: b.synth, Gold: pq.gold, Wrong: pq.wrong, U: aggU}
		if agg.Patterns != nil {
			syn.Shift = p.votes.Difficulty * pq.z
		}
		c := Call{Role: RoleAggregator, Model: agg.Model, PromptTokens: pq.prompt + agg.TemplateTokens, PrefixTokens: pq.question,
			Inputs: inputs, Answer: syn.Answer(answers), Gate: true, Synth: syn}
		base, err := drawLength(agg.Output, b.lengths)
		if err != nil {
			return fmt.Errorf("workload %q: aggregator %q: output tokens: %w", s.Name, agg.Model, err)
		}
		c.OutputTokens = scaleAggregatorOutput(base, Confidence(answers), k, agg.DisagreementScale, agg.Output.Max())
		q.Calls = append(q.Calls, c)
	}
	return nil
}

// aggregatorDraws draws every query's two aggregator uniforms, in query order, from the
// stream "aggregator" (always, so that they do not depend on whether there is an aggregator).
func (p *plan) aggregatorDraws() [][2]float64 {
	r := genStream(p.seed, "aggregator")
	out := make([][2]float64, len(p.queries))
	for i := range out {
		out[i] = [2]float64{r.Float64(), r.Float64()}
	}
	return out
}

// expertAnswer is expert j's answer to a query under the plan's vote model.
func (p *plan) expertAnswer(pq *planQuery, j int) string {
	if a := p.answer(pq, j, p.votes.ErrorCorrelation, p.votes.Difficulty); a >= 0 {
		return pq.wrong[a]
	}
	return pq.gold
}

// FitAccuracy returns the aggregator's answer model per vote pattern that Generate uses for
// spec and seed: spec.Aggregator.Patterns with its break and rescue probabilities solved to
// spec.Aggregator.Fit (calibrated on the workload's own votes, not observed).
func FitAccuracy(spec GenSpec, seed uint64) (Synthesizer, error) {
	p, err := newPlan(spec, seed)
	if err != nil {
		return Synthesizer{}, err
	}
	if p.votes.Unanimous > 0 || p.votes.Majority > 0 {
		vs, _, err := p.calibrate()
		if err != nil {
			return Synthesizer{}, err
		}
		p.votes = vs
	}
	if p.spec.Aggregator.Fit == nil || p.spec.Aggregator.Model == "" {
		if sy := p.spec.Aggregator.synthesizer(); sy != nil {
			return *sy, nil
		}
		return Synthesizer{}, nil
	}
	sy, err := p.fitAccuracy()
	if err != nil {
		return Synthesizer{}, err
	}
	return *sy, nil
}

// synthesizer is the aggregator's answer behaviour (nil without an aggregator): Patterns, or
// the simple model of Accuracy and KeepMajority.
func (a *AggregatorSpec) synthesizer() *Synthesizer {
	switch {
	case a.Model == "":
		return nil
	case a.Patterns != nil:
		cp := *a.Patterns
		return &cp
	}
	sy := SimpleSynthesizer(a.Accuracy, a.KeepMajority)
	return &sy
}

// scaleAggregatorOutput applies the disagreement scale: multiplier 1 at confidence 1/k (fully
// split) and scale at confidence 1 (unanimous), linear in between, clamped to [1, maxLen].
func scaleAggregatorOutput(base int, confidence float64, k int, scale float64, maxLen int) int {
	if k < 2 || scale == 1 {
		return base
	}
	lo := 1 / float64(k)
	t := min(1, max(0, (confidence-lo)/(1-lo)))
	m := 1 + (scale-1)*t
	return min(maxLen, max(1, int(math.Round(float64(base)*m))))
}
