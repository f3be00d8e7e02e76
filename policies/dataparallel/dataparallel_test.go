package dataparallel_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
)

// TestDataParallelHandComputed runs data-parallel on two workers over policytest.TinyMoA with
// the fake backend (policytest.CheckTiny) and checks every action against a timeline worked
// out by hand from the policy's rule (not from its code).
//
// Models, in the experiment's order: E0, E1, E2, AGG; every one holds 0.9 of a worker's
// memory, so a worker holds one model at a time. Loads take E0 10s, E1 20s, E2 15s, AGG 25s;
// an unload 0.5s; a call 10ms per output token. Loads due at the same instant complete in the
// order they were asked for (w0 first).
//
// Serving order, every worker: E0, E1, E2 (none of them serves layer 1 again), then AGG.
// Calls of a layer and model are dealt to w0, w1, w0, ... in the order they become ready:
// layer 0 is ready at once in ID order, so E0: 0 -> w0, 4 -> w1, 8 -> w0; E1: 1 -> w0,
// 5 -> w1, 9 -> w0; E2: 2 -> w0, 6 -> w1, 10 -> w0. The aggregators are dealt as their
// experts finish: 11 (at 51.6s) -> w0, 7 (52.5s) -> w1, 3 (53.6s) -> w0.
//
//	0s     both workers load E0 (done 10s)
//	10s    w0 submits its share 0, 8 (end 11s, 12s); then w1 its share 4 (end 13s)
//	12s    w0's share of E0 is done: it unloads E0 (done 12.5s) and loads E1 (done 32.5s)
//	13s    w1's share is done: unload E0 (done 13.5s), load E1 (done 33.5s)
//	32.5s  w0 submits 1, 9 (end 34.5s, 35.1s); 33.5s: w1 submits 5 (end 35s)
//	35s    w1 done with E1: unload (done 35.5s), load E2 (done 50.5s)
//	35.1s  w0 done with E1: unload (done 35.6s), load E2 (done 50.6s)
//	50.5s  w1 submits 6 (end 52.5s); 50.6s: w0 submits 2, 10 (end 53.6s, 51.6s)
//	51.6s  call 10 ends: aggregator 11 is released, dealt to w0 and held (barrier)
//	52.5s  call 6 ends: w1 done with E2, unloads it (done 53s); aggregator 7 -> w1, held
//	53.6s  call 2, the last layer-0 call, ends: w0 unloads E2 (done 54.1s); the layer opens
//	       and w1, whose memory is free, loads AGG (done 78.6s); aggregator 3 -> w0
//	54.1s  w0's memory is free: it loads AGG (done 79.1s)
//	78.6s  w1 submits 7 (end 79.2s); 79.1s: w0 submits 11, 3 (end 79.8s, 79.6s); the run
//	       ends with AGG still loaded (last layer).
func TestDataParallelHandComputed(t *testing.T) {
	ms := policytest.Ms
	policytest.CheckTiny(t, dataparallel.New(), policytest.TinyWant{
		// The backend's log.
		Log: []string{
			"0s load w0 E0",
			"0s load w1 E0",
			"10s submit w0 call 0",
			"10s submit w0 call 8",
			"10s submit w1 call 4",
			"12s unload w0 E0",
			"12.5s load w0 E1",
			"13s unload w1 E0",
			"13.5s load w1 E1",
			"32.5s submit w0 call 1",
			"32.5s submit w0 call 9",
			"33.5s submit w1 call 5",
			"35s unload w1 E1",
			"35.1s unload w0 E1",
			"35.5s load w1 E2",
			"35.6s load w0 E2",
			"50.5s submit w1 call 6",
			"50.6s submit w0 call 2",
			"50.6s submit w0 call 10",
			"52.5s unload w1 E2",
			"53.6s unload w0 E2",
			"53.6s load w1 AGG",
			"54.1s load w0 AGG",
			"78.6s submit w1 call 7",
			"79.1s submit w0 call 11",
			"79.1s submit w0 call 3",
		},
		// The Driver's record agrees: loads in completion order, and who served each call when.
		Loads: []policies.LoadRecord{
			{Worker: 0, Model: "E0", Start: 0, End: ms(10000)},
			{Worker: 1, Model: "E0", Start: 0, End: ms(10000)},
			{Worker: 0, Model: "E1", Start: ms(12500), End: ms(32500)},
			{Worker: 1, Model: "E1", Start: ms(13500), End: ms(33500)},
			{Worker: 1, Model: "E2", Start: ms(35500), End: ms(50500)},
			{Worker: 0, Model: "E2", Start: ms(35600), End: ms(50600)},
			{Worker: 1, Model: "AGG", Start: ms(53600), End: ms(78600)},
			{Worker: 0, Model: "AGG", Start: ms(54100), End: ms(79100)},
		},
		Served: map[int]policytest.Served{
			0: {Worker: 0, Start: ms(10000), End: ms(11000)}, 8: {Worker: 0, Start: ms(10000), End: ms(12000)}, 4: {Worker: 1, Start: ms(10000), End: ms(13000)},
			1: {Worker: 0, Start: ms(32500), End: ms(34500)}, 9: {Worker: 0, Start: ms(32500), End: ms(35100)}, 5: {Worker: 1, Start: ms(33500), End: ms(35000)},
			2: {Worker: 0, Start: ms(50600), End: ms(53600)}, 10: {Worker: 0, Start: ms(50600), End: ms(51600)}, 6: {Worker: 1, Start: ms(50500), End: ms(52500)},
			11: {Worker: 0, Start: ms(79100), End: ms(79800)}, 3: {Worker: 0, Start: ms(79100), End: ms(79600)}, 7: {Worker: 1, Start: ms(78600), End: ms(79200)},
		},
	})
}

// TestDataParallelLargeRun runs data-parallel over 2000 generated MoA queries on four
// workers of the simulated cluster (policytest.RunLarge), which checks the invariants of any
// run (policytest.CheckLargeRun), and checks the data-parallel rule.
func TestDataParallelLargeRun(t *testing.T) {
	res := policytest.RunLarge(t, dataparallel.New())
	const W = policytest.LargeWorkers

	// Data-parallel: every worker loads every model once, in the experiment's order (no
	// expert serves layer 1 again, so none is moved last), the aggregator AGG after the
	// barrier.
	loaded := policytest.LoadOrder(res) // completion order; a worker's loads complete in its order
	want := map[policies.WorkerID][]string{}
	for w := range policies.WorkerID(W) {
		want[w] = []string{"E0", "E1", "E2", "E3", "E4", "E5", "AGG"}
	}
	assert.Equal(t, want, loaded)

	// A model's calls of a layer are dealt to the workers in turn in the order they become
	// ready: layer 0 is ready at the start in call-ID order, so the i-th expert call of a
	// model (by ID) runs on worker i mod 4. The aggregator calls become ready as their experts
	// finish: each worker serves a quarter of them, give or take one.
	ids := map[string][]int{}
	worker := map[int]policies.WorkerID{}
	aggs := map[policies.WorkerID]int{}
	for _, c := range res.Calls {
		worker[c.Call.ID] = c.Worker
		if c.Call.Layer == 0 {
			ids[c.Call.Model] = append(ids[c.Call.Model], c.Call.ID)
		} else {
			aggs[c.Worker]++
		}
	}
	require.Len(t, ids, 6, "every expert model has calls")
	for m, is := range ids {
		slices.Sort(is)
		for i, id := range is {
			require.Equal(t, policies.WorkerID(i%W), worker[id], "expert call %d, the %d-th of %s", id, i, m)
		}
	}
	n := 0
	for _, k := range aggs {
		n += k
	}
	require.Positive(t, n)
	for w := range policies.WorkerID(W) {
		assert.InDelta(t, float64(n)/W, aggs[w], 1, "aggregator calls on worker %d of %d", w, n)
	}
}
