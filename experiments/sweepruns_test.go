package experiments

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
)

// Confidence rules with the same ruleKey for gated calls of at most k inputs decide alike on
// every list of at most k answers (over four answers and none), the whole Decision; rules that
// decide apart have different keys.
func TestRuleKeyDecidesAlike(t *testing.T) {
	thresholds := []float64{0.2, 1.0 / 3, 0.333, 0.334, 0.499, 0.5, 0.6, 0.6657, 0.6667, 2.0 / 3, 0.7, 0.75, 0.8, 0.9,
		0.999, 1, 1.0005, 1.001, 1.5, 2, math.Inf(1)}
	alphabet := []string{"", "A", "B", "C", "D"}
	for k := 0; k <= 4; k++ {
		var lists [][]string
		var grow func(prefix []string)
		grow = func(prefix []string) {
			lists = append(lists, append([]string(nil), prefix...))
			if len(prefix) == k {
				return
			}
			for _, a := range alphabet {
				grow(append(prefix, a))
			}
		}
		grow(nil)
		for _, t1 := range thresholds {
			for _, t2 := range thresholds {
				r1, r2 := policies.ConfidenceSkip{Threshold: t1}, policies.ConfidenceSkip{Threshold: t2}
				k1, ok1 := ruleKey(r1, k)
				k2, ok2 := ruleKey(r2, k)
				require.True(t, ok1 && ok2)
				alike := true
				for _, l := range lists {
					if r1.Decide(l) != r2.Decide(l) {
						alike = false
						break
					}
				}
				assert.Equal(t, alike, k1 == k2, "k = %d, thresholds %g and %g: keys %s and %s", k, t1, t2, k1, k2)
			}
		}
	}
	// With three experts, the paper's thresholds fall into four classes.
	key := func(t float64) string {
		k, _ := ruleKey(policies.ConfidenceSkip{Threshold: t}, 3)
		return k
	}
	assert.Equal(t, key(0.6), key(0.6667))
	assert.Equal(t, key(0.7), key(1.0))
	assert.Equal(t, key(1.5), key(math.Inf(1)))
	assert.NotEqual(t, key(0.5), key(0.6))
	assert.NotEqual(t, key(0.6667), key(0.7))
	assert.NotEqual(t, key(1.0), key(1.5))
	// Other rules are shared only with equal rules.
	dt := policies.DynamicThreshold{High: 1, Low: 0.6667, Backlog: 64, Budget: 0.2}
	d1, _ := ruleKey(dt, 3)
	d2, _ := ruleKey(dt, 3)
	dt.Budget = 0.3
	d3, _ := ruleKey(dt, 3)
	assert.Equal(t, d1, d2)
	assert.NotEqual(t, d1, d3)
	assert.NotEqual(t, d1, key(1.0))
}

// A point's run group leaves out the values of the keys that only choose rules.
func TestRunGroupKey(t *testing.T) {
	g := func(assign ...string) string { return runGroupKey(Point{Assign: assign}) }
	assert.Equal(t, g("aggregation.threshold=0.5", "seed=1"), g("aggregation.threshold=2", "seed=1"))
	assert.Equal(t, g("policy[2].threshold=0.5"), g("policy[2].threshold=1"))
	assert.NotEqual(t, g("aggregation.threshold=0.5", "seed=1"), g("aggregation.threshold=0.5", "seed=2"))
	assert.NotEqual(t, g("policy[2].threshold=0.5"), g("policy[3].threshold=0.5"))
	assert.NotEqual(t, g("policy[2].dynamic_threshold.low=0.5"), g("policy[2].dynamic_threshold.low=0.6"))
	assert.NotEqual(t, g("cluster.workers=2"), g("cluster.workers=3"))
}
