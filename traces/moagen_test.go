package traces_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

func TestGenerateIsDeterministic(t *testing.T) {
	spec := paperSpec(t)
	a := jsonl(t, generate(t, spec, 7))
	b := jsonl(t, generate(t, spec, 7))
	assert.Equal(t, a, b, "the same seed gives byte-identical workloads")
	c := jsonl(t, generate(t, spec, 8))
	assert.NotEqual(t, a, c, "another seed gives another workload")
}

// Changing the vote model leaves routing and lengths alone: every aspect has its own stream.
func TestGenerateStreamsAreIndependent(t *testing.T) {
	spec := paperSpec(t)
	a := generate(t, spec, 3)
	spec.Votes.ErrorCorrelation, spec.Votes.Difficulty = 0.9, 0.2
	b := generate(t, spec, 3)
	differentAnswers := 0
	for i := range a.Queries {
		for j := range experts(a.Queries[i]) {
			ea, eb := experts(a.Queries[i])[j], experts(b.Queries[i])[j]
			require.Equal(t, ea.Model, eb.Model)
			require.Equal(t, ea.OutputTokens, eb.OutputTokens)
			if ea.Answer != eb.Answer {
				differentAnswers++
			}
		}
	}
	assert.Positive(t, differentAnswers)
}

func TestGenerateShape(t *testing.T) {
	spec := paperSpec(t)
	wl := generate(t, spec, 1)
	require.NoError(t, wl.Validate())
	require.Len(t, wl.Queries, spec.Queries)
	assert.Equal(t, 2, wl.Layers())
	maxOut := map[string]int{}
	for _, e := range spec.Experts {
		maxOut[e.Name] = e.Output.Max()
	}
	letters := []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}
	for qi, q := range wl.Queries {
		require.Len(t, q.Calls, spec.K+1)
		assert.Equal(t, qi, q.ID)
		assert.Contains(t, spec.Skills, q.Category)
		assert.Contains(t, letters, q.Gold)
		assert.Zero(t, q.Arrival, "Generate makes an offline batch")
		assert.Equal(t, []int{spec.K}, q.Sinks(), "the aggregator is the one final call")
		prompt := q.Calls[0].PromptTokens
		assert.True(t, prompt >= 50+spec.TemplateTokens && prompt <= 400+spec.TemplateTokens, "prompt %d", prompt)
		for i, c := range experts(q) {
			assert.Equal(t, qi*(spec.K+1)+i, c.ID, "ids run across the workload")
			assert.Equal(t, traces.RoleExpert, c.Role)
			assert.Zero(t, c.Layer)
			assert.Equal(t, prompt, c.InputTokens)
			assert.Equal(t, prompt-spec.TemplateTokens, c.PrefixTokens, "the question is the shared prefix")
			assert.True(t, c.OutputTokens >= 1 && c.OutputTokens <= maxOut[c.Model], "%s output %d", c.Model, c.OutputTokens)
			assert.Contains(t, letters, c.Answer)
		}
		a, ok := aggregator(q)
		require.True(t, ok)
		assert.Equal(t, qi*(spec.K+1)+spec.K, a.ID)
		assert.Equal(t, traces.RoleAggregator, a.Role)
		assert.Equal(t, 1, a.Layer)
		assert.True(t, a.Gate, "the aggregation rule gates the aggregator")
		assert.Equal(t, "LlamaR1", a.Model)
		require.Len(t, a.Inputs, spec.K)
		forwarded := 0
		for i, in := range a.Inputs {
			assert.Equal(t, i, in.From)
			assert.True(t, in.Tokens >= 1 && in.Tokens <= q.Calls[i].OutputTokens, "forward %d of %d", in.Tokens, q.Calls[i].OutputTokens)
			forwarded += in.Tokens
		}
		assert.Equal(t, prompt+spec.Aggregator.TemplateTokens, a.PromptTokens)
		assert.Equal(t, prompt+spec.Aggregator.TemplateTokens+forwarded, a.InputTokens)
		assert.True(t, a.OutputTokens >= 1 && a.OutputTokens <= spec.Aggregator.Output.Max())
		assert.Contains(t, letters, a.Answer)
		assert.Equal(t, a.Answer, a.Synth.Answer(answersOf(experts(q))), "the synthesis gives the workload's answer")
	}
}

// Without an aggregator model there are no aggregator calls, and the experts are the final calls.
func TestGenerateDefaults(t *testing.T) {
	wl := generate(t, traces.GenSpec{
		Name: "plain", Queries: 50, PromptTokens: traces.Fixed(10), K: 2,
		Experts: []traces.ExpertSpec{{Name: "a", Output: traces.Uniform{Lo: 1, Hi: 9}, Accuracy: 1}},
	}, 1)
	for _, q := range wl.Queries {
		assert.Equal(t, "plain", q.Dataset)
		assert.Equal(t, traces.DefaultSkill, q.Category)
		assert.Contains(t, []string{"A", "B", "C", "D"}, q.Gold)
		_, ok := aggregator(q)
		assert.False(t, ok)
		assert.Len(t, q.Sinks(), 2, "without an aggregator the experts' answers vote")
		for _, c := range q.Calls {
			assert.Equal(t, q.Gold, c.Answer, "accuracy 1 is always right")
		}
	}
}

// The measured max/min selection ratio is the target skew, within 15%, on a large draw.
func TestGenerateSkew(t *testing.T) {
	for _, skew := range []float64{1, 13, 92} {
		spec := paperSpec(t)
		spec.Queries, spec.Skew, spec.Aggregator = 50000, skew, traces.AggregatorSpec{}
		s := traces.Stats(generate(t, spec, 11))
		require.Len(t, s.Models, len(spec.Experts))
		assert.InEpsilon(t, max(skew, 1), s.SelectionRatio, 0.15, "skew %g", skew)
		if skew > 1 {
			assert.Equal(t, "QwenR1", s.Models[0].Model, "the first expert is the most popular")
			assert.Equal(t, "qwen", s.Models[len(s.Models)-1].Model, "the last expert is the least popular")
		}
	}
}

func TestGenerateWeightOverride(t *testing.T) {
	spec := paperSpec(t)
	spec.Queries, spec.Skew = 30000, 1
	spec.Experts[5].Weight = 4 // the others keep 1: qwen gets 4/9 of the calls
	s := traces.Stats(generate(t, spec, 2))
	assert.Equal(t, "qwen", s.Models[0].Model)
	assert.InDelta(t, 4.0/9, s.Models[0].Share, 0.01)
}

// Each skill has its own profile, fixed by the seed and the skill's name.
func TestSkillProfile(t *testing.T) {
	global := traces.GlobalWeights(paperSpec(t).Experts, 92)
	assert.InDelta(t, 1, global[0], 1e-12)
	assert.InDelta(t, 1.0/92, global[5], 1e-12)
	assert.Equal(t, global, traces.SkillProfile(global, 0, "law", 1))
	law := traces.SkillProfile(global, 1, "law", 1)
	assert.Equal(t, law, traces.SkillProfile(global, 1, "law", 1))
	assert.NotEqual(t, law, traces.SkillProfile(global, 1, "math", 1))
	assert.NotEqual(t, law, traces.SkillProfile(global, 1, "law", 2))

	// With a spread, skills route differently.
	spec := paperSpec(t)
	spec.Queries, spec.SkillSpread = 20000, 1.5
	wl := generate(t, spec, 4)
	top := map[string]map[string]int{}
	for _, q := range wl.Queries {
		if top[q.Category] == nil {
			top[q.Category] = map[string]int{}
		}
		for _, c := range experts(q) {
			top[q.Category][c.Model]++
		}
	}
	assert.NotEqual(t, top["law"], top["math"])
}

func TestGenerateFromQuestions(t *testing.T) {
	qs := []traces.Question{
		{Dataset: "mmlu-pro", Index: 0, Category: "biology", Words: 100, Gold: "J"},
		{Dataset: "mmlu-pro", Index: 1, Category: "law", Words: 10, Gold: "B"},
		{Dataset: "medmcqa", Index: 0, Words: 1, Gold: ""},
	}
	spec := paperSpec(t)
	spec.Questions, spec.Queries, spec.PromptTokens = qs, 0, nil
	wl := generate(t, spec, 1)
	require.Len(t, wl.Queries, 3)
	assert.Equal(t, 135+60, wl.Queries[0].Calls[0].PromptTokens, "100 words * 1.35 + template 60")
	assert.Equal(t, 135, wl.Queries[0].Calls[0].PrefixTokens, "the question is the shared prefix")
	assert.Equal(t, "biology", wl.Queries[0].Category)
	assert.Equal(t, "J", wl.Queries[0].Gold)
	assert.Equal(t, "medmcqa", wl.Queries[2].Category, "a question without a category routes by its dataset")
	assert.NotEmpty(t, wl.Queries[2].Gold, "a missing gold is drawn")

	spec.Queries = 2
	sub := generate(t, spec, 1)
	require.Len(t, sub.Queries, 2)
	spec.Queries = 7
	rep := generate(t, spec, 1)
	require.Len(t, rep.Queries, 7)
	datasets := []string{}
	for _, q := range rep.Queries[:6] {
		datasets = append(datasets, q.Dataset)
	}
	assert.Equal(t, []string{"mmlu-pro", "mmlu-pro", "medmcqa", "mmlu-pro", "mmlu-pro", "medmcqa"}, datasets)

	spec.Votes.Options = 4
	_, err := traces.Generate(spec, 1)
	assert.ErrorContains(t, err, `mmlu-pro question 0 has gold answer "J", outside the 4 answer letters A-D`)
}

func TestGenerateRealQuestions(t *testing.T) {
	qs, err := traces.ReadQuestions(sharedFile(t, "workloads/moa_questions.csv"))
	require.NoError(t, err)
	spec := paperSpec(t)
	spec.Questions, spec.Queries = traces.FilterDataset(qs, "mmlu-pro"), 0
	wl := generate(t, spec, 1)
	require.Len(t, wl.Queries, 2100)
	cats := map[string]int{}
	for _, q := range wl.Queries {
		cats[q.Category]++
	}
	assert.Len(t, cats, 14)
	assert.Equal(t, "G", wl.Queries[0].Gold)
	assert.Equal(t, int(math.Round(153*1.35))+60, wl.Queries[0].Calls[0].PromptTokens)
}

// The aggregator's output shrinks with agreement: multiplier 1 for 1:1:1, DisagreementScale
// for 3:0 and linear in the confidence between (0.7 for 2:1 with scale 0.4).
func TestDisagreementScale(t *testing.T) {
	spec := paperSpec(t)
	spec.Aggregator.Output, spec.Aggregator.DisagreementScale = traces.Fixed(1000), 0.4
	want := map[traces.VotePattern]int{traces.VoteUnanimous: 400, traces.VoteMajority: 700, traces.VoteSplit: 1000}
	seen := map[traces.VotePattern]bool{}
	for _, q := range generate(t, spec, 1).Queries {
		p := traces.PatternOfAnswers(answersOf(experts(q)))
		seen[p] = true
		a, _ := aggregator(q)
		assert.Equal(t, want[p], a.OutputTokens, "%v", p)
	}
	assert.Len(t, seen, 3)
}

// The aggregator keeps correct majorities (KeepMajority 1) and rescues wrong or split ones
// with probability Accuracy.
func TestAggregatorAnswers(t *testing.T) {
	spec := paperSpec(t)
	spec.Queries, spec.Aggregator.KeepMajority, spec.Aggregator.Accuracy = 20000, 1, 0.5
	wl := generate(t, spec, 9)
	rescued, rescuable := 0, 0
	for _, q := range wl.Queries {
		top, votes := traces.TopAnswer(answersOf(experts(q)))
		agg, _ := aggregator(q)
		if 2*votes > spec.K && top == q.Gold {
			require.Equal(t, q.Gold, agg.Answer)
			continue
		}
		rescuable++
		if agg.Answer == q.Gold {
			rescued++
		} else if 2*votes > spec.K {
			require.Equal(t, top, agg.Answer, "a wrong majority that is not overturned stands")
		}
	}
	assert.InDelta(t, 0.5, float64(rescued)/float64(rescuable), 0.03)
}

// Calibration solves the vote model's expected shares exactly, and a large workload drawn from
// the solution has its realized shares within sampling noise of them.
func TestCalibrateVotes(t *testing.T) {
	for _, tc := range []struct {
		name                string
		k, options          int
		unanimous, majority float64
	}{
		{"MMLU-Pro T=1 and T=2/3 skip rates", 3, 10, 0.4571, 0.8462 - 0.4571},
		{"MedMCQA", 3, 4, 0.4748, 0.9018 - 0.4748},
		{"GPQA", 3, 4, 0.3737, 0.8737 - 0.3737},
		{"unanimous only", 3, 10, 0.40, 0},
		{"majority only", 3, 10, 0, 0.40},
		{"k = 5", 5, 10, 0.35, 0.45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := paperSpec(t)
			spec.Queries = 20000
			spec.K, spec.Votes.Options = tc.k, tc.options
			spec.Votes.Unanimous, spec.Votes.Majority = tc.unanimous, tc.majority
			vs, got, err := traces.CalibrateVotes(spec, 21)
			require.NoError(t, err)
			t.Logf("error correlation %.3f, difficulty %.3f: unanimous %.4f, majority %.4f, split %.4f", vs.ErrorCorrelation, vs.Difficulty, got.Unanimous, got.Majority, got.Split)
			if tc.unanimous > 0 {
				assert.InDelta(t, tc.unanimous, got.Unanimous, 1e-6)
			}
			if tc.majority > 0 {
				assert.InDelta(t, tc.majority, got.Majority, 1e-6)
			}
			assert.InDelta(t, 1, got.Unanimous+got.Majority+got.Split, 1e-9)
			assert.True(t, vs.ErrorCorrelation >= 0 && vs.ErrorCorrelation <= 1 && vs.Difficulty >= 0)
			if tc.unanimous == 0 || tc.majority == 0 {
				assert.Equal(t, spec.Votes.ErrorCorrelation, vs.ErrorCorrelation, "one target moves the difficulty only")
			}

			// Generate calibrates by itself; its workload is one draw, within four standard
			// errors of the expected shares.
			s := traces.Stats(generate(t, spec, 21))
			noise := func(p float64) float64 { return 4 * math.Sqrt(p*(1-p)/float64(spec.Queries)) }
			assert.InDelta(t, got.Unanimous, s.Shares.Unanimous, noise(got.Unanimous))
			assert.InDelta(t, got.Majority, s.Shares.Majority, noise(got.Majority))
		})
	}
}

// Every seed of the paper-like spec calibrates, to the same parameters when the routing does not
// depend on the seed.
func TestCalibrateVotesEverySeed(t *testing.T) {
	spec := paperSpec(t)
	spec.Votes.Unanimous, spec.Votes.Majority = 0.4571, 0.3891
	first, _, err := traces.CalibrateVotes(spec, 1)
	require.NoError(t, err)
	for seed := uint64(2); seed <= 20; seed++ {
		vs, _, err := traces.CalibrateVotes(spec, seed)
		require.NoError(t, err, "seed %d", seed)
		assert.InDelta(t, first.ErrorCorrelation, vs.ErrorCorrelation, 1e-9, "seed %d", seed)
		assert.InDelta(t, first.Difficulty, vs.Difficulty, 1e-9, "seed %d", seed)
	}
}

func TestCalibrateVotesUnreachable(t *testing.T) {
	spec := paperSpec(t)
	spec.K = 2 // two votes are unanimous or split: a 2:1-style majority cannot happen
	spec.Votes.Unanimous, spec.Votes.Majority = 0.5, 0.3
	vs, _, err := traces.CalibrateVotes(spec, 1)
	require.ErrorContains(t, err, "with 0.5000 unanimous, the majority share 0.3000 is out of reach: at most 0.0000")
	assert.Equal(t, 0.5, vs.Unanimous)
	_, err = traces.Generate(spec, 1)
	assert.ErrorContains(t, err, "out of reach")

	spec = paperSpec(t)
	spec.Votes.Unanimous, spec.Votes.Majority = 0.01, 0.3
	_, _, err = traces.CalibrateVotes(spec, 1)
	assert.ErrorContains(t, err, "the unanimous share 0.0100 is out of reach: at least")

	spec = paperSpec(t)
	spec.Votes.Unanimous, spec.Votes.Majority = 0.7, 0.4
	_, _, err = traces.CalibrateVotes(spec, 1)
	assert.ErrorContains(t, err, "add up to more than 1")

	spec = paperSpec(t)
	_, _, err = traces.CalibrateVotes(spec, 1)
	assert.ErrorContains(t, err, "needs a unanimous or a majority share target")
}

func TestGenSpecValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s *traces.GenSpec)
		want string
	}{
		{"k zero", func(s *traces.GenSpec) { s.K = 0 }, "k (experts per query) must be at least 1, got 0"},
		{"empty pool", func(s *traces.GenSpec) { s.Experts = nil }, "the expert pool is empty: k = 3 needs at least one expert"},
		{"negative weight", func(s *traces.GenSpec) { s.Experts[2].Weight = -1 }, `expert 2 ("gemma"): weight must not be negative, got -1`},
		{"accuracy above 1", func(s *traces.GenSpec) { s.Experts[1].Accuracy = 1.2 }, `expert 1 ("LlamaR1"): accuracy must be in [0, 1], got 1.2`},
		{"accuracy NaN", func(s *traces.GenSpec) { s.Experts[1].Accuracy = math.NaN() }, `expert 1 ("LlamaR1"): accuracy must be in [0, 1], got NaN`},
		{"no output", func(s *traces.GenSpec) { s.Experts[0].Output = nil }, `expert 0 ("QwenR1"): output tokens: a length distribution is needed`},
		{"zero length", func(s *traces.GenSpec) { s.Experts[0].Output = traces.Fixed(0) }, `expert 0 ("QwenR1"): output tokens: fixed 0: the largest length must be at least 1`},
		{"unnamed expert", func(s *traces.GenSpec) { s.Experts[3].Name = "" }, "expert 3 has no name"},
		{"no queries", func(s *traces.GenSpec) { s.Queries = 0 }, "queries must be positive when no questions are given"},
		{"no prompts", func(s *traces.GenSpec) { s.PromptTokens = nil }, "prompt tokens: a length distribution is needed"},
		{"skew below 1", func(s *traces.GenSpec) { s.Skew = 0.5 }, "skew is the max/min ratio of expert popularity and must be at least 1"},
		{"negative spread", func(s *traces.GenSpec) { s.SkillSpread = -1 }, "skill spread must not be negative"},
		{"one option", func(s *traces.GenSpec) { s.Votes.Options = 1 }, "votes: options must be in [2, 26], got 1"},
		{"error correlation", func(s *traces.GenSpec) { s.Votes.ErrorCorrelation = 2 }, "votes: error correlation must be in [0, 1], got 2"},
		{"targets above 1", func(s *traces.GenSpec) { s.Votes.Unanimous, s.Votes.Majority = 0.7, 0.5 }, "votes: unanimous (0.7) and majority (0.5) share targets add up to more than 1"},
		{"aggregator without output", func(s *traces.GenSpec) { s.Aggregator.Output = nil }, `aggregator "LlamaR1": output tokens: a length distribution is needed`},
		{"aggregator accuracy", func(s *traces.GenSpec) { s.Aggregator.Accuracy = -0.1 }, "aggregator accuracy must be in [0, 1], got -0.1"},
		{"empty questions", func(s *traces.GenSpec) { s.Questions = []traces.Question{} }, "the question list is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := paperSpec(t)
			spec.Experts = slices.Clone(spec.Experts)
			tc.edit(&spec)
			_, err := traces.Generate(spec, 1)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `workload "paper": `+tc.want)
			assert.Equal(t, err.Error(), spec.Validate().Error())
		})
	}
}
