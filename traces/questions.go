package traces

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// Question is one benchmark question as the MoA evaluation sees it: where it comes from, its
// skill category, its length and its gold answer (the text itself is not needed).
type Question struct {
	// Dataset is the benchmark ("mmlu-pro", "medmcqa", "gpqa", "aime24", ...).
	Dataset string
	// Category is the skill category used for routing ("" where the dataset has none).
	Category string
	// Gold is the gold answer: a letter for multiple-choice sets, an integer for AIME, "" if unknown.
	Gold string
	// Index is the question's position in its dataset.
	Index int
	// Chars and Words are the length of the question text.
	Chars, Words int
}

// questionColumns is the header of a questions CSV file, in order.
var questionColumns = []string{"dataset", "index", "category", "question_chars", "question_words", "gold"}

// ReadQuestions reads a questions CSV file with the header
// dataset,index,category,question_chars,question_words,gold (the format of the shared
// data's workloads/moa_questions.csv). Errors name the file, line and column:
// "questions.csv:12:9: question_chars: not an integer: "x"".
func ReadQuestions(path string) ([]Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading questions: %w", err)
	}
	defer f.Close()
	return DecodeQuestions(path, f)
}

// DecodeQuestions is ReadQuestions on an open reader; name is used in error messages.
func DecodeQuestions(name string, in io.Reader) ([]Question, error) {
	header := strings.Join(questionColumns, ",")
	r, err := csvx.NewReader(name, in, csvx.Options{FieldsPerRecord: len(questionColumns), Positions: true,
		Empty: fmt.Sprintf("empty file: want the header %q", header)})
	if err != nil {
		return nil, err
	}
	for i, want := range questionColumns {
		if got := r.Header()[i]; got != want {
			return nil, r.Errorf(i, "header column %d is %q, want %q (header %s)", i+1, got, want, header)
		}
	}
	nonNegative := func(column string) int {
		v, err := strconv.Atoi(r.Str(column))
		switch {
		case err != nil:
			r.Failf(column, "not an integer: %q", r.Str(column))
		case v < 0:
			r.Failf(column, "must not be negative, got %d", v)
		}
		return v
	}
	type key struct {
		dataset string
		index   int
	}
	seen := map[key]int{}
	var qs []Question
	for r.Next() {
		q := Question{Dataset: r.Str("dataset"), Category: r.Str("category"), Gold: r.Str("gold")}
		if q.Dataset == "" {
			r.Failf("dataset", "missing: every question needs a dataset")
		}
		q.Index, q.Chars, q.Words = nonNegative("index"), nonNegative("question_chars"), nonNegative("question_words")
		k := key{q.Dataset, q.Index}
		if prev, dup := seen[k]; dup {
			r.Failf("index", "%s question %d is listed twice (first on line %d)", q.Dataset, q.Index, prev)
		}
		seen[k] = r.Line()
		qs = append(qs, q)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%s: no questions after the header", name)
	}
	return qs, nil
}

// FilterDataset returns the questions of one dataset, in their original order (nil if none).
func FilterDataset(qs []Question, dataset string) []Question {
	var out []Question
	for _, q := range qs {
		if q.Dataset == dataset {
			out = append(out, q)
		}
	}
	return out
}
