package calibrate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

const servingHeader = "id,source,gpu,model,weight_bytes,kv_bytes,tp,in_flight,prompts_per_s,input_tokens,output_tokens,tpot_ms,set\n"

func writeServing(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "serving.csv")
	require.NoError(t, os.WriteFile(path, []byte("# provenance\n"+servingHeader+body), 0o644))
	return path
}

// Bad rows are errors naming the file, line and column.
func TestReadServingErrors(t *testing.T) {
	for _, tc := range []struct{ row, want string }{
		{"a,s,H100-80GB,llama-3-8b,4,1,1,100,10,500,100,20,fit", `serving.csv:3:26: weight_bytes: want 1 (FP8) or 2 (BF16), got 4`},
		{"a,s,H100-80GB,llama-3-8b,1,1,1,0.5,10,500,100,20,fit", `serving.csv:3:32: in_flight: want at least one sequence in flight, got 0.5`},
		{"a,s,H100-80GB,llama-3-8b,1,1,1,100,10,500,100,0,fit", `serving.csv:3:47: tpot_ms: want a positive time per output token, got 0`},
		{"a,s,H100-80GB,llama-3-8b,1,1,1,100,10,500,100,20,train", `serving.csv:3:50: set: want "fit" or "check", got "train"`},
		{"a,s,H100-80GB,llama-3-8b,1,1,1,100,x,500,100,20,fit", `serving.csv:3:36: prompts_per_s:`},
	} {
		_, err := calibrate.ReadServing(writeServing(t, tc.row+"\n"))
		assert.ErrorContains(t, err, tc.want, tc.row)
	}
	_, err := calibrate.ReadServing(writeServing(t, ""))
	assert.ErrorContains(t, err, "no rows")
}

// Without arriving prompts a steady step is one decode iteration of the cost model plus the
// overheads; prompts arriving add prefill to every step, so the step grows.
func TestServingSteadyStep(t *testing.T) {
	cat, prof := sim.DefaultCatalog(), sim.DefaultProfile()
	rows, err := calibrate.ReadServing(writeServing(t,
		"idle,s,H100-80GB,llama-3-8b,2,2,1,64,0,500,200,20,fit\n"+
			"busy,s,H100-80GB,llama-3-8b,2,2,1,64,60,500,200,20,fit\n"))
	require.NoError(t, err)
	o := &calibrate.Overheads{IterationMS: 2, PerSeqMS: 0.01}
	got, err := calibrate.PredictServing(cat, prof, rows, o)
	require.NoError(t, err)

	g, _ := cat.GPU("H100-80GB")
	m, _ := cat.Model("llama-3-8b")
	coef := prof.For(g)
	coef.IterationOverheadMS, coef.PerSeqOverheadMS = 2, 0.01
	cm, err := sim.NewCostModel(m, g, coef)
	require.NoError(t, err)
	ctx := 64 * (500 + 100 + 1.0)
	want := cm.IterationSeconds(sim.Batch{Tokens: 64, AttentionPairs: ctx, KVTokens: ctx, Seqs: 64, Sampled: 64}) * 1e3
	assert.InDelta(t, want, got[0].StepMS, 1e-9)
	assert.InDelta(t, want-2-0.64, got[0].GPUMS, 1e-9)
	// 60 prompts/s of 500 tokens add some 300 prefill tokens to each step: the linear layers
	// leave the weights' roof for the compute roof.
	assert.Greater(t, got[1].StepMS, got[0].StepMS+1, "prompts arriving add prefill to each step")

	// A GPU that cannot prefill the prompts at any step time is an error naming the row.
	rows[1].PromptsPerS = 1e5
	_, err = calibrate.PredictServing(cat, prof, rows, o)
	assert.ErrorContains(t, err, "row busy (line 4): no steady step")
}

// The fit recovers overheads that generated the measurements, on rows that span the number
// in flight, and its held-out predictions of such rows are as good.
func TestFitServingRecovers(t *testing.T) {
	cat, prof := sim.DefaultCatalog(), sim.DefaultProfile()
	rows, err := calibrate.ReadServing(writeServing(t,
		"a,s,H100-80GB,llama-3-8b,1,1,1,32,5,800,128,1,fit\n"+
			"b,s,H100-80GB,llama-3-8b,1,1,1,256,20,800,128,1,fit\n"+
			"c,s,H200,llama-3-70b,1,2,1,300,8,300,300,1,fit\n"+
			"d,s,H100-80GB,llama-3-70b,2,2,2,80,6,300,300,1,check\n"))
	require.NoError(t, err)
	truth := &calibrate.Overheads{IterationMS: 3, PerSeqMS: 0.02}
	pred, err := calibrate.PredictServing(cat, prof, rows, truth)
	require.NoError(t, err)
	for i := range rows {
		rows[i].TPOTMS = pred[i].StepMS
	}
	fit, err := calibrate.FitServing(cat, prof, rows)
	require.NoError(t, err)
	assert.InDelta(t, 3, fit.IterationMS, 0.05)
	assert.InDelta(t, 0.02, fit.PerSeqMS, 0.001)
	require.Len(t, fit.Fitted, 4)
	profile, err := calibrate.PredictServing(cat, prof, rows, nil)
	require.NoError(t, err)
	assert.Equal(t, profile, fit.Profile, "the rows before the fit, with the profile's overheads")
	require.Len(t, fit.HeldOut, 3, "only fit rows are held out")
	for _, p := range append(fit.Fitted, fit.HeldOut...) {
		assert.InDelta(t, 0, p.ErrorPct(), 0.5, p.Row.ID)
	}
	rows[0].Set, rows[1].Set = "check", "check"
	_, err = calibrate.FitServing(cat, prof, rows)
	assert.ErrorContains(t, err, "at least two rows marked fit")
}

// The vllm-v1 preset's overheads are the fit on the published runs the repository ships.
func TestVLLMV1PresetIsTheServingFit(t *testing.T) {
	rows, err := calibrate.ReadServing("../../tools/measurements/vllm-v1-serving.csv")
	require.NoError(t, err)
	cat := sim.DefaultCatalog()
	fit, err := calibrate.FitServing(cat, sim.DefaultProfile(), rows)
	require.NoError(t, err)
	p, err := cat.Engine("vllm-v1")
	require.NoError(t, err)
	require.NotNil(t, p.IterationOverheadMS)
	require.NotNil(t, p.PerSeqOverheadMS)
	assert.InDelta(t, fit.IterationMS, *p.IterationOverheadMS, 0.001)
	assert.InDelta(t, fit.PerSeqMS, *p.PerSeqOverheadMS, 0.0001)
}
