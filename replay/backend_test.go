package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

const scale = 50

// emulator starts an in-process emulator of llama-3-8b served as name.
func emulator(t *testing.T, name string, faults emulate.Faults) *emulate.Server {
	t.Helper()
	cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{})
	require.NoError(t, err)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.Faults, cfg.PrefixCaching = name, scale, 0, faults, false
	s, err := emulate.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start("127.0.0.1:0"))
	t.Cleanup(func() { s.Close() })
	return s
}

func workload(queries int) *traces.Workload {
	wl := &traces.Workload{Name: "t"}
	for q := 0; q < queries; q++ {
		qu := traces.Query{ID: q, Gold: "A"}
		for i := 0; i < 2; i++ {
			qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleExpert, Model: fmt.Sprintf("M%d", i),
				PromptTokens: 50, OutputTokens: 20 + q%7, Answer: "A"})
		}
		qu.Calls = append(qu.Calls, traces.Call{Role: traces.RoleAggregator, Model: "M0", PromptTokens: 60,
			Inputs: []traces.Input{{From: 0, Tokens: 10}, {From: 1, Tokens: 10}}, OutputTokens: 15, Answer: "A", Gate: true})
		wl.Queries = append(wl.Queries, qu)
	}
	if err := wl.Finish(); err != nil {
		panic(err)
	}
	return wl
}

func infos() []policies.ModelInfo {
	return []policies.ModelInfo{{Name: "M0", Memory: 0.9}, {Name: "M1", Memory: 0.9}}
}

func config(urls ...string) replay.Config {
	cfg := replay.Config{Workers: replay.Identical(len(urls), "A100-80GB", map[string]replay.Model{"M0": {Name: "M0"}, "M1": {Name: "M1"}}),
		TimeScale: scale, Retries: 3, RetryBackoff: 10 * time.Millisecond, HealthTimeout: 10 * time.Second}
	for w, u := range urls {
		cfg.Endpoints = append(cfg.Endpoints, replay.Endpoint{Worker: w, URL: u})
	}
	return cfg
}

// run drives round-robin over the backend with one emulator per worker serving both models'
// names (attach mode: worker w's endpoint serves model Mw).
func run(t *testing.T, cfg replay.Config, wl *traces.Workload, hooks ...func(*policies.Driver)) (*policies.Result, error) {
	t.Helper()
	b, err := replay.New(cfg)
	require.NoError(t, err)
	defer b.Close()
	d, err := policies.NewDriver(b, roundrobin.New(), policies.NeverSkip(), wl, infos(), len(cfg.Workers))
	require.NoError(t, err)
	for _, h := range hooks {
		h(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return d.Run(ctx)
}

func TestAttachRunsEveryCallOnce(t *testing.T) {
	e0, e1 := emulator(t, "M0", emulate.Faults{}), emulator(t, "M1", emulate.Faults{})
	var done []int
	wl := workload(12)
	res, err := run(t, config(e0.URL(), e1.URL()), wl, func(d *policies.Driver) {
		d.CallDone = func(c policies.CallRecord) { done = append(done, c.Call.ID) }
	})
	require.NoError(t, err)
	assert.Len(t, res.Calls, 36)
	assert.Len(t, done, 36, "the CallDone hook sees every call as it completes")
	for _, c := range res.Calls {
		assert.Equal(t, "done", c.Status)
		assert.Equal(t, policies.WorkerID(map[string]int{"M0": 0, "M1": 1}[c.Call.Model]), c.Worker)
		assert.True(t, c.Timing.Started <= c.Timing.FirstToken && c.Timing.FirstToken <= c.Timing.End, "%+v", c.Timing)
	}
}

func TestRetriesRecoverFromFaults(t *testing.T) {
	flaky := emulate.Faults{ErrorRate: 0.3, WrongTokensRate: 0.2, Seed: 7}
	e0, e1 := emulator(t, "M0", flaky), emulator(t, "M1", flaky)
	cfg := config(e0.URL(), e1.URL())
	cfg.Retries = 8
	res, err := run(t, cfg, workload(10))
	require.NoError(t, err)
	require.Len(t, res.Calls, 10*3, "every call of the 10 queries ran (the rule skips nothing)")
	for _, c := range res.Calls {
		assert.Equal(t, "done", c.Status, "call %d", c.Call.ID)
	}
}

func TestFailedCallsAreRecordedWithTheReason(t *testing.T) {
	e0, e1 := emulator(t, "M0", emulate.Faults{ErrorRate: 1, Seed: 1}), emulator(t, "M1", emulate.Faults{})
	cfg := config(e0.URL(), e1.URL())
	cfg.Retries = 1
	res, err := run(t, cfg, workload(3))
	require.NoError(t, err, "failed calls do not stop the run")
	failed := 0
	for _, c := range res.Calls {
		if c.Call.Model == "M0" {
			assert.Equal(t, "failed", c.Status)
			assert.Contains(t, c.Err, "HTTP 500")
			failed++
		}
	}
	assert.Positive(t, failed)
}

func TestDeadWorker(t *testing.T) {
	e0, e1 := emulator(t, "M0", emulate.Faults{}), emulator(t, "M1", emulate.Faults{})
	url := e1.URL()
	require.NoError(t, e1.Close()) // worker 1's server is gone before the run
	cfg := config(e0.URL(), url)
	cfg.HealthTimeout = 300 * time.Millisecond
	_, err := run(t, cfg, workload(3))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loading M1 on worker 1 failed")
	assert.Contains(t, err.Error(), "/health")
}

func TestAttachChecksTheServedModel(t *testing.T) {
	e0, e1 := emulator(t, "M0", emulate.Faults{}), emulator(t, "other", emulate.Faults{})
	_, err := run(t, config(e0.URL(), e1.URL()), workload(2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not M1")
}

func TestExpand(t *testing.T) {
	assert.Equal(t, "vllm serve x --port 9", replay.Expand("vllm serve {arch} --port {port}", map[string]string{"arch": "x", "port": "9"}))
}
