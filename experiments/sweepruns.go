package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// What the points of a sweep share while they run: a policy's simulated run, where another
// point (or another policy of the same point) runs the very same simulation.
//
// A run group is the points whose assignments differ at most in the keys that only choose
// aggregation rules (aggregation.threshold, policy[i].threshold): their experiments are equal
// but for the rules of their policies, so they resolve the same workload, cluster and models.
// In such a group a policy's run is a function of its [[policy]] table (name, options, early
// exit, overlap, dispatch) and of the decisions of its rule, and of nothing else: the Driver
// alone consults the rule (Rule.Decide, on a gated call's input answers) and names it in the
// Result (Rule, Threshold); no policy and no backend sees it. Two policies of a group whose
// tables are equal but for label, threshold and dynamic_threshold, and whose rules decide
// alike on every input they can be given, therefore run identically, call for call: the
// second takes the first's run, its Result copied with its own label, rule name and
// threshold. The rule's decisions are compared by ruleKey, exactly; a rule it cannot compare
// is shared only with an equal rule.
//
// A confidence rule (policies.ConfidenceSkip) decides from the number of answers n (at most
// the largest number of inputs of a gated call in the workload, k) and the votes v of the top
// answer: it skips when v > 0 and v/n >= T - 0.001, and the rest of its decision (majority,
// votes, confidence) does not depend on T. So thresholds deciding alike for every 0 <= v <=
// n <= k run alike: with k = 3, T = 0.7 ... 1.0 all skip only unanimous queries, and every T
// above 1 never skips, as round-robin's threshold = 2.0 does. TestRuleKeyDecidesAlike checks
// the claim against Decide on every answer list up to k = 4.
//
// What is shared is exactly what each point would have computed, so its files stay
// byte-identical to a plain run (TestSweepSharesAndMatchesPlainRuns). The runs of a group are
// held until its last point has run; points of a group run together (Sweeper.share).

// ruleKeys matches the keys of an assignment that only choose aggregation rules.
var ruleKeys = regexp.MustCompile(`^(aggregation\.threshold|policy\[\d+\]\.threshold)$`)

// runGroupKey is the run group of a point: its assignments, with the values of the keys that
// only choose rules left out.
func runGroupKey(p Point) string {
	var b strings.Builder
	for _, a := range p.Assign {
		k, _, _ := strings.Cut(a, "=")
		if ruleKeys.MatchString(strings.ToLower(strings.TrimSpace(k))) {
			a = k
		}
		b.WriteString(a)
		b.WriteByte(0)
	}
	return b.String()
}

// runCache holds the runs of each run group from the first point of the group that runs to
// the last, then lets them go.
type runCache struct {
	mu     sync.Mutex
	groups map[string]*runGroup
	// runs counts the policies' runs asked for, simulated those that were simulated.
	runs, simulated atomic.Int64
}

// runGroup is the runs of one group, by runKey.
type runGroup struct {
	pending int // points expected that have not finished
	runs    onceMap[string, *sharedRun]
}

// sharedRun is one simulated run of a policy and the rule it ran under, with its headline
// figures (Result.Summary, which the label and rule do not change) and its rows of
// calls.csv, queries.csv and workers.csv formatted under each label that took it (the rows
// depend on the run, the label and the workload and SLO, which a run group shares).
type sharedRun struct {
	res     *policies.Result
	pol     policies.Policy
	rule    policies.Rule
	summary func() policies.Summary
	lines   *onceMap[string, runLines]
}

// runLines are a policy's lines of calls.csv, queries.csv and workers.csv
// (results.AppendLines).
type runLines struct{ calls, queries, workers []byte }

// lines returns the lines of policy i's rows: formatted once per run and label when the run
// was shared (simulateShared), else now.
func (run *Run) lines(i int) runLines {
	format := func() (runLines, error) {
		g, one := run.Experiment.Graph, run.Results[i:i+1]
		return runLines{
			calls:   results.AppendLines(nil, callRowSeq(one)),
			queries: results.AppendLines(nil, queryRowSeq(g.Workload, g.SLO, one)),
			workers: results.AppendLines(nil, slices.Values(WorkerRows(one))),
		}, nil
	}
	if run.shared == nil || run.shared[i] == nil {
		l, _ := format()
		return l
	}
	l, _ := run.shared[i].lines.get(run.Results[i].Policy, format)
	return l
}

// writeShared writes calls.csv, queries.csv and workers.csv from each policy's lines.
func (run *Run) writeShared(d *results.Dir) error {
	calls, queries, workers := make([][]byte, len(run.Results)), make([][]byte, len(run.Results)), make([][]byte, len(run.Results))
	for i := range run.Results {
		l := run.lines(i)
		calls[i], queries[i], workers[i] = l.calls, l.queries, l.workers
	}
	if err := results.WriteSections(d, results.Calls, calls...); err != nil {
		return err
	}
	if err := results.WriteSections(d, results.Queries, queries...); err != nil {
		return err
	}
	return results.WriteSections(d, results.Workers, workers...)
}

// expect announces a point of group k.
func (c *runCache) expect(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups == nil {
		c.groups = map[string]*runGroup{}
	}
	g := c.groups[k]
	if g == nil {
		g = &runGroup{}
		c.groups[k] = g
	}
	g.pending++
}

// group returns group k's runs (nil when no point of it was announced).
func (c *runCache) group(k string) *runGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[k]
}

// done says a point of group k has finished; the last lets the group's runs go.
func (c *runCache) done(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.groups[k]; g != nil {
		if g.pending--; g.pending <= 0 {
			delete(c.groups, k)
		}
	}
}

// counts returns the policies' runs asked for and those simulated.
func (c *runCache) counts() (runs, simulated int) {
	return int(c.runs.Load()), int(c.simulated.Load())
}

// simulateShared is Simulate for a point of a sweep: each policy's run is taken from g when
// another policy of the group ran the same simulation, else simulated (holding one of slots
// meanwhile) and kept in g for the others. g nil shares nothing.
func (r *Resolved) simulateShared(ctx context.Context, c *runCache, g *runGroup, slots chan struct{}) (*Run, error) {
	// A policy's table is the experiment's of the same index: every policy of the file, none
	// left out (SelectPolicies).
	if r.Graph == nil || g == nil || len(r.Graph.Policies) != len(r.Experiment.Policies) {
		return r.simulate(func(_ int, p ResolvedPolicy) (*policies.Result, policies.Policy, error) {
			c.runs.Add(1)
			c.simulated.Add(1)
			slots <- struct{}{}
			defer func() { <-slots }()
			return r.simulatePolicy(ctx, p, nil)
		}, nil)
	}
	k := maxGateInputs(r.Graph.Workload)
	shared := make([]*sharedRun, len(r.Graph.Policies))
	run, err := r.simulate(func(i int, p ResolvedPolicy) (*policies.Result, policies.Policy, error) {
		c.runs.Add(1)
		sim := func() (*sharedRun, error) {
			slots <- struct{}{}
			defer func() { <-slots }()
			c.simulated.Add(1)
			res, pol, err := r.simulatePolicy(ctx, p, nil)
			if err != nil {
				return nil, err
			}
			return &sharedRun{res: res, pol: pol, rule: p.Rule, summary: sync.OnceValue(res.Summary), lines: &onceMap[string, runLines]{}}, nil
		}
		key, ok := runKey(r.Experiment.Policies[i], p.Rule, k)
		if !ok {
			s, err := sim()
			if err != nil {
				return nil, nil, err
			}
			return s.res, s.pol, nil
		}
		s, err := g.runs.get(key, sim)
		if err != nil {
			return nil, nil, err
		}
		shared[i] = s
		return s.as(p), s.pol, nil
	}, func(i int, res *policies.Result) policies.Summary {
		if shared[i] == nil {
			return res.Summary()
		}
		return shared[i].summary()
	})
	if err != nil {
		return nil, err
	}
	run.shared = shared
	return run, nil
}

// as is the run's Result as policy p's: its label, its rule's name (with the early exit and
// overlap the Driver appends, the same in both) and threshold, as the Driver would have set
// them.
func (s *sharedRun) as(p ResolvedPolicy) *policies.Result {
	res := *s.res
	res.Policy = p.Label
	res.Rule = p.Rule.Name() + strings.TrimPrefix(s.res.Rule, s.rule.Name())
	res.Threshold = math.NaN()
	if cs, ok := p.Rule.(policies.ConfidenceSkip); ok {
		res.Threshold = cs.Threshold
		if cs.Threshold > 1 {
			res.Threshold = math.Inf(1)
		}
	}
	return &res
}

// runKey identifies a policy's run within a run group: its [[policy]] table but for label,
// threshold and dynamic_threshold (which only choose its rule), and its rule's decisions
// (ruleKey) for gated calls of at most k inputs. ok is false when they cannot be encoded.
func runKey(spec PolicySpec, rule policies.Rule, k int) (string, bool) {
	rk, ok := ruleKey(rule, k)
	if !ok {
		return "", false
	}
	spec.Label, spec.Threshold, spec.DynamicThreshold = "", nil, nil
	data, err := json.Marshal(struct {
		Spec PolicySpec
		Rule string
	}{spec, rk})
	if err != nil {
		return "", false
	}
	return string(data), true
}

// ruleKey encodes what a rule decides on gated calls of at most k inputs: a confidence rule
// (policies.ConfidenceSkip) by whether it skips for each number of answers n <= k and votes
// v <= n of their top answer, asked of the rule itself (see the top of this file); any other
// rule by its type and value, equal only to an equal rule.
func ruleKey(rule policies.Rule, k int) (string, bool) {
	if cs, ok := rule.(policies.ConfidenceSkip); ok {
		b := []byte("confidence-skip:")
		for n := 0; n <= k; n++ {
			for v := 0; v <= n; v++ {
				d := cs.Decide(votes(v, n))
				b = append(b, '0'+byte(b2i(d.Skip)))
			}
			b = append(b, '/')
		}
		return string(b), true
	}
	data, err := json.Marshal(rule)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%T:%s", rule, data), true
}

// votes is a list of n answers whose top answer has v votes: v "a"s, then answers given once
// each ("" when v is 0: no answer at all).
func votes(v, n int) []string {
	out := make([]string, n)
	for i := range out {
		switch {
		case i < v:
			out[i] = "a"
		case v > 0:
			out[i] = "b" + string(rune('a'+i))
		}
	}
	return out
}

// maxGateInputs is the most inputs a gated call of the workload has: the most answers its
// rule is given.
func maxGateInputs(wl *traces.Workload) int {
	k := 0
	for qi := range wl.Queries {
		for ci := range wl.Queries[qi].Calls {
			if c := &wl.Queries[qi].Calls[ci]; c.Gate {
				k = max(k, len(c.Inputs))
			}
		}
	}
	return k
}
