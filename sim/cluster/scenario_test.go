package cluster_test

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
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/sim/cluster"
	"github.com/mosaic-sched/mosaic/traces"
)

var update = flag.Bool("update", false, "rewrite the expected output of the driver scenarios in testdata/")

// Driver scenarios: each testdata/*.txt file is a script of commands; the output of a command
// follows it up to a line "----" ... "----". Commands:
//
//	cluster workers=N [gpu=NAME] [unload=DURATION]
//	model NAME arch=CATALOG [memory=FRACTION]
//	query experts=MODEL:OUT[:ANSWER],... [agg=MODEL:OUT[:ANSWER]] [gold=X] [at=DURATION] [prompt=N]
//	run policy=round-robin|data-parallel [threshold=T]   (prints the event timeline and a summary)
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
	setups  map[string]cluster.ModelSetup
	wl      traces.Workload
	k       int
}

func runScenario(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out strings.Builder
	sc := &scenario{workers: 1, gpu: "A100-80GB", unload: time.Second, setups: map[string]cluster.ModelSetup{}}
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
		sc.models = append(sc.models, policies.ModelInfo{Name: name, Arch: arch, Cost: cm, Engine: ec, Memory: mem, LoadTime: cm.LoadTime()})
		sc.setups[name] = cluster.ModelSetup{Cost: cm, Engine: ec}
	case "query":
		return "", sc.addQuery(a)
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

func (sc *scenario) addQuery(a map[string]string) error {
	q := traces.Query{ID: len(sc.wl.Queries), PromptTokens: 100, Gold: a["gold"]}
	if p := a["prompt"]; p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		q.PromptTokens = n
	}
	if at := a["at"]; at != "" {
		d, err := time.ParseDuration(at)
		if err != nil {
			return err
		}
		q.Arrival = d
	}
	experts := strings.Split(a["experts"], ",")
	if sc.k == 0 {
		sc.k = len(experts)
	}
	fwd := 0
	for i, e := range experts {
		m, out, ans, err := parseCall(e)
		if err != nil {
			return err
		}
		q.Experts = append(q.Experts, traces.Call{ID: q.ID*(sc.k+1) + i, Query: q.ID, Stage: traces.StageExpert, Model: m,
			InputTokens: q.PromptTokens, OutputTokens: out, ForwardTokens: min(out, 50), Answer: ans})
		fwd += min(out, 50)
	}
	m, out, ans, err := parseCall(a["agg"])
	if err != nil {
		return err
	}
	q.Aggregator = traces.Call{ID: q.ID*(sc.k+1) + sc.k, Query: q.ID, Stage: traces.StageAggregator, Model: m,
		InputTokens: q.PromptTokens + fwd, OutputTokens: out, Answer: ans}
	sc.wl.Queries = append(sc.wl.Queries, q)
	return nil
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
		desc = fmt.Sprintf("w%d call %d (q%d %s %s) started %.3fs first token %.3fs", e.Worker, e.Call.ID, e.Call.Query, e.Call.Stage, e.Call.Model,
			e.Timing.Started.Seconds(), e.Timing.FirstToken.Seconds())
	case policies.EventReleased:
		var ids []string
		for _, c := range e.Calls {
			ids = append(ids, strconv.Itoa(c.ID))
		}
		desc = "calls " + strings.Join(ids, ",")
	case policies.EventSkipped:
		desc = fmt.Sprintf("q%d", e.Query)
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
	agg := ""
	if len(sc.wl.Queries) > 0 {
		agg = sc.wl.Queries[0].Aggregator.Model
	}
	var p policies.Policy
	switch a["policy"] {
	case roundrobin.Name:
		p = roundrobin.New(agg)
	case dataparallel.Name:
		p = dataparallel.New(agg)
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
	cl, err := cluster.New(cluster.Config{Workers: sc.workers, Models: sc.setups, UnloadTime: sc.unload})
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
	fmt.Fprintf(&out, "expert stage %.3fs, aggregator stage %.3fs, end to end %.3fs; %d aggregator calls, %d skipped; accuracy %.3f (always aggregating %.3f); %d loads\n",
		s.ExpertStage.Seconds(), s.AggregatorStage.Seconds(), s.E2E.Seconds(), s.AggregatorCalls, s.AggregatorSkipped, s.Accuracy, res.AlwaysAggregate, s.ModelLoads)
	return out.String(), nil
}
