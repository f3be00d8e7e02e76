package calibrate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

func TestParseHoldout(t *testing.T) {
	h, err := calibrate.ParseHoldout("")
	require.NoError(t, err)
	assert.Nil(t, h)
	assert.False(t, h.Matches(calibrate.Case{}), "a nil hold-out holds nothing out")
	assert.Equal(t, "", h.String())

	h, err = calibrate.ParseHoldout(" L = 256, 1024")
	require.NoError(t, err)
	assert.Equal(t, "L=256,1024", h.String())
	assert.True(t, h.Matches(calibrate.Case{Row: calibrate.Row{Length: 1024}}))
	assert.False(t, h.Matches(calibrate.Case{Row: calibrate.Row{Length: 512}}))

	m, err := sim.DefaultCatalog().Model("llama-3-8b")
	require.NoError(t, err)
	h, err = calibrate.ParseHoldout("model=LLAMA-3-8B,qwen2-7b")
	require.NoError(t, err)
	assert.Equal(t, "model=llama-3-8b,qwen2-7b", h.String())
	assert.True(t, h.Matches(calibrate.Case{Model: m}), "an alias, case-insensitively")

	h, err = calibrate.ParseHoldout("gpus=2")
	require.NoError(t, err)
	assert.True(t, h.Matches(calibrate.Case{Row: calibrate.Row{NumGPUs: 2}, TP: 4}))
	assert.False(t, h.Matches(calibrate.Case{Row: calibrate.Row{NumGPUs: 4}, TP: 2}))

	for in, want := range map[string]string{
		"colour=red": `unknown key "colour"`,
		"tp":         "want KEY=V1,V2",
		"tp=":        "want KEY=V1,V2",
		"B=1,x":      "want positive integers",
	} {
		_, err := calibrate.ParseHoldout(in)
		assert.ErrorContains(t, err, want, in)
	}
	n, err := calibrate.ParseCounts("1, 2,4")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 4}, n)
	_, err = calibrate.ParseCounts("1,0")
	assert.Error(t, err)
}

func fixtureSets(t *testing.T) ([]calibrate.ForwardSet, *sim.GPU) {
	t.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("H100-80GB")
	require.NoError(t, err)
	sets, err := calibrate.ForwardSets([]string{"testdata/forward_fixture.csv"}, cat, g, "", 0)
	require.NoError(t, err)
	return sets, g
}

// CheckForward without a fit predicts with the profile and labels every point "-"; with a
// fit and a hold-out it labels the sets and groups by them; a hold-out of everything is an
// option error.
func TestCheckForward(t *testing.T) {
	sets, g := fixtureSets(t)
	require.Len(t, sets, 1)
	assert.Equal(t, 1, sets[0].TP)
	f, err := calibrate.CheckForward(sets, g, sim.DefaultProfile(), calibrate.ForwardOptions{})
	require.NoError(t, err)
	assert.Nil(t, f.Fit)
	assert.Equal(t, 4, f.Points)
	require.Len(t, f.Rows, 4)
	for _, r := range f.Rows {
		assert.Equal(t, "-", r.Set)
	}
	var keys []string
	for _, gr := range f.Groups {
		keys = append(keys, gr.Key)
	}
	assert.Equal(t, []string{"meta-llama/Meta-Llama-3-8B TP 1 decode", "meta-llama/Meta-Llama-3-8B TP 1 prefill"}, keys)
	assert.InDelta(t, calibrate.ForwardMAPE(f.Predictions()), f.MAPE(), 0)

	prof := sim.DefaultProfile()
	held, err := calibrate.ParseHoldout("B=64")
	require.NoError(t, err)
	f, err = calibrate.CheckForward(sets, g, prof, calibrate.ForwardOptions{Fit: true, Holdout: held})
	require.NoError(t, err)
	require.NotNil(t, f.Fit)
	assert.Equal(t, f.Fit.Coef, prof.For(g), "the fit is set in the profile")
	sets2 := map[string]int{}
	for _, r := range f.Rows {
		sets2[r.Set]++
		assert.Equal(t, r.Batch == 64, r.Set == "held-out")
	}
	assert.Equal(t, f.Points-f.Fitted, sets2["held-out"])
	assert.Contains(t, f.ProfileNote([]string{"dir/a.csv"})[0], "H100-80GB's efficiencies fitted on forward passes (tools/profile_forward.py: a.csv; 4 points);")

	all, err := calibrate.ParseHoldout("tp=1")
	require.NoError(t, err)
	_, err = calibrate.CheckForward(sets, g, sim.DefaultProfile(), calibrate.ForwardOptions{Fit: true, Holdout: all})
	var oe *calibrate.OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Contains(t, oe.Msg, "leaves no points to fit")
	gpus, err := calibrate.ParseHoldout("gpus=2")
	require.NoError(t, err)
	_, err = calibrate.CheckForward(sets, g, sim.DefaultProfile(), calibrate.ForwardOptions{Fit: true, Holdout: gpus})
	assert.True(t, errors.As(err, &oe), "%v", err)
}

// ForwardSets takes the model and the degree from the flags when given and rejects a column
// that disagrees.
func TestForwardSetsOverrides(t *testing.T) {
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("H100-80GB")
	require.NoError(t, err)
	sets, err := calibrate.ForwardSets([]string{"testdata/forward_fixture.csv"}, cat, g, "llama-3-8b", 2)
	require.NoError(t, err)
	require.Len(t, sets, 1)
	assert.Equal(t, 2, sets[0].TP)
	_, err = calibrate.ForwardSets([]string{"testdata/forward_fixture.csv"}, cat, g, "mistral-7b", 0)
	assert.ErrorContains(t, err, `forward_fixture.csv:4: column "model" is meta-llama/Meta-Llama-3-8B, but --model`)
	h200, err := cat.GPU("H200")
	require.NoError(t, err)
	_, err = calibrate.ForwardSets([]string{"testdata/forward_fixture.csv"}, cat, h200, "", 0)
	assert.ErrorContains(t, err, `column "gpu" is H100-80GB, but --gpu H200`)
}

// CompareOverheads: three sets of overheads per GPU at every batch size; "none" has no
// overhead and the measured set the line's.
func TestCompareOverheads(t *testing.T) {
	cat := sim.DefaultCatalog()
	m, err := cat.Model(calibrate.DefaultDecodeModel)
	require.NoError(t, err)
	sets := []calibrate.NamedOverheads{{Name: "profile"}, {Name: "measured", Overheads: &calibrate.Overheads{IterationMS: 1, PerSeqMS: 0.01}},
		{Name: "none", Overheads: &calibrate.Overheads{}}}
	prof := sim.DefaultProfile()
	rows, err := calibrate.CompareOverheads(cat, prof, m, nil, sets, calibrate.DecodeBatches, 1024)
	require.NoError(t, err)
	require.Len(t, rows, len(calibrate.DefaultDecodeGPUs)*3*len(calibrate.DecodeBatches))
	for _, r := range rows {
		switch r.Overheads {
		case "none":
			assert.Zero(t, r.Overhead)
		case "measured":
			assert.InDelta(t, (1+0.01*float64(r.Batch))/1e3, r.Overhead, 1e-12)
		case "profile":
			c := prof.For(r.GPU)
			assert.InDelta(t, (c.IterationOverheadMS+c.PerSeqOverheadMS*float64(r.Batch))/1e3, r.Overhead, 1e-12)
		}
		assert.Positive(t, r.KVMaxBatch)
	}
	_, err = calibrate.CompareOverheads(cat, prof, m, []string{"Z80"}, sets, calibrate.DecodeBatches, 1024)
	assert.Error(t, err)

	in := ",schedule_mean,sampler_e2e_mean,prepare_inputs_e2e_mean,model_execution_e2e_mean,process_model_outputs_mean,model_name,batch_size,tensor_parallel_degree,ray_comm_time_mean\n" +
		"0,0.1,0.5,0.2,40,0.2,m,8,2,2.0\n1,0.2,0.6,0.2,40,1.0,m,40,2,3.0\n2,0.3,0.7,0.2,40,1.8,m,72,2,4.0\n"
	cpuRows, err := calibrate.ParseCPUOverheads("c.csv", strings.NewReader(in))
	require.NoError(t, err)
	fit, err := calibrate.FitCPUOverheads(cpuRows)
	require.NoError(t, err)
	assert.InDelta(t, 0.75, fit.Engine.FixedMS, 1e-9)
	assert.Greater(t, fit.WithRay.FixedMS, fit.Engine.FixedMS)
}

// CheckData on the single-A100 rows of one model: without a fit every row is "-" and the
// profile's own; with a fit holding L = 2048 out, the held-out rows are reported apart and the
// fitted coefficients become the profile's default.
func TestCheckData(t *testing.T) {
	path, ok := dataset.File(argonne)
	if !ok {
		t.Skipf("shared data not found: set %s", dataset.Env)
	}
	rows, err := calibrate.ReadFile(path)
	require.NoError(t, err)
	cat := sim.DefaultCatalog()
	sel, err := calibrate.Select(rows, cat, calibrate.Filter{Framework: "vLLM", GPUs: 1, GPU: "A100-40GB", Models: []string{"llama-2-7b"}})
	require.NoError(t, err)
	d, err := calibrate.CheckData(sel.Cases, cat, sim.DefaultProfile(), calibrate.DataOptions{})
	require.NoError(t, err)
	require.Len(t, d.Predictions, len(sel.Cases))
	assert.Nil(t, d.ByHardwareTP(), "one GPU and degree, no hold-out")
	assert.Nil(t, d.BySet())
	require.Len(t, d.ByModel(), 1)
	assert.Equal(t, "-", d.Set(d.Predictions[0]))
	assert.Contains(t, d.ProfileNote()[0], "GPUs: A100-40GB; 20 measured rows; MAPE ")

	held, err := calibrate.ParseHoldout("L=2048")
	require.NoError(t, err)
	prof := sim.DefaultProfile()
	d, err = calibrate.CheckData(sel.Cases, cat, prof, calibrate.DataOptions{Fit: true, Holdout: held, FitOptions: calibrate.FitOptions{Only: []string{"per_seq_overhead_ms"}}})
	require.NoError(t, err)
	var keys []string
	for _, g := range d.BySet() {
		keys = append(keys, g.Key)
	}
	assert.ElementsMatch(t, []string{"fitted", "held-out"}, keys)
	require.Len(t, d.ByHardwareTP(), 2)
	assert.Equal(t, "A100-40GB TP1 fitted", d.ByHardwareTP()[0].Key)
	assert.Equal(t, prof.For(d.GPUs[0]), prof.Default, "one GPU: its fit is the default")

	all, err := calibrate.ParseHoldout("gpus=1")
	require.NoError(t, err)
	_, err = calibrate.CheckData(sel.Cases, cat, sim.DefaultProfile(), calibrate.DataOptions{Fit: true, Holdout: all})
	var oe *calibrate.OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, "--holdout leaves no rows of A100-40GB to fit", oe.Msg)
}

// CheckIterations on synthetic points of one GPU at two degrees, generated by the profile's
// own coefficients: leave-one-TP-out predicts each degree from the other, and a hold-out of
// every point is an option error.
func TestCheckIterations(t *testing.T) {
	cat := sim.DefaultCatalog()
	g, err := cat.GPU("H100-80GB")
	require.NoError(t, err)
	m, err := cat.Model("llama-2-70b")
	require.NoError(t, err)
	prof := sim.DefaultProfile()
	var cases []calibrate.IterationCase
	for _, tp := range []int{4, 2} {
		for _, b := range []int{1, 8, 32} {
			for _, kind := range []calibrate.IterationKind{calibrate.Prompt, calibrate.Token} {
				c := calibrate.IterationCase{IterationPoint: calibrate.IterationPoint{Kind: kind, TP: tp, Prompt: 512, Batch: b, Tokens: 16}, GPU: g, Model: m}
				p, err := calibrate.PredictIteration(c, prof.For(g))
				require.NoError(t, err)
				c.Seconds = p.Predicted
				cases = append(cases, c)
			}
		}
	}
	only := calibrate.FitOptions{Only: []string{"per_seq_overhead_ms"}}
	preds, err := calibrate.CheckIterations(cases, prof, nil, only)
	require.NoError(t, err)
	require.Len(t, preds, len(cases))
	assert.Equal(t, 2, preds[0].TP, "folds in increasing order of degree")
	assert.Less(t, calibrate.IterationMAPE(preds), 1.0)
	groups := calibrate.IterationGroups(preds)
	require.Len(t, groups, 6)
	assert.Equal(t, "H100-80GB TP2", groups[0].Key)
	assert.Equal(t, "H100-80GB TP2 prompt", groups[1].Key)

	held, err := calibrate.ParseHoldout("model=llama-2-70b")
	require.NoError(t, err)
	_, err = calibrate.CheckIterations(cases, prof, held, only)
	var oe *calibrate.OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Contains(t, oe.Msg, "H100-80GB: the split leaves no rows to fit or none to predict")
	bad, err := calibrate.ParseHoldout("L=512")
	require.NoError(t, err)
	_, err = calibrate.CheckIterations(cases, prof, bad, only)
	assert.True(t, errors.As(err, &oe), "%v", err)
}
