package traces_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/mosaic-sched/mosaic/traces"
)

// FuzzJSONL reads arbitrary workload files: nothing may panic, a rejected file's error names
// the file, and an accepted workload describes itself (Stats) and writes back to a file that
// reads as the same queries.
//
//	go test ./traces -run '^$' -fuzz FuzzJSONL -fuzztime 1000000x -fuzzminimizetime 100x
func FuzzJSONL(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"id":0,"dataset":"mmlu-pro","category":"biology","gold":"G","arrival_s":1.5,"calls":[` +
			`{"role":"expert","model":"QwenR1","prompt_tokens":220,"prefix_tokens":160,"output_tokens":3012,"answer":"G"},` +
			`{"role":"expert","model":"gemma","prompt_tokens":220,"prefix_tokens":160,"output_tokens":180,"answer":"C"},` +
			`{"role":"aggregator","model":"LlamaR1","prompt_tokens":310,"prefix_tokens":160,"inputs":[{"from":0,"tokens":310},{"from":1,"tokens":180}],"input_tokens":800,"output_tokens":2100,"answer":"G","gate":true}]}`,
		`{"v":2,"id":0,"calls":[{"model":"m","prompt_tokens":5,"output_tokens":7},{"tool_s":0.5,"inputs":[{"from":0,"tokens":0}]}]}`,
		`{"id":0,"dataset":"mmlu-pro","category":"biology","prompt_tokens":220,"gold":"G","arrival_s":1.5,` +
			`"experts":[{"model":"QwenR1","output_tokens":3012,"forward_tokens":310,"answer":"G"},{"model":"gemma","input_tokens":99,"output_tokens":180,"answer":"C"}],` +
			`"aggregator":{"model":"LlamaR1","input_tokens":800,"output_tokens":2100,"answer":"G"}}` + "\n" + `{"id":1,"prompt_tokens":5,"experts":[{"model":"m","output_tokens":7}]}`,
		`{"v":2,"id":0,"calls":[{"model":"m","prompt_tokens":5,"output_tokens":7,"inputs":[{"from":1}]},{"model":"m","prompt_tokens":1,"output_tokens":1,"inputs":[{"from":0}]}]}`,
		`{"v":3}`, "\n\n", `{"v":2,"id":0,"calls":[]}`,
	} {
		f.Add([]byte(s))
	}
	const name = "fuzz/w.jsonl"
	f.Fuzz(func(t *testing.T, data []byte) {
		wl, err := traces.DecodeJSONL(name, bytes.NewReader(data))
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		_ = traces.Stats(wl)
		var buf bytes.Buffer
		if err := traces.WriteJSONL(&buf, wl); err != nil {
			t.Fatalf("an accepted workload does not write: %v", err)
		}
		back, err := traces.DecodeJSONL(name, &buf)
		if err != nil {
			t.Fatalf("the written workload does not read back: %v\n%s", err, buf.String())
		}
		if !reflect.DeepEqual(wl.Queries, back.Queries) {
			t.Fatalf("the written workload reads as other queries:\n%s", buf.String())
		}
	})
}
