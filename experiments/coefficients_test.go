package experiments

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cluster of a GPU without coefficients of its own in the profile warns, once per process,
// naming the GPU it borrows from and the key that chose it; one with its own (or like another
// by design) does not.
func TestBorrowedCoefficientsWarnOnce(t *testing.T) {
	warnedBorrow.Clear() // once per process: forget what earlier tests (or runs of this one) warned about
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)

	resolve := func(gpu string) {
		e, err := Load("quickstart.toml")
		require.NoError(t, err)
		require.NoError(t, e.Set("cluster.gpu="+gpu))
		_, err = e.Resolve()
		require.NoError(t, err)
	}
	resolve("L40S")
	resolve("L40S")
	resolve("A100-80GB")
	warned := strings.Count(logs.String(), "GPU without cost-model coefficients of its own")
	assert.Equal(t, 1, warned, logs.String())
	assert.Contains(t, logs.String(), "gpu=L40S borrows_from=A100-40GB profile=built-in key=cluster.gpu")
	assert.NotContains(t, logs.String(), "gpu=A100-80GB")
}
