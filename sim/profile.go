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
type Profile struct {
	Default Coefficients
	GPUs    map[string]Coefficients // keyed by lower-case GPU name
	// Source says where the coefficients come from, for run metadata.
	Source string
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

// Set stores coefficients for the GPU named name.
func (p *Profile) Set(name string, c Coefficients) {
	if p.GPUs == nil {
		p.GPUs = map[string]Coefficients{}
	}
	p.GPUs[strings.ToLower(name)] = c
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
	p := &Profile{GPUs: map[string]Coefficients{}}
	if base != nil {
		p.Default = base.Default
		for k, v := range base.GPUs {
			p.GPUs[k] = v
		}
	}
	p.Default = f.Default.over(p.Default)
	if err := p.Default.Validate(); err != nil {
		return nil, tf.Errorf("default", "%v", err)
	}
	for name, pc := range f.GPU {
		start, ok := p.GPUs[strings.ToLower(name)]
		if !ok {
			start = p.Default
		}
		c := pc.over(start)
		if err := c.Validate(); err != nil {
			return nil, tf.Errorf("gpu."+name, "%v", err)
		}
		p.GPUs[strings.ToLower(name)] = c
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
	names := make([]string, 0, len(p.GPUs))
	for k := range p.GPUs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		writeCoef(&b, "gpu."+n, p.GPUs[n])
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
