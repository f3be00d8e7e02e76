package traces

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// The execution trace: one schema for simulated and replayed runs. A results folder holds
// summary.csv (one SummaryRow per experiment, mode and policy), calls.csv (one CallRow per LLM
// call that ran) and workers.csv (one WorkerRow per interval of a worker's time). Times are
// seconds from the start of the run, written with microsecond resolution, so files written by
// the simulator with the same seed are byte-identical.

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
}

// SummaryHeader is the header of summary.csv.
var SummaryHeader = []string{"experiment", "mode", "policy", "seed", "rule", "threshold", "queries", "expert_calls",
	"aggregator_calls", "aggregator_skipped", "expert_stage_s", "aggregator_stage_s", "e2e_s",
	"speedup_expert", "speedup_aggregator", "speedup_e2e", "accuracy", "accuracy_delta_pp",
	"gpu_busy_frac", "model_loads", "failed_calls"}

// Record returns the row's fields in SummaryHeader order.
func (r SummaryRow) Record() []string {
	return []string{r.Experiment, r.Mode, r.Policy, strconv.FormatUint(r.Seed, 10), r.Rule, ratio(r.Threshold),
		itoa(r.Queries), itoa(r.ExpertCalls), itoa(r.AggregatorCalls), itoa(r.AggregatorSkipped),
		secs(r.ExpertStageS), secs(r.AggregatorStageS), secs(r.E2ES),
		ratio(r.SpeedupExpert), ratio(r.SpeedupAggregator), ratio(r.SpeedupE2E),
		ratio(r.Accuracy), ratio(r.AccuracyDeltaPP), ratio(r.GPUBusyFrac), itoa(r.ModelLoads), itoa(r.FailedCalls)}
}

// CallRow is one line of calls.csv.
type CallRow struct {
	Policy       string
	Query        int
	Call         int
	Stage        Stage
	Model        string
	Worker       int
	InputTokens  int
	OutputTokens int
	ReadyS       float64
	StartS       float64
	FirstTokenS  float64
	EndS         float64
	Preemptions  int
	Status       string
}

// CallHeader is the header of calls.csv.
var CallHeader = []string{"policy", "query", "call", "stage", "model", "worker", "input_tokens", "output_tokens",
	"ready_s", "start_s", "first_token_s", "end_s", "preemptions", "status"}

// Record returns the row's fields in CallHeader order.
func (r CallRow) Record() []string {
	return []string{r.Policy, itoa(r.Query), itoa(r.Call), r.Stage.String(), r.Model, itoa(r.Worker),
		itoa(r.InputTokens), itoa(r.OutputTokens), secs(r.ReadyS), secs(r.StartS), secs(r.FirstTokenS),
		secs(r.EndS), itoa(r.Preemptions), r.Status}
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
func (r WorkerRow) Record() []string {
	return []string{r.Policy, itoa(r.Worker), r.Kind, r.Model, secs(r.StartS), secs(r.EndS), ratio(r.MeanBatch)}
}

// Recorder is a row with a CSV record.
type Recorder interface{ Record() []string }

// WriteCSV writes a header and rows.
func WriteCSV[R Recorder](w io.Writer, header []string, rows []R) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range rows {
		if err := cw.Write(r.Record()); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing csv: %w", err)
	}
	return nil
}

func itoa(i int) string      { return strconv.Itoa(i) }
func secs(f float64) string  { return strconv.FormatFloat(f, 'f', 6, 64) }
func ratio(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }

// ReadSummaryCSV reads a summary.csv written by WriteCSV; errors name the file, line and column.
func ReadSummaryCSV(path string) ([]SummaryRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading summary: %w", err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, h := range SummaryHeader {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("%s:1: missing column %q", path, h)
		}
	}
	var rows []SummaryRow
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		var perr error
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(rec[col[name]], 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("%s:%d: column %s: %q is not a number", path, line, name, rec[col[name]])
			}
			return v
		}
		r := SummaryRow{Experiment: rec[col["experiment"]], Mode: rec[col["mode"]], Policy: rec[col["policy"]], Rule: rec[col["rule"]], Threshold: num("threshold"),
			Seed: uint64(num("seed")), Queries: int(num("queries")), ExpertCalls: int(num("expert_calls")),
			AggregatorCalls: int(num("aggregator_calls")), AggregatorSkipped: int(num("aggregator_skipped")),
			ExpertStageS: num("expert_stage_s"), AggregatorStageS: num("aggregator_stage_s"), E2ES: num("e2e_s"),
			SpeedupExpert: num("speedup_expert"), SpeedupAggregator: num("speedup_aggregator"), SpeedupE2E: num("speedup_e2e"),
			Accuracy: num("accuracy"), AccuracyDeltaPP: num("accuracy_delta_pp"), GPUBusyFrac: num("gpu_busy_frac"),
			ModelLoads: int(num("model_loads")), FailedCalls: int(num("failed_calls"))}
		if perr != nil {
			return nil, perr
		}
		rows = append(rows, r)
	}
}
