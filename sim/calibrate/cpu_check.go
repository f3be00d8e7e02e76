package calibrate

import (
	"github.com/mosaic-sched/mosaic/sim"
)

// CPUOverheadFit is the engine CPU time per iteration of a CPU-overhead profile, fitted as
// lines in the batch size (FitOverheadLine).
type CPUOverheadFit struct {
	Rows []CPUOverheadRow
	// Engine fits schedule + sampler + prepare inputs + process outputs (CPUOverheadRow.Engine);
	// WithRay the same plus Ray's communication.
	Engine, WithRay OverheadLine
}

// FitCPUOverheads fits rows' engine CPU time per iteration, with and without Ray's
// communication, as lines in the batch size.
func FitCPUOverheads(rows []CPUOverheadRow) (CPUOverheadFit, error) {
	engine, err := FitOverheadLine(rows, CPUOverheadRow.Engine)
	if err != nil {
		return CPUOverheadFit{}, err
	}
	withRay, err := FitOverheadLine(rows, func(r CPUOverheadRow) float64 { return r.Engine() + r.RayComm })
	if err != nil {
		return CPUOverheadFit{}, err
	}
	return CPUOverheadFit{Rows: rows, Engine: engine, WithRay: withRay}, nil
}

// DefaultDecodeModel is the model whose decode steps CompareOverheads is usually asked for.
const DefaultDecodeModel = "llama-3-8b"

// The decode comparison's GPUs when none is named, and its batch sizes.
var (
	DefaultDecodeGPUs = []string{"A100-80GB", "H100-80GB"}
	DecodeBatches     = []int{1, 16, 64, 128, 192, 256}
)

// DecodeRow is the cost model's steady decode step of one GPU at one batch size under one set
// of engine overheads.
type DecodeRow struct {
	GPU *sim.GPU
	// Overheads names the set: "vllm-0.6 fit" (the profile's, fitted on vLLM 0.6 end-to-end
	// latencies), "vidur cpu" (the measured CPU time) or "none" (the GPU alone).
	Overheads string
	DecodeStep
	// KVMaxBatch is the most sequences of the step's context the KV cache holds at the
	// default memory utilisation (0 when the model does not fit).
	KVMaxBatch int
}

// CompareOverheads predicts the steady decode step of model m, every sequence with context
// cached tokens, on each catalog GPU named (DefaultDecodeGPUs when none) at DecodeBatches
// sequences, under three sets of engine overheads: prof's, measured (its fixed and
// per-sequence times replacing prof's) and none.
func CompareOverheads(cat *sim.Catalog, prof *sim.Profile, m *sim.Model, gpuNames []string, measured OverheadLine, context int) ([]DecodeRow, error) {
	if len(gpuNames) == 0 {
		gpuNames = DefaultDecodeGPUs
	}
	var out []DecodeRow
	for _, name := range gpuNames {
		g, err := cat.GPU(name)
		if err != nil {
			return nil, err
		}
		base := prof.For(g)
		vidur := base
		vidur.IterationOverheadMS, vidur.PerSeqOverheadMS = measured.FixedMS, measured.PerSeqMS
		none := base
		none.IterationOverheadMS, none.PerSeqOverheadMS = 0, 0
		for _, set := range []struct {
			name string
			coef sim.Coefficients
		}{{"vllm-0.6 fit", base}, {"vidur cpu", vidur}, {"none", none}} {
			cm, err := sim.NewCostModel(m, g, set.coef)
			if err != nil {
				return nil, err
			}
			kvMax := 0
			if eng, err := sim.DefaultEngine().WithKVCache(cm, sim.DefaultGPUMemoryUtilization); err == nil {
				kvMax = eng.NumBlocks * eng.BlockSize / (context + 1)
			}
			for _, b := range DecodeBatches {
				out = append(out, DecodeRow{GPU: g, Overheads: set.name, DecodeStep: DecodeBreakdown(cm, b, context), KVMaxBatch: kvMax})
			}
		}
	}
	return out, nil
}
