package policies_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

// firstWorker is the smallest policy there is: it loads every model on worker 0 at the start
// and submits each call there as soon as it is ready and its model is loaded. The Driver does
// everything else: it releases calls as their inputs finish, asks the rule about gated calls,
// checks each action and carries it out on the Backend.
type firstWorker struct{}

func (firstWorker) Name() string { return "first-worker" }

func (firstWorker) Start(v policies.View) ([]policies.Action, error) {
	var acts []policies.Action
	for _, m := range v.Models() {
		acts = append(acts, policies.Load(0, m.Name))
	}
	return acts, nil
}

func (firstWorker) OnEvent(e policies.Event, v policies.View) []policies.Action {
	var acts []policies.Action
	for _, c := range v.Ready() { // released, not yet submitted
		if v.Holding(0, c.Model) {
			acts = append(acts, policies.Submit(0, c.ID))
		}
	}
	return acts
}

// The policy runs two MoA queries on the simulated cluster: two experts each (models "llama"
// and "qwen"), then an aggregator on "llama" that reads both. The experts of query 0 agree,
// so the rule skips its aggregator (call 2 never runs); those of query 1 do not.
func ExamplePolicy() {
	// Both models on A100-80GB GPUs, each engine taking 45% of a GPU's memory so that
	// worker 0 holds both.
	cat := sim.DefaultCatalog()
	gpu, err := cat.GPU("A100-80GB")
	if err != nil {
		panic(err)
	}
	var models []policies.ModelInfo
	setups := map[string]simulated.ModelSetup{}
	for _, m := range []struct{ name, catalogID string }{{"llama", "llama-3-8b"}, {"qwen", "qwen2.5-7b"}} {
		arch, err := cat.Model(m.catalogID)
		if err != nil {
			panic(err)
		}
		cost, err := sim.NewCostModel(arch, gpu, sim.DefaultProfile().For(gpu))
		if err != nil {
			panic(err)
		}
		engine, err := sim.DefaultEngine().WithKVCache(cost, 0.45)
		if err != nil {
			panic(err)
		}
		models = append(models, policies.ModelInfo{Name: m.name, Arch: arch, Cost: cost, Engine: engine,
			Memory: 0.45, LoadTime: cost.LoadTime()})
		setups[m.name] = simulated.ModelSetup{Cost: cost, Engine: engine}
	}

	wl := &traces.Workload{Name: "tiny"}
	for q, answers := range [][2]string{{"A", "A"}, {"A", "B"}} {
		wl.Queries = append(wl.Queries, traces.Query{ID: q, Gold: "A", Calls: []traces.Call{
			{Role: traces.RoleExpert, Model: "llama", PromptTokens: 200, OutputTokens: 300, Answer: answers[0]},
			{Role: traces.RoleExpert, Model: "qwen", PromptTokens: 200, OutputTokens: 400, Answer: answers[1]},
			{Role: traces.RoleAggregator, Model: "llama", PromptTokens: 200, OutputTokens: 100, Answer: "A",
				Gate: true, Inputs: []traces.Input{{From: 0, Tokens: 300}, {From: 1, Tokens: 400}}},
		}})
	}
	if err := wl.Finish(); err != nil { // numbers the calls and checks the graphs
		panic(err)
	}

	const workers = 2
	backend, err := simulated.New(simulated.Config{Workers: simulated.Identical(workers, setups), UnloadTime: time.Second})
	if err != nil {
		panic(err)
	}
	rule := policies.ConfidenceSkip{Threshold: 1} // skip an aggregator whose experts all agree
	d, err := policies.NewDriver(backend, firstWorker{}, rule, wl, models, workers)
	if err != nil {
		panic(err)
	}
	res, err := d.Run(context.Background())
	if err != nil {
		panic(err)
	}

	ms := func(t time.Duration) time.Duration { return t.Round(time.Millisecond) }
	for _, l := range res.Loads {
		fmt.Printf("load %s on worker %d: %v to %v\n", l.Model, l.Worker, ms(l.Start), ms(l.End))
	}
	for _, c := range res.Calls {
		fmt.Printf("call %d (query %d, %s on %s): worker %d, %v to %v\n",
			c.Call.ID, c.Call.Query, c.Call.Role, c.Call.Model, c.Worker, ms(c.Timing.Started), ms(c.Timing.End))
	}
	s := res.Summary()
	fmt.Printf("makespan %v, %d calls run, %d aggregator skipped\n", ms(s.E2E), len(res.Calls), s.AggregatorSkipped)
	// Output:
	// load qwen on worker 0: 0s to 27.616s
	// load llama on worker 0: 0s to 28.03s
	// call 0 (query 0, expert on llama): worker 0, 28.03s to 34.858s
	// call 1 (query 0, expert on qwen): worker 0, 27.616s to 35.324s
	// call 3 (query 1, expert on llama): worker 0, 28.03s to 34.858s
	// call 4 (query 1, expert on qwen): worker 0, 27.616s to 35.324s
	// call 5 (query 1, aggregator on llama): worker 0, 35.324s to 36.5s
	// makespan 36.5s, 5 calls run, 1 aggregator skipped
}
