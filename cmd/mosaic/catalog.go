package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/sim"
)

// runCatalog lists the built-in catalog (extended by --catalog): GPUs, models or engine
// presets.
func runCatalog(args []string, stdout io.Writer) error {
	fs := newFlagSet("catalog", flag.ContinueOnError)
	extra := fs.String("catalog", "", "extra GPUs, models and engine presets (TOML)")
	profile := fs.String("profile", "", "with gpus: say where this cost-model profile's coefficients come from instead of the built-in one's")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic catalog [gpus|models|engines|policies|rules] [--catalog extra.toml] [--profile profile.toml]\n\nexample:\n  mosaic catalog models")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	what := "engines"
	switch len(pos) {
	case 0:
	case 1:
		what = pos[0]
	default:
		return fmt.Errorf("%w: want one of gpus, models, engines, policies, rules", errUsage)
	}
	cat := sim.DefaultCatalog()
	if *extra != "" {
		if err := cat.AddFile(*extra); err != nil {
			return err
		}
	}
	w := bufio.NewWriter(stdout)
	switch what {
	case "gpus":
		prof := sim.DefaultProfile()
		if *profile != "" {
			if prof, err = sim.LoadProfile(*profile, nil); err != nil {
				return err
			}
		}
		listGPUs(w, cat, prof)
	case "models":
		listModels(w, cat)
	case "engines":
		listEngines(w, cat)
	case "policies":
		fmt.Fprintf(w, "%-14s %s\n", "policy", "what it does, and its own options (besides the common ones)")
		for _, p := range experiments.Policies() {
			fmt.Fprintf(w, "%-14s %s\n", p.Name, p.Summary)
			if len(p.Options) > 0 {
				fmt.Fprintf(w, "%-14s options: %s\n", "", strings.Join(p.Options, ", "))
			}
		}
		fmt.Fprintf(w, "\nevery [[policy]] takes: %s\n", strings.Join(experiments.CommonPolicyOptions, ", "))
		fmt.Fprintf(w, "dispatch (queries arriving over time): %s\n", strings.Join(online.Orders, ", "))
	case "rules":
		fmt.Fprint(w, `rule (a [[policy]] key, or [aggregation] threshold for every policy)
threshold = T             skip a gated call when its inputs' top answer has at least T of their votes
                          (1: unanimous only; 0.6667: also 2:1 of three; above 1: never skip)
dynamic_threshold = { high = 1.0, low = 0.6667, backlog = 64, budget = 0.2 }
                          skip at high; at low too while the aggregating model has at least backlog
                          calls released and unfinished, for at most budget of the gated calls
early_exit = { agreement = 1.0, min_finished = 2 [, min_confidence = C] }
                          as a gated call's inputs finish, go on once min_finished agree at the
                          agreement share; cancel the rest (Faster-MoA)
overlap = true            release calls that read others on arrival and prefill their prompts as
                          their inputs finish (Faster-MoA)
`)
	default:
		return fmt.Errorf("%w: unknown listing %q (want gpus, models, engines, policies or rules)", errUsage, what)
	}
	return w.Flush()
}

// listGPUs lists the catalog's GPUs with where prof's coefficients for each come from: a fit
// of their own (with its error on the measurements it held out), another GPU's by design
// (like), or the default's, borrowed.
func listGPUs(w io.Writer, cat *sim.Catalog, prof *sim.Profile) {
	fmt.Fprintf(w, "%-12s %-7s %11s %8s %9s %10s %-13s %9s  %-22s %s\n", "gpu", "vendor", "peak_tflops", "fp8", "hbm_gbps", "memory_gib", "interconnect", "link_gbps", "coefficients", "held_out_mape")
	var notes []string
	for _, g := range cat.GPUs() {
		ic := g.Interconnect
		if ic == "" {
			ic = "-"
		}
		coef, held := coefficientsOf(prof, g)
		fp8 := "-"
		if g.PeakTFLOPsFP8 > 0 {
			fp8 = fmt.Sprintf("%g", g.PeakTFLOPsFP8)
		}
		fmt.Fprintf(w, "%-12s %-7s %11g %8s %9g %10g %-13s %9g  %-22s %s\n", g.Name, g.Vendor, g.PeakTFLOPs, fp8, g.HBMGBps, g.MemoryGiB, ic, g.LinkGBps, coef, held)
		if pv, ok := prof.Provenance[strings.ToLower(g.Name)]; ok && pv.Basis != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", g.Name, pv.Basis))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\ncoefficients of %s profile:\n  %s\n", prof.Source, strings.Join(notes, "\n  "))
	}
}

// coefficientsOf says where g's coefficients come from in prof, and their held-out error.
func coefficientsOf(prof *sim.Profile, g *sim.GPU) (string, string) {
	if from, borrowed := prof.Borrows(g); borrowed {
		return "borrowed: " + orDefault(from, "[default]"), "-"
	}
	pv := prof.Provenance[strings.ToLower(g.Name)]
	held := "-"
	if pv.HeldOut != "" {
		held = fmt.Sprintf("%.2f%% (%s)", pv.HeldOutMAPE, pv.HeldOut)
	}
	if pv.Like != "" {
		return "like " + pv.Like, held
	}
	return "own fit", held
}

func listModels(w io.Writer, cat *sim.Catalog) {
	fmt.Fprintf(w, "%-42s %8s %6s %6s %9s %7s %8s %10s %-20s\n", "model", "params_b", "layers", "hidden", "heads/kv", "experts", "max_len", "kv_kib_tok", "aliases")
	for _, m := range cat.Models() {
		experts := "-"
		if m.MoE() {
			experts = fmt.Sprintf("%d/%d", m.ExpertsPerToken, m.Experts)
		}
		fmt.Fprintf(w, "%-42s %8.2f %6d %6d %9s %7s %8d %10.0f %-20s\n", m.ID, m.ParamsB, m.Layers, m.Hidden,
			fmt.Sprintf("%d/%d", m.Heads, m.KVHeads), experts, m.MaxModelLen, m.KVBytesPerToken()/1024, strings.Join(m.Aliases, ","))
	}
}

func listEngines(w io.Writer, cat *sim.Catalog) {
	fmt.Fprintf(w, "%-10s %7s %-14s %-13s %7s %11s %10s %10s %10s\n", "preset", "chunked", "max_tokens", "max_num_seqs", "prefix", "graphs_upto", "iter_ms", "seq_ms", "floor_ms")
	for _, e := range cat.Engines() {
		budget := fmt.Sprint(e.MaxBatchedTokens)
		if e.MaxBatchedTokens == 0 {
			budget = "model_len"
		}
		seqs := fmt.Sprint(e.MaxNumSeqs)
		if e.LargeGPUMaxBatchedTokens > 0 {
			budget += fmt.Sprintf("|%d", e.LargeGPUMaxBatchedTokens)
		}
		if e.LargeGPUMaxNumSeqs > 0 {
			seqs += fmt.Sprintf("|%d", e.LargeGPUMaxNumSeqs)
		}
		graphs := "-"
		if n := len(e.CUDAGraphSizes); n > 0 {
			graphs = fmt.Sprint(e.CUDAGraphSizes[n-1])
		}
		over := func(v *float64) string {
			if v == nil {
				return "profile"
			}
			return fmt.Sprintf("%.4f", *v)
		}
		fmt.Fprintf(w, "%-10s %7v %-14s %-13s %7v %11s %10s %10s %10s\n", e.Name, e.ChunkedPrefill, budget, seqs, e.PrefixCaching, graphs,
			over(e.IterationOverheadMS), over(e.PerSeqOverheadMS), over(e.LaunchFloorMS))
	}
	fmt.Fprintln(w, "\nmax_tokens and max_num_seqs: a|b means a, or b on GPUs of >= 70 GiB that are not A100s; model_len is max(max_model_len, 2048).")
	fmt.Fprintln(w, "iter_ms, seq_ms: CPU overheads per iteration and per sequence; floor_ms: an eager engine's launch floor of an iteration's GPU part; \"profile\" means unmeasured, the GPU profile's apply.")
	for _, e := range cat.Engines() {
		fmt.Fprintf(w, "\n%s: %s\n  defaults: %s\n", e.Name, e.Description, e.Source)
		if e.OverheadSource != "" {
			fmt.Fprintf(w, "  overheads: %s\n", e.OverheadSource)
		}
	}
}
