package experiments_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/internal/dataset"
)

// benchGraph resolves an example experiment with overrides and simulates one policy of it,
// reporting the simulated calls per second.
func benchGraph(b *testing.B, file string, policy int, sets ...string) {
	if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
		b.Skipf("shared data not found: set %s", dataset.Env)
	}
	e, err := experiments.Load(file)
	require.NoError(b, err)
	for _, s := range sets {
		require.NoError(b, e.Set(s))
	}
	r, err := e.Resolve()
	require.NoError(b, err)
	r.Graph.Policies = r.Graph.Policies[policy : policy+1]
	calls := r.Graph.Workload.NumCalls()
	b.ResetTimer()
	for b.Loop() {
		run, err := r.Simulate(context.Background(), nil)
		require.NoError(b, err)
		if run.Summaries[0].Queries != len(r.Graph.Workload.Queries) {
			b.Fatal("queries lost")
		}
	}
	b.ReportMetric(float64(calls)*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// 100,000 MoA queries (k = 3 experts and an aggregator: 400,000 calls) arriving online at
// 1 query/s on 4 workers, under the online policy and under round-robin.
func BenchmarkOnlineMoA100k(b *testing.B) {
	for i, name := range []string{"round-robin", "data-parallel", "mosaic", "online"} {
		if name != "online" && name != "round-robin" {
			continue
		}
		b.Run(name, func(b *testing.B) {
			benchGraph(b, "examples/online-moa.toml", i, "workload.queries=100000", "workload.arrival_rate=1")
		})
	}
}

// 10,000 queries of Together-MoA's 3-layer x 6-proposer graph (190,000 calls), offline.
func BenchmarkLayeredMoA10k(b *testing.B) {
	for i, name := range []string{"round-robin", "data-parallel", "mosaic", "online"} {
		b.Run(name, func(b *testing.B) {
			benchGraph(b, "examples/layered-moa.toml", i, "workload.queries=10000")
		})
	}
}

// The workload generators on their own.
func BenchmarkGenerate(b *testing.B) {
	for _, tc := range []struct{ file, queries string }{
		{"examples/online-moa.toml", "100000"}, {"examples/layered-moa.toml", "10000"},
	} {
		b.Run(fmt.Sprintf("%s/%s", tc.file, tc.queries), func(b *testing.B) {
			if _, ok := dataset.File("workloads/alpacaeval_moa_output_lengths.csv"); !ok {
				b.Skipf("shared data not found: set %s", dataset.Env)
			}
			for b.Loop() {
				e, err := experiments.Load(tc.file)
				require.NoError(b, err)
				require.NoError(b, e.Set("workload.queries="+tc.queries))
				_, err = e.Resolve()
				require.NoError(b, err)
			}
		})
	}
}

// 100,000 online MoA queries (0.5 query/s, the online policy) simulated held (the whole
// workload generated, every record kept: Resolve, Simulate) and streamed (ResolveSim, Sim.Run:
// generated as simulated time advances, records folded and let go), workload generation
// included, results files not written. Besides time and allocations, it reports the largest
// live heap seen during a run (sampled every 10 ms) and the heap still live after it.
func BenchmarkOnlineStream(b *testing.B) {
	for _, mode := range []string{"held", "streamed"} {
		b.Run(mode, func(b *testing.B) {
			var peak, after uint64
			for b.Loop() {
				e, err := experiments.Load("examples/online-moa.toml")
				require.NoError(b, err)
				for _, s := range []string{"workload.queries=100000", "workload.arrival_rate=0.5"} {
					require.NoError(b, e.Set(s))
				}
				runtime.GC()
				stop := sampleHeap(&peak)
				var run *experiments.Run
				if mode == "held" {
					r, err := e.Resolve()
					require.NoError(b, err)
					require.NoError(b, r.SelectPolicies([]string{"online"}))
					run, err = r.Simulate(context.Background(), nil)
					require.NoError(b, err)
				} else {
					s, err := e.ResolveSim()
					require.NoError(b, err)
					require.True(b, s.Streamed())
					require.NoError(b, s.SelectPolicies([]string{"online"}))
					run, err = s.Run(context.Background(), nil, nil)
					require.NoError(b, err)
				}
				stop()
				require.Equal(b, 100000, run.Summaries[0].Queries)
				runtime.GC()
				after = max(after, liveHeap())
				runtime.KeepAlive(run)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(after)/(1<<20), "live-after-MB")
		})
	}
}

// One seed of the 1,000-point sweep of docs/performance.md: GPQA's twelve policies at ten
// aggregation thresholds on ten cluster sizes, 100 points with their results folders
// (about 120 MB) written into a temporary folder, through the Sweeper (points in parallel,
// sharing the workload, the runs that simulate alike and their formatted rows). It reports
// the policies' runs simulated, of the 1,200 the points hold.
func BenchmarkSweep(b *testing.B) {
	if _, ok := dataset.File("workloads/moa_questions.csv"); !ok {
		b.Skipf("shared data not found: set %s", dataset.Env)
	}
	s, err := experiments.ParseSweep([]string{"aggregation.threshold=0.5,0.6,0.6667,0.7,0.75,0.8,0.9,1.0,1.5,2.0",
		"cluster.workers=2,3,4,5,6,7,8,9,10,12", "seed=1"})
	require.NoError(b, err)
	pts := s.Points()
	load := func() (*experiments.Experiment, error) { return experiments.Load("paper/gpqa.toml") }
	info, host := experiments.RunInfo{Version: "bench"}, experiments.HostInfo{}
	var st experiments.SweepStats
	for b.Loop() {
		sw, err := experiments.NewSweeper(load)
		require.NoError(b, err)
		require.NoError(b, sw.RunSweep(context.Background(), s, 1, 1, nil, b.TempDir(), info, host, nil))
		st = sw.Stats()
	}
	b.ReportMetric(float64(len(pts)*b.N)/b.Elapsed().Seconds(), "points/s")
	b.ReportMetric(float64(st.Simulated), "runs-simulated")
}

// sampleHeap records the largest live heap into peak every 10 ms until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			*peak = max(*peak, liveHeap())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// liveHeap is the heap's objects, live and not yet collected, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
