package plots

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"

	"github.com/mosaic-sched/mosaic/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// TornadoBar is one assumption of a sensitivity analysis: the mean end-to-end speedup over the
// seeds with the assumption at the low and at the high end of its range.
type TornadoBar struct {
	Assumption              string
	LowSetting, HighSetting string
	Low, High               float64
}

// Swing is how far the speedup moves across the assumption's range, the base included: both
// ends can fall on the same side of it.
func (b TornadoBar) Swing(base float64) float64 {
	return max(b.Low, b.High, base) - min(b.Low, b.High, base)
}

// Tornado is one experiment's sensitivity analysis: the base speedup (every assumption as the
// file has it), the paper's (NaN when unknown), and one bar per assumption, largest swing (from
// the base) first.
type Tornado struct {
	Experiment  string
	Base, Paper float64
	Seeds       int
	Bars        []TornadoBar
}

// TornadoData averages sensitivity rows over their seeds, per experiment (in the order they
// first appear) and assumption.
func TornadoData(rows []results.SensitivityRow) []Tornado {
	var out []Tornado
	for _, exp := range distinct(rows, func(r results.SensitivityRow) string { return r.Experiment }) {
		t := Tornado{Experiment: exp, Paper: math.NaN()}
		mean := func(keep func(results.SensitivityRow) bool) (float64, string, int) {
			s, n, setting := 0.0, 0, ""
			for _, r := range rows {
				if r.Experiment == exp && keep(r) {
					s += r.SpeedupE2E
					n++
					setting = r.Setting
					if !math.IsNaN(r.PaperE2E) {
						t.Paper = r.PaperE2E
					}
				}
			}
			return s / float64(max(n, 1)), setting, n
		}
		t.Base, _, t.Seeds = mean(func(r results.SensitivityRow) bool { return r.Side == "base" })
		for _, a := range distinct(rows, func(r results.SensitivityRow) string { return r.Assumption }) {
			if a == "" {
				continue
			}
			b := TornadoBar{Assumption: a}
			var nl, nh int
			b.Low, b.LowSetting, nl = mean(func(r results.SensitivityRow) bool { return r.Assumption == a && r.Side == "low" })
			b.High, b.HighSetting, nh = mean(func(r results.SensitivityRow) bool { return r.Assumption == a && r.Side == "high" })
			if nl > 0 && nh > 0 {
				t.Bars = append(t.Bars, b)
			}
		}
		slices.SortStableFunc(t.Bars, func(x, y TornadoBar) int { return cmp.Compare(y.Swing(t.Base), x.Swing(t.Base)) })
		out = append(out, t)
	}
	return out
}

// loadSensitivity reads dir/sensitivity.csv; ok is false when there is none.
func loadSensitivity(dir string) (rows []results.SensitivityRow, ok bool, err error) {
	rows, err = results.ReadSensitivityCSV(filepath.Join(dir, "sensitivity.csv"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("plots: loading %s: %w", dir, err)
	}
	return rows, true, nil
}

// Colours of the tornado's two ends.
var (
	lowColour  = OkabeIto[0]
	highColour = OkabeIto[1]
)

// tornadoFigure draws one experiment's tornado chart: per assumption (largest swing on top) a
// bar from the base speedup to the speedup at the low end (blue) and at the high end (orange),
// the base as a solid line and the paper's speedup as a dashed one.
func tornadoFigure(t Tornado, opt Options) (*canvasFigure, string) {
	if len(t.Bars) == 0 {
		return nil, "no assumption with both a low and a high variant in sensitivity.csv"
	}
	p := newPanel(fmt.Sprintf("end-to-end speedup of %s (mean over %d seeds)", t.Experiment, t.Seeds), "")
	n := len(t.Bars)
	bars := &boxes{minWidth: vg.Points(0.8)}
	lo, hi := t.Base, t.Base
	if !math.IsNaN(t.Paper) {
		lo, hi = min(lo, t.Paper), max(hi, t.Paper)
	}
	names := make([]string, n)
	for i, b := range t.Bars {
		y := float64(n - 1 - i)
		names[n-1-i] = b.Assumption + " (" + b.LowSetting + " / " + b.HighSetting + ")"
		low := box{x0: t.Base, x1: b.Low, y0: y - 0.32, y1: y + 0.32, fill: lowColour, outline: true}
		high := box{x0: t.Base, x1: b.High, y0: y - 0.32, y1: y + 0.32, fill: highColour, outline: true}
		if math.Abs(b.Low-t.Base) < math.Abs(b.High-t.Base) {
			low, high = high, low // the longer first, so that both show when on one side
		}
		bars.items = append(bars.items, low, high)
		lo, hi = min(lo, b.Low, b.High), max(hi, b.Low, b.High)
	}
	pad := (hi - lo) * 0.08
	if pad == 0 {
		pad = 0.1
	}
	p.X.Min, p.X.Max = lo-pad, hi+pad
	p.Add(bars)
	p.Add(refLine{value: t.Base, vertical: true, style: draw.LineStyle{Color: refGrey, Width: vg.Points(0.8)}})
	legend := []legendEntry{
		{"low end (first setting)", fillSwatch(lowColour, false, true)},
		{"high end (second)", fillSwatch(highColour, false, true)},
		{fmt.Sprintf("as in the file (%.2fx)", t.Base), lineSwatch(draw.LineStyle{Color: refGrey, Width: vg.Points(0.8)}, nil)},
	}
	if !math.IsNaN(t.Paper) {
		ds := draw.LineStyle{Color: OkabeIto[3], Width: vg.Points(0.9), Dashes: dashPatterns[1]}
		p.Add(refLine{value: t.Paper, vertical: true, style: ds})
		legend = append(legend, legendEntry{fmt.Sprintf("paper (%.2fx)", t.Paper), lineSwatch(ds, nil)})
	}
	ticks := make([]plot.Tick, n)
	for i, name := range names {
		ticks[i] = plot.Tick{Value: float64(i), Label: name}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Tick.Length = 0
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	p.Y.Tick.Label.Font.Size = noteSize
	// The assumptions' names and settings need room: at least two columns wide.
	f := &canvasFigure{width: max(opt.Width, TwoColumn), legend: legend, panelHeight: vg.Length(n)*0.3*vg.Inch + 0.5*vg.Inch}
	f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{p}}, 0) }
	return f, ""
}
