package experiments

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// policyExperiment is a one-model batch experiment whose [engine] table is engine.
func policyExperiment(engine string) string {
	return `name = "t"

[cluster]
gpu = "A100-80GB"
workers = 1

[engine]
` + engine + `

[[model]]
name = "M"
arch = "llama-3-8b"
output_tokens = { dist = "fixed", value = 32 }

[workload]
kind = "batch"
requests = 8
input_tokens = { dist = "fixed", value = 256 }
`
}

// [engine] scheduling_policy selects the engines' scheduling: "fcfs" is the default (left
// empty in the engine configuration, as before the key existed), "priority" reaches the
// simulated engines and replay's servers; anything else, or priority without chunked
// prefill, is an error naming the key.
func TestEngineSchedulingPolicy(t *testing.T) {
	for _, tc := range []struct {
		engine, want, err string
	}{
		{``, "", ""},
		{`scheduling_policy = "fcfs"`, "", ""},
		{`scheduling_policy = "priority"`, sim.SchedulingPriority, ""},
		{`scheduling_policy = "lifo"`, "", `engine.scheduling_policy: unknown value "lifo" (known: fcfs, priority)`},
		{"scheduling_policy = \"priority\"\nchunked_prefill = false\nmax_batched_tokens = 8192", "", "engine.scheduling_policy: \"priority\" follows vLLM V1's scheduler, which needs chunked prefill"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			e, err := Parse("exp.toml", []byte(policyExperiment(tc.engine)))
			require.NoError(t, err)
			r, err := e.Resolve()
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.Models[0].Engine.SchedulingPolicy)
			cfg, err := r.replayConfig()
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Workers[0].Models["M"].SchedulingPolicy, "replay serves the model so")
			rep, err := r.RunBatch()
			require.NoError(t, err)
			assert.Equal(t, 8, rep.Result.Requests)
		})
	}
}

// Ollama has no request priority: a priority engine cannot be replayed on it.
func TestOllamaRefusesPriority(t *testing.T) {
	src := policyExperiment(`scheduling_policy = "priority"`) + `
[replay]
api = "ollama"

[[replay.endpoint]]
worker = 0
url = "http://127.0.0.1:11434"
`
	e, err := Parse("exp.toml", []byte(src))
	require.NoError(t, err)
	r, err := e.Resolve()
	require.NoError(t, err)
	_, err = r.replayConfig()
	assert.ErrorContains(t, err, "replay.api: ollama has no request priority")
}
