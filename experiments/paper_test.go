package experiments_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/results"
)

// paperRows are the summary rows of one seed of a paper experiment.
func paperRows(exp string, seed uint64, e2e, skip1, acc1 float64) []results.SummaryRow {
	return []results.SummaryRow{
		{Experiment: exp, Seed: seed, Policy: "round-robin", Queries: 100, SpeedupE2E: 1},
		{Experiment: exp, Seed: seed, Policy: "mosaic", Queries: 100, SpeedupExpert: e2e, SpeedupAggregator: e2e, SpeedupE2E: e2e,
			AggregatorSkipped: int(skip1), AccuracyDeltaPP: acc1},
	}
}

// The comparison over seeds: means, sample standard deviations, ranges and the target marks.
func TestPaperFigures(t *testing.T) {
	refs := []experiments.Reference{{Name: "Set", Experiment: "set-exp", SpeedupExpert: 2, SpeedupAggregator: 2, SpeedupE2E: 2,
		SkipPctT1: 40, AccuracyDeltaPPT1: 0.5}}
	var rows []results.SummaryRow
	rows = append(rows, paperRows("set-exp", 2, 2.2, 43, 1.0)...)
	rows = append(rows, paperRows("set-exp", 1, 2.6, 41, 2.0)...)
	rows = append(rows, paperRows("other", 1, 9, 9, 9)...)
	figs, err := experiments.PaperFigures(refs, rows)
	require.NoError(t, err)
	byName := map[string]experiments.PaperFigure{}
	for _, f := range figs {
		byName[f.Figure] = f
	}
	e2e := byName["end-to-end speedup"]
	assert.Equal(t, []uint64{1, 2}, e2e.Seeds, "in seed order")
	assert.InDelta(t, 2.4, e2e.Mean(), 1e-12)
	assert.InDelta(t, 0.2828427, e2e.SD(), 1e-6)
	assert.InDelta(t, 0.2, e2e.Diff(), 1e-12)
	assert.False(t, e2e.Within(), "+20% is outside 15%")
	skip := byName["skip rate, T = 1"]
	assert.InDelta(t, 42, skip.Mean(), 1e-12)
	assert.True(t, skip.Within(), "2 points is within 2 points")
	acc := byName["accuracy change, T = 1"]
	assert.InDelta(t, 1.0, acc.Diff(), 1e-12)
	assert.True(t, acc.Within())
	_, has := byName["skip rate, T = 2/3"]
	assert.False(t, has, "no mosaic-t2/3 policy, no T = 2/3 rows")

	var b bytes.Buffer
	require.NoError(t, experiments.PaperTable(&b, figs))
	assert.Contains(t, b.String(), "| Set | end-to-end speedup | 2.40x ± 0.28 | 2.20 to 2.60 | 2 | 2.00x | +20% | **no** (15%) |")
	assert.Contains(t, b.String(), "| Set | skip rate, T = 1 | 42.00% ± 1.41 | 41.00 to 43.00 | 2 | 40.00% | +2.00 pp | yes |")
	b.Reset()
	require.NoError(t, experiments.WritePaperCSV(&b, figs))
	assert.Contains(t, b.String(), "Set,end-to-end speedup,x,1,2.6000,2.0000\n")

	_, err = experiments.PaperFigures(refs, append(rows, paperRows("set-exp", 1, 2, 2, 2)...))
	assert.ErrorContains(t, err, "two results of experiment set-exp, seed 1, policy round-robin")
	_, err = experiments.PaperFigures(refs, paperRows("other", 1, 9, 9, 9))
	assert.ErrorContains(t, err, `no results of the paper experiments (set-exp) with a "mosaic" policy`)
}

// Every paper experiment generates and simulates for seeds 1-20: calibration never fails.
func TestPaperExperimentsEverySeed(t *testing.T) {
	if _, ok := dataset.File("workloads/moa_questions.csv"); !ok {
		t.Skipf("shared data not found: set %s to run the paper experiments", dataset.Env)
	}
	if testing.Short() {
		t.Skip("-short: 60 paper simulations")
	}
	for _, name := range []string{"mmlu-pro", "medmcqa", "gpqa"} {
		for seed := 1; seed <= 20; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				t.Parallel()
				e, err := experiments.Load(filepath.Join("paper", name+".toml"))
				require.NoError(t, err)
				require.NoError(t, e.Set(fmt.Sprintf("seed=%d", seed)))
				r, err := e.Resolve()
				require.NoError(t, err)
				run, err := r.Simulate(context.Background(), nil)
				require.NoError(t, err)
				for _, s := range run.Summaries {
					assert.Positive(t, s.SpeedupE2E, s.Policy)
					assert.Zero(t, s.FailedCalls, s.Policy)
				}
				assert.True(t, strings.HasPrefix(run.Summaries[0].Policy, "round-robin"))
			})
		}
	}
}

// The assumptions of a sensitivity analysis, as settings of the experiment file.
func TestAssumptions(t *testing.T) {
	e, err := experiments.Parse("exp.toml", []byte(moa))
	require.NoError(t, err)
	as, err := e.Assumptions()
	require.NoError(t, err)
	names := map[string]experiments.Assumption{}
	for _, a := range as {
		names[a.Name] = a
	}
	assert.Equal(t, []string{"model[0].output_tokens.mean=536", "model[0].output_tokens.p99=2680"}, names["reasoning output length"].Low,
		"R has forward_tokens: a reasoning expert, its lognormal's mean and p99 scaled by 0.67")
	assert.Equal(t, []string{"model[1].output_tokens.mean=200", "model[1].output_tokens.p99=1200", "model[2].output_tokens.mean=200",
		"model[2].output_tokens.p99=1200"}, names["instruction output length"].High)
	assert.Equal(t, []string{"workload.routing.skew=1.33333"}, names["routing skew"].Low)
	_, has := names["aggregator output length"]
	assert.False(t, has, "the aggregator has no length of its own in this file")
	assert.Len(t, as, 5)

	pts, sides := experiments.SensitivityPoints(as, 2)
	require.Len(t, pts, 2*(2*len(as)+1))
	assert.Equal(t, []string{"seed=1"}, pts[0].Assign)
	assert.Equal(t, "base", sides[0].Side)
	assert.Equal(t, append([]string{"seed=2"}, as[0].High...), pts[2*len(as)+1+2].Assign)
	assert.Equal(t, "0013_reasoning-output-length_high_seed=2", pts[13].Name)

	// Every variant runs, on the same seeds.
	dir := t.TempDir()
	path := filepath.Join(dir, "exp.toml")
	require.NoError(t, os.WriteFile(path, []byte(moa+"\n[[policy]]\nname = \"mosaic\"\n"), 0o644))
	load := func() (*experiments.Experiment, error) { return experiments.Load(path) }
	rows, err := experiments.RunSensitivity(context.Background(), load, as, 1, "mosaic", filepath.Join(dir, "out"), 1.7,
		experiments.RunInfo{}, experiments.HostInfo{}, nil)
	require.NoError(t, err)
	require.Len(t, rows, 2*len(as)+1)
	for _, r := range rows {
		assert.Equal(t, "moa-small", r.Experiment)
		assert.Positive(t, r.SpeedupE2E, r.Assumption)
		assert.Equal(t, 1.7, r.PaperE2E)
	}
	_, err = experiments.RunSensitivity(context.Background(), load, as, 1, "oracle", filepath.Join(dir, "out2"), 1.7,
		experiments.RunInfo{}, experiments.HostInfo{}, nil)
	assert.ErrorContains(t, err, `the experiment has no policy labelled "oracle"`)

	e, err = experiments.Parse("exp.toml", []byte(strings.Replace(moa, `kind = "moa"`, `kind = "layered"`, 1)))
	require.NoError(t, err)
	_, err = e.Assumptions()
	assert.ErrorContains(t, err, `needs a generated kind = "moa" workload`)
}
