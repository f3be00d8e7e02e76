package results_test

import (
	"bytes"
	"encoding/csv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mosaic-sched/mosaic/results"
	"github.com/stretchr/testify/require"
)

// awkward are strings encoding/csv quotes, or nearly does.
var awkward = []string{"", "done", "Qwen/Qwen2-7B", "a,b", `say "hi"`, "two\nlines", "cr\r", `\.`, `\.x`, " lead",
	"\tlead", "\u00a0nbsp", "\u2003em", "trail ", "ünï", `"`, ",", "x\"\"y", "\r\n"}

// WriteCSVSeq writes calls, queries and workers rows straight into its buffer; the bytes
// must be those encoding/csv writes for the rows' Record.
func TestWriteCSVMatchesEncodingCSV(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	str := func() string { return awkward[r.IntN(len(awkward))] }
	num := func() int { return r.IntN(2000000) - 1000 }
	sec := func() float64 {
		switch r.IntN(12) {
		case 0:
			return math.NaN()
		case 1:
			return math.Inf(1 - 2*r.IntN(2))
		case 2:
			return 0
		}
		return (r.Float64() - 0.1) * math.Pow(10, float64(r.IntN(12)-3))
	}
	var calls []results.CallRow
	var queries []results.QueryRow
	var workers []results.WorkerRow
	for range 3000 {
		calls = append(calls, results.CallRow{Policy: str(), Query: num(), Call: num(), Role: str(), Layer: num(), Model: str(),
			Worker: num(), InputTokens: num(), OutputTokens: num(), ReadyS: sec(), StartS: sec(), FirstTokenS: sec(),
			EndS: sec(), Preemptions: num(), Status: str()})
		queries = append(queries, results.QueryRow{Policy: str(), Query: num(), Dataset: str(), Category: str(),
			ArrivalS: sec(), FirstTokenS: sec(), EndS: sec(), LatencyS: sec(), TTFTS: sec(), QueueS: sec(), Calls: num(),
			SkippedCalls: num(), FinalSkipped: r.IntN(2) == 0, Answer: str(), Gold: str(), Correct: num(), SLOMet: num()})
		workers = append(workers, results.WorkerRow{Policy: str(), Worker: num(), Kind: str(), Model: str(), StartS: sec(),
			EndS: sec(), MeanBatch: sec()})
	}
	check(t, results.CallHeader, calls)
	check(t, results.QueryHeader, queries)
	check(t, results.WorkerHeader, workers)
}

func check[R results.Recorder](t *testing.T, header []string, rows []R) {
	t.Helper()
	var want bytes.Buffer
	cw := csv.NewWriter(&want)
	require.NoError(t, cw.Write(header))
	for _, r := range rows {
		rec := r.Record()
		require.Len(t, rec, len(header))
		require.NoError(t, cw.Write(rec))
	}
	cw.Flush()
	var got bytes.Buffer
	require.NoError(t, results.WriteCSV(&got, header, rows))
	require.Equal(t, want.String(), got.String())
	// AppendLines formats the same lines, in pieces.
	head := want.String()[:strings.Index(want.String(), "\n")+1]
	var lines []byte
	for part := range slices.Chunk(rows, 7) {
		lines = results.AppendLines(lines, slices.Values(part))
	}
	require.Equal(t, want.String(), head+string(lines))
	// And the rows read back (but a carriage return in a quoted field, which encoding/csv's
	// reader drops before a newline).
	back, err := csv.NewReader(bytes.NewReader(got.Bytes())).ReadAll()
	require.NoError(t, err)
	require.Len(t, back, len(rows)+1)
	checked := 0
	for i, r := range rows {
		if rec := r.Record(); !slices.ContainsFunc(rec, func(f string) bool { return strings.Contains(f, "\r") }) {
			require.Equal(t, rec, back[i+1], "row %d", i)
			checked++
		}
	}
	require.Greater(t, checked, len(rows)/2)
}

// WriteSections writes the file Write writes for the sections' rows one after another.
func TestWriteSectionsMatchesWrite(t *testing.T) {
	rows := []results.WorkerRow{{Policy: "a", Worker: 1, Kind: "busy", Model: "m,1", StartS: 0.5, EndS: 1.25, MeanBatch: 3},
		{Policy: "a", Worker: 2, Kind: "idle", StartS: 1.25, EndS: 2}, {Policy: `b "x"`, Worker: 0, Kind: "load", Model: "m", EndS: 7}}
	whole, parts := t.TempDir(), t.TempDir()
	d, err := results.Open(whole, "test")
	require.NoError(t, err)
	require.NoError(t, results.Write(d, results.Workers, slices.Values(rows)))
	require.NoError(t, d.Close())
	d, err = results.Open(parts, "test")
	require.NoError(t, err)
	require.NoError(t, results.WriteSections(d, results.Workers, results.AppendLines(nil, slices.Values(rows[:2])), nil,
		results.AppendLines(nil, slices.Values(rows[2:]))))
	require.NoError(t, d.Close())
	want, err := os.ReadFile(filepath.Join(whole, "workers.csv"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(parts, "workers.csv"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}
