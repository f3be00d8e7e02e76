package results

import (
	"fmt"
	"os"
	"slices"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// ReadCallsCSV reads a calls.csv written by WriteCSV with CallHeader. It is strict: a missing
// column, a field that is not a number, a negative layer, or a time that is not finite is an
// error that names the file, the line and the column.
func ReadCallsCSV(path string) ([]CallRow, error) {
	var rows []CallRow
	err := readResultsCSV(path, "calls", CallHeader, laterCallColumns, func(f *csvx.Reader) {
		r := CallRow{Policy: f.Str("policy"), Query: f.Int("query"), Call: f.Int("call"),
			Role: f.Str("role"), Layer: f.Int("layer"), Model: f.Str("model"), Worker: f.Int("worker"),
			InputTokens: f.Int("input_tokens"), OutputTokens: f.Int("output_tokens"),
			ReadyS: f.Secs("ready_s"), StartS: f.Secs("start_s"), FirstTokenS: f.Secs("first_token_s"),
			EndS: f.Secs("end_s"), Preemptions: f.Int("preemptions"), Status: f.Str("status"),
			Attempts: f.IntOr("attempts", 1), RetryLostS: f.SecsOr("retry_lost_s", 0), Error: f.StrOr("error", "")}
		if r.Layer < 0 {
			f.Fail("layer", "is negative")
		}
		rows = append(rows, r)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ReadQueriesCSV reads a queries.csv written by WriteCSV with QueryHeader, as strictly as
// ReadCallsCSV.
func ReadQueriesCSV(path string) ([]QueryRow, error) {
	var rows []QueryRow
	err := readResultsCSV(path, "queries", QueryHeader, nil, func(f *csvx.Reader) {
		r := QueryRow{Policy: f.Str("policy"), Query: f.Int("query"), Dataset: f.Str("dataset"), Category: f.Str("category"),
			ArrivalS: f.Secs("arrival_s"), FirstTokenS: f.Secs("first_token_s"), EndS: f.Secs("end_s"),
			LatencyS: f.Secs("latency_s"), TTFTS: f.Secs("ttft_s"), QueueS: f.Secs("queue_s"),
			Calls: f.Int("calls"), SkippedCalls: f.Int("skipped_calls"), FinalSkipped: f.Int("final_skipped") == 1,
			Answer: f.Str("answer"), Gold: f.Str("gold"), Correct: f.Int("correct"), SLOMet: f.Int("slo_met")}
		if r.LatencyS < 0 {
			f.Fail("latency_s", "is negative")
		}
		rows = append(rows, r)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ReadWorkersCSV reads a workers.csv written by WriteCSV with WorkerHeader, as strictly as
// ReadCallsCSV: kind must be load, busy or idle, and an interval must not end before it starts.
func ReadWorkersCSV(path string) ([]WorkerRow, error) {
	var rows []WorkerRow
	err := readResultsCSV(path, "workers", WorkerHeader, nil, func(f *csvx.Reader) {
		r := WorkerRow{Policy: f.Str("policy"), Worker: f.Int("worker"), Kind: f.Str("kind"),
			Model: f.Str("model"), StartS: f.Secs("start_s"), EndS: f.Secs("end_s"),
			MeanBatch: f.Float("mean_batch")}
		switch {
		case r.Kind != "load" && r.Kind != "busy" && r.Kind != "idle":
			f.Fail("kind", "is not load, busy or idle")
		case r.EndS < r.StartS:
			f.Fail("end_s", fmt.Sprintf("is before start_s %q", f.Str("start_s")))
		}
		rows = append(rows, r)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// The columns added to the results files after they were first written: a folder written
// before them still reads, with their defaults.
var (
	laterCallColumns    = []string{"attempts", "retry_lost_s", "error"}
	laterSummaryColumns = append([]string{"status", "retries", "runs", "host_lag_pct"}, steadyColumns...)
)

// readResultsCSV opens a results file (what names it: "calls" for calls.csv), checks that its
// header has every column of header but the later ones, and calls row for each record. A
// field row fails (csvx's keep-first error) stops the reading, and readResultsCSV returns it.
func readResultsCSV(path, what string, header, later []string, row func(*csvx.Reader)) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	defer file.Close()
	r, err := csvx.NewReader(path, file, csvx.Options{Empty: "empty file, want the header of " + what + ".csv"})
	if err != nil {
		return err
	}
	required := slices.DeleteFunc(slices.Clone(header), func(c string) bool { return slices.Contains(later, c) })
	if err := r.Require("", required...); err != nil {
		return err
	}
	for r.Next() {
		row(r)
	}
	return r.Err()
}
