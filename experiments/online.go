package experiments

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/results"
)

// OnlinePolicies are the policies `mosaic online` compares when queries arrive over time: the
// deployments people run (round-robin's models pinned with FCFS queues, data-parallel,
// MOSAIC's plan for the expected mix), shortest-expected-job-first on that plan, the online
// policy (re-planning, work stealing) alone and with PLAS or ATLAS on top, and Autellix's
// PLAS and ATLAS on MOSAIC's plan.
func OnlinePolicies() []PolicySpec {
	return []PolicySpec{
		{Name: "round-robin"},
		{Name: "data-parallel"},
		{Name: "mosaic"},
		{Name: "mosaic", Label: "mosaic+sjf", Dispatch: "sjf"},
		{Name: "online"},
		{Name: "online", Label: "online+plas", Dispatch: "plas"},
		{Name: "online", Label: "online+atlas", Dispatch: "atlas"},
		{Name: "plas"},
		{Name: "atlas"},
	}
}

// ReplacePolicies makes the experiment compare ps instead of the policies its file lists; the
// file's [[policy]] keys no longer apply.
func (e *Experiment) ReplacePolicies(ps []PolicySpec) {
	e.Policies = ps
	e.ownPolicies = true
}

// fileHas reports whether the file gives key, leaving out the [[policy]] keys of a file whose
// policies were replaced.
func (e *Experiment) fileHas(key string) bool {
	if e.ownPolicies && (key == "policy" || strings.HasPrefix(key, "policy[")) {
		return false
	}
	return e.file.Has(key)
}

// OnlineLoads are `mosaic online`'s loads, as shares of the cluster's capacity: light, near
// saturation and overloaded.
var OnlineLoads = []float64{0.5, 0.9, 1.2}

// OnlineRow is one line of the online table: a policy at one load of one experiment, its
// figures over the steady-state window averaged over the seeds run there.
type OnlineRow struct {
	Experiment, Policy string
	// Load is the arrival rate as a share of the capacity (each seed's rate follows its own
	// workload's capacity); Rate and Capacity are the seeds' means (queries/s), and
	// Overloaded counts the seeds whose rate was at or above their capacity.
	Load, Rate, Capacity float64
	Overloaded           int
	Seeds                []uint64
	// The window's figures (seconds; shares), means over the seeds; Horizon is when the last
	// query arrived (seconds).
	Mean, P50, P99, TTFTP99, SLO, Goodput, Done, Horizon float64
}

// Falling reports whether the policy finished queries more than 10% slower than they arrived
// during the window: its queue grew, whatever the load against the capacity says.
func (o OnlineRow) Falling() bool { return o.Done < 0.9*o.Rate }

// OnlineRows gathers the online table's lines from the summary rows of online runs, by
// experiment, then load (to two decimals), then policy as they first appear.
func OnlineRows(rows []results.SummaryRow) ([]OnlineRow, error) {
	type key struct {
		exp, policy string
		load        float64
	}
	var keys []key
	acc := map[key][]results.SummaryRow{}
	for _, r := range rows {
		if r.Steady == nil {
			return nil, fmt.Errorf("experiment %s, policy %s: no steady state (an offline batch?)", r.Experiment, r.Policy)
		}
		k := key{r.Experiment, r.Policy, math.Round(100*r.Steady.Load) / 100}
		if acc[k] == nil {
			keys = append(keys, k)
		}
		acc[k] = append(acc[k], r)
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.exp, b.exp), cmp.Compare(a.load, b.load))
	})
	var out []OnlineRow
	for _, k := range keys {
		rs := acc[k]
		o := OnlineRow{Experiment: k.exp, Policy: k.policy, Load: k.load}
		n := float64(len(rs))
		for _, r := range rs {
			s := r.Steady
			o.Seeds = append(o.Seeds, r.Seed)
			o.Rate += s.ArrivalRate / n
			o.Capacity += s.CapacityQPS / n
			if s.Overloaded {
				o.Overloaded++
			}
			o.Mean += s.MeanE2ELS / n
			o.P50 += s.MedianE2ELS / n
			o.P99 += s.P99E2ELS / n
			o.TTFTP99 += s.P99TTFTS / n
			o.SLO += s.SLOAttainment / n
			o.Goodput += s.Goodput / n
			o.Done += s.Throughput / n
			o.Horizon += s.WindowEndS / n
		}
		out = append(out, o)
	}
	return out, nil
}

// WriteOnlineTable writes the online table in markdown: per experiment and load, each
// policy's steady-state figures, the best of each column in bold, and a † on the completion
// rate of a policy whose queue grew (OnlineRow.Falling).
func WriteOnlineTable(w io.Writer, rows []OnlineRow) error {
	fmt.Fprintln(w, "| experiment | load (rate) | policy | mean e2e (s) | p50 e2e (s) | p99 e2e (s) | p99 TTFT (s) | SLO met | goodput (q/s) | done (q/s) | seeds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].Experiment == rows[i].Experiment && rows[j].Load == rows[i].Load {
			j++
		}
		group := rows[i:j]
		best := func(f func(OnlineRow) float64, low bool) float64 {
			b := f(group[0])
			for _, r := range group[1:] {
				if v := f(r); low && v < b || !low && v > b {
					b = v
				}
			}
			return b
		}
		cell := func(r OnlineRow, f func(OnlineRow) float64, low bool, format string) string {
			v := f(r)
			if math.IsNaN(v) {
				return "-"
			}
			s := fmt.Sprintf(format, v)
			if v == best(f, low) && len(group) > 1 {
				s = "**" + s + "**"
			}
			return s
		}
		for k, r := range group {
			exp, load := "", ""
			if k == 0 {
				exp = r.Experiment
				load = fmt.Sprintf("%.2f (%.3g q/s for %s s)", r.Load, r.Rate, thousands(r.Horizon))
				if r.Overloaded > 0 {
					load += " overloaded"
				}
			}
			seeds := make([]string, len(r.Seeds))
			for i, s := range r.Seeds {
				seeds[i] = strconv.FormatUint(s, 10)
			}
			done := cell(r, func(o OnlineRow) float64 { return o.Done }, false, "%.3g")
			if r.Falling() {
				done += " †"
			}
			if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", exp, load, r.Policy,
				cell(r, func(o OnlineRow) float64 { return o.Mean }, true, "%.0f"),
				cell(r, func(o OnlineRow) float64 { return o.P50 }, true, "%.0f"),
				cell(r, func(o OnlineRow) float64 { return o.P99 }, true, "%.0f"),
				cell(r, func(o OnlineRow) float64 { return o.TTFTP99 }, true, "%.0f"),
				cell(r, func(o OnlineRow) float64 { return 100 * o.SLO }, false, "%.1f%%"),
				cell(r, func(o OnlineRow) float64 { return o.Goodput }, false, "%.3g"),
				done,
				strings.Join(seeds, ",")); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// thousands formats x rounded to a whole number with thousands separators.
func thousands(x float64) string {
	s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
