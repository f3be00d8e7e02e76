//go:build !cgo || !lpsolve

package solver

import "context"

// ILPAvailable says whether this build solves the ILP with lp_solve (built with cgo and the
// lpsolve tag, as the Makefile does); otherwise Solve uses the heuristic, with a warning.
const ILPAvailable = false

// SolveILP is unavailable without cgo and the lpsolve build tag.
func SolveILP(context.Context, Problem) (*Plan, error) { return nil, ErrUnavailable }

// LowerBound is WorkBound without lp_solve (no LP relaxation).
func LowerBound(p Problem) (float64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return WorkBound(p), nil
}
