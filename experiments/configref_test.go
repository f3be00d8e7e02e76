package experiments_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
)

// docs/config.md is the reference ConfigReference generates from the code and the files
// under experiments/: it is current (go test ./experiments -run TestConfigReference -update
// rewrites it, with the golden files), and it lists every key the experiment files use.
func TestConfigReference(t *testing.T) {
	var files [][2]string
	for _, pattern := range []string{"quickstart.toml", "examples/*.toml", "paper/*.toml"} {
		paths, err := filepath.Glob(pattern)
		require.NoError(t, err)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			files = append(files, [2]string{p, string(data)})
		}
	}
	require.NotEmpty(t, files)
	got, err := experiments.ConfigReference(files)
	require.NoError(t, err)
	path := filepath.Join("..", "docs", "config.md")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "docs/config.md is out of date: go test ./experiments -run TestConfigReference -update")
	for _, key := range []string{"`[cluster]`", "`[[cluster.group]]`", "`[workload.routing]`", "`[[policy]]`", "`[policy.early_exit]`",
		"| `arrival_rate` | float |", "| `solver_time_limit` | duration |", "## Distributions"} {
		assert.Contains(t, got, key)
	}
}
