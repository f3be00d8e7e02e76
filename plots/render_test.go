package plots_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/plots"
	"github.com/mosaic-sched/mosaic/results"
)

// checkPNG decodes a PNG and checks its width and that it is not a single colour.
func checkPNG(t *testing.T, path string, wantWidth int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, path)
	b := img.Bounds()
	assert.Equal(t, wantWidth, b.Dx(), path)
	assert.Positive(t, b.Dy(), path)
	assert.Greater(t, colours(img), 3, "%s is (nearly) a single colour", path)
}

func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

func checkPDF(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("%PDF-")), "%s is not a PDF", path)
	assert.Contains(t, string(data), "/FontFile2", "%s does not embed its fonts", path)
	assert.Contains(t, string(data), "%%EOF")
}

func checkSVG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(data))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s is not XML", path)
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	assert.Equal(t, "svg", root)
	assert.Contains(t, string(data), "@font-face", "%s does not embed its fonts", path)
}

func TestRenderDrawsEveryFigure(t *testing.T) {
	dir := fixtureDir(t)
	tests := []struct {
		name      string
		width     float64 // inches
		wantWidth int     // pixels
		opt       plots.Options
	}{
		{"one column", 3.5, 1050, plots.Options{Formats: []string{"png", "pdf", "svg"}, ChromeTrace: true}},
		{"two columns, std error bars", 7, 2100, plots.Options{Width: plots.TwoColumn, Formats: []string{"png", "svg"}, Spread: plots.SpreadStd}},
		{"defaults at 150 DPI", 3.5, 525, plots.Options{DPI: 150}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "figs")
			figs, err := plots.Render([]string{dir}, out, tt.opt)
			require.NoError(t, err)
			var names []string
			for _, f := range figs {
				names = append(names, f.Name)
				assert.Empty(t, f.Skipped, f.Name)
				assert.NotEmpty(t, f.Files, f.Name)
				for _, path := range f.Files {
					switch filepath.Ext(path) {
					case ".png":
						checkPNG(t, path, tt.wantWidth)
					case ".pdf":
						checkPDF(t, path)
					case ".svg":
						checkSVG(t, path)
					case ".json":
						data, err := os.ReadFile(path)
						require.NoError(t, err)
						assert.True(t, json.Valid(data), path)
					default:
						t.Errorf("unexpected file %s", path)
					}
				}
			}
			assert.Equal(t, []string{"speedup", "sim-vs-replay", "threshold-tradeoff", "latency-load",
				"timeline-results", "output-length-results", "expert-demand-results", "latency-cdf-results"}, names)
			formats := tt.opt.Formats
			if len(formats) == 0 {
				formats = []string{"png", "pdf"}
			}
			assert.Len(t, figs[0].Files, len(formats))
		})
	}
}

func TestRenderSeveralFolders(t *testing.T) {
	a, b := fixtureDir(t), fixtureDir(t)
	figs, err := plots.Render([]string{a, b}, t.TempDir(), plots.Options{Formats: []string{"png"}})
	require.NoError(t, err)
	var names []string
	for _, f := range figs {
		names = append(names, f.Name)
	}
	assert.Equal(t, []string{"speedup", "sim-vs-replay", "threshold-tradeoff", "latency-load",
		"timeline-results", "output-length-results", "expert-demand-results", "latency-cdf-results",
		"timeline-results-2", "output-length-results-2", "expert-demand-results-2", "latency-cdf-results-2"}, names)
}

func TestRenderSkipsFiguresWithoutData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sim-only")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var simOnly []results.SummaryRow
	for _, r := range fixtureSummary() {
		if r.Mode == "sim" {
			simOnly = append(simOnly, r)
		}
	}
	writeCSV(t, filepath.Join(dir, "summary.csv"), results.SummaryHeader, simOnly)
	// No calls.csv or workers.csv.
	out := t.TempDir()
	figs, err := plots.Render([]string{dir}, out, plots.Options{Formats: []string{"png"}})
	require.NoError(t, err)
	skipped := map[string]string{}
	for _, f := range figs {
		if f.Skipped != "" {
			skipped[f.Name] = f.Skipped
			assert.Empty(t, f.Files)
		}
	}
	assert.Len(t, skipped, 6)
	assert.Contains(t, skipped["sim-vs-replay"], "no replay rows")
	assert.Contains(t, skipped["latency-load"], "no sweep over workload.arrival_rate")
	assert.Contains(t, skipped["latency-cdf-sim-only"], "no queries.csv of an online run")
	assert.Contains(t, skipped["timeline-sim-only"], "workers.csv")
	assert.Contains(t, skipped["output-length-sim-only"], "calls.csv")
	assert.Contains(t, skipped["expert-demand-sim-only"], "calls.csv")
	_, err = os.Stat(filepath.Join(out, "sim-vs-replay.png"))
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		opt     plots.Options
		wantErr string
	}{
		{"unknown format", nil, plots.Options{Formats: []string{"gif"}}, `unknown figure format (want png, pdf or svg): "gif"`},
		{"too narrow", nil, plots.Options{Width: 1}, "too narrow"},
		{"malformed calls.csv", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "calls.csv")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			lines := strings.Split(string(data), "\n")
			lines[2] = strings.Replace(lines[2], ",expert,0,", ",expert,-1,", 1)
			require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
		}, plots.Options{}, `calls.csv:3: column layer: "-1" is negative`},
		{"malformed run.json", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"engine": `), 0o644))
		}, plots.Options{}, "run.json: unexpected end of JSON input"},
		{"no summary", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "summary.csv")))
		}, plots.Options{}, "reading summary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureDir(t)
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			_, err := plots.Render([]string{dir}, t.TempDir(), tt.opt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
	_, err := plots.Render(nil, t.TempDir(), plots.Options{})
	assert.Error(t, err)
}

// The sim-vs-replay figure names what was measured, per experiment and setup where the
// folders differ, and notes the failed rows left out and the partial ones shown.
func TestRenderSimVsReplay(t *testing.T) {
	render := func(t *testing.T, dirs []string) string {
		t.Helper()
		figs, err := plots.Render(dirs, t.TempDir(), plots.Options{Width: plots.TwoColumn, Formats: []string{"svg", "png"}})
		require.NoError(t, err)
		for _, f := range figs {
			if f.Name != "sim-vs-replay" {
				continue
			}
			require.Empty(t, f.Skipped)
			require.Len(t, f.Files, 2)
			checkSVG(t, f.Files[0])
			checkPNG(t, f.Files[1], 2100)
			data, err := os.ReadFile(f.Files[0])
			require.NoError(t, err)
			return string(data)
		}
		t.Fatal("no sim-vs-replay figure")
		return ""
	}
	t.Run("one setup", func(t *testing.T) {
		svg := render(t, replayFixtureDirs(t))
		assert.Contains(t, svg, "Measured on mosaic emulate dev, standing for 2 x A100-80GB.")
		assert.Contains(t, svg, "e2e speedup (×)")
		assert.Contains(t, svg, "-0.35×*", "mosaic's speedup difference, flagged partial")
		assert.Contains(t, svg, "+12.5%*", "dp's makespan error over its partial row alone")
		assert.Contains(t, svg, "* Measured over the queries that completed under every policy (status partial: 3 replay runs).")
		assert.Contains(t, svg, "Left out: 1 replay run whose calls failed (status failed).")
		assert.NotContains(t, svg, ">failed<", "every pair has a measurement")
	})
	t.Run("two setups", func(t *testing.T) {
		svg := render(t, append(replayFixtureDirs(t), vllmFixtureDir(t)))
		assert.Contains(t, svg, "exp-r (mosaic emulate dev): measured on mosaic emulate dev, standing for 2 x A100-80GB.")
		assert.Contains(t, svg, "exp-r (vLLM 0.11.0): measured on vLLM 0.11.0 on 2 x A100-80GB.")
		assert.Contains(t, svg, "Left out: 2 replay runs whose calls failed")
		assert.Contains(t, svg, ">failed<", "dp has no measurement on vLLM")
	})
	t.Run("no run.json", func(t *testing.T) {
		svg := render(t, []string{fixtureDir(t)})
		assert.Contains(t, svg, "Measured on an engine and hardware that no run.json names.")
		assert.NotContains(t, svg, "Left out")
		assert.NotContains(t, svg, "status partial")
	})
}

func TestColumnWidth(t *testing.T) {
	w, err := plots.ColumnWidth(1)
	require.NoError(t, err)
	assert.Equal(t, plots.OneColumn, w)
	w, err = plots.ColumnWidth(2)
	require.NoError(t, err)
	assert.Equal(t, plots.TwoColumn, w)
	_, err = plots.ColumnWidth(3)
	assert.Error(t, err)
}

// TestRenderFixtureToDir renders the fixture into $PLOTS_FIXTURE_OUT, and the replay fixture
// into its replay and replay-2col folders (one and two columns wide), to look at the figures:
// PLOTS_FIXTURE_OUT=/tmp/figs go test ./plots -run FixtureToDir
func TestRenderFixtureToDir(t *testing.T) {
	out := os.Getenv("PLOTS_FIXTURE_OUT")
	if out == "" {
		t.Skip()
	}
	_, err := plots.Render([]string{fixtureDir(t)}, out, plots.Options{Formats: []string{"png", "pdf"}})
	require.NoError(t, err)
	_, err = plots.Render(replayFixtureDirs(t), filepath.Join(out, "replay"), plots.Options{Formats: []string{"png", "pdf"}})
	require.NoError(t, err)
	_, err = plots.Render(append(replayFixtureDirs(t), vllmFixtureDir(t)), filepath.Join(out, "replay-2col"), plots.Options{Width: plots.TwoColumn, Formats: []string{"png", "pdf"}})
	require.NoError(t, err)
}

// A sweep's speedup figure shows each point of its swept keys apart (the seeds alone are
// pooled), and its legend says how many seeds are behind the error bars.
func TestRenderSpeedupBySweepPoint(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "summary.csv"))
	require.NoError(t, err)
	w := csv.NewWriter(f)
	require.NoError(t, w.Write(append([]string{plots.RateColumn, "sweep.seed", "point"}, results.SummaryHeader...)))
	for _, rate := range []string{"0.5", "2"} {
		for seed := range 3 {
			for pi, p := range []string{"rr", "mosaic"} {
				r := results.SummaryRow{Experiment: "exp", Mode: "sim", Policy: p, Seed: uint64(seed + 1),
					SpeedupExpert: 1, SpeedupAggregator: 1, SpeedupE2E: 1 + float64(pi)*(1+float64(seed)/10), E2ES: 10}
				point := fmt.Sprintf("%04d_workload.arrival_rate=%s,seed=%d", seed, rate, seed+1)
				require.NoError(t, w.Write(append([]string{rate, strconv.Itoa(seed + 1), point}, r.Record()...)))
			}
		}
	}
	w.Flush()
	require.NoError(t, w.Error())
	require.NoError(t, f.Close())

	res, err := plots.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "arrival_rate=0.5", res.Points[0])
	assert.Equal(t, "arrival_rate=2", res.Points[len(res.Points)-1])

	out := t.TempDir()
	figs, err := plots.Render([]string{dir}, out, plots.Options{Formats: []string{"svg"}})
	require.NoError(t, err)
	require.Equal(t, "speedup", figs[0].Name)
	data, err := os.ReadFile(figs[0].Files[0])
	require.NoError(t, err)
	svg := string(data)
	assert.Contains(t, svg, "arrival_rate=0.5")
	assert.Contains(t, svg, "arrival_rate=2")
	assert.Contains(t, svg, "min–max over 3 seeds")
}
