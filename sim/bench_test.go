package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// Workload of the 100k-request benchmarks: every request arrives at t=0 with a 512-token
// prompt; output lengths are lognormal with mean 3000 and 99th percentile 16000, truncated to
// [1, 32768] (long reasoning outputs, as in the MoA setting).
const (
	benchRequests  = 100_000
	benchPrompt    = 512
	benchMeanOut   = 3000.0
	benchP99Out    = 16000.0
	benchMaxOut    = 32768
	benchSeed      = 2024
	benchMaxSeqs   = 256
	benchMaxTokens = 8192
	benchBlockSize = 16
)

func benchArrivals() []sim.Arrival {
	dist, err := traces.NewLogNormal(benchMeanOut, benchP99Out, 1, benchMaxOut)
	if err != nil {
		panic(err)
	}
	rng := sim.Stream(benchSeed, "bench-lengths")
	reqs := make([]sim.Arrival, benchRequests)
	for i := range reqs {
		out := dist.Sample(rng)
		reqs[i] = sim.Arrival{Request: sim.Request{ID: uint64(i + 1), PromptTokens: benchPrompt, OutputTokens: out}}
	}
	return reqs
}

// benchEngine is DeepSeek-R1-Distill-Qwen-7B (a reasoning expert whose 131k context admits
// the longest outputs) on an A100-80GB with the built-in profile and vLLM-like settings.
func benchEngine(b *testing.B) *sim.Engine {
	cm := costModel(b, "A100-80GB", "qwenr1")
	blocks, err := cm.KVBlocks(0.9, benchMaxTokens, benchBlockSize)
	require.NoError(b, err)
	eng, err := sim.NewEngine(sim.EngineConfig{
		MaxNumSeqs: benchMaxSeqs, MaxBatchedTokens: benchMaxTokens, ChunkedPrefill: true,
		BlockSize: benchBlockSize, NumBlocks: blocks, WatermarkBlocks: blocks / 100,
	}, cm)
	require.NoError(b, err)
	return eng
}

// BenchmarkServe100k serves the 100k-request offline batch on one engine through sim.Serve.
// iters/s is simulated engine iterations per second of wall time.
func BenchmarkServe100k(b *testing.B) {
	reqs := benchArrivals()
	b.ReportAllocs()
	b.ResetTimer()
	var res sim.BatchResult
	for range b.N {
		var err error
		res, err = sim.Serve(benchEngine(b), reqs)
		if err != nil {
			b.Fatal(err)
		}
	}
	wall := b.Elapsed().Seconds()
	b.ReportMetric(float64(res.Stats.Steps)*float64(b.N)/wall, "iters/s")
	b.ReportMetric(float64(res.Stats.Steps), "iters")
	b.ReportMetric(res.Makespan.Seconds(), "sim-s")
	b.ReportMetric(float64(res.Stats.Preemptions), "preemptions")
	b.ReportMetric(res.Stats.MeanBatch, "mean-batch")
}

// BenchmarkAdvance100k drives the same batch with the loop Serve runs when every request
// arrives at t=0 (Advance with no horizon until idle), to count the Advance calls: events/s is
// Advance calls per second of wall time.
func BenchmarkAdvance100k(b *testing.B) {
	reqs := benchArrivals()
	b.ReportAllocs()
	b.ResetTimer()
	var calls, steps uint64
	for range b.N {
		eng := benchEngine(b)
		for _, r := range reqs {
			if err := eng.Add(r.Request); err != nil {
				b.Fatal(err)
			}
		}
		for !eng.Idle() {
			eng.Advance(0)
			calls++
		}
		steps += eng.Stats().Steps
	}
	wall := b.Elapsed().Seconds()
	b.ReportMetric(float64(calls)/wall, "events/s")
	b.ReportMetric(float64(steps)/wall, "iters/s")
	b.ReportMetric(float64(calls)/float64(b.N), "events")
}

// BenchmarkStep times single decode iterations of a full 256-sequence batch with 512-token
// prompts. The engine is rebuilt (untimed) every 1024 steps, so contexts stay between 512 and
// about 1800 tokens instead of growing with b.N.
func BenchmarkStep(b *testing.B) {
	const seqs, stepsPerEngine = 256, 1024
	cm := costModel(b, "A100-80GB", "qwenr1")
	out := stepsPerEngine + seqs // no sequence finishes, not even while the others prefill
	perSeq := (benchPrompt + out + benchBlockSize - 1) / benchBlockSize
	cfg := sim.EngineConfig{
		MaxNumSeqs: seqs, MaxBatchedTokens: benchMaxTokens, ChunkedPrefill: true,
		BlockSize: benchBlockSize, NumBlocks: seqs*perSeq + 1,
	}
	fresh := func() *sim.Engine {
		eng, err := sim.NewEngine(cfg, cm)
		require.NoError(b, err)
		for id := range uint64(seqs) {
			require.NoError(b, eng.Add(sim.Request{ID: id + 1, PromptTokens: benchPrompt, OutputTokens: out}))
		}
		for first := 0; first < seqs; {
			first += len(eng.Step().FirstToken)
		}
		return eng
	}
	eng := fresh()
	b.ReportAllocs()
	b.ResetTimer()
	var busy time.Duration
	for i := range b.N {
		if i > 0 && i%stepsPerEngine == 0 {
			b.StopTimer()
			eng = fresh()
			b.StartTimer()
		}
		it := eng.Step()
		if it.Seqs != seqs {
			b.Fatalf("batch of %d sequences, want %d", it.Seqs, seqs)
		}
		busy += it.Duration
	}
	b.ReportMetric(busy.Seconds()/float64(b.N)*1e3, "sim-ms/op")
}

// BenchmarkQueue times one Pop and one Schedule on a queue holding 1000 pending events of an
// integer, and 8 pending events of a payload with pointers, like the simulated cluster's (it
// holds about 7 on average in a large online run).
func BenchmarkQueue(b *testing.B) {
	b.Run("int/1000", func(b *testing.B) { benchQueue(b, 1000, func(i int) int { return i }) })
	type item struct {
		kind, worker int
		model        string
		eng          *int
		version      uint64
	}
	var eng int
	b.Run("pointers/8", func(b *testing.B) {
		benchQueue(b, 8, func(i int) item { return item{kind: i, model: "model", eng: &eng} })
	})
}

func benchQueue[T any](b *testing.B, pending int, payload func(int) T) {
	rng := sim.Stream(1, "bench-queue")
	deltas := make([]time.Duration, 4096)
	for i := range deltas {
		deltas[i] = time.Duration(rng.IntN(1_000_000))
	}
	var q sim.Queue[T]
	for i := range pending {
		q.Schedule(deltas[i%len(deltas)], payload(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e, _ := q.Pop()
		q.Schedule(q.Now()+deltas[i%len(deltas)], e.Payload)
	}
}
