package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

// eager loads Mw on worker w and submits every ready call, open ones included, to the worker
// of its model at once.
type eager struct{}

func (eager) Name() string { return "eager" }
func (eager) Start(v policies.View) ([]policies.Action, error) {
	return []policies.Action{policies.Load(0, "M0"), policies.Load(1, "M1")}, nil
}
func (eager) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	for _, c := range v.Ready() {
		for w := range v.Workers() {
			if h := v.Holds(policies.WorkerID(w)); len(h) > 0 && h[0] == c.Model {
				acts = append(acts, policies.Submit(policies.WorkerID(w), c.ID))
			}
		}
	}
	return acts
}

func cachingEmulator(t *testing.T, name string) *emulate.Server {
	t.Helper()
	cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{})
	require.NoError(t, err)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.PrefixCaching = name, scale, 0, true
	s, err := emulate.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start("127.0.0.1:0"))
	t.Cleanup(func() { s.Close() })
	return s
}

// Prefill-decode overlap on servers: each aggregator is submitted when its query arrives, its
// known prompt is prefilled, and the call itself, sent when its experts are done, finds that
// prefix in the server's cache. Every call runs once with the whole prompt.
func TestOverlapThroughThePrefixCache(t *testing.T) {
	e0, e1 := cachingEmulator(t, "M0"), cachingEmulator(t, "M1")
	wl := &traces.Workload{Name: "overlap"}
	for q := range 4 {
		wl.Queries = append(wl.Queries, traces.Query{ID: q, Gold: "A", Calls: []traces.Call{
			{Role: traces.RoleExpert, Model: "M0", PromptTokens: 40, PrefixTokens: 40, OutputTokens: 30, Answer: "A"},
			{Role: traces.RoleExpert, Model: "M1", PromptTokens: 40, PrefixTokens: 40, OutputTokens: 60, Answer: "A"},
			{Role: traces.RoleAggregator, Model: "M0", PromptTokens: 400, PrefixTokens: 40, OutputTokens: 10, Answer: "A",
				Inputs: []traces.Input{{From: 0, Tokens: 30}, {From: 1, Tokens: 60}}},
		}})
	}
	require.NoError(t, wl.Finish())
	cfg := config(e0.URL(), e1.URL())
	cfg.PrefixCaching = true
	b, err := replay.New(cfg)
	require.NoError(t, err)
	defer b.Close()
	d, err := policies.NewDriver(b, eager{}, policies.NeverSkip(), wl, infos(), 2)
	require.NoError(t, err)
	d.SetOverlap(true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := d.Run(ctx)
	require.NoError(t, err)
	require.Len(t, res.Calls, 12)
	for _, c := range res.Calls {
		assert.Equal(t, "done", c.Status, "call %d: %s", c.Call.ID, c.Err)
		if c.Call.Role == traces.RoleAggregator {
			assert.Equal(t, 490, c.Call.InputTokens)
			assert.Less(t, c.Timing.Submitted, res.Calls[c.Call.ID-1].Timing.End, "submitted open, before its experts were done")
		}
	}
	assert.Equal(t, "overlap", res.Rule[len(res.Rule)-7:])
	// Each aggregator's 400 own tokens (25 full blocks) were prefilled before it was sent.
	assert.GreaterOrEqual(t, metric(t, e0, "vllm:prefix_cache_hits_total"), float64(4*400/16*16))
}
