package calibrate

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// OperatorRow is the measured time of one transformer layer's token-parallel operators
// (projections, MLP, norms, rotary embedding, residual adds) for a number of tokens, from an
// operator-level profile in the format of Vidur's *__mlp.csv(.gz) files.
type OperatorRow struct {
	Tokens  int
	LayerMS float64 // median time of one layer, milliseconds
}

// layerOps are the per-layer operators of a Vidur MLP profile and how often each runs per layer.
var layerOps = map[string]int{
	"input_layernorm": 1, "attn_pre_proj": 1, "attn_rope": 1, "attn_post_proj": 1,
	"post_attention_layernorm": 1, "mlp_up_proj": 1, "mlp_act": 1, "mlp_down_proj": 1, "add": 2,
}

// ReadOperators reads the tensor-parallel-degree-1 rows of an operator profile (CSV, gzipped
// when the name ends in .gz).
func ReadOperators(path string) ([]OperatorRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading operator profile: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	cr, err := csvx.NewReader(path, r, csvx.Options{HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	need := []string{"num_tokens", "num_tensor_parallel_workers"}
	for op := range layerOps {
		need = append(need, "time_stats."+op+".median")
	}
	sort.Strings(need)
	if err := cr.Require("(not an operator profile?)", need...); err != nil {
		return nil, err
	}
	// A field that fails records the record's first error, which ends the loop and is returned.
	var rows []OperatorRow
	for cr.Next() {
		if cr.Str("num_tensor_parallel_workers") != "1" {
			continue
		}
		n, err := strconv.Atoi(cr.Str("num_tokens"))
		if err != nil || n <= 0 {
			cr.Failf("num_tokens", "want a positive integer, got %q", cr.Str("num_tokens"))
		}
		row := OperatorRow{Tokens: n}
		for op, times := range layerOps {
			name := "time_stats." + op + ".median"
			v, err := strconv.ParseFloat(cr.Str(name), 64)
			if err != nil || v < 0 {
				cr.Failf(name, "want a non-negative number, got %q", cr.Str(name))
			}
			row.LayerMS += float64(times) * v
		}
		rows = append(rows, row)
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no rows with tensor parallelism 1", path)
	}
	return rows, nil
}

// OperatorModel guesses the catalog model of a Vidur profile from its file name
// ("a100__meta-llama__Llama-2-7b-hf__mlp.csv.gz" is meta-llama/Llama-2-7b-hf).
func OperatorModel(path string, cat *sim.Catalog) (*sim.Model, error) {
	parts := strings.Split(filepath.Base(path), "__")
	if len(parts) < 4 {
		return nil, fmt.Errorf("%s: cannot tell the model from the file name (want GPU__ORG__MODEL__mlp.csv.gz)", path)
	}
	return cat.Model(parts[1] + "/" + parts[2])
}

// LinearEfficiency is what an operator profile says about the linear layers of a GPU.
type LinearEfficiency struct {
	// Compute is the median fraction of peak FLOP/s over rows of at least 1024 tokens,
	// where the layers are compute-bound.
	Compute float64
	// Memory is the fraction of HBM bandwidth at the fewest tokens measured, where the layers
	// are bound by streaming their weights (small operators' launch costs included).
	Memory float64
	Rows   int
}

// FitLinear derives the linear layers' efficiencies of model m on GPU g from operator rows.
func FitLinear(rows []OperatorRow, m *sim.Model, g *sim.GPU) (LinearEfficiency, error) {
	cm, err := sim.NewCostModel(m, g, sim.DefaultProfile().Default)
	if err != nil {
		return LinearEfficiency{}, err
	}
	flopsPerToken, weightBytes := cm.LinearWork()
	var big []float64
	minTok := rows[0]
	for _, r := range rows {
		t := r.LayerMS * float64(m.Layers) / 1e3
		if r.Tokens >= 1024 {
			big = append(big, flopsPerToken*float64(r.Tokens)/(t*g.PeakTFLOPs*1e12))
		}
		if r.Tokens < minTok.Tokens {
			minTok = r
		}
	}
	if len(big) == 0 {
		return LinearEfficiency{}, errors.New("operator profile has no rows of 1024 tokens or more")
	}
	sort.Float64s(big)
	t := minTok.LayerMS * float64(m.Layers) / 1e3
	return LinearEfficiency{
		Compute: big[len(big)/2],
		Memory:  weightBytes / (t * g.HBMGBps * 1e9),
		Rows:    len(rows),
	}, nil
}
