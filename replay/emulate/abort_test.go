package emulate_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/replay/emulate"
)

// A request whose client goes away is aborted: it leaves the engine's batch, as in vLLM.
func TestClientDisconnectAborts(t *testing.T) {
	cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{})
	require.NoError(t, err)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime = "m", 1, 0
	s, err := emulate.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start("127.0.0.1:0"))
	defer s.Close()
	running := func() string {
		resp, err := http.Get(s.URL() + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		buf := new(strings.Builder)
		_, _ = io.Copy(buf, resp.Body)
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.HasPrefix(l, "vllm:num_requests_running") {
				return l[strings.LastIndex(l, " ")+1:]
			}
		}
		return "?"
	}
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"m","prompt":"the the the","max_tokens":4000,"ignore_eos":true,"stream":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/completions", strings.NewReader(body))
	require.NoError(t, err)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { return running() == "1" }, 2*time.Second, 10*time.Millisecond)
	cancel()
	assert.Eventually(t, func() bool { return running() == "0" }, 2*time.Second, 10*time.Millisecond, "the aborted request left the batch")
}
