package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The workload JSONL format holds one query per line, in query order:
//
//	{"id":0,"dataset":"mmlu-pro","category":"biology","prompt_tokens":220,"gold":"G","arrival_s":0,
//	 "experts":[{"model":"QwenR1","output_tokens":3012,"forward_tokens":310,"answer":"G"}, ...],
//	 "aggregator":{"model":"LlamaR1","input_tokens":1200,"output_tokens":2100,"answer":"G"}}
//
// Query fields:
//   - id (required): the query's position, 0, 1, 2, ... in line order.
//   - dataset, category, gold (optional strings): "" when absent; gold "" means unknown.
//   - prompt_tokens (required, > 0): the expert prompt, question plus template.
//   - arrival_s (optional, >= 0, default 0): arrival time in seconds, microsecond resolution.
//   - experts (required, non-empty): the k expert calls; every line has the same k.
//   - aggregator (optional): the aggregator call; absent when the workload has none.
//
// Expert call fields: model (required, non-empty), output_tokens (required, > 0),
// forward_tokens (optional, 0 <= forward_tokens <= output_tokens, default output_tokens: the
// tokens of the response the aggregator's prompt carries), input_tokens (optional, > 0,
// default prompt_tokens), answer (optional, "" = none extracted).
// Aggregator call fields: model (required), input_tokens (required, > 0), output_tokens
// (required, > 0), answer (optional).
//
// Reading is strict: unknown fields, missing required fields, wrong types and impossible
// values are errors naming "file:line: field"; blank lines are allowed anywhere. Call IDs are
// not stored: they follow from the query id and k (see Call.ID).

// MaxArrival is the latest arrival time a JSONL workload may carry (about 31.7 years), so that
// arrivals convert to time.Duration at microsecond resolution without loss.
const MaxArrival = 1e9 * time.Second

type jsonlQuery struct {
	ID           *int             `json:"id"`
	Dataset      string           `json:"dataset,omitempty"`
	Category     string           `json:"category,omitempty"`
	PromptTokens *int             `json:"prompt_tokens"`
	Gold         string           `json:"gold,omitempty"`
	ArrivalS     float64          `json:"arrival_s"`
	Experts      []jsonlExpert    `json:"experts"`
	Aggregator   *jsonlAggregator `json:"aggregator,omitempty"`
}

type jsonlExpert struct {
	Model         string `json:"model"`
	InputTokens   *int   `json:"input_tokens,omitempty"`
	OutputTokens  *int   `json:"output_tokens"`
	ForwardTokens *int   `json:"forward_tokens,omitempty"`
	Answer        string `json:"answer"`
}

type jsonlAggregator struct {
	Model        string `json:"model"`
	InputTokens  *int   `json:"input_tokens"`
	OutputTokens *int   `json:"output_tokens"`
	Answer       string `json:"answer"`
}

// WriteJSONL writes the workload in the JSONL format, one query per line. It first checks the
// workload with Validate, so that what it writes ReadJSONL reads back. Arrivals are rounded to
// microseconds.
func WriteJSONL(w io.Writer, wl *Workload) error {
	if err := wl.Validate(); err != nil {
		return fmt.Errorf("writing JSONL: %w", err)
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		jq := jsonlQuery{
			ID: jsonPtr(q.ID), Dataset: q.Dataset, Category: q.Category, PromptTokens: jsonPtr(q.PromptTokens), Gold: q.Gold,
			ArrivalS: float64(q.Arrival.Round(time.Microsecond)/time.Microsecond) / 1e6,
			Experts:  make([]jsonlExpert, len(q.Experts)),
		}
		for i, c := range q.Experts {
			je := jsonlExpert{Model: c.Model, OutputTokens: jsonPtr(c.OutputTokens), ForwardTokens: jsonPtr(c.ForwardTokens), Answer: c.Answer}
			if c.InputTokens != q.PromptTokens {
				je.InputTokens = jsonPtr(c.InputTokens)
			}
			jq.Experts[i] = je
		}
		if a := q.Aggregator; a.Model != "" {
			jq.Aggregator = &jsonlAggregator{Model: a.Model, InputTokens: jsonPtr(a.InputTokens), OutputTokens: jsonPtr(a.OutputTokens), Answer: a.Answer}
		}
		if err := enc.Encode(&jq); err != nil {
			return fmt.Errorf("writing JSONL: query %d: %w", q.ID, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing JSONL: %w", err)
	}
	return nil
}

func jsonPtr[T any](v T) *T { return &v }

// ReadJSONL reads a workload in the JSONL format. The workload is named after the file
// (its base name without ".jsonl").
func ReadJSONL(path string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading workload: %w", err)
	}
	defer f.Close()
	return DecodeJSONL(path, f)
}

// DecodeJSONL reads a workload in the JSONL format from r; name is used in error messages
// ("name:line: field: problem") and, without its directory and ".jsonl", as the workload's
// name.
func DecodeJSONL(name string, r io.Reader) (*Workload, error) {
	wl := &Workload{Name: strings.TrimSuffix(filepath.Base(name), ".jsonl")}
	br := bufio.NewReader(r)
	k, kLine := 0, 0
	for lineNo := 1; ; lineNo++ {
		line, readErr := br.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, lineNo, readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			q, err := decodeQueryLine(line, len(wl.Queries))
			if err != nil {
				var se *syntaxError
				if errors.As(err, &se) && se.column > 0 {
					return nil, fmt.Errorf("%s:%d:%d: %w", name, lineNo, se.column, err)
				}
				return nil, fmt.Errorf("%s:%d: %w", name, lineNo, err)
			}
			if k == 0 {
				k, kLine = len(q.Experts), lineNo
			} else if len(q.Experts) != k {
				return nil, fmt.Errorf("%s:%d: experts: %d expert calls, but line %d has %d: every query has the same k", name, lineNo, len(q.Experts), kLine, k)
			}
			setCallIDs(q, k)
			wl.Queries = append(wl.Queries, *q)
		}
		if readErr != nil {
			break
		}
	}
	if len(wl.Queries) == 0 {
		return nil, fmt.Errorf("%s: no queries", name)
	}
	return wl, nil
}

// setCallIDs fills the call IDs, query numbers and stages that the format leaves implicit.
func setCallIDs(q *Query, k int) {
	for i := range q.Experts {
		c := &q.Experts[i]
		c.ID, c.Query, c.Stage = q.ID*(k+1)+i, q.ID, StageExpert
	}
	a := &q.Aggregator
	a.ID, a.Query, a.Stage = q.ID*(k+1)+k, q.ID, StageAggregator
}

// syntaxError is malformed JSON at a 1-based column of a line (0 = unknown).
type syntaxError struct {
	column int64
	msg    string
}

func (e *syntaxError) Error() string { return "malformed JSON: " + e.msg }

// fieldError is a problem with one field of a JSONL line.
func fieldError(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// decodeQueryLine parses and checks one line; want is the id the line must carry.
func decodeQueryLine(line []byte, want int) (*Query, error) {
	// Syntax first, with the column of the problem.
	var raw json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, &syntaxError{column: se.Offset, msg: se.Error()}
		}
		return nil, &syntaxError{msg: err.Error()}
	}
	if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
		column := int64(len(line)-len(bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n"))) + 1
		return nil, &syntaxError{column: column, msg: "more after the query's object"}
	}
	var jq jsonlQuery
	if err := decodeStrict(raw, "", &jq); err != nil {
		return nil, err
	}
	if jq.ID == nil {
		return nil, fieldError("id", "missing")
	}
	if *jq.ID != want {
		return nil, fieldError("id", "want %d, got %d: ids run 0, 1, 2, ... in line order", want, *jq.ID)
	}
	if jq.PromptTokens == nil {
		return nil, fieldError("prompt_tokens", "missing")
	}
	if *jq.PromptTokens <= 0 {
		return nil, fieldError("prompt_tokens", "must be positive, got %d", *jq.PromptTokens)
	}
	if !(jq.ArrivalS >= 0 && jq.ArrivalS <= MaxArrival.Seconds()) {
		return nil, fieldError("arrival_s", "must be in [0, %g] seconds, got %g", MaxArrival.Seconds(), jq.ArrivalS)
	}
	if len(jq.Experts) == 0 {
		return nil, fieldError("experts", "missing: every query needs at least one expert call")
	}
	q := &Query{
		ID: *jq.ID, Dataset: jq.Dataset, Category: jq.Category, PromptTokens: *jq.PromptTokens, Gold: jq.Gold,
		Arrival: time.Duration(math.Round(jq.ArrivalS*1e6)) * time.Microsecond,
		Experts: make([]Call, len(jq.Experts)),
	}
	for i, je := range jq.Experts {
		field := func(name string) string { return fmt.Sprintf("experts[%d].%s", i, name) }
		c := Call{Model: je.Model, InputTokens: q.PromptTokens, Answer: je.Answer}
		if c.Model == "" {
			return nil, fieldError(field("model"), "missing")
		}
		if je.OutputTokens == nil {
			return nil, fieldError(field("output_tokens"), "missing")
		}
		if c.OutputTokens = *je.OutputTokens; c.OutputTokens <= 0 {
			return nil, fieldError(field("output_tokens"), "must be positive, got %d", c.OutputTokens)
		}
		c.ForwardTokens = c.OutputTokens
		if je.ForwardTokens != nil {
			if c.ForwardTokens = *je.ForwardTokens; c.ForwardTokens < 0 || c.ForwardTokens > c.OutputTokens {
				return nil, fieldError(field("forward_tokens"), "must be in [0, output_tokens = %d], got %d", c.OutputTokens, c.ForwardTokens)
			}
		}
		if je.InputTokens != nil {
			if c.InputTokens = *je.InputTokens; c.InputTokens <= 0 {
				return nil, fieldError(field("input_tokens"), "must be positive, got %d", c.InputTokens)
			}
		}
		q.Experts[i] = c
	}
	if ja := jq.Aggregator; ja != nil {
		switch {
		case ja.Model == "":
			return nil, fieldError("aggregator.model", "missing")
		case ja.InputTokens == nil:
			return nil, fieldError("aggregator.input_tokens", "missing")
		case *ja.InputTokens <= 0:
			return nil, fieldError("aggregator.input_tokens", "must be positive, got %d", *ja.InputTokens)
		case ja.OutputTokens == nil:
			return nil, fieldError("aggregator.output_tokens", "missing")
		case *ja.OutputTokens <= 0:
			return nil, fieldError("aggregator.output_tokens", "must be positive, got %d", *ja.OutputTokens)
		}
		q.Aggregator = Call{Model: ja.Model, InputTokens: *ja.InputTokens, OutputTokens: *ja.OutputTokens, Answer: ja.Answer}
	}
	return q, nil
}

// decodeStrict decodes one JSON object into v (a pointer to a struct with json tags) with
// DisallowUnknownFields, and names the offending field (as a path below prefix) of an unknown
// field or a wrong type. Nested objects and arrays of objects are checked field by field, so
// that "experts[1].outptu_tokens" is named exactly.
func decodeStrict(data []byte, prefix string, v any) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return fieldError(orTop(prefix), "want a JSON object, got %s", jsonKind(data))
	}
	names := jsonFieldNames(v)
	keys := make([]string, 0, len(fields))
	for key := range fields {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if !slices.Contains(names, key) {
			return fieldError(jsonPath(prefix, key), "unknown field (known: %s)", strings.Join(names, ", "))
		}
	}
	// Check every field's type on its own to name it, then decode the whole object strictly.
	for _, key := range keys {
		if err := checkFieldType(v, key, fields[key], jsonPath(prefix, key)); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fieldError(orTop(prefix), "%v", err)
	}
	return nil
}

// checkFieldType decodes one field's value on its own, recursing into the JSONL format's
// nested objects, and reports a type mismatch by field path.
func checkFieldType(v any, key string, value json.RawMessage, path string) error {
	switch v.(type) {
	case *jsonlQuery:
		switch key {
		case "experts":
			var items []json.RawMessage
			if err := json.Unmarshal(value, &items); err != nil {
				return fieldError(path, "want an array of expert calls, got %s", jsonKind(value))
			}
			for i, item := range items {
				if err := decodeStrict(item, fmt.Sprintf("%s[%d]", path, i), &jsonlExpert{}); err != nil {
					return err
				}
			}
			return nil
		case "aggregator":
			if string(bytes.TrimSpace(value)) == "null" {
				return nil
			}
			return decodeStrict(value, path, &jsonlAggregator{})
		}
	}
	target := fieldTarget(key)
	if target == nil {
		return nil
	}
	if err := json.Unmarshal(value, target); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fieldError(path, "want %s, got %s", kindName(te.Type.String()), te.Value)
		}
		return fieldError(path, "%v", err)
	}
	return nil
}

// fieldTarget returns a fresh value of the type of the JSONL field named key (nil for the
// nested objects, which are checked field by field).
func fieldTarget(key string) any {
	switch key {
	case "id", "prompt_tokens", "input_tokens", "output_tokens", "forward_tokens":
		return new(int)
	case "dataset", "category", "gold", "model", "answer":
		return new(string)
	case "arrival_s":
		return new(float64)
	}
	return nil
}

func kindName(goType string) string {
	switch goType {
	case "int", "*int":
		return "an integer"
	case "string":
		return "a string"
	case "float64":
		return "a number"
	}
	return goType
}

// jsonFieldNames lists the JSON names a JSONL record type accepts, in format order.
func jsonFieldNames(v any) []string {
	switch v.(type) {
	case *jsonlQuery:
		return []string{"id", "dataset", "category", "prompt_tokens", "gold", "arrival_s", "experts", "aggregator"}
	case *jsonlExpert:
		return []string{"model", "input_tokens", "output_tokens", "forward_tokens", "answer"}
	case *jsonlAggregator:
		return []string{"model", "input_tokens", "output_tokens", "answer"}
	}
	return nil
}

func jsonKind(data []byte) string {
	s := bytes.TrimSpace(data)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func jsonPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func orTop(prefix string) string {
	if prefix == "" {
		return "query"
	}
	return prefix
}

// Validate checks the workload's invariants, the ones ReadJSONL enforces on input: at least
// one query, query IDs 0, 1, 2, ... in order, the same k >= 1 expert calls per query, call IDs,
// query numbers and stages as Call.ID documents, positive token counts, forwarded tokens
// within the output, and non-negative arrivals.
func (w *Workload) Validate() error {
	if len(w.Queries) == 0 {
		return fmt.Errorf("workload %q: no queries", w.Name)
	}
	k := w.ExpertsPerQuery()
	for qi := range w.Queries {
		q := &w.Queries[qi]
		fail := func(format string, args ...any) error {
			return fmt.Errorf("workload %q: query %d: %s", w.Name, qi, fmt.Sprintf(format, args...))
		}
		switch {
		case q.ID != qi:
			return fail("id is %d: query ids run 0, 1, 2, ... in order", q.ID)
		case len(q.Experts) == 0:
			return fail("no expert calls")
		case len(q.Experts) != k:
			return fail("%d expert calls, but query 0 has %d: every query has the same k", len(q.Experts), k)
		case q.PromptTokens <= 0:
			return fail("prompt tokens must be positive, got %d", q.PromptTokens)
		case q.Arrival < 0 || q.Arrival > MaxArrival:
			return fail("arrival %v is outside [0, %v]", q.Arrival, MaxArrival)
		}
		for i, c := range q.Experts {
			switch {
			case c.ID != qi*(k+1)+i || c.Query != qi || c.Stage != StageExpert:
				return fail("expert call %d has id %d, query %d, stage %v: want id %d, query %d, stage expert", i, c.ID, c.Query, c.Stage, qi*(k+1)+i, qi)
			case c.Model == "":
				return fail("expert call %d has no model", i)
			case c.InputTokens <= 0 || c.OutputTokens <= 0:
				return fail("expert call %d: input (%d) and output (%d) tokens must be positive", i, c.InputTokens, c.OutputTokens)
			case c.ForwardTokens < 0 || c.ForwardTokens > c.OutputTokens:
				return fail("expert call %d: forward tokens %d outside [0, output tokens = %d]", i, c.ForwardTokens, c.OutputTokens)
			}
		}
		if a := q.Aggregator; a.Model != "" {
			switch {
			case a.ID != qi*(k+1)+k || a.Query != qi || a.Stage != StageAggregator:
				return fail("aggregator call has id %d, query %d, stage %v: want id %d, query %d, stage aggregator", a.ID, a.Query, a.Stage, qi*(k+1)+k, qi)
			case a.InputTokens <= 0 || a.OutputTokens <= 0:
				return fail("aggregator call: input (%d) and output (%d) tokens must be positive", a.InputTokens, a.OutputTokens)
			}
		}
	}
	return nil
}
