package experiments_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onlineMoA is the moa test experiment with queries arriving over time.
var onlineMoA = strings.Replace(moa, "queries = 60", "queries = 60\narrival_rate = 0.5", 1)

// TestOnlinePoliciesServePerCall: served online, the offline policies become static
// deployments that dispatch each call when it is ready (no stage barrier: some aggregator
// starts before the last expert call ends), under their own names.
func TestOnlinePoliciesServePerCall(t *testing.T) {
	require.NotEqual(t, moa, onlineMoA)
	src := onlineMoA + "\n[[policy]]\nname = \"mosaic\"\n\n[[policy]]\nname = \"plas\"\n\n[[policy]]\nname = \"mosaic\"\nlabel = \"mosaic+sjf\"\ndispatch = \"sjf\"\n"
	run := simulate(t, src)
	require.Len(t, run.Results, 5)
	for _, res := range run.Results {
		lastExpert, firstAgg := res.Calls[0].Timing.End, res.Calls[0].Timing.End
		for _, c := range res.Calls {
			if c.Call.Layer == 0 {
				lastExpert = max(lastExpert, c.Timing.End)
			} else {
				firstAgg = min(firstAgg, c.Timing.Started)
			}
		}
		assert.Less(t, firstAgg, lastExpert, "%s: no aggregator started before the last expert ended: a stage barrier", res.Policy)
	}
	var names []string
	for _, s := range run.Summaries {
		names = append(names, s.Policy)
	}
	assert.Equal(t, []string{"round-robin", "data-parallel", "mosaic", "plas", "mosaic+sjf"}, names)
}

// TestOnlineOnlyKeys: options that mean something only for an offline batch, or only
// online, are errors naming their key when used the other way.
func TestOnlineOnlyKeys(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"mosaic order online", onlineMoA + "\n[[policy]]\nname = \"mosaic\"\nmosaic.order = \"plain\"\n", "policy[2].mosaic.order: is an option of the offline batch's stages"},
		{"pipeline online", onlineMoA + "\n[[policy]]\nname = \"pipeline\"\n", "policy[2].name: pipeline lifts the stage barrier of an offline batch"},
		{"dispatch offline", moa + "\n[[policy]]\nname = \"mosaic\"\ndispatch = \"plas\"\n", "policy[2].dispatch: orders the queues of queries arriving over time, but this workload is an offline batch"},
		{"unknown dispatch", onlineMoA + "\n[[policy]]\nname = \"mosaic\"\ndispatch = \"lifo\"\n", `policy[2].dispatch: unknown dispatch order "lifo" (known: deepest, fcfs, sjf, plas, atlas)`},
		{"dispatch on plas", onlineMoA + "\n[[policy]]\nname = \"plas\"\ndispatch = \"fcfs\"\n", "policy[2].dispatch: the plas policy orders its queues itself"},
		{"bad placement", onlineMoA + "\n[[policy]]\nname = \"atlas\"\natlas.placement = \"random\"\n", `policy[2].atlas.placement: unknown placement "random" (known: mosaic, round-robin, everywhere)`},
		{"zero starve", onlineMoA + "\n[[policy]]\nname = \"plas\"\nplas.starve = 0.0\n", "policy[2].plas.starve: must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resolve(t, tc.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
