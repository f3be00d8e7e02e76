package experiments_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
)

// TestCapacity checks the capacity's arithmetic on the moa test experiment: twice the workers
// give twice the capacity; the calls counted are the workload's, less the gated calls the rule
// skips on the workload's own answers (counted here from the workload); and the capacity is an
// upper bound: served far above it, the best policy completes queries no faster.
func TestCapacity(t *testing.T) {
	r, err := resolve(t, onlineMoA)
	require.NoError(t, err)
	never, err := r.Capacity(policies.NeverSkip())
	require.NoError(t, err)
	unanimous, err := r.Capacity(policies.ConfidenceSkip{Threshold: 1})
	require.NoError(t, err)

	// Calls per query by layer and model, and the aggregators a unanimous vote skips.
	wl := r.Graph.Workload
	calls := map[policies.LayerModel]float64{}
	skips := 0.0
	for _, q := range wl.Queries {
		for _, c := range q.Calls {
			calls[policies.LayerModel{Layer: c.Layer, Model: c.Model}]++
			if c.Gate {
				first, same := q.Calls[c.Inputs[0].From].Answer, true
				for _, in := range c.Inputs {
					same = same && q.Calls[in.From].Answer == first
				}
				if same {
					skips++
				}
			}
		}
	}
	n := float64(len(wl.Queries))
	require.Positive(t, skips)
	for _, m := range never.Models {
		assert.InDelta(t, calls[m.LayerModel]/n, m.CallsPerQuery, 1e-12, "%v", m.LayerModel)
		assert.Positive(t, m.PerCall)
	}
	agg := never.Models[len(never.Models)-1]
	require.Equal(t, 1, agg.Layer)
	aggU := unanimous.Models[len(unanimous.Models)-1]
	assert.InDelta(t, (calls[agg.LayerModel]-skips)/n, aggU.CallsPerQuery, 1e-12, "the skipped aggregators do not count")
	assert.Greater(t, unanimous.QPS, never.QPS)

	r2, err := resolve(t, strings.Replace(onlineMoA, "workers = 2", "workers = 4", 1))
	require.NoError(t, err)
	require.Equal(t, 4, r2.NumWorkers())
	double, err := r2.Capacity(policies.NeverSkip())
	require.NoError(t, err)
	assert.InDelta(t, 2*never.QPS, double.QPS, 1e-9*never.QPS)

	// Four times the capacity: the queries finish at no more than the capacity.
	c, err := r.Capacity(nil)
	require.NoError(t, err)
	over := strings.Replace(onlineMoA, "arrival_rate = 0.5", "arrival_rate = "+strconv.FormatFloat(4*c.QPS, 'g', 6, 64), 1)
	over += "\n[[policy]]\nname = \"online\"\n"
	ro, err := resolve(t, over)
	require.NoError(t, err)
	run, err := ro.Simulate(context.Background(), nil)
	require.NoError(t, err)
	for _, s := range run.Summaries {
		assert.LessOrEqual(t, s.RequestThroughput, c.QPS, "%s completes %.3f q/s above the capacity %.3f", s.Policy, s.RequestThroughput, c.QPS)
	}
}
