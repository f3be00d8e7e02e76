package sim

import (
	"embed"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
)

//go:embed catalog/*.toml
var catalogFS embed.FS

// GPU is one accelerator as the cost model sees it.
type GPU struct {
	Name       string   `toml:"name"`
	Aliases    []string `toml:"aliases"`
	Vendor     string   `toml:"vendor"`
	PeakTFLOPs float64  `toml:"peak_tflops"` // dense BF16 tensor throughput, 10^12 FLOP/s
	// PeakTFLOPsFP8 is the dense FP8 tensor throughput, 10^12 FLOP/s, used for the linear
	// layers of models whose weights are FP8 (dtype_bytes = 1); 0: the GPU has no FP8 tensor
	// cores and such a model's matrix multiplications run at PeakTFLOPs.
	PeakTFLOPsFP8 float64  `toml:"peak_tflops_fp8"`
	HBMGBps       float64  `toml:"hbm_gbps"`    // memory bandwidth, 10^9 B/s
	MemoryGiB     float64  `toml:"memory_gib"`  // device memory, GiB
	MeasuredAs    []string `toml:"measured_as"` // hardware labels used by public benchmark files
	// MeasuredUnit is how many of these devices one unit of a measured_as label counts (an
	// MI250 card holds two GCDs, each its own device); 0 means 1.
	MeasuredUnit int `toml:"measured_unit"`

	// Interconnect is how the GPUs of one node reach each other, for tensor parallelism:
	// "switch" (NVSwitch: every GPU reaches any set of peers at LinkGBps), "mesh" (a fully
	// connected mesh such as AMD Infinity Fabric: LinkGBps per peer link, so a group of n
	// GPUs uses n-1 links) or "pcie" (through the host: LinkGBps shared). Empty: no
	// tensor parallelism.
	Interconnect string `toml:"interconnect"`
	// LinkGBps is the interconnect's bandwidth in one direction, 10^9 B/s: per GPU for
	// "switch" and "pcie", per peer link for "mesh".
	LinkGBps float64 `toml:"link_gbps"`
}

// LinearPeakTFLOPs is the dense tensor throughput the linear layers of m reach on g: the FP8
// peak for FP8 weights where g has one, PeakTFLOPs otherwise.
func (g *GPU) LinearPeakTFLOPs(m *Model) float64 {
	if m.DtypeBytes == 1 && g.PeakTFLOPsFP8 > 0 {
		return g.PeakTFLOPsFP8
	}
	return g.PeakTFLOPs
}

// MemoryBytes is the device memory in bytes.
func (g *GPU) MemoryBytes() float64 { return g.MemoryGiB * gib }

// Unit returns MeasuredUnit, or 1 when it is not set.
func (g *GPU) Unit() int { return max(g.MeasuredUnit, 1) }

// CollectiveGBps is the bandwidth, in one direction and 10^9 B/s, that a ring all-reduce over
// tp of these GPUs can use per GPU: LinkGBps through a switch or PCIe, (tp-1) links of a
// fully connected mesh. It is 0 when the catalog gives no interconnect.
func (g *GPU) CollectiveGBps(tp int) float64 {
	switch g.Interconnect {
	case "switch", "pcie":
		return g.LinkGBps
	case "mesh":
		return g.LinkGBps * float64(max(tp-1, 1))
	}
	return 0
}

// Model is a decoder-only transformer's architecture, as published in its config.json.
type Model struct {
	ID           string   `toml:"id"` // Hugging Face id
	Aliases      []string `toml:"aliases"`
	Layers       int      `toml:"layers"`
	Hidden       int      `toml:"hidden"`
	Heads        int      `toml:"heads"`
	KVHeads      int      `toml:"kv_heads"`
	HeadDim      int      `toml:"head_dim"`
	Intermediate int      `toml:"intermediate"`
	Vocab        int      `toml:"vocab"`
	DtypeBytes   int      `toml:"dtype_bytes"` // bytes per weight (2: BF16/FP16, 1: FP8)
	// KVDtypeBytes is the bytes per element of the KV cache (vLLM's --kv-cache-dtype); 0: the
	// activations' precision, max(dtype_bytes, 2) (vLLM's "auto": BF16 for FP8 weights too).
	KVDtypeBytes   int     `toml:"kv_dtype_bytes"`
	ParamsB        float64 `toml:"params_b"` // total parameters, billions
	MaxModelLen    int     `toml:"max_model_len"`
	TiedEmbeddings bool    `toml:"tied_embeddings"`
	Reasoning      bool    `toml:"reasoning"` // emits long chains of thought

	// Experts is the number of MLP experts of a mixture-of-experts model (0 or 1: a dense
	// model); Intermediate is then the intermediate size of one expert.
	Experts int `toml:"experts"`
	// ExpertsPerToken is how many experts each token is routed to (top-k).
	ExpertsPerToken int `toml:"experts_per_token"`
}

const gib = 1 << 30

// WeightBytes is the size of the weights in memory.
func (m *Model) WeightBytes() float64 { return m.ParamsB * 1e9 * float64(m.DtypeBytes) }

// KVBytesPerToken is the KV-cache footprint of one token: keys and values of every layer.
func (m *Model) KVBytesPerToken() float64 {
	return float64(2 * m.Layers * m.KVHeads * m.HeadDim * m.KVBytes())
}

// KVBytes is the bytes per element of the KV cache: KVDtypeBytes, or when unset the
// activations' (vLLM's --kv-cache-dtype auto: the model's dtype, BF16 for FP8 weights).
func (m *Model) KVBytes() int {
	if m.KVDtypeBytes > 0 {
		return m.KVDtypeBytes
	}
	return m.activationBytes()
}

// activationBytes is the bytes per element of the activations: the weights' precision, but
// at least 2 (a model with FP8 weights multiplies FP8 inputs and keeps BF16 activations
// between its layers and in its all-reduces).
func (m *Model) activationBytes() int { return max(m.DtypeBytes, 2) }

// MoE reports whether the model is a mixture of experts.
func (m *Model) MoE() bool { return m.Experts > 1 }

// experts returns the number of experts and the experts per token (1 and 1 for a dense model).
func (m *Model) experts() (total, active int) {
	if !m.MoE() {
		return 1, 1
	}
	return m.Experts, m.ExpertsPerToken
}

// attentionParams is the number of weights of one layer's attention projections.
func (m *Model) attentionParams() float64 {
	q := float64(m.Hidden * m.Heads * m.HeadDim)
	kv := float64(2 * m.Hidden * m.KVHeads * m.HeadDim)
	o := float64(m.Heads * m.HeadDim * m.Hidden)
	return q + kv + o
}

// expertParams is the number of weights of one layer's gated MLP (one expert of an MoE).
func (m *Model) expertParams() float64 { return float64(3 * m.Hidden * m.Intermediate) }

// linearParams is the number of weights in the matrices of the transformer blocks (attention
// projections and every expert of the gated MLP), excluding embeddings.
func (m *Model) linearParams() float64 {
	total, _ := m.experts()
	mlp := m.expertParams()
	if total > 1 {
		mlp *= float64(total)
	}
	return float64(m.Layers) * (m.attentionParams() + mlp)
}

// activeLinearParams is the number of those weights each token is multiplied by: the
// attention projections and the experts it is routed to.
func (m *Model) activeLinearParams() float64 {
	_, active := m.experts()
	mlp := m.expertParams()
	if active > 1 {
		mlp *= float64(active)
	}
	return float64(m.Layers) * (m.attentionParams() + mlp)
}

// ExpectedExperts is the expected number of distinct experts that tokens tokens touch in one
// layer when each picks ExpertsPerToken of Experts uniformly and independently:
// E * (1 - (1 - k/E)^tokens). It is 1 for a dense model.
func (m *Model) ExpectedExperts(tokens int) float64 {
	total, active := m.experts()
	if total == 1 {
		return 1
	}
	if tokens <= 0 {
		return 0
	}
	e := float64(total)
	return e * (1 - math.Pow(1-float64(active)/e, float64(tokens)))
}

func (m *Model) validate() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("model without id")
	case m.Layers <= 0, m.Hidden <= 0, m.Heads <= 0, m.KVHeads <= 0, m.HeadDim <= 0,
		m.Intermediate <= 0, m.Vocab <= 0, m.DtypeBytes <= 0, m.ParamsB <= 0, m.MaxModelLen <= 0:
		return fmt.Errorf("model %q: layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, dtype_bytes, params_b and max_model_len must all be positive", m.ID)
	case m.KVDtypeBytes < 0:
		return fmt.Errorf("model %q: kv_dtype_bytes must not be negative (0: dtype_bytes), got %d", m.ID, m.KVDtypeBytes)
	case m.Heads%m.KVHeads != 0:
		return fmt.Errorf("model %q: heads (%d) must be a multiple of kv_heads (%d)", m.ID, m.Heads, m.KVHeads)
	case m.Experts < 0 || m.ExpertsPerToken < 0:
		return fmt.Errorf("model %q: experts and experts_per_token must not be negative", m.ID)
	case m.Experts > 1 && (m.ExpertsPerToken < 1 || m.ExpertsPerToken > m.Experts):
		return fmt.Errorf("model %q: experts_per_token must be in [1, experts (%d)], got %d", m.ID, m.Experts, m.ExpertsPerToken)
	case m.Experts <= 1 && m.ExpertsPerToken > 1:
		return fmt.Errorf("model %q: experts_per_token %d needs experts > 1", m.ID, m.ExpertsPerToken)
	}
	return nil
}

func (g *GPU) validate() error {
	if g.Name == "" {
		return fmt.Errorf("gpu without name")
	}
	if g.PeakTFLOPs <= 0 || g.HBMGBps <= 0 || g.MemoryGiB <= 0 {
		return fmt.Errorf("gpu %q: peak_tflops, hbm_gbps and memory_gib must be positive", g.Name)
	}
	if !(g.PeakTFLOPsFP8 >= 0) || math.IsInf(g.PeakTFLOPsFP8, 0) {
		return fmt.Errorf("gpu %q: peak_tflops_fp8 must be a non-negative number (0: no FP8 tensor cores), got %g", g.Name, g.PeakTFLOPsFP8)
	}
	if g.MeasuredUnit < 0 {
		return fmt.Errorf("gpu %q: measured_unit must not be negative, got %d", g.Name, g.MeasuredUnit)
	}
	switch g.Interconnect {
	case "":
		if g.LinkGBps != 0 {
			return fmt.Errorf("gpu %q: link_gbps needs an interconnect (switch, mesh or pcie)", g.Name)
		}
	case "switch", "mesh", "pcie":
		if g.LinkGBps <= 0 {
			return fmt.Errorf("gpu %q: interconnect %q needs a positive link_gbps", g.Name, g.Interconnect)
		}
	default:
		return fmt.Errorf("gpu %q: unknown interconnect %q (known: switch, mesh, pcie)", g.Name, g.Interconnect)
	}
	return nil
}

// Catalog holds the GPUs, models and engine presets an experiment may name. Lookups are
// case-insensitive and accept aliases.
type Catalog struct {
	gpus    registry[GPU]
	models  registry[Model]
	engines registry[EnginePreset]
}

// registry holds entries by name and alias, case-insensitively, and in the order they were
// added; an entry with an existing entry's name replaces it (and drops its aliases).
type registry[T any] struct {
	byName map[string]*T
	list   []*T
	names  func(*T) []string // the entry's name, then its aliases
}

func newRegistry[T any](names func(*T) []string) registry[T] {
	return registry[T]{byName: map[string]*T{}, names: names}
}

func (r *registry[T]) put(x *T) {
	if old, ok := r.byName[strings.ToLower(r.names(x)[0])]; ok {
		r.list = remove(r.list, old)
		for k, v := range r.byName {
			if v == old {
				delete(r.byName, k)
			}
		}
	}
	r.list = append(r.list, x)
	for _, k := range r.names(x) {
		r.byName[strings.ToLower(k)] = x
	}
}

// get looks an entry up by name or alias; ok is false when there is none.
func (r *registry[T]) get(name string) (*T, bool) {
	x, ok := r.byName[strings.ToLower(strings.TrimSpace(name))]
	return x, ok
}

// known lists the entries' names, in the order they were added.
func (r *registry[T]) known() []string {
	out := make([]string, 0, len(r.list))
	for _, x := range r.list {
		out = append(out, r.names(x)[0])
	}
	return out
}

type catalogFile struct {
	GPU    []GPU          `toml:"gpu"`
	Model  []Model        `toml:"model"`
	Engine []EnginePreset `toml:"engine"`
}

// DefaultCatalog returns a fresh copy of the built-in catalog embedded in the binary.
func DefaultCatalog() *Catalog {
	c := &Catalog{
		gpus:    newRegistry(func(g *GPU) []string { return append([]string{g.Name}, g.Aliases...) }),
		models:  newRegistry(func(m *Model) []string { return append([]string{m.ID}, m.Aliases...) }),
		engines: newRegistry(func(e *EnginePreset) []string { return append([]string{e.Name}, e.Aliases...) }),
	}
	for _, name := range []string{"catalog/gpus.toml", "catalog/models.toml", "catalog/engines.toml"} {
		data, err := catalogFS.ReadFile(name)
		if err != nil {
			panic(err) // embedded at build time
		}
		if err := c.add(name, data); err != nil {
			panic(fmt.Sprintf("built-in catalog: %v", err))
		}
	}
	return c
}

// AddFile extends the catalog with the GPUs, models and engine presets of a user TOML file
// ([[gpu]], [[model]] and [[engine]] tables as in the built-in files). An entry with the name or
// id of an existing one replaces it.
func (c *Catalog) AddFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading catalog: %w", err)
	}
	return c.add(path, data)
}

func (c *Catalog) add(path string, data []byte) error {
	var f catalogFile
	tf, err := tomlx.Decode(path, data, &f)
	if err != nil {
		return err
	}
	for i := range f.GPU {
		g := f.GPU[i]
		if err := g.validate(); err != nil {
			return tf.Errorf(fmt.Sprintf("gpu[%d]", i), "%v", err)
		}
		c.putGPU(&g)
	}
	for i := range f.Model {
		m := f.Model[i]
		if err := m.validate(); err != nil {
			return tf.Errorf(fmt.Sprintf("model[%d]", i), "%v", err)
		}
		c.putModel(&m)
	}
	for i := range f.Engine {
		e := f.Engine[i]
		if err := e.validate(); err != nil {
			return tf.Errorf(fmt.Sprintf("engine[%d]", i), "%v", err)
		}
		c.putEngine(&e)
	}
	return nil
}

func (c *Catalog) putEngine(e *EnginePreset) { c.engines.put(e) }

// Engine looks up an engine preset by name or alias.
func (c *Catalog) Engine(name string) (*EnginePreset, error) {
	if e, ok := c.engines.get(name); ok {
		return e, nil
	}
	return nil, fmt.Errorf("unknown engine preset %q (known: %s; add others with [[engine]] in a catalog file)", name, strings.Join(c.engines.known(), ", "))
}

// Engines lists the catalog's engine presets in file order.
func (c *Catalog) Engines() []*EnginePreset { return slices.Clone(c.engines.list) }

func (c *Catalog) putGPU(g *GPU) { c.gpus.put(g) }

func (c *Catalog) putModel(m *Model) { c.models.put(m) }

func remove[T comparable](s []T, x T) []T {
	out := s[:0]
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// GPU looks up a GPU by name or alias.
func (c *Catalog) GPU(name string) (*GPU, error) {
	if g, ok := c.gpus.get(name); ok {
		return g, nil
	}
	return nil, fmt.Errorf("unknown GPU %q (known: %s)", name, strings.Join(c.gpus.known(), ", "))
}

// Model looks up a model by Hugging Face id or alias.
func (c *Catalog) Model(name string) (*Model, error) {
	if m, ok := c.models.get(name); ok {
		return m, nil
	}
	names := c.models.known()
	sort.Strings(names)
	return nil, fmt.Errorf("unknown model %q (known: %s; add others with a catalog file)", name, strings.Join(names, ", "))
}

// GPUs lists the catalog's GPUs in file order.
func (c *Catalog) GPUs() []*GPU { return slices.Clone(c.gpus.list) }

// Models lists the catalog's models in file order.
func (c *Catalog) Models() []*Model { return slices.Clone(c.models.list) }

// GPUsMeasuredAs returns the GPUs whose measured_as labels include label (case-insensitive).
func (c *Catalog) GPUsMeasuredAs(label string) []*GPU {
	var out []*GPU
	for _, g := range c.gpus.list {
		for _, l := range g.MeasuredAs {
			if strings.EqualFold(l, label) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
