package plots

import (
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The paper style: one sans-serif face at print sizes, thin black axes, the Okabe-Ito
// colour-blind-safe palette, legends in a strip above the panels (never over the data).

// Font sizes of the paper style, for figures printed at their nominal width.
const (
	labelSize  = vg.Length(8) // axis labels and panel titles
	tickSize   = vg.Length(7) // tick labels
	legendSize = vg.Length(7) // legend entries
	noteSize   = vg.Length(6.5)
)

// Column widths of a two-column paper.
const (
	OneColumn = 3.5 * vg.Inch
	TwoColumn = 7 * vg.Inch
)

// paperFont is the typeface of every text; vgpdf and vgsvg (as Render configures it) embed it.
var paperFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// OkabeIto is the Okabe-Ito palette (Okabe and Ito, "Color Universal Design", 2008), ordered
// for contrast between neighbours: blue, orange, bluish green, vermillion, reddish purple,
// sky blue, yellow, black. Series take colours in this order.
var OkabeIto = []color.Color{
	color.RGBA{0x00, 0x72, 0xB2, 0xFF},
	color.RGBA{0xE6, 0x9F, 0x00, 0xFF},
	color.RGBA{0x00, 0x9E, 0x73, 0xFF},
	color.RGBA{0xD5, 0x5E, 0x00, 0xFF},
	color.RGBA{0xCC, 0x79, 0xA7, 0xFF},
	color.RGBA{0x56, 0xB4, 0xE9, 0xFF},
	color.RGBA{0xF0, 0xE4, 0x42, 0xFF},
	color.RGBA{0x00, 0x00, 0x00, 0xFF},
}

var (
	idleGrey  = color.RGBA{0xE4, 0xE4, 0xE4, 0xFF}
	gridGrey  = color.RGBA{0xD9, 0xD9, 0xD9, 0xFF}
	refGrey   = color.RGBA{0x59, 0x59, 0x59, 0xFF}
	hatchInk  = color.RGBA{0x10, 0x10, 0x10, 0xFF}
	barStroke = color.RGBA{0x30, 0x30, 0x30, 0xFF}
)

// seriesColour returns the i-th palette colour, cycling.
func seriesColour(i int) color.Color { return OkabeIto[i%len(OkabeIto)] }

// dashes for line series beyond the palette's first cycle, and for aggregator series.
var dashPatterns = [][]vg.Length{nil, {vg.Points(3), vg.Points(1.5)}, {vg.Points(1), vg.Points(1)}, {vg.Points(4), vg.Points(1.5), vg.Points(1), vg.Points(1.5)}}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(paperFont, size), XAlign: draw.XLeft, YAlign: draw.YBottom,
		Handler: plot.DefaultTextHandler}
}

// newPanel returns a plot in the paper style: no title unless set, labelled axes, short ticks.
func newPanel(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.TextStyle.Font = font.From(paperFont, labelSize)
	p.Title.Padding = vg.Points(2)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(paperFont, labelSize)
		a.Label.Padding = vg.Points(2)
		a.Tick.Label.Font = font.From(paperFont, tickSize)
		a.Tick.Length = vg.Points(3)
		a.Tick.LineStyle.Width = vg.Points(0.5)
		a.LineStyle.Width = vg.Points(0.5)
		a.Padding = vg.Points(2)
	}
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	return p
}

// nominalX gives p an X axis of names at 0, 1, ..., with no tick marks.
func nominalX(p *plot.Plot, names ...string) {
	ticks := make([]plot.Tick, len(names))
	for i, n := range names {
		ticks[i] = plot.Tick{Value: float64(i), Label: n}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Tick.Length = 0
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
}

// hideXTicks keeps p's X axis line but draws no tick labels or label (for stacked panels).
func hideXTicks(p *plot.Plot) {
	p.X.Tick.Label.Font.Size = 0
	p.X.Tick.Label.Color = color.Transparent
	p.X.Label.Text = ""
}

// ---- plotters ---------------------------------------------------------------------------

// box is an axis-aligned rectangle in data coordinates.
type box struct {
	x0, x1, y0, y1 float64
	fill           color.Color
	// hatch draws diagonal lines over the fill; outline strokes the border.
	hatch, outline bool
}

// boxes draws rectangles; those narrower than minWidth are widened about their centre so
// that short intervals stay visible.
type boxes struct {
	items    []box
	minWidth vg.Length
}

func (b *boxes) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, it := range b.items {
		x0, x1, y0, y1 := trX(it.x0), trX(it.x1), trY(it.y0), trY(it.y1)
		if x1 < x0 {
			x0, x1 = x1, x0
		}
		if y1 < y0 {
			y0, y1 = y1, y0
		}
		if w := x1 - x0; w < b.minWidth {
			x0, x1 = x0-(b.minWidth-w)/2, x1+(b.minWidth-w)/2
		}
		pts := []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
		if it.fill != nil {
			c.FillPolygon(it.fill, c.ClipPolygonXY(pts))
		}
		if it.hatch {
			c.StrokeLines(draw.LineStyle{Color: hatchInk, Width: vg.Points(0.35)}, c.ClipLinesXY(hatchLines(x0, x1, y0, y1, vg.Points(1.6))...)...)
		}
		if it.outline {
			c.StrokeLines(draw.LineStyle{Color: barStroke, Width: vg.Points(0.35)}, c.ClipLinesXY(append(pts, pts[0]))...)
		}
	}
}

func (b *boxes) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, it := range b.items {
		xmin, xmax = math.Min(xmin, math.Min(it.x0, it.x1)), math.Max(xmax, math.Max(it.x0, it.x1))
		ymin, ymax = math.Min(ymin, math.Min(it.y0, it.y1)), math.Max(ymax, math.Max(it.y0, it.y1))
	}
	return xmin, xmax, ymin, ymax
}

// hatchLines returns 45-degree segments spaced step apart that fill the rectangle.
func hatchLines(x0, x1, y0, y1, step vg.Length) [][]vg.Point {
	var out [][]vg.Point
	// Lines x = y + k for k from x0-y1 to x1-y0.
	for k := x0 - y1 + step/2; k < x1-y0; k += step {
		lo, hi := max(y0, x0-k), min(y1, x1-k)
		if lo < hi {
			out = append(out, []vg.Point{{X: lo + k, Y: lo}, {X: hi + k, Y: hi}})
		}
	}
	return out
}

// errBar is a vertical error bar at x from lo to hi, with caps half a cap wide (data units).
type errBar struct{ x, lo, hi, halfCap float64 }

type errBars []errBar

func (e errBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := draw.LineStyle{Color: color.Black, Width: vg.Points(0.6)}
	for _, b := range e {
		x, xl, xr := trX(b.x), trX(b.x-b.halfCap), trX(b.x+b.halfCap)
		lo, hi := trY(b.lo), trY(b.hi)
		c.StrokeLines(sty, c.ClipLinesXY([]vg.Point{{X: x, Y: lo}, {X: x, Y: hi}},
			[]vg.Point{{X: xl, Y: lo}, {X: xr, Y: lo}}, []vg.Point{{X: xl, Y: hi}, {X: xr, Y: hi}})...)
	}
}

func (e errBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, b := range e {
		xmin, xmax = math.Min(xmin, b.x), math.Max(xmax, b.x)
		ymin, ymax = math.Min(ymin, b.lo), math.Max(ymax, b.hi)
	}
	return xmin, xmax, ymin, ymax
}

// refLine is a horizontal (y) or vertical (x) reference line across the data area.
type refLine struct {
	value    float64
	vertical bool
	style    draw.LineStyle
}

func (r refLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	line := []vg.Point{{X: c.Min.X, Y: trY(r.value)}, {X: c.Max.X, Y: trY(r.value)}}
	if r.vertical {
		line = []vg.Point{{X: trX(r.value), Y: c.Min.Y}, {X: trX(r.value), Y: c.Max.Y}}
	}
	c.StrokeLines(r.style, c.ClipLinesXY(line)...)
}

// note is text placed at a data point, offset in points.
type note struct {
	x, y   float64
	dx, dy vg.Length
	text   string
	style  text.Style
}

type notes []note

func (n notes) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, it := range n {
		c.FillText(it.style, vg.Point{X: trX(it.x) + it.dx, Y: trY(it.y) + it.dy}, it.text)
	}
}

// ---- legend strip ------------------------------------------------------------------------

// legendEntry is a swatch and its label.
type legendEntry struct {
	label  string
	swatch func(c draw.Canvas) // draws into c's rectangle
}

func fillSwatch(fill color.Color, hatch, outline bool) func(draw.Canvas) {
	return func(c draw.Canvas) {
		pts := []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}}
		if fill != nil {
			c.FillPolygon(fill, pts)
		}
		if hatch {
			c.StrokeLines(draw.LineStyle{Color: hatchInk, Width: vg.Points(0.35)}, hatchLines(c.Min.X, c.Max.X, c.Min.Y, c.Max.Y, vg.Points(1.6))...)
		}
		if outline {
			c.StrokeLines(draw.LineStyle{Color: barStroke, Width: vg.Points(0.35)}, append(pts, pts[0]))
		}
	}
}

func lineSwatch(line draw.LineStyle, glyph *draw.GlyphStyle) func(draw.Canvas) {
	return func(c draw.Canvas) {
		y := (c.Min.Y + c.Max.Y) / 2
		c.StrokeLine2(line, c.Min.X, y, c.Max.X, y)
		if glyph != nil {
			c.DrawGlyphNoClip(*glyph, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: y})
		}
	}
}

const (
	swatchW   = vg.Length(12)
	swatchH   = vg.Length(6)
	swatchGap = vg.Length(3)
	entryGap  = vg.Length(9)
	legendPad = vg.Length(3)
)

// legendRows lays entries out in centred rows no wider than width.
func legendRows(entries []legendEntry, width vg.Length) [][]legendEntry {
	sty := textStyle(legendSize)
	var rows [][]legendEntry
	var row []legendEntry
	var used vg.Length
	for _, e := range entries {
		w := swatchW + swatchGap + sty.Width(e.label)
		if len(row) > 0 && used+entryGap+w > width {
			rows = append(rows, row)
			row, used = nil, 0
		}
		if len(row) > 0 {
			used += entryGap
		}
		row = append(row, e)
		used += w
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

func legendLineHeight() vg.Length {
	return textStyle(legendSize).Height("Mg") + 2
}

// legendHeight is the height of the strip drawLegend needs for entries at width.
func legendHeight(entries []legendEntry, width vg.Length) vg.Length {
	if len(entries) == 0 {
		return 0
	}
	return vg.Length(len(legendRows(entries, width-2*legendPad)))*legendLineHeight() + 2*legendPad
}

// drawLegend draws entries in rows centred in c.
func drawLegend(c draw.Canvas, entries []legendEntry) {
	sty := textStyle(legendSize)
	sty.YAlign = draw.YCenter
	rows := legendRows(entries, c.Size().X-2*legendPad)
	lh := legendLineHeight()
	y := c.Max.Y - legendPad - lh/2
	for _, row := range rows {
		var width vg.Length
		for i, e := range row {
			if i > 0 {
				width += entryGap
			}
			width += swatchW + swatchGap + sty.Width(e.label)
		}
		x := c.Min.X + (c.Size().X-width)/2
		for _, e := range row {
			sw := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: y - swatchH/2}, Max: vg.Point{X: x + swatchW, Y: y + swatchH/2}}}
			e.swatch(sw)
			x += swatchW + swatchGap
			c.FillText(sty, vg.Point{X: x, Y: y}, e.label)
			x += sty.Width(e.label) + entryGap
		}
		y -= lh
	}
}

// ---- caption -----------------------------------------------------------------------------

// captionLines wraps each paragraph of caption at spaces into lines no wider than width (a
// word wider than width gets a line of its own).
func captionLines(caption []string, width vg.Length) []string {
	sty := textStyle(noteSize)
	var lines []string
	for _, para := range caption {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && sty.Width(line+" "+w) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

func captionLineHeight() vg.Length {
	return textStyle(noteSize).Height("Mg") + 1.5
}

// captionHeight is the height of the strip drawCaption needs for caption at width.
func captionHeight(caption []string, width vg.Length) vg.Length {
	n := len(captionLines(caption, width-2*legendPad))
	if n == 0 {
		return 0
	}
	return vg.Length(n)*captionLineHeight() + 2*legendPad
}

// drawCaption draws caption's lines left-aligned in c, from its top.
func drawCaption(c draw.Canvas, caption []string) {
	sty := textStyle(noteSize)
	sty.YAlign = draw.YTop
	y := c.Max.Y - legendPad
	for _, line := range captionLines(caption, c.Size().X-2*legendPad) {
		c.FillText(sty, vg.Point{X: c.Min.X + legendPad, Y: y}, line)
		y -= captionLineHeight()
	}
}

// glyphSwatch is a legend swatch of a glyph alone.
func glyphSwatch(glyph draw.GlyphStyle) func(draw.Canvas) {
	return func(c draw.Canvas) {
		c.DrawGlyphNoClip(glyph, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: (c.Min.Y + c.Max.Y) / 2})
	}
}
