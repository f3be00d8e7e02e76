package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
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

// recorder is a server in front of an emulator's handler that keeps the body of every
// completion request in the order the server received them, and counts the connections that
// carried completions: open at once (peak) and in all.
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	open   map[net.Conn]bool // connections that carried a completion, open now
	peak   int
	total  int
	url    string
}

type connKey struct{}

func newRecorder(t *testing.T, h http.Handler) *recorder {
	t.Helper()
	rec := &recorder{open: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/completions" {
				body, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				r.Body = io.NopCloser(bytes.NewReader(body))
				conn := r.Context().Value(connKey{}).(net.Conn)
				rec.mu.Lock()
				rec.bodies = append(rec.bodies, body)
				if _, seen := rec.open[conn]; !seen {
					rec.open[conn] = true
					rec.total++
					rec.peak = max(rec.peak, len(rec.open))
				}
				rec.mu.Unlock()
			}
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				rec.mu.Lock()
				delete(rec.open, c)
				rec.mu.Unlock()
			}
		},
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { srv.Close() })
	rec.url = "http://" + ln.Addr().String()
	return rec
}

// submissions records the order of the Driver's Submit calls per worker.
type submissions struct {
	policies.Backend
	order map[policies.WorkerID][]*traces.Call
}

func (s *submissions) Submit(w policies.WorkerID, c *traces.Call, priority int) error {
	s.order[w] = append(s.order[w], c)
	return s.Backend.Submit(w, c, priority)
}

// Every server receives its worker's calls in exactly the order the policy submitted them,
// prompt bytes and lengths included, with at most max_concurrency connections carrying
// calls and no connection opened beyond those (they are reused).
func TestDispatchKeepsSubmissionOrderAndBoundsConnections(t *testing.T) {
	const seed, limit, queries = 42, 4, 40
	recs := make([]*recorder, 2)
	for w, name := range []string{"M0", "M1"} {
		cfg, err := emulate.ConfigFor("A100-80GB", "llama-3-8b", emulate.Options{MaxNumSeqs: 2})
		require.NoError(t, err)
		cfg.ServedName, cfg.TimeScale, cfg.LoadTime, cfg.Logger, cfg.PrefixCaching = name, scale, 0, slog.New(slog.DiscardHandler), false
		em, err := emulate.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { em.Close() })
		recs[w] = newRecorder(t, em.Handler())
	}
	cfg := config(recs[0].url, recs[1].url)
	cfg.Seed, cfg.MaxConcurrency = seed, limit
	cfg.AdmissionPoll = 20 * time.Millisecond * scale
	b, err := replay.New(cfg)
	require.NoError(t, err)
	defer b.Close()
	sub := &submissions{Backend: b, order: map[policies.WorkerID][]*traces.Call{}}
	wl := workload(queries)
	// Varied output lengths: calls finish out of order, and later sends interleave with them.
	for i := range wl.Queries {
		q := &wl.Queries[i]
		q.Calls[0].OutputTokens, q.Calls[1].OutputTokens = 5+i%11, 30-i%13
	}
	d, err := policies.NewDriver(sub, roundrobin.New(), policies.NeverSkip(), wl, infos(), 2)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.Run(ctx)
	require.NoError(t, err)
	require.Len(t, res.Calls, queries*3)

	type sent struct {
		Model     string          `json:"model"`
		Prompt    json.RawMessage `json:"prompt"`
		MaxTokens int             `json:"max_tokens"`
	}
	for w, rec := range recs {
		var want, got []sent
		for _, c := range sub.order[policies.WorkerID(w)] {
			prompt, err := json.Marshal(replay.PromptIDs(seed, c.Query, c.ID, c.InputTokens, c.PrefixTokens, 0))
			require.NoError(t, err)
			want = append(want, sent{c.Model, prompt, c.OutputTokens})
		}
		for _, body := range rec.bodies {
			var s sent
			require.NoError(t, json.Unmarshal(body, &s))
			got = append(got, s)
		}
		require.NotEmpty(t, want)
		require.Equal(t, want, got, "worker %d: the server saw the calls in submission order", w)
		t.Logf("worker %d: %d calls in submission order; connections carrying calls: peak %d, %d in all (max_concurrency %d)",
			w, len(got), rec.peak, rec.total, limit)
		assert.LessOrEqual(t, rec.peak, limit, "worker %d", w)
		assert.LessOrEqual(t, rec.total, limit, "worker %d: connections are reused", w)
	}
	for _, c := range res.Calls {
		tm := c.Timing
		assert.True(t, tm.Submitted <= tm.Started && tm.Started <= tm.FirstToken && tm.FirstToken <= tm.End, "call %d: %+v", c.Call.ID, tm)
	}
}
