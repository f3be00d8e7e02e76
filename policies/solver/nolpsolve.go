//go:build !cgo

package solver

import "context"

// SolveILP is unavailable without cgo.
func SolveILP(context.Context, Problem) (*Plan, error) { return nil, ErrUnavailable }

// LowerBound is unavailable without cgo.
func LowerBound(Problem) (float64, error) { return 0, ErrUnavailable }
