// Package calibrate compares the simulator's cost model with measured batch latencies and fits
// a GPU's coefficients to them.
//
// The measurements are rows of a benchmark in the format of Argonne's LLM-Inference-Bench
// (columns Hardware, Num of Hardware, Framework, Model, Input Output Length, Batch Size, Latency,
// Throughput): B requests of L prompt tokens and L output tokens submitted together, latency
// being the time until the last one finished. Each row is simulated exactly that way, on an
// engine configured as vLLM 0.6 runs by default (no chunked prefill, a token budget of
// max(max_model_len, 2048), 256 sequences, 16-token blocks, gpu_memory_utilization 0.9), on a
// tensor-parallel group of as many GPUs as the row used.
//
// The package also reads Splitwise's per-iteration times (splitwise.go) and forward-pass
// profiles written by tools/profile_forward.py (forward.go), and compares them with the cost
// model's iteration times.
//
// The analyses behind mosaic calibrate's subcommands are CheckData (data), CheckIterations
// (splitwise), FitCPUOverheads and CompareOverheads (cpu) and CheckForward (forward); a
// Holdout says which rows or points a fit leaves out.
package calibrate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// Row is one measurement.
type Row struct {
	Line      int // line in the file, for messages
	Hardware  string
	NumGPUs   int
	Framework string
	Model     string
	Length    int     // prompt tokens (and output tokens, unless Output says otherwise)
	Output    int     // output tokens when they differ from Length (0: Length)
	Batch     int     // requests submitted together
	Latency   float64 // seconds until the last request finished
}

// Outputs is the row's output tokens per request.
func (r Row) Outputs() int {
	if r.Output > 0 {
		return r.Output
	}
	return r.Length
}

var header = []string{"Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency", "Throughput"}

// ReadFile reads a benchmark CSV file.
func ReadFile(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading measurements: %w", err)
	}
	defer f.Close()
	return Read(path, f)
}

// Read parses benchmark rows; errors name the file, line and column.
func Read(path string, r io.Reader) ([]Row, error) {
	cr, err := csvx.NewReader(path, r, csvx.Options{FieldsPerRecord: -1, TrimHeader: true, HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	if err := cr.Require("(want "+strings.Join(header, ",")+")", header[:7]...); err != nil {
		return nil, err
	}
	get := func(name string) string { return strings.TrimSpace(cr.Str(name)) }
	atoi := func(name string) (int, error) {
		v, err := strconv.Atoi(get(name))
		if err != nil || v <= 0 {
			return 0, cr.Errorf(-1, "column %q: want a positive integer, got %q", name, get(name))
		}
		return v, nil
	}
	var rows []Row
	for cr.Next() {
		row := Row{Line: cr.Line(), Hardware: get("Hardware"), Framework: get("Framework"), Model: get("Model")}
		if row.NumGPUs, err = atoi("Num of Hardware"); err != nil {
			return nil, err
		}
		if row.Length, err = atoi("Input Output Length"); err != nil {
			return nil, err
		}
		if row.Batch, err = atoi("Batch Size"); err != nil {
			return nil, err
		}
		row.Latency, err = strconv.ParseFloat(get("Latency"), 64)
		if err != nil || !(row.Latency > 0) {
			return nil, cr.Errorf(-1, "column %q: want a positive number, got %q", "Latency", get("Latency"))
		}
		rows = append(rows, row)
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

// Case is a measured row bound to catalog entries.
type Case struct {
	Row
	GPU   *sim.GPU
	Model *sim.Model
	// TP is the tensor-parallel degree the row ran at: its number of GPUs times the GPU's
	// measured unit.
	TP int
	// Engine configures the engine that ran the row (nil: vLLM 0.6's defaults, BenchmarkEngine
	// at utilisation 0.9).
	Engine func(*sim.CostModel) (sim.EngineConfig, error)
}

// Filter selects rows.
type Filter struct {
	Framework string // case-insensitive; empty for all
	GPUs      int    // number of GPUs (as the file counts them); 0 for all
	// GPUCounts keeps rows measured on any of these numbers of GPUs (with GPUs, the union).
	GPUCounts []int
	GPU       string   // simulate on this catalog GPU: only rows measured on its hardware label
	Models    []string // catalog names or aliases; empty for all models the catalog knows
}

// Selection is the outcome of Select.
type Selection struct {
	Cases []Case
	// Skipped counts rows left out, by reason.
	Skipped map[string]int
}

// Select binds rows to catalog GPUs and models. Rows whose hardware or model the catalog does
// not know are skipped and counted; with Filter.GPU set only that GPU's hardware rows are kept.
func Select(rows []Row, cat *sim.Catalog, f Filter) (Selection, error) {
	sel := Selection{Skipped: map[string]int{}}
	var only *sim.GPU
	if f.GPU != "" {
		g, err := cat.GPU(f.GPU)
		if err != nil {
			return sel, err
		}
		only = g
	}
	var models []*sim.Model
	for _, name := range f.Models {
		m, err := cat.Model(name)
		if err != nil {
			return sel, err
		}
		models = append(models, m)
	}
	for _, r := range rows {
		if f.Framework != "" && !strings.EqualFold(r.Framework, f.Framework) {
			continue
		}
		if (f.GPUs > 0 || len(f.GPUCounts) > 0) && r.NumGPUs != f.GPUs && !slices.Contains(f.GPUCounts, r.NumGPUs) {
			continue
		}
		var g *sim.GPU
		if only != nil {
			if !contains(only.MeasuredAs, r.Hardware) {
				continue
			}
			g = only
		} else if gs := cat.GPUsMeasuredAs(r.Hardware); len(gs) > 0 {
			g = gs[0]
		} else {
			sel.Skipped["hardware not in the catalog: "+r.Hardware]++
			continue
		}
		m, err := cat.Model(r.Model)
		if err != nil {
			sel.Skipped["model not in the catalog: "+r.Model]++
			continue
		}
		if len(models) > 0 && !containsModel(models, m) {
			continue
		}
		tp := r.NumGPUs * g.Unit()
		if err := sim.ValidTP(m, tp); err != nil {
			sel.Skipped[fmt.Sprintf("%s: %v", g.Name, err)]++
			continue
		}
		if tp > 1 && g.CollectiveGBps(tp) <= 0 {
			sel.Skipped["tensor-parallel rows on a GPU without an interconnect in the catalog: "+g.Name]++
			continue
		}
		sel.Cases = append(sel.Cases, Case{Row: r, GPU: g, Model: m, TP: tp})
	}
	if len(sel.Cases) == 0 {
		return sel, errors.New("no measurement rows match the selection")
	}
	return sel, nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

func containsModel(list []*sim.Model, m *sim.Model) bool {
	for _, x := range list {
		if x == m {
			return true
		}
	}
	return false
}

// BenchmarkEngine returns the engine configuration vLLM 0.6 uses by default for a model: no
// chunked prefill, a token budget of max(max_model_len, 2048), 256 sequences, 16-token blocks,
// a 1% watermark, and the KV cache that fits at the given memory utilisation.
func BenchmarkEngine(cm *sim.CostModel, utilisation float64) (sim.EngineConfig, error) {
	eng := sim.EngineConfig{MaxNumSeqs: 256, MaxBatchedTokens: max(cm.Model.MaxModelLen, 2048), BlockSize: 16}
	return eng.WithKVCache(cm, utilisation)
}

// Prediction is the simulated latency of one case.
type Prediction struct {
	Case
	Predicted   float64 // seconds
	Preemptions int
	Err         error
}

// ErrorPct is the signed relative error of the prediction, in percent.
func (p Prediction) ErrorPct() float64 { return 100 * (p.Predicted - p.Latency) / p.Latency }

// Predict simulates one case with the given coefficients.
func Predict(c Case, coef sim.Coefficients) (Prediction, error) {
	p := Prediction{Case: c}
	cm, err := sim.NewCostModel(c.Model, c.GPU, coef, sim.WithTP(max(c.TP, 1)))
	if err != nil {
		return p, err
	}
	engine := c.Engine
	if engine == nil {
		engine = func(cm *sim.CostModel) (sim.EngineConfig, error) { return BenchmarkEngine(cm, 0.9) }
	}
	cfg, err := engine(cm)
	if err != nil {
		return p, err
	}
	eng, err := sim.NewEngine(cfg, cm)
	if err != nil {
		return p, err
	}
	reqs := make([]sim.Arrival, c.Batch)
	for i := range reqs {
		reqs[i] = sim.Arrival{Request: sim.Request{ID: uint64(i), PromptTokens: c.Length, OutputTokens: c.Outputs()}}
	}
	res, err := sim.Serve(eng, reqs)
	if err != nil {
		return p, fmt.Errorf("line %d (%s, L=%d, B=%d): %w", c.Line, c.Model.ID, c.Length, c.Batch, err)
	}
	p.Predicted = res.Makespan.Seconds()
	p.Preemptions = res.Stats.Preemptions
	return p, nil
}

// PredictAll simulates every case, in parallel, with per-GPU coefficients from prof.
func PredictAll(cases []Case, prof *sim.Profile) ([]Prediction, error) {
	out := make([]Prediction, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = Predict(cases[i], prof.For(cases[i].GPU))
		}(i)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// MAPE is the mean absolute percentage error of predictions.
func MAPE(ps []Prediction) float64 {
	if len(ps) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, p := range ps {
		s += math.Abs(p.ErrorPct())
	}
	return s / float64(len(ps))
}

// ByModel groups predictions by model id, in order of first appearance.
func ByModel(ps []Prediction) (ids []string, groups map[string][]Prediction) {
	groups = map[string][]Prediction{}
	for _, p := range ps {
		if _, ok := groups[p.Model.ID]; !ok {
			ids = append(ids, p.Model.ID)
		}
		groups[p.Model.ID] = append(groups[p.Model.ID], p)
	}
	return ids, groups
}

// Group is a set of predictions that share a key (a model, a GPU and TP degree).
type Group struct {
	Key   string
	Preds []Prediction
}

// GroupBy groups predictions by key, in order of first appearance.
func GroupBy(ps []Prediction, key func(Prediction) string) []Group {
	var out []Group
	index := map[string]int{}
	for _, p := range ps {
		k := key(p)
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, Group{Key: k})
		}
		out[i].Preds = append(out[i].Preds, p)
	}
	return out
}

// HardwareTP names a prediction's GPU and tensor-parallel degree, "A100-40GB TP2".
func HardwareTP(p Prediction) string { return fmt.Sprintf("%s TP%d", p.GPU.Name, max(p.TP, 1)) }

// Sort orders predictions by model, tensor-parallel degree, length and batch size.
func Sort(ps []Prediction) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Model.ID != b.Model.ID {
			return a.Model.ID < b.Model.ID
		}
		if a.TP != b.TP {
			return a.TP < b.TP
		}
		if a.Length != b.Length {
			return a.Length < b.Length
		}
		if a.Outputs() != b.Outputs() {
			return a.Outputs() < b.Outputs()
		}
		return a.Batch < b.Batch
	})
}
