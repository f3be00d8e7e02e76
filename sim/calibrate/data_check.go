package calibrate

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// DataOptions configures CheckData.
type DataOptions struct {
	// Operators are operator-level profiles (Vidur *__mlp.csv.gz) of the cases' single GPU:
	// the mean of their median compute efficiencies is kept through the fit (FitLinear).
	Operators []string
	// Fit fits each GPU's coefficients on its cases before predicting them.
	Fit bool
	// Holdout leaves cases out of the fit and reports them apart (with Fit).
	Holdout *Holdout
	// FitOptions chooses the coefficients fitted; with Operators, KeepCompute is set.
	FitOptions FitOptions
	// KeepDefault keeps the profile's default coefficients when the cases are of a single
	// GPU (otherwise that GPU's fit becomes the default that GPUs without measurements take).
	KeepDefault bool
}

// OperatorFit is what one operator-level profile says about the linear layers of a GPU.
type OperatorFit struct {
	Path  string
	Model *sim.Model
	GPU   *sim.GPU
	LinearEfficiency
}

// DataCheck is the outcome of CheckData: the measured batch latencies against the cost
// model's predictions.
type DataCheck struct {
	// GPUs are the cases' GPUs, in the order of their first case.
	GPUs []*sim.GPU
	// Operators are the operator-level profiles' efficiencies, one per DataOptions.Operators.
	Operators []OperatorFit
	// Predictions are every case's, in Sort's order.
	Predictions []Prediction
	// Profile predicted them: the profile CheckData was given, with each GPU's fitted
	// coefficients when it fitted.
	Profile *sim.Profile

	fit         bool
	holdout     *Holdout
	keepDefault bool
}

// CheckData predicts the latency of every case with prof. With opts.Fit it first fits each
// GPU's coefficients on its cases less those opts.Holdout holds out, sets them in prof (and
// makes them prof's default when the cases are of a single GPU: GPUs without measurements take
// its efficiencies), and logs the fits' progress on slog's default logger. With opts.Operators
// (cases of a single GPU) the compute efficiency is pinned on operator-level profiles first.
// Errors in the options are *OptionError.
func CheckData(cases []Case, cat *sim.Catalog, prof *sim.Profile, opts DataOptions) (*DataCheck, error) {
	d := &DataCheck{Profile: prof, fit: opts.Fit, holdout: opts.Holdout, keepDefault: opts.KeepDefault}
	byGPU := map[*sim.GPU][]Case{}
	for _, c := range cases {
		if _, ok := byGPU[c.GPU]; !ok {
			d.GPUs = append(d.GPUs, c.GPU)
		}
		byGPU[c.GPU] = append(byGPU[c.GPU], c)
	}
	fitOpts := opts.FitOptions
	computeEff := 0.0
	for _, path := range opts.Operators {
		if len(d.GPUs) != 1 {
			return nil, optionErrorf("--operators needs the rows of a single GPU; choose one with --gpu")
		}
		of, err := fitOperators(path, cat, d.GPUs[0])
		if err != nil {
			return nil, err
		}
		d.Operators = append(d.Operators, of)
		computeEff += of.Compute / float64(len(opts.Operators))
		fitOpts.KeepCompute = true
	}
	if opts.Fit {
		for _, g := range d.GPUs {
			if err := d.fitGPU(g, byGPU[g], computeEff, fitOpts); err != nil {
				return nil, err
			}
		}
	}
	preds, err := PredictAll(cases, prof)
	if err != nil {
		return nil, err
	}
	Sort(preds)
	d.Predictions = preds
	return d, nil
}

// fitOperators reads one operator-level profile and derives GPU g's linear efficiencies.
func fitOperators(path string, cat *sim.Catalog, g *sim.GPU) (OperatorFit, error) {
	rows, err := ReadOperators(path)
	if err != nil {
		return OperatorFit{}, err
	}
	m, err := OperatorModel(path, cat)
	if err != nil {
		return OperatorFit{}, err
	}
	le, err := FitLinear(rows, m, g)
	if err != nil {
		return OperatorFit{}, fmt.Errorf("%s: %w", path, err)
	}
	return OperatorFit{Path: path, Model: m, GPU: g, LinearEfficiency: le}, nil
}

// fitGPU fits GPU g's coefficients on its cases less the held-out ones and sets them in the
// profile; computeEff, with opts.KeepCompute, is the compute efficiency kept.
func (d *DataCheck) fitGPU(g *sim.GPU, cases []Case, computeEff float64, opts FitOptions) error {
	start := time.Now()
	var fitCases []Case
	for _, c := range cases {
		if !d.holdout.Matches(c) {
			fitCases = append(fitCases, c)
		}
	}
	if len(fitCases) == 0 {
		return optionErrorf("--holdout leaves no rows of %s to fit", g.Name)
	}
	slog.Info("fitting", "gpu", g.Name, "rows", len(fitCases), "held_out", len(cases)-len(fitCases))
	startCoef := d.Profile.For(g)
	if opts.KeepCompute {
		startCoef.ComputeEfficiency = computeEff
	}
	fr, err := Fit(fitCases, startCoef, opts)
	if err != nil {
		return err
	}
	slog.Info("fitted", "gpu", g.Name, "mape_pct", fmt.Sprintf("%.2f", fr.MAPE), "evaluations", fr.Evaluations, "wall", time.Since(start).Round(time.Millisecond))
	d.Profile.Set(g.Name, fr.Coef)
	if b := AtBounds(fr.Coef); len(b) > 0 {
		slog.Warn("fitted coefficients at the edge of their range: the rows do not constrain them", "gpu", g.Name, "coefficients", strings.Join(b, ", "))
	}
	if len(d.GPUs) == 1 && !d.keepDefault {
		// GPUs without measurements take the efficiencies fitted here.
		d.Profile.Default, d.Profile.DefaultFrom = fr.Coef, g.Name
	}
	return nil
}

// HeldOutMAPE is the error on g's held-out cases (percent) and their number (0 without a
// fit or a hold-out).
func (d *DataCheck) HeldOutMAPE(g *sim.GPU) (float64, int) {
	var held []Prediction
	for _, p := range d.Predictions {
		if p.GPU == g && d.fit && d.holdout.Matches(p.Case) {
			held = append(held, p)
		}
	}
	if len(held) == 0 {
		return 0, 0
	}
	return MAPE(held), len(held)
}

// Set names the set of a prediction's case: "-" without a fit, "held-out" for a case the
// hold-out left out of it, else "fitted".
func (d *DataCheck) Set(p Prediction) string { return setLabel(d.fit, d.holdout.Matches(p.Case)) }

// ByModel groups the predictions by model id, in Sort's order.
func (d *DataCheck) ByModel() []Group {
	return GroupBy(d.Predictions, func(p Prediction) string { return p.Model.ID })
}

// ByHardwareTP groups the predictions by GPU and tensor-parallel degree (HardwareTP), and by
// set too when a fit held cases out ("A100-40GB TP4 held-out"), sorted by key. It is nil when
// that adds nothing to the overall MAPE: a single group and no hold-out.
func (d *DataCheck) ByHardwareTP() []Group {
	byTP := GroupBy(d.Predictions, func(p Prediction) string {
		if d.fit && d.holdout != nil {
			return HardwareTP(p) + " " + d.Set(p)
		}
		return HardwareTP(p)
	})
	sort.SliceStable(byTP, func(i, j int) bool { return byTP[i].Key < byTP[j].Key })
	if len(byTP) > 1 || d.holdout != nil {
		return byTP
	}
	return nil
}

// BySet groups the predictions by set (Set), in order of first appearance; nil without a
// hold-out.
func (d *DataCheck) BySet() []Group {
	if d.holdout == nil {
		return nil
	}
	return GroupBy(d.Predictions, d.Set)
}

// MAPE is the mean absolute percentage error over every prediction.
func (d *DataCheck) MAPE() float64 { return MAPE(d.Predictions) }

// ProfileNote is what a profile written from the check says it was fitted on: its GPUs,
// rows and MAPE, and what its [default] table holds.
func (d *DataCheck) ProfileNote() []string {
	var names []string
	for _, g := range d.GPUs {
		names = append(names, g.Name)
	}
	return []string{
		fmt.Sprintf("GPUs: %s; %d measured rows; MAPE %.2f%%.", strings.Join(names, ", "), len(d.Predictions), d.MAPE()),
		"[default] holds the coefficients used for GPUs without their own entry.",
	}
}
