package calibrate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/sim"
)

// OptionError is an error in the options a caller gave an analysis (a hold-out that leaves
// nothing to fit, an operator profile for rows of several GPUs), not in its measurements: a
// command line reports it as a usage error. Its message names the command line's flags.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

// optionErrorf returns an *OptionError with a formatted message.
func optionErrorf(format string, args ...any) error {
	return &OptionError{Msg: fmt.Sprintf(format, args...)}
}

// Holdout selects the rows (or points) a fit leaves out, which an analysis then predicts and
// reports apart: KEY=V1,V2 with KEY one of gpus (the row's number of GPUs), tp (its
// tensor-parallel degree), L (its length, or a forward pass's context), B (its batch size) or
// model (catalog ids or aliases). A nil *Holdout holds nothing out.
type Holdout struct {
	Key    string   // gpus, tp, L, B or model
	Ints   []int    // the values of gpus, tp, L or B
	Models []string // the values of model, lower-cased
}

// Holdout keys the analyses take: IterationHoldoutKeys for CheckIterations,
// ForwardHoldoutKeys for CheckForward; CheckData takes them all.
var (
	IterationHoldoutKeys = []string{"tp", "B", "model"}
	ForwardHoldoutKeys   = []string{"B", "L", "model", "tp"}
)

// ParseHoldout parses a hold-out, KEY=V1,V2; an empty s is none (nil).
func ParseHoldout(s string) (*Holdout, error) {
	if s == "" {
		return nil, nil
	}
	key, vals, ok := strings.Cut(s, "=")
	if !ok || vals == "" {
		return nil, fmt.Errorf("want KEY=V1,V2 (keys: gpus, tp, L, B, model), got %q", s)
	}
	h := &Holdout{Key: strings.TrimSpace(key)}
	switch h.Key {
	case "gpus", "tp", "L", "B":
		n, err := ParseCounts(vals)
		if err != nil {
			return nil, err
		}
		h.Ints = n
	case "model":
		for _, m := range strings.Split(vals, ",") {
			h.Models = append(h.Models, strings.ToLower(strings.TrimSpace(m)))
		}
	default:
		return nil, fmt.Errorf("unknown key %q (keys: gpus, tp, L, B, model)", h.Key)
	}
	return h, nil
}

// ParseCounts parses a comma-separated list of positive integers.
func ParseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers separated by commas, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// Matches reports whether h holds c out; a nil Holdout holds nothing out.
func (h *Holdout) Matches(c Case) bool {
	if h == nil {
		return false
	}
	switch h.Key {
	case "gpus":
		return slices.Contains(h.Ints, c.NumGPUs)
	case "tp":
		return slices.Contains(h.Ints, c.TP)
	case "L":
		return slices.Contains(h.Ints, c.Length)
	case "B":
		return slices.Contains(h.Ints, c.Batch)
	case "model":
		for _, m := range h.Models {
			if strings.EqualFold(c.Model.ID, m) || slices.ContainsFunc(c.Model.Aliases, func(a string) bool { return strings.EqualFold(a, m) }) {
				return true
			}
		}
	}
	return false
}

// matchesShape reports whether h holds out a point of model m at tensor-parallel degree tp,
// batch size batch and length (or context) length.
func (h *Holdout) matchesShape(m *sim.Model, tp, batch, length int) bool {
	return h.Matches(Case{Row: Row{Batch: batch, Length: length}, Model: m, TP: tp})
}

// String is the hold-out as KEY=V1,V2; "" for nil.
func (h *Holdout) String() string {
	if h == nil {
		return ""
	}
	var vals []string
	for _, n := range h.Ints {
		vals = append(vals, strconv.Itoa(n))
	}
	vals = append(vals, h.Models...)
	return h.Key + "=" + strings.Join(vals, ",")
}

// setLabel names the set of a row or point: "-" without a fit, else "held-out" or "fitted".
func setLabel(fit, held bool) string {
	switch {
	case !fit:
		return "-"
	case held:
		return "held-out"
	}
	return "fitted"
}
