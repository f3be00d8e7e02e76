package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/experiments"
	"github.com/mosaic-sched/mosaic/results"
)

// onlineExperiments are `mosaic online`'s default experiment files: the paper's three
// workloads and the agent program.
var onlineExperiments = append(append([]string{}, paperExperiments...), "experiments/examples/agent-dag.toml")

func runOnline(args []string, stdout io.Writer) error {
	fs := newFlagSet("online", flag.ContinueOnError)
	loadsFlag := fs.String("loads", joinFloats(experiments.OnlineLoads), "arrival rates as shares of the cluster's capacity (light, near saturation, overloaded)")
	seeds := fs.Int("seeds", 1, "run each point with seeds 1..N")
	queries := fs.Int("queries", 4000, "queries at the lightest load; every load arrives over the same horizon (the first 20% of each point's queries are its warm-up)")
	slo := fs.Duration("slo", 10*time.Minute, "end-to-end SLO of an experiment that gives none ([slo] e2e)")
	minHorizon := fs.Duration("min-horizon", time.Hour, "the least time queries arrive for, whatever --queries gives (the model loads at the start must not dominate the window)")
	dir := fs.String("results", "out/online", "where the runs go: one sweep folder per experiment")
	out := fs.String("o", "", "also write the table (markdown) to this file")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: mosaic online [--loads 0.5,0.9,1.2] [--seeds 1] [--queries 4000] [--min-horizon 1h] [--slo 10m] [--results DIR] [-o table.md] [EXPERIMENT.toml]...

Serves each experiment online with the policies people deploy and the program-aware ones
(round-robin, data-parallel, mosaic, mosaic+sjf, online, online+plas, online+atlas, plas,
atlas) at loads
given as shares of the cluster's capacity (the arrival rate at which every worker is busy all
the time), and prints, per experiment, load and policy, the figures over each run's
steady-state window: mean, p50 and p99 end-to-end latency, p99 time to the final first token,
SLO attainment, goodput and the rate at which queries finished. The loads follow each seed's own
capacity (its workload's mix of calls differs from seed to seed); each experiment and seed runs
as a sweep over workload.arrival_rate into DIR/NAME/seed-S: mosaic plot DIR/NAME/seed-1 draws
its latency against load. Without arguments: the three paper experiments and the agent program
(experiments/examples/agent-dag.toml).`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	loads, err := parseFloats(*loadsFlag)
	if err != nil {
		return fmt.Errorf("%w: --loads: %v", errUsage, err)
	}
	switch {
	case *seeds < 1:
		return fmt.Errorf("%w: --seeds must be at least 1, got %d", errUsage, *seeds)
	case *queries < 10:
		return fmt.Errorf("%w: --queries must be at least 10, got %d", errUsage, *queries)
	case *minHorizon < 0:
		return fmt.Errorf("%w: --min-horizon must not be negative, got %v", errUsage, *minHorizon)
	case *slo <= 0:
		return fmt.Errorf("%w: --slo must be a positive duration, got %v", errUsage, *slo)
	}
	if len(pos) == 0 {
		for _, p := range onlineExperiments {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%w: %s not found: run from the repository root, or name the experiment files", errUsage, p)
			}
		}
		pos = onlineExperiments
	}
	if parseOnly {
		return nil
	}
	var rows []results.SummaryRow
	for _, path := range pos {
		rs, err := serveOnline(path, loads, *seeds, *queries, *minHorizon, *slo, filepath.Join(*dir, strings.TrimSuffix(filepath.Base(path), ".toml")))
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	table, err := experiments.OnlineRows(rows)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := experiments.WriteOnlineTable(&b, table); err != nil {
		return err
	}
	if err := saveTable(*out, b.Bytes()); err != nil {
		return err
	}
	_, err = stdout.Write(b.Bytes())
	return err
}

// serveOnline runs one experiment with the online policies at loads x its capacity, for
// each of seeds 1..n (the capacity follows the seed's workload: its mix of calls differs), as
// one sweep over the rate per seed into dir/seed-S, and returns the sweeps' summary rows.
func serveOnline(path string, loads []float64, seeds, queries int, minHorizon, slo time.Duration, dir string) ([]results.SummaryRow, error) {
	var rows []results.SummaryRow
	light := slices.Min(loads)
	for seed := 1; seed <= seeds; seed++ {
		// The experiment with the online policies, the seed and an SLO, and the sets given.
		load := func(sets ...string) (*experiments.Experiment, error) {
			e, err := experiments.Load(path)
			if err != nil {
				return nil, err
			}
			e.ReplacePolicies(experiments.OnlinePolicies())
			sets = append(sets, "seed="+strconv.Itoa(seed))
			if e.SLO.E2E == 0 && e.SLO.TTFT == 0 {
				sets = append(sets, "slo.e2e="+slo.String())
			}
			for _, s := range sets {
				if err := e.Set(s); err != nil {
					return nil, err
				}
			}
			return e, nil
		}
		// The capacity does not depend on the rate: any rate resolves the experiment online.
		e, err := load("workload.queries="+strconv.Itoa(queries), "workload.arrival_rate=1")
		if err != nil {
			return nil, err
		}
		r, err := e.Resolve()
		if err != nil {
			return nil, err
		}
		c, err := r.Capacity(nil)
		if err != nil {
			return nil, err
		}
		rates := make([]float64, len(loads))
		for i, l := range loads {
			rates[i] = l * c.QPS
		}
		// Every load arrives over the same horizon, the lightest load's queries: an overloaded
		// point's latencies grow with the horizon, so they compare only at one horizon.
		horizon := max(minHorizon, time.Duration(float64(queries)/(light*c.QPS)*float64(time.Second))).Round(time.Second)
		point := func() (*experiments.Experiment, error) { return load("workload.duration=" + horizon.String()) }
		sw, err := experiments.ParseSweep([]string{"workload.arrival_rate=" + joinFloats(rates)})
		if err != nil {
			return nil, err
		}
		out := filepath.Join(dir, "seed-"+strconv.Itoa(seed))
		slog.Info("serving online", "experiment", e.Name, "seed", seed, "capacity_qps", strconv.FormatFloat(c.QPS, 'g', 4, 64), "rates", joinFloats(rates), "horizon", horizon, "dir", out)
		if err := sweepInto(path, e.Name, point, sw, out); err != nil {
			return nil, err
		}
		rs, err := results.ReadSummaryCSV(filepath.Join(out, "summary.csv"))
		if err != nil {
			return nil, err
		}
		// Each point's own load is its rate over the capacity of its own queries (a sample
		// that differs a little from the one here); the table groups by the load asked for.
		for i := range rs {
			if st := rs[i].Steady; st != nil {
				for k, rate := range rates {
					if strconv.FormatFloat(rate, 'g', 4, 64) == strconv.FormatFloat(st.ArrivalRate, 'g', 4, 64) {
						st.Load = loads[k]
					}
				}
			}
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}

// joinFloats writes numbers for a flag or a sweep, comma-separated, to 4 significant digits.
func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'g', 4, 64)
	}
	return strings.Join(s, ",")
}

// parseFloats reads a comma-separated list of positive numbers.
func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x > 0) {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, x)
	}
	return out, nil
}
