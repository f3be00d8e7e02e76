package plots_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/plots"
	"github.com/mosaic-sched/mosaic/results"
)

func sensitivityRows() []results.SensitivityRow {
	row := func(a, side, setting string, seed uint64, x float64) results.SensitivityRow {
		return results.SensitivityRow{Experiment: "exp", Assumption: a, Side: side, Setting: setting, Seed: seed,
			SpeedupExpert: x, SpeedupAggregator: x, SpeedupE2E: x, PaperE2E: 1.7}
	}
	return []results.SensitivityRow{
		row("", "base", "as in the file", 1, 2.0), row("", "base", "as in the file", 2, 2.2),
		row("small", "low", "x0.5", 1, 2.0), row("small", "low", "x0.5", 2, 2.0),
		row("small", "high", "x2", 1, 2.2), row("small", "high", "x2", 2, 2.2),
		row("large", "low", "slow", 1, 1.5), row("large", "low", "slow", 2, 1.7),
		row("large", "high", "fast", 1, 2.5), row("large", "high", "fast", 2, 2.7),
	}
}

// Tornado bars average over seeds and come largest swing first.
func TestTornadoData(t *testing.T) {
	ts := plots.TornadoData(sensitivityRows())
	require.Len(t, ts, 1)
	tn := ts[0]
	assert.InDelta(t, 2.1, tn.Base, 1e-12)
	assert.Equal(t, 1.7, tn.Paper)
	assert.Equal(t, 2, tn.Seeds)
	require.Len(t, tn.Bars, 2)
	assert.Equal(t, "large", tn.Bars[0].Assumption)
	assert.InDelta(t, 1.6, tn.Bars[0].Low, 1e-12)
	assert.InDelta(t, 2.6, tn.Bars[0].High, 1e-12)
	assert.Equal(t, "slow", tn.Bars[0].LowSetting)
	assert.InDelta(t, 0.2, tn.Bars[1].Swing(tn.Base), 1e-12)
	one := plots.TornadoBar{Low: 1.9, High: 2.0}
	assert.InDelta(t, 0.3, one.Swing(2.2), 1e-12, "both ends below the base: the swing reaches the base")
}

// A sensitivity folder (sensitivity.csv, no summary.csv) renders one tornado per experiment.
func TestRenderTornado(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sensitivity.csv"))
	require.NoError(t, err)
	rows := sensitivityRows()
	require.NoError(t, results.WriteCSV(f, results.SensitivityHeader, rows))
	require.NoError(t, f.Close())
	back, err := results.ReadSensitivityCSV(filepath.Join(dir, "sensitivity.csv"))
	require.NoError(t, err)
	assert.Equal(t, rows, back)

	out := t.TempDir()
	figs, err := plots.Render([]string{dir}, out, plots.Options{Formats: []string{"png"}})
	require.NoError(t, err)
	require.Len(t, figs, 1)
	assert.Equal(t, "sensitivity-exp", figs[0].Name)
	checkPNG(t, filepath.Join(out, "sensitivity-exp.png"), 2100)

	// Bad rows name the file, line and column.
	bad := filepath.Join(t.TempDir(), "sensitivity.csv")
	require.NoError(t, os.WriteFile(bad, []byte("experiment,assumption,side,setting,seed,speedup_expert,speedup_aggregator,speedup_e2e,paper_speedup_e2e\nexp,a,sideways,x,1,1,1,1,NaN\n"), 0o644))
	_, err = results.ReadSensitivityCSV(bad)
	assert.ErrorContains(t, err, `sensitivity.csv:2: column side: "sideways" is not base, low or high`)
	_, err = plots.Render([]string{filepath.Dir(bad)}, out, plots.Options{Formats: []string{"png"}})
	assert.ErrorContains(t, err, "is not base, low or high")
}
