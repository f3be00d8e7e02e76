package solver

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoModels is a small problem: two models of 8 calls on two workers.
func twoModels(limit time.Duration) Problem {
	c := Curve{X: []int{1, 8}, T: []float64{10, 30}}
	return Problem{Workers: 2, TimeLimit: limit, Items: []Item{
		{Name: "a", Calls: 8, Load: 5, Curve: c, MaxReplicas: 2},
		{Name: "b", Calls: 8, Load: 5, Curve: c, MaxReplicas: 2},
	}}
}

// blockSearch makes the search of problems beyond the exact search hang until the returned
// function is called, with the exact search turned off so that every problem goes to it, and
// the memo emptied before and after.
func blockSearch(t *testing.T) (release func()) {
	t.Helper()
	limit := exactNodeLimit
	exactNodeLimit = 0
	plans.reset()
	t.Cleanup(func() { exactNodeLimit = limit; plans.reset() })
	gate := make(chan struct{})
	solveLarge = func(ctx context.Context, p Problem) (*Plan, error) {
		<-gate
		return fillSearch(ctx, p)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			close(gate)
		}
	}
	t.Cleanup(func() { release(); solveLarge = fillSearch })
	return release
}

// The time limit is a safety net: when it strikes before the search answers, the plan is the
// heuristic's, says so, and is not kept for reuse.
func TestTimeLimitSafetyNet(t *testing.T) {
	release := blockSearch(t)
	p := twoModels(50 * time.Millisecond)
	plan, err := Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, Heuristic, plan.Status)
	assert.Contains(t, plan.Note, "had not finished within the 50ms time limit")
	assert.Equal(t, WorkBound(p), plan.LowerBound)
	assert.Equal(t, SolveHeuristic(p).Counts, plan.Counts)
	assert.Zero(t, plans.len(), "a plan the time limit decided is not kept")

	release()
	plan, err = Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, MethodFill, plan.Method)
	assert.False(t, plan.Reused)
}

// A solve that runs on logs its progress; a cancelled context stops the wait.
func TestSolveProgressAndCancel(t *testing.T) {
	blockSearch(t)
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	every := progressEvery
	progressEvery = 10 * time.Millisecond
	t.Cleanup(func() { progressEvery = every })

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := Solve(ctx, twoModels(time.Minute))
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, logs.String(), "solving the placement problem")
	assert.Contains(t, logs.String(), "time_limit=1m0s")
}

// A problem whose exact search needs more choices than its limit goes to the fill search;
// within the limit the exact search answers.
func TestExactSearchLimitHandsOverToTheFillSearch(t *testing.T) {
	p := twoModels(time.Minute)
	limit := exactNodeLimit
	plans.reset()
	t.Cleanup(func() { exactNodeLimit = limit; plans.reset() })

	plan, err := Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, Optimal, plan.Status)
	assert.Equal(t, MethodExact, plan.Method)

	exactNodeLimit = 3 // fewer than the first item's replica sets
	_, ok, err := solveExact(context.Background(), p)
	require.NoError(t, err)
	assert.False(t, ok)
	plan, err = Solve(context.Background(), p)
	require.NoError(t, err)
	assert.False(t, plan.Reused, "the step limits are part of the memo's key")
	assert.Equal(t, MethodFill, plan.Method)
	assert.Contains(t, []Status{NearOptimal, BestFound}, plan.Status)
}

// A cancelled context stops the exact search with the context's error.
func TestExactSearchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ok, err := solveExact(ctx, twoModels(time.Minute))
	assert.False(t, ok)
	require.ErrorIs(t, err, context.Canceled)
}
