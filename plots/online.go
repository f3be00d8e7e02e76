package plots

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// RateColumn is the summary.csv column of a sweep over the arrival rate (see experiments.RunSweep).
const RateColumn = "workload.arrival_rate"

// readSweep reads the swept keys of a sweep's summary.csv (the columns before "point"), in
// row order: each row's arrival rate (nil when the file has no RateColumn, or "sweep." +
// RateColumn) and its point, the swept keys other than the seed as "key=value" joined by
// spaces, each key by its last dotted part (nil when the file is no sweep's or sweeps the
// seed only).
func readSweep(path string) (rates []float64, points []string, err error) {
	r, err := csvx.Open(path, csvx.Options{})
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	head := r.Header()
	rateCol := slices.Index(head, RateColumn)
	if rateCol < 0 {
		rateCol = slices.Index(head, "sweep."+RateColumn)
	}
	var keys []int
	if end := slices.Index(head, "point"); end > 0 {
		for i, k := range head[:end] {
			if k != "seed" && k != "sweep.seed" {
				keys = append(keys, i)
			}
		}
	}
	for r.Next() {
		rec := r.Fields()
		if rateCol >= 0 {
			v, err := strconv.ParseFloat(rec[rateCol], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) {
				r.Failf(head[rateCol], "%q is not an arrival rate", rec[rateCol])
			}
			rates = append(rates, v)
		}
		if len(keys) > 0 {
			var parts []string
			for _, i := range keys {
				k := head[i]
				k = k[strings.LastIndex(k, ".")+1:]
				parts = append(parts, k+"="+rec[i])
			}
			points = append(points, strings.Join(parts, " "))
		}
	}
	if err := r.Err(); err != nil {
		return nil, nil, err
	}
	return rates, points, nil
}

// LatencyCDF is the distribution of one policy's per-query end-to-end latencies.
type LatencyCDF struct {
	Policy string
	// X (seconds) and P are the CDF; P50 and P99 its median and 99th percentile.
	X, P     []float64
	P50, P99 float64
}

// LatencyCDFData returns each policy's latency CDF from queries.csv rows, in the order the
// policies first appear; nil unless some query arrived after time 0 (an online run).
func LatencyCDFData(queries []results.QueryRow) []LatencyCDF {
	online := slices.ContainsFunc(queries, func(q results.QueryRow) bool { return q.ArrivalS > 0 })
	if !online {
		return nil
	}
	var out []LatencyCDF
	for _, p := range distinct(queries, func(q results.QueryRow) string { return q.Policy }) {
		var v []float64
		for _, q := range queries {
			if q.Policy == p {
				v = append(v, q.LatencyS)
			}
		}
		x, pr := CDF(v)
		out = append(out, LatencyCDF{Policy: p, X: x, P: pr, P50: quantile(v, 0.5), P99: quantile(v, 0.99)})
	}
	return out
}

// LoadPoint is a policy's latency at one arrival rate, over the seeds run there.
type LoadPoint struct {
	Rate          float64
	P50, P99, SLO Stat
	// Overloaded says the rate is at or above the cluster's capacity (the rows' overloaded
	// column).
	Overloaded bool
}

// LoadSeries is one policy's latency against load.
type LoadSeries struct {
	Group  Group
	Policy string
	Points []LoadPoint // by rate
	// Capacity is the cluster's capacity in queries per second (0 when the rows give none),
	// and Window says the figures are over the steady-state window of each run.
	Capacity float64
	Window   bool
}

// LoadData groups summary rows with their arrival rates (rates[i] for rows[i]) into one
// series per experiment, mode and policy; rows of an offline batch (rate 0) are left out.
func LoadData(rows []results.SummaryRow, rates []float64) []LoadSeries {
	type key struct {
		g      Group
		policy string
	}
	var keys []key
	points := map[key]map[float64][]results.SummaryRow{}
	for i, r := range rows {
		if i >= len(rates) || rates[i] <= 0 {
			continue
		}
		k := key{groupOf(r), r.Policy}
		if points[k] == nil {
			points[k] = map[float64][]results.SummaryRow{}
			keys = append(keys, k)
		}
		points[k][rates[i]] = append(points[k][rates[i]], r)
	}
	var out []LoadSeries
	for _, k := range keys {
		s := LoadSeries{Group: k.g, Policy: k.policy}
		for rate, rs := range points[k] {
			var p50, p99, slo []float64
			over := false
			for _, r := range rs {
				med, tail, att := r.MedianE2ELS, r.P99E2ELS, r.SLOAttainment
				if w := r.Steady; w != nil {
					med, tail, att = w.MedianE2ELS, w.P99E2ELS, w.SLOAttainment
					s.Window, over = true, over || w.Overloaded
					s.Capacity = max(s.Capacity, w.CapacityQPS)
				}
				p50, p99 = append(p50, med), append(p99, tail)
				if !math.IsNaN(att) {
					slo = append(slo, att)
				}
			}
			s.Points = append(s.Points, LoadPoint{Rate: rate, P50: NewStat(p50...), P99: NewStat(p99...), SLO: NewStat(slo...), Overloaded: over})
		}
		slices.SortFunc(s.Points, func(a, b LoadPoint) int { return cmp.Compare(a.Rate, b.Rate) })
		if len(s.Points) > 1 {
			out = append(out, s)
		}
	}
	return out
}

// latencyCDFFigure draws each policy's per-query latency CDF.
func latencyCDFFigure(cdfs []LatencyCDF, opt Options) (*canvasFigure, string) {
	if len(cdfs) == 0 {
		return nil, "no queries.csv of an online run (every query arrived at time 0)"
	}
	p := newPanel("end-to-end latency per query (s)", "CDF (fraction of queries)")
	horizontalGrid(p)
	var legend []legendEntry
	for i, d := range cdfs {
		xys := make(plotter.XYs, 0, 2*len(d.X)+1)
		xys = append(xys, plotter.XY{X: 0, Y: 0})
		prev := 0.0
		for j, x := range d.X {
			xys = append(xys, plotter.XY{X: x, Y: prev}, plotter.XY{X: x, Y: d.P[j]})
			prev = d.P[j]
		}
		ls := draw.LineStyle{Color: seriesColour(i), Width: vg.Points(1.1), Dashes: dashPatterns[(i/len(OkabeIto))%len(dashPatterns)]}
		p.Add(&plotter.Line{XYs: xys, LineStyle: ls})
		legend = append(legend, legendEntry{fmt.Sprintf("%s (p50 %s s, p99 %s s)", d.Policy, thousands(d.P50), thousands(d.P99)), lineSwatch(ls, nil)})
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Min = 0
	p.X.Tick.Marker = secondsTicks{}
	f := &canvasFigure{width: opt.Width, legend: legend, panelHeight: 2.1 * vg.Inch}
	if wide(opt) {
		f.panelHeight = 2.4 * vg.Inch
	}
	f.panels = func(c draw.Canvas) { drawGrid(c, [][]*plot.Plot{{p}}, 0) }
	return f, ""
}

// loadFigure draws latency (p99 solid, p50 dashed) and SLO attainment against the arrival rate.
func loadFigure(series []LoadSeries, opt Options) (*canvasFigure, string) {
	if len(series) == 0 {
		return nil, "no sweep over workload.arrival_rate with two or more positive rates in summary.csv"
	}
	groups := distinct(series, func(s LoadSeries) Group { return s.Group })
	latP := newPanel("", "latency per query (s)")
	sloP := newPanel("arrival rate (queries/s)", "SLO attainment (%)")
	hideXTicks(latP)
	var legend []legendEntry
	hasSLO := false
	var seeds seedCounts
	overloaded := false
	for i, s := range series {
		name := s.Policy
		if len(groups) > 1 {
			name = s.Group.String() + ": " + s.Policy
		}
		solid := draw.LineStyle{Color: seriesColour(i), Width: vg.Points(1.1)}
		dashed := solid
		dashed.Dashes = dashPatterns[1]
		glyph := draw.GlyphStyle{Color: seriesColour(i), Radius: vg.Points(2), Shape: glyphShapes[i%len(glyphShapes)]}
		legend = append(legend, legendEntry{name, lineSwatch(solid, &glyph)})
		var p99, p50, slo plotter.XYs
		var errs99, errsSLO errBars
		for _, pt := range s.Points {
			p99 = append(p99, plotter.XY{X: pt.Rate, Y: pt.P99.Mean})
			p50 = append(p50, plotter.XY{X: pt.Rate, Y: pt.P50.Mean})
			if seeds.add(pt.P99, opt.Spread) {
				lo, hi := pt.P99.Range(opt.Spread)
				errs99 = append(errs99, errBar{x: pt.Rate, lo: lo, hi: hi, halfCap: pt.Rate / 40})
			}
			if pt.SLO.N > 0 {
				slo = append(slo, plotter.XY{X: pt.Rate, Y: 100 * pt.SLO.Mean})
				if seeds.add(pt.SLO, opt.Spread) {
					lo, hi := pt.SLO.Range(opt.Spread)
					errsSLO = append(errsSLO, errBar{x: pt.Rate, lo: 100 * lo, hi: 100 * hi, halfCap: pt.Rate / 40})
				}
			}
		}
		latP.Add(&plotter.Line{XYs: p99, LineStyle: solid}, &plotter.Line{XYs: p50, LineStyle: dashed}, errs99,
			&plotter.Scatter{XYs: p99, GlyphStyle: glyph})
		var over plotter.XYs
		for _, pt := range s.Points {
			if pt.Overloaded {
				over = append(over, plotter.XY{X: pt.Rate, Y: pt.P99.Mean})
			}
		}
		if len(over) > 0 {
			overloaded = true
			latP.Add(&plotter.Scatter{XYs: over, GlyphStyle: draw.GlyphStyle{Color: seriesColour(i), Radius: vg.Points(4.5), Shape: draw.RingGlyph{}}})
		}
		if len(slo) > 0 {
			hasSLO = true
			sloP.Add(&plotter.Line{XYs: slo, LineStyle: solid}, errsSLO, &plotter.Scatter{XYs: slo, GlyphStyle: glyph})
		}
	}
	what := "p99 (solid), p50 (dashed)"
	if series[0].Window {
		what += " over the steady-state window"
	}
	legend = append(legend, legendEntry{what, lineSwatch(draw.LineStyle{Color: refGrey, Width: vg.Points(1.1)}, nil)})
	if overloaded {
		legend = append(legend, legendEntry{"ringed: overloaded (rate >= capacity)", glyphSwatch(draw.GlyphStyle{Color: refGrey, Radius: vg.Points(4.5), Shape: draw.RingGlyph{}})})
	}
	if c := series[0].Capacity; c > 0 && len(groups) == 1 {
		line := draw.LineStyle{Color: refGrey, Width: vg.Points(0.8), Dashes: dashPatterns[2%len(dashPatterns)]}
		for _, p := range []*plot.Plot{latP, sloP} {
			p.Add(capacityLine{x: c, style: line})
		}
		legend = append(legend, legendEntry{fmt.Sprintf("capacity %s queries/s", strconv.FormatFloat(c, 'g', 3, 64)), lineSwatch(line, nil)})
	}
	if seeds.any() {
		legend = append(legend, legendEntry{seeds.label(opt.Spread), errSwatch})
	}
	rateAxes(series, latP, sloP)
	latP.Y.Min = 0
	latP.Y.Tick.Marker = secondsTicks{}
	sloP.Y.Min, sloP.Y.Max = -5, 105
	f := &canvasFigure{width: opt.Width, legend: legend, panelHeight: 2.1 * vg.Inch}
	rows := [][]*plot.Plot{{latP}}
	if hasSLO {
		f.panelHeight = 3.6 * vg.Inch
		rows = append(rows, []*plot.Plot{sloP})
	} else {
		latP.X.Label.Text = sloP.X.Label.Text
		latP.X.Tick.Label = sloP.X.Tick.Label
	}
	f.panels = func(c draw.Canvas) { drawGrid(c, rows, 4) }
	return f, ""
}

// rateAxes gives the panels a logarithmic x axis of arrival rates, ticked at every rate the
// series were run at, with a horizontal grid.
func rateAxes(series []LoadSeries, panels ...*plot.Plot) {
	var rates []float64
	for _, s := range series {
		for _, pt := range s.Points {
			if !slices.Contains(rates, pt.Rate) {
				rates = append(rates, pt.Rate)
			}
		}
	}
	slices.Sort(rates)
	ticks := make(plot.ConstantTicks, len(rates))
	for i, r := range rates {
		ticks[i] = plot.Tick{Value: r, Label: strconv.FormatFloat(r, 'g', 4, 64)}
	}
	for _, p := range panels {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = ticks
		p.X.Min, p.X.Max = rates[0]/1.15, rates[len(rates)-1]*1.15
		horizontalGrid(p)
	}
}

// secondsTicks labels a linear axis of seconds with thousands separators and no decimals.
type secondsTicks struct{}

func (secondsTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = thousands(ticks[i].Value)
		}
	}
	return ticks
}

// capacityLine is a vertical line across a panel at x.
type capacityLine struct {
	x     float64
	style draw.LineStyle
}

// Plot implements plot.Plotter.
func (l capacityLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(l.x)
	c.StrokeLine2(l.style, x, c.Min.Y, x, c.Max.Y)
}
