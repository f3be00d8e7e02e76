//go:build !cgo || !lpsolve

package solver

import "context"

// ILPAvailable says whether this build has SolveILP, the ILP solved by lp_solve (built with cgo
// and the lpsolve tag, as the Makefile does). Solve does not need it.
const ILPAvailable = false

// SolveILP is unavailable without cgo and the lpsolve build tag.
func SolveILP(context.Context, Problem) (*Plan, error) { return nil, ErrUnavailable }
