package calibrate

import (
	"fmt"
	"slices"

	"github.com/mosaic-sched/mosaic/sim"
)

// Measured is one batch a profiler timed on a server: Batch requests of Length prompt and
// Output output tokens (0: Length) sent together, and the seconds until the last finished.
type Measured struct {
	Length, Output, Batch int
	Latency               float64
}

// MeasuredFit is a GPU's coefficients fitted to the batches a profiler timed, with the
// predictions they make of those batches.
type MeasuredFit struct {
	Profile     *sim.Profile // the built-in profile, with the GPU's coefficients fitted
	Coef        sim.Coefficients
	Predictions []Prediction
	// LoadMedian is the median of the model loads timed (0 when none were), which fixed the
	// coefficients' StartupS.
	LoadMedian float64
	Loads      int
}

// FitMeasured fits GPU g's coefficients to batches of model m timed on a server whose engine
// the engine function builds, starting from the built-in profile; loads, when given, are the
// server's model loads in seconds, whose median fixes the start-up time at the profile's load
// bandwidth (a load takes the weights over the bandwidth plus the start-up).
func FitMeasured(g *sim.GPU, m *sim.Model, engine func(*sim.CostModel) (sim.EngineConfig, error), batches []Measured, loads []float64) (*MeasuredFit, error) {
	cases := make([]Case, 0, len(batches))
	for i, x := range batches {
		cases = append(cases, Case{Row: Row{Line: i + 1, Hardware: g.Name, NumGPUs: 1, Framework: "measured",
			Model: m.ID, Length: x.Length, Output: x.Output, Batch: x.Batch, Latency: x.Latency}, GPU: g, Model: m, Engine: engine})
	}
	prof := sim.DefaultProfile()
	fr, err := Fit(cases, prof.For(g), FitOptions{})
	if err != nil {
		return nil, err
	}
	out := &MeasuredFit{Profile: prof, Loads: len(loads)}
	if len(loads) > 0 {
		ls := slices.Clone(loads)
		slices.Sort(ls)
		out.LoadMedian = ls[len(ls)/2]
		fr.Coef.StartupS = max(0, out.LoadMedian-m.WeightBytes()/(fr.Coef.LoadGBps*1e9))
	}
	prof.Set(g.Name, fr.Coef)
	out.Coef = fr.Coef
	if out.Predictions, err = PredictAll(cases, prof); err != nil {
		return nil, err
	}
	return out, nil
}

// LoadNote describes the loads the fit used ("" when none): "; model loads: median 0.263 s
// over 3 (startup_s 0.261)".
func (f *MeasuredFit) LoadNote() string {
	if f.Loads == 0 {
		return ""
	}
	return fmt.Sprintf("; model loads: median %.3f s over %d (startup_s %.3f)", f.LoadMedian, f.Loads, f.Coef.StartupS)
}
