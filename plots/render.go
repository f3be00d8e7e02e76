package plots

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/results"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Options configure Render. The zero value draws one-column figures as 300-DPI PNG and PDF
// with min-max error bars.
type Options struct {
	// Formats are file formats to write each figure in: "png", "pdf" and "svg". PDF and SVG
	// embed their fonts. Empty means png and pdf.
	Formats []string
	// Width of every figure; OneColumn (3.5 in) or TwoColumn (7 in) for a two-column paper.
	// Zero means OneColumn. Heights follow from the content.
	Width vg.Length
	// DPI is the resolution of PNG files; zero means 300.
	DPI int
	// Spread chooses the error bars drawn where several seeds share a key.
	Spread Spread
	// Family restricts the threshold trade-off figure to one policy family (see InFamily);
	// empty means every row.
	Family string
	// ChromeTrace also writes each folder's timeline as a Chrome trace (timeline-LABEL.json,
	// see WriteChromeTrace) next to its figure.
	ChromeTrace bool
}

// ErrUnknownFormat is returned for a format Render cannot write.
var ErrUnknownFormat = errors.New("plots: unknown figure format (want png, pdf or svg)")

// ColumnWidth returns the figure width of a figure that spans columns (1 or 2) of a
// two-column paper.
func ColumnWidth(columns int) (vg.Length, error) {
	switch columns {
	case 1:
		return OneColumn, nil
	case 2:
		return TwoColumn, nil
	}
	return 0, fmt.Errorf("plots: a figure spans 1 or 2 columns, not %d", columns)
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Formats) == 0 {
		o.Formats = []string{"png", "pdf"}
	}
	for i, f := range o.Formats {
		f = strings.ToLower(strings.TrimPrefix(f, "."))
		if f != "png" && f != "pdf" && f != "svg" {
			return o, fmt.Errorf("%w: %q", ErrUnknownFormat, o.Formats[i])
		}
		o.Formats[i] = f
	}
	if o.Width == 0 {
		o.Width = OneColumn
	}
	if o.Width < 2*vg.Inch {
		return o, fmt.Errorf("plots: width %.2f in is too narrow for a figure (at least 2 in)", float64(o.Width/vg.Inch))
	}
	if o.DPI == 0 {
		o.DPI = 300
	}
	return o, nil
}

// Figure is one figure Render produced, or skipped with the reason.
type Figure struct {
	Name    string
	Files   []string
	Skipped string
}

// Render draws the figures of the results folders dirs into outDir:
//
//   - speedup: per-stage speedups per policy, grouped by experiment (all folders);
//   - sim-vs-replay: simulated against measured e2e makespans and speedups, captioned with
//     the engine and hardware measured (all folders);
//   - threshold-tradeoff: skip rate and accuracy against the threshold T (all folders);
//   - timeline-LABEL: each policy's workers over time (per folder, from workers.csv);
//   - output-length-LABEL: output-length CDFs per model (per folder, from calls.csv);
//   - expert-demand-LABEL: expert calls per model (per folder, from calls.csv);
//   - latency-cdf-LABEL: per-query latency CDFs per policy (per folder of an online run,
//     from queries.csv);
//   - latency-load: latency and SLO attainment against the arrival rate (all folders of
//     sweeps over workload.arrival_rate);
//
// where LABEL is Results.Label. A figure without data is returned with Skipped set and no
// files; errors are reserved for unreadable folders and unwritable files.
func Render(dirs []string, outDir string, opt Options) ([]Figure, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, errors.New("plots: no results folders to plot")
	}
	var all []Results
	var summary, swept []results.SummaryRow
	var points []string // summary's sweep points; "" for rows from no sweep
	var setups []Setup  // the setups of summary's folders
	var rates []float64
	var sens []results.SensitivityRow
	for _, d := range dirs {
		rows, ok, err := loadSensitivity(d)
		if err != nil {
			return nil, err
		}
		if ok {
			sens = append(sens, rows...)
			if _, err := os.Stat(filepath.Join(d, "summary.csv")); err != nil {
				continue // a sensitivity analysis's folder: its runs are in subfolders
			}
		}
		r, err := Load(d)
		if err != nil {
			return nil, err
		}
		all = append(all, r)
		summary = append(summary, r.Summary...)
		setups = append(setups, slices.Repeat([]Setup{r.Setup}, len(r.Summary))...)
		if r.Points != nil {
			points = append(points, r.Points...)
		} else {
			points = append(points, make([]string, len(r.Summary))...)
		}
		if r.Rates != nil {
			swept, rates = append(swept, r.Summary...), append(rates, r.Rates...)
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	var figs []Figure
	add := func(name string, f *canvasFigure, skipped string, extra ...string) error {
		fig := Figure{Name: name, Skipped: skipped}
		if f != nil {
			files, err := f.write(outDir, name, opt)
			if err != nil {
				return err
			}
			fig.Files = append(files, extra...)
		}
		figs = append(figs, fig)
		return nil
	}
	for _, t := range TornadoData(sens) {
		f, why := tornadoFigure(t, opt)
		if err := add("sensitivity-"+fileSafe(t.Experiment), f, why); err != nil {
			return figs, err
		}
	}
	if len(all) == 0 {
		return figs, nil
	}
	f, why := speedupFigure(SpeedupData(summary, points), opt)
	if err := add("speedup", f, why); err != nil {
		return figs, err
	}
	f, why = simVsReplayFigure(SimVsReplayData(summary, setups), opt)
	if err := add("sim-vs-replay", f, why); err != nil {
		return figs, err
	}
	f, why = tradeoffFigure(TradeoffData(summary, opt.Family), opt)
	if err := add("threshold-tradeoff", f, why); err != nil {
		return figs, err
	}
	f, why = loadFigure(LoadData(swept, rates), opt)
	if err := add("latency-load", f, why); err != nil {
		return figs, err
	}
	var labels []string
	for _, r := range all {
		label := fileSafe(r.Label())
		for i := 2; slices.Contains(labels, label); i++ {
			label = fmt.Sprintf("%s-%d", fileSafe(r.Label()), i)
		}
		labels = append(labels, label)
		colours := modelColours(r)
		var extra []string
		if opt.ChromeTrace && len(r.Workers) > 0 {
			path := filepath.Join(outDir, "timeline-"+label+".json")
			if err := writeChromeTraceFile(path, r.Calls, r.Workers); err != nil {
				return figs, err
			}
			extra = append(extra, path)
		}
		f, why = timelineFigure(TimelineData(r.Workers), r.Summary, colours, opt)
		if err := add("timeline-"+label, f, why, extra...); err != nil {
			return figs, err
		}
		f, why = outputLengthFigure(OutputLengthData(r.Calls), colours, opt)
		if err := add("output-length-"+label, f, why); err != nil {
			return figs, err
		}
		f, why = demandFigure(DemandData(r.Calls), colours, opt)
		if err := add("expert-demand-"+label, f, why); err != nil {
			return figs, err
		}
		f, why = latencyCDFFigure(LatencyCDFData(r.Queries), opt)
		if err := add("latency-cdf-"+label, f, why); err != nil {
			return figs, err
		}
	}
	return figs, nil
}

func writeChromeTraceFile(path string, calls []results.CallRow, workers []results.WorkerRow) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if err := WriteChromeTrace(f, calls, workers); err != nil {
		f.Close()
		return fmt.Errorf("plots: writing %s: %w", path, err)
	}
	return f.Close()
}

// modelColours gives every model a folder names (sorted) a palette colour, so that a model
// has one colour in all of the folder's figures.
func modelColours(r Results) map[string]color.Color {
	var models []string
	for _, c := range r.Calls {
		if !slices.Contains(models, c.Model) {
			models = append(models, c.Model)
		}
	}
	for _, w := range r.Workers {
		if w.Model != "" && !slices.Contains(models, w.Model) {
			models = append(models, w.Model)
		}
	}
	slices.Sort(models)
	out := make(map[string]color.Color, len(models))
	for i, m := range models {
		out[m] = seriesColour(i)
	}
	return out
}

// fileSafe replaces the characters of s that do not belong in a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// canvasFigure is a figure laid out as a legend strip above a panel area, and caption lines
// under it.
type canvasFigure struct {
	width, panelHeight vg.Length
	legend             []legendEntry
	// caption holds paragraphs of text drawn under the panels, each wrapped to the width.
	caption []string
	// panels draws the figure's plots into c, the area between the legend and the caption.
	panels func(c draw.Canvas)
}

func (f *canvasFigure) height() vg.Length {
	return legendHeight(f.legend, f.width) + f.panelHeight + captionHeight(f.caption, f.width)
}

// draw draws the whole figure onto c.
func (f *canvasFigure) draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	lh := legendHeight(f.legend, f.width)
	if lh > 0 {
		drawLegend(draw.Crop(c, 0, 0, c.Size().Y-lh, 0), f.legend)
	}
	ch := captionHeight(f.caption, f.width)
	if ch > 0 {
		drawCaption(draw.Crop(c, 0, 0, 0, ch-c.Size().Y), f.caption)
	}
	f.panels(draw.Crop(c, 0, 0, ch, -lh))
}

// write writes the figure in every format of opt as outDir/name.FORMAT.
func (f *canvasFigure) write(outDir, name string, opt Options) ([]string, error) {
	w, h := f.width, f.height()
	var files []string
	for _, format := range opt.Formats {
		var c vg.CanvasWriterTo
		switch format {
		case "png":
			c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(opt.DPI), vgimg.UseBackgroundColor(color.White))}
		case "pdf":
			pc := vgpdf.New(w, h)
			pc.EmbedFonts(true)
			c = cp1252Canvas{pc}
		case "svg":
			c = vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true))
		}
		f.draw(draw.New(c))
		path := filepath.Join(outDir, name+"."+format)
		if err := writeTo(path, c); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func writeTo(path string, c vg.CanvasWriterTo) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if _, err := c.WriteTo(file); err != nil {
		file.Close()
		return fmt.Errorf("plots: writing %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("plots: writing %s: %w", path, err)
	}
	return nil
}

// cp1252Canvas passes text to vgpdf in Windows-1252, the encoding of the fonts vgpdf embeds:
// vgpdf writes strings' UTF-8 bytes as they are, so "×" would print as "Ã—" (gonum/plot#347).
// Characters outside Windows-1252 print as "?".
type cp1252Canvas struct{ *vgpdf.Canvas }

func (c cp1252Canvas) FillString(f font.Face, pt vg.Point, s string) {
	c.Canvas.FillString(f, pt, toCP1252(s))
}

// cp1252High maps the characters of Windows-1252's bytes 0x80-0x9F.
var cp1252High = map[rune]byte{'€': 0x80, '‚': 0x82, 'ƒ': 0x83, '„': 0x84, '…': 0x85, '†': 0x86, '‡': 0x87,
	'ˆ': 0x88, '‰': 0x89, 'Š': 0x8A, '‹': 0x8B, 'Œ': 0x8C, 'Ž': 0x8E, '‘': 0x91, '’': 0x92, '“': 0x93,
	'”': 0x94, '•': 0x95, '–': 0x96, '—': 0x97, '˜': 0x98, '™': 0x99, 'š': 0x9A, '›': 0x9B, 'œ': 0x9C,
	'ž': 0x9E, 'Ÿ': 0x9F}

func toCP1252(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		ascii = ascii && s[i] < 0x80
	}
	if ascii {
		return s
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		switch {
		case r < 0x80 || r >= 0xA0 && r <= 0xFF:
			b = append(b, byte(r))
		case cp1252High[r] != 0:
			b = append(b, cp1252High[r])
		default:
			b = append(b, '?')
		}
	}
	return string(b)
}
