package results

import (
	"strconv"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// SensitivityRow is one variant of a sensitivity analysis (sensitivity.csv): the mosaic
// policy's speedups over the baseline when one assumption of an experiment is set to the low or
// the high end of its plausible range ("base": every assumption as the experiment file has it),
// for one seed.
type SensitivityRow struct {
	Experiment string
	// Assumption names the input varied ("" for the base); Side is "base", "low" or "high";
	// Setting describes the variant's value.
	Assumption, Side, Setting string
	Seed                      uint64
	SpeedupExpert             float64
	SpeedupAggregator         float64
	SpeedupE2E                float64
	// PaperE2E is the paper's end-to-end speedup for the experiment (NaN when unknown).
	PaperE2E float64
}

// SensitivityHeader is the header of sensitivity.csv.
var SensitivityHeader = []string{"experiment", "assumption", "side", "setting", "seed", "speedup_expert", "speedup_aggregator",
	"speedup_e2e", "paper_speedup_e2e"}

// Record returns the row's fields in SensitivityHeader order.
func (r SensitivityRow) Record() []string {
	return []string{r.Experiment, r.Assumption, r.Side, r.Setting, strconv.FormatUint(r.Seed, 10), ratio(r.SpeedupExpert),
		ratio(r.SpeedupAggregator), ratio(r.SpeedupE2E), ratio(r.PaperE2E)}
}

// ReadSensitivityCSV reads a sensitivity.csv written by WriteCSV with SensitivityHeader; side
// must be base, low or high and the speedups positive numbers.
func ReadSensitivityCSV(path string) ([]SensitivityRow, error) {
	var rows []SensitivityRow
	err := readResultsCSV(path, "sensitivity", SensitivityHeader, nil, func(f *csvx.Reader) {
		r := SensitivityRow{Experiment: f.Str("experiment"), Assumption: f.Str("assumption"), Side: f.Str("side"),
			Setting: f.Str("setting"), SpeedupExpert: f.Float("speedup_expert"), SpeedupAggregator: f.Float("speedup_aggregator"),
			SpeedupE2E: f.Float("speedup_e2e"), PaperE2E: f.Float("paper_speedup_e2e")}
		seed, err := strconv.ParseUint(f.Str("seed"), 10, 64)
		switch {
		case err != nil:
			f.Fail("seed", "is not a seed")
		case r.Side != "base" && r.Side != "low" && r.Side != "high":
			f.Fail("side", "is not base, low or high")
		case !(r.SpeedupE2E > 0):
			f.Fail("speedup_e2e", "is not a positive speedup")
		}
		r.Seed = seed
		rows = append(rows, r)
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}
