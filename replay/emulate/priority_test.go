package emulate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/sim"
)

func withPriority(prompt, maxTokens, priority int) map[string]any {
	b := completionBody(prompt, maxTokens, true)
	b["priority"] = priority
	return b
}

// An emulator started with --scheduling-policy priority serves its waiting requests by their
// "priority" field: one sequence at a time, while a long request runs, B (priority 5) and then
// C (priority -1) arrive and wait; C runs first.
func TestEmulatorHonoursPriority(t *testing.T) {
	cfg, err := emulate.ConfigFor(testGPU, testModel, emulate.Options{MaxNumSeqs: 1, SchedulingPolicy: sim.SchedulingPriority})
	require.NoError(t, err)
	require.Equal(t, sim.SchedulingPriority, cfg.Engine.SchedulingPolicy)
	cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.Logger = served, 50, 0, newConfig(t, 1).Logger
	s := start(t, cfg)
	// 1500 tokens: about 0.4 s of real time at this scale, while B and C arrive.
	first := post(t, context.Background(), s.URL()+"/v1/completions", withPriority(10, 1500, 0))
	defer first.Body.Close()
	lines := bufio.NewScanner(first.Body)
	require.True(t, lines.Scan(), "the long request runs")
	go func() {
		for lines.Scan() {
		}
	}()

	// Each waiting request runs 300 tokens (tens of ms of real time), so that the order in
	// which they started shows in when their first tokens reach the client, however late
	// the test's goroutines are scheduled (the order they finished in, as seen by the
	// client, did not: C's reader could be held up past B's few tokens).
	const tokens = 300
	var mu sync.Mutex
	started := map[string]time.Time{}
	var wg sync.WaitGroup
	send := func(name string, priority int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			got := readStream(t, post(t, context.Background(), s.URL()+"/v1/completions", withPriority(10, tokens, priority)), sent)
			assert.Equal(t, tokens, got.tokens)
			mu.Lock()
			started[name] = sent.Add(got.firstToken)
			mu.Unlock()
		}()
	}
	send("B", 5)
	require.Eventually(t, func() bool { return metric(t, s.URL(), "vllm:num_requests_waiting") == 1 }, 5*time.Second, 2*time.Millisecond)
	send("C", -1)
	require.Eventually(t, func() bool { return metric(t, s.URL(), "vllm:num_requests_waiting") == 2 }, 5*time.Second, 2*time.Millisecond)
	wg.Wait()
	require.Len(t, started, 2)
	assert.True(t, started["C"].Before(started["B"]), "C (priority -1) starts before B (priority 5), which arrived first: first tokens at %v and %v",
		started["C"].Format(time.StampMicro), started["B"].Format(time.StampMicro))
}

// An emulator that schedules first come first served (vLLM's default) refuses a request with a
// priority other than 0 with HTTP 400 and the message vLLM's engine raised, and serves one
// with priority 0.
func TestEmulatorFCFSRefusesPriority(t *testing.T) {
	s := start(t, newConfig(t, 1000))
	resp := post(t, context.Background(), s.URL()+"/v1/completions", withPriority(3, 2, 7))
	defer resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.NotNil(t, e.Error)
	assert.Equal(t, "Got priority 7 but Priority scheduling is not enabled.", e.Error.Message)
	assert.Equal(t, "invalid_request_error", e.Error.Type)

	got := readStream(t, post(t, context.Background(), s.URL()+"/v1/completions", withPriority(3, 2, 0)), time.Now())
	assert.Equal(t, 2, got.tokens)
}

// The scheduling policy is checked with the engine: an unknown one, or priority without
// chunked prefill, is refused.
func TestEmulatorSchedulingPolicyOptions(t *testing.T) {
	_, err := emulate.ConfigFor(testGPU, testModel, emulate.Options{SchedulingPolicy: "lifo"})
	assert.ErrorContains(t, err, `unknown scheduling policy "lifo"`)
	_, err = emulate.ConfigFor(testGPU, testModel, emulate.Options{SchedulingPolicy: sim.SchedulingPriority, NoChunkedPrefill: true})
	assert.ErrorContains(t, err, "needs chunked prefill")
	cfg, err := emulate.ConfigFor(testGPU, testModel, emulate.Options{SchedulingPolicy: sim.SchedulingFCFS})
	require.NoError(t, err)
	assert.Empty(t, cfg.Engine.SchedulingPolicy, "FCFS is the engine's default")
}
