package policies_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mosaic-sched/mosaic/policies"
)

func TestConfidenceSkip(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []string
		threshold float64
		skip      bool
		majority  string
		conf      float64
	}{
		{"3:0 at T=1", []string{"A", "A", "A"}, 1, true, "A", 1},
		{"2:1 at T=1", []string{"A", "B", "A"}, 1, false, "A", 2.0 / 3},
		{"1:1:1 at T=1", []string{"A", "B", "C"}, 1, false, "A", 1.0 / 3},
		{"3:0 at T=2/3", []string{"C", "C", "C"}, 2.0 / 3, true, "C", 1},
		{"2:1 at T=2/3", []string{"B", "C", "C"}, 2.0 / 3, true, "C", 2.0 / 3},
		{"2:1 at T=0.667", []string{"B", "C", "C"}, 0.667, true, "C", 2.0 / 3},
		{"1:1:1 at T=2/3", []string{"B", "C", "A"}, 2.0 / 3, false, "A", 1.0 / 3},
		{"3:0 at T>1", []string{"A", "A", "A"}, 1.5, false, "A", 1},
		{"2:1 at T>1", []string{"A", "B", "A"}, 2, false, "A", 2.0 / 3},
		{"no answers", []string{"", "", ""}, 1.0 / 3, false, "", 0},
		{"one missing answer at T=2/3", []string{"A", "", "A"}, 2.0 / 3, true, "A", 2.0 / 3},
		{"one missing answer at T=1", []string{"A", "", "A"}, 1, false, "A", 2.0 / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := policies.ConfidenceSkip{Threshold: tc.threshold}.Decide(tc.answers)
			assert.Equal(t, tc.skip, d.Skip)
			assert.Equal(t, tc.majority, d.Majority)
			assert.InDelta(t, tc.conf, d.Confidence, 1e-9)
		})
	}
	assert.False(t, policies.NeverSkip().Decide([]string{"A", "A", "A"}).Skip)
	assert.Equal(t, "never-skip", policies.NeverSkip().Name())
}
