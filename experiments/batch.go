package experiments

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// BatchReport is the outcome of a single-model batch run.
type BatchReport struct {
	Experiment string
	GPU        string
	Model      string
	KVTokens   int
	Result     sim.BatchResult
	// Requests are the requests served, in the order of Result.Times.
	Requests []sim.Request
}

// RunBatch simulates the resolved batch workload: requests drawn from the workload's
// distributions with the experiment's seed, served by one engine.
func (r *Resolved) RunBatch() (*BatchReport, error) {
	b := r.Batch
	if b == nil {
		return nil, fmt.Errorf("%s: not a batch workload", r.File())
	}
	lengths := sim.Stream(uint64(r.Seed), "lengths")
	arrivals := sim.Stream(uint64(r.Seed), "arrivals")
	reqs := make([]sim.Arrival, b.Requests)
	var t float64
	for i := range reqs {
		if b.Rate > 0 {
			t += arrivals.ExpFloat64() / b.Rate
		}
		reqs[i] = sim.Arrival{
			At:      time.Duration(math.Round(t * 1e9)),
			Request: sim.Request{ID: uint64(i), PromptTokens: b.Input.Sample(lengths), OutputTokens: b.Output.Sample(lengths)},
		}
	}
	eng, err := sim.NewEngine(b.Model.Engine, b.Model.Cost)
	if err != nil {
		return nil, err
	}
	res, err := sim.Serve(eng, reqs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.File(), err)
	}
	return &BatchReport{
		Experiment: r.Name, GPU: r.GPU.Name, Model: b.Model.Arch.ID,
		KVTokens: b.Model.Engine.NumBlocks * b.Model.Engine.BlockSize, Result: res, Requests: requestsOf(reqs),
	}, nil
}

func requestsOf(arrivals []sim.Arrival) []sim.Request {
	out := make([]sim.Request, len(arrivals))
	for i, a := range arrivals {
		out[i] = a.Request
	}
	return out
}

// BatchRequestHeader is the header of a batch run's requests.csv.
var BatchRequestHeader = []string{"request", "prompt_tokens", "output_tokens", "arrival_s", "first_token_s", "end_s", "ttft_s", "latency_s", "preemptions"}

// WriteDir writes the report into dir: report.txt (the table Write prints) and requests.csv
// (one row per request, times in seconds from the start).
func (b *BatchReport) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var table bytes.Buffer
	if err := b.Write(&table); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), table.Bytes(), 0o644); err != nil {
		return err
	}
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	if err := cw.Write(BatchRequestHeader); err != nil {
		return err
	}
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }
	for i, t := range b.Result.Times {
		r := b.Requests[i]
		if err := cw.Write([]string{strconv.FormatUint(t.ID, 10), strconv.Itoa(r.PromptTokens), strconv.Itoa(r.OutputTokens),
			secs(t.Arrival), secs(t.FirstToken), secs(t.Finish), secs(t.FirstToken - t.Arrival), secs(t.Finish - t.Arrival),
			strconv.Itoa(t.Preemptions)}); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "requests.csv"), buf.Bytes(), 0o644)
}

// Write prints the report as an aligned table.
func (b *BatchReport) Write(w io.Writer) error {
	res := b.Result
	var ttft, lat []float64
	for _, t := range res.Times {
		ttft = append(ttft, (t.FirstToken - t.Arrival).Seconds())
		lat = append(lat, (t.Finish - t.Arrival).Seconds())
	}
	slices.Sort(ttft)
	slices.Sort(lat)
	rows := [][2]string{
		{"experiment", b.Experiment},
		{"gpu", b.GPU},
		{"model", b.Model},
		{"requests", fmt.Sprint(res.Requests)},
		{"kv cache tokens", fmt.Sprint(b.KVTokens)},
		{"batch latency s", fmt.Sprintf("%.3f", res.Makespan.Seconds())},
		{"output tokens", fmt.Sprint(res.OutputTokens)},
		{"output throughput tok/s", fmt.Sprintf("%.1f", res.OutputThroughput())},
		{"mean batch size", fmt.Sprintf("%.1f", res.Stats.MeanBatch)},
		{"preemptions", fmt.Sprint(res.Stats.Preemptions)},
		{"engine iterations", fmt.Sprint(res.Stats.Steps)},
		{"ttft mean / p50 / p99 s", fmt.Sprintf("%.3f / %.3f / %.3f", mean(ttft), quantile(ttft, 0.5), quantile(ttft, 0.99))},
		{"latency mean / p50 / p99 s", fmt.Sprintf("%.3f / %.3f / %.3f", mean(lat), quantile(lat, 0.5), quantile(lat, 0.99))},
	}
	for _, row := range rows {
		if _, err := fmt.Fprintf(w, "%-27s %s\n", row[0], row[1]); err != nil {
			return err
		}
	}
	return nil
}

// mean returns the mean of values (NaN when there are none).
func mean(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
