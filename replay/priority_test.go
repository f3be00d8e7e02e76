package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

// capturing serves an emulator of model M (with the given scheduling policy) behind a proxy
// that records the body of every completion request, in arrival order.
type capturing struct {
	url    string
	mu     sync.Mutex
	bodies [][]byte
}

func newCapturing(t *testing.T, policy string) *capturing {
	t.Helper()
	cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{SchedulingPolicy: policy})
	require.NoError(t, err)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.Logger, cfg.PrefixCaching = "M", 20, 0, slog.New(slog.DiscardHandler), false
	em, err := emulate.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { em.Close() })
	c := &capturing{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			c.mu.Lock()
			c.bodies = append(c.bodies, body)
			c.mu.Unlock()
		}
		em.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *capturing) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

// sent returns each captured request's raw "priority" field ("" when it is absent) and the
// tokens it asked for, which the tests make tell the calls apart.
func (c *capturing) sent(t *testing.T) (priorities []string, maxTokens []int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, body := range c.bodies {
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &fields))
		priorities = append(priorities, string(fields["priority"]))
		var n int
		require.NoError(t, json.Unmarshal(fields["max_tokens"], &n))
		maxTokens = append(maxTokens, n)
	}
	return priorities, maxTokens
}

func attachM(t *testing.T, url, policy string) (*Backend, func() backend.Event) {
	t.Helper()
	b, err := New(Config{Workers: Identical(1, "A100-80GB", map[string]Model{"M": {Name: "M", MaxNumSeqs: 8, SchedulingPolicy: policy}}),
		Seed: 3, TimeScale: 20, MaxConcurrency: 1, Endpoints: []Endpoint{{Worker: 0, URL: url}}, HealthTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	require.NoError(t, b.Load(0, "M"))
	next := func() backend.Event {
		ev, err := b.Next(ctx)
		require.NoError(t, err)
		return ev
	}
	require.Equal(t, backend.EventLoaded, next().Kind)
	return b, next
}

// On a model whose engine schedules by priority, every request carries its call's priority in
// vLLM's "priority" field, and the worker's dispatcher, one call in flight at a time, sends
// the calls it holds by (priority, submission): calls 1, 2 and 3, submitted while call 0 runs
// with priorities 5, -1 and 2, go out as 2, 3, 1. The emulator, started with priority
// scheduling, accepts them all.
func TestReplaySendsPriority(t *testing.T) {
	capt := newCapturing(t, SchedulingPriority)
	b, next := attachM(t, capt.url, SchedulingPriority)
	prio := []int{0, 5, -1, 2}
	calls := make([]*traces.Call, len(prio))
	for i := range calls {
		// Output lengths tell the requests apart; call 0's keeps it running while the others
		// are submitted (1000 tokens are seconds of emulated time).
		calls[i] = &traces.Call{ID: i, Query: i, Model: "M", InputTokens: 32, OutputTokens: []int{1000, 11, 12, 13}[i]}
	}
	require.NoError(t, b.Submit(0, calls[0], prio[0]))
	require.Eventually(t, func() bool { return capt.count() == 1 }, 10*time.Second, time.Millisecond, "call 0 is sent")
	for i := 1; i < len(calls); i++ {
		require.NoError(t, b.Submit(0, calls[i], prio[i]))
	}
	for range calls {
		ev := next()
		require.Equal(t, backend.EventDone, ev.Kind, "%v", ev.Err)
	}
	priorities, maxTokens := capt.sent(t)
	assert.Equal(t, []int{1000, 12, 13, 11}, maxTokens, "sent in (priority, submission) order: calls 0, 2, 3, 1")
	assert.Equal(t, []string{"0", "-1", "2", "5"}, priorities, "each request carries its call's priority")
}

// On a model whose engine schedules first come first served, requests carry no "priority"
// field (they are what they were before priorities existed), and a call with a priority other
// than 0 is refused, naming it and its worker.
func TestReplayFCFSLeavesPriorityOut(t *testing.T) {
	capt := newCapturing(t, "")
	b, next := attachM(t, capt.url, "")
	err := b.Submit(0, &traces.Call{ID: 4, Query: 1, Model: "M", InputTokens: 32, OutputTokens: 5}, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "call 4 (query 1, M) on worker 0: priority 2, but the engine schedules first come first served")
	require.NoError(t, b.Submit(0, &traces.Call{ID: 4, Query: 1, Model: "M", InputTokens: 32, OutputTokens: 5}, 0))
	ev := next()
	require.Equal(t, backend.EventDone, ev.Kind, "%v", ev.Err)
	priorities, _ := capt.sent(t)
	assert.Equal(t, []string{""}, priorities)
	capt.mu.Lock()
	assert.NotContains(t, string(capt.bodies[0]), "priority")
	capt.mu.Unlock()
}

// Launched servers of a model that schedules by priority get vLLM's --scheduling-policy
// priority from the default command; an FCFS model's command line is what it always was.
func TestLaunchSchedulingPolicy(t *testing.T) {
	b := &Backend{cfg: Config{Workers: Identical(1, "A100-80GB", nil), TimeScale: 1}}
	m := Model{Name: "M", Arch: "meta-llama/Meta-Llama-3-8B", Utilization: 0.9, MaxNumSeqs: 256, MaxTokens: 8192, ChunkedPrefill: true}
	old := strings.TrimSuffix(DefaultCommand, " {scheduling_policy}")
	require.NotEqual(t, old, DefaultCommand)
	fcfs := strings.Fields(Expand(DefaultCommand, b.launchVars(0, m, 8000)))
	assert.Equal(t, strings.Fields(Expand(old, b.launchVars(0, m, 8000))), fcfs)
	assert.NotContains(t, fcfs, "--scheduling-policy")
	m.SchedulingPolicy = SchedulingPriority
	prio := strings.Fields(Expand(DefaultCommand, b.launchVars(0, m, 8000)))
	assert.Equal(t, append(slices.Clone(fcfs), "--scheduling-policy", "priority"), prio)

	// A launch command without the placeholder cannot start a priority server.
	_, err := New(Config{Workers: Identical(1, "A100-80GB", map[string]Model{"M": m}), Command: old})
	assert.ErrorContains(t, err, "model M schedules by priority, but the launch command passes its servers neither {scheduling_policy} nor --scheduling-policy")
	_, err = New(Config{Workers: Identical(1, "A100-80GB", map[string]Model{"M": m}), API: APIOllama,
		Endpoints: []Endpoint{{Worker: 0, URL: "http://127.0.0.1:1"}}})
	assert.ErrorContains(t, err, "schedules by priority, which the ollama API does not offer")
}
