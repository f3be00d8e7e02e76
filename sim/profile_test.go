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
	require.NoError(t, (&sim.Profile{Default: prof.Default}).Write(&plain))
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

// A profile says where each GPU's coefficients come from: its own fit (basis, held-out error),
// another GPU's by design (like, which follows that GPU through a refit and is written back as
// like), or the default's, borrowed from the GPU [default] names.
func TestProfileProvenance(t *testing.T) {
	cat := sim.DefaultCatalog()
	gpu := func(name string) *sim.GPU {
		g, err := cat.GPU(name)
		require.NoError(t, err)
		return g
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		return path
	}
	path := write("p.toml", `[default]
memory_efficiency = 0.7
from = "A100-40GB"

[gpu.A100-80GB]
like = "A100-40GB"
basis = "the same chip"

[gpu.a100-40gb]
memory_efficiency = 0.8
basis = "fit on rows"
held_out = "L=256"
held_out_mape_pct = 4.25
`)
	prof, err := sim.LoadProfile(path, nil)
	require.NoError(t, err)
	a40, a80, l40 := gpu("A100-40GB"), gpu("A100-80GB"), gpu("L40S")
	assert.InDelta(t, 0.8, prof.For(a80).MemoryEfficiency, 1e-12, "like takes the other GPU's coefficients, whatever the table order")
	from, borrowed := prof.Borrows(l40)
	assert.True(t, borrowed)
	assert.Equal(t, "A100-40GB", from)
	_, borrowed = prof.Borrows(a80)
	assert.False(t, borrowed, "a like entry is the GPU's own, by design")
	assert.Equal(t, sim.Provenance{Basis: "fit on rows", HeldOut: "L=256", HeldOutMAPE: 4.25}, prof.Provenance["a100-40gb"])
	assert.Equal(t, "A100-40GB", prof.Provenance["a100-80gb"].Like)

	// A refit of A100-40GB carries A100-80GB along, and the file keeps saying like.
	c := prof.For(a40)
	c.MemoryEfficiency = 0.9
	prof.Set(a40.Name, c)
	assert.InDelta(t, 0.9, prof.For(a80).MemoryEfficiency, 1e-12)
	var buf bytes.Buffer
	require.NoError(t, prof.Write(&buf))
	assert.Contains(t, buf.String(), "[gpu.a100-80gb]\nlike = \"A100-40GB\"\nbasis = \"the same chip\"\n")
	assert.Contains(t, buf.String(), "from = \"A100-40GB\"")
	assert.Contains(t, buf.String(), "held_out = \"L=256\"\nheld_out_mape_pct = 4.25\n")
	back, err := sim.LoadProfile(write("back.toml", buf.String()), nil)
	require.NoError(t, err)
	assert.Equal(t, prof.For(a80), back.For(a80))
	assert.Equal(t, prof.Provenance, back.Provenance)
	assert.Equal(t, "A100-40GB", back.DefaultFrom)

	for _, tc := range []struct{ body, want string }{
		{"[gpu.h200]\nlike = \"B200\"\n", "gpu.h200.like: no [gpu.B200] table"},
		{"[gpu.a]\nlike = \"b\"\n[gpu.b]\nlike = \"c\"\n[gpu.c]\nmemory_efficiency = 0.5\n", "itself like another GPU"},
		{"[gpu.h200]\nfrom = \"x\"\n", "gpu.h200.from: belongs in [default]"},
		{"[default]\nbasis = \"x\"\n", "belong in a [gpu.NAME] table"},
	} {
		_, err := sim.LoadProfile(write("bad.toml", tc.body), nil)
		assert.ErrorContains(t, err, tc.want, tc.body)
	}
}
