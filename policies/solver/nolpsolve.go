//go:build !cgo

package solver

import "context"

// SolveILP is unavailable without cgo.
func SolveILP(context.Context, Problem) (*Plan, error) { return nil, ErrUnavailable }

// LowerBound is WorkBound without cgo (no LP relaxation).
func LowerBound(p Problem) (float64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return WorkBound(p), nil
}
