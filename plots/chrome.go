package plots

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/mosaic-sched/mosaic/results"
)

// Thread ids of the Chrome trace: worker w's own lane is (w+1)*tidStride; the lanes of the
// calls it serves follow it, one per concurrently running call.
const tidStride = 10000

// chromeEvent is one event of the Chrome trace event format ("JSON Object Format").
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   int64          `json:"ts"`
	Dur  int64          `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteChromeTrace writes a run's timeline in the Chrome trace event format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: a JSON object whose "traceEvents" are
//
//   - metadata events (ph "M") naming one process per policy (pid 1, 2, ... in the order the
//     policies first appear) and its threads;
//   - per worker w, a thread "wN" (tid (w+1)*10000) with a complete event (ph "X") per load
//     and busy interval of workers.csv, named after the model ("load MODEL" for loads; idle
//     intervals are the gaps between them);
//   - per worker, threads "wN calls" (tid (w+1)*10000+1, +2, ...) with one complete event per
//     call it served, named after the model, category the role, args the query, call id, role, layer,
//     tokens, queueing delay, time to first token, preemptions and status. Calls that overlap
//     in time (a batch) go to different threads, because complete events on one thread must
//     nest. Tool steps, which take no worker, go to threads "tool steps" (tid 1, 2, ...).
//
// Timestamps (ts) and durations (dur) are integer microseconds from the start of the run.
func WriteChromeTrace(w io.Writer, calls []results.CallRow, workers []results.WorkerRow) error {
	policies := distinct(workers, func(r results.WorkerRow) string { return r.Policy })
	for _, c := range calls {
		if !slices.Contains(policies, c.Policy) {
			policies = append(policies, c.Policy)
		}
	}
	pid := func(policy string) int { return slices.Index(policies, policy) + 1 }
	var events []chromeEvent
	meta := func(name string, p, tid int, args map[string]any) {
		events = append(events, chromeEvent{Name: name, Ph: "M", Pid: p, Tid: tid, Args: args})
	}
	for i, p := range policies {
		meta("process_name", i+1, 0, map[string]any{"name": p})
		meta("process_sort_index", i+1, 0, map[string]any{"sort_index": i + 1})
	}
	type lane struct{ pid, tid int }
	named := map[lane]bool{}
	thread := func(p, tid int, name string) {
		if !named[lane{p, tid}] {
			named[lane{p, tid}] = true
			meta("thread_name", p, tid, map[string]any{"name": name})
			meta("thread_sort_index", p, tid, map[string]any{"sort_index": tid})
		}
	}
	for _, r := range workers {
		if r.Kind == "idle" {
			continue
		}
		p, tid := pid(r.Policy), (r.Worker+1)*tidStride
		thread(p, tid, fmt.Sprintf("w%d", r.Worker))
		name := r.Model
		if r.Kind == "load" {
			name = "load " + r.Model
		}
		args := map[string]any{"kind": r.Kind, "model": r.Model}
		if r.Kind == "busy" {
			args["mean_batch"] = r.MeanBatch
		}
		events = append(events, chromeEvent{Name: name, Cat: r.Kind, Ph: "X", Ts: micros(r.StartS),
			Dur: micros(r.EndS) - micros(r.StartS), Pid: p, Tid: tid, Args: args})
	}

	// Calls, per (policy, worker) in start order, each to the first call lane free at its start.
	sorted := slices.Clone(calls)
	slices.SortStableFunc(sorted, func(a, b results.CallRow) int {
		return cmp.Or(cmp.Compare(pid(a.Policy), pid(b.Policy)), cmp.Compare(a.Worker, b.Worker),
			cmp.Compare(micros(a.StartS), micros(b.StartS)))
	})
	var laneEnds []int64
	var cur lane
	for i, c := range sorted {
		p := pid(c.Policy)
		if i == 0 || (lane{p, c.Worker}) != cur {
			cur, laneEnds = lane{p, c.Worker}, laneEnds[:0]
		}
		start, end := micros(c.StartS), micros(c.EndS)
		slot := slices.IndexFunc(laneEnds, func(e int64) bool { return e <= start })
		if slot < 0 {
			slot = len(laneEnds)
			laneEnds = append(laneEnds, 0)
		}
		laneEnds[slot] = max(end, start+1)
		tid := (c.Worker+1)*tidStride + 1 + slot
		name := fmt.Sprintf("w%d calls", c.Worker)
		if c.Worker < 0 {
			name = "tool steps" // no worker: tid 1, 2, ...
		}
		thread(p, tid, name)
		events = append(events, chromeEvent{Name: c.Model, Cat: c.Role, Ph: "X", Ts: start, Dur: end - start,
			Pid: p, Tid: tid, Args: map[string]any{
				"query": c.Query, "call": c.Call, "role": c.Role, "layer": c.Layer, "worker": c.Worker,
				"input_tokens": c.InputTokens, "output_tokens": c.OutputTokens,
				"queued_us": start - micros(c.ReadyS), "ttft_us": micros(c.FirstTokenS) - start,
				"preemptions": c.Preemptions, "status": c.Status}})
	}

	bw := bufio.NewWriter(w)
	if _, err := io.WriteString(bw, `{"displayTimeUnit":"ms","traceEvents":[`); err != nil {
		return err
	}
	for i, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("plots: encoding trace event: %w", err)
		}
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
		bw.Write(b)
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

// micros converts seconds to whole microseconds (the results' resolution).
func micros(s float64) int64 { return int64(math.Round(s * 1e6)) }
