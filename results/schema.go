package results

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// SummaryRow is one line of summary.csv.
type SummaryRow struct {
	Experiment string
	Mode       string // "sim" or "replay"
	Policy     string
	Seed       uint64
	Rule       string
	// Threshold is the aggregation rule's T (+Inf for never-skip).
	Threshold         float64
	Queries           int
	ExpertCalls       int
	AggregatorCalls   int
	AggregatorSkipped int
	ExpertStageS      float64
	AggregatorStageS  float64
	E2ES              float64
	// Speedups over the experiment's baseline (its first policy).
	SpeedupExpert     float64
	SpeedupAggregator float64
	SpeedupE2E        float64
	Accuracy          float64
	AccuracyDeltaPP   float64 // against always aggregating
	GPUBusyFrac       float64
	ModelLoads        int
	FailedCalls       int
	// SkippedCalls counts every call the rule skipped, at any layer; CancelledCalls the
	// calls stopped after they were submitted (an early exit, a policy's cancellation).
	SkippedCalls   int
	CancelledCalls int
	// Per-query latencies in seconds, named as vLLM's serving benchmark names them: end to end
	// (arrival to final answer: e2el), to the final call's first token (ttft), and the
	// queueing delay on the query's critical path.
	MeanE2ELS, MedianE2ELS, P90E2ELS, P99E2ELS float64
	MeanTTFTS, MedianTTFTS, P90TTFTS, P99TTFTS float64
	MeanQueueS, P99QueueS                      float64
	// RequestThroughput is queries per second from the first arrival to the last answer;
	// SLOAttainment the share of queries that meet the experiment's SLO and RequestGoodput
	// their rate (NaN without an SLO).
	RequestThroughput, SLOAttainment, RequestGoodput float64
	// Status says whether the row's figures may be used: StatusOK (every call done),
	// StatusFailed (calls failed: no speedup or accuracy is computed for it or against it) or
	// StatusPartial (calls failed and the figures are over the queries that completed under
	// every policy, as replay's --allow-failed-calls asks).
	Status string
	// Retries counts the attempts of calls after their first (replay), and Runs the replay
	// invocations that measured the policy (more than one: a resumed run, whose makespan spans
	// an interruption).
	Retries, Runs int
	// HostLagPct estimates how much of the servers' time the replaying host's own delays cost
	// (dispatching calls late, handling completions late), in percent of the calls' service
	// time; 0 in the simulator.
	HostLagPct float64
	// Steady is the steady state of an online run (nil for an offline batch: its columns are
	// blank).
	Steady *SteadyRow
}

// SteadyRow is an online run's steady state: the figures over its window of arrivals
// (policies.Window: the queries that arrived after the warm-up, up to the last arrival), and
// the load: the arrival rate over the cluster's capacity for the workload (the rate at which
// its workers would be busy all the time; experiments.Capacity).
type SteadyRow struct {
	WindowStartS, WindowEndS float64
	WindowQueries            int
	MeanE2ELS, MedianE2ELS   float64
	P99E2ELS                 float64
	MedianTTFTS, P99TTFTS    float64
	// SLOAttainment and Goodput as the whole run's (NaN without an SLO); Throughput is the
	// window's queries over the time from its start to the last of them ending.
	SLOAttainment, Goodput, Throughput float64
	// ArrivalRate is the offered load in queries per second, CapacityQPS the capacity, Load
	// their ratio; Overloaded says the load is at least 1.
	ArrivalRate, CapacityQPS, Load float64
	Overloaded                     bool
}

// steadyColumns are summary.csv's columns of SteadyRow.
var steadyColumns = []string{"window_start_s", "window_end_s", "window_queries", "window_mean_e2el_s",
	"window_median_e2el_s", "window_p99_e2el_s", "window_median_ttft_s", "window_p99_ttft_s",
	"window_slo_attainment", "window_goodput", "window_throughput", "arrival_rate", "capacity_qps", "load", "overloaded"}

// record is the row's steady-state fields (blank without one).
func (s *SteadyRow) record() []string {
	if s == nil {
		return make([]string, len(steadyColumns))
	}
	over := "0"
	if s.Overloaded {
		over = "1"
	}
	return []string{secs(s.WindowStartS), secs(s.WindowEndS), itoa(s.WindowQueries), secs(s.MeanE2ELS),
		secs(s.MedianE2ELS), secs(s.P99E2ELS), secs(s.MedianTTFTS), secs(s.P99TTFTS),
		blank(s.SLOAttainment), blank(s.Goodput), blank(s.Throughput), ratio(s.ArrivalRate), ratio(s.CapacityQPS), ratio(s.Load), over}
}

// readSteady reads a row's steady-state columns (nil when they are blank or absent).
func readSteady(f *csvx.Reader) *SteadyRow {
	if !f.Has("window_queries") || f.Str("window_queries") == "" {
		return nil
	}
	fig := func(name string) float64 {
		if f.Str(name) == "" {
			return math.NaN()
		}
		return f.Float(name)
	}
	return &SteadyRow{WindowStartS: f.Float("window_start_s"), WindowEndS: f.Float("window_end_s"), WindowQueries: f.Int("window_queries"),
		MeanE2ELS: f.Float("window_mean_e2el_s"), MedianE2ELS: f.Float("window_median_e2el_s"), P99E2ELS: f.Float("window_p99_e2el_s"),
		MedianTTFTS: f.Float("window_median_ttft_s"), P99TTFTS: f.Float("window_p99_ttft_s"),
		SLOAttainment: fig("window_slo_attainment"), Goodput: fig("window_goodput"), Throughput: fig("window_throughput"),
		ArrivalRate: f.Float("arrival_rate"), CapacityQPS: f.Float("capacity_qps"), Load: f.Float("load"), Overloaded: f.Int("overloaded") == 1}
}

// The values of SummaryRow.Status.
const (
	StatusOK      = "ok"
	StatusFailed  = "failed"
	StatusPartial = "partial"
)

// SummaryHeader is the header of summary.csv.
var SummaryHeader = append([]string{"experiment", "mode", "policy", "seed", "rule", "threshold", "queries", "expert_calls",
	"aggregator_calls", "aggregator_skipped", "expert_stage_s", "aggregator_stage_s", "e2e_s",
	"speedup_expert", "speedup_aggregator", "speedup_e2e", "accuracy", "accuracy_delta_pp",
	"gpu_busy_frac", "model_loads", "failed_calls", "skipped_calls", "cancelled_calls",
	"mean_e2el_s", "median_e2el_s", "p90_e2el_s", "p99_e2el_s",
	"mean_ttft_s", "median_ttft_s", "p90_ttft_s", "p99_ttft_s", "mean_queue_s", "p99_queue_s",
	"request_throughput", "slo_attainment", "request_goodput", "status", "retries", "runs", "host_lag_pct"},
	steadyColumns...)

// Record returns the row's fields in SummaryHeader order.
func (r SummaryRow) Record() []string {
	rec := []string{r.Experiment, r.Mode, r.Policy, strconv.FormatUint(r.Seed, 10), r.Rule, ratio(r.Threshold),
		itoa(r.Queries), itoa(r.ExpertCalls), itoa(r.AggregatorCalls), itoa(r.AggregatorSkipped),
		secs(r.ExpertStageS), secs(r.AggregatorStageS), secs(r.E2ES),
		blank(r.SpeedupExpert), blank(r.SpeedupAggregator), blank(r.SpeedupE2E),
		blank(r.Accuracy), blank(r.AccuracyDeltaPP), ratio(r.GPUBusyFrac), itoa(r.ModelLoads), itoa(r.FailedCalls),
		itoa(r.SkippedCalls), itoa(r.CancelledCalls), secs(r.MeanE2ELS), secs(r.MedianE2ELS), secs(r.P90E2ELS), secs(r.P99E2ELS),
		secs(r.MeanTTFTS), secs(r.MedianTTFTS), secs(r.P90TTFTS), secs(r.P99TTFTS), secs(r.MeanQueueS), secs(r.P99QueueS),
		ratio(r.RequestThroughput), ratio(r.SLOAttainment), ratio(r.RequestGoodput),
		cmp.Or(r.Status, StatusOK), itoa(r.Retries), itoa(max(r.Runs, 1)), ratio(r.HostLagPct)}
	return append(rec, r.Steady.record()...)
}

// SetSpeedups sets every row's speedups over the first row: the baseline's stage and
// end-to-end times over the row's (NaN where the row's time is not positive). It is the one
// place speedups are computed, for a simulated run, a replay and a resumed replay alike. No
// speedup is computed for or against a row with status failed, nor between rows summarised
// over different queries.
func SetSpeedups(rows []SummaryRow) {
	if len(rows) == 0 {
		return
	}
	base := rows[0]
	for i := range rows {
		if base.Status == StatusFailed || rows[i].Status == StatusFailed || base.Queries != rows[i].Queries {
			rows[i].SpeedupExpert, rows[i].SpeedupAggregator, rows[i].SpeedupE2E = math.NaN(), math.NaN(), math.NaN()
			continue
		}
		rows[i].SpeedupExpert = speedup(base.ExpertStageS, rows[i].ExpertStageS)
		rows[i].SpeedupAggregator = speedup(base.AggregatorStageS, rows[i].AggregatorStageS)
		rows[i].SpeedupE2E = speedup(base.E2ES, rows[i].E2ES)
	}
}

// speedup is base/d, NaN when d is not positive.
func speedup(base, d float64) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return base / d
}

// blank formats a figure that may not have been computed (a speedup, an accuracy): empty when
// it is not a number.
func blank(f float64) string {
	if math.IsNaN(f) {
		return ""
	}
	return ratio(f)
}

// QueryRow is one line of queries.csv: how one query went under one policy.
type QueryRow struct {
	Policy   string
	Query    int
	Dataset  string
	Category string
	// ArrivalS is when the query arrived, FirstTokenS when its final call produced its first
	// token, EndS when its answer was final; LatencyS = EndS - ArrivalS (e2el), TTFTS =
	// FirstTokenS - ArrivalS, QueueS the queueing delay on its critical path.
	ArrivalS, FirstTokenS, EndS, LatencyS, TTFTS, QueueS float64
	// Calls is the number of calls that ran, SkippedCalls the calls the rule skipped, and
	// FinalSkipped whether that included its final call.
	Calls, SkippedCalls int
	FinalSkipped        bool
	Answer, Gold        string
	// Correct is 1 or 0, or -1 when the gold answer is unknown; SLOMet likewise 1, 0, or -1
	// without an SLO.
	Correct, SLOMet int
}

// QueryHeader is the header of queries.csv.
var QueryHeader = []string{"policy", "query", "dataset", "category", "arrival_s", "first_token_s", "end_s",
	"latency_s", "ttft_s", "queue_s", "calls", "skipped_calls", "final_skipped", "answer", "gold", "correct", "slo_met"}

// Record returns the row's fields in QueryHeader order.
func (r QueryRow) Record() []string { return record(r, len(QueryHeader)) }

// fields gives the row's fields in QueryHeader order.
func (r QueryRow) fields(f fieldSink) {
	skipped := 0
	if r.FinalSkipped {
		skipped = 1
	}
	f.str(r.Policy)
	f.num(r.Query)
	f.str(r.Dataset)
	f.str(r.Category)
	f.secs(r.ArrivalS)
	f.secs(r.FirstTokenS)
	f.secs(r.EndS)
	f.secs(r.LatencyS)
	f.secs(r.TTFTS)
	f.secs(r.QueueS)
	f.num(r.Calls)
	f.num(r.SkippedCalls)
	f.num(skipped)
	f.str(r.Answer)
	f.str(r.Gold)
	f.num(r.Correct)
	f.num(r.SLOMet)
}

// CallRow is one line of calls.csv.
type CallRow struct {
	Policy string
	Query  int
	Call   int
	// Role and Layer label the call (Call.Role, Call.Layer).
	Role  string
	Layer int
	Model string
	// Worker is the worker that served the call (-1 for a tool step).
	Worker       int
	InputTokens  int
	OutputTokens int
	ReadyS       float64
	StartS       float64
	FirstTokenS  float64
	EndS         float64
	Preemptions  int
	Status       string
	// Attempts is how many times the call was sent (replay retries a failed attempt; 1 in the
	// simulator). The row's times are its last attempt's; RetryLostS is the time from its
	// first attempt's sending to its last's, lost to the failed attempts and their backoff.
	Attempts   int
	RetryLostS float64
	// Error says why a failed call failed (its last attempt's error).
	Error string
}

// CallHeader is the header of calls.csv.
var CallHeader = []string{"policy", "query", "call", "role", "layer", "model", "worker", "input_tokens", "output_tokens",
	"ready_s", "start_s", "first_token_s", "end_s", "preemptions", "status", "attempts", "retry_lost_s", "error"}

// Record returns the row's fields in CallHeader order.
func (r CallRow) Record() []string { return record(r, len(CallHeader)) }

// fields gives the row's fields in CallHeader order.
func (r CallRow) fields(f fieldSink) {
	f.str(r.Policy)
	f.num(r.Query)
	f.num(r.Call)
	f.str(r.Role)
	f.num(r.Layer)
	f.str(r.Model)
	f.num(r.Worker)
	f.num(r.InputTokens)
	f.num(r.OutputTokens)
	f.secs(r.ReadyS)
	f.secs(r.StartS)
	f.secs(r.FirstTokenS)
	f.secs(r.EndS)
	f.num(r.Preemptions)
	f.str(r.Status)
	f.num(r.Attempts)
	f.secs(r.RetryLostS)
	f.str(r.Error)
}

// WorkerRow is one line of workers.csv: an interval of a worker's time.
type WorkerRow struct {
	Policy    string
	Worker    int
	Kind      string // load, busy or idle
	Model     string
	StartS    float64
	EndS      float64
	MeanBatch float64
}

// WorkerHeader is the header of workers.csv.
var WorkerHeader = []string{"policy", "worker", "kind", "model", "start_s", "end_s", "mean_batch"}

// Record returns the row's fields in WorkerHeader order.
func (r WorkerRow) Record() []string { return record(r, len(WorkerHeader)) }

// fields gives the row's fields in WorkerHeader order.
func (r WorkerRow) fields(f fieldSink) {
	f.str(r.Policy)
	f.num(r.Worker)
	f.str(r.Kind)
	f.str(r.Model)
	f.secs(r.StartS)
	f.secs(r.EndS)
	f.ratio(r.MeanBatch)
}

// Recorder is a row with a CSV record.
type Recorder interface{ Record() []string }

// WriteCSV writes a header and rows.
func WriteCSV[R Recorder](w io.Writer, header []string, rows []R) error {
	return WriteCSVSeq(w, header, slices.Values(rows))
}

// WriteCSVSeq is WriteCSV for rows made one at a time (a large run's calls need not be held
// as rows all at once).
func WriteCSVSeq[R Recorder](w io.Writer, header []string, rows iter.Seq[R]) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := csv.NewWriter(bw) // writes into bw itself
	if err := cw.Write(header); err != nil {
		return err
	}
	// Rows that give their fields go straight into the buffer: a large run writes millions
	// of fields, and making each a string first was most of the time it took.
	cw.Flush() // the header, into bw
	var err error
	switch rs := any(rows).(type) {
	case iter.Seq[CallRow]:
		err = writeLines(bw, rs, CallRow.fields)
	case iter.Seq[QueryRow]:
		err = writeLines(bw, rs, QueryRow.fields)
	case iter.Seq[WorkerRow]:
		err = writeLines(bw, rs, WorkerRow.fields)
	default:
		for r := range rows {
			if err := cw.Write(r.Record()); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return fmt.Errorf("writing csv: %w", err)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing csv: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing csv: %w", err)
	}
	return nil
}

// writeLines writes each row's fields as a CSV line.
func writeLines[R any](w io.Writer, rows iter.Seq[R], fields func(R, fieldSink)) error {
	line := &lineSink{}
	for r := range rows {
		line.b, line.n = line.b[:0], 0
		fields(r, line)
		line.b = append(line.b, '\n')
		if _, err := w.Write(line.b); err != nil {
			return err
		}
	}
	return nil
}

// A fielder gives its fields, in its header's order, to a fieldSink: Record collects them as
// strings, and WriteCSVSeq appends them to a CSV line, as encoding/csv would write them (one
// list of a row's fields for both).
type fielder interface{ fields(fieldSink) }

// fieldSink receives a row's fields: strings, integers, seconds (microseconds resolution) and
// ratios (four decimals).
type fieldSink interface {
	str(string)
	num(int)
	secs(float64)
	ratio(float64)
}

// record collects a fielder's n fields as strings.
func record(r fielder, n int) []string {
	rs := recordSink(make([]string, 0, n))
	r.fields(&rs)
	return rs
}

type recordSink []string

func (s *recordSink) str(v string)    { *s = append(*s, v) }
func (s *recordSink) num(v int)       { *s = append(*s, itoa(v)) }
func (s *recordSink) secs(v float64)  { *s = append(*s, secs(v)) }
func (s *recordSink) ratio(v float64) { *s = append(*s, ratio(v)) }

// lineSink appends fields to one CSV line, comma-separated and quoted as encoding/csv's Writer
// quotes them (with its defaults: Comma ',', UseCRLF false).
type lineSink struct {
	b []byte
	n int // fields so far
}

func (s *lineSink) sep() {
	if s.n > 0 {
		s.b = append(s.b, ',')
	}
	s.n++
}

func (s *lineSink) str(v string) {
	s.sep()
	if !csvNeedsQuotes(v) {
		s.b = append(s.b, v...)
		return
	}
	s.b = append(s.b, '"')
	for i := 0; i < len(v); i++ {
		if v[i] == '"' {
			s.b = append(s.b, '"')
		}
		s.b = append(s.b, v[i])
	}
	s.b = append(s.b, '"')
}

func (s *lineSink) num(v int) {
	s.sep()
	s.b = strconv.AppendInt(s.b, int64(v), 10)
}

func (s *lineSink) secs(v float64) {
	s.sep()
	s.b = appendFixed(s.b, v, 6)
}

func (s *lineSink) ratio(v float64) {
	s.sep()
	s.b = appendFixed(s.b, v, 4)
}

// csvNeedsQuotes is encoding/csv's rule (Writer.fieldNeedsQuotes with Comma ','): a field
// with a comma, a quote, a carriage return or a newline, one that starts with a space
// character, and the field \. are quoted.
func csvNeedsQuotes(v string) bool {
	if v == "" {
		return false
	}
	if v == `\.` {
		return true
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ',', '"', '\r', '\n':
			return true
		}
	}
	r, _ := utf8.DecodeRuneInString(v)
	return unicode.IsSpace(r)
}

func itoa(i int) string      { return strconv.Itoa(i) }
func secs(f float64) string  { return strconv.FormatFloat(f, 'f', 6, 64) }
func ratio(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }

// ReadSummaryCSV reads a summary.csv written by WriteCSV; errors name the file, line and column.
func ReadSummaryCSV(path string) ([]SummaryRow, error) {
	var rows []SummaryRow
	err := readResultsCSV(path, "summary", SummaryHeader, laterSummaryColumns, func(f *csvx.Reader) {
		// A figure that was not computed is blank; other numbers must be numbers.
		fig := func(name string) float64 {
			if f.Str(name) == "" {
				return math.NaN()
			}
			return f.Float(name)
		}
		r := SummaryRow{Experiment: f.Str("experiment"), Mode: f.Str("mode"), Policy: f.Str("policy"), Rule: f.Str("rule"),
			Threshold: f.Float("threshold"), Seed: uint64(f.Float("seed")), Queries: f.Int("queries"), ExpertCalls: f.Int("expert_calls"),
			AggregatorCalls: f.Int("aggregator_calls"), AggregatorSkipped: f.Int("aggregator_skipped"),
			ExpertStageS: f.Float("expert_stage_s"), AggregatorStageS: f.Float("aggregator_stage_s"), E2ES: f.Float("e2e_s"),
			SpeedupExpert: fig("speedup_expert"), SpeedupAggregator: fig("speedup_aggregator"), SpeedupE2E: fig("speedup_e2e"),
			Accuracy: fig("accuracy"), AccuracyDeltaPP: fig("accuracy_delta_pp"), GPUBusyFrac: f.Float("gpu_busy_frac"),
			ModelLoads: f.Int("model_loads"), FailedCalls: f.Int("failed_calls"), SkippedCalls: f.Int("skipped_calls"),
			CancelledCalls: f.Int("cancelled_calls"),
			MeanE2ELS:      f.Float("mean_e2el_s"), MedianE2ELS: f.Float("median_e2el_s"), P90E2ELS: f.Float("p90_e2el_s"), P99E2ELS: f.Float("p99_e2el_s"),
			MeanTTFTS: f.Float("mean_ttft_s"), MedianTTFTS: f.Float("median_ttft_s"), P90TTFTS: f.Float("p90_ttft_s"), P99TTFTS: f.Float("p99_ttft_s"),
			MeanQueueS: f.Float("mean_queue_s"), P99QueueS: f.Float("p99_queue_s"), RequestThroughput: f.Float("request_throughput"),
			SLOAttainment: f.Float("slo_attainment"), RequestGoodput: f.Float("request_goodput"),
			// Columns added after the first results were written: absent in older folders.
			Status: f.StrOr("status", StatusOK)}
		if r.Status != StatusOK && r.Status != StatusFailed && r.Status != StatusPartial {
			f.Fail("status", "is not ok, failed or partial")
		}
		r.Retries, r.Runs, r.HostLagPct = f.IntOr("retries", 0), f.IntOr("runs", 1), f.FloatOr("host_lag_pct", 0)
		r.Steady = readSteady(f)
		rows = append(rows, r)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}
