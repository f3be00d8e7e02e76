package solver

import (
	"context"
	"time"
)

// Hooks for the external tests.
var (
	// FillSearch is the fill search alone, without the exact search or the memo.
	FillSearch = fillSearch
	// ExactSearch is the exact search alone; ok is false when the problem is beyond it.
	ExactSearch = func(ctx context.Context, p Problem) (*Plan, bool, error) { return solveExact(ctx, p) }
	// SolveUncached is Solve without its memo: every call solves.
	SolveUncached = func(ctx context.Context, p Problem) (*Plan, error) {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		plan, _, err := solve(ctx, p, time.Now())
		return plan, err
	}
)

// ResetMemo forgets every plan Solve kept.
func ResetMemo() { plans.reset() }

// MemoLen is the number of plans Solve keeps.
func MemoLen() int { return plans.len() }

// SetMemoCapacity changes how many plans Solve keeps, until restore is called.
func SetMemoCapacity(n int) (restore func()) {
	prev := memoCapacity
	memoCapacity = n
	return func() { memoCapacity = prev }
}
