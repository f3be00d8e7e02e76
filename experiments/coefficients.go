package experiments

import (
	"log/slog"
	"strings"
	"sync"
)

// warnedBorrow holds the GPUs (with their profile) a run has already warned about: once per
// process is enough, however many experiments or sweep points use them.
var warnedBorrow sync.Map

// warnBorrowedCoefficients warns, once per GPU and profile, when a worker group's GPU has no
// cost-model coefficients of its own in the profile: it runs with another GPU's (the
// profile's default), which the warning names, so that a prediction for it is never taken
// for a calibrated one.
func (r *Resolved) warnBorrowedCoefficients() {
	for _, g := range r.Groups {
		from, borrowed := r.Profile.Borrows(g.GPU)
		if !borrowed {
			continue
		}
		if _, done := warnedBorrow.LoadOrStore(strings.ToLower(g.GPU.Name)+"\x00"+r.Profile.Source, true); done {
			continue
		}
		if from == "" {
			from = "the profile's [default]"
		}
		slog.Warn("GPU without cost-model coefficients of its own: it borrows another GPU's, uncalibrated for it",
			"gpu", g.GPU.Name, "borrows_from", from, "profile", r.Profile.Source, "key", g.Key+".gpu")
	}
}
