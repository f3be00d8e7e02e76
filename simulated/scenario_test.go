package simulated_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/simulated"
	"github.com/mosaic-sched/mosaic/traces"
)

var update = flag.Bool("update", false, "rewrite the expected output of the driver scenarios in testdata/")

// Driver scenarios: each testdata/*.txt file is a script of commands; the output of a command
// follows it up to a line "----" ... "----". Commands:
//
//	cluster workers=N [gpu=NAME] [unload=DURATION]
//	model NAME arch=CATALOG [memory=FRACTION] [out=N]   (out: the profiled output length planners use)
//	query experts=MODEL:OUT[:ANSWER],... [agg=MODEL:OUT[:ANSWER]] [gold=X] [at=DURATION] [prompt=N]
//	graph calls=CALL,... [gold=X] [at=DURATION] [prompt=N]
//	run policy=round-robin|data-parallel|mosaic [threshold=T]   (prints the event timeline and a summary)
//
// A query is k expert calls and a gated aggregator that reads them (forwarding up to 50 tokens
// each); a graph's CALL is MODEL:OUT[:ANSWER][<I.J...][!] (it reads calls I, J, ... of the
// graph, forwarding up to 50 tokens of each; "!" gates it) or tool:MS[<I.J...] (a tool step).
//
// Rerun with -update to rewrite the expected output after a deliberate change.
func TestDriverScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

type scenario struct {
	workers int
	gpu     string
	unload  time.Duration
	models  []policies.ModelInfo
	setups  map[string]simulated.ModelSetup
	wl      traces.Workload
}

func runScenario(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out strings.Builder
	sc := &scenario{workers: 1, gpu: "A100-80GB", unload: time.Second, setups: map[string]simulated.ModelSetup{}}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		// Skip an existing expected-output block.
		if strings.TrimSpace(line) == "----" {
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "----"; i++ {
			}
			continue
		}
		out.WriteString(line + "\n")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		res, err := sc.exec(t, trimmed)
		if err != nil {
			res = "error: " + err.Error() + "\n"
		}
		if res != "" {
			out.WriteString("----\n" + res + "----\n")
		}
	}
	got := strings.TrimRight(out.String(), "\n") + "\n"
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	require.Equal(t, string(data), got, "rerun with -update if the change is intended")
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (sc *scenario) exec(t *testing.T, line string) (string, error) {
	fields := strings.Fields(line)
	a := args(fields[1:])
	switch fields[0] {
	case "cluster":
		n, err := strconv.Atoi(a["workers"])
		if err != nil {
			return "", err
		}
		sc.workers = n
		if g := a["gpu"]; g != "" {
			sc.gpu = g
		}
		if u := a["unload"]; u != "" {
			d, err := time.ParseDuration(u)
			if err != nil {
				return "", err
			}
			sc.unload = d
		}
	case "model":
		cat := sim.DefaultCatalog()
		g, err := cat.GPU(sc.gpu)
		if err != nil {
			return "", err
		}
		arch, err := cat.Model(a["arch"])
		if err != nil {
			return "", err
		}
		mem := 0.9
		if s := a["memory"]; s != "" {
			if mem, err = strconv.ParseFloat(s, 64); err != nil {
				return "", err
			}
		}
		cm, err := sim.NewCostModel(arch, g, sim.DefaultProfile().For(g))
		if err != nil {
			return "", err
		}
		blocks, err := cm.KVBlocks(mem, 8192, 16)
		if err != nil {
			return "", err
		}
		ec := sim.EngineConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, ChunkedPrefill: true, BlockSize: 16, NumBlocks: blocks, WatermarkBlocks: blocks / 100}
		name := fields[1]
		info := policies.ModelInfo{Name: name, Arch: arch, Cost: cm, Engine: ec, Memory: mem, LoadTime: cm.LoadTime()}
		if o := a["out"]; o != "" {
			n, err := strconv.Atoi(o)
			if err != nil {
				return "", err
			}
			info.Output = traces.Fixed(n)
		}
		sc.models = append(sc.models, info)
		sc.setups[name] = simulated.ModelSetup{Cost: cm, Engine: ec}
	case "query":
		return "", sc.addQuery(a)
	case "graph":
		return "", sc.addGraph(a)
	case "run":
		return sc.run(t, a)
	default:
		return "", fmt.Errorf("unknown command %q", fields[0])
	}
	return "", nil
}

func parseCall(spec string) (model string, out int, answer string, err error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 {
		return "", 0, "", fmt.Errorf("call %q: want MODEL:OUT[:ANSWER]", spec)
	}
	out, err = strconv.Atoi(parts[1])
	if len(parts) > 2 {
		answer = parts[2]
	}
	return parts[0], out, answer, err
}

// queryBase starts a query from the common arguments: prompt, gold and arrival.
func (sc *scenario) queryBase(a map[string]string) (traces.Query, int, error) {
	q := traces.Query{ID: len(sc.wl.Queries), Gold: a["gold"]}
	prompt := 100
	if p := a["prompt"]; p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return q, 0, err
		}
		prompt = n
	}
	if at := a["at"]; at != "" {
		d, err := time.ParseDuration(at)
		if err != nil {
			return q, 0, err
		}
		q.Arrival = d
	}
	return q, prompt, nil
}

func (sc *scenario) addQuery(a map[string]string) error {
	q, prompt, err := sc.queryBase(a)
	if err != nil {
		return err
	}
	var inputs []traces.Input
	for i, e := range strings.Split(a["experts"], ",") {
		m, out, ans, err := parseCall(e)
		if err != nil {
			return err
		}
		q.Calls = append(q.Calls, traces.Call{Role: traces.RoleExpert, Model: m, PromptTokens: prompt, OutputTokens: out, Answer: ans})
		inputs = append(inputs, traces.Input{From: i, Tokens: min(out, 50)})
	}
	m, out, ans, err := parseCall(a["agg"])
	if err != nil {
		return err
	}
	q.Calls = append(q.Calls, traces.Call{Role: traces.RoleAggregator, Model: m, PromptTokens: prompt, Inputs: inputs, OutputTokens: out, Answer: ans, Gate: true})
	return sc.add(q)
}

// add numbers the workload's calls again with the new query.
func (sc *scenario) add(q traces.Query) error {
	sc.wl.Queries = append(sc.wl.Queries, q)
	if err := sc.wl.Finish(); err != nil {
		sc.wl.Queries = sc.wl.Queries[:len(sc.wl.Queries)-1]
		return err
	}
	return nil
}

func (sc *scenario) addGraph(a map[string]string) error {
	q, prompt, err := sc.queryBase(a)
	if err != nil {
		return err
	}
	for _, spec := range strings.Split(a["calls"], ",") {
		gated := strings.HasSuffix(spec, "!")
		spec = strings.TrimSuffix(spec, "!")
		spec, reads, _ := strings.Cut(spec, "<")
		var c traces.Call
		if ms, ok := strings.CutPrefix(spec, "tool:"); ok {
			n, err := strconv.Atoi(ms)
			if err != nil {
				return err
			}
			c = traces.Call{Role: traces.RoleTool, Tool: time.Duration(n) * time.Millisecond}
		} else {
			m, out, ans, err := parseCall(spec)
			if err != nil {
				return err
			}
			role := traces.RoleAgent
			if reads != "" {
				role = traces.RoleAggregator
			}
			c = traces.Call{Role: role, Model: m, PromptTokens: prompt, OutputTokens: out, Answer: ans, Gate: gated}
		}
		if reads != "" {
			for _, r := range strings.Split(reads, ".") {
				from, err := strconv.Atoi(r)
				if err != nil {
					return err
				}
				tokens := 0
				if !c.IsTool() && from < len(q.Calls) {
					tokens = min(q.Calls[from].OutputTokens, 50)
				}
				c.Inputs = append(c.Inputs, traces.Input{From: from, Tokens: tokens})
			}
		}
		q.Calls = append(q.Calls, c)
	}
	return sc.add(q)
}

// recorder logs what a policy sees and does.
type recorder struct {
	p   policies.Policy
	out *strings.Builder
}

func (r *recorder) Name() string { return r.p.Name() }

func (r *recorder) Start(v policies.View) ([]policies.Action, error) {
	acts, err := r.p.Start(v)
	r.actions(acts)
	return acts, err
}

func (r *recorder) OnEvent(e policies.Event, v policies.View) []policies.Action {
	desc := ""
	switch e.Kind {
	case policies.EventLoaded, policies.EventUnloaded:
		desc = fmt.Sprintf("w%d %s", e.Worker, e.Model)
	case policies.EventDone, policies.EventFailed:
		desc = fmt.Sprintf("w%d call %d (q%d %s %s) started %.3fs first token %.3fs", e.Worker, e.Call.ID, e.Call.Query, e.Call.Role, e.Call.Model,
			e.Timing.Started.Seconds(), e.Timing.FirstToken.Seconds())
	case policies.EventReleased:
		var ids []string
		for _, c := range e.Calls {
			ids = append(ids, strconv.Itoa(c.ID))
		}
		desc = "calls " + strings.Join(ids, ",")
	case policies.EventSkipped:
		desc = fmt.Sprintf("q%d", e.Query)
		if !e.Call.Final {
			desc += fmt.Sprintf(" call %d (layer %d)", e.Call.ID, e.Call.Layer)
		}
	}
	fmt.Fprintf(r.out, "%10.3fs %-8s %s\n", e.At.Seconds(), e.Kind, desc)
	acts := r.p.OnEvent(e, v)
	r.actions(acts)
	return acts
}

func (r *recorder) actions(acts []policies.Action) {
	for _, a := range acts {
		fmt.Fprintf(r.out, "           -> %s\n", a)
	}
}

func (sc *scenario) run(t *testing.T, a map[string]string) (string, error) {
	var p policies.Policy
	switch a["policy"] {
	case roundrobin.Name:
		p = roundrobin.New()
	case dataparallel.Name:
		p = dataparallel.New()
	case placement.Name:
		p = placement.New(placement.Options{TimeLimit: time.Second})
	default:
		return "", fmt.Errorf("unknown policy %q", a["policy"])
	}
	rule := policies.Rule(policies.NeverSkip())
	if s := a["threshold"]; s != "" {
		th, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "", err
		}
		rule = policies.ConfidenceSkip{Threshold: th}
	}
	var out strings.Builder
	cl, err := simulated.New(simulated.Config{Workers: simulated.Identical(sc.workers, sc.setups), UnloadTime: sc.unload})
	if err != nil {
		return "", err
	}
	d, err := policies.NewDriver(cl, &recorder{p: p, out: &out}, rule, &sc.wl, sc.models, sc.workers)
	if err != nil {
		return "", err
	}
	res, err := d.Run(context.Background())
	if err != nil {
		return out.String() + "error: " + err.Error() + "\n", nil
	}
	checkInvariants(t, res, &sc.wl, rule)
	s := res.Summary()
	fmt.Fprintf(&out, "expert stage %.3fs, aggregator stage %.3fs, end to end %.3fs; %d aggregator calls, %d skipped; accuracy %.3f (always aggregating %.3f); %d loads; %d calls skipped\n",
		s.ExpertStage.Seconds(), s.AggregatorStage.Seconds(), s.E2E.Seconds(), s.AggregatorCalls, s.AggregatorSkipped, s.Accuracy, res.AlwaysAggregate, s.ModelLoads, s.SkippedCalls)
	return out.String(), nil
}
