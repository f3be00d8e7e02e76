package traces

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// The execution trace: one schema for simulated and replayed runs. A results folder holds
// summary.csv (one SummaryRow per experiment, mode and policy), calls.csv (one CallRow per LLM
// call that ran) and workers.csv (one WorkerRow per interval of a worker's time). Times are
// seconds from the start of the run, written with microsecond resolution, so files written by
// the simulator with the same seed are byte-identical.

// SummaryRow is one line of summary.csv.
type SummaryRow struct {
	Experiment        string
	Mode              string // "sim" or "replay"
	Policy            string
	Seed              uint64
	Rule              string
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
var SummaryHeader = []string{"experiment", "mode", "policy", "seed", "rule", "queries", "expert_calls",
	"aggregator_calls", "aggregator_skipped", "expert_stage_s", "aggregator_stage_s", "e2e_s",
	"speedup_expert", "speedup_aggregator", "speedup_e2e", "accuracy", "accuracy_delta_pp",
	"gpu_busy_frac", "model_loads", "failed_calls"}

// Record returns the row's fields in SummaryHeader order.
func (r SummaryRow) Record() []string {
	return []string{r.Experiment, r.Mode, r.Policy, strconv.FormatUint(r.Seed, 10), r.Rule,
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
