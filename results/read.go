package results

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
)

// ReadCallsCSV reads a calls.csv written by WriteCSV with CallHeader. It is strict: a missing
// column, a field that is not a number, a negative layer, or a time that is not finite is an
// error that names the file, the line and the column.
func ReadCallsCSV(path string) ([]CallRow, error) {
	var rows []CallRow
	err := readResultsCSV(path, "calls", CallHeader, func(f *csvFields) {
		r := CallRow{Policy: f.str("policy"), Query: f.int("query"), Call: f.int("call"),
			Role: f.str("role"), Layer: f.int("layer"), Model: f.str("model"), Worker: f.int("worker"),
			InputTokens: f.int("input_tokens"), OutputTokens: f.int("output_tokens"),
			ReadyS: f.secs("ready_s"), StartS: f.secs("start_s"), FirstTokenS: f.secs("first_token_s"),
			EndS: f.secs("end_s"), Preemptions: f.int("preemptions"), Status: f.str("status"), Attempts: 1}
		// Columns added after the first results were written: absent in older folders.
		if f.has("attempts") {
			r.Attempts, r.RetryLostS, r.Error = f.int("attempts"), f.secs("retry_lost_s"), f.str("error")
		}
		if f.err == nil && r.Layer < 0 {
			f.fail("layer", "is negative")
		}
		if f.err == nil {
			rows = append(rows, r)
		}
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
	err := readResultsCSV(path, "queries", QueryHeader, func(f *csvFields) {
		r := QueryRow{Policy: f.str("policy"), Query: f.int("query"), Dataset: f.str("dataset"), Category: f.str("category"),
			ArrivalS: f.secs("arrival_s"), FirstTokenS: f.secs("first_token_s"), EndS: f.secs("end_s"),
			LatencyS: f.secs("latency_s"), TTFTS: f.secs("ttft_s"), QueueS: f.secs("queue_s"),
			Calls: f.int("calls"), SkippedCalls: f.int("skipped_calls"), FinalSkipped: f.int("final_skipped") == 1,
			Answer: f.str("answer"), Gold: f.str("gold"), Correct: f.int("correct"), SLOMet: f.int("slo_met")}
		if f.err == nil && r.LatencyS < 0 {
			f.fail("latency_s", "is negative")
		}
		if f.err == nil {
			rows = append(rows, r)
		}
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
	err := readResultsCSV(path, "workers", WorkerHeader, func(f *csvFields) {
		r := WorkerRow{Policy: f.str("policy"), Worker: f.int("worker"), Kind: f.str("kind"),
			Model: f.str("model"), StartS: f.secs("start_s"), EndS: f.secs("end_s"),
			MeanBatch: f.float("mean_batch")}
		switch {
		case f.err != nil:
		case r.Kind != "load" && r.Kind != "busy" && r.Kind != "idle":
			f.fail("kind", "is not load, busy or idle")
		case r.EndS < r.StartS:
			f.fail("end_s", fmt.Sprintf("is before start_s %q", f.rec[f.col["start_s"]]))
		default:
			rows = append(rows, r)
		}
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// readResultsCSV reads the header of a results file, checks that it has every column of
// header, and calls row for each further record. The first error a row records stops it.
func readResultsCSV(path, what string, header []string, row func(*csvFields)) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	defer file.Close()
	cr := csv.NewReader(file)
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s:1: empty file, want the header of %s.csv", path, what)
	}
	if err != nil {
		return fmt.Errorf("%s:1: %w", path, err)
	}
	col := make(map[string]int, len(head))
	for i, h := range head {
		col[h] = i
	}
	for _, h := range header {
		if _, ok := col[h]; !ok && !laterColumns[h] {
			return fmt.Errorf("%s:1: missing column %q", path, h)
		}
	}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		f := &csvFields{path: path, line: line, rec: rec, col: col}
		row(f)
		if f.err != nil {
			return f.err
		}
	}
}

// csvFields parses the fields of one record by column name and keeps the first error.
type csvFields struct {
	path string
	line int
	rec  []string
	col  map[string]int
	err  error
}

func (f *csvFields) fail(name, why string) {
	if f.err == nil {
		f.err = fmt.Errorf("%s:%d: column %s: %q %s", f.path, f.line, name, f.rec[f.col[name]], why)
	}
}

func (f *csvFields) str(name string) string { return f.rec[f.col[name]] }

// has reports whether the file has the column (one of laterColumns may be missing).
func (f *csvFields) has(name string) bool {
	_, ok := f.col[name]
	return ok
}

// laterColumns are the columns added to the results files after they were first written: a
// folder written before them still reads, with their defaults.
var laterColumns = map[string]bool{
	"attempts": true, "retry_lost_s": true, "error": true, // calls.csv
	"status": true, "retries": true, "runs": true, "host_lag_pct": true, // summary.csv
}

func (f *csvFields) int(name string) int {
	v, err := strconv.Atoi(f.rec[f.col[name]])
	if err != nil {
		f.fail(name, "is not an integer")
	}
	return v
}

func (f *csvFields) float(name string) float64 {
	v, err := strconv.ParseFloat(f.rec[f.col[name]], 64)
	if err != nil {
		f.fail(name, "is not a number")
	}
	return v
}

// secs parses a time in seconds, which must be finite.
func (f *csvFields) secs(name string) float64 {
	v := f.float(name)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		f.fail(name, "is not a finite time")
	}
	return v
}
