package roundrobin_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
)

// TestRoundRobinHandComputed runs round-robin on two workers over policytest.TinyMoA with
// the fake backend (policytest.CheckTiny) and checks every action against a timeline worked
// out by hand from the policy's rule (not from its code).
//
// Models, in the experiment's order: E0, E1, E2, AGG; every one holds 0.9 of a worker's
// memory, so a worker holds one model at a time. Loads take E0 10s, E1 20s, E2 15s, AGG 25s;
// an unload 0.5s; a call 10ms per output token.
//
// Placement (model i on worker i mod 2, AGG, not an expert, continuing the turn as the 4th
// model): E0 -> w0, E1 -> w1, E2 -> w0, AGG -> w1. So w0 serves E0 then E2; w1 serves E1,
// then (after the barrier) AGG.
//
//	0s     w0 loads E0 (done 10s), w1 loads E1 (done 20s)
//	10s    w0 holds E0: submits its calls in release order 0, 4, 8 (end 11s, 13s, 12s)
//	13s    call 4, the last E0 call, ends: w0 unloads E0 (done 13.5s)
//	13.5s  w0 loads E2 (done 28.5s)
//	20s    w1 holds E1: submits 1, 5, 9 (end 22s, 21.5s, 22.6s)
//	22.6s  call 9, the last E1 call, ends: w1 unloads E1 (done 23.1s); AGG's layer is not
//	       open (E2 calls remain), so w1 loads nothing
//	28.5s  w0 holds E2: submits 2, 6, 10 (end 31.5s, 30.5s, 29.5s)
//	29.5s  call 10 ends: query 2's experts are done, its aggregator 11 is released but held
//	       (barrier); 30.5s: call 6 ends, aggregator 7 released and held
//	31.5s  call 2, the last layer-0 call, ends: w0 has served its models and unloads E2
//	       (layer 0 is not the last layer); the layer opens and w1 loads AGG (done 56.5s);
//	       aggregator 3 is released
//	56.5s  w1 holds AGG: submits the aggregators in release order 11, 7, 3 (end 57.2s,
//	       57.1s, 57s); the run ends with AGG still loaded (last layer).
func TestRoundRobinHandComputed(t *testing.T) {
	ms := policytest.Ms
	policytest.CheckTiny(t, roundrobin.New(), policytest.TinyWant{
		// The backend's log.
		Log: []string{
			"0s load w0 E0",
			"0s load w1 E1",
			"10s submit w0 call 0",
			"10s submit w0 call 4",
			"10s submit w0 call 8",
			"13s unload w0 E0",
			"13.5s load w0 E2",
			"20s submit w1 call 1",
			"20s submit w1 call 5",
			"20s submit w1 call 9",
			"22.6s unload w1 E1",
			"28.5s submit w0 call 2",
			"28.5s submit w0 call 6",
			"28.5s submit w0 call 10",
			"31.5s unload w0 E2",
			"31.5s load w1 AGG",
			"56.5s submit w1 call 11",
			"56.5s submit w1 call 7",
			"56.5s submit w1 call 3",
		},
		// The Driver's record agrees: loads in completion order, and who served each call when.
		Loads: []policies.LoadRecord{
			{Worker: 0, Model: "E0", Start: 0, End: ms(10000)},
			{Worker: 1, Model: "E1", Start: 0, End: ms(20000)},
			{Worker: 0, Model: "E2", Start: ms(13500), End: ms(28500)},
			{Worker: 1, Model: "AGG", Start: ms(31500), End: ms(56500)},
		},
		Served: map[int]policytest.Served{
			0: {Worker: 0, Start: ms(10000), End: ms(11000)}, 4: {Worker: 0, Start: ms(10000), End: ms(13000)}, 8: {Worker: 0, Start: ms(10000), End: ms(12000)},
			1: {Worker: 1, Start: ms(20000), End: ms(22000)}, 5: {Worker: 1, Start: ms(20000), End: ms(21500)}, 9: {Worker: 1, Start: ms(20000), End: ms(22600)},
			2: {Worker: 0, Start: ms(28500), End: ms(31500)}, 6: {Worker: 0, Start: ms(28500), End: ms(30500)}, 10: {Worker: 0, Start: ms(28500), End: ms(29500)},
			3: {Worker: 1, Start: ms(56500), End: ms(57000)}, 7: {Worker: 1, Start: ms(56500), End: ms(57100)}, 11: {Worker: 1, Start: ms(56500), End: ms(57200)},
		},
	})
}

// TestRoundRobinLargeRun runs round-robin over 2000 generated MoA queries on four
// workers of the simulated cluster (policytest.RunLarge), which checks the invariants of any
// run (policytest.CheckLargeRun), and checks the round-robin rule.
func TestRoundRobinLargeRun(t *testing.T) {
	res := policytest.RunLarge(t, roundrobin.New())

	// Round-robin: model i of the experiment's order on worker i mod 4, each loaded once, and
	// a worker serves its models one after another in that order: w0 E0 then E4, w1 E1 then
	// E5, w2 E2 then (after the barrier) the aggregator AGG, w3 E3.
	loaded := policytest.LoadOrder(res) // completion order; a worker's loads complete in its order
	assert.Equal(t, map[policies.WorkerID][]string{0: {"E0", "E4"}, 1: {"E1", "E5"}, 2: {"E2", "AGG"}, 3: {"E3"}}, loaded)
	home := map[string]policies.WorkerID{"E0": 0, "E1": 1, "E2": 2, "E3": 3, "E4": 0, "E5": 1, "AGG": 2}
	for _, c := range res.Calls {
		require.Equal(t, home[c.Call.Model], c.Worker, "call %d of %s", c.Call.ID, c.Call.Model)
	}
}
