package simulated_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/traces"
)

// The pipeline policy is MOSAIC without the stage barrier: with uneven experts, workers done
// with theirs serve ready aggregators while others still work, so some aggregator starts before
// the last expert ends (never under mosaic), the run is no longer, and every query's answer is
// the same.
func TestPipelineLiftsTheBarrier(t *testing.T) {
	out := func(q, i int) int {
		if (q+i)%3 == 2 {
			return 1000 + 250*q // the calls of model M2 are long and end one after another
		}
		return 150 + 20*q
	}
	wl := func() *traces.Workload { return workload(24, 3, 3, out, 4) }
	base := run(t, placement.New(placement.Options{TimeLimit: 5 * time.Second}), policies.NeverSkip(), wl(), 3, 3)
	pipe := run(t, placement.New(placement.Options{TimeLimit: 5 * time.Second, Pipeline: true}), policies.NeverSkip(), wl(), 3, 3)
	lastExpert := func(r *policies.Result) (end time.Duration) {
		for _, c := range r.Calls {
			if c.Call.Role == traces.RoleExpert {
				end = max(end, c.Timing.End)
			}
		}
		return end
	}
	firstAgg := func(r *policies.Result) time.Duration {
		first := time.Duration(1 << 62)
		for _, c := range r.Calls {
			if c.Call.Role == traces.RoleAggregator {
				first = min(first, c.Timing.Submitted)
			}
		}
		return first
	}
	assert.GreaterOrEqual(t, firstAgg(base), lastExpert(base), "mosaic keeps the barrier")
	assert.Less(t, firstAgg(pipe), lastExpert(pipe), "the pipeline starts aggregators before the last expert ends")
	assert.LessOrEqual(t, pipe.Summary().E2E, base.Summary().E2E)
	require.Len(t, pipe.Queries, len(base.Queries))
	for i := range base.Queries {
		assert.Equal(t, base.Queries[i].Final, pipe.Queries[i].Final)
	}
	assert.Len(t, pipe.Calls, len(base.Calls), "every call runs once")
	t.Logf("e2e: mosaic %v, pipeline %v", base.Summary().E2E, pipe.Summary().E2E)
}
