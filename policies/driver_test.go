package policies_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/traces"
)

// TestNewDriverRejectsAModelListedTwice: the Driver finds a call's model by its name, so two
// models of one name would leave the second's calls to the first; it says which name.
func TestNewDriverRejectsAModelListedTwice(t *testing.T) {
	wl := &traces.Workload{Name: "one", Queries: []traces.Query{{Calls: []traces.Call{
		{Role: traces.RoleExpert, Model: "m", PromptTokens: 10, OutputTokens: 10, Answer: "A"}}}}}
	require.NoError(t, wl.Finish())
	models := []policies.ModelInfo{{Name: "m", Memory: 0.4}, {Name: "n", Memory: 0.4}, {Name: "m", Memory: 0.4}}
	_, err := policies.NewDriver(nil, nil, policies.NeverSkip(), wl, models, 1)
	require.EqualError(t, err, "policies: model m is listed twice")
	_, err = policies.NewDriver(nil, nil, policies.NeverSkip(), wl, models[:2], 1)
	require.NoError(t, err)
}
