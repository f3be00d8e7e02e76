package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replay of real servers whose experiment names no engine preset is told which engine the
// simulated side assumes; one on the emulator, or naming a preset, is not.
func TestSimulatedEngineNote(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		note bool
	}{
		{nil, true}, // the default launch command: vllm serve
		{[]string{"replay.mode=attach"}, true},
		{[]string{"replay.command={mosaic} emulate --listen 127.0.0.1:{port} --gpu {gpu_name} --model {arch}"}, false},
		{[]string{"engine.preset=vllm-v1"}, false},
	} {
		exp, err := loadExperiment([]string{fasterMoAExp}, "", tc.sets)
		require.NoError(t, err)
		res, err := exp.Resolve()
		require.NoError(t, err)
		note := simulatedEngineNote(exp, res)
		if tc.note {
			assert.Contains(t, note, `preset = "vllm-v1"`, tc.sets)
		} else {
			assert.Empty(t, note, tc.sets)
		}
	}
}
