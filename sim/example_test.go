package sim_test

import (
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/sim"
)

// Serve three requests on one engine: Llama-3-8B on an A100-80GB, with the built-in profile's
// coefficients and vLLM's default scheduler. Request 3 arrives while the first two decode and
// joins their batch at the next iteration.
func Example() {
	cat := sim.DefaultCatalog()
	gpu, err := cat.GPU("A100-80GB")
	if err != nil {
		panic(err)
	}
	model, err := cat.Model("llama-3-8b")
	if err != nil {
		panic(err)
	}
	cost, err := sim.NewCostModel(model, gpu, sim.DefaultProfile().For(gpu))
	if err != nil {
		panic(err)
	}
	// vLLM's defaults, with the KV cache that fits beside the weights at 90% of the memory.
	cfg, err := sim.DefaultEngine().WithKVCache(cost, 0.9)
	if err != nil {
		panic(err)
	}
	eng, err := sim.NewEngine(cfg, cost)
	if err != nil {
		panic(err)
	}

	res, err := sim.Serve(eng, []sim.Arrival{
		{At: 0, Request: sim.Request{ID: 1, PromptTokens: 1000, OutputTokens: 200}},
		{At: 0, Request: sim.Request{ID: 2, PromptTokens: 500, OutputTokens: 100}},
		{At: 500 * time.Millisecond, Request: sim.Request{ID: 3, PromptTokens: 2000, OutputTokens: 50}},
	})
	if err != nil {
		panic(err)
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	for _, t := range res.Times {
		fmt.Printf("request %d: arrives %v, first token %v, done %v\n", t.ID, ms(t.Arrival), ms(t.FirstToken), ms(t.Finish))
	}
	fmt.Printf("makespan %v, %d output tokens, %d iterations\n", ms(res.Makespan), res.OutputTokens, res.Stats.Steps)
	// Output:
	// request 1: arrives 0s, first token 106ms, done 2.503s
	// request 2: arrives 0s, first token 106ms, done 1.378s
	// request 3: arrives 500ms, first token 648ms, done 1.219s
	// makespan 2.503s, 350 output tokens, 200 iterations
}

// The engine is a pure state machine and the caller owns the clock: Advance runs the next
// iteration, or a whole steady decode phase of identical iterations in closed form, and says
// how long it took and what happened. A backend adds requests as they arrive (Add) and moves
// its clock by each Iteration's Duration; Step runs exactly one iteration, for a caller that
// paces them in real time.
func ExampleEngine() {
	cat := sim.DefaultCatalog()
	gpu, err := cat.GPU("H100-80GB")
	if err != nil {
		panic(err)
	}
	model, err := cat.Model("qwen2.5-7b")
	if err != nil {
		panic(err)
	}
	cost, err := sim.NewCostModel(model, gpu, sim.DefaultProfile().For(gpu))
	if err != nil {
		panic(err)
	}
	cfg, err := sim.DefaultEngine().WithKVCache(cost, 0.9)
	if err != nil {
		panic(err)
	}
	eng, err := sim.NewEngine(cfg, cost)
	if err != nil {
		panic(err)
	}

	for _, r := range []sim.Request{
		{ID: 1, PromptTokens: 300, OutputTokens: 40},
		{ID: 2, PromptTokens: 300, OutputTokens: 10},
	} {
		if err := eng.Add(r); err != nil {
			panic(err)
		}
	}
	var now time.Duration
	for !eng.Idle() {
		it := eng.Advance(0) // 0: no arrival to stop at
		now += it.Duration
		fmt.Printf("t=%v: %d iteration(s) of %d seqs, %d prefill tokens, first token %v, finished %v\n",
			now.Round(100*time.Microsecond), it.Steps, it.Seqs, it.PrefillTokens, it.FirstToken, it.Finished)
	}
	// Output:
	// t=15.9ms: 1 iteration(s) of 2 seqs, 600 prefill tokens, first token [1 2], finished []
	// t=79.1ms: 9 iteration(s) of 2 seqs, 0 prefill tokens, first token [], finished [2]
	// t=286.8ms: 30 iteration(s) of 1 seqs, 0 prefill tokens, first token [], finished [1]
}
