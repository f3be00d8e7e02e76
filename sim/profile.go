package sim

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
)

// Profile holds the cost-model coefficients of GPUs: fitted ones for GPUs with measurements and
// a default set (the efficiencies fitted on measured GPUs) for the rest. A profile file is TOML:
//
//	[default]
//	compute_efficiency = 0.6
//	...
//	[gpu.A100-40GB]
//	memory_efficiency = 0.8   # keys left out come from [default]
//	basis = "..."             # how they were obtained (optional; see Provenance)
//	held_out = "L=256,1024"
//	held_out_mape_pct = 4.5
//	[gpu.A100-80GB]
//	like = "A100-40GB"        # another GPU's coefficients, by design (same chip)
//
// [default] may name the GPU its coefficients were fitted on (from = "A100-40GB"): a GPU
// without an entry of its own borrows them (Borrows).
type Profile struct {
	Default Coefficients
	GPUs    map[string]Coefficients // keyed by lower-case GPU name
	// DefaultFrom names the GPU the default coefficients were fitted on ("" when unknown).
	DefaultFrom string
	// Provenance says how each GPU's coefficients were obtained, keyed like GPUs (entries
	// without one say nothing).
	Provenance map[string]Provenance
	// Source says where the coefficients come from, for run metadata.
	Source string
}

// Provenance is how a GPU's coefficients were obtained.
type Provenance struct {
	// Basis is the measurements and command that fitted them.
	Basis string
	// Like names another GPU whose coefficients these are, by design (the same chip with
	// other memory); Basis says why.
	Like string
	// HeldOut says which measurements the fit left out ("tp=8"), and HeldOutMAPE its error
	// on them (percent): the fit's error on data it did not see.
	HeldOut     string
	HeldOutMAPE float64
}

// Borrows reports whether g has no coefficients of its own in the profile, and names the GPU
// whose coefficients (the default's) it takes instead ("" when the profile does not say).
func (p *Profile) Borrows(g *GPU) (from string, borrowed bool) {
	if p.Has(g) {
		return "", false
	}
	return p.DefaultFrom, true
}

// SetProvenance records how the coefficients of the GPU named name were obtained.
func (p *Profile) SetProvenance(name string, pv Provenance) {
	if p.Provenance == nil {
		p.Provenance = map[string]Provenance{}
	}
	p.Provenance[strings.ToLower(name)] = pv
}

// For returns the coefficients of g: its own entry if the profile has one, else the default.
func (p *Profile) For(g *GPU) Coefficients {
	if c, ok := p.GPUs[strings.ToLower(g.Name)]; ok {
		return c
	}
	return p.Default
}

// Has reports whether the profile has coefficients of its own for g.
func (p *Profile) Has(g *GPU) bool {
	_, ok := p.GPUs[strings.ToLower(g.Name)]
	return ok
}

// Set stores coefficients for the GPU named name, and for the GPUs like it (Provenance.Like).
func (p *Profile) Set(name string, c Coefficients) {
	if p.GPUs == nil {
		p.GPUs = map[string]Coefficients{}
	}
	p.GPUs[strings.ToLower(name)] = c
	for other, pv := range p.Provenance {
		if strings.EqualFold(pv.Like, name) {
			p.GPUs[other] = c
		}
	}
}

type partialCoef struct {
	ComputeEfficiency    *float64 `toml:"compute_efficiency"`
	MemoryEfficiency     *float64 `toml:"memory_efficiency"`
	AttentionEfficiency  *float64 `toml:"attention_efficiency"`
	AttComputeEfficiency *float64 `toml:"attention_compute_efficiency"`
	IterationOverheadMS  *float64 `toml:"iteration_overhead_ms"`
	PerSeqOverheadMS     *float64 `toml:"per_seq_overhead_ms"`
	ReserveGiB           *float64 `toml:"reserve_gib"`
	LoadGBps             *float64 `toml:"load_gbps"`
	StartupS             *float64 `toml:"startup_s"`
	TPReserveGiB         *float64 `toml:"tp_reserve_gib"`
	AllReduceUS          *float64 `toml:"allreduce_us"`
	AllReduceHopUS       *float64 `toml:"allreduce_hop_us"`
	LinkEfficiency       *float64 `toml:"link_efficiency"`
	LaunchFloorMS        *float64 `toml:"launch_floor_ms"`
	PagedAttentionV1     *float64 `toml:"paged_attention_v1_factor"`
	LayerLatencyUS       *float64 `toml:"layer_latency_us"`

	// Provenance keys (GPU tables), and [default]'s from.
	Basis       string   `toml:"basis"`
	Like        string   `toml:"like"`
	HeldOut     string   `toml:"held_out"`
	HeldOutMAPE *float64 `toml:"held_out_mape_pct"`
	From        string   `toml:"from"`
}

func (p partialCoef) over(c Coefficients) Coefficients {
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&c.ComputeEfficiency, p.ComputeEfficiency)
	set(&c.MemoryEfficiency, p.MemoryEfficiency)
	set(&c.AttentionEfficiency, p.AttentionEfficiency)
	set(&c.AttentionComputeEfficiency, p.AttComputeEfficiency)
	set(&c.IterationOverheadMS, p.IterationOverheadMS)
	set(&c.PerSeqOverheadMS, p.PerSeqOverheadMS)
	set(&c.ReserveGiB, p.ReserveGiB)
	set(&c.LoadGBps, p.LoadGBps)
	set(&c.StartupS, p.StartupS)
	set(&c.TPReserveGiB, p.TPReserveGiB)
	set(&c.AllReduceUS, p.AllReduceUS)
	set(&c.AllReduceHopUS, p.AllReduceHopUS)
	set(&c.LinkEfficiency, p.LinkEfficiency)
	set(&c.LaunchFloorMS, p.LaunchFloorMS)
	set(&c.PagedAttentionV1Factor, p.PagedAttentionV1)
	set(&c.LayerLatencyUS, p.LayerLatencyUS)
	return c
}

type profileFile struct {
	Default partialCoef            `toml:"default"`
	GPU     map[string]partialCoef `toml:"gpu"`
}

// DefaultProfile returns the built-in profile embedded in the binary (catalog/profile.toml,
// written by `mosaic calibrate --fit`).
func DefaultProfile() *Profile {
	data, err := catalogFS.ReadFile("catalog/profile.toml")
	if err != nil {
		panic(err)
	}
	p, err := parseProfile("built-in profile", data, nil)
	if err != nil {
		panic(err)
	}
	p.Source = "built-in"
	return p
}

// LoadProfile reads a profile file. Keys it leaves out are taken from base (the built-in profile
// when base is nil), so a file may set only what was measured.
func LoadProfile(path string, base *Profile) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading profile: %w", err)
	}
	if base == nil {
		base = DefaultProfile()
	}
	p, err := parseProfile(path, data, base)
	if err != nil {
		return nil, err
	}
	p.Source = path
	return p, nil
}

func parseProfile(path string, data []byte, base *Profile) (*Profile, error) {
	var f profileFile
	tf, err := tomlx.Decode(path, data, &f)
	if err != nil {
		return nil, err
	}
	p := &Profile{GPUs: map[string]Coefficients{}, Provenance: map[string]Provenance{}}
	if base != nil {
		p.Default, p.DefaultFrom = base.Default, base.DefaultFrom
		for k, v := range base.GPUs {
			p.GPUs[k] = v
		}
		for k, v := range base.Provenance {
			p.Provenance[k] = v
		}
	}
	p.Default = f.Default.over(p.Default)
	if err := p.Default.Validate(); err != nil {
		return nil, tf.Errorf("default", "%v", err)
	}
	if f.Default.From != "" {
		p.DefaultFrom = f.Default.From
	}
	if f.Default.Basis != "" || f.Default.Like != "" || f.Default.HeldOut != "" || f.Default.HeldOutMAPE != nil {
		return nil, tf.Errorf("default", "basis, like, held_out and held_out_mape_pct belong in a [gpu.NAME] table ([default] takes from)")
	}
	// GPUs whose entry is like another's come last, so that the other's is known.
	names := make([]string, 0, len(f.GPU))
	for name := range f.GPU {
		names = append(names, name)
	}
	sort.SliceStable(names, func(i, j int) bool { return f.GPU[names[i]].Like == "" && f.GPU[names[j]].Like != "" })
	for _, name := range names {
		pc, key := f.GPU[name], "gpu."+name
		if pc.From != "" {
			return nil, tf.Errorf(key+".from", "belongs in [default]")
		}
		start, ok := p.GPUs[strings.ToLower(name)]
		if !ok {
			start = p.Default
		}
		if pc.Like != "" {
			for other, opc := range f.GPU {
				if strings.EqualFold(other, pc.Like) && opc.Like != "" {
					return nil, tf.Errorf(key+".like", "%s is itself like another GPU: name that one", pc.Like)
				}
			}
			like, ok := p.GPUs[strings.ToLower(pc.Like)]
			if !ok {
				return nil, tf.Errorf(key+".like", "no [gpu.%s] table to take coefficients from", pc.Like)
			}
			start = like
		}
		c := pc.over(start)
		if err := c.Validate(); err != nil {
			return nil, tf.Errorf(key, "%v", err)
		}
		p.GPUs[strings.ToLower(name)] = c
		if pc.Basis != "" || pc.Like != "" || pc.HeldOut != "" || pc.HeldOutMAPE != nil {
			pv := Provenance{Basis: pc.Basis, Like: pc.Like, HeldOut: pc.HeldOut}
			if pc.HeldOutMAPE != nil {
				pv.HeldOutMAPE = *pc.HeldOutMAPE
			}
			p.Provenance[strings.ToLower(name)] = pv
		}
	}
	return p, nil
}

// Write writes the profile as TOML, with header lines as comments.
func (p *Profile) Write(w io.Writer, header ...string) error {
	var b strings.Builder
	for _, h := range header {
		fmt.Fprintf(&b, "# %s\n", h)
	}
	writeCoef(&b, "default", p.Default)
	if p.DefaultFrom != "" {
		fmt.Fprintf(&b, "from = %q\n", p.DefaultFrom)
	}
	names := make([]string, 0, len(p.GPUs))
	for k := range p.GPUs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		pv := p.Provenance[n]
		if like, ok := p.GPUs[strings.ToLower(pv.Like)]; ok && like == p.GPUs[n] {
			// Still the other GPU's coefficients: say so rather than copy them.
			fmt.Fprintf(&b, "\n[gpu.%s]\nlike = %q\n", n, pv.Like)
		} else {
			writeCoef(&b, "gpu."+n, p.GPUs[n])
		}
		if pv.Basis != "" {
			fmt.Fprintf(&b, "basis = %q\n", pv.Basis)
		}
		if pv.HeldOut != "" {
			fmt.Fprintf(&b, "held_out = %q\nheld_out_mape_pct = %.2f\n", pv.HeldOut, pv.HeldOutMAPE)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCoef(b *strings.Builder, table string, c Coefficients) {
	fmt.Fprintf(b, "\n[%s]\n", table)
	fmt.Fprintf(b, "compute_efficiency = %.4f\n", c.ComputeEfficiency)
	fmt.Fprintf(b, "memory_efficiency = %.4f\n", c.MemoryEfficiency)
	fmt.Fprintf(b, "attention_efficiency = %.4f\n", c.AttentionEfficiency)
	if c.AttentionComputeEfficiency > 0 { // 0: attention_efficiency on both roofs
		fmt.Fprintf(b, "attention_compute_efficiency = %.4g\n", c.AttentionComputeEfficiency)
	}
	fmt.Fprintf(b, "iteration_overhead_ms = %.4f\n", c.IterationOverheadMS)
	fmt.Fprintf(b, "per_seq_overhead_ms = %.5f\n", c.PerSeqOverheadMS)
	fmt.Fprintf(b, "reserve_gib = %.3f\n", c.ReserveGiB)
	fmt.Fprintf(b, "load_gbps = %.3f\n", c.LoadGBps)
	fmt.Fprintf(b, "startup_s = %.3f\n", c.StartupS)
	fmt.Fprintf(b, "tp_reserve_gib = %.3f\n", c.TPReserveGiB)
	fmt.Fprintf(b, "allreduce_us = %.3f\n", c.AllReduceUS)
	fmt.Fprintf(b, "allreduce_hop_us = %.3f\n", c.AllReduceHopUS)
	fmt.Fprintf(b, "link_efficiency = %.3f\n", c.LinkEfficiency)
	if c.LaunchFloorMS > 0 { // an eager engine's; profiles of engines with CUDA graphs omit it
		fmt.Fprintf(b, "launch_floor_ms = %.4f\n", c.LaunchFloorMS)
	}
	if c.PagedAttentionV1Factor > 0 { // engines that decode with vLLM's PagedAttention kernels
		fmt.Fprintf(b, "paged_attention_v1_factor = %.4f\n", c.PagedAttentionV1Factor)
	}
	if c.LayerLatencyUS > 0 { // fitted on bare forward passes; end-to-end fits leave it in the overheads
		fmt.Fprintf(b, "layer_latency_us = %.3f\n", c.LayerLatencyUS)
	}
}
