package experiments

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/traces"
)

// GraphWorkload is a resolved workload of call graphs (kind moa, layered, tree or dag) and the
// policies to compare on it.
type GraphWorkload struct {
	// Kind is the workload kind.
	Kind string
	// Workload is the generated (or loaded) workload, the same for every policy, arrivals
	// included.
	Workload *traces.Workload
	// Spec is the moa generator's input (nil otherwise, and for a trace or an answer file);
	// Graph the template generator's input (layered, tree, dag).
	Spec  *traces.GenSpec
	Graph *traces.GraphSpec
	// Outputs are the output-length distributions of the calls of a layer and model where
	// they differ from the model's own (a MoA aggregator's), for planning policies.
	Outputs map[policies.LayerModel]traces.LengthDist
	// Arrivals is when the queries arrive.
	Arrivals traces.Arrivals
	// SLO is the per-query latency objective of the summaries.
	SLO policies.SLO
	// Online says queries arrive over time (arrival keys, or a trace's own timestamps): the
	// policies serve each call when it is ready and the summaries add the steady state of
	// Warmup (the share of the queries, the first to arrive, left out of it).
	Online bool
	Warmup float64
	// caps caches the cluster's capacity under each rule; sample is the streamed workload's
	// first queries it is computed over (nil: the held workload's).
	caps   *capacities
	sample []traces.Query
	// Policies in the order listed; the first is the baseline.
	Policies []ResolvedPolicy
}

// ResolvedPolicy is a policy of the experiment with its aggregation rule.
type ResolvedPolicy struct {
	// Label names the policy in results (its name unless the file gives a label).
	Label string
	Name  string
	Rule  policies.Rule
	// Exit is the run's early exit (nil: none).
	Exit *policies.EarlyExit
	// Overlap turns on prefill-decode overlap.
	Overlap bool
	// New builds a fresh policy value for one run.
	New func() policies.Policy
}

// dataPath resolves a path given in the file: "data:REL" is REL inside the shared data folder
// ($MOSAIC_DATA or ../shared/data), anything else is relative to the experiment file.
func (e *Experiment) dataPath(key, p string) (string, error) {
	if rel, ok := strings.CutPrefix(p, "data:"); ok {
		dir := dataset.Dir()
		if dir == "" {
			if v := os.Getenv(dataset.Env); v != "" {
				return "", e.errorf(key, "%q is in the shared data folder, but %s=%s is not a folder", p, dataset.Env, v)
			}
			return "", e.errorf(key, "%q is in the shared data folder, which was not found beside the working directory or its parents: set %s to it", p, dataset.Env)
		}
		p = filepath.Join(dir, rel)
	} else {
		p = e.path(p)
	}
	if _, err := os.Stat(p); err != nil {
		return "", e.errorf(key, "%v", err)
	}
	return p, nil
}

// resolveGraph resolves a workload of call graphs: the queries (generated, or read from a
// trace or an answer file), their arrivals, the SLO and the policies.
func (r *Resolved) resolveGraph(kind string) error {
	e := r.Experiment
	w := e.Workload
	m := &GraphWorkload{Kind: kind, Outputs: map[policies.LayerModel]traces.LengthDist{}, caps: &capacities{}}
	if err := e.checkWorkloadKeys(kind); err != nil {
		return err
	}
	if err := e.queriesFromDuration(); err != nil {
		return err
	}
	if err := e.checkWorkloadNumbers(); err != nil {
		return err
	}
	// The workload and its arrivals: built here, or, for a point of a sweep, taken from
	// another point that built it from the same inputs (buildWorkload).
	build := func() error {
		var err error
		switch {
		case kind == "moa" && w.Trace != "" && w.Answers != "":
			return e.errorf("workload.answers", "give either a trace or an answer file, not both")
		case kind == "moa" && w.Trace != "":
			err = r.loadTrace(m)
		case kind == "moa" && w.Answers != "":
			err = r.importAnswers(m)
		case kind == "moa":
			err = r.genSpec(m)
		default:
			err = r.genGraph(kind, m)
		}
		if err != nil {
			return err
		}
		return r.resolveArrivals(m)
	}
	if err := r.buildWorkload(kind, m, build); err != nil {
		return err
	}
	m.SLO = policies.SLO{E2E: e.SLO.E2E, TTFT: e.SLO.TTFT}
	m.Online = !m.Arrivals.Offline() || slices.ContainsFunc(m.Workload.Queries, func(q traces.Query) bool { return q.Arrival > 0 })
	m.Warmup = policies.DefaultWarmup
	if w := e.Workload.Warmup; w != nil {
		switch {
		case !(*w >= 0 && *w < 1):
			return e.errorf("workload.warmup", "must be a share of the queries in [0, 1), got %g", *w)
		case !m.Online:
			return e.errorf("workload.warmup", "applies to queries arriving over time (workload.arrival_rate), not to an offline batch")
		}
		m.Warmup = *w
	}
	for key, d := range map[string]time.Duration{"slo.e2e": e.SLO.E2E, "slo.ttft": e.SLO.TTFT} {
		if d < 0 || (d == 0 && e.has(key)) {
			return e.errorf(key, "must be a positive duration such as \"30s\", got %v", d)
		}
		if d > 0 && d < time.Millisecond {
			return e.errorf(key, "%v is too short; write a duration with its unit, e.g. \"30s\" (a bare number means nanoseconds)", d)
		}
	}
	if err := r.resolvePolicies(m); err != nil {
		return err
	}
	r.Graph = m
	return nil
}

// importAnswers builds the workload from real model answers: every query goes to every expert.
func (r *Resolved) importAnswers(m *GraphWorkload) error {
	e := r.Experiment
	w := e.Workload
	path, err := e.dataPath("workload.answers", w.Answers)
	if err != nil {
		return err
	}
	if len(w.Experts) == 0 {
		return e.errorf("workload.experts", "missing: with an answer file, list the experts whose answers the queries carry")
	}
	if w.ExpertsPerQuery != 0 && w.ExpertsPerQuery != len(w.Experts) {
		return e.errorf("workload.experts_per_query", "with an answer file every query goes to every expert: k must be %d (or left out)", len(w.Experts))
	}
	if w.PromptTokens == nil {
		return e.errorf("workload.prompt_tokens", "missing: an answer file has no question lengths, give a prompt-length distribution")
	}
	prompt, err := w.PromptTokens.resolve(e, "workload.prompt_tokens")
	if err != nil {
		return err
	}
	spec := traces.AnswerImport{Name: e.Name, Dataset: w.Dataset, Queries: w.Queries, PromptTokens: prompt,
		TemplateTokens: w.TemplateTokens, Options: w.Votes.Options}
	columns, err := e.listAnswerModels(path)
	if err != nil {
		return e.errorf("workload.answers", "%v", err)
	}
	for _, name := range w.Experts {
		rm, ok := r.Model(name)
		if !ok {
			return e.errorf("workload.experts", "expert %q is not a [[model]] of the experiment", name)
		}
		idx := r.modelIndex(name)
		col := e.Models[idx].AnswersColumn
		if col == "" {
			return e.errorf(modelKey(idx, "answers_column"), "missing: name the column of %q in %s", name, path)
		}
		if !slices.Contains(columns, col) {
			return e.errorf(modelKey(idx, "answers_column"), "%s has no answers of %q (it has: %s)", path, col, strings.Join(columns, ", "))
		}
		if rm.Output == nil {
			return e.errorf(modelKey(idx, "output_tokens"), "missing: expert %q needs an output-length distribution", name)
		}
		spec.Experts = append(spec.Experts, traces.AnswerExpert{Column: col, Model: rm.Name, Output: rm.Output, Forward: rm.Forward})
	}
	if err := r.aggregatorSpec(&spec.Aggregator, m); err != nil {
		return err
	}
	wl, err := e.importAnswers(path, spec, uint64(e.Seed))
	if err != nil {
		return e.errorf("workload.answers", "%v", err)
	}
	if err := r.checkLengths(wl); err != nil {
		return err
	}
	m.Workload = wl
	return nil
}

// aggregatorSpec resolves [workload.aggregator].
func (r *Resolved) aggregatorSpec(out *traces.AggregatorSpec, m *GraphWorkload) error {
	e := r.Experiment
	a := e.Workload.Aggregator
	if a.Model == "" {
		return nil
	}
	rm, ok := r.Model(a.Model)
	if !ok {
		return e.errorf("workload.aggregator.model", "aggregator %q is not a [[model]] of the experiment", a.Model)
	}
	dist := rm.Output
	if a.OutputTokens != nil {
		d, err := a.OutputTokens.resolve(e, "workload.aggregator.output_tokens")
		if err != nil {
			return err
		}
		dist = d
	}
	if dist == nil {
		return e.errorf("workload.aggregator.output_tokens", "missing: the aggregator needs an output-length distribution")
	}
	*out = traces.AggregatorSpec{Model: rm.Name, Output: dist, TemplateTokens: a.TemplateTokens, DisagreementScale: a.DisagreementScale}
	if err := r.aggregatorAnswers(out); err != nil {
		return err
	}
	m.Outputs[policies.LayerModel{Layer: 1, Model: rm.Name}] = dist
	return nil
}

// routing resolves [workload] routing into spec.
func (r *Resolved) routing(spec *traces.GenSpec) error {
	e := r.Experiment
	rt := e.Workload.Routing
	const at = "workload.routing."
	keywordKeys := []string{"validation", "keywords", "vocabulary", "shared_vocabulary", "shared", "zipf", "temperature"}
	switch rt.Method {
	case "", RoutingSkew:
		for _, k := range keywordKeys {
			if e.has(at + k) {
				return e.errorf(at+k, "is a key of method = %q routing (this routing is %q)", RoutingSymbolicMoE, RoutingSkew)
			}
		}
		return nil
	case RoutingSymbolicMoE:
	default:
		return e.errorf(at+"method", "unknown routing method %q (known: %s, %s)", rt.Method, RoutingSkew, RoutingSymbolicMoE)
	}
	for _, k := range []string{"skew", "skill_spread"} {
		if e.has(at + k) {
			return e.errorf(at+k, "does not apply to method = %q: expert demand follows from the experts' accuracies", RoutingSymbolicMoE)
		}
	}
	for i := range e.Models {
		if e.has(modelKey(i, "weight")) {
			return e.errorf(modelKey(i, "weight"), "does not apply with routing method = %q: expert demand follows from the experts' accuracies", RoutingSymbolicMoE)
		}
	}
	if rt.Validation <= 0 {
		return e.errorf(at+"validation", "missing: the number of validation questions the experts' profiles come from (Symbolic-MoE: 350 for MMLU-Pro, 504 MedMCQA, 249 GPQA)")
	}
	kr := traces.DefaultKeywordRouting(rt.Validation)
	set := func(key string, dst *int, v int) error {
		if e.has(at + key) {
			if v < 1 {
				return e.errorf(at+key, "must be at least 1, got %d", v)
			}
			*dst = v
		}
		return nil
	}
	if err := errors.Join(set("keywords", &kr.Keywords, rt.Keywords), set("vocabulary", &kr.Vocabulary, rt.Vocabulary),
		set("shared_vocabulary", &kr.SharedVocabulary, rt.SharedVocabulary)); err != nil {
		return err
	}
	if rt.Shared != nil {
		if !(*rt.Shared >= 0 && *rt.Shared <= 1) {
			return e.errorf(at+"shared", "must be a probability in [0, 1], got %g", *rt.Shared)
		}
		kr.Shared = *rt.Shared
	}
	if rt.Zipf != nil {
		if !(*rt.Zipf >= 0 && *rt.Zipf <= 10) {
			return e.errorf(at+"zipf", "must be in [0, 10], got %g", *rt.Zipf)
		}
		kr.Zipf = *rt.Zipf
	}
	if e.has(at + "temperature") {
		if !(rt.Temperature > 0 && rt.Temperature <= 100) {
			return e.errorf(at+"temperature", "must be in (0, 100], got %g", rt.Temperature)
		}
		kr.Temperature = rt.Temperature
	}
	spec.Keywords, spec.Skew, spec.SkillSpread = &kr, 0, 0
	return nil
}

// checkCategories checks that a model's per-category accuracies name categories of the
// questions, and are probabilities.
func checkCategories(e *Experiment, idx int, acc map[string]float64, qs []traces.Question) error {
	if acc == nil {
		return nil
	}
	known := map[string]bool{}
	for _, q := range qs {
		if q.Category != "" {
			known[q.Category] = true
		} else {
			known[q.Dataset] = true
		}
	}
	if qs == nil {
		known[traces.DefaultSkill] = true
	}
	for _, c := range slices.Sorted(maps.Keys(acc)) {
		if !known[c] {
			return e.errorf(modelKey(idx, "accuracy_by_category"), "%q is not a category of the workload's questions (they have: %s)", c, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		if a := acc[c]; !(a >= 0 && a <= 1) {
			return e.errorf(modelKey(idx, "accuracy_by_category"), "%s: must be in [0, 1], got %g", c, a)
		}
	}
	return nil
}

// aggregatorAnswers resolves the aggregator's answer model: the simple one (accuracy,
// keep_majority) or the model per vote pattern, possibly fitted to accuracy changes.
func (r *Resolved) aggregatorAnswers(out *traces.AggregatorSpec) error {
	e := r.Experiment
	a := e.Workload.Aggregator
	const at = "workload.aggregator."
	type patternKey struct {
		key string
		v   *float64
		dst *float64
	}
	var patternKeys []patternKey
	var sy traces.Synthesizer
	for _, pk := range []patternKey{{"break_unanimous", a.BreakUnanimous, &sy.BreakUnanimous}, {"rescue_unanimous", a.RescueUnanimous, &sy.RescueUnanimous},
		{"break_majority", a.BreakMajority, &sy.BreakMajority}, {"rescue_majority", a.RescueMajority, &sy.RescueMajority},
		{"split_accuracy", a.SplitAccuracy, &sy.SplitAccuracy}} {
		if pk.v != nil {
			patternKeys = append(patternKeys, pk)
		}
	}
	if len(patternKeys) == 0 && a.FitAccuracyChange == nil {
		acc := 0.0
		if a.Accuracy != nil {
			if *a.Accuracy < 0 || *a.Accuracy > 1 {
				return e.errorf(at+"accuracy", "must be in [0, 1], got %g", *a.Accuracy)
			}
			acc = *a.Accuracy
		}
		out.Accuracy, out.KeepMajority = acc, a.KeepMajority
		return nil
	}
	first := at + "fit_accuracy_change"
	if len(patternKeys) > 0 {
		first = at + patternKeys[0].key
	}
	for _, k := range []string{"accuracy", "keep_majority"} {
		if e.has(at + k) {
			return e.errorf(first, "cannot be combined with %s%s: give the simple answer model (accuracy, keep_majority) or the model per vote pattern (break_/rescue_unanimous, break_/rescue_majority, split_accuracy, fit_accuracy_change), not both", at, k)
		}
	}
	for _, pk := range patternKeys {
		if !(*pk.v >= 0 && *pk.v <= 1) {
			return e.errorf(at+pk.key, "must be in [0, 1], got %g", *pk.v)
		}
		*pk.dst = *pk.v
	}
	if a.SplitAccuracy == nil {
		mf := e.Models[r.modelIndex(out.Model)]
		if mf.Accuracy == nil {
			return e.errorf(at+"split_accuracy", "missing: the aggregator's accuracy on a vote without a strict majority (default: [[model]] %q accuracy, which is not set either)", out.Model)
		}
		sy.SplitAccuracy = *mf.Accuracy
	}
	out.Patterns = &sy
	if f := a.FitAccuracyChange; f != nil {
		if f.T1 == nil || f.T23 == nil {
			return e.errorf(at+"fit_accuracy_change", "needs both t1 and t2_3 (percentage points)")
		}
		for _, v := range []struct {
			key string
			x   float64
		}{{"t1", *f.T1}, {"t2_3", *f.T23}} {
			if !(math.Abs(v.x) <= 100) {
				return e.errorf(at+"fit_accuracy_change."+v.key, "must be a change in percentage points within [-100, 100], got %g", v.x)
			}
		}
		out.Fit = &traces.AccuracyFit{T1: *f.T1, T23: *f.T23}
	}
	return nil
}

func (r *Resolved) loadTrace(m *GraphWorkload) error {
	e := r.Experiment
	path, err := e.dataPath("workload.trace", e.Workload.Trace)
	if err != nil {
		return err
	}
	wl, err := e.readJSONL(path)
	if err != nil {
		return e.errorf("workload.trace", "%v", err)
	}
	if wl.Format == 1 {
		slog.Warn("the workload file is in the version 1 format; it was read as the two-layer graph k experts -> aggregator (`mosaic trace convert` rewrites it as version 2)", "file", path)
	}
	for _, q := range wl.Queries {
		for _, c := range q.Calls {
			if c.IsTool() {
				continue
			}
			rm, ok := r.Model(c.Model)
			if !ok {
				return e.errorf("workload.trace", "%s: query %d, call %d: model %q is not a [[model]] of the experiment", path, q.ID, c.Node, c.Model)
			}
			if c.InputTokens+c.OutputTokens > rm.Arch.MaxModelLen {
				return e.errorf("workload.trace", "%s: query %d: a %s call of %d tokens exceeds %s's max_model_len %d",
					path, q.ID, c.Label(), c.InputTokens+c.OutputTokens, rm.Arch.ID, rm.Arch.MaxModelLen)
			}
		}
	}
	m.Workload = wl
	return nil
}

// checkWorkloadNumbers rejects out-of-range workload settings, naming their keys.
func (e *Experiment) checkWorkloadNumbers() error {
	w := e.Workload
	for _, c := range []struct {
		key    string
		v      float64
		lo, hi float64
	}{
		{"workload.routing.skew", w.Routing.Skew, 0, 1e9},
		{"workload.routing.skill_spread", w.Routing.SkillSpread, 0, 10},
		{"workload.votes.error_correlation", w.Votes.ErrorCorrelation, 0, 1},
		{"workload.votes.difficulty", w.Votes.Difficulty, 0, 64},
		{"workload.votes.unanimous", w.Votes.Unanimous, 0, 1},
		{"workload.votes.majority", w.Votes.Majority, 0, 1},
		{"workload.template_tokens", float64(w.TemplateTokens), 0, 1e6},
		{"workload.tokens_per_word", w.TokensPerWord, 0, 100},
		{"workload.aggregator.template_tokens", float64(w.Aggregator.TemplateTokens), 0, 1e6},
		{"workload.aggregator.disagreement_scale", w.Aggregator.DisagreementScale, 0, 100},
		{"workload.aggregator.keep_majority", w.Aggregator.KeepMajority, 0, 1},
		{"workload.arrival_rate", w.ArrivalRate, 0, 1e9},
		{"workload.arrival_cv", w.ArrivalCV, 0, 100},
	} {
		if !(c.v >= c.lo && c.v <= c.hi) {
			return e.errorf(c.key, "must be in [%g, %g], got %g", c.lo, c.hi, c.v)
		}
	}
	if o := w.Votes.Options; o != 0 || e.has("workload.votes.options") {
		if o < 2 || o > traces.MaxOptions {
			return e.errorf("workload.votes.options", "must be in [2, %d] answer letters, got %d", traces.MaxOptions, o)
		}
	}
	if a := w.Aggregator.Accuracy; a != nil && (*a < 0 || *a > 1) {
		return e.errorf("workload.aggregator.accuracy", "must be in [0, 1], got %g", *a)
	}
	return nil
}

func (r *Resolved) genSpec(m *GraphWorkload) error {
	e := r.Experiment
	w := e.Workload
	spec := &traces.GenSpec{
		Name: e.Name, Queries: w.Queries, TemplateTokens: w.TemplateTokens, TokensPerWord: w.TokensPerWord,
		K: w.ExpertsPerQuery, Skew: w.Routing.Skew, SkillSpread: w.Routing.SkillSpread,
		Votes: traces.VoteSpec{Options: w.Votes.Options, ErrorCorrelation: w.Votes.ErrorCorrelation,
			Difficulty: w.Votes.Difficulty, Unanimous: w.Votes.Unanimous, Majority: w.Votes.Majority},
	}
	qs, prompt, err := r.questions()
	if err != nil {
		return err
	}
	spec.Questions, spec.PromptTokens, spec.Dataset = qs, prompt, w.Dataset
	if w.Queries < 0 {
		return e.errorf("workload.queries", "must not be negative, got %d", w.Queries)
	}
	experts := w.Experts
	if len(experts) == 0 {
		for _, mm := range e.Models {
			experts = append(experts, mm.Name)
		}
	}
	for i, name := range experts {
		rm, ok := r.Model(name)
		if !ok {
			return e.errorf("workload.experts", "expert %q is not a [[model]] of the experiment", name)
		}
		idx := r.modelIndex(name)
		mf := e.Models[idx]
		if rm.Output == nil {
			return e.errorf(modelKey(idx, "output_tokens"), "missing: expert %q needs an output-length distribution", name)
		}
		if mf.Accuracy == nil {
			return e.errorf(modelKey(idx, "accuracy"), "missing: expert %q needs an accuracy (probability of a right answer) for the answer model", name)
		}
		if *mf.Accuracy < 0 || *mf.Accuracy > 1 {
			return e.errorf(modelKey(idx, "accuracy"), "must be in [0, 1], got %g", *mf.Accuracy)
		}
		if mf.Weight < 0 {
			return e.errorf(modelKey(idx, "weight"), "must not be negative, got %g", mf.Weight)
		}
		_ = i
		if err := checkCategories(e, idx, mf.AccuracyByCategory, qs); err != nil {
			return err
		}
		spec.Experts = append(spec.Experts, traces.ExpertSpec{Name: rm.Name, Output: rm.Output, Forward: rm.Forward, Accuracy: *mf.Accuracy,
			Weight: mf.Weight, SkillAccuracy: mf.AccuracyByCategory})
	}
	if err := r.routing(spec); err != nil {
		return err
	}
	if w.ExpertsPerQuery <= 0 {
		return e.errorf("workload.experts_per_query", "must be positive, got %d", w.ExpertsPerQuery)
	}
	if w.ExpertsPerQuery > len(experts) {
		return e.errorf("workload.experts_per_query", "k = %d is larger than the expert pool (%d experts)", w.ExpertsPerQuery, len(experts))
	}
	if err := r.aggregatorSpec(&spec.Aggregator, m); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return e.errorf("workload", "%v", err)
	}
	wl, err := traces.Generate(*spec, uint64(e.Seed))
	if err != nil {
		return e.errorf("workload", "%v", err)
	}
	if err := r.checkLengths(wl); err != nil {
		return err
	}
	m.Spec, m.Workload = spec, wl
	return nil
}

// checkLengths rejects calls an engine of their model could not serve, naming the model: on a
// mixed cluster, any engine of a group the model runs on.
func (r *Resolved) checkLengths(wl *traces.Workload) error {
	seen := map[string]*ResolvedModel{} // by the name as the calls write it
	for _, q := range wl.Queries {
		for _, c := range q.Calls {
			if c.IsTool() {
				continue
			}
			rm, ok := seen[c.Model]
			if !ok {
				rm, _ = r.Model(c.Model)
				seen[c.Model] = rm
			}
			total := c.InputTokens + c.OutputTokens
			if total > rm.Arch.MaxModelLen {
				return r.errorf(modelKey(r.modelIndex(c.Model), "output_tokens"), "query %d: a %s call of %d prompt and %d output tokens exceeds %s's max_model_len %d; lower the maximum output length",
					q.ID, c.Label(), c.InputTokens, c.OutputTokens, rm.Arch.ID, rm.Arch.MaxModelLen)
			}
			for gi, gm := range rm.OnGroup {
				if gm.Cost == nil {
					continue
				}
				if need := (total + gm.Engine.BlockSize - 1) / gm.Engine.BlockSize; need > gm.Engine.NumBlocks-gm.Engine.WatermarkBlocks {
					where := r.GPU.Name
					if r.Mixed() {
						g := r.Groups[gi]
						where = fmt.Sprintf("%s (%s)", g.Key, g.Hardware())
					}
					return r.errorf(modelKey(r.modelIndex(c.Model), "arch"), "query %d: a %s call of %d tokens does not fit the KV cache of %s on %s (%d tokens)",
						q.ID, c.Label(), total, rm.Arch.ID, where, gm.Engine.NumBlocks*gm.Engine.BlockSize)
				}
			}
		}
	}
	return nil
}

func (r *Resolved) modelIndex(name string) int {
	for i, m := range r.Experiment.Models {
		if lower(m.Name) == lower(name) {
			return i
		}
	}
	return -1
}

func datasets(qs []traces.Question) []string {
	seen := map[string]bool{}
	var out []string
	for _, q := range qs {
		if !seen[q.Dataset] {
			seen[q.Dataset] = true
			out = append(out, q.Dataset)
		}
	}
	return out
}

func (r *Resolved) resolvePolicies(m *GraphWorkload) error {
	e := r.Experiment
	if len(e.Policies) == 0 {
		return e.errorf("policy", "missing: list at least one [[policy]] (the first is the baseline)")
	}
	def := policies.Rule(policies.NeverSkip())
	if t := e.Aggregation.Threshold; t != nil {
		if !(*t > 0) {
			return e.errorf("aggregation.threshold", "must be positive, got %g", *t)
		}
		def = policies.ConfidenceSkip{Threshold: *t}
	}
	labels := map[string]bool{}
	for i, p := range e.Policies {
		key := fmt.Sprintf("policy[%d]", i)
		kind, ok := lookupPolicy(lower(p.Name))
		if !ok {
			return e.errorf(key+".name", "unknown policy %q (known: %s)", p.Name, strings.Join(policyNames(), ", "))
		}
		rule := def
		if p.Threshold != nil {
			if !(*p.Threshold > 0) {
				return e.errorf(key+".threshold", "must be positive, got %g", *p.Threshold)
			}
			rule = policies.ConfidenceSkip{Threshold: *p.Threshold}
		}
		if x := p.DynamicThreshold; x != nil {
			if p.Threshold != nil {
				return e.errorf(key+".dynamic_threshold", "give threshold or dynamic_threshold, not both")
			}
			dt := policies.DynamicThreshold{High: 1, Backlog: x.Backlog}
			if x.High != nil {
				dt.High = *x.High
			}
			if x.Low == nil || x.Budget == nil || x.Backlog == 0 {
				return e.errorf(key+".dynamic_threshold", "needs low, backlog and budget (e.g. { high = 1.0, low = 0.6667, backlog = 64, budget = 0.2 })")
			}
			dt.Low, dt.Budget = *x.Low, *x.Budget
			if err := dt.Validate(); err != nil {
				return e.errorf(key+".dynamic_threshold", "%v", err)
			}
			rule = dt
		}
		label := p.Label
		if label == "" {
			label = lower(p.Name)
		}
		if labels[label] {
			return e.errorf(key+".label", "policy %q is listed twice: give each a distinct label", label)
		}
		labels[label] = true
		live := m.Online
		if p.Dispatch != "" {
			if !slices.Contains(online.Orders, lower(p.Dispatch)) {
				return e.errorf(key+".dispatch", "unknown dispatch order %q (known: %s)", p.Dispatch, strings.Join(online.Orders, ", "))
			}
			if !live && lower(p.Name) != online.Name && lower(p.Name) != online.OrderPLAS && lower(p.Name) != online.OrderATLAS {
				return e.errorf(key+".dispatch", "orders the queues of queries arriving over time, but this workload is an offline batch (no workload.arrival_rate or trace arrivals), which %s serves stage by stage", lower(p.Name))
			}
		}
		newPolicy, err := buildPolicy(kind, policyBuild{e: e, key: key, outputs: m.Outputs, online: live, dispatch: lower(p.Dispatch)}, &e.Policies[i])
		if err != nil {
			return err
		}
		exit, err := earlyExit(e, key, p.EarlyExit)
		if err != nil {
			return err
		}
		if p.Overlap {
			for _, rm := range r.Models {
				if !rm.Engine.ChunkedPrefill {
					return e.errorf(key+".overlap", "prefill-decode overlap needs chunked prefill, but model %s's engine runs without it (engine.chunked_prefill or the preset's)", rm.Name)
				}
			}
		}
		m.Policies = append(m.Policies, ResolvedPolicy{Label: label, Name: lower(p.Name), Rule: rule, Exit: exit, Overlap: p.Overlap, New: newPolicy})
	}
	return nil
}

// earlyExit resolves a policy's early_exit table (nil when absent). Defaults: min_finished 2.
func earlyExit(e *Experiment, key string, x *EarlyExitSpec) (*policies.EarlyExit, error) {
	if x == nil {
		return nil, nil
	}
	key += ".early_exit"
	if x.Agreement == nil {
		return nil, e.errorf(key+".agreement", "missing: the share of the finished answers that must agree (1: all of them)")
	}
	ee := policies.EarlyExit{Agreement: *x.Agreement, MinFinished: x.MinFinished, MinConfidence: x.MinConfidence}
	if !e.has(key + ".min_finished") {
		ee.MinFinished = 2
	}
	if err := ee.Validate(); err != nil {
		field := "agreement"
		switch {
		case ee.MinFinished < 1:
			field = "min_finished"
		case !(ee.MinConfidence >= 0 && ee.MinConfidence <= 1):
			field = "min_confidence"
		}
		return nil, e.errorf(key+"."+field, "%v", err)
	}
	return &ee, nil
}

// errorf on the resolved experiment.
func (r *Resolved) errorf(key, format string, args ...any) error {
	return r.Experiment.errorf(key, format, args...)
}

// SelectPolicies keeps only the policies with the given labels, in the order given (the first
// becomes the baseline of the speedups).
func (r *Resolved) SelectPolicies(labels []string) error {
	if r.Graph == nil {
		return fmt.Errorf("%s: only a workload of call graphs has policies to select", r.File())
	}
	var kept []ResolvedPolicy
	for _, l := range labels {
		i := slices.IndexFunc(r.Graph.Policies, func(p ResolvedPolicy) bool { return p.Label == lower(l) || p.Label == l })
		if i < 0 {
			var known []string
			for _, p := range r.Graph.Policies {
				known = append(known, p.Label)
			}
			return fmt.Errorf("%s has no policy %q (its policies: %s)", r.File(), l, strings.Join(known, ", "))
		}
		kept = append(kept, r.Graph.Policies[i])
	}
	r.Graph.Policies = kept
	return nil
}

// queriesFromDuration sets the number of queries from workload.duration: the arrival rate times
// the duration, rounded up. The command line beats the file: --set workload.queries=N on a file
// that gives a duration runs N queries (and --set workload.duration on a file that gives
// queries, the duration's); both in the file, or both on the command line, is an error. It
// applies once (durationApplied), so that the copy of an experiment resolved with fewer queries
// (ResolveSim's cut) keeps them.
func (e *Experiment) queriesFromDuration() error {
	w := &e.Workload
	if e.durationApplied || w.Duration == 0 && !e.has("workload.duration") {
		return nil
	}
	if e.has("workload.queries") {
		switch q, d := e.overrides["workload.queries"], e.overrides["workload.duration"]; {
		case q && !d:
			return nil // the command line's queries
		case !(d && !q):
			return e.errorf("workload.duration", "give queries or duration, not both")
		}
	}
	switch {
	case w.Duration < time.Second:
		return e.errorf("workload.duration", "must be a duration of a second or more, such as \"4000s\" (a bare number means nanoseconds), got %v", w.Duration)
	case w.Trace != "" || w.Answers != "":
		return e.errorf("workload.duration", "applies to generated workloads: a workload file or an answer file has its own queries")
	case !(w.ArrivalRate > 0) || w.ArrivalTrace != "":
		return e.errorf("workload.duration", "needs a positive workload.arrival_rate (Poisson or gamma arrivals): the queries are the rate times the duration")
	}
	n := math.Ceil(w.ArrivalRate * w.Duration.Seconds())
	if n > 1e8 {
		return e.errorf("workload.duration", "%v at %g queries/s is %.0f queries, more than 100 million", w.Duration, w.ArrivalRate, n)
	}
	w.Queries = int(n)
	e.durationApplied = true
	return nil
}
