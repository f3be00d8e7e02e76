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

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

// Early exit on real servers: once the two short experts agree, the long one is cancelled: its
// stream is closed, the emulator aborts the request (nothing left running), and the call is
// recorded as cancelled with the tokens it had streamed.
func TestEarlyExitCancelsOnTheServer(t *testing.T) {
	e0, e1 := emulator(t, "M0", emulate.Faults{}), emulator(t, "M1", emulate.Faults{})
	wl := &traces.Workload{Name: "exit"}
	for q := range 3 {
		wl.Queries = append(wl.Queries, traces.Query{ID: q, Gold: "A", Calls: []traces.Call{
			// The short experts decode for ~0.3 s of real time at time scale 50, so that the
			// long one is sent and running before they agree even when dispatch lags on a
			// loaded machine (it measured up to 0.16 s).
			{Role: traces.RoleExpert, Model: "M0", PromptTokens: 50, OutputTokens: 1200, Answer: "A"},
			{Role: traces.RoleExpert, Model: "M0", PromptTokens: 50, OutputTokens: 1300, Answer: "A"},
			{Role: traces.RoleExpert, Model: "M1", PromptTokens: 50, OutputTokens: 8000, Answer: "B"},
			{Role: traces.RoleAggregator, Model: "M0", PromptTokens: 60, Inputs: []traces.Input{{From: 0, Tokens: 5}, {From: 1, Tokens: 5}, {From: 2, Tokens: 5}},
				OutputTokens: 8, Answer: "A", Gate: true},
		}})
	}
	require.NoError(t, wl.Finish())
	res, err := run(t, config(e0.URL(), e1.URL()), wl, func(d *policies.Driver) {
		d.SetEarlyExit(&policies.EarlyExit{Agreement: 1, MinFinished: 2})
	})
	require.NoError(t, err)
	cancelled := 0
	for _, c := range res.Calls {
		if c.Call.Node == 2 {
			assert.Equal(t, "cancelled", c.Status, "call %d", c.Call.ID)
			assert.Less(t, c.Produced, 8000, "stopped part-way")
			cancelled++
			continue
		}
		assert.Equal(t, "done", c.Status, "call %d: %s", c.Call.ID, c.Err)
		if c.Call.Role == traces.RoleAggregator {
			assert.Equal(t, 60+5+5, c.Call.InputTokens, "the aggregator reads the two experts that answered")
		}
	}
	// A long expert not yet sent when its query exits early (its server still starting, say)
	// is cancelled without running and leaves no record; at least one was running.
	assert.GreaterOrEqual(t, cancelled, 1)
	assert.Equal(t, 3*3+cancelled, len(res.Calls), "every other call ran once")
	assert.Equal(t, cancelled, res.Summary().CancelledCalls)
	assert.Zero(t, metric(t, e1, "vllm:num_requests_running"), "the server aborted the cancelled requests")
}

// metric reads one gauge of an emulator's /metrics (summed over its series), waiting briefly
// for it to settle at zero when it is not yet.
func metric(t *testing.T, s *emulate.Server, name string) float64 {
	t.Helper()
	var v float64
	for range 50 {
		resp, err := http.Get(s.URL() + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		v = 0
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
		ms := re.FindAllSubmatch(body, -1)
		require.NotEmpty(t, ms, "no %s in /metrics", name)
		for _, m := range ms {
			x, err := strconv.ParseFloat(string(m[2]), 64)
			require.NoError(t, err)
			v += x
		}
		if v == 0 {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	return v
}
