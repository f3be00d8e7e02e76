package calibrate_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/calibrate"
)

// The tp column (written by tools/profile_forward.py --tp) is read per point; without it a
// point's TP is 0 (not recorded), and a bad value names the file and line.
func TestForwardTPColumn(t *testing.T) {
	head := "phase,batch_size,context_len,time_ms"
	pts, err := calibrate.ParseForward("f.csv", strings.NewReader(head+"\ndecode,4,128,7.5\n"))
	require.NoError(t, err)
	assert.Equal(t, 0, pts[0].TP)
	pts, err = calibrate.ParseForward("f.csv", strings.NewReader(head+",tp,model\ndecode,4,128,7.5,8,llama-3-70b\nprefill,1,512,20,8,llama-3-70b\n"))
	require.NoError(t, err)
	require.Len(t, pts, 2)
	assert.Equal(t, 8, pts[1].TP)
	assert.Equal(t, "llama-3-70b", pts[1].Model)
	_, err = calibrate.ParseForward("f.csv", strings.NewReader(head+",tp\ndecode,4,128,7.5,8\ndecode,4,128,7.5,zero\n"))
	assert.ErrorContains(t, err, `f.csv:3: column "tp"`)
}

// A point measured on one GPU of a tensor-parallel group is predicted by that GPU's roofline
// without the all-reduces, which need the other GPUs; a launch floor bounds that roofline, not
// the roofline with the all-reduces.
func TestPredictForwardShardHasNoAllReduce(t *testing.T) {
	g, m := gpuModel(t, "H200", "llama-3-70b")
	coef := sim.DefaultProfile().For(g)
	cm, err := sim.NewCostModel(m, g, coef, sim.WithTP(8))
	require.NoError(t, err)
	coef.LaunchFloorMS = 8
	floored, err := sim.NewCostModel(m, g, coef, sim.WithTP(8))
	require.NoError(t, err)
	pts := []calibrate.ForwardPoint{{Phase: "decode", Batch: 1, Context: 512, TP: 8}, {Phase: "decode", Batch: 256, Context: 4096, TP: 8},
		{Phase: "prefill", Batch: 1, Context: 2048, TP: 8}}
	withFloor := calibrate.PredictForward(pts, floored)
	var below, above int
	for i, p := range calibrate.PredictForward(pts, cm) {
		b := calibrate.ForwardBatch(p.ForwardPoint)
		gpu, _ := cm.IterationParts(b)
		_, ar, _ := cm.LinearParts(b)
		require.Positive(t, ar)
		assert.InDelta(t, gpu-ar, p.Predicted, 1e-15)
		assert.InDelta(t, math.Max(0.008, p.Predicted), withFloor[i].Predicted, 1e-15)
		if p.Predicted < 0.008 {
			below++
		} else {
			above++
		}
	}
	assert.Positive(t, below, "a point under the floor")
	assert.Positive(t, above, "a point over the floor")
}

// shapes are the model shapes of the measured profiles, and of the synthetic ones below.
var shapes = []struct {
	model string
	tp    int
}{{"llama-3-8b", 1}, {"llama-3-70b", 4}, {"llama-3-70b", 8}}

// FitForward recovers the coefficients that generated a profile: over two or more shapes it
// frees layer_latency_us and finds it beside the memory efficiency; over one it keeps it.
func TestFitForwardRecoversCoefficients(t *testing.T) {
	g, _ := gpuModel(t, "H200", "llama-3-8b")
	start := sim.DefaultProfile().For(g)
	start.LayerLatencyUS = 0 // the built-in fit's own would pin it from the start
	truth := start
	truth.ComputeEfficiency, truth.MemoryEfficiency, truth.AttentionEfficiency, truth.LayerLatencyUS = 0.55, 0.82, 0.77, 35
	var sets []calibrate.ForwardSet
	for _, sh := range shapes {
		_, m := gpuModel(t, "H200", sh.model)
		cm, err := sim.NewCostModel(m, g, truth, sim.WithTP(sh.tp))
		require.NoError(t, err)
		var pts []calibrate.ForwardPoint
		for _, b := range []int{1, 16, 64, 256} {
			for _, c := range []int{256, 2048} {
				pts = append(pts, calibrate.ForwardPoint{Phase: "decode", Batch: b, Context: c, TP: sh.tp})
			}
		}
		for _, n := range []int{512, 4096} {
			pts = append(pts, calibrate.ForwardPoint{Phase: "prefill", Batch: 1, Context: n, TP: sh.tp})
		}
		for i, p := range calibrate.PredictForward(pts, cm) {
			pts[i].Seconds = p.Predicted
		}
		sets = append(sets, calibrate.ForwardSet{Model: m, TP: sh.tp, Points: pts})
	}
	fr, err := calibrate.FitForward(sets, g, start, calibrate.FitOptions{})
	require.NoError(t, err)
	assert.Less(t, fr.MAPE, 0.1)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"compute", fr.Coef.ComputeEfficiency, 0.55}, {"memory", fr.Coef.MemoryEfficiency, 0.82},
		{"attention", fr.Coef.AttentionEfficiency, 0.77}, {"layer latency", fr.Coef.LayerLatencyUS, 35}} {
		assert.InEpsilon(t, c.want, c.got, 0.01, c.name)
	}

	one, err := calibrate.FitForward(sets[:1], g, start, calibrate.FitOptions{})
	require.NoError(t, err)
	assert.Zero(t, one.Coef.LayerLatencyUS, "one shape leaves layer_latency_us as given")
	// Noise-free points of one shape do pin it, through the compute-bound ones.
	also, err := calibrate.FitForward(sets[:1], g, start, calibrate.FitOptions{Also: []string{"layer_latency_us"}})
	require.NoError(t, err)
	assert.InEpsilon(t, 35, also.Coef.LayerLatencyUS, 0.01)
}

// The forward passes measured on an H200 (tools/measurements, tools/profile_forward.py): each
// shape held out in turn is predicted within the 12% target by coefficients fitted on the
// others, and the per-layer latency is what makes the TP-8 shard predictable from the rest.
func TestForwardMeasuredH200(t *testing.T) {
	g, _ := gpuModel(t, "H200", "llama-3-8b")
	files := map[string]string{"llama-3-8b/1": "h200_llama-3-8b.csv", "llama-3-70b/4": "h200_llama-3-70b_tp4.csv", "llama-3-70b/8": "h200_llama-3-70b_tp8.csv"}
	var sets []calibrate.ForwardSet
	for _, sh := range shapes {
		pts, err := calibrate.ReadForward(filepath.Join("..", "..", "tools", "measurements", files[fmt.Sprintf("%s/%d", sh.model, sh.tp)]))
		require.NoError(t, err)
		for _, p := range pts {
			require.Equal(t, sh.tp, p.TP)
			require.Equal(t, sh.model, p.Model)
		}
		_, m := gpuModel(t, "H200", sh.model)
		sets = append(sets, calibrate.ForwardSet{Model: m, TP: sh.tp, Points: pts})
	}
	heldOutMAPE := func(held int, opts calibrate.FitOptions) float64 {
		fit := append([]calibrate.ForwardSet(nil), sets...)
		fit[held].Points = nil
		start := sim.DefaultProfile().Default // the A100 fit, not the built-in H200 fit these files made
		fr, err := calibrate.FitForward(fit, g, start, opts)
		require.NoError(t, err)
		cm, err := sim.NewCostModel(sets[held].Model, g, fr.Coef, sim.WithTP(sets[held].TP))
		require.NoError(t, err)
		return calibrate.ForwardMAPE(calibrate.PredictForward(sets[held].Points, cm))
	}
	for i := range sets {
		mape := heldOutMAPE(i, calibrate.FitOptions{})
		t.Logf("held out %s TP %d: MAPE %.2f%%", sets[i].Model.ID, sets[i].TP, mape)
		assert.Less(t, mape, 12.0, "%s TP %d", sets[i].Model.ID, sets[i].TP)
	}
	without := heldOutMAPE(2, calibrate.FitOptions{Only: calibrate.ForwardFitParams})
	with := heldOutMAPE(2, calibrate.FitOptions{})
	t.Logf("TP 8 held out: %.2f%% without layer_latency_us, %.2f%% with", without, with)
	assert.Greater(t, without, 1.5*with)
}

func gpuModel(t *testing.T, gpu, model string) (*sim.GPU, *sim.Model) {
	t.Helper()
	cat := sim.DefaultCatalog()
	g, err := cat.GPU(gpu)
	require.NoError(t, err)
	m, err := cat.Model(model)
	require.NoError(t, err)
	return g, m
}
