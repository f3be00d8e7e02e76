package policies_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/internal/policytest"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// TestStreamedRecordsInShortStretches runs an online MoA workload held and streamed with each
// worker's call edges handed to the recorder a few at a time, so that its timelines advance,
// to the bound of the moment, at nearly every call: the streamed run must hand on exactly the
// records, outcomes and worker intervals the held run keeps, and summarise them alike, under
// the online policy (which swaps models, so loads fall among the calls) and round-robin.
func TestStreamedRecordsInShortStretches(t *testing.T) {
	infos, setups, _ := policytest.LargeInfos(t)
	workload := func() *traces.Workload {
		wl := policytest.BigMoA(t, 600)
		for i := range wl.Queries {
			wl.Queries[i].Arrival = time.Duration(i) * 1500 * time.Millisecond
		}
		return wl
	}
	slo := policies.SLO{E2E: 60 * time.Second}
	for _, edges := range []int{2, 6, 64} {
		for _, pc := range []struct {
			name string
			new  func() policies.Policy
		}{
			{"online", func() policies.Policy { return online.New(online.Options{TimeLimit: time.Second}) }},
			{"round-robin", func() policies.Policy { return roundrobin.New() }},
		} {
			t.Run(fmt.Sprintf("%s, %d edges", pc.name, edges), func(t *testing.T) {
				defer policies.SetEdgesPerHandover(edges)()
				run := func(stream *policytest.Collector) *policies.Result {
					cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(policytest.LargeWorkers, setups), UnloadTime: time.Second})
					require.NoError(t, err)
					var d *policies.Driver
					if stream == nil {
						d, err = policies.NewDriver(cl, pc.new(), policies.ConfidenceSkip{Threshold: 1}, workload(), infos, policytest.LargeWorkers)
					} else {
						d, err = policies.NewStreamDriver(cl, pc.new(), policies.ConfidenceSkip{Threshold: 1}, &policytest.HeldSource{WL: workload()}, infos, policytest.LargeWorkers)
						d.Stream(stream, slo)
					}
					require.NoError(t, err)
					res, err := d.Run(context.Background())
					require.NoError(t, err)
					return res
				}
				col := &policytest.Collector{}
				held, streamed := run(nil), run(col)
				require.NotEmpty(t, held.Loads)
				require.Equal(t, held.Calls, col.Calls)
				require.Equal(t, held.Queries, col.Queries)
				require.Equal(t, held.WorkerIntervals(), policytest.ByWorker(col.Intervals), "each worker's in order")
				require.Equal(t, held.Summary(), streamed.Summary())
				hs, hg := held.Attainment(slo)
				ss, sg := streamed.Attainment(slo)
				require.Equal(t, fmt.Sprint(hs, hg), fmt.Sprint(ss, sg))
			})
		}
	}
}
