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

// The workload JSONL format (version 2) holds one query per line, in query order; each query
// is a graph of calls:
//
//	{"v":2,"id":0,"dataset":"mmlu-pro","category":"biology","gold":"G","arrival_s":0,"calls":[
//	 {"role":"expert","model":"QwenR1","prompt_tokens":220,"prefix_tokens":160,"output_tokens":3012,"answer":"G"},
//	 {"role":"expert","model":"Gemma","prompt_tokens":220,"prefix_tokens":160,"output_tokens":180,"answer":"C"},
//	 {"role":"aggregator","model":"LlamaR1","prompt_tokens":370,"prefix_tokens":160,
//	  "inputs":[{"from":0,"tokens":310},{"from":1,"tokens":180}],"input_tokens":860,
//	  "output_tokens":2100,"answer":"G","gate":true}]}
//
// Query fields:
//   - v (required, 2): the format version.
//   - id (required): the query's position, 0, 1, 2, ... in line order.
//   - dataset, category, gold (optional strings): "" when absent; gold "" means unknown.
//   - arrival_s (optional, >= 0, default 0): arrival time in seconds, microsecond resolution.
//   - calls (required, non-empty): the query's calls; "from" below is an index into this list.
//
// Call fields:
//   - model: the experiment's model that serves the call; absent for a tool step, which has
//     tool_s instead (> 0 seconds: it takes that long and no worker).
//   - role (optional string, default "call", or "tool" for a tool step): a label for reports.
//   - prompt_tokens (>= 0, default 0): the call's own prompt (template and question);
//     prefix_tokens (0 <= prefix_tokens <= prompt_tokens, default 0): how many of them lead the
//     prompt as the query's shared prefix (the question).
//   - inputs (optional): the calls whose responses the prompt carries, in order, each
//     {"from": index, "tokens": n} with 0 <= n <= that call's output_tokens.
//   - input_tokens (optional): the whole prompt; if given it must equal prompt_tokens plus the
//     inputs' tokens, and an LLM call's prompt must not be empty.
//   - output_tokens (> 0 for an LLM call).
//   - answer (optional string, "" = none extracted).
//   - gate (optional, default false): the aggregation rule may skip the call once its inputs
//     are done (it needs inputs).
//
// The graph must be acyclic (no call reads itself, directly or through others), every input
// must name another call of the query at most once. A call's layer is its depth: 0 without
// inputs, else one more than its deepest input. Calls are numbered across the workload in
// line and list order (Call.ID). Answers read from a file are fixed: a gate that skips an
// upstream call does not change what later calls answer (generated workloads derive them).
//
// Version 1 (one line per MoA query: "prompt_tokens", k "experts" with "forward_tokens" and an
// optional "aggregator" with "input_tokens") is still read, as the two-layer graph k -> 1 with
// a gated aggregator; Workload.Format says which version a file was; `mosaic trace convert`
// rewrites it as version 2.
//
// Reading is strict: unknown fields, missing required fields, wrong types and impossible
// values, a cycle, an unknown input, a self-edge, a call without a model or duration, and
// inputs that do not add up are errors naming "file:line: field"; blank lines are allowed
// anywhere.

// MaxArrival is the latest arrival time a JSONL workload may carry (about 31.7 years), so that
// arrivals convert to time.Duration at microsecond resolution without loss.
const MaxArrival = 1e9 * time.Second

// FormatVersion is the JSONL version WriteJSONL writes.
const FormatVersion = 2

type jsonlQuery struct {
	V        *int        `json:"v"`
	ID       *int        `json:"id"`
	Dataset  string      `json:"dataset,omitempty"`
	Category string      `json:"category,omitempty"`
	Gold     string      `json:"gold,omitempty"`
	ArrivalS float64     `json:"arrival_s"`
	Calls    []jsonlCall `json:"calls"`
}

type jsonlCall struct {
	Role         string       `json:"role,omitempty"`
	Model        string       `json:"model,omitempty"`
	ToolS        float64      `json:"tool_s,omitempty"`
	PromptTokens int          `json:"prompt_tokens,omitempty"`
	PrefixTokens int          `json:"prefix_tokens,omitempty"`
	Inputs       []jsonlInput `json:"inputs,omitempty"`
	InputTokens  *int         `json:"input_tokens,omitempty"`
	OutputTokens *int         `json:"output_tokens,omitempty"`
	Answer       string       `json:"answer,omitempty"`
	Gate         bool         `json:"gate,omitempty"`
	Confidence   float64      `json:"confidence,omitempty"`
}

type jsonlInput struct {
	From   *int `json:"from"`
	Tokens *int `json:"tokens"`
}

// Version 1 lines.
type jsonlQueryV1 struct {
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

// WriteJSONL writes the workload in the JSONL format (version 2), one query per line. It first
// checks the workload with Validate, so that what it writes ReadJSONL reads back. Arrivals are
// rounded to microseconds.
func WriteJSONL(w io.Writer, wl *Workload) error {
	if err := wl.Validate(); err != nil {
		return fmt.Errorf("writing JSONL: %w", err)
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	version := FormatVersion
	for qi := range wl.Queries {
		q := &wl.Queries[qi]
		jq := jsonlQuery{
			V: &version, ID: jsonPtr(q.ID), Dataset: q.Dataset, Category: q.Category, Gold: q.Gold,
			ArrivalS: float64(q.Arrival.Round(time.Microsecond)/time.Microsecond) / 1e6,
			Calls:    make([]jsonlCall, len(q.Calls)),
		}
		for i := range q.Calls {
			c := &q.Calls[i]
			jc := jsonlCall{Role: c.Role, Model: c.Model, PromptTokens: c.PromptTokens, PrefixTokens: c.PrefixTokens,
				Answer: c.Answer, Gate: c.Gate, Confidence: c.Confidence}
			if c.IsTool() {
				jc.ToolS = float64(c.Tool.Round(time.Microsecond)/time.Microsecond) / 1e6
			} else {
				jc.OutputTokens = jsonPtr(c.OutputTokens)
				if len(c.Inputs) > 0 {
					jc.InputTokens = jsonPtr(c.InputTokens)
				}
			}
			for _, in := range c.Inputs {
				jc.Inputs = append(jc.Inputs, jsonlInput{From: jsonPtr(in.From), Tokens: jsonPtr(in.Tokens)})
			}
			jq.Calls[i] = jc
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

// ReadJSONL reads a workload in the JSONL format (version 2, or version 1 converted). The
// workload is named after the file (its base name without ".jsonl").
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
// name. Every line must be of one version; Workload.Format says which.
func DecodeJSONL(name string, r io.Reader) (*Workload, error) {
	wl := &Workload{Name: strings.TrimSuffix(filepath.Base(name), ".jsonl")}
	br := bufio.NewReader(r)
	versionLine := 0
	nextID := 0
	for lineNo := 1; ; lineNo++ {
		line, readErr := br.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, lineNo, readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			q, version, err := decodeQueryLine(line, len(wl.Queries))
			if err == nil {
				switch {
				case wl.Format == 0:
					wl.Format, versionLine = version, lineNo
				case version != wl.Format:
					err = fieldError("v", "a version %d line, but line %d is version %d: a file holds one version", version, versionLine, wl.Format)
				}
			}
			if err == nil {
				if err = q.finish(nextID); err != nil && version == 1 {
					err = fmt.Errorf("converted from version 1: %w", err)
				}
			}
			if err != nil {
				var se *syntaxError
				if errors.As(err, &se) && se.column > 0 {
					return nil, fmt.Errorf("%s:%d:%d: %w", name, lineNo, se.column, err)
				}
				return nil, fmt.Errorf("%s:%d: %w", name, lineNo, err)
			}
			nextID += len(q.Calls)
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

// decodeQueryLine parses and checks one line; want is the id the line must carry. It returns
// the query (its graph not yet finished) and the line's format version.
func decodeQueryLine(line []byte, want int) (*Query, int, error) {
	// Syntax first, with the column of the problem.
	var raw json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, 0, &syntaxError{column: se.Offset, msg: se.Error()}
		}
		return nil, 0, &syntaxError{msg: err.Error()}
	}
	if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
		column := int64(len(line)-len(bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n"))) + 1
		return nil, 0, &syntaxError{column: column, msg: "more after the query's object"}
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil || probe == nil {
		return nil, 0, fieldError("query", "want a JSON object, got %s", jsonKind(raw))
	}
	_, hasV := probe["v"]
	_, hasExperts := probe["experts"]
	if !hasV && hasExperts {
		q, err := decodeV1(raw, want)
		return q, 1, err
	}
	var jq jsonlQuery
	if err := decodeStrict(raw, "", &jq); err != nil {
		return nil, 0, err
	}
	switch {
	case jq.V == nil:
		return nil, 0, fieldError("v", "missing: a version 2 line carries \"v\":2 (a version 1 line has \"experts\")")
	case *jq.V != FormatVersion:
		return nil, 0, fieldError("v", "version %d is not known (this program reads 1 and 2)", *jq.V)
	case jq.ID == nil:
		return nil, 0, fieldError("id", "missing")
	case *jq.ID != want:
		return nil, 0, fieldError("id", "want %d, got %d: ids run 0, 1, 2, ... in line order", want, *jq.ID)
	case !(jq.ArrivalS >= 0 && jq.ArrivalS <= MaxArrival.Seconds()):
		return nil, 0, fieldError("arrival_s", "must be in [0, %g] seconds, got %g", MaxArrival.Seconds(), jq.ArrivalS)
	case len(jq.Calls) == 0:
		return nil, 0, fieldError("calls", "missing: every query needs at least one call")
	}
	q := &Query{ID: *jq.ID, Dataset: jq.Dataset, Category: jq.Category, Gold: jq.Gold,
		Arrival: time.Duration(math.Round(jq.ArrivalS*1e6)) * time.Microsecond, Calls: make([]Call, len(jq.Calls))}
	for i, jc := range jq.Calls {
		field := func(name string) string { return fmt.Sprintf("calls[%d].%s", i, name) }
		c := Call{Role: jc.Role, Model: jc.Model, PromptTokens: jc.PromptTokens, PrefixTokens: jc.PrefixTokens, Answer: jc.Answer, Gate: jc.Gate,
			Confidence: jc.Confidence}
		if !(jc.Confidence >= 0 && jc.Confidence <= 1) {
			return nil, 0, fieldError(field("confidence"), "must be in [0, 1], got %g", jc.Confidence)
		}
		if jc.Model == "" {
			if jc.ToolS == 0 {
				return nil, 0, fieldError(field("model"), "missing: an LLM call names its model, a tool step its duration (tool_s)")
			}
			if !(jc.ToolS > 0 && jc.ToolS <= MaxArrival.Seconds()) {
				return nil, 0, fieldError(field("tool_s"), "must be in (0, %g] seconds, got %g", MaxArrival.Seconds(), jc.ToolS)
			}
			c.Tool = max(time.Microsecond, time.Duration(math.Round(jc.ToolS*1e6))*time.Microsecond)
			if c.Role == "" {
				c.Role = RoleTool
			}
			if jc.OutputTokens != nil || jc.InputTokens != nil {
				return nil, 0, fieldError(field("output_tokens"), "a tool step has no tokens")
			}
		} else {
			if jc.ToolS != 0 {
				return nil, 0, fieldError(field("tool_s"), "an LLM call (model %q) takes no tool time", jc.Model)
			}
			if jc.OutputTokens == nil {
				return nil, 0, fieldError(field("output_tokens"), "missing")
			}
			if c.OutputTokens = *jc.OutputTokens; c.OutputTokens <= 0 {
				return nil, 0, fieldError(field("output_tokens"), "must be positive, got %d", c.OutputTokens)
			}
			if c.Role == "" {
				c.Role = "call"
			}
		}
		if jc.PromptTokens < 0 {
			return nil, 0, fieldError(field("prompt_tokens"), "must not be negative, got %d", jc.PromptTokens)
		}
		for j, in := range jc.Inputs {
			switch {
			case in.From == nil:
				return nil, 0, fieldError(fmt.Sprintf("calls[%d].inputs[%d].from", i, j), "missing")
			case in.Tokens == nil:
				return nil, 0, fieldError(fmt.Sprintf("calls[%d].inputs[%d].tokens", i, j), "missing")
			}
			c.Inputs = append(c.Inputs, Input{From: *in.From, Tokens: *in.Tokens})
		}
		if jc.InputTokens != nil {
			if *jc.InputTokens <= 0 {
				return nil, 0, fieldError(field("input_tokens"), "must be positive, got %d", *jc.InputTokens)
			}
			c.InputTokens = *jc.InputTokens
		}
		q.Calls[i] = c
	}
	return q, FormatVersion, nil
}

// decodeV1 reads a version 1 line as the two-layer graph: k expert calls, then (if given) one
// gated aggregator call that reads every expert's forwarded tokens.
func decodeV1(raw []byte, want int) (*Query, error) {
	var jq jsonlQueryV1
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
	k := len(jq.Experts)
	q := &Query{
		ID: *jq.ID, Dataset: jq.Dataset, Category: jq.Category, Gold: jq.Gold,
		Arrival: time.Duration(math.Round(jq.ArrivalS*1e6)) * time.Microsecond,
		Calls:   make([]Call, k, k+1),
	}
	inputs := make([]Input, k)
	forwarded := 0
	for i, je := range jq.Experts {
		field := func(name string) string { return fmt.Sprintf("experts[%d].%s", i, name) }
		c := Call{Role: RoleExpert, Model: je.Model, PromptTokens: *jq.PromptTokens, Answer: je.Answer}
		if c.Model == "" {
			return nil, fieldError(field("model"), "missing")
		}
		if je.OutputTokens == nil {
			return nil, fieldError(field("output_tokens"), "missing")
		}
		if c.OutputTokens = *je.OutputTokens; c.OutputTokens <= 0 {
			return nil, fieldError(field("output_tokens"), "must be positive, got %d", c.OutputTokens)
		}
		forward := c.OutputTokens
		if je.ForwardTokens != nil {
			if forward = *je.ForwardTokens; forward < 0 || forward > c.OutputTokens {
				return nil, fieldError(field("forward_tokens"), "must be in [0, output_tokens = %d], got %d", c.OutputTokens, forward)
			}
		}
		if je.InputTokens != nil {
			if c.PromptTokens = *je.InputTokens; c.PromptTokens <= 0 {
				return nil, fieldError(field("input_tokens"), "must be positive, got %d", c.PromptTokens)
			}
		}
		inputs[i] = Input{From: i, Tokens: forward}
		forwarded += forward
		q.Calls[i] = c
	}
	if ja := jq.Aggregator; ja != nil {
		switch {
		case ja.Model == "":
			return nil, fieldError("aggregator.model", "missing")
		case ja.InputTokens == nil:
			return nil, fieldError("aggregator.input_tokens", "missing")
		case *ja.InputTokens <= 0:
			return nil, fieldError("aggregator.input_tokens", "must be positive, got %d", *ja.InputTokens)
		case *ja.InputTokens < forwarded:
			return nil, fieldError("aggregator.input_tokens", "%d is less than the %d tokens the experts forward", *ja.InputTokens, forwarded)
		case ja.OutputTokens == nil:
			return nil, fieldError("aggregator.output_tokens", "missing")
		case *ja.OutputTokens <= 0:
			return nil, fieldError("aggregator.output_tokens", "must be positive, got %d", *ja.OutputTokens)
		}
		q.Calls = append(q.Calls, Call{Role: RoleAggregator, Model: ja.Model, PromptTokens: *ja.InputTokens - forwarded,
			Inputs: inputs, OutputTokens: *ja.OutputTokens, Answer: ja.Answer, Gate: true})
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
		if key == "calls" {
			var items []json.RawMessage
			if err := json.Unmarshal(value, &items); err != nil {
				return fieldError(path, "want an array of calls, got %s", jsonKind(value))
			}
			for i, item := range items {
				if err := decodeStrict(item, fmt.Sprintf("%s[%d]", path, i), &jsonlCall{}); err != nil {
					return err
				}
			}
			return nil
		}
	case *jsonlCall:
		if key == "inputs" {
			var items []json.RawMessage
			if err := json.Unmarshal(value, &items); err != nil {
				return fieldError(path, "want an array of inputs, got %s", jsonKind(value))
			}
			for i, item := range items {
				if err := decodeStrict(item, fmt.Sprintf("%s[%d]", path, i), &jsonlInput{}); err != nil {
					return err
				}
			}
			return nil
		}
	case *jsonlQueryV1:
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
	case "v", "id", "prompt_tokens", "prefix_tokens", "input_tokens", "output_tokens", "forward_tokens", "from", "tokens":
		return new(int)
	case "dataset", "category", "gold", "model", "answer", "role":
		return new(string)
	case "arrival_s", "tool_s":
		return new(float64)
	case "gate":
		return new(bool)
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
	case "bool":
		return "true or false"
	}
	return goType
}

// jsonFieldNames lists the JSON names a JSONL record type accepts, in format order.
func jsonFieldNames(v any) []string {
	switch v.(type) {
	case *jsonlQuery:
		return []string{"v", "id", "dataset", "category", "gold", "arrival_s", "calls"}
	case *jsonlCall:
		return []string{"role", "model", "tool_s", "prompt_tokens", "prefix_tokens", "inputs", "input_tokens", "output_tokens", "answer", "gate"}
	case *jsonlInput:
		return []string{"from", "tokens"}
	case *jsonlQueryV1:
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
