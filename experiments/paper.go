package experiments

import (
	_ "embed"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
	"github.com/mosaic-sched/mosaic/traces"
)

// PaperReference holds the MOSAIC paper's reported figures (experiments/paper/reference.toml).
//
//go:embed paper/reference.toml
var PaperReference []byte

// Reference is one dataset's reported figures.
type Reference struct {
	Name               string  `toml:"name"`
	Experiment         string  `toml:"experiment"`
	SpeedupExpert      float64 `toml:"speedup_expert"`
	SpeedupAggregator  float64 `toml:"speedup_aggregator"`
	SpeedupE2E         float64 `toml:"speedup_e2e"`
	SkipPctT1          float64 `toml:"skip_pct_t1"`
	SkipPctT23         float64 `toml:"skip_pct_t23"`
	AccuracyDeltaPPT1  float64 `toml:"accuracy_delta_pp_t1"`
	AccuracyDeltaPPT23 float64 `toml:"accuracy_delta_pp_t23"`
}

// ParseReferences decodes a reference file.
func ParseReferences(name string, data []byte) ([]Reference, error) {
	var f struct {
		Dataset []Reference `toml:"dataset"`
	}
	if _, err := tomlx.Decode(name, data, &f); err != nil {
		return nil, err
	}
	return f.Dataset, nil
}

// PaperTable compares results folders of the paper experiments with the paper: for each
// dataset, the mosaic policy's (label "mosaic") speedups over the baseline, and the skip rates
// and accuracy changes at T = 1 ("mosaic") and T = 2/3 ("mosaic-t2/3").
func PaperTable(w io.Writer, refs []Reference, dirs []string) error {
	rows := map[string][]traces.SummaryRow{}
	for _, d := range dirs {
		rs, err := traces.ReadSummaryCSV(filepath.Join(d, "summary.csv"))
		if err != nil {
			return err
		}
		for _, r := range rs {
			rows[r.Experiment] = append(rows[r.Experiment], r)
		}
	}
	find := func(exp, policy string) (traces.SummaryRow, bool) {
		for _, r := range rows[exp] {
			if r.Policy == policy {
				return r, true
			}
		}
		return traces.SummaryRow{}, false
	}
	fmt.Fprintln(w, "| dataset | figure | ours | paper | difference |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	found := 0
	for _, ref := range refs {
		t1, ok := find(ref.Experiment, "mosaic")
		if !ok {
			continue
		}
		found++
		t23, ok23 := find(ref.Experiment, "mosaic-t2/3")
		skip := func(r traces.SummaryRow) float64 {
			return 100 * float64(r.AggregatorSkipped) / float64(max(1, r.Queries))
		}
		line := func(fig string, ours, paper float64, unit string, relative bool) {
			diff := ours - paper
			d := fmt.Sprintf("%+.2f%s", diff, unit)
			if relative {
				d = fmt.Sprintf("%+.0f%%", 100*diff/paper)
				if math.Abs(diff/paper) > 0.25 {
					d += " (>25%)"
				}
			}
			fmt.Fprintf(w, "| %s | %s | %.2f%s | %.2f%s | %s |\n", ref.Name, fig, ours, unit, paper, unit, d)
		}
		line("expert-stage speedup", t1.SpeedupExpert, ref.SpeedupExpert, "x", true)
		line("aggregator-stage speedup", t1.SpeedupAggregator, ref.SpeedupAggregator, "x", true)
		line("end-to-end speedup", t1.SpeedupE2E, ref.SpeedupE2E, "x", true)
		line("skip rate, T = 1 (%)", skip(t1), ref.SkipPctT1, "", false)
		if ok23 {
			line("skip rate, T = 2/3 (%)", skip(t23), ref.SkipPctT23, "", false)
		}
		line("accuracy change, T = 1", t1.AccuracyDeltaPP, ref.AccuracyDeltaPPT1, " pp", false)
		if ok23 {
			line("accuracy change, T = 2/3", t23.AccuracyDeltaPP, ref.AccuracyDeltaPPT23, " pp", false)
		}
	}
	if found == 0 {
		return fmt.Errorf("no results of the paper experiments (%s) with a \"mosaic\" policy in %s", experimentsOf(refs), strings.Join(dirs, ", "))
	}
	return nil
}

func experimentsOf(refs []Reference) string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Experiment)
	}
	return strings.Join(names, ", ")
}

// LoadReferences reads a reference file, or the embedded one when path is "".
func LoadReferences(path string) ([]Reference, error) {
	if path == "" {
		return ParseReferences("experiments/paper/reference.toml", PaperReference)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseReferences(path, data)
}
