package calibrate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// ForwardPoint is one measured forward pass from a profile written by
// tools/profile_forward.py: the GPU time of the model's forward pass alone (no scheduling, no
// sampling, no Python between iterations), under CUDA graphs where the script captured them.
type ForwardPoint struct {
	Line int
	// Phase is "decode" (Batch sequences, one new token each, attending over Context cached
	// tokens) or "prefill" (Batch sequences of Context new tokens each, from an empty cache).
	Phase   string
	Batch   int
	Context int
	// Seconds is the median time of the forward pass.
	Seconds float64
	// Model and GPU name what was measured, as the script recorded them: catalog names, or
	// empty; `mosaic calibrate forward` takes the model from this column unless told one.
	Model, GPU string
	// TP is the tensor-parallel degree whose one-GPU shard ran (column tp, written by
	// tools/profile_forward.py --tp): the heads, KV heads, MLP and vocabulary split TP ways,
	// on one GPU, with no all-reduce. 0 when the file has no tp column (a whole model, unless
	// the user says otherwise).
	TP int
}

// forwardHeader lists the columns ReadForward needs; the script writes more (std, repeats,
// versions), which are ignored.
var forwardHeader = []string{"phase", "batch_size", "context_len", "time_ms"}

// ReadForward reads a forward-pass profile (CSV).
func ReadForward(path string) ([]ForwardPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading forward-pass profile: %w", err)
	}
	defer f.Close()
	return ParseForward(path, f)
}

// ParseForward parses a forward-pass profile; errors name the file, line and column. Lines
// starting with # are comments.
func ParseForward(path string, r io.Reader) ([]ForwardPoint, error) {
	cr, err := csvx.NewReader(path, r, csvx.Options{Comment: '#', TrimHeader: true, HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	if err := cr.Require("(want at least "+strings.Join(forwardHeader, ",")+"; see tools/profile_forward.py)", forwardHeader...); err != nil {
		return nil, err
	}
	get := func(name string) string { return strings.TrimSpace(cr.StrOr(name, "")) }
	var out []ForwardPoint
	for cr.Next() {
		p := ForwardPoint{Line: cr.Line(), Phase: get("phase"), Model: get("model"), GPU: get("gpu")}
		if p.Phase != "decode" && p.Phase != "prefill" {
			return nil, cr.Errorf(-1, "column \"phase\": want decode or prefill, got %q", p.Phase)
		}
		for _, c := range []struct {
			name string
			dst  *int
		}{{"batch_size", &p.Batch}, {"context_len", &p.Context}} {
			v, err := strconv.Atoi(get(c.name))
			if err != nil || v <= 0 {
				return nil, cr.Errorf(-1, "column %q: want a positive integer, got %q", c.name, get(c.name))
			}
			*c.dst = v
		}
		ms, err := strconv.ParseFloat(get("time_ms"), 64)
		if err != nil || !(ms > 0) {
			return nil, cr.Errorf(-1, "column \"time_ms\": want a positive number, got %q", get("time_ms"))
		}
		p.Seconds = ms / 1e3
		if cr.Has("tp") {
			v, err := strconv.Atoi(get("tp"))
			if err != nil || v <= 0 {
				return nil, cr.Errorf(-1, "column \"tp\": want a positive integer, got %q", get("tp"))
			}
			p.TP = v
		}
		out = append(out, p)
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no measurements", path)
	}
	return out, nil
}

// ForwardBatch is the batch a forward point ran, as the cost model sees it.
func ForwardBatch(p ForwardPoint) sim.Batch {
	b, n := float64(p.Batch), float64(p.Context)
	if p.Phase == "prefill" {
		return sim.Batch{Tokens: p.Batch * p.Context, AttentionPairs: b * n * (n + 1) / 2, KVTokens: b * n, Seqs: p.Batch, Sampled: p.Batch}
	}
	// Decode: one new token per sequence over Context cached ones (Context+1 with its own).
	return sim.Batch{Tokens: p.Batch, AttentionPairs: b * (n + 1), KVTokens: b * (n + 1), Seqs: p.Batch, Sampled: p.Batch}
}

// ForwardPrediction compares a forward point with the GPU part of the cost model: the
// roofline terms and all-reduces, without the engine's per-iteration and per-sequence
// overheads (which a bare forward pass does not pay).
type ForwardPrediction struct {
	ForwardPoint
	Predicted float64 // seconds
}

// ErrorPct is the signed relative error of the prediction, in percent.
func (p ForwardPrediction) ErrorPct() float64 { return 100 * (p.Predicted - p.Seconds) / p.Seconds }

// PredictForward predicts every point with cm's GPU part. With tensor parallelism (cm.TP > 1)
// the points are one GPU running its shard, as tools/profile_forward.py --tp measures it: the
// all-reduces, which need the group's other GPUs, are left out (CostModel.ShardSeconds).
func PredictForward(points []ForwardPoint, cm *sim.CostModel) []ForwardPrediction {
	out := make([]ForwardPrediction, len(points))
	for i, p := range points {
		out[i] = ForwardPrediction{ForwardPoint: p, Predicted: cm.ShardSeconds(ForwardBatch(p))}
	}
	return out
}

// ForwardFitParams are the coefficients FitForward varies unless told otherwise: a bare
// forward pass pins the GPU's efficiencies (linear layers on the compute and the weight
// roofs, attention on the KV-cache roof), not the engine's overheads or memory reserves.
var ForwardFitParams = []string{"compute_efficiency", "memory_efficiency", "attention_efficiency"}

// ForwardFittable are the coefficients a bare forward pass's time depends on (the others are
// engine overheads, memory reserves and all-reduce terms).
var ForwardFittable = []string{"compute_efficiency", "memory_efficiency", "attention_efficiency",
	"attention_compute_efficiency", "layer_latency_us", "launch_floor_ms", "paged_attention_v1_factor"}

// ForwardSet is the forward points of one model shape: the model at tensor-parallel degree TP,
// whose one-GPU shard ran when TP > 1.
type ForwardSet struct {
	Model  *sim.Model
	TP     int
	Points []ForwardPoint
}

// FitForward fits the efficiencies of GPU g to the forward points of sets, minimising the mean
// absolute percentage error of PredictForward over all their points, from start. It varies
// ForwardFitParams, and layer_latency_us when the points span two or more shapes (one shape's
// pin it only weakly against memory_efficiency), or opts.Only when given; opts.Also beside
// them (attention_compute_efficiency, say, for long prefills).
func FitForward(sets []ForwardSet, g *sim.GPU, start sim.Coefficients, opts FitOptions) (FitResult, error) {
	n := 0
	for _, s := range sets {
		n += len(s.Points)
	}
	if n == 0 {
		return FitResult{}, errors.New("calibrate: nothing to fit")
	}
	names := ForwardFitParams
	shapes := 0
	for _, s := range sets {
		if len(s.Points) > 0 {
			shapes++
		}
	}
	if shapes > 1 {
		// A fixed time per layer and slower weight streaming add the same time to every
		// weight-bound point of one shape, so one shape's points tell them apart only through
		// its compute-bound ones (on the H200's Llama-3-8B points alone, the fit drives
		// memory_efficiency to its bound); shapes of different layer counts and sizes pin both.
		names = append(names[:len(names):len(names)], "layer_latency_us")
	}
	return minimizeNamed(names, opts, start, func(coef sim.Coefficients) float64 {
		sum := 0.0
		for _, s := range sets {
			if len(s.Points) == 0 {
				continue
			}
			cm, err := sim.NewCostModel(s.Model, g, coef, sim.WithTP(s.TP))
			if err != nil {
				return math.Inf(1)
			}
			sum += ForwardMAPE(PredictForward(s.Points, cm)) * float64(len(s.Points))
		}
		return sum / float64(n)
	})
}

// ForwardMAPE is the mean absolute percentage error of forward predictions.
func ForwardMAPE(ps []ForwardPrediction) float64 {
	if len(ps) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, p := range ps {
		s += math.Abs(p.ErrorPct())
	}
	return s / float64(len(ps))
}
