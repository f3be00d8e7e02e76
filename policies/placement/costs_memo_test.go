package placement

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// memoProfile builds a profile of DeepSeek-R1-Distill-Qwen-7B on an A100-80GB from freshly
// built catalog, cost model and distribution: equal content, never the same pointers.
func memoProfile(t *testing.T, maxSeqs int, iterMS float64, mean float64, prompt int) *Profile {
	t.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("A100-80GB")
	require.NoError(t, err)
	arch, err := cat.Model("qwenr1")
	require.NoError(t, err)
	coef := sim.DefaultProfile().For(g)
	coef.IterationOverheadMS = iterMS
	cm, err := sim.NewCostModel(arch, g, coef)
	require.NoError(t, err)
	eng := sim.DefaultEngine()
	eng.MaxNumSeqs = maxSeqs
	ec, err := eng.WithKVCache(cm, 0.9)
	require.NoError(t, err)
	out, err := traces.NewLogNormal(mean, 8*mean, 1, 16384)
	require.NoError(t, err)
	p, err := NewProfile(policies.ModelInfo{Name: "QwenR1", Arch: arch, Cost: cm, Engine: ec, Output: out}, out, prompt)
	require.NoError(t, err)
	return p
}

// The memo is keyed by content: profiles built apart from equal content share a key, and any
// change of what ServeTime reads (engine, cost model, lengths, prompt, calls) gives another.
// A remembered time is exactly the one computed without the memo.
func TestServeMemoKeyedByContent(t *testing.T) {
	base := memoProfile(t, 256, 0.7, 2000, 300)
	same := memoProfile(t, 256, 0.7, 2000, 300)
	require.NotSame(t, base.Info.Cost, same.Info.Cost)
	k1, ok := base.memoKey(16)
	require.True(t, ok)
	k2, ok := same.memoKey(16)
	require.True(t, ok)
	assert.Equal(t, k1, k2, "equal content, distinct pointers")
	k3, _ := base.memoKey(32)
	assert.NotEqual(t, k1, k3, "another number of calls")
	for name, other := range map[string]*Profile{
		"engine":     memoProfile(t, 128, 0.7, 2000, 300),
		"cost model": memoProfile(t, 256, 0.9, 2000, 300),
		"lengths":    memoProfile(t, 256, 0.7, 2100, 300),
		"prompt":     memoProfile(t, 256, 0.7, 2000, 301),
	} {
		k, ok := other.memoKey(16)
		require.True(t, ok, name)
		assert.NotEqual(t, k1, k, "a different %s", name)
	}
	want, err := same.serve(16)
	require.NoError(t, err)
	got, err := base.ServeTime(16) // computes and remembers
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = same.ServeTime(16) // remembered
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// Content that cannot be hashed is served without the memo.
	noCost := *base
	noCost.Info.Cost = nil
	_, ok = noCost.memoKey(16)
	assert.False(t, ok)
}

// Concurrent callers of one key all get the one computed value (run with -race).
func TestServeMemoConcurrent(t *testing.T) {
	p := memoProfile(t, 256, 0.7, 1500, 200)
	want, err := p.serve(24)
	require.NoError(t, err)
	profiles := make([]*Profile, 8)
	for i := range profiles {
		profiles[i] = memoProfile(t, 256, 0.7, 1500, 200)
	}
	var wg sync.WaitGroup
	got := make([]float64, len(profiles))
	for i, q := range profiles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = q.ServeTime(24)
		}()
	}
	wg.Wait()
	for _, g := range got {
		assert.Equal(t, want, g)
	}
}

// Representative lengths are drawn once per model name and distribution content, and are
// exactly those a fresh draw gives.
func TestLengthsMemoKeyedByContent(t *testing.T) {
	mk := func(mean float64) traces.LengthDist {
		d, err := traces.NewLogNormal(mean, 8*mean, 1, 16384)
		require.NoError(t, err)
		return d
	}
	a, b := profileLengths("M", mk(900)), profileLengths("M", mk(900))
	assert.Same(t, &a.lengths[0], &b.lengths[0], "one draw for equal content")
	assert.NotEqual(t, a.digest, profileLengths("N", mk(900)).digest, "another model name seeds another stream")
	assert.NotEqual(t, a.digest, profileLengths("M", mk(901)).digest, "another distribution")
	e1, err := traces.NewEmpirical([]int{10, 20, 30}, "x", 0)
	require.NoError(t, err)
	e2, err := traces.NewEmpirical([]int{10, 20, 31}, "x", 0)
	require.NoError(t, err)
	assert.NotEqual(t, profileLengths("M", e1).digest, profileLengths("M", e2).digest, "values are content")
	// What a fresh draw gives.
	fresh := lengthsMemo
	lengthsMemo = newMemo[[32]byte, drawnLengths](256)
	defer func() { lengthsMemo = fresh }()
	assert.Equal(t, a, profileLengths("M", mk(900)))
}
