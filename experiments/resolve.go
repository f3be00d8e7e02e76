package experiments

import (
	"fmt"
	"math"
	"strings"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// Defaults of the engine settings: vLLM's (sim.DefaultEngine).
const (
	DefaultMaxNumSeqs       = sim.DefaultMaxNumSeqs
	DefaultMaxBatchedTokens = sim.DefaultMaxBatchedTokens
	DefaultUtilization      = sim.DefaultGPUMemoryUtilization
	DefaultBlockSize        = sim.DefaultBlockSize
)

// ResolvedModel is a model bound to the catalog, its cost model and its engine.
type ResolvedModel struct {
	Name string
	Arch *sim.Model
	// Cost and Engine are the model's cost model and engine on the first worker group that can
	// run it: on a uniform cluster, on every worker.
	Cost   *sim.CostModel
	Engine sim.EngineConfig
	// OnGroup is the model on each worker group, by group index (Resolved.Groups): its cost
	// model and engine on that group's GPUs, or why it cannot run there.
	OnGroup []GroupModel
	// Output is the model's output-length distribution (nil if the file gives none).
	Output traces.LengthDist
	// Forward is how much of an expert response reaches the aggregator (nil: all of it).
	Forward traces.LengthDist
	// Memory is the fraction of a worker's memory the model's engine takes.
	Memory float64
	// PrefixCaching says whether the engine caches prompt prefixes (Engine.PrefixCaching: the
	// simulator models it; replay launches its servers so by default).
	PrefixCaching bool
}

// GroupModel is a model on the workers of one group: its cost model and engine on the
// group's GPUs, or, when Cost is nil, why it cannot run there (Unfit).
type GroupModel struct {
	Cost   *sim.CostModel
	Engine sim.EngineConfig
	Unfit  string
}

// WorkerGroup is a resolved group of identical workers: Count workers, each a group of TP GPUs
// of type GPU on one node.
type WorkerGroup struct {
	GPU   *sim.GPU
	TP    int
	Count int
	// First is the index of the group's first worker, FirstGPU of its first GPU (workers and
	// GPUs are numbered group by group).
	First, FirstGPU int
	// Key is where the file gives the group: "cluster" or "cluster.group[i]".
	Key string
}

// Hardware names one worker of the group: "A100-80GB", or "H100-80GB x2" for a
// tensor-parallel group of two GPUs.
func (g *WorkerGroup) Hardware() string {
	if g.TP > 1 {
		return fmt.Sprintf("%s x%d", g.GPU.Name, g.TP)
	}
	return g.GPU.Name
}

// GPUs is the number of GPUs of the group.
func (g *WorkerGroup) GPUs() int { return g.Count * g.TP }

// Resolved is a validated experiment bound to concrete catalog entries and cost models.
type Resolved struct {
	*Experiment
	Catalog *sim.Catalog
	Profile *sim.Profile
	// Groups are the cluster's groups of identical workers: one for [cluster] gpu, workers and
	// tp; one per [[cluster.group]] of a mixed cluster.
	Groups []*WorkerGroup
	// GPU and TP are the first group's GPU and tensor-parallel degree: a uniform cluster's
	// (every worker's) GPU and GPUs per worker.
	GPU *sim.GPU
	TP  int
	// groupOf is each worker's group.
	groupOf []int
	// Preset is the engine preset the experiment selected, or nil.
	Preset *sim.EnginePreset
	Models []*ResolvedModel
	byName map[string]*ResolvedModel
	// Batch is set for kind = "batch".
	Batch *BatchWorkload
	// Graph is set for the kinds of call graphs (moa, layered, tree, dag).
	Graph *GraphWorkload
}

// BatchWorkload is a resolved single-model batch.
type BatchWorkload struct {
	Model    *ResolvedModel
	Requests int
	Input    traces.LengthDist
	Output   traces.LengthDist
	Rate     float64
}

// Model returns the resolved model named name.
func (r *Resolved) Model(name string) (*ResolvedModel, bool) {
	m, ok := r.byName[lower(name)]
	return m, ok
}

// NumWorkers is the number of workers of the cluster, every group's.
func (r *Resolved) NumWorkers() int { return len(r.groupOf) }

// Mixed reports whether the cluster has more than one group of workers: its workers may
// differ in GPU type and tensor-parallel degree, and each runs a model with its own costs.
func (r *Resolved) Mixed() bool { return len(r.Groups) > 1 }

// Group returns worker w's group.
func (r *Resolved) Group(w int) *WorkerGroup { return r.Groups[r.groupOf[w]] }

// On returns model m on worker w: its cost model and engine on the worker's group.
func (r *Resolved) On(m *ResolvedModel, w int) GroupModel { return m.OnGroup[r.groupOf[w]] }

// GPUsOf returns the GPUs that form worker w, by their number in the cluster (GPUs are
// numbered group by group from 0; [replay] gpus maps them to CUDA devices): one, or the TP
// GPUs of a tensor-parallel group.
func (r *Resolved) GPUsOf(w int) []int {
	g := r.Group(w)
	out := make([]int, g.TP)
	for i := range out {
		out[i] = g.FirstGPU + (w-g.First)*g.TP + i
	}
	return out
}

// NumGPUs is the number of GPUs of the cluster, every worker's.
func (r *Resolved) NumGPUs() int {
	n := 0
	for _, g := range r.Groups {
		n += g.GPUs()
	}
	return n
}

// Hardware names each worker's GPUs, in worker order ("A100-80GB", "H100-80GB x2").
func (r *Resolved) Hardware() []string {
	out := make([]string, r.NumWorkers())
	for w := range out {
		out[w] = r.Group(w).Hardware()
	}
	return out
}

// ClusterString describes the cluster: "4 x A100-80GB", "2 x (2 x H100-80GB,
// tensor-parallel)", or a mixed cluster's groups joined by " + ".
func (r *Resolved) ClusterString() string {
	var parts []string
	for _, g := range r.Groups {
		if g.TP > 1 {
			parts = append(parts, fmt.Sprintf("%d x (%d x %s, tensor-parallel)", g.Count, g.TP, g.GPU.Name))
		} else {
			parts = append(parts, fmt.Sprintf("%d x %s", g.Count, g.GPU.Name))
		}
	}
	return strings.Join(parts, " + ")
}

// resolveCluster validates the cluster: [cluster] gpu, workers and tp, or [[cluster.group]]
// tables.
func (r *Resolved) resolveCluster() error {
	e := r.Experiment
	c := e.Cluster
	if len(c.Groups) == 0 {
		if c.GPU == "" {
			return e.errorf("cluster.gpu", "missing: name a GPU from the catalog (or give [[cluster.group]] tables)")
		}
		g, err := r.Catalog.GPU(c.GPU)
		if err != nil {
			return e.errorf("cluster.gpu", "%v", err)
		}
		if c.Workers == 0 && !e.has("cluster.workers") {
			e.Cluster.Workers = 1
		}
		if e.Cluster.Workers <= 0 {
			return e.errorf("cluster.workers", "must be positive, got %d", e.Cluster.Workers)
		}
		tp, err := e.resolveTP("cluster.tp", c.TP, g)
		if err != nil {
			return err
		}
		r.addGroup(&WorkerGroup{GPU: g, TP: tp, Count: e.Cluster.Workers, Key: "cluster"})
		return nil
	}
	for _, k := range []string{"gpu", "workers", "tp"} {
		if e.has("cluster." + k) {
			return e.errorf("cluster."+k, "give either [cluster] gpu, workers and tp (identical workers) or [[cluster.group]] tables (a mixed cluster), not both")
		}
	}
	for i, cg := range c.Groups {
		key := fmt.Sprintf("cluster.group[%d]", i)
		if cg.GPU == "" {
			return e.errorf(key+".gpu", "missing: name a GPU from the catalog")
		}
		g, err := r.Catalog.GPU(cg.GPU)
		if err != nil {
			return e.errorf(key+".gpu", "%v", err)
		}
		if cg.Count == 0 && !e.has(key+".count") {
			return e.errorf(key+".count", "missing: the number of GPUs of the group")
		}
		if cg.Count <= 0 {
			return e.errorf(key+".count", "must be positive, got %d", cg.Count)
		}
		tp, err := e.resolveTP(key+".tp", cg.TP, g)
		if err != nil {
			return err
		}
		if cg.Count%tp != 0 {
			return e.errorf(key+".tp", "%d does not divide count = %d: the group's %d GPUs form workers of tp GPUs each", tp, cg.Count, cg.Count)
		}
		r.addGroup(&WorkerGroup{GPU: g, TP: tp, Count: cg.Count / tp, Key: key})
	}
	return nil
}

func (r *Resolved) addGroup(g *WorkerGroup) {
	g.First = len(r.groupOf)
	for _, prev := range r.Groups {
		g.FirstGPU += prev.GPUs()
	}
	for range g.Count {
		r.groupOf = append(r.groupOf, len(r.Groups))
	}
	r.Groups = append(r.Groups, g)
	if len(r.Groups) == 1 {
		r.GPU, r.TP = g.GPU, g.TP
	}
}

// resolveTP validates a tensor-parallel degree given at key (0 when absent: 1).
func (e *Experiment) resolveTP(key string, tp int, g *sim.GPU) (int, error) {
	if tp == 0 && !e.has(key) {
		return 1, nil
	}
	switch tp {
	case 1, 2, 4, 8:
	default:
		return 0, e.errorf(key, "must be 1, 2, 4 or 8 GPUs per worker, got %d", tp)
	}
	if tp > 1 && g.CollectiveGBps(tp) <= 0 {
		return 0, e.errorf(key, "GPU %s has no interconnect in the catalog (interconnect, link_gbps): cannot run tensor parallelism", g.Name)
	}
	return tp, nil
}

// Resolve validates the experiment and binds it to the built-in catalog and profile, extended
// by the files the experiment names.
func (e *Experiment) Resolve() (*Resolved, error) {
	r := &Resolved{Experiment: e, byName: map[string]*ResolvedModel{}}
	if e.Name == "" {
		return nil, e.errorf("name", "missing: every experiment needs a name")
	}
	if err := r.loadCatalogs(); err != nil {
		return nil, err
	}
	if err := r.resolveCluster(); err != nil {
		return nil, err
	}
	r.warnBorrowedCoefficients()
	if e.Seed < 0 {
		return nil, e.errorf("seed", "must not be negative, got %d", e.Seed)
	}
	if e.Engine.Preset != "" {
		p, err := r.Catalog.Engine(e.Engine.Preset)
		if err != nil {
			return nil, e.errorf("engine.preset", "%v", err)
		}
		r.Preset = p
	}
	eng, err := e.engineDefaults(r.Preset)
	if err != nil {
		return nil, err
	}
	if len(e.Models) == 0 {
		return nil, e.errorf("model", "missing: list at least one [[model]]")
	}
	coefs, err := e.engineCoefficients(r)
	if err != nil {
		return nil, err
	}
	for i, m := range e.Models {
		if m.Name == "" {
			return nil, e.errorf(modelKey(i, "name"), "missing")
		}
		if _, dup := r.byName[lower(m.Name)]; dup {
			return nil, e.errorf(modelKey(i, "name"), "model %q is listed twice", m.Name)
		}
		if m.Arch == "" {
			return nil, e.errorf(modelKey(i, "arch"), "missing: name a catalog model (Hugging Face id or alias)")
		}
		arch, err := r.Catalog.Model(m.Arch)
		if err != nil {
			return nil, e.errorf(modelKey(i, "arch"), "%v", err)
		}
		util := eng.util
		if m.GPUMemoryUtilization != 0 || e.has(modelKey(i, "gpu_memory_utilization")) {
			if !(m.GPUMemoryUtilization > 0 && m.GPUMemoryUtilization <= 1) {
				return nil, e.errorf(modelKey(i, "gpu_memory_utilization"), "must be in (0, 1], got %g", m.GPUMemoryUtilization)
			}
			util = m.GPUMemoryUtilization
		}
		rm := &ResolvedModel{Name: m.Name, Arch: arch, Memory: util, PrefixCaching: eng.prefixCaching}
		if err := r.placeModel(i, rm, eng, coefs); err != nil {
			return nil, err
		}
		if m.OutputTokens != nil {
			d, err := m.OutputTokens.resolve(e, modelKey(i, "output_tokens"))
			if err != nil {
				return nil, err
			}
			if d.Max()+1 > arch.MaxModelLen {
				return nil, e.errorf(modelKey(i, "output_tokens"), "max %d leaves no room for a prompt in %s's max_model_len %d (want at most %d)", d.Max(), arch.ID, arch.MaxModelLen, arch.MaxModelLen-1)
			}
			rm.Output = d
		}
		if m.ForwardTokens != nil {
			d, err := m.ForwardTokens.resolve(e, modelKey(i, "forward_tokens"))
			if err != nil {
				return nil, err
			}
			rm.Forward = d
		}
		r.Models = append(r.Models, rm)
		r.byName[lower(m.Name)] = rm
	}
	if err := r.checkGroupsServe(); err != nil {
		return nil, err
	}
	switch kind := lower(e.Workload.Kind); kind {
	case KindBatch, "":
		if err := e.checkWorkloadKeys(KindBatch); err != nil {
			return nil, err
		}
		if err := r.resolveBatch(); err != nil {
			return nil, err
		}
	case KindMoA, KindLayered, KindTree, KindDAG:
		if err := r.resolveGraph(kind); err != nil {
			return nil, err
		}
	default:
		return nil, e.errorf("workload.kind", "unknown workload kind %q (known: %s)", e.Workload.Kind, strings.Join(Kinds, ", "))
	}
	return r, nil
}

// checkGroupsServe rejects a worker group that can run none of the experiment's models: its
// GPUs would only idle.
func (r *Resolved) checkGroupsServe() error {
	for gi, g := range r.Groups {
		var why []string
		for _, m := range r.Models {
			gm := m.OnGroup[gi]
			if gm.Cost != nil {
				why = nil
				break
			}
			why = append(why, fmt.Sprintf("%s: %s", m.Name, gm.Unfit))
		}
		if why != nil {
			return r.errorf(g.Key, "its workers (%s) can run none of the models: %s", g.Hardware(), strings.Join(why, "; "))
		}
	}
	return nil
}

// placeModel builds model i's cost model and engine on every worker group (groups of the same
// GPU and TP degree share them). On a uniform cluster a model that cannot run is an error; on
// a mixed cluster it is one only when the model can run on no group, and the groups it cannot
// run on say why (policies never place it there).
func (r *Resolved) placeModel(i int, rm *ResolvedModel, eng engineSettings, coefs map[string]sim.Coefficients) error {
	e := r.Experiment
	type kind struct {
		gpu string
		tp  int
	}
	seen := map[kind]GroupModel{}
	rm.OnGroup = make([]GroupModel, len(r.Groups))
	var why []string
	for gi, g := range r.Groups {
		k := kind{g.GPU.Name, g.TP}
		gm, ok := seen[k]
		if !ok {
			var err error
			if gm, err = r.modelOnGroup(i, rm, eng, g, coefs[g.GPU.Name]); err != nil {
				return err
			}
			seen[k] = gm
		}
		rm.OnGroup[gi] = gm
		if gm.Cost == nil {
			why = append(why, fmt.Sprintf("%s (%s): %s", g.Key, g.Hardware(), gm.Unfit))
			continue
		}
		if rm.Cost == nil {
			rm.Cost, rm.Engine = gm.Cost, gm.Engine
		}
	}
	if rm.Cost == nil {
		return e.errorf(modelKey(i, "arch"), "%s runs on no worker of the cluster: %s", rm.Arch.ID, strings.Join(why, "; "))
	}
	return nil
}

// modelOnGroup builds a model's cost model and engine on a group's GPUs. That it cannot run
// there (its heads do not split over the group's TP degree, or its weights leave no room for a
// KV cache) is an error on a uniform cluster and GroupModel.Unfit on a mixed one.
func (r *Resolved) modelOnGroup(i int, rm *ResolvedModel, eng engineSettings, g *WorkerGroup, coef sim.Coefficients) (GroupModel, error) {
	e := r.Experiment
	arch := rm.Arch
	tpKey := g.Key + ".tp"
	if err := sim.ValidTP(arch, g.TP); err != nil {
		if !r.Mixed() {
			return GroupModel{}, e.errorf(modelKey(i, "arch"), "%v (%s = %d)", err, tpKey, g.TP)
		}
		return GroupModel{Unfit: fmt.Sprintf("%v (%s = %d)", err, tpKey, g.TP)}, nil
	}
	cm, err := sim.NewCostModel(arch, g.GPU, coef, sim.WithTP(g.TP))
	if err != nil {
		return GroupModel{}, e.errorf("cluster.profile", "%v", err)
	}
	cfg := eng.EngineConfig
	if r.Preset != nil {
		budget, seqs := r.Preset.Budget(arch, g.GPU)
		if !eng.budgetSet {
			cfg.MaxBatchedTokens = budget
		}
		if !eng.seqsSet {
			cfg.MaxNumSeqs = seqs
		}
		if cfg.MaxBatchedTokens < cfg.MaxNumSeqs {
			return GroupModel{}, e.errorf("engine.max_batched_tokens", "must be at least max_num_seqs (%d) for %s, got %d", cfg.MaxNumSeqs, arch.ID, cfg.MaxBatchedTokens)
		}
	}
	cfg.PrefixCaching = eng.prefixCaching
	cfg, err = cfg.WithKVCache(cm, rm.Memory)
	if err != nil {
		if !r.Mixed() {
			return GroupModel{}, e.errorf(modelKey(i, "arch"), "%v", err)
		}
		return GroupModel{Unfit: err.Error()}, nil
	}
	return GroupModel{Cost: cm, Engine: cfg}, nil
}

type engineSettings struct {
	sim.EngineConfig
	util float64
	// budgetSet and seqsSet say the experiment set max_batched_tokens and max_num_seqs
	// itself, so a preset's per-model values do not replace them.
	budgetSet, seqsSet bool
	prefixCaching      bool
}

// engineDefaults returns the engine settings: vLLM's defaults, or the preset's where one is
// selected, overridden by the keys the experiment gives. A preset's token budget and sequence
// cap may depend on the model and GPU (sim.EnginePreset.Budget); they are set per model.
func (e *Experiment) engineDefaults(preset *sim.EnginePreset) (engineSettings, error) {
	s := engineSettings{EngineConfig: sim.DefaultEngine(), util: DefaultUtilization}
	if preset != nil {
		s.ChunkedPrefill = preset.ChunkedPrefill
		s.prefixCaching = preset.PrefixCaching
	}
	en := e.Engine
	if en.MaxNumSeqs != 0 || e.has("engine.max_num_seqs") {
		if en.MaxNumSeqs <= 0 {
			return s, e.errorf("engine.max_num_seqs", "must be positive, got %d", en.MaxNumSeqs)
		}
		s.MaxNumSeqs = en.MaxNumSeqs
		s.seqsSet = true
	}
	if en.MaxBatchedTokens != 0 || e.has("engine.max_batched_tokens") {
		if en.MaxBatchedTokens <= 0 {
			return s, e.errorf("engine.max_batched_tokens", "must be positive, got %d", en.MaxBatchedTokens)
		}
		s.MaxBatchedTokens = en.MaxBatchedTokens
		s.budgetSet = true
	}
	if en.PrefixCaching != nil {
		s.prefixCaching = *en.PrefixCaching
	}
	if s.MaxBatchedTokens < s.MaxNumSeqs && (preset == nil || s.budgetSet && s.seqsSet) {
		return s, e.errorf("engine.max_batched_tokens", "must be at least max_num_seqs (%d), got %d", s.MaxNumSeqs, s.MaxBatchedTokens)
	}
	if en.ChunkedPrefill != nil {
		s.ChunkedPrefill = *en.ChunkedPrefill
	}
	switch en.SchedulingPolicy {
	case "", sim.SchedulingFCFS:
		// The engine's default; left empty, so that run.json describes an FCFS engine as it
		// did before the key existed.
	case sim.SchedulingPriority:
		if !s.ChunkedPrefill {
			return s, e.errorf("engine.scheduling_policy", "%q follows vLLM V1's scheduler, which needs chunked prefill, but engine.chunked_prefill (or the preset's) is false", en.SchedulingPolicy)
		}
		s.SchedulingPolicy = sim.SchedulingPriority
	default:
		return s, e.errorf("engine.scheduling_policy", "unknown value %q (known: %s, %s)", en.SchedulingPolicy, sim.SchedulingFCFS, sim.SchedulingPriority)
	}
	if en.GPUMemoryUtilization != 0 || e.has("engine.gpu_memory_utilization") {
		if !(en.GPUMemoryUtilization > 0 && en.GPUMemoryUtilization <= 1) {
			return s, e.errorf("engine.gpu_memory_utilization", "must be in (0, 1], got %g", en.GPUMemoryUtilization)
		}
		s.util = en.GPUMemoryUtilization
	}
	if en.BlockSize != 0 || e.has("engine.block_size") {
		if en.BlockSize <= 0 || en.BlockSize > 256 {
			return s, e.errorf("engine.block_size", "must be in [1, 256], got %d", en.BlockSize)
		}
		s.BlockSize = en.BlockSize
	}
	return s, nil
}

func (r *Resolved) resolveBatch() error {
	e := r.Experiment
	w := e.Workload
	if r.Mixed() {
		return e.errorf("cluster.group", "a batch workload serves its requests on one engine of one worker: give one kind of worker ([cluster] gpu and tp, or a single [[cluster.group]])")
	}
	b := &BatchWorkload{Requests: w.Requests, Rate: w.ArrivalRate}
	switch {
	case w.Model != "":
		m, ok := r.Model(w.Model)
		if !ok {
			return e.errorf("workload.model", "no [[model]] is named %q", w.Model)
		}
		b.Model = m
	case len(r.Models) == 1:
		b.Model = r.Models[0]
	default:
		return e.errorf("workload.model", "missing: the experiment lists %d models, say which one the batch uses", len(r.Models))
	}
	if w.Requests <= 0 {
		return e.errorf("workload.requests", "must be positive, got %d", w.Requests)
	}
	if w.ArrivalRate < 0 {
		return e.errorf("workload.arrival_rate", "must not be negative, got %g", w.ArrivalRate)
	}
	if w.InputTokens == nil {
		return e.errorf("workload.input_tokens", "missing: give a prompt-length distribution, e.g. { dist = \"fixed\", value = 512 }")
	}
	in, err := w.InputTokens.resolve(e, "workload.input_tokens")
	if err != nil {
		return err
	}
	b.Input = in
	b.Output = b.Model.Output
	if w.OutputTokens != nil {
		if b.Output, err = w.OutputTokens.resolve(e, "workload.output_tokens"); err != nil {
			return err
		}
	}
	if b.Output == nil {
		return e.errorf("workload.output_tokens", "missing: give an output-length distribution here or on model %q", b.Model.Name)
	}
	if limit := b.Model.Arch.MaxModelLen; b.Input.Max()+b.Output.Max() > limit {
		return e.errorf("workload.input_tokens", "the longest prompt (%d) plus the longest output (%d) exceed %s's max_model_len %d",
			b.Input.Max(), b.Output.Max(), b.Model.Arch.ID, limit)
	}
	if need := (b.Input.Max() + b.Output.Max() + b.Model.Engine.BlockSize - 1) / b.Model.Engine.BlockSize; need > b.Model.Engine.NumBlocks-b.Model.Engine.WatermarkBlocks {
		return e.errorf("workload.output_tokens", "the longest request (%d tokens) does not fit the KV cache of %s on %s (%d tokens)",
			b.Input.Max()+b.Output.Max(), b.Model.Arch.ID, r.GPU.Name, b.Model.Engine.NumBlocks*b.Model.Engine.BlockSize)
	}
	r.Batch = b
	return nil
}

// resolve validates a distribution given at key.
func (d *Dist) resolve(e *Experiment, key string) (traces.LengthDist, error) {
	if lower(d.Dist) != "empirical" && (d.Scale != 0 || e.has(key+".scale")) {
		return nil, e.errorf(key+".scale", "only an empirical distribution takes a scale")
	}
	if lower(d.Dist) != "lognormal" {
		for _, k := range []string{"median", "sigma", "cap_share"} {
			if e.has(key + "." + k) {
				return nil, e.errorf(key+"."+k, "only a lognormal distribution takes %s", k)
			}
		}
	}
	switch lower(d.Dist) {
	case "fixed":
		if d.Value <= 0 {
			return nil, e.errorf(key+".value", "must be positive, got %d", d.Value)
		}
		return traces.Fixed(d.Value), nil
	case "lognormal":
		minLen := d.Min
		if minLen == 0 {
			minLen = 1
		}
		if d.Max <= 0 {
			return nil, e.errorf(key+".max", "missing or not positive: a lognormal needs a maximum length (the model's max tokens)")
		}
		var l *traces.LogNormal
		var err error
		given := func(k string) bool { return e.has(key + "." + k) }
		switch {
		case given("sigma") && given("p99"):
			return nil, e.errorf(key+".p99", "give a lognormal by mean and p99, or by sigma with mean or median, not p99 with sigma")
		case given("sigma") && given("mean") && given("median"):
			return nil, e.errorf(key+".median", "give sigma with either mean or median, not both")
		case given("sigma") && given("median"):
			if !(d.Median > 0) {
				return nil, e.errorf(key+".median", "must be positive, got %g", d.Median)
			}
			l, err = traces.NewLogNormalSigma(math.Log(d.Median), d.Sigma, minLen, d.Max)
		case given("sigma"):
			if !(d.Mean > 0) {
				return nil, e.errorf(key+".mean", "missing or not positive: sigma needs a mean or a median")
			}
			l, err = traces.NewLogNormalSigma(math.Log(d.Mean)-d.Sigma*d.Sigma/2, d.Sigma, minLen, d.Max)
		case given("median"):
			return nil, e.errorf(key+".median", "needs sigma (a lognormal by median and sigma)")
		default:
			l, err = traces.NewLogNormal(d.Mean, d.P99, minLen, d.Max)
		}
		if err == nil && (d.CapShare != 0 || given("cap_share")) {
			l, err = l.WithCapShare(d.CapShare)
		}
		if err != nil {
			return nil, e.errorf(key, "%v", err)
		}
		return l, nil
	case "uniform":
		if d.Min <= 0 || d.Max < d.Min {
			return nil, e.errorf(key, "uniform needs 0 < min <= max, got min %d max %d", d.Min, d.Max)
		}
		return traces.Uniform{Lo: d.Min, Hi: d.Max}, nil
	case "empirical":
		if d.File == "" || d.Column == "" {
			return nil, e.errorf(key, "empirical needs a file and a column")
		}
		path, err := e.dataPath(key+".file", d.File)
		if err != nil {
			return nil, err
		}
		values, err := e.readColumn(path, d.Column)
		if err != nil {
			return nil, e.errorf(key, "%v", err)
		}
		source := path + ":" + d.Column
		if d.Scale != 0 || e.has(key+".scale") {
			if !(d.Scale > 0) || math.IsInf(d.Scale, 0) {
				return nil, e.errorf(key+".scale", "must be positive, got %g", d.Scale)
			}
			for i, v := range values {
				values[i] = int(math.Round(float64(v) * d.Scale))
			}
			source += fmt.Sprintf(" x %g", d.Scale)
		}
		emp, err := traces.NewEmpirical(values, source, d.Max)
		if err != nil {
			return nil, e.errorf(key, "%v", err)
		}
		return emp, nil
	case "":
		return nil, e.errorf(key+".dist", "missing: one of fixed, lognormal, uniform, empirical")
	default:
		return nil, e.errorf(key+".dist", "unknown distribution %q (known: fixed, lognormal, uniform, empirical)", d.Dist)
	}
}

// engineCoefficients returns the cost-model coefficients of each of the cluster's GPU types,
// by name: the profile's, with the preset's CPU overheads where it has them and the
// experiment's overhead keys over both. When they differ from the profile's, r.Profile becomes
// a copy that holds them, so that everything reading the profile (run metadata included) sees
// the coefficients in use.
func (e *Experiment) engineCoefficients(r *Resolved) (map[string]sim.Coefficients, error) {
	out := map[string]sim.Coefficients{}
	var changed []*sim.GPU
	for _, g := range r.Groups {
		if _, ok := out[g.GPU.Name]; ok {
			continue
		}
		coef, err := e.gpuCoefficients(r, g.GPU)
		if err != nil {
			return nil, err
		}
		out[g.GPU.Name] = coef
		if coef != r.Profile.For(g.GPU) {
			changed = append(changed, g.GPU)
		}
	}
	if len(changed) > 0 {
		p := *r.Profile
		p.GPUs = make(map[string]sim.Coefficients, len(r.Profile.GPUs)+len(changed))
		for k, v := range r.Profile.GPUs {
			p.GPUs[k] = v
		}
		for _, g := range changed {
			p.Set(g.Name, out[g.Name])
		}
		if r.Preset != nil {
			p.Source += " + engine preset " + r.Preset.Name
		}
		r.Profile = &p
	}
	return out, nil
}

// gpuCoefficients returns the coefficients of GPU g with the preset's and the experiment's
// overheads applied.
func (e *Experiment) gpuCoefficients(r *Resolved, g *sim.GPU) (sim.Coefficients, error) {
	base := r.Profile.For(g)
	coef := base
	if r.Preset != nil {
		coef = r.Preset.Apply(coef)
	}
	for _, o := range []struct {
		key string
		v   *float64
		dst *float64
	}{
		{"engine.iteration_overhead_ms", e.Engine.IterationOverheadMS, &coef.IterationOverheadMS},
		{"engine.per_seq_overhead_ms", e.Engine.PerSeqOverheadMS, &coef.PerSeqOverheadMS},
		{"engine.launch_floor_ms", e.Engine.LaunchFloorMS, &coef.LaunchFloorMS},
		{"engine.startup_s", e.Engine.StartupS, &coef.StartupS},
	} {
		if o.v == nil {
			continue
		}
		if !(*o.v >= 0) || math.IsInf(*o.v, 0) {
			return coef, e.errorf(o.key, "must not be negative, got %g", *o.v)
		}
		*o.dst = *o.v
	}
	if v := e.Engine.LoadGBps; v != nil {
		if !(*v > 0) || math.IsInf(*v, 0) {
			return coef, e.errorf("engine.load_gbps", "must be positive, got %g", *v)
		}
		coef.LoadGBps = *v
	}
	return coef, nil
}

// String describes the resolved cluster in one line.
func (r *Resolved) String() string {
	return fmt.Sprintf("%s: %s", r.Name, r.ClusterString())
}
