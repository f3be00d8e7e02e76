package sim_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

// A written profile reads back the same, the eager-engine keys included; a profile without
// them does not mention them; a bad value is an error naming the table.
func TestProfileRoundTrip(t *testing.T) {
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("MI300X")
	require.NoError(t, err)
	prof := sim.DefaultProfile()
	var plain bytes.Buffer
	require.NoError(t, prof.Write(&plain))
	assert.NotContains(t, plain.String(), "launch_floor_ms")
	assert.NotContains(t, plain.String(), "attention_compute_efficiency")
	assert.NotContains(t, plain.String(), "paged_attention_v1_factor")
	assert.NotContains(t, plain.String(), "layer_latency_us")

	c := prof.For(g)
	c.LaunchFloorMS, c.AttentionComputeEfficiency, c.PagedAttentionV1Factor, c.LayerLatencyUS = 9.3863, 0.00238, 2.6348, 41.48
	prof.Set(g.Name, c)
	var buf bytes.Buffer
	require.NoError(t, prof.Write(&buf, "test"))
	path := filepath.Join(t.TempDir(), "p.toml")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	back, err := sim.LoadProfile(path, nil)
	require.NoError(t, err)
	got := back.For(g)
	assert.InDelta(t, 9.3863, got.LaunchFloorMS, 1e-9)
	assert.InDelta(t, 0.00238, got.AttentionComputeEfficiency, 1e-9)
	assert.InDelta(t, 2.6348, got.PagedAttentionV1Factor, 1e-9)
	assert.InDelta(t, 41.48, got.LayerLatencyUS, 1e-9)
	assert.Zero(t, back.Default.LaunchFloorMS)

	bad := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[gpu.mi300x]\nlaunch_floor_ms = -1\n"), 0o644))
	_, err = sim.LoadProfile(bad, nil)
	assert.ErrorContains(t, err, "launch_floor_ms must be a non-negative number")
	assert.ErrorContains(t, err, "gpu.mi300x")
	require.NoError(t, os.WriteFile(bad, []byte("[default]\nlaunch_floor_ms = nan\n"), 0o644))
	_, err = sim.LoadProfile(bad, nil)
	assert.ErrorContains(t, err, "launch_floor_ms must be a non-negative number, got NaN")
	require.NoError(t, os.WriteFile(bad, []byte("[default]\nlayer_latency_us = -2\n"), 0o644))
	_, err = sim.LoadProfile(bad, nil)
	assert.ErrorContains(t, err, "layer_latency_us must be a non-negative number, got -2")
}
