package traces

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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
func DecodeQuestions(name string, r io.Reader) ([]Question, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(questionColumns)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: want the header %q", name, strings.Join(questionColumns, ","))
		}
		return nil, csvError(name, err)
	}
	for i, want := range questionColumns {
		if header[i] != want {
			line, col := cr.FieldPos(i)
			return nil, fmt.Errorf("%s:%d:%d: header column %d is %q, want %q (header %s)", name, line, col, i+1, header[i], want, strings.Join(questionColumns, ","))
		}
	}
	type key struct {
		dataset string
		index   int
	}
	seen := map[key]int{}
	var qs []Question
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		fieldErr := func(i int, format string, args ...any) error {
			line, col := cr.FieldPos(i)
			return fmt.Errorf("%s:%d:%d: %s: %s", name, line, col, questionColumns[i], fmt.Sprintf(format, args...))
		}
		nonNegative := func(i int) (int, error) {
			v, err := strconv.Atoi(rec[i])
			if err != nil {
				return 0, fieldErr(i, "not an integer: %q", rec[i])
			}
			if v < 0 {
				return 0, fieldErr(i, "must not be negative, got %d", v)
			}
			return v, nil
		}
		q := Question{Dataset: rec[0], Category: rec[2], Gold: rec[5]}
		if q.Dataset == "" {
			return nil, fieldErr(0, "missing: every question needs a dataset")
		}
		if q.Index, err = nonNegative(1); err != nil {
			return nil, err
		}
		if q.Chars, err = nonNegative(3); err != nil {
			return nil, err
		}
		if q.Words, err = nonNegative(4); err != nil {
			return nil, err
		}
		k := key{q.Dataset, q.Index}
		if prev, dup := seen[k]; dup {
			return nil, fieldErr(1, "%s question %d is listed twice (first on line %d)", q.Dataset, q.Index, prev)
		}
		line, _ := cr.FieldPos(0)
		seen[k] = line
		qs = append(qs, q)
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

// csvError turns an encoding/csv error into "file:line:column: message".
func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s:%d:%d: %v", name, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
