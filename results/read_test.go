package results_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mosaic-sched/mosaic/results"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleCalls() []results.CallRow {
	return []results.CallRow{
		{Policy: "round-robin", Query: 0, Call: 0, Role: "expert", Model: "QwenR1", Worker: 1,
			InputTokens: 267, OutputTokens: 4374, ReadyS: 0, StartS: 27.616, FirstTokenS: 28.152853, EndS: 291.590083, Status: "done"},
		{Policy: "round-robin", Query: 0, Call: 3, Role: "aggregator", Layer: 1, Model: "LlamaR1", Worker: 0,
			InputTokens: 1609, OutputTokens: 1780, ReadyS: 1.5, StartS: 2.25, FirstTokenS: 2.5, EndS: 9.125, Preemptions: 2, Status: "done"},
	}
}

func sampleWorkers() []results.WorkerRow {
	return []results.WorkerRow{
		{Policy: "mosaic", Worker: 0, Kind: "load", Model: "GLM", StartS: 0, EndS: 29.4},
		{Policy: "mosaic", Worker: 0, Kind: "busy", Model: "GLM", StartS: 29.4, EndS: 54.44416, MeanBatch: 48.2089},
		{Policy: "mosaic", Worker: 0, Kind: "idle", StartS: 54.44416, EndS: 60},
	}
}

func writeResults[R results.Recorder](t *testing.T, name string, header []string, rows []R) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, results.WriteCSV(f, header, rows))
	require.NoError(t, f.Close())
	return path
}

func TestReadCallsCSVRoundTrip(t *testing.T) {
	want := sampleCalls()
	got, err := results.ReadCallsCSV(writeResults(t, "calls.csv", results.CallHeader, want))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestReadWorkersCSVRoundTrip(t *testing.T) {
	want := sampleWorkers()
	got, err := results.ReadWorkersCSV(writeResults(t, "workers.csv", results.WorkerHeader, want))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// corrupt replaces the field of column col on line (1-based, header = 1) of a CSV file.
func corrupt(t *testing.T, path string, line, col int, value string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	fields := strings.Split(lines[line-1], ",")
	fields[col] = value
	lines[line-1] = strings.Join(fields, ",")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
}

func TestReadCallsCSVRejectsMalformedLines(t *testing.T) {
	tests := []struct {
		name  string
		line  int
		col   int
		value string
		want  string
	}{
		{"layer", 3, 4, "-1", `:3: column layer: "-1" is negative`},
		{"integer", 2, 8, "12.5", `:2: column output_tokens: "12.5" is not an integer`},
		{"time", 3, 12, "soon", `:3: column end_s: "soon" is not a number`},
		{"infinite time", 2, 10, "+Inf", `:2: column start_s: "+Inf" is not a finite time`},
		{"missing column", 1, 13, "preempted", `:1: missing column "preemptions"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeResults(t, "calls.csv", results.CallHeader, sampleCalls())
			corrupt(t, path, tt.line, tt.col, tt.value)
			_, err := results.ReadCallsCSV(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+tt.want)
		})
	}
}

func TestReadWorkersCSVRejectsMalformedLines(t *testing.T) {
	tests := []struct {
		name  string
		line  int
		col   int
		value string
		want  string
	}{
		{"kind", 3, 2, "sleep", `:3: column kind: "sleep" is not load, busy or idle`},
		{"worker", 2, 1, "w0", `:2: column worker: "w0" is not an integer`},
		{"mean batch", 3, 6, "many", `:3: column mean_batch: "many" is not a number`},
		{"backwards", 4, 5, "1.0", `:4: column end_s: "1.0" is before start_s "54.444160"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeResults(t, "workers.csv", results.WorkerHeader, sampleWorkers())
			corrupt(t, path, tt.line, tt.col, tt.value)
			_, err := results.ReadWorkersCSV(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+tt.want)
		})
	}
}

func TestReadResultsCSVShortRecordAndMissingFile(t *testing.T) {
	path := writeResults(t, "workers.csv", results.WorkerHeader, sampleWorkers())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(data, []byte("mosaic,1,busy\n")...), 0o644))
	_, err = results.ReadWorkersCSV(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+":5:")

	_, err = results.ReadCallsCSV(filepath.Join(t.TempDir(), "nope.csv"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading calls")
}

// FuzzReadCallsCSV checks that no input makes the readers panic.
func FuzzReadCallsCSV(f *testing.F) {
	f.Add(strings.Join(results.CallHeader, ",") + "\nrr,0,0,expert,Q,1,2,3,0,1,1.5,2,0,done\n")
	f.Add(strings.Join(results.WorkerHeader, ",") + "\nrr,0,busy,Q,0,1,2.5\n")
	f.Fuzz(func(t *testing.T, data string) {
		path := filepath.Join(t.TempDir(), "f.csv")
		require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
		_, _ = results.ReadCallsCSV(path)
		_, _ = results.ReadWorkersCSV(path)
	})
}
