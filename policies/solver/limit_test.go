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

// blockILP makes the ILP hang until the returned function is called, with the exact search
// turned off so that every problem goes to the ILP.
func blockILP(t *testing.T) (release func()) {
	t.Helper()
	limit := exactNodeLimit
	exactNodeLimit = 0
	t.Cleanup(func() { exactNodeLimit = limit })
	gate := make(chan struct{})
	solveILP = func(ctx context.Context, p Problem) (*Plan, error) {
		<-gate
		return SolveILP(ctx, p)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			close(gate)
		}
	}
	t.Cleanup(func() { release(); solveILP = SolveILP })
	return release
}

// A limit that is not a whole number of seconds holds although lp_solve counts whole seconds:
// when it strikes before the ILP answers, the plan is the heuristic's and says so.
func TestSubSecondLimit(t *testing.T) {
	blockILP(t)
	p := twoModels(50 * time.Millisecond)
	plan, err := Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, Heuristic, plan.Status)
	assert.Contains(t, plan.Note, "had not finished within the 50ms time limit")
	assert.Equal(t, WorkBound(p), plan.LowerBound)
	assert.Equal(t, SolveHeuristic(p).Counts, plan.Counts)
}

// A whole-second limit is lp_solve's to keep: Solve waits for the ILP's answer.
func TestWholeSecondLimitWaitsForTheILP(t *testing.T) {
	release := blockILP(t)
	time.AfterFunc(100*time.Millisecond, release)
	plan, err := Solve(context.Background(), twoModels(time.Second))
	require.NoError(t, err)
	assert.NotContains(t, plan.Note, "had not finished")
}

// A solve that runs on logs its progress; a cancelled context stops the wait.
func TestSolveProgressAndCancel(t *testing.T) {
	blockILP(t)
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
	assert.Contains(t, logs.String(), "solving the placement ILP")
	assert.Contains(t, logs.String(), "time_limit=1m0s")
}

// A problem whose exact search needs more choices than its limit goes to the ILP, which is
// then the one to answer; within the limit the search answers and the ILP is never asked.
func TestExactSearchLimitHandsOverToTheILP(t *testing.T) {
	p := twoModels(time.Minute)
	asked := 0
	solveILP = func(ctx context.Context, p Problem) (*Plan, error) {
		asked++
		return SolveHeuristic(p), nil
	}
	limit := exactNodeLimit
	t.Cleanup(func() { solveILP, exactNodeLimit = SolveILP, limit })

	plan, err := Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, Optimal, plan.Status)
	assert.Equal(t, MethodExact, plan.Method)
	assert.Zero(t, asked, "the exact search solves a two-model problem")

	exactNodeLimit = 3 // fewer than the first item's replica sets
	_, ok, err := solveExact(context.Background(), p)
	require.NoError(t, err)
	assert.False(t, ok)
	plan, err = Solve(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, 1, asked)
	assert.Equal(t, Heuristic, plan.Status, "the stand-in ILP's plan")
}

// A cancelled context stops the exact search with the context's error.
func TestExactSearchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ok, err := solveExact(ctx, twoModels(time.Minute))
	assert.False(t, ok)
	require.ErrorIs(t, err, context.Canceled)
}
