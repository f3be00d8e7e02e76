package replay

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A soft open-file limit below the need is raised to it; a need above the hard limit is an
// error that says what to do.
func TestEnsureFileLimit(t *testing.T) {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Max == ^uint64(0) || lim.Max < 2048 || lim.Max > 1<<30 {
		t.Skipf("the hard open-file limit (%d) does not allow the test", lim.Max)
	}
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)) }()
	low := lim
	low.Cur = 1024
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))

	require.NoError(t, ensureFileLimit(2000))
	var now syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now))
	assert.Equal(t, uint64(2000), now.Cur)

	err := ensureFileLimit(int(lim.Max) + 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RLIMIT_NOFILE")
	assert.Contains(t, err.Error(), "max_concurrency")
}

func TestFileNeed(t *testing.T) {
	models := map[string]Model{"a": {MaxNumSeqs: 256, Utilization: 0.9}, "b": {MaxNumSeqs: 128, Utilization: 0.9}}
	cfg := Config{Workers: Identical(4, "A100-80GB", models)}
	assert.Equal(t, 4*1*(256+4)+64, cfg.fileNeed(), "one 0.9 model per worker at a time, the larger pool")
	models["b"] = Model{MaxNumSeqs: 128, Utilization: 0.45}
	assert.Equal(t, 4*2*(256+4)+64, cfg.fileNeed(), "two models fit together")
	cfg.MaxConcurrency = 16
	assert.Equal(t, 4*2*(16+4)+64, cfg.fileNeed())
}
