package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies/backend"
	"github.com/mosaic-sched/mosaic/replay/emulate"
	"github.com/mosaic-sched/mosaic/traces"
)

// A capture of the requests replay sends for two calls of one query whose prompts share the
// question: distinct token-ID prompts that share exactly the marked prefix, which the
// emulator's prefix cache then serves in whole blocks, and only when it is on.
func TestCapturedPromptsShareExactlyTheMarkedPrefix(t *testing.T) {
	for _, caching := range []bool{true, false} {
		t.Run(map[bool]string{true: "prefix caching on", false: "prefix caching off"}[caching], func(t *testing.T) {
			cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{})
			require.NoError(t, err)
			cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.Logger, cfg.PrefixCaching = "M", 100, 0, slog.New(slog.DiscardHandler), caching
			em, err := emulate.New(cfg)
			require.NoError(t, err)
			defer em.Close()
			var mu sync.Mutex
			var bodies [][]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/completions" {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					mu.Lock()
					bodies = append(bodies, body)
					mu.Unlock()
				}
				em.Handler().ServeHTTP(w, r)
			}))
			defer srv.Close()

			b, err := New(Config{Workers: Identical(1, "A100-80GB", map[string]Model{"M": {Name: "M", MaxNumSeqs: 8}}), Seed: 9, TimeScale: 100,
				Endpoints: []Endpoint{{Worker: 0, URL: srv.URL}}, PrefixCaching: caching, HealthTimeout: 10 * time.Second})
			require.NoError(t, err)
			defer b.Close()
			// The workload's marks: the expert's prompt starts with a 50-token question, the
			// aggregator's with the same question (and then the experts' answers).
			marks := map[int]int{0: 50, 2: 50}
			b.prefixOf = func(c *traces.Call) int { return marks[c.ID] }
			expert := &traces.Call{ID: 0, Query: 0, Role: traces.RoleExpert, Model: "M", InputTokens: 80, OutputTokens: 4}
			agg := &traces.Call{ID: 2, Query: 0, Role: traces.RoleAggregator, Model: "M", InputTokens: 200, OutputTokens: 4}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, b.Load(0, "M"))
			next := func() backend.Event {
				ev, err := b.Next(ctx)
				require.NoError(t, err)
				return ev
			}
			require.Equal(t, backend.EventLoaded, next().Kind)
			for _, c := range []*traces.Call{expert, agg} { // one after the other: the second may hit the cache
				require.NoError(t, b.Submit(0, c, 0))
				ev := next()
				require.Equal(t, backend.EventDone, ev.Kind, "%v", ev.Err)
			}

			require.Len(t, bodies, 2)
			var prompts [2][]int
			for i, body := range bodies {
				var req struct {
					Prompt []int `json:"prompt"`
				}
				require.NoError(t, json.Unmarshal(body, &req))
				prompts[i] = req.Prompt
			}
			require.Len(t, prompts[0], 80)
			require.Len(t, prompts[1], 200)
			shared := 0
			for shared < 80 && prompts[0][shared] == prompts[1][shared] {
				shared++
			}
			assert.Equal(t, 50, shared, "the prompts share exactly the marked prefix")
			t.Logf("captured: expert prompt %v...; aggregator prompt %v...; shared %d tokens", prompts[0][:6], prompts[1][:6], shared)

			resp, err := http.Get(srv.URL + "/metrics")
			require.NoError(t, err)
			defer resp.Body.Close()
			text, _ := io.ReadAll(resp.Body)
			m := regexp.MustCompile(`(?m)^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$`).FindSubmatch(text)
			require.NotNil(t, m)
			hits, _ := strconv.Atoi(string(m[1]))
			want := 0
			if caching {
				want = 48 // three whole blocks of 16 of the 50 shared tokens
			}
			assert.Equal(t, want, hits)
			for _, s := range b.Servers() {
				assert.Equal(t, map[bool]string{true: "on", false: "off"}[caching], s.PrefixCaching)
			}
		})
	}
}
