package replay_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

// Streams that stall or lose their connection mid-way are cut by the timeouts and retried
// until every call is done; with no retries left, the call fails with the reason.
func TestStalledAndDroppedStreams(t *testing.T) {
	short := replay.Timeouts{FirstToken: 300 * time.Millisecond, Idle: 150 * time.Millisecond}
	oneToken := func(wl *traces.Workload) {
		for i := range wl.Queries {
			for j := range wl.Queries[i].Calls {
				wl.Queries[i].Calls[j].OutputTokens = 1
			}
		}
	}
	tests := []struct {
		name     string
		faults   emulate.Faults
		retries  int
		workload func(*traces.Workload)
		failWith string // "": every call is done
	}{
		{"stall mid-stream, retried", emulate.Faults{StallRate: 0.3, Stall: time.Hour, Seed: 3}, 8, nil, ""},
		{"disconnect mid-stream, retried", emulate.Faults{DisconnectRate: 0.3, Seed: 4}, 8, nil, ""},
		{"stall mid-stream, no retries", emulate.Faults{StallRate: 1, Stall: time.Hour}, 0, nil, "no data from the server for 150ms ([replay] idle_timeout)"},
		{"stall before the first token, no retries", emulate.Faults{StallRate: 1, Stall: time.Hour}, 0, oneToken, "no token from the server for 300ms ([replay] first_token_timeout)"},
		{"disconnect, no retries", emulate.Faults{DisconnectRate: 1}, 0, nil, "the stream ended without [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e0, e1 := emulator(t, "M0", tt.faults), emulator(t, "M1", tt.faults)
			cfg := config(e0.URL(), e1.URL())
			cfg.Retries, cfg.Timeouts = tt.retries, short
			wl := workload(6)
			if tt.workload != nil {
				tt.workload(wl)
			}
			res, err := run(t, cfg, wl)
			require.NoError(t, err, "failed calls do not stop the run")
			require.Len(t, res.Calls, 6*3, "the rule skips nothing: every call of the 6 queries is recorded, done or failed")
			received := requestsTotal(t, e0) + requestsTotal(t, e1)
			if tt.retries > 0 {
				assert.Greater(t, received, len(res.Calls), "faults struck and the calls were sent again")
			} else {
				assert.Equal(t, len(res.Calls), received, "no call is sent twice")
			}
			for _, c := range res.Calls {
				if tt.failWith == "" {
					assert.Equal(t, "done", c.Status, "call %d: %s", c.Call.ID, c.Err)
					continue
				}
				assert.Equal(t, "failed", c.Status, "call %d", c.Call.ID)
				assert.Contains(t, c.Err, tt.failWith, "call %d", c.Call.ID)
			}
		})
	}
}

// requestsTotal reads how many requests an emulator took into its engine.
func requestsTotal(t *testing.T, s *emulate.Server) int {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^mosaic:emulate_requests_total\{[^}]*\} (\S+)$`).FindSubmatch(body)
	require.NotNil(t, m)
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}
