package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mosaic online serves an experiment with every online policy at loads against its capacity
// and prints the steady-state table: a row per policy at each load, the load above capacity
// marked overloaded, each seed's sweep in its own folder that mosaic plot reads.
func TestOnlineCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI("online", "--queries", "60", "--min-horizon", "0s", "--loads", "0.5,1.5", "--seeds", "2", "--results", dir,
		"-o", filepath.Join(dir, "table.md"), "../../experiments/examples/agent-dag.toml")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "| experiment | load (rate) | policy | mean e2e (s) | p50 e2e (s) | p99 e2e (s) | p99 TTFT (s) | SLO met | goodput (q/s) | done (q/s) | seeds |")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2+2*9, "a header, and 9 policies at each of 2 loads")
	for _, p := range []string{"round-robin", "data-parallel", "mosaic", "mosaic+sjf", "online", "online+plas", "online+atlas", "plas", "atlas"} {
		assert.Equal(t, 2, strings.Count(out, "| "+p+" |"), p)
	}
	assert.Contains(t, lines[2], "| agent-dag | 0.50 (")
	assert.NotContains(t, lines[2], "overloaded")
	assert.Contains(t, lines[2+9], "| agent-dag | 1.50 (")
	assert.Contains(t, lines[2+9], "overloaded")
	assert.Contains(t, lines[2], "| 1,2 |", "the seeds behind each figure")
	table, err := os.ReadFile(filepath.Join(dir, "table.md"))
	require.NoError(t, err)
	assert.Equal(t, out, string(table))
	for _, seed := range []string{"seed-1", "seed-2"} {
		assert.FileExists(t, filepath.Join(dir, "agent-dag", seed, "summary.csv"))
	}
	code, _, errOut = runCLI("plot", "-o", filepath.Join(dir, "fig"), filepath.Join(dir, "agent-dag", "seed-1"))
	require.Equal(t, 0, code, errOut)
	assert.FileExists(t, filepath.Join(dir, "fig", "latency-load.png"))

	code, _, errOut = runCLI("online", "--loads", "0.5,-1", "../../experiments/examples/agent-dag.toml")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--loads: "-1" is not a positive number`)
}
