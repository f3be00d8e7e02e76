package traces_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

func TestJSONLRoundTrip(t *testing.T) {
	spec := paperSpec(t)
	spec.Queries, spec.ArrivalRate = 300, 3
	wl := generate(t, spec, 4)
	wl.Name = "paper"
	wl.Queries[5].Gold = "" // unknown gold
	wl.Queries[6].Experts[1].Answer = ""
	wl.Queries[7].Experts[0].InputTokens = 999 // an expert prompt unlike the query's
	wl.Queries[8].Aggregator.Model = ""        // no aggregator call
	wl.Queries[8].Aggregator.InputTokens, wl.Queries[8].Aggregator.OutputTokens, wl.Queries[8].Aggregator.Answer = 0, 0, ""

	data := jsonl(t, wl)
	path := filepath.Join(t.TempDir(), "paper.jsonl")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	got, err := traces.ReadJSONL(path)
	require.NoError(t, err)
	assert.Equal(t, wl, got)
	assert.Equal(t, data, jsonl(t, got), "writing what was read gives the same bytes")
	assert.Equal(t, 300, bytes.Count(data, []byte("\n")))
}

func TestJSONLFormat(t *testing.T) {
	wl := &traces.Workload{Name: "w", Queries: []traces.Query{{
		ID: 0, Dataset: "mmlu-pro", Category: "biology", PromptTokens: 220, Gold: "G", Arrival: 1500 * time.Millisecond,
		Experts: []traces.Call{
			{ID: 0, Query: 0, Model: "QwenR1", InputTokens: 220, OutputTokens: 3012, ForwardTokens: 310, Answer: "G"},
			{ID: 1, Query: 0, Model: "gemma", InputTokens: 220, OutputTokens: 180, ForwardTokens: 180, Answer: "C"},
		},
		Aggregator: traces.Call{ID: 2, Query: 0, Stage: traces.StageAggregator, Model: "LlamaR1", InputTokens: 800, OutputTokens: 2100, Answer: "G"},
	}}}
	want := `{"id":0,"dataset":"mmlu-pro","category":"biology","prompt_tokens":220,"gold":"G","arrival_s":1.5,` +
		`"experts":[{"model":"QwenR1","output_tokens":3012,"forward_tokens":310,"answer":"G"},{"model":"gemma","output_tokens":180,"forward_tokens":180,"answer":"C"}],` +
		`"aggregator":{"model":"LlamaR1","input_tokens":800,"output_tokens":2100,"answer":"G"}}` + "\n"
	assert.Equal(t, want, string(jsonl(t, wl)))

	// The minimal form: optional fields left out, blank lines anywhere.
	got, err := traces.DecodeJSONL("dir/min.jsonl", strings.NewReader("\n"+`{"id":0,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7}]}`+"\n\n  \n"))
	require.NoError(t, err)
	assert.Equal(t, "min", got.Name)
	require.Len(t, got.Queries, 1)
	assert.Equal(t, traces.Call{ID: 0, Query: 0, Model: "m", InputTokens: 5, OutputTokens: 7, ForwardTokens: 7}, got.Queries[0].Experts[0])
	assert.Equal(t, traces.Call{ID: 1, Query: 0, Stage: traces.StageAggregator}, got.Queries[0].Aggregator)
	assert.False(t, got.Queries[0].HasAggregator())
}

// Bad input names the file, the 1-based line and the field.
func TestJSONLErrors(t *testing.T) {
	const (
		q0 = `{"id":0,"prompt_tokens":100,"experts":[{"model":"a","output_tokens":10,"answer":"A"},{"model":"b","output_tokens":20,"answer":"B"}]}`
		q1 = `{"id":1,"prompt_tokens":100,"experts":[{"model":"a","output_tokens":10},{"model":"b","output_tokens":20}],"aggregator":{"model":"c","input_tokens":130,"output_tokens":50}}`
	)
	for _, tc := range []struct {
		name, input, want string
	}{
		{"malformed JSON at line 3", q0 + "\n" + q1 + "\n" + `{"id":2,"prompt_tokens":100,"experts":[}` + "\n", "w.jsonl:3:40: malformed JSON: invalid character '}'"},
		{"truncated line", q0 + "\n" + `{"id":1,`, "w.jsonl:2: malformed JSON: unexpected EOF"},
		{"two objects on a line", `{"id":0} {}`, "w.jsonl:1:10: malformed JSON: more after the query's object"},
		{"not an object", "[1,2]\n", "w.jsonl:1: query: want a JSON object, got an array"},
		{"unknown field", q0 + "\n" + strings.Replace(q1, `"prompt_tokens"`, `"prompt_tokenz"`, 1), `w.jsonl:2: prompt_tokenz: unknown field (known: id, dataset, category, prompt_tokens, gold, arrival_s, experts, aggregator)`},
		{"unknown expert field", q0 + "\n" + strings.Replace(q1, `{"model":"b","output_tokens"`, `{"model":"b","outptu_tokens"`, 1), "w.jsonl:2: experts[1].outptu_tokens: unknown field"},
		{"unknown aggregator field", q0 + "\n" + strings.Replace(q1, `"input_tokens":130`, `"forward_tokens":130`, 1), "w.jsonl:2: aggregator.forward_tokens: unknown field"},
		{"negative output tokens", q0 + "\n" + strings.Replace(q1, `"output_tokens":20`, `"output_tokens":-20`, 1), "w.jsonl:2: experts[1].output_tokens: must be positive, got -20"},
		{"zero prompt tokens", strings.Replace(q0, `"prompt_tokens":100`, `"prompt_tokens":0`, 1), "w.jsonl:1: prompt_tokens: must be positive, got 0"},
		{"negative aggregator tokens", q0 + "\n" + strings.Replace(q1, `"output_tokens":50`, `"output_tokens":-5`, 1), "w.jsonl:2: aggregator.output_tokens: must be positive, got -5"},
		{"wrong type", strings.Replace(q0, `"output_tokens":10`, `"output_tokens":"ten"`, 1), "w.jsonl:1: experts[0].output_tokens: want an integer, got string"},
		{"fractional tokens", strings.Replace(q0, `"output_tokens":10`, `"output_tokens":1.5`, 1), "w.jsonl:1: experts[0].output_tokens: want an integer, got number 1.5"},
		{"missing id", strings.Replace(q0, `"id":0,`, ``, 1), "w.jsonl:1: id: missing"},
		{"missing output tokens", strings.Replace(q0, `"output_tokens":10,`, ``, 1), "w.jsonl:1: experts[0].output_tokens: missing"},
		{"missing model", strings.Replace(q0, `"model":"a",`, ``, 1), "w.jsonl:1: experts[0].model: missing"},
		{"ids out of order", q0 + "\n\n" + strings.Replace(q1, `"id":1`, `"id":2`, 1), "w.jsonl:3: id: want 1, got 2: ids run 0, 1, 2, ... in line order"},
		{"inconsistent k", q0 + "\n" + `{"id":1,"prompt_tokens":9,"experts":[{"model":"a","output_tokens":10}]}`, "w.jsonl:2: experts: 1 expert calls, but line 1 has 2: every query has the same k"},
		{"no experts", `{"id":0,"prompt_tokens":9,"experts":[]}`, "w.jsonl:1: experts: missing"},
		{"forward beyond output", strings.Replace(q0, `"output_tokens":10,`, `"output_tokens":10,"forward_tokens":11,`, 1), "w.jsonl:1: experts[0].forward_tokens: must be in [0, output_tokens = 10], got 11"},
		{"negative arrival", strings.Replace(q0, `"id":0,`, `"id":0,"arrival_s":-1,`, 1), "w.jsonl:1: arrival_s: must be in [0, 1e+09] seconds, got -1"},
		{"aggregator without input", q0 + "\n" + strings.Replace(q1, `"input_tokens":130,`, ``, 1), "w.jsonl:2: aggregator.input_tokens: missing"},
		{"empty", "\n\n", "w.jsonl: no queries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.DecodeJSONL("w.jsonl", strings.NewReader(tc.input))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestWriteJSONLRefusesInvalidWorkloads(t *testing.T) {
	wl := generate(t, traces.GenSpec{Name: "w", Queries: 3, PromptTokens: traces.Fixed(4), K: 2,
		Experts: []traces.ExpertSpec{{Name: "a", Output: traces.Fixed(3)}}}, 1)
	wl.Queries[1].Experts = wl.Queries[1].Experts[:1]
	var b bytes.Buffer
	assert.ErrorContains(t, traces.WriteJSONL(&b, wl), `writing JSONL: workload "w": query 1: 1 expert calls, but query 0 has 2`)
}

func FuzzDecodeJSONL(f *testing.F) {
	f.Add([]byte(`{"id":0,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7}]}`))
	f.Add([]byte(`{"id":0,"dataset":"d","category":"c","prompt_tokens":220,"gold":"G","arrival_s":0.25,"experts":[{"model":"QwenR1","output_tokens":3012,"forward_tokens":310,"answer":"G"},{"model":"x","input_tokens":9,"output_tokens":1,"answer":""}],"aggregator":{"model":"LlamaR1","input_tokens":1200,"output_tokens":2100,"answer":"G"}}` + "\n\n" +
		`{"id":1,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7},{"model":"m","output_tokens":7}],"aggregator":null}`))
	f.Add([]byte(`{"id":0,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7,"foo":1}]}`))
	f.Add([]byte(`{"id":0,"prompt_tokens":1e400,"experts":"x"}` + "\n[]\nnull\n\"s\"\n"))
	f.Add([]byte(`{"id":0,"arrival_s":999999999.9999995,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		wl, err := traces.DecodeJSONL("f.jsonl", bytes.NewReader(data))
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "f.jsonl:"), "error without the file name: %v", err)
			return
		}
		// What decodes is valid, and survives a round trip unchanged.
		require.NoError(t, wl.Validate())
		var b bytes.Buffer
		require.NoError(t, traces.WriteJSONL(&b, wl))
		again, err := traces.DecodeJSONL("f.jsonl", &b)
		require.NoError(t, err)
		require.Equal(t, wl, again)
	})
}
