package experiments

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/traces"
)

// Workload kinds.
const (
	KindBatch   = "batch"
	KindMoA     = "moa"
	KindLayered = "layered"
	KindTree    = "tree"
	KindDAG     = "dag"
)

// Kinds lists the workload kinds, for messages.
var Kinds = []string{KindBatch, KindMoA, KindLayered, KindTree, KindDAG}

// arrivalKeys are the [workload] keys of arrivals, which every graph kind takes.
var arrivalKeys = []string{"arrival_rate", "arrival_process", "arrival_cv", "arrival_trace", "arrival_column"}

// windowKeys are the [workload] keys of an online run's steady-state window.
var windowKeys = []string{"warmup", "duration"}

// questionKeys are the [workload] keys of the questions of the graph kinds.
var questionKeys = []string{"queries", "questions", "dataset", "template_tokens", "tokens_per_word", "prompt_tokens", "votes", "aggregator"}

// workloadKeys are the [workload] keys each kind takes (their first segment); a key of another
// kind is an error rather than silently ignored.
var workloadKeys = map[string][]string{
	KindBatch:   {"kind", "model", "requests", "input_tokens", "output_tokens", "arrival_rate"},
	KindMoA:     join([]string{"kind", "experts", "experts_per_query", "routing", "trace", "answers"}, questionKeys, arrivalKeys, windowKeys),
	KindLayered: join([]string{"kind", "layers", "proposers", "gate"}, questionKeys, arrivalKeys, windowKeys),
	KindTree:    join([]string{"kind", "shape", "models", "gate", "dense"}, questionKeys, arrivalKeys, windowKeys),
	KindDAG:     join([]string{"kind", "node"}, questionKeys, arrivalKeys, windowKeys),
}

// subKeys restricts the keys of a [workload] table per kind (kind -> table -> allowed keys;
// a table absent here takes all its keys).
var subKeys = map[string]map[string][]string{
	KindLayered: {"votes": {"options", "error_correlation", "difficulty"}},
	KindTree: {"votes": {"options", "error_correlation", "difficulty"},
		"aggregator": {"template_tokens", "disagreement_scale", "accuracy", "keep_majority"}},
	KindDAG: {"votes": {"options", "error_correlation", "difficulty"},
		"aggregator": {"accuracy", "keep_majority"}},
}

// Keys a moa workload read from a file or built from an answer file takes.
var (
	traceKeys   = join([]string{"kind", "trace"}, arrivalKeys, windowKeys)
	answersKeys = join([]string{"kind", "answers", "experts", "experts_per_query", "queries", "dataset", "prompt_tokens", "template_tokens", "votes", "aggregator"}, arrivalKeys, windowKeys)
)

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var indexSuffixRE = regexp.MustCompile(`\[\d+\]$`)

// workloadKeysGiven lists the [workload] keys of the file and of the command line.
func (e *Experiment) workloadKeysGiven() []string {
	keys := e.file.Keys("workload")
	for k := range e.overrides {
		if strings.HasPrefix(k, "workload.") && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkWorkloadKeys rejects [workload] keys that the kind does not use, naming the key.
func (e *Experiment) checkWorkloadKeys(kind string) error {
	allowed := workloadKeys[kind]
	why := fmt.Sprintf("workload kind %q", kind)
	if kind == KindMoA && e.Workload.Trace != "" {
		allowed, why = traceKeys, "a workload read from a trace file (workload.trace)"
	} else if kind == KindMoA && e.Workload.Answers != "" {
		allowed, why = answersKeys, "a workload built from an answer file (workload.answers)"
	}
	for _, key := range e.workloadKeysGiven() {
		parts := strings.Split(strings.TrimPrefix(key, "workload."), ".")
		top := indexSuffixRE.ReplaceAllString(parts[0], "")
		if !slices.Contains(allowed, top) {
			return e.errorf(key, "does not apply to %s (its keys: %s)", why, strings.Join(allowed, ", "))
		}
		if len(parts) > 1 {
			if sub, ok := subKeys[kind][top]; ok && !slices.Contains(sub, parts[1]) {
				return e.errorf(key, "does not apply to workload kind %q (its %s keys: %s)", kind, top, strings.Join(sub, ", "))
			}
		}
	}
	return nil
}

// resolveArrivals sets the queries' arrival times from the [workload] arrival keys. A trace
// file keeps its own arrival times unless an arrival key is given.
func (r *Resolved) resolveArrivals(m *GraphWorkload) error {
	e := r.Experiment
	w := e.Workload
	a := traces.Arrivals{Process: lower(w.ArrivalProcess), Rate: w.ArrivalRate, CV: w.ArrivalCV}
	given := false
	for _, k := range arrivalKeys {
		given = given || e.has("workload."+k)
	}
	if a.Process == "" && w.ArrivalTrace != "" {
		a.Process = traces.ArrivalsTrace
	}
	switch a.Process {
	case "", traces.ArrivalsPoisson, traces.ArrivalsGamma, traces.ArrivalsTrace:
	default:
		return e.errorf("workload.arrival_process", "unknown arrival process %q (known: %s, %s, %s)", w.ArrivalProcess, traces.ArrivalsPoisson, traces.ArrivalsGamma, traces.ArrivalsTrace)
	}
	if a.Process != traces.ArrivalsGamma && (w.ArrivalCV != 0 || e.has("workload.arrival_cv")) {
		return e.errorf("workload.arrival_cv", "applies to gamma arrivals only (arrival_process = \"gamma\")")
	}
	if a.Process != traces.ArrivalsTrace && w.ArrivalColumn != "" {
		return e.errorf("workload.arrival_column", "applies to trace arrivals only (arrival_trace = ...)")
	}
	switch a.Process {
	case traces.ArrivalsGamma:
		if !(w.ArrivalRate > 0) {
			return e.errorf("workload.arrival_rate", "gamma arrivals need a positive rate (queries per second), got %g", w.ArrivalRate)
		}
		if !(w.ArrivalCV > 0) {
			return e.errorf("workload.arrival_cv", "gamma arrivals need the gaps' coefficient of variation (> 0; 1 is Poisson), got %g", w.ArrivalCV)
		}
	case traces.ArrivalsTrace:
		if w.ArrivalTrace == "" {
			return e.errorf("workload.arrival_trace", "missing: trace arrivals replay the timestamps of a CSV file, e.g. \"data:traces/azure_conv_2023.csv\"")
		}
		path, err := e.dataPath("workload.arrival_trace", w.ArrivalTrace)
		if err != nil {
			return err
		}
		col := w.ArrivalColumn
		if col == "" {
			col = "TIMESTAMP"
		}
		if a.Gaps, err = e.readTimestamps(path, col); err != nil {
			return e.errorf("workload.arrival_trace", "%v", err)
		}
	}
	m.Arrivals = a
	if m.Workload.Format != 0 && !given {
		return nil // a trace file's own arrivals
	}
	if err := a.Apply(m.Workload, uint64(e.Seed)); err != nil {
		return e.errorf("workload.arrival_rate", "%v", err)
	}
	return nil
}

// questions resolves the question source of a graph workload: a question list, or question
// lengths from prompt_tokens.
func (r *Resolved) questions() (qs []traces.Question, prompt traces.LengthDist, err error) {
	e := r.Experiment
	w := e.Workload
	if w.Questions != "" {
		path, err := e.dataPath("workload.questions", w.Questions)
		if err != nil {
			return nil, nil, err
		}
		qs, err := e.readQuestions(path)
		if err != nil {
			return nil, nil, e.errorf("workload.questions", "%v", err)
		}
		if w.Dataset != "" {
			all := qs
			if qs = traces.FilterDataset(qs, w.Dataset); len(qs) == 0 {
				return nil, nil, e.errorf("workload.dataset", "no question of dataset %q in %s (it has: %s)", w.Dataset, path, strings.Join(datasets(all), ", "))
			}
		}
		if w.PromptTokens != nil {
			return nil, nil, e.errorf("workload.prompt_tokens", "give either a question list or a prompt-length distribution, not both")
		}
		return qs, nil, nil
	}
	if w.Queries <= 0 {
		return nil, nil, e.errorf("workload.queries", "must be positive without a question list, got %d", w.Queries)
	}
	if w.PromptTokens == nil {
		return nil, nil, e.errorf("workload.prompt_tokens", "missing: give a question list (questions = ...) or a prompt-length distribution")
	}
	d, err := w.PromptTokens.resolve(e, "workload.prompt_tokens")
	if err != nil {
		return nil, nil, err
	}
	return nil, d, nil
}

// node builds the template node of a model of the experiment, with the model's output and
// forward distributions and, when it has an accuracy, answers of its own.
func (r *Resolved) node(name, key, role string) (traces.NodeSpec, error) {
	e := r.Experiment
	rm, ok := r.Model(name)
	if !ok {
		return traces.NodeSpec{}, e.errorf(key, "model %q is not a [[model]] of the experiment", name)
	}
	idx := r.modelIndex(name)
	if rm.Output == nil {
		return traces.NodeSpec{}, e.errorf(modelKey(idx, "output_tokens"), "missing: model %q needs an output-length distribution", name)
	}
	n := traces.NodeSpec{Name: rm.Name, Role: role, Model: rm.Name, TemplateTokens: e.Workload.TemplateTokens, Question: true,
		Output: rm.Output, Forward: rm.Forward}
	if a := e.Models[idx].Accuracy; a != nil {
		if *a < 0 || *a > 1 {
			return traces.NodeSpec{}, e.errorf(modelKey(idx, "accuracy"), "must be in [0, 1], got %g", *a)
		}
		n.Accuracy, n.Answers = *a, true
	}
	if e.Models[idx].AccuracyByCategory != nil {
		return traces.NodeSpec{}, e.errorf(modelKey(idx, "accuracy_by_category"), "applies to kind = \"moa\" workloads only (this one is %q)", e.Workload.Kind)
	}
	return n, nil
}

// genGraph generates a layered, tree or dag workload.
func (r *Resolved) genGraph(kind string, m *GraphWorkload) error {
	e := r.Experiment
	w := e.Workload
	qs, prompt, err := r.questions()
	if err != nil {
		return err
	}
	spec := &traces.GraphSpec{Name: e.Name, Queries: w.Queries, Questions: qs, PromptTokens: prompt, Dataset: w.Dataset,
		TokensPerWord: w.TokensPerWord,
		Votes:         traces.VoteSpec{Options: w.Votes.Options, ErrorCorrelation: w.Votes.ErrorCorrelation, Difficulty: w.Votes.Difficulty}}
	gate := lower(w.Gate)
	switch gate {
	case "":
		gate = "final"
	case "final", "all", "none":
	default:
		return e.errorf("workload.gate", "unknown gate %q (known: final, all, none)", w.Gate)
	}
	agg := w.Aggregator
	var nodes []traces.NodeSpec
	switch kind {
	case KindLayered:
		if nodes, err = r.layeredNodes(gate); err != nil {
			return err
		}
	case KindTree:
		if nodes, err = r.treeNodes(gate); err != nil {
			return err
		}
	case KindDAG:
		if nodes, err = r.dagNodes(); err != nil {
			return err
		}
	}
	spec.Nodes = nodes
	// How nodes that read answers answer: [workload.aggregator] accuracy and keep_majority,
	// required when the graph has such nodes.
	if synthesizes(nodes) {
		if agg.Accuracy == nil {
			return e.errorf("workload.aggregator.accuracy", "missing: nodes of this graph read answers; give the probability that such a node answers right when its inputs' majority is wrong or split")
		}
		if !e.has("workload.aggregator.keep_majority") {
			return e.errorf("workload.aggregator.keep_majority", "missing: give the probability that a node keeps its inputs' right majority")
		}
		spec.Synth = traces.SimpleSynthesizer(*agg.Accuracy, agg.KeepMajority)
	}
	wl, err := traces.GenerateGraph(*spec, uint64(e.Seed))
	if err != nil {
		return e.errorf("workload", "%v", err)
	}
	if err := r.checkLengths(wl); err != nil {
		return err
	}
	// Where a node's outputs differ from its model's own, planners need them by layer.
	if len(wl.Queries) > 0 {
		for i, c := range wl.Queries[0].Calls {
			n := nodes[i]
			if rm, ok := r.Model(n.Model); ok && n.Output != nil && n.Output != rm.Output {
				k := policies.LayerModel{Layer: c.Layer, Model: n.Model}
				if _, seen := m.Outputs[k]; !seen {
					m.Outputs[k] = n.Output
				}
			}
		}
	}
	m.Graph, m.Workload = spec, wl
	return nil
}

// synthesizes reports whether a node of the template reads answering inputs.
func synthesizes(nodes []traces.NodeSpec) bool {
	answers := make([]bool, len(nodes))
	for i, n := range nodes {
		reads := false
		for _, in := range n.Inputs {
			reads = reads || answers[in]
		}
		answers[i] = n.Model != "" && (reads || (len(n.Inputs) == 0 && n.Answers))
		if n.Model != "" && reads {
			return true
		}
	}
	return false
}

// aggregatorNode turns a model's node into one that reads others: the aggregator template on
// top of the question, and [workload.aggregator]'s disagreement scale.
func (r *Resolved) aggregatorNode(n traces.NodeSpec) traces.NodeSpec {
	a := r.Experiment.Workload.Aggregator
	n.TemplateTokens += a.TemplateTokens
	n.DisagreementScale = a.DisagreementScale
	return n
}

// layeredNodes builds Together-MoA's template: layers x proposers, then the aggregator.
func (r *Resolved) layeredNodes(gate string) ([]traces.NodeSpec, error) {
	e := r.Experiment
	w := e.Workload
	if w.Layers < 1 {
		return nil, e.errorf("workload.layers", "must be at least 1 (layers of proposers before the aggregator), got %d", w.Layers)
	}
	if len(w.Proposers) == 0 {
		return nil, e.errorf("workload.proposers", "missing: list the proposer models of every layer")
	}
	spec := traces.LayeredSpec{Layers: w.Layers}
	for _, p := range w.Proposers {
		n, err := r.node(p, "workload.proposers", traces.RoleProposer)
		if err != nil {
			return nil, err
		}
		spec.Proposers = append(spec.Proposers, n)
	}
	if a := w.Aggregator; a.Model != "" {
		n, err := r.node(a.Model, "workload.aggregator.model", traces.RoleAggregator)
		if err != nil {
			return nil, err
		}
		if a.OutputTokens != nil {
			if n.Output, err = a.OutputTokens.resolve(e, "workload.aggregator.output_tokens"); err != nil {
				return nil, err
			}
		}
		n = r.aggregatorNode(n)
		n.Gate = gate != "none"
		spec.Aggregator = n
	} else if e.has("workload.aggregator.output_tokens") {
		return nil, e.errorf("workload.aggregator.output_tokens", "there is no aggregator (workload.aggregator.model)")
	}
	nodes, err := spec.Nodes()
	if err != nil {
		return nil, e.errorf("workload", "%v", err)
	}
	for i := range nodes {
		if len(nodes[i].Inputs) > 0 && nodes[i].Role == traces.RoleProposer {
			nodes[i] = r.aggregatorNode(nodes[i])
			nodes[i].Gate = gate == "all"
		}
	}
	return nodes, nil
}

// treeNodes builds Faster-MoA's fan-in tree.
func (r *Resolved) treeNodes(gate string) ([]traces.NodeSpec, error) {
	e := r.Experiment
	w := e.Workload
	if len(w.Shape) == 0 {
		return nil, e.errorf("workload.shape", "missing: the nodes per layer, e.g. [9, 3, 1] (Faster-MoA's tree)")
	}
	if len(w.Models) != len(w.Shape) {
		return nil, e.errorf("workload.models", "give one list of models per layer of shape %v (%d), got %d", w.Shape, len(w.Shape), len(w.Models))
	}
	spec := traces.TreeSpec{Shape: w.Shape, Dense: w.Dense}
	for l, models := range w.Models {
		if len(models) == 0 {
			return nil, e.errorf("workload.models", "layer %d has no models", l+1)
		}
		var layer []traces.NodeSpec
		for _, name := range models {
			role := traces.RoleAgent
			if l > 0 {
				role = traces.RoleAggregator
			}
			n, err := r.node(name, "workload.models", role)
			if err != nil {
				return nil, err
			}
			if l > 0 {
				n = r.aggregatorNode(n)
				n.Gate = gate == "all" || (gate == "final" && l == len(w.Shape)-1)
			}
			layer = append(layer, n)
		}
		spec.Layers = append(spec.Layers, layer)
	}
	nodes, err := spec.Nodes()
	if err != nil {
		return nil, e.errorf("workload.shape", "%v", err)
	}
	return nodes, nil
}

// dagNodes builds a dag workload's template from its [[workload.node]] tables, expanding
// fan-outs.
func (r *Resolved) dagNodes() ([]traces.NodeSpec, error) {
	e := r.Experiment
	w := e.Workload
	if len(w.Nodes) == 0 {
		return nil, e.errorf("workload.node", "missing: a dag workload lists its nodes as [[workload.node]] tables")
	}
	var nodes []traces.NodeSpec
	copies := map[string][]int{} // node name -> template indices of its copies
	for i, dn := range w.Nodes {
		key := func(field string) string { return fmt.Sprintf("workload.node[%d].%s", i, field) }
		if dn.Name == "" {
			return nil, e.errorf(key("name"), "missing: every node has a name that later nodes' inputs refer to")
		}
		if _, dup := copies[dn.Name]; dup {
			return nil, e.errorf(key("name"), "node %q is defined twice", dn.Name)
		}
		count := dn.Count
		if count == 0 && !e.has(key("count")) {
			count = 1
		}
		if count < 1 || count > 1024 {
			return nil, e.errorf(key("count"), "must be in [1, 1024] copies, got %d", dn.Count)
		}
		var n traces.NodeSpec
		switch {
		case dn.Model != "" && dn.ToolMS != nil:
			return nil, e.errorf(key("tool_ms"), "node %q has a model and a tool duration: it is one or the other", dn.Name)
		case dn.Model != "":
			var err error
			if n, err = r.node(dn.Model, key("model"), cmpOr(dn.Role, "call")); err != nil {
				return nil, err
			}
			n.TemplateTokens = dn.TemplateTokens
			if dn.Question != nil {
				n.Question = *dn.Question
			}
			if dn.OutputTokens != nil {
				if n.Output, err = dn.OutputTokens.resolve(e, key("output_tokens")); err != nil {
					return nil, err
				}
			}
			if dn.ForwardTokens != nil {
				if n.Forward, err = dn.ForwardTokens.resolve(e, key("forward_tokens")); err != nil {
					return nil, err
				}
			}
			n.Gate, n.DisagreementScale = dn.Gate, dn.DisagreementScale
			if dn.DisagreementScale < 0 {
				return nil, e.errorf(key("disagreement_scale"), "must not be negative, got %g", dn.DisagreementScale)
			}
		case dn.ToolMS != nil:
			for _, f := range []string{"template_tokens", "question", "output_tokens", "forward_tokens", "gate", "disagreement_scale"} {
				if e.has(key(f)) {
					return nil, e.errorf(key(f), "does not apply to a tool step (node %q has tool_ms)", dn.Name)
				}
			}
			d, err := dn.ToolMS.resolve(e, key("tool_ms"))
			if err != nil {
				return nil, err
			}
			n = traces.NodeSpec{Name: dn.Name, Role: cmpOr(dn.Role, traces.RoleTool), Tool: d}
		default:
			return nil, e.errorf(key("model"), "missing: node %q needs a model (an LLM call) or tool_ms (a tool step)", dn.Name)
		}
		var inputs [][]int
		for _, in := range dn.Inputs {
			src, ok := copies[in]
			if !ok {
				return nil, e.errorf(key("inputs"), "node %q reads %q, which is not an earlier node", dn.Name, in)
			}
			inputs = append(inputs, src)
		}
		if n.Gate && len(inputs) == 0 {
			return nil, e.errorf(key("gate"), "node %q has no inputs whose answers could skip it", dn.Name)
		}
		for c := range count {
			cp := n
			cp.Name = dn.Name
			if count > 1 {
				cp.Name = fmt.Sprintf("%s#%d", dn.Name, c+1)
			}
			cp.Inputs = nil
			for _, src := range inputs {
				if len(src) == count && count > 1 {
					cp.Inputs = append(cp.Inputs, src[c]) // a map over the fan-out
				} else {
					cp.Inputs = append(cp.Inputs, src...)
				}
			}
			copies[dn.Name] = append(copies[dn.Name], len(nodes))
			nodes = append(nodes, cp)
		}
	}
	return nodes, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
