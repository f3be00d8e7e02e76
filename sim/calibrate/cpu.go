package calibrate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
	"github.com/mosaic-sched/mosaic/sim"
)

// CPUOverheadRow is one row of Vidur's engine CPU-overhead profile (a100__cpu_overheads.csv):
// the mean time per iteration of each CPU-side stage of a vLLM engine at one batch size,
// milliseconds.
type CPUOverheadRow struct {
	Line     int
	Model    string
	Batch    int
	TP       int
	Schedule float64 // scheduler
	Sampler  float64 // sampling (launch and synchronisation included)
	Prepare  float64 // preparing the model's input tensors
	Process  float64 // processing the model's outputs
	RayComm  float64 // communication with Ray workers (tensor parallelism with the Ray executor)
}

// Engine is the CPU time of an iteration outside the model and without Ray communication.
func (r CPUOverheadRow) Engine() float64 { return r.Schedule + r.Sampler + r.Prepare + r.Process }

var cpuColumns = []string{"schedule_mean", "sampler_e2e_mean", "prepare_inputs_e2e_mean", "process_model_outputs_mean",
	"ray_comm_time_mean", "model_name", "batch_size", "tensor_parallel_degree"}

// ReadCPUOverheads reads Vidur's CPU-overhead profile.
func ReadCPUOverheads(path string) ([]CPUOverheadRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading CPU overheads: %w", err)
	}
	defer f.Close()
	return ParseCPUOverheads(path, f)
}

// ParseCPUOverheads parses Vidur's CPU-overhead format; errors name the file, line and column.
func ParseCPUOverheads(path string, r io.Reader) ([]CPUOverheadRow, error) {
	cr, err := csvx.NewReader(path, r, csvx.Options{TrimHeader: true, HeaderError: "reading header"})
	if err != nil {
		return nil, err
	}
	if err := cr.Require("(not a Vidur CPU-overhead profile?)", cpuColumns...); err != nil {
		return nil, err
	}
	var out []CPUOverheadRow
	for cr.Next() {
		row := CPUOverheadRow{Line: cr.Line(), Model: cr.Str("model_name")}
		for _, c := range []struct {
			name string
			dst  *int
		}{{"batch_size", &row.Batch}, {"tensor_parallel_degree", &row.TP}} {
			v, err := strconv.Atoi(strings.TrimSpace(cr.Str(c.name)))
			if err != nil || v <= 0 {
				return nil, cr.Errorf(-1, "column %q: want a positive integer, got %q", c.name, cr.Str(c.name))
			}
			*c.dst = v
		}
		for _, c := range []struct {
			name string
			dst  *float64
		}{{"schedule_mean", &row.Schedule}, {"sampler_e2e_mean", &row.Sampler}, {"prepare_inputs_e2e_mean", &row.Prepare},
			{"process_model_outputs_mean", &row.Process}, {"ray_comm_time_mean", &row.RayComm}} {
			v, err := strconv.ParseFloat(strings.TrimSpace(cr.Str(c.name)), 64)
			if err != nil || v < 0 {
				return nil, cr.Errorf(-1, "column %q: want a non-negative number of milliseconds, got %q", c.name, cr.Str(c.name))
			}
			*c.dst = v
		}
		out = append(out, row)
	}
	if err := cr.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rows", path)
	}
	return out, nil
}

// OverheadLine is a least-squares fit of CPU time per iteration against the batch size:
// FixedMS + PerSeqMS * batch.
type OverheadLine struct {
	FixedMS, PerSeqMS float64
	Rows              int
	// MaxResidualPct is the largest relative residual of the fit over its rows, percent.
	MaxResidualPct float64
}

// FitOverheadLine fits y(row) = a + b * batch by least squares.
func FitOverheadLine(rows []CPUOverheadRow, y func(CPUOverheadRow) float64) (OverheadLine, error) {
	n := float64(len(rows))
	if len(rows) < 2 {
		return OverheadLine{}, errors.New("calibrate: a line needs at least two rows")
	}
	var sx, sy, sxx, sxy float64
	for _, r := range rows {
		x, v := float64(r.Batch), y(r)
		sx += x
		sy += v
		sxx += x * x
		sxy += x * v
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return OverheadLine{}, errors.New("calibrate: the rows have a single batch size")
	}
	b := (n*sxy - sx*sy) / den
	a := (sy - b*sx) / n
	l := OverheadLine{FixedMS: a, PerSeqMS: b, Rows: len(rows)}
	for _, r := range rows {
		if v := y(r); v > 0 {
			res := 100 * (a + b*float64(r.Batch) - v) / v
			if res < 0 {
				res = -res
			}
			l.MaxResidualPct = max(l.MaxResidualPct, res)
		}
	}
	return l, nil
}

// DecodeStep is the cost model's breakdown of one steady decode iteration.
type DecodeStep struct {
	Batch, Context int
	// Seconds is the iteration time; Linear, Attention, AllReduce, Floor (what a launch floor
	// adds above the GPU's work) and Overhead its parts.
	Seconds, Linear, Attention, AllReduce, Floor, Overhead float64
	// LinearBound is "compute" or "weights": which roof the linear layers hit.
	LinearBound string
}

// Throughput is output tokens per second of the step (one per sequence).
func (d DecodeStep) Throughput() float64 { return float64(d.Batch) / d.Seconds }

// DecodeBreakdown splits the iteration in which batch sequences, each with context cached
// tokens, decode one token.
func DecodeBreakdown(cm *sim.CostModel, batch, context int) DecodeStep {
	ctx := float64(batch * (context + 1))
	b := sim.Batch{Tokens: batch, AttentionPairs: ctx, KVTokens: ctx, Seqs: batch, Sampled: batch}
	d := DecodeStep{Batch: batch, Context: context, Seconds: cm.IterationSeconds(b)}
	gpu, overhead := cm.IterationParts(b)
	d.Overhead, d.Floor = overhead, cm.FloorSeconds(b)
	d.Linear, d.AllReduce, d.LinearBound = cm.LinearParts(b)
	d.Attention = gpu - d.Floor - d.Linear - d.AllReduce
	return d
}
