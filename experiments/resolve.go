package experiments

import (
	"fmt"
	"math"
	"strings"

	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// Defaults of the engine settings, as vLLM uses them.
const (
	DefaultMaxNumSeqs       = 256
	DefaultMaxBatchedTokens = 8192
	DefaultUtilization      = 0.9
	DefaultBlockSize        = 16
)

// ResolvedModel is a model bound to the catalog, its cost model and its engine.
type ResolvedModel struct {
	Name   string
	Arch   *sim.Model
	Cost   *sim.CostModel
	Engine sim.EngineConfig
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

// Resolved is a validated experiment bound to concrete catalog entries and cost models.
type Resolved struct {
	*Experiment
	Catalog *sim.Catalog
	Profile *sim.Profile
	GPU     *sim.GPU
	// TP is the tensor-parallel degree of every worker (GPUs per worker).
	TP int
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

// Resolve validates the experiment and binds it to the built-in catalog and profile, extended
// by the files the experiment names.
func (e *Experiment) Resolve() (*Resolved, error) {
	r := &Resolved{Experiment: e, Catalog: sim.DefaultCatalog(), Profile: sim.DefaultProfile(), byName: map[string]*ResolvedModel{}}
	if e.Name == "" {
		return nil, e.errorf("name", "missing: every experiment needs a name")
	}
	if e.Cluster.Catalog != "" {
		if err := r.Catalog.AddFile(e.path(e.Cluster.Catalog)); err != nil {
			return nil, e.errorf("cluster.catalog", "%v", err)
		}
	}
	if e.Cluster.Profile != "" {
		p, err := sim.LoadProfile(e.path(e.Cluster.Profile), nil)
		if err != nil {
			return nil, e.errorf("cluster.profile", "%v", err)
		}
		r.Profile = p
	}
	if e.Cluster.GPU == "" {
		return nil, e.errorf("cluster.gpu", "missing: name a GPU from the catalog")
	}
	g, err := r.Catalog.GPU(e.Cluster.GPU)
	if err != nil {
		return nil, e.errorf("cluster.gpu", "%v", err)
	}
	r.GPU = g
	if e.Seed < 0 {
		return nil, e.errorf("seed", "must not be negative, got %d", e.Seed)
	}
	if e.Cluster.Workers == 0 && !e.has("cluster.workers") {
		e.Cluster.Workers = 1
	}
	if e.Cluster.Workers <= 0 {
		return nil, e.errorf("cluster.workers", "must be positive, got %d", e.Cluster.Workers)
	}
	r.TP = 1
	if e.Cluster.TP != 0 || e.has("cluster.tp") {
		switch e.Cluster.TP {
		case 1, 2, 4, 8:
		default:
			return nil, e.errorf("cluster.tp", "must be 1, 2, 4 or 8 GPUs per worker, got %d", e.Cluster.TP)
		}
		if e.Cluster.TP > 1 && g.CollectiveGBps(e.Cluster.TP) <= 0 {
			return nil, e.errorf("cluster.tp", "GPU %s has no interconnect in the catalog (interconnect, link_gbps): cannot run tensor parallelism", g.Name)
		}
		r.TP = e.Cluster.TP
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
	coef, err := e.engineCoefficients(r, g)
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
		if err := sim.ValidTP(arch, r.TP); err != nil {
			return nil, e.errorf(modelKey(i, "arch"), "%v (cluster.tp = %d)", err, r.TP)
		}
		cm, err := sim.NewCostModel(arch, g, coef, sim.WithTP(r.TP))
		if err != nil {
			return nil, e.errorf("cluster.profile", "%v", err)
		}
		util := eng.util
		if m.GPUMemoryUtilization != 0 || e.has(modelKey(i, "gpu_memory_utilization")) {
			if !(m.GPUMemoryUtilization > 0 && m.GPUMemoryUtilization <= 1) {
				return nil, e.errorf(modelKey(i, "gpu_memory_utilization"), "must be in (0, 1], got %g", m.GPUMemoryUtilization)
			}
			util = m.GPUMemoryUtilization
		}
		cfg := eng.EngineConfig
		if r.Preset != nil {
			budget, seqs := r.Preset.Budget(arch, g)
			if !eng.budgetSet {
				cfg.MaxBatchedTokens = budget
			}
			if !eng.seqsSet {
				cfg.MaxNumSeqs = seqs
			}
			if cfg.MaxBatchedTokens < cfg.MaxNumSeqs {
				return nil, e.errorf("engine.max_batched_tokens", "must be at least max_num_seqs (%d) for %s, got %d", cfg.MaxNumSeqs, arch.ID, cfg.MaxBatchedTokens)
			}
		}
		blocks, err := cm.KVBlocks(util, cfg.MaxBatchedTokens, cfg.BlockSize)
		if err != nil {
			return nil, e.errorf(modelKey(i, "arch"), "%v", err)
		}
		cfg.NumBlocks = blocks
		cfg.WatermarkBlocks = blocks / 100
		cfg.PrefixCaching = eng.prefixCaching
		rm := &ResolvedModel{Name: m.Name, Arch: arch, Cost: cm, Engine: cfg, Memory: util, PrefixCaching: eng.prefixCaching}
		if m.OutputTokens != nil {
			d, err := m.OutputTokens.resolve(e, modelKey(i, "output_tokens"))
			if err != nil {
				return nil, err
			}
			if d.Max()+1 > arch.MaxModelLen {
				return nil, e.errorf(modelKey(i, "output_tokens"), "max %d exceeds %s's max_model_len %d", d.Max(), arch.ID, arch.MaxModelLen)
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
	s := engineSettings{EngineConfig: sim.EngineConfig{
		MaxNumSeqs: DefaultMaxNumSeqs, MaxBatchedTokens: DefaultMaxBatchedTokens,
		ChunkedPrefill: true, BlockSize: DefaultBlockSize,
	}, util: DefaultUtilization}
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
		values, err := traces.ReadColumn(path, d.Column)
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

// engineCoefficients returns the cost-model coefficients of the cluster's GPU: the profile's,
// with the preset's CPU overheads where it has them and the experiment's overhead keys over
// both. When they differ from the profile's, r.Profile becomes a copy that holds them, so that
// everything reading the profile (run metadata included) sees the coefficients in use.
func (e *Experiment) engineCoefficients(r *Resolved, g *sim.GPU) (sim.Coefficients, error) {
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
	if coef != base {
		p := *r.Profile
		p.GPUs = make(map[string]sim.Coefficients, len(r.Profile.GPUs)+1)
		for k, v := range r.Profile.GPUs {
			p.GPUs[k] = v
		}
		p.Set(g.Name, coef)
		if r.Preset != nil {
			p.Source += " + engine preset " + r.Preset.Name
		}
		r.Profile = &p
	}
	return coef, nil
}

// String describes the resolved cluster in one line.
func (r *Resolved) String() string {
	if r.TP > 1 {
		return fmt.Sprintf("%s: %d x (%d x %s, tensor-parallel)", r.Name, r.Cluster.Workers, r.TP, r.GPU.Name)
	}
	return fmt.Sprintf("%s: %d x %s", r.Name, r.Cluster.Workers, r.GPU.Name)
}
