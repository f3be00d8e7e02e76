package experiments

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
	"github.com/mosaic-sched/mosaic/results"
)

// PaperReference holds the MOSAIC paper's reported figures (experiments/reference/mosaic-paper.toml).
//
//go:embed reference/mosaic-paper.toml
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

// Targets of the paper comparison: how far our mean may be from the paper's figure.
const (
	TargetSpeedupRel  = 0.15 // speedups: within 15% of the paper's
	TargetAccuracyPP  = 1.0  // accuracy changes: within 1 percentage point
	TargetSkipPointPP = 2.0  // skip rates: within 2 percentage points
)

// PaperFigure is one figure of one dataset over the seeds it was run with.
type PaperFigure struct {
	Dataset, Figure string
	// Unit is "x" (a speedup), "%" (a skip rate) or "pp" (an accuracy change).
	Unit  string
	Paper float64
	// Seeds and Values are our figure per seed, in seed order.
	Seeds  []uint64
	Values []float64
}

// Mean and SD are the figure's mean and sample standard deviation over the seeds (SD is 0 for
// one seed).
func (f PaperFigure) Mean() float64 {
	s := 0.0
	for _, v := range f.Values {
		s += v
	}
	return s / float64(len(f.Values))
}

// SD is the sample standard deviation over the seeds.
func (f PaperFigure) SD() float64 {
	if len(f.Values) < 2 {
		return 0
	}
	m, s := f.Mean(), 0.0
	for _, v := range f.Values {
		s += (v - m) * (v - m)
	}
	return math.Sqrt(s / float64(len(f.Values)-1))
}

// Diff is our mean minus the paper's figure: relative for a speedup, in points otherwise.
func (f PaperFigure) Diff() float64 {
	if f.Unit == "x" {
		return f.Mean()/f.Paper - 1
	}
	return f.Mean() - f.Paper
}

// Within reports whether the mean is within the figure's target of the paper's.
func (f PaperFigure) Within() bool {
	switch f.Unit {
	case "x":
		return math.Abs(f.Diff()) <= TargetSpeedupRel
	case "pp":
		return math.Abs(f.Diff()) <= TargetAccuracyPP+1e-9
	}
	return math.Abs(f.Diff()) <= TargetSkipPointPP+1e-9
}

// target describes the figure's target.
func (f PaperFigure) target() string {
	switch f.Unit {
	case "x":
		return fmt.Sprintf("%.0f%%", 100*TargetSpeedupRel)
	case "pp":
		return fmt.Sprintf("%g pp", TargetAccuracyPP)
	}
	return fmt.Sprintf("%g pp", TargetSkipPointPP)
}

// PaperFigures gathers, from summary rows of the paper experiments (any number of seeds, as
// written by `mosaic paper` or a seed sweep), each reference dataset's figures: the mosaic
// policy's (label "mosaic") speedups over the baseline, and the skip rates and accuracy changes
// at T = 1 ("mosaic") and T = 2/3 ("mosaic-t2/3"), per seed.
func PaperFigures(refs []Reference, rows []results.SummaryRow) ([]PaperFigure, error) {
	type key struct {
		exp    string
		seed   uint64
		policy string
	}
	byKey := map[key]results.SummaryRow{}
	seeds := map[string][]uint64{}
	for _, r := range rows {
		k := key{r.Experiment, r.Seed, r.Policy}
		if _, dup := byKey[k]; dup {
			return nil, fmt.Errorf("two results of experiment %s, seed %d, policy %s: give each seed's results once", r.Experiment, r.Seed, r.Policy)
		}
		byKey[k] = r
		if !slices.Contains(seeds[r.Experiment], r.Seed) {
			seeds[r.Experiment] = append(seeds[r.Experiment], r.Seed)
		}
	}
	var out []PaperFigure
	for _, ref := range refs {
		ss := slices.Sorted(slices.Values(seeds[ref.Experiment]))
		var figs []PaperFigure
		add := func(fig, unit string, paper float64) *PaperFigure {
			figs = append(figs, PaperFigure{Dataset: ref.Name, Figure: fig, Unit: unit, Paper: paper})
			return &figs[len(figs)-1]
		}
		skip := func(r results.SummaryRow) float64 {
			return 100 * float64(r.AggregatorSkipped) / float64(max(1, r.Queries))
		}
		for _, seed := range ss {
			t1, ok := byKey[key{ref.Experiment, seed, "mosaic"}]
			if !ok {
				continue
			}
			t23, ok23 := byKey[key{ref.Experiment, seed, "mosaic-t2/3"}]
			figs = figs[:0]
			add("expert-stage speedup", "x", ref.SpeedupExpert)
			add("aggregator-stage speedup", "x", ref.SpeedupAggregator)
			add("end-to-end speedup", "x", ref.SpeedupE2E)
			add("skip rate, T = 1", "%", ref.SkipPctT1)
			if ok23 {
				add("skip rate, T = 2/3", "%", ref.SkipPctT23)
			}
			add("accuracy change, T = 1", "pp", ref.AccuracyDeltaPPT1)
			if ok23 {
				add("accuracy change, T = 2/3", "pp", ref.AccuracyDeltaPPT23)
			}
			values := map[string]float64{
				"expert-stage speedup": t1.SpeedupExpert, "aggregator-stage speedup": t1.SpeedupAggregator,
				"end-to-end speedup": t1.SpeedupE2E, "skip rate, T = 1": skip(t1), "accuracy change, T = 1": t1.AccuracyDeltaPP,
			}
			if ok23 {
				values["skip rate, T = 2/3"], values["accuracy change, T = 2/3"] = skip(t23), t23.AccuracyDeltaPP
			}
			for _, f := range figs {
				i := slices.IndexFunc(out, func(o PaperFigure) bool { return o.Dataset == f.Dataset && o.Figure == f.Figure })
				if i < 0 {
					out = append(out, f)
					i = len(out) - 1
				}
				out[i].Seeds = append(out[i].Seeds, seed)
				out[i].Values = append(out[i].Values, values[f.Figure])
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no results of the paper experiments (%s) with a \"mosaic\" policy", experimentsOf(refs))
	}
	return out, nil
}

// PaperTable writes the comparison as a markdown table: our mean, standard deviation and range
// over the seeds next to the paper's figure, and whether the mean is within the target.
func PaperTable(w io.Writer, figs []PaperFigure) error {
	var b strings.Builder
	fmt.Fprintln(&b, "| dataset | figure | ours: mean ± sd | range | seeds | paper | difference | within target? |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	for _, f := range figs {
		unit := map[string]string{"x": "x", "%": "%", "pp": " pp"}[f.Unit]
		diff := fmt.Sprintf("%+.2f pp", f.Diff())
		if f.Unit == "x" {
			diff = fmt.Sprintf("%+.0f%%", 100*f.Diff())
		}
		mark := "yes"
		if !f.Within() {
			mark = "**no** (" + f.target() + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f%s ± %.2f | %.2f to %.2f | %d | %.2f%s | %s | %s |\n", f.Dataset, f.Figure, f.Mean(), unit, f.SD(),
			slices.Min(f.Values), slices.Max(f.Values), len(f.Values), f.Paper, unit, diff, mark)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePaperCSV writes every figure's per-seed values (long format: one row per dataset,
// figure and seed).
func WritePaperCSV(w io.Writer, figs []PaperFigure) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"dataset", "figure", "unit", "seed", "ours", "paper"}); err != nil {
		return err
	}
	for _, f := range figs {
		for i, v := range f.Values {
			if err := cw.Write([]string{f.Dataset, f.Figure, f.Unit, strconv.FormatUint(f.Seeds[i], 10),
				strconv.FormatFloat(v, 'f', 4, 64), strconv.FormatFloat(f.Paper, 'f', 4, 64)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadPaperRows reads the summary rows of results folders (a run's folder, or a sweep's, whose
// summary.csv combines its points).
func ReadPaperRows(dirs []string) ([]results.SummaryRow, error) {
	var rows []results.SummaryRow
	for _, d := range dirs {
		rs, err := results.ReadSummaryCSV(filepath.Join(d, "summary.csv"))
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
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
		return ParseReferences("experiments/reference/mosaic-paper.toml", PaperReference)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseReferences(path, data)
}
