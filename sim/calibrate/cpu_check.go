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
	// Overheads names the set of engine overheads (NamedOverheads.Name).
	Overheads string
	DecodeStep
	// KVMaxBatch is the most sequences of the step's context the KV cache holds at the
	// default memory utilisation (0 when the model does not fit).
	KVMaxBatch int
}

// NamedOverheads is a set of engine overheads to predict with. A nil Overheads keeps the
// profile's for each GPU.
type NamedOverheads struct {
	Name      string
	Overheads *Overheads
}

// CompareOverheads predicts the steady decode step of model m, every sequence with context
// cached tokens, on each catalog GPU named (DefaultDecodeGPUs when none) at each of batches
// sequences, under each set of engine overheads (replacing prof's fixed and per-sequence
// times; a set without overheads keeps prof's).
func CompareOverheads(cat *sim.Catalog, prof *sim.Profile, m *sim.Model, gpuNames []string, sets []NamedOverheads, batches []int, context int) ([]DecodeRow, error) {
	if len(gpuNames) == 0 {
		gpuNames = DefaultDecodeGPUs
	}
	var out []DecodeRow
	for _, name := range gpuNames {
		g, err := cat.GPU(name)
		if err != nil {
			return nil, err
		}
		for _, set := range sets {
			coef := prof.For(g)
			if o := set.Overheads; o != nil {
				coef.IterationOverheadMS, coef.PerSeqOverheadMS = o.IterationMS, o.PerSeqMS
			}
			cm, err := sim.NewCostModel(m, g, coef)
			if err != nil {
				return nil, err
			}
			kvMax := 0
			if eng, err := sim.DefaultEngine().WithKVCache(cm, sim.DefaultGPUMemoryUtilization); err == nil {
				kvMax = eng.NumBlocks * eng.BlockSize / (context + 1)
			}
			for _, b := range batches {
				out = append(out, DecodeRow{GPU: g, Overheads: set.Name, DecodeStep: DecodeBreakdown(cm, b, context), KVMaxBatch: kvMax})
			}
		}
	}
	return out, nil
}
