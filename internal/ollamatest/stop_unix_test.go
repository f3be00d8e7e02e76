//go:build unix

package ollamatest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/ollamatest"
)

// Stop ends the server and its runners, and a second Stop is harmless.
func TestStop(t *testing.T) {
	bin := ollamatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := ollamatest.Start(ctx, ollamatest.Options{Binary: bin})
	require.NoError(t, err)
	dir := s.Dir
	require.NoError(t, ollamatest.Create(ctx, s.URL, "m", model(t, 9), params))
	_, err = ollamatest.Load(ctx, s.URL, "m", -1)
	require.NoError(t, err)
	pid := s.PID()
	require.NoError(t, syscall.Kill(-pid, 0), "the server's process group is there")
	require.NoError(t, s.Stop())
	assert.True(t, s.Exited())
	assert.ErrorIs(t, syscall.Kill(-pid, 0), syscall.ESRCH, "no process of the group (server, runners) is left")
	require.NoError(t, s.Stop())
	assert.NoDirExists(t, dir, "Start's own scratch folder is removed")
	_, err = ollamatest.Version(ctx, s.URL)
	assert.Error(t, err, "nothing answers after Stop")
}
