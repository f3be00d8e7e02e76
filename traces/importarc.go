package traces

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// AnswerSet is a table of real model answers to multiple-choice questions, in the format of
// the shared data's agreement/routerbench_arc_challenge_answers.csv: the columns sample_id,
// gold, then <model>_answer for every model, then <model>_correct for every model (1.0, 0.0
// or empty). An empty answer means none could be extracted; an empty gold means unknown.
type AnswerSet struct {
	// Models are the models' names as the columns spell them, in file order.
	Models []string
	// Questions are the rows, in file order.
	Questions []AnsweredQuestion
}

// AnsweredQuestion is one row of an AnswerSet.
type AnsweredQuestion struct {
	// SampleID is the question's identifier in the source benchmark.
	SampleID string
	// Gold is the gold letter ("" when unknown).
	Gold string
	// Answers holds each model's answer, indexed like AnswerSet.Models ("" = none).
	Answers []string
}

// Model returns the index of the named model in Models, or -1.
func (s *AnswerSet) Model(name string) int { return slices.Index(s.Models, name) }

// answerOptions read an answer file: errors name the line and column of the field.
var answerOptions = csvx.Options{Positions: true,
	Empty: "empty file: want the header sample_id,gold,<model>_answer...,<model>_correct..."}

// ListAnswerModels returns the model names of an answer file (its <model>_answer columns), in
// file order.
func ListAnswerModels(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading answers: %w", err)
	}
	defer f.Close()
	r, err := csvx.NewReader(path, f, answerOptions)
	if err != nil {
		return nil, err
	}
	return answerModels(r)
}

// ReadAnswerSet reads an answer file. Errors name the file, line and column. Where the gold
// letter is known, every <model>_correct value must agree with <model>_answer == gold. A row
// that repeats an earlier sample_id with the same gold and answers is the same question and
// is dropped (the RouterBench ARC file lists arc-challenge.val.172 twice, so its 445 rows are
// 444 questions); a repeat with other answers is an error.
func ReadAnswerSet(path string) (*AnswerSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading answers: %w", err)
	}
	defer f.Close()
	return DecodeAnswerSet(path, f)
}

// DecodeAnswerSet is ReadAnswerSet on an open reader; name is used in error messages.
func DecodeAnswerSet(name string, in io.Reader) (*AnswerSet, error) {
	r, err := csvx.NewReader(name, in, answerOptions)
	if err != nil {
		return nil, err
	}
	models, err := answerModels(r)
	if err != nil {
		return nil, err
	}
	set := &AnswerSet{Models: models}
	type rowRef struct{ line, index int }
	seen := map[string]rowRef{}
	for r.Next() {
		q := AnsweredQuestion{SampleID: r.Str("sample_id"), Gold: r.Str("gold"), Answers: make([]string, len(models))}
		for m, model := range models {
			q.Answers[m] = r.Str(model + "_answer")
		}
		if q.SampleID == "" {
			r.Failf("sample_id", "missing")
		}
		first, dup := seen[q.SampleID]
		if dup {
			prev := &set.Questions[first.index]
			if prev.Gold != q.Gold || !slices.Equal(prev.Answers, q.Answers) {
				r.Failf("sample_id", "%q is listed twice (first on line %d) with different answers", q.SampleID, first.line)
			}
		}
		for m, model := range models {
			column := model + "_correct"
			var correct bool
			switch v := r.Str(column); v {
			case "":
				continue
			case "1", "1.0":
				correct = true
			case "0", "0.0":
			default:
				r.Failf(column, "want 1.0, 0.0 or empty, got %q", v)
			}
			if q.Gold != "" && correct != (q.Answers[m] == q.Gold) {
				r.Failf(column, "says correct = %v, but the answer is %q and the gold %q", correct, q.Answers[m], q.Gold)
			}
		}
		if !dup {
			seen[q.SampleID] = rowRef{line: r.Line(), index: len(set.Questions)}
			set.Questions = append(set.Questions, q)
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(set.Questions) == 0 {
		return nil, fmt.Errorf("%s: no questions after the header", name)
	}
	return set, nil
}

// answerModels checks an answer file's header (sample_id, gold, the <model>_answer columns,
// then the <model>_correct columns in the same order) and returns its models.
func answerModels(r *csvx.Reader) ([]string, error) {
	header := r.Header()
	colErr := func(i int, format string, args ...any) error {
		return r.Errorf(i, "header: %s", fmt.Sprintf(format, args...))
	}
	if len(header) < 2 || header[0] != "sample_id" || header[1] != "gold" {
		return nil, colErr(0, "want sample_id,gold,<model>_answer...,<model>_correct..., got %q", strings.Join(header, ","))
	}
	var models []string
	i := 2
	for ; i < len(header) && strings.HasSuffix(header[i], "_answer"); i++ {
		m := strings.TrimSuffix(header[i], "_answer")
		if m == "" || slices.Contains(models, m) {
			return nil, colErr(i, "bad or repeated answer column %q", header[i])
		}
		models = append(models, m)
	}
	if len(models) == 0 {
		return nil, colErr(min(2, len(header)-1), "no <model>_answer columns after sample_id,gold")
	}
	if len(header) != 2+2*len(models) {
		return nil, colErr(min(i, len(header)-1), "want %d <model>_correct columns after the %d <model>_answer columns, got %d columns in all", len(models), len(models), len(header))
	}
	for m, model := range models {
		col := 2 + len(models) + m
		if header[col] != model+"_correct" {
			return nil, colErr(col, "column %q, want %q (the _correct columns follow the _answer columns' order)", header[col], model+"_correct")
		}
	}
	return models, nil
}

// AnswerImport describes a workload built from real model answers: a fixed set of k models
// answers every question (their real answers become the expert calls' answers), while
// prompt and output lengths, the aggregator's answer and its length are drawn.
type AnswerImport struct {
	// Name of the workload.
	Name string
	// Dataset names the queries' dataset (default "arc-challenge"); it is also their category.
	Dataset string
	// Queries is the number of questions to use: 0 = all, in file order; fewer = a random
	// subset, kept in file order.
	Queries int
	// Experts are the k experts, in call order; each is a distinct model of the file.
	Experts []AnswerExpert
	// PromptTokens is the question length (ARC-Challenge questions are short, about 60-120
	// tokens).
	PromptTokens LengthDist
	// TemplateTokens is the prompt template added to every question.
	TemplateTokens int
	// Aggregator is the aggregator model and behaviour, as for Generate ("" Model = none).
	// With an unknown gold the aggregator answers the experts' top answer.
	Aggregator AggregatorSpec
	// Options is the number of answer letters the aggregator's wrong answers are drawn from
	// (default DefaultOptions: A-D).
	Options int
}

// AnswerExpert maps one model of an answer file to an expert of the experiment.
type AnswerExpert struct {
	// Column is the model's name in the file (the prefix of its <model>_answer column).
	Column string
	// Model is the experiment's model name ("" = Column).
	Model string
	// Output is the length of the model's response.
	Output LengthDist
	// Forward is how many tokens of the response reach the aggregator (nil = all of it;
	// always capped at the output).
	Forward LengthDist
}

// ImportAnswers builds a workload whose expert answers are real model answers from an answer
// file (see AnswerSet): query i is the file's i-th question (or of the chosen subset), its k
// expert calls carry the answers of spec.Experts' models, and its gold is the file's gold
// ("" = unknown). Lengths and the aggregator's answer are drawn from named streams of seed
// ("questions", "prompts", "lengths", "aggregator"), so the same inputs give the same
// workload. Graph shape and token accounting follow Generate.
func ImportAnswers(path string, spec AnswerImport, seed uint64) (*Workload, error) {
	set, err := ReadAnswerSet(path)
	if err != nil {
		return nil, err
	}
	return spec.Build(set, seed)
}

// Build is ImportAnswers on an answer set already read.
func (spec AnswerImport) Build(set *AnswerSet, seed uint64) (*Workload, error) {
	fail := func(format string, args ...any) (*Workload, error) {
		return nil, fmt.Errorf("importing answers into workload %q: %s", spec.Name, fmt.Sprintf(format, args...))
	}
	if spec.Dataset == "" {
		spec.Dataset = "arc-challenge"
	}
	if spec.Options == 0 {
		spec.Options = DefaultOptions
	}
	k := len(spec.Experts)
	switch {
	case k == 0:
		return fail("no experts: choose k >= 1 of the file's models %s", strings.Join(set.Models, ", "))
	case spec.PromptTokens == nil:
		return fail("prompt tokens: a length distribution is needed")
	case spec.TemplateTokens < 0:
		return fail("template tokens must not be negative, got %d", spec.TemplateTokens)
	case spec.Queries < 0 || spec.Queries > len(set.Questions):
		return fail("queries must be in [0, %d] (the file's questions), got %d", len(set.Questions), spec.Queries)
	case spec.Options < 2 || spec.Options > MaxOptions:
		return fail("options must be in [2, %d], got %d", MaxOptions, spec.Options)
	}
	if err := checkDist(spec.PromptTokens); err != nil {
		return fail("prompt tokens: %v", err)
	}
	agg, err := spec.Aggregator.normalized()
	if err != nil {
		return fail("%v", err)
	}
	cols := make([]int, k)
	experts := slices.Clone(spec.Experts)
	for i := range experts {
		e := &experts[i]
		cols[i] = set.Model(e.Column)
		switch {
		case cols[i] < 0:
			return fail("expert %d: the file has no model %q (it has %s)", i, e.Column, strings.Join(set.Models, ", "))
		case slices.Index(cols[:i], cols[i]) >= 0:
			return fail("expert %d: model %q is chosen twice: its answers would agree with themselves", i, e.Column)
		case e.Output == nil:
			return fail("expert %d (%q): output tokens: a length distribution is needed", i, e.Column)
		}
		if e.Model == "" {
			e.Model = e.Column
		}
		if err := checkDist(e.Output); err != nil {
			return fail("expert %d (%q): output tokens: %v", i, e.Column, err)
		}
		if e.Forward != nil {
			if err := checkDist(e.Forward); err != nil {
				return fail("expert %d (%q): forward tokens: %v", i, e.Column, err)
			}
		}
	}
	letters := make([]string, spec.Options)
	for i := range letters {
		letters[i] = answerLetter(i)
	}
	prompts, lengths, aggStream := genStream(seed, "prompts"), genStream(seed, "lengths"), genStream(seed, "aggregator")
	rows := pickQuestions(len(set.Questions), spec.Queries, genStream(seed, "questions"))
	synth := agg.synthesizer()
	wl := &Workload{Name: spec.Name, Queries: make([]Query, len(rows))}
	answers := make([]string, k)
	for qi, row := range rows {
		src := &set.Questions[row]
		question, err := drawLength(spec.PromptTokens, prompts)
		if err != nil {
			return fail("prompt tokens: %v", err)
		}
		prompt := question + spec.TemplateTokens
		q := &wl.Queries[qi]
		*q = Query{ID: qi, Dataset: spec.Dataset, Category: spec.Dataset, Gold: src.Gold, Calls: make([]Call, k, k+1)}
		inputs := make([]Input, k)
		for j, e := range experts {
			c := &q.Calls[j]
			*c = Call{Role: RoleExpert, Model: e.Model, PromptTokens: prompt, PrefixTokens: question, Answer: src.Answers[cols[j]]}
			answers[j] = c.Answer
			if c.OutputTokens, err = drawLength(e.Output, lengths); err != nil {
				return fail("expert %q: output tokens: %v", e.Model, err)
			}
			forward := c.OutputTokens
			if e.Forward != nil {
				f, err := drawLength(e.Forward, lengths)
				if err != nil {
					return fail("expert %q: forward tokens: %v", e.Model, err)
				}
				forward = min(f, c.OutputTokens)
			}
			inputs[j] = Input{From: j, Tokens: forward}
		}
		u := [2]float64{aggStream.Float64(), aggStream.Float64()}
		if a := &agg; a.Model != "" {
			wrong := slices.DeleteFunc(slices.Clone(letters), func(l string) bool { return l == q.Gold })
			syn := &Synthesis{By: synth, Gold: q.Gold, Wrong: wrong, U: u}
			c := Call{Role: RoleAggregator, Model: a.Model, PromptTokens: prompt + a.TemplateTokens, PrefixTokens: question,
				Inputs: inputs, Answer: syn.Answer(answers), Gate: true, Synth: syn}
			base, err := drawLength(a.Output, lengths)
			if err != nil {
				return fail("aggregator %q: output tokens: %v", a.Model, err)
			}
			c.OutputTokens = scaleAggregatorOutput(base, Confidence(answers), k, a.DisagreementScale, a.Output.Max())
			q.Calls = append(q.Calls, c)
		}
	}
	if err := wl.Finish(); err != nil {
		return nil, err
	}
	return wl, nil
}
