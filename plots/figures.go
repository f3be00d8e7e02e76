package plots

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Each figure function turns prepared data into a canvasFigure, or returns the reason it has
// nothing to draw.

const (
	groupWidth = 0.8 // of a bar group, in x units (one unit per group)
	tilePad    = vg.Length(6)
)

// wide reports whether the figure is wide enough to put panels side by side.
func wide(opt Options) bool { return opt.Width >= 6*vg.Inch }

// drawGrid draws grid (rows of plots; nil leaves a tile empty) into c with aligned data areas
// and returns each plot's canvas. Panel titles are drawn at one height above each row's data
// areas (gonum/plot draws them at the top of the tile, which Align moves by the overhang of
// the top tick label): centred, or left-aligned where the title's XAlign is draw.XLeft.
func drawGrid(c draw.Canvas, grid [][]*plot.Plot, padY vg.Length) [][]draw.Canvas {
	type title struct {
		text string
		sty  text.Style
	}
	titles := map[*plot.Plot]title{}
	for _, row := range grid {
		for _, p := range row {
			if p != nil && p.Title.Text != "" {
				titles[p] = title{p.Title.Text, p.Title.TextStyle}
				p.Title.Text = " "
				p.Title.Padding = titleGap
			}
		}
	}
	tiles := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: 2 * tilePad, PadY: padY,
		PadTop: 1, PadBottom: 1, PadLeft: 1, PadRight: tilePad}
	cs := plot.Align(grid, tiles, c)
	for i, row := range grid {
		for j, p := range row {
			if p == nil {
				continue
			}
			p.Draw(cs[i][j])
			t, ok := titles[p]
			if !ok {
				continue
			}
			dc := p.DataCanvas(cs[i][j])
			sty := t.sty
			pt := vg.Point{X: dc.Center().X, Y: dc.Max.Y + titleGap - 1.5}
			if sty.XAlign == draw.XLeft {
				pt.X = dc.Min.X
			} else {
				sty.XAlign = draw.XCenter
			}
			sty.YAlign = draw.YBottom
			c.FillText(sty, pt, t.text)
			p.Title.Text = t.text // leave the plot as it was given
		}
	}
	return cs
}

// titleGap separates a panel title from the data area: room for the top tick label's
// overhang and a little air.
const titleGap = tickSize/2 + 3

// horizontalGrid adds light horizontal grid lines to p.
func horizontalGrid(p *plot.Plot) {
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	g.Horizontal = draw.LineStyle{Color: gridGrey, Width: vg.Points(0.4)}
	p.Add(g)
}

// barGroup returns the x centre of bar i of n in group g.
func barX(g, i, n int) float64 {
	w := groupWidth / float64(n)
	return float64(g) - groupWidth/2 + w*(float64(i)+0.5)
}

// hasSpread reports whether st deserves an error bar: several values that differ.
func hasSpread(st Stat, spread Spread) bool {
	lo, hi := st.Range(spread)
	return st.N > 1 && hi > lo
}

// seedCounts collects how many seeds stand behind a figure's error bars, for its legend.
type seedCounts struct{ lo, hi int }

// add counts st when it deserves an error bar (see hasSpread), and reports whether it does.
func (c *seedCounts) add(st Stat, spread Spread) bool {
	if !hasSpread(st, spread) {
		return false
	}
	if c.lo == 0 || st.N < c.lo {
		c.lo = st.N
	}
	c.hi = max(c.hi, st.N)
	return true
}

// any reports whether any error bar was counted.
func (c seedCounts) any() bool { return c.hi > 0 }

// label names the error bars and the seeds behind them: "min–max over 5 seeds", or "over
// 3–5 seeds" where the bars rest on different numbers.
func (c seedCounts) label(s Spread) string {
	n := strconv.Itoa(c.lo)
	if c.hi != c.lo {
		n += "–" + strconv.Itoa(c.hi)
	}
	if s == SpreadStd {
		return "±1 std over " + n + " seeds"
	}
	return "min–max over " + n + " seeds"
}

func errSwatch(c draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	sty := draw.LineStyle{Color: color.Black, Width: vg.Points(0.6)}
	c.StrokeLine2(sty, x, c.Min.Y-1, x, c.Max.Y+1)
	c.StrokeLine2(sty, x-2, c.Min.Y-1, x+2, c.Min.Y-1)
	c.StrokeLine2(sty, x-2, c.Max.Y+1, x+2, c.Max.Y+1)
}

// shortNames drops the longest "-"-separated prefix and suffix that all names share, so that
// "mmlu-pro-4xa100" and "gpqa-4xa100" read "mmlu-pro" and "gpqa".
func shortNames(names []string) []string {
	if len(names) < 2 {
		return names
	}
	parts := make([][]string, len(names))
	for i, n := range names {
		parts[i] = strings.Split(n, "-")
	}
	common := func(at func(p []string, k int) string) int {
		k := 0
		for {
			for _, p := range parts {
				if k >= len(p)-1 || at(p, k) != at(parts[0], k) {
					return k
				}
			}
			k++
		}
	}
	pre := common(func(p []string, k int) string { return p[k] })
	suf := common(func(p []string, k int) string { return p[len(p)-1-k] })
	out := make([]string, len(names))
	for i, p := range parts {
		if pre+suf >= len(p) {
			return names
		}
		out[i] = strings.Join(p[pre:len(p)-suf], "-")
	}
	return out
}

// ---- 1. speedup --------------------------------------------------------------------------

func speedupFigure(t SpeedupTable, opt Options) (*canvasFigure, string) {
	if len(t.Groups) == 0 {
		return nil, "no summary rows"
	}
	var legend []legendEntry
	var seeds seedCounts
	for pi, p := range t.Policies {
		label := p
		if p == t.Baseline {
			label += " (baseline)"
		}
		legend = append(legend, legendEntry{label, fillSwatch(seriesColour(pi), false, true)})
		for s := range numStages {
			for g := range t.Groups {
				seeds.add(t.Cells[s][g][pi], opt.Spread)
			}
		}
	}
	if seeds.any() {
		legend = append(legend, legendEntry{seeds.label(opt.Spread), errSwatch})
	}
	groupNames := make([]string, len(t.Groups))
	for i, g := range t.Groups {
		groupNames[i] = g.String()
	}
	groupNames = shortNames(groupNames)

	// panel draws the bars of cells[group][policy] at groups named by names.
	panel := func(title string, names []string, cell func(g, p int) Stat) *plot.Plot {
		p := newPanel("", "speedup (×)")
		p.Title.Text = title
		horizontalGrid(p)
		p.Add(refLine{value: 1, style: draw.LineStyle{Color: refGrey, Width: vg.Points(0.6), Dashes: []vg.Length{vg.Points(2), vg.Points(1.5)}}})
		bars := &boxes{}
		var errs errBars
		top := 1.0
		for g := range names {
			for pi := range t.Policies {
				st := cell(g, pi)
				if st.N == 0 {
					continue
				}
				x, w := barX(g, pi, len(t.Policies)), groupWidth/float64(len(t.Policies))
				bars.items = append(bars.items, box{x0: x - w/2, x1: x + w/2, y0: 0, y1: st.Mean, fill: seriesColour(pi), outline: true})
				top = math.Max(top, st.Mean)
				if hasSpread(st, opt.Spread) {
					lo, hi := st.Range(opt.Spread)
					errs = append(errs, errBar{x: x, lo: lo, hi: hi, halfCap: w / 4})
					top = math.Max(top, hi)
				}
			}
		}
		p.Add(bars, errs)
		nominalX(p, names...)
		p.X.Padding = 0
		p.Y.Min, p.Y.Max = 0, top*1.08
		return p
	}

	f := &canvasFigure{width: opt.Width, legend: legend}
	if len(t.Groups) == 1 {
		p := panel("", StageNames[:], func(g, pi int) Stat { return t.Cells[g][0][pi] })
		p.X.Label.Text = "stage of " + t.Groups[0].String()
		f.panelHeight = 1.9 * vg.Inch
		f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{p}}, 0) }
		return f, ""
	}
	var ps []*plot.Plot
	titles := [numStages]string{"expert stage", "aggregator stage", "end-to-end"}
	for s := range numStages {
		ps = append(ps, panel(titles[s], groupNames, func(g, pi int) Stat { return t.Cells[s][g][pi] }))
	}
	if wide(opt) {
		f.panelHeight = 2 * vg.Inch
		f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{ps}, 0) }
	} else {
		f.panelHeight = 3.6 * vg.Inch
		f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{ps[0]}, {ps[1]}, {ps[2]}}, tilePad) }
	}
	return f, ""
}

// ---- 2. GPU timeline ---------------------------------------------------------------------

func timelineFigure(tl Timeline, summary []results.SummaryRow, colours map[string]color.Color, opt Options) (*canvasFigure, string) {
	if len(tl.Policies) == 0 {
		return nil, "no workers.csv rows"
	}
	var legend []legendEntry
	for _, m := range tl.Models {
		legend = append(legend, legendEntry{m, fillSwatch(colours[m], false, false)})
	}
	legend = append(legend,
		legendEntry{"model load", fillSwatch(color.White, true, true)},
		legendEntry{"idle", fillSwatch(idleGrey, false, false)})
	stageEnd := func(policy string) float64 {
		for _, r := range summary {
			if r.Policy == policy {
				return r.ExpertStageS
			}
		}
		return math.NaN()
	}
	endLine := draw.LineStyle{Color: color.Black, Width: vg.Points(0.7), Dashes: []vg.Length{vg.Points(2), vg.Points(1.5)}}
	hasEnd := false

	var grid [][]*plot.Plot
	lanes := 0
	for i, tp := range tl.Policies {
		p := newPanel("time (s)", "")
		p.Title.Text = policyTitle(tp)
		p.Title.TextStyle.Font.Size = tickSize
		p.Title.TextStyle.XAlign = draw.XLeft
		if i < len(tl.Policies)-1 {
			hideXTicks(p)
		}
		names := make([]string, len(tp.Lanes))
		idle, busy, loads := &boxes{}, &boxes{}, &boxes{minWidth: vg.Points(1.2)}
		for li, l := range tp.Lanes {
			y := float64(len(tp.Lanes) - 1 - li) // w0 on top
			names[len(tp.Lanes)-1-li] = fmt.Sprintf("w%d", l.Worker)
			for _, iv := range l.Intervals {
				b := box{x0: iv.StartS, x1: iv.EndS, y0: y - 0.38, y1: y + 0.38}
				switch iv.Kind {
				case "busy":
					b.fill = colours[iv.Model]
					busy.items = append(busy.items, b)
				case "load":
					b.fill, b.hatch, b.outline = colours[iv.Model], true, true
					loads.items = append(loads.items, b)
				default:
					b.fill = idleGrey
					idle.items = append(idle.items, b)
				}
			}
		}
		lanes += len(tp.Lanes)
		p.Add(idle, busy, loads)
		if e := stageEnd(tp.Policy); !math.IsNaN(e) && e > 0 && e < tp.End {
			p.Add(refLine{value: e, vertical: true, style: endLine})
			hasEnd = true
		}
		ticks := make([]plot.Tick, len(names))
		for k, n := range names {
			ticks[k] = plot.Tick{Value: float64(k), Label: n}
		}
		p.Y.Tick.Marker = plot.ConstantTicks(ticks)
		p.Y.Tick.Length = 0
		p.Y.Padding = 0
		p.Y.Min, p.Y.Max = -0.5, float64(len(names))-0.5
		p.X.Min, p.X.Max = 0, tl.End
		p.X.Padding = 0
		grid = append(grid, []*plot.Plot{p})
	}
	if hasEnd {
		legend = append(legend, legendEntry{"end of expert stage", lineSwatch(endLine, nil)})
	}
	laneH := vg.Points(8)
	if lanes > 32 {
		laneH = vg.Points(5)
	}
	f := &canvasFigure{width: opt.Width, legend: legend}
	titleH := textStyle(tickSize).Height("Mg") + 2
	f.panelHeight = vg.Length(lanes)*laneH + vg.Length(len(tl.Policies))*(titleH+titleGap) + 26
	f.panels = func(c draw.Canvas) { drawGrid(c, grid, 3) }
	return f, ""
}

func policyTitle(tp TimelinePolicy) string {
	busy := 0.0
	for _, l := range tp.Lanes {
		busy += l.Busy
	}
	if tp.End <= 0 {
		return tp.Policy
	}
	return fmt.Sprintf("%s: makespan %s s, GPUs busy %.0f%%", tp.Policy, thousands(tp.End), 100*busy/(tp.End*float64(len(tp.Lanes))))
}

// thousands formats a number of seconds with no decimals and thousands separators.
func thousands(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ---- 3. output-length CDFs ---------------------------------------------------------------

// tokenTicks labels a log axis at powers of ten as 1, 10, 100, 1k, 10k, ...
type tokenTicks struct{}

func (tokenTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.LogTicks{}).Ticks(lo, hi) {
		if t.Label != "" {
			t.Label = shortCount(t.Value)
		}
		out = append(out, t)
	}
	return out
}

func shortCount(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func outputLengthFigure(cdfs []LengthCDF, colours map[string]color.Color, opt Options) (*canvasFigure, string) {
	if len(cdfs) == 0 {
		return nil, "no calls.csv rows with output tokens"
	}
	p := newPanel("output length (tokens, log scale)", "CDF (fraction of calls)")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = tokenTicks{}
	horizontalGrid(p)
	var legend []legendEntry
	xmin, xmax := math.Inf(1), 0.0
	for _, d := range cdfs {
		xys := make(plotter.XYs, 0, 2*len(d.X)+1)
		xys = append(xys, plotter.XY{X: d.X[0], Y: 0})
		prev := 0.0
		for i, x := range d.X {
			if i > 0 {
				xys = append(xys, plotter.XY{X: x, Y: prev})
			}
			xys = append(xys, plotter.XY{X: x, Y: d.P[i]})
			prev = d.P[i]
		}
		ls := draw.LineStyle{Color: colours[d.Model], Width: vg.Points(1.1)}
		label := d.Model
		if d.Layer > 0 {
			ls.Dashes = dashPatterns[min(d.Layer, len(dashPatterns)-1)]
			label += " (" + d.Role
			if d.Layer > 1 {
				label += fmt.Sprintf(" L%d", d.Layer)
			}
			label += ")"
		}
		p.Add(&plotter.Line{XYs: xys, LineStyle: ls})
		legend = append(legend, legendEntry{label, lineSwatch(ls, nil)})
		xmin, xmax = math.Min(xmin, d.X[0]), math.Max(xmax, d.X[len(d.X)-1])
	}
	p.X.Min = math.Pow(10, math.Floor(math.Log10(xmin)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(xmax)))
	if p.X.Max <= p.X.Min {
		p.X.Max = p.X.Min * 10
	}
	p.Y.Min, p.Y.Max = 0, 1
	f := &canvasFigure{width: opt.Width, legend: legend, panelHeight: 2.1 * vg.Inch}
	if wide(opt) {
		f.panelHeight = 2.4 * vg.Inch
	}
	f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{p}}, 0) }
	return f, ""
}

// ---- 4. simulated vs measured ------------------------------------------------------------

func simVsReplayFigure(pairs []SimVsReplayPair, opt Options) (*canvasFigure, string) {
	if len(pairs) == 0 {
		return nil, "no replay rows: the summaries hold no (experiment, policy) run in both mode=sim and mode=replay"
	}
	sv := newSimVsReplay(pairs, opt)
	var grid [][]*plot.Plot
	var baselineNotes []string
	for gi, g := range sv.groups {
		mk, sp, note := sv.panels(gi, g)
		if note != "" {
			baselineNotes = append(baselineNotes, note)
		}
		if sv.side {
			grid = append(grid, []*plot.Plot{mk, sp})
		} else {
			grid = append(grid, []*plot.Plot{mk}, []*plot.Plot{sp})
		}
	}
	f := &canvasFigure{width: opt.Width, legend: sv.legend, caption: sv.caption(baselineNotes)}
	if sv.side {
		f.panelHeight = vg.Length(len(grid)) * 1.9 * vg.Inch
	} else {
		f.panelHeight = vg.Length(len(grid)) * 1.7 * vg.Inch
	}
	f.panels = func(c draw.Canvas) { drawGrid(c, grid, tilePad) }
	return f, ""
}

// simVsReplay draws the sim-vs-replay figure: one row of panels per experiment and setup
// measured, the makespans then the speedups.
type simVsReplay struct {
	pairs                      []SimVsReplayPair
	opt                        Options
	groups                     []simVsReplayGroup
	titles                     []string
	legend                     []legendEntry
	failed, simFailed, partial int
	side                       bool // the two panels side by side, not one above the other
	panelW                     vg.Length
	label, vertical            draw.TextStyle
}

// simVsReplayGroup is the pairs of one experiment measured on one setup.
type simVsReplayGroup struct {
	exp   string
	setup Setup
}

var simColour, replayColour = OkabeIto[0], OkabeIto[1]

func newSimVsReplay(pairs []SimVsReplayPair, opt Options) *simVsReplay {
	sv := &simVsReplay{pairs: pairs, opt: opt, side: wide(opt), panelW: opt.Width}
	sv.legend = []legendEntry{
		{"simulated", fillSwatch(simColour, false, true)},
		{"measured (replay)", fillSwatch(replayColour, true, true)},
	}
	var seeds seedCounts
	for _, p := range pairs {
		for _, st := range []Stat{p.Sim, p.Replay, p.SimSpeedup, p.ReplaySpeedup} {
			seeds.add(st, opt.Spread)
		}
		sv.failed, sv.partial = sv.failed+p.Failed, sv.partial+p.Partial
	}
	for _, p := range distinct(pairs, func(p SimVsReplayPair) [2]string { return [2]string{p.Experiment, p.Policy} }) {
		for _, q := range pairs {
			if q.Experiment == p[0] && q.Policy == p[1] {
				sv.simFailed += q.SimFailed // the same in every setup's pair
				break
			}
		}
	}
	if seeds.any() {
		sv.legend = append(sv.legend, legendEntry{seeds.label(opt.Spread), errSwatch})
	}
	sv.groups = distinct(pairs, func(p SimVsReplayPair) simVsReplayGroup { return simVsReplayGroup{p.Experiment, p.Setup} })
	sv.titles = make([]string, len(sv.groups))
	for i, g := range sv.groups {
		sv.titles[i] = g.exp
		n := 0
		for _, h := range sv.groups {
			if h.exp == g.exp {
				n++
			}
		}
		if n > 1 { // replayed on several setups: tell them apart
			sv.titles[i] += " (" + cmp.Or(g.setup.Engine, g.setup.Hardware, "setup "+strconv.Itoa(i+1)) + ")"
		}
	}
	if sv.side {
		sv.panelW /= 2
	}
	sv.label = textStyle(noteSize)
	sv.label.XAlign = draw.XCenter
	sv.vertical = textStyle(noteSize)
	sv.vertical.Rotation, sv.vertical.XAlign, sv.vertical.YAlign = math.Pi/2, draw.XLeft, draw.YCenter
	return sv
}

// bars draws per pair the simulated and measured value of stat, the text above the pair and,
// in place of a missing bar, why it is missing; it returns the top of the drawing.
func (sv *simVsReplay) bars(p *plot.Plot, ps []SimVsReplayPair, stat func(SimVsReplayPair) [2]Stat, above func(SimVsReplayPair) string, why func(SimVsReplayPair, int) string) float64 {
	bs := &boxes{}
	var errs errBars
	var texts notes
	top := 0.0
	for g, pr := range ps {
		peak := 0.0
		for i, st := range stat(pr) {
			x, w := barX(g, i, 2), groupWidth/2
			if st.N == 0 {
				texts = append(texts, note{x: x, y: 0, dy: 2, text: why(pr, i), style: sv.vertical})
				continue
			}
			bs.items = append(bs.items, box{x0: x - w/2, x1: x + w/2, y0: 0, y1: st.Mean,
				fill: []color.Color{simColour, replayColour}[i], hatch: i == 1, outline: true})
			peak = math.Max(peak, st.Mean)
			if hasSpread(st, sv.opt.Spread) {
				lo, hi := st.Range(sv.opt.Spread)
				errs = append(errs, errBar{x: x, lo: lo, hi: hi, halfCap: w / 4})
				peak = math.Max(peak, hi)
			}
		}
		if t := above(pr); t != "" {
			texts = append(texts, note{x: float64(g), y: peak, dy: 2, text: t, style: sv.label})
		}
		top = math.Max(top, peak)
	}
	p.Add(bs, errs, texts)
	return top
}

// star marks a pair measured over part of the queries.
func star(pr SimVsReplayPair) string {
	if pr.Partial > 0 {
		return "*"
	}
	return ""
}

// panels draws group gi's makespan and speedup panels, and says when the two modes' speedups
// are over different baselines.
func (sv *simVsReplay) panels(gi int, g simVsReplayGroup) (mk, sp *plot.Plot, baselineNote string) {
	var ps []SimVsReplayPair
	var names []string
	for _, pr := range sv.pairs {
		if (simVsReplayGroup{pr.Experiment, pr.Setup}) == g {
			ps = append(ps, pr)
			names = append(names, pr.Policy)
		}
	}
	mk = newPanel("", "end-to-end makespan (s)")
	if len(sv.groups) > 1 {
		mk.Title.Text = sv.titles[gi]
		mk.Title.TextStyle.XAlign = draw.XLeft
	}
	horizontalGrid(mk)
	top := sv.bars(mk, ps, func(pr SimVsReplayPair) [2]Stat { return [2]Stat{pr.Sim, pr.Replay} },
		func(pr SimVsReplayPair) string {
			if math.IsNaN(pr.ErrorPct) {
				return ""
			}
			return fmt.Sprintf("%+.1f%%", pr.ErrorPct) + star(pr)
		},
		func(SimVsReplayPair, int) string { return "failed" })
	if top <= 0 {
		top = 1 // nothing measured or simulated: an empty axis
	}
	mk.Y.Min, mk.Y.Max = 0, top*1.15

	simBase, replayBase := ps[0].SimBaseline, ps[0].ReplayBaseline
	if simBase != replayBase {
		baselineNote = fmt.Sprintf("%s: the simulated speedups are over %s, the measured ones over %s.", sv.titles[gi], simBase, replayBase)
	}
	// Short enough to stand beside the panel without running into the caption; the baseline's
	// bar, at 1, names the policy it is over.
	sp = newPanel("", "e2e speedup (×)")
	horizontalGrid(sp)
	sp.Add(refLine{value: 1, style: draw.LineStyle{Color: refGrey, Width: vg.Points(0.6), Dashes: []vg.Length{vg.Points(2), vg.Points(1.5)}}})
	top = sv.bars(sp, ps, func(pr SimVsReplayPair) [2]Stat { return [2]Stat{pr.SimSpeedup, pr.ReplaySpeedup} },
		func(pr SimVsReplayPair) string {
			if math.IsNaN(pr.SpeedupDiff) || pr.Policy == pr.SimBaseline && pr.Policy == pr.ReplayBaseline {
				return "" // the baseline's speedups are 1 by definition
			}
			return fmt.Sprintf("%+.2f×", pr.SpeedupDiff) + star(pr)
		},
		func(pr SimVsReplayPair, i int) string {
			if [2]Stat{pr.Sim, pr.Replay}[i].N == 0 {
				return "failed"
			}
			return "n/a"
		})
	sp.Y.Min, sp.Y.Max = 0, math.Max(top, 1)*1.15
	sp.Y.Tick.Marker = roundTicks{}
	for _, p := range []*plot.Plot{mk, sp} {
		nominalX(p, names...)
		rotateIfCrowded(p, names, sv.panelW)
		p.X.Padding = 0
	}
	return mk, sp, baselineNote
}

// caption says what was measured, what the numbers above the bars are, and what was left out.
func (sv *simVsReplay) caption(baselineNotes []string) []string {
	var caption []string
	if setups := distinct(sv.groups, func(g simVsReplayGroup) Setup { return g.setup }); len(setups) == 1 {
		caption = append(caption, "Measured on "+setupText(setups[0])+".")
	} else {
		for i, g := range sv.groups {
			caption = append(caption, sv.titles[i]+": measured on "+setupText(g.setup)+".")
		}
	}
	caption = append(caption, "Above the bars: the simulator's makespan error, (simulated - measured) / measured, and the measured speedup less the simulated one.")
	caption = append(caption, baselineNotes...)
	if sv.partial > 0 {
		caption = append(caption, fmt.Sprintf("* Measured over the queries that completed under every policy (status partial: %s).", runs(sv.partial, "replay")))
	}
	if sv.failed+sv.simFailed > 0 {
		var left []string
		if sv.failed > 0 {
			left = append(left, runs(sv.failed, "replay"))
		}
		if sv.simFailed > 0 {
			left = append(left, runs(sv.simFailed, "simulated"))
		}
		caption = append(caption, "Left out: "+strings.Join(left, " and ")+" whose calls failed (status failed).")
	}
	return caption
}

// roundTicks labels an axis at multiples of a round step (1, 2, 2.5 or 5 times a power of
// ten) that gives three to five labels, where gonum/plot's default may label only the ends.
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / 4
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*step >= raw {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for k := math.Ceil(lo / step); k*step <= hi+step*1e-9; k++ {
		v := k * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	return ticks
}

// setupText is what follows "measured on" in a caption.
func setupText(s Setup) string {
	if t := s.String(); t != "" {
		return t
	}
	return "an engine and hardware that no run.json names"
}

// runs counts runs of a kind: "1 replay run", "3 simulated runs".
func runs(n int, kind string) string {
	if n == 1 {
		return "1 " + kind + " run"
	}
	return fmt.Sprintf("%d %s runs", n, kind)
}

// rotateIfCrowded turns p's X tick labels by 30 degrees when they would not fit side by side.
func rotateIfCrowded(p *plot.Plot, names []string, width vg.Length) {
	var total vg.Length
	for _, n := range names {
		total += p.X.Tick.Label.Width(n) + 4
	}
	if total > 0.8*width {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
}

// ---- 5. threshold trade-off --------------------------------------------------------------

// thresholdAxis maps thresholds to x positions: finite ones as themselves, +Inf ("never
// skip") to a slot right of the largest finite one.
type thresholdAxis struct {
	finite []float64 // distinct, increasing
	never  float64   // x of +Inf
	lo, hi float64   // axis range
}

func newThresholdAxis(series []TradeoffSeries) thresholdAxis {
	var a thresholdAxis
	for _, s := range series {
		for _, pt := range s.Points {
			if !math.IsInf(pt.Threshold, 0) && !slices.Contains(a.finite, pt.Threshold) {
				a.finite = append(a.finite, pt.Threshold)
			}
		}
	}
	slices.Sort(a.finite)
	if len(a.finite) == 0 {
		a.never, a.lo, a.hi = 1, 0.5, 1.5
		return a
	}
	lo, hi := a.finite[0], a.finite[len(a.finite)-1]
	span := hi - lo
	if span == 0 {
		span = math.Max(math.Abs(hi), 1) * 0.5
	}
	a.never = hi + 0.3*span
	a.lo, a.hi = lo-0.1*span, a.never+0.1*span
	return a
}

func (a thresholdAxis) x(t float64) float64 {
	if math.IsInf(t, 1) {
		return a.never
	}
	return t
}

func (a thresholdAxis) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if len(a.finite) <= 6 {
		for _, t := range a.finite {
			ticks = append(ticks, plot.Tick{Value: t, Label: strconv.FormatFloat(t, 'g', 3, 64)})
		}
	} else if len(a.finite) > 0 {
		for _, t := range (plot.DefaultTicks{}).Ticks(a.finite[0], a.finite[len(a.finite)-1]) {
			if t.Value >= a.finite[0] && t.Value <= a.finite[len(a.finite)-1] {
				ticks = append(ticks, t)
			}
		}
	}
	return append(ticks, plot.Tick{Value: a.never, Label: "never"})
}

func tradeoffFigure(series []TradeoffSeries, opt Options) (*canvasFigure, string) {
	if len(series) == 0 {
		return nil, "no summary rows with a threshold" + familyNote(opt.Family)
	}
	ax := newThresholdAxis(series)
	names := make([]string, len(series))
	for i, s := range series {
		names[i] = s.Group.String()
	}
	names = shortNames(names)
	skipP := newPanel("", "aggregator skip rate (%)")
	accP := newPanel("confidence threshold T", "accuracy (%)")
	hideXTicks(skipP)
	var legend []legendEntry
	var seeds seedCounts
	accLo, accHi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		ls := draw.LineStyle{Color: seriesColour(i), Width: vg.Points(1.1)}
		dotted := ls
		dotted.Dashes = []vg.Length{vg.Points(1), vg.Points(1.5)}
		glyph := draw.GlyphStyle{Color: seriesColour(i), Radius: vg.Points(2), Shape: glyphShapes[i%len(glyphShapes)]}
		legend = append(legend, legendEntry{names[i], lineSwatch(ls, &glyph)})
		for pi, p := range []*plot.Plot{skipP, accP} {
			val := func(pt TradeoffPoint) Stat {
				if pi == 0 {
					return pt.SkipRate
				}
				return pt.Accuracy
			}
			var solid, tail plotter.XYs
			var errs errBars
			for _, pt := range s.Points {
				st := val(pt)
				xy := plotter.XY{X: ax.x(pt.Threshold), Y: 100 * st.Mean}
				if math.IsInf(pt.Threshold, 1) {
					if len(solid) > 0 {
						tail = append(tail, solid[len(solid)-1])
					}
					tail = append(tail, xy)
				} else {
					solid = append(solid, xy)
				}
				if seeds.add(st, opt.Spread) {
					lo, hi := st.Range(opt.Spread)
					errs = append(errs, errBar{x: xy.X, lo: 100 * lo, hi: 100 * hi, halfCap: (ax.hi - ax.lo) / 80})
				}
				if pi == 1 {
					lo, hi := st.Range(opt.Spread)
					accLo, accHi = math.Min(accLo, 100*math.Min(lo, st.Mean)), math.Max(accHi, 100*math.Max(hi, st.Mean))
				}
			}
			if len(solid) > 1 {
				p.Add(&plotter.Line{XYs: solid, LineStyle: ls})
			}
			if len(tail) > 1 {
				p.Add(&plotter.Line{XYs: tail, LineStyle: dotted})
			}
			pts := append(slices.Clone(solid), tail...)
			sc := &plotter.Scatter{XYs: pts, GlyphStyle: glyph}
			p.Add(errs, sc)
		}
	}
	if seeds.any() {
		legend = append(legend, legendEntry{seeds.label(opt.Spread), errSwatch})
	}
	for _, p := range []*plot.Plot{skipP, accP} {
		p.X.Min, p.X.Max = ax.lo, ax.hi
		p.X.Tick.Marker = ax
		horizontalGrid(p)
	}
	skipP.Y.Min, skipP.Y.Max = -5, 105 // room for markers at 0 and 100 % inside the axes
	pad := math.Max(1, (accHi-accLo)*0.15)
	accP.Y.Min, accP.Y.Max = math.Max(0, accLo-pad), math.Min(100, accHi+pad)
	f := &canvasFigure{width: opt.Width, legend: legend, panelHeight: 2.9 * vg.Inch}
	if wide(opt) {
		f.panelHeight = 2 * vg.Inch
		skipP.X.Label.Text = accP.X.Label.Text
		skipP.X.Tick.Label = accP.X.Tick.Label
		f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{skipP, accP}}, 0) }
	} else {
		f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{skipP}, {accP}}, 4) }
	}
	return f, ""
}

var glyphShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}

func familyNote(family string) string {
	if family == "" {
		return ""
	}
	return fmt.Sprintf(" in policy family %q", family)
}

// ---- 6. expert demand --------------------------------------------------------------------

func demandFigure(d Demand, colours map[string]color.Color, opt Options) (*canvasFigure, string) {
	if len(d.Models) == 0 {
		return nil, "no expert calls in calls.csv"
	}
	p := newPanel("", "expert calls")
	p.Title.Text = fmt.Sprintf("expert demand: max/min = %.1f×", d.Ratio)
	horizontalGrid(p)
	bars := &boxes{}
	var texts notes
	style := textStyle(noteSize)
	style.XAlign = draw.XCenter
	names := make([]string, len(d.Models))
	top := 0.0
	for i, m := range d.Models {
		names[i] = m.Model
		bars.items = append(bars.items, box{x0: float64(i) - 0.35, x1: float64(i) + 0.35, y0: 0, y1: float64(m.Calls), fill: colours[m.Model], outline: true})
		texts = append(texts, note{x: float64(i), y: float64(m.Calls), dy: 1.5, text: strconv.Itoa(m.Calls), style: style})
		top = math.Max(top, float64(m.Calls))
	}
	p.Add(bars, texts)
	nominalX(p, names...)
	rotateIfCrowded(p, names, opt.Width)
	p.X.Padding = 0
	p.Y.Min, p.Y.Max = 0, top*1.12
	f := &canvasFigure{width: opt.Width, panelHeight: 2 * vg.Inch}
	f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{p}}, 0) }
	return f, ""
}
