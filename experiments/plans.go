package experiments

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/solver"
)

// planner is a policy that planned its stages ahead (the mosaic policy).
type planner interface {
	Plans() []*placement.StagePlan
}

// StageCheck compares a stage plan's predicted per-worker finish times with the run's.
type StageCheck struct {
	Policy    string
	Layer     int
	Predicted []float64 // seconds from the start of the run
	Measured  []float64 // when the worker's last call of the stage ended (0: none)
}

// MaxErrorPct is the largest relative error over workers that served calls of the stage.
func (c StageCheck) MaxErrorPct() float64 {
	worst := 0.0
	for w := range c.Predicted {
		if c.Measured[w] > 0 && c.Predicted[w] > 0 {
			worst = max(worst, 100*abs(c.Predicted[w]-c.Measured[w])/c.Measured[w])
		}
	}
	return worst
}

// MakespanErrorPct is the error of the predicted stage end.
func (c StageCheck) MakespanErrorPct() float64 {
	p, m := maxF(c.Predicted), maxF(c.Measured)
	if m == 0 {
		return 0
	}
	return 100 * (p - m) / m
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func maxF(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// PlanChecks compares the stage plans of the run's planning policies with what the simulator
// measured.
func (run *Run) PlanChecks() []StageCheck {
	var out []StageCheck
	for i, p := range run.Policies {
		pl, ok := p.(planner)
		if !ok {
			continue
		}
		res := run.Results[i]
		ends := res.StageEnds()
		for _, sp := range pl.Plans() {
			if sp == nil || sp.Plan == nil || len(sp.Plan.WorkerTime) == 0 {
				continue
			}
			c := StageCheck{Policy: res.Policy, Layer: sp.Layer, Predicted: make([]float64, res.Workers), Measured: make([]float64, res.Workers)}
			for w, t := range sp.Plan.WorkerTime {
				c.Predicted[w] = sp.Start.Seconds() + t
			}
			if sp.Layer >= 0 && sp.Layer < len(ends) {
				for w, end := range ends[sp.Layer] {
					c.Measured[w] = end.Seconds()
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// WritePlanChecks prints predicted against simulated finish times per worker; layers is the
// depth of the workload's graphs.
func WritePlanChecks(w io.Writer, checks []StageCheck, layers int) error {
	for _, c := range checks {
		fmt.Fprintf(w, "%s %s, predicted vs simulated finish per worker (s):", c.Policy, StageName(c.Layer, layers))
		for i := range c.Predicted {
			if c.Measured[i] == 0 {
				fmt.Fprintf(w, "  w%d -", i)
				continue
			}
			fmt.Fprintf(w, "  w%d %.0f/%.0f", i, c.Predicted[i], c.Measured[i])
		}
		if _, err := fmt.Fprintf(w, "  | stage end error %+.1f%%, worst worker %.1f%%\n", c.MakespanErrorPct(), c.MaxErrorPct()); err != nil {
			return err
		}
	}
	return nil
}

// WriteWorkers prints the cluster's workers, one a line: the GPUs that form it (numbered
// group by group from 0, the order in which [replay] gpus maps them to CUDA devices), its GPU
// type, and whether it is a tensor-parallel group.
func (r *Resolved) WriteWorkers(w io.Writer) error {
	if _, err := fmt.Fprintln(w, "workers (GPUs numbered group by group):"); err != nil {
		return err
	}
	for wk := range r.NumWorkers() {
		g := r.Group(wk)
		gpus := r.GPUsOf(wk)
		ids := make([]string, len(gpus))
		for i, d := range gpus {
			ids[i] = strconv.Itoa(d)
		}
		which := "GPU " + ids[0]
		what := g.GPU.Name
		if g.TP > 1 {
			which = "GPUs " + strings.Join(ids, ",")
			what = fmt.Sprintf("%s x%d, tensor-parallel group (TP %d)", g.GPU.Name, g.TP, g.TP)
		}
		if _, err := fmt.Fprintf(w, "  w%-3d %-12s %s\n", wk, which, what); err != nil {
			return err
		}
	}
	return nil
}

// WritePlan prints a stage plan: worker x model call counts, predicted finish times, the
// makespan, the lower bound (solver.WorkBound, which holds for any split of the calls, so for
// the final plan) and the gap, how the plan was found (proved optimal by the exact search,
// near-optimal or best found by the fill search, the heuristic) and how long that took, and
// whether it was reused from an identical problem planned earlier. hardware names each worker's
// GPUs ("A100-80GB", "H100-80GB x2": Resolved.Hardware), shown beside the worker; nil shows
// the workers' numbers alone.
func WritePlan(w io.Writer, sp *placement.StagePlan, hardware []string) error {
	if sp == nil || sp.Plan == nil {
		_, err := fmt.Fprintln(w, "nothing to plan")
		return err
	}
	p := sp.Plan
	label := func(wk int) string {
		if wk < len(hardware) {
			return fmt.Sprintf("w%d (%s)", wk, hardware[wk])
		}
		return fmt.Sprintf("w%d", wk)
	}
	width := len("replicas")
	for wk := range p.WorkerTime {
		width = max(width, len(label(wk)))
	}
	// A column is as wide as its model's name, at least 9.
	cols := make([]int, len(sp.Models))
	for i, m := range sp.Models {
		cols[i] = max(9, len(m))
	}
	fmt.Fprintf(w, "%-*s", width, "worker")
	for i, m := range sp.Models {
		fmt.Fprintf(w, " %*s", cols[i], m)
	}
	fmt.Fprintf(w, " %12s\n", "predicted_s")
	for wk := range p.WorkerTime {
		fmt.Fprintf(w, "%-*s", width, label(wk))
		for i := range sp.Models {
			if x := p.Counts[i][wk]; x > 0 {
				fmt.Fprintf(w, " %*d", cols[i], x)
			} else {
				fmt.Fprintf(w, " %*s", cols[i], ".")
			}
		}
		fmt.Fprintf(w, " %12.1f\n", p.WorkerTime[wk])
	}
	fmt.Fprintf(w, "%-*s", width, "replicas")
	for i, it := range sp.Problem.Items {
		n := 0
		for _, x := range p.Counts[i] {
			if x > 0 {
				n++
			}
		}
		fmt.Fprintf(w, " %*s", cols[i], fmt.Sprintf("%d/%d", n, it.MaxReplicas))
	}
	fmt.Fprintln(w)
	switch {
	case p.Status == solver.TimeLimit:
		fmt.Fprintf(w, "predicted makespan %.1f s, best found (time limit): not proved optimal (the ILP's best with even splits %.1f s)\n", p.Makespan, p.ILPMakespan)
	case p.ILPMakespan > 0:
		fmt.Fprintf(w, "predicted makespan %.1f s (ILP optimum with even splits %.1f s)\n", p.Makespan, p.ILPMakespan)
	default:
		fmt.Fprintf(w, "predicted makespan %.1f s\n", p.Makespan)
	}
	fmt.Fprintf(w, "lower bound        %.1f s (work bound, for any split of the calls), gap %.2f%%\n", p.LowerBound, 100*p.Gap)
	by := ""
	if p.Method != "" && p.Method != string(p.Status) {
		by = " by " + p.Method
	}
	reused := ""
	if p.Reused {
		reused = " (reused: an identical problem was planned earlier in this process)"
	}
	_, err := fmt.Fprintf(w, "solver             %s%s in %v%s%s\n", p.Status.Describe(), by, p.SolveTime.Round(time.Microsecond), reused, note(p.Note))
	return err
}

func note(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// StageName names the stage of a layer of a graph of layers layers: a two-layer graph (a MoA
// query) has an expert stage (layer 0) and an aggregator stage (layer 1); deeper graphs
// have "layer N" stages.
func StageName(layer, layers int) string {
	switch {
	case layers == 2 && layer == 0:
		return "expert stage"
	case layers == 2 && layer == 1:
		return "aggregator stage"
	}
	return fmt.Sprintf("layer %d stage", layer)
}

// PlanPreview returns the stage plans of the mosaic policy labelled label (or the first mosaic
// policy) on the experiment's workload, by layer: exactly the plans the policy makes when it
// runs, because it runs it in the simulator (a later stage is planned on the calls the rule
// leaves and on the models the workers hold at its barrier).
func (r *Resolved) PlanPreview(ctx context.Context, label string) ([]*placement.StagePlan, error) {
	m := r.Graph
	if m == nil {
		return nil, fmt.Errorf("%s: planning needs a workload of call graphs (kind moa, layered, tree or dag)", r.File())
	}
	var pol *ResolvedPolicy
	for i := range m.Policies {
		if (label == "" && m.Policies[i].Name == placement.Name) || m.Policies[i].Label == label {
			pol = &m.Policies[i]
			break
		}
	}
	if pol == nil {
		if label == "" {
			label = placement.Name
		}
		return nil, fmt.Errorf("%s: no policy %q in the experiment", r.File(), label)
	}
	if pol.Name != placement.Name {
		return nil, fmt.Errorf("%s: policy %q is %s, which makes no plan ahead (only mosaic does)", r.File(), pol.Label, pol.Name)
	}
	if m.Online {
		return nil, fmt.Errorf("%s: policy %q serves queries arriving over time here, placing models for the mix it expects as the run goes: it has no stage plans to preview (mosaic plan shows an offline batch's; this workload has workload.arrival_rate or trace arrivals)", r.File(), pol.Label)
	}
	_, p, err := r.simulatePolicy(ctx, *pol, nil)
	if err != nil {
		return nil, err
	}
	pl, ok := p.(planner)
	if !ok {
		return nil, fmt.Errorf("%s: policy %q makes no stage plans", r.File(), pol.Label)
	}
	return pl.Plans(), nil
}

// PlanInfo is one stage plan of a planning policy in run.json: how good it is and how it was
// found. It holds nothing that changes from one run to the next (not the solve time, nor
// whether the plan was reused from an identical problem), so run.json stays byte-identical.
type PlanInfo struct {
	Policy string `json:"policy"`
	Layer  int    `json:"layer"`
	// StartS is when the stage was planned (seconds from the start of the run).
	StartS    float64 `json:"start_s"`
	MakespanS float64 `json:"makespan_s"`
	// ILPMakespanS is the ILP's optimum with even splits, where the exact search proved it.
	ILPMakespanS float64 `json:"ilp_makespan_s,omitempty"`
	// LowerBoundS is solver.WorkBound: no plan, splits even or not, finishes earlier.
	LowerBoundS float64 `json:"lower_bound_s"`
	Gap         float64 `json:"gap"`
	Status      string  `json:"status"`
	Method      string  `json:"method"`
	Note        string  `json:"note,omitempty"`
}

// PlanInfos lists the stage plans of the run's planning policies, policy by policy, stage by
// stage.
func (run *Run) PlanInfos() []PlanInfo {
	var out []PlanInfo
	for i, p := range run.Policies {
		pl, ok := p.(planner)
		if !ok {
			continue
		}
		for _, sp := range pl.Plans() {
			if sp == nil || sp.Plan == nil || len(sp.Plan.WorkerTime) == 0 {
				continue
			}
			q := sp.Plan
			out = append(out, PlanInfo{Policy: run.Results[i].Policy, Layer: sp.Layer, StartS: sp.Start.Seconds(),
				MakespanS: q.Makespan, ILPMakespanS: q.ILPMakespan, LowerBoundS: q.LowerBound, Gap: q.Gap,
				Status: string(q.Status), Method: q.Method, Note: q.Note})
		}
	}
	return out
}
