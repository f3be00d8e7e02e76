package experiments_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mosaic-sched/mosaic/experiments"
)

// FuzzExperimentFile reads arbitrary experiment files, applies an arbitrary --set to those
// that parse, and resolves the small ones (the generators' work grows with the workload, so
// files asking for more than a few dozen queries or workers stop after validation): nothing
// may panic, and a rejected file's error names the file.
//
//	go test ./experiments -run '^$' -fuzz FuzzExperimentFile -fuzztime 1000000x -fuzzminimizetime 100x
func FuzzExperimentFile(f *testing.F) {
	examples, err := filepath.Glob("../experiments/examples/*.toml")
	if err != nil {
		f.Fatal(err)
	}
	paper, err := filepath.Glob("../experiments/paper/*.toml")
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range append(append(examples, paper...), "../cmd/mosaic/testdata/e2e.toml") {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "workload.queries=3")
		f.Add(data, "policy[0].threshold=0.5")
	}
	f.Add(experiments.Quickstart, "seed=2")
	f.Add([]byte("name = \"x\"\n[cluster]\ngpu = \"A100-80GB\"\nworkers = 1\n[[model]]\nname = 1\n"), "cluster.workers=-1")
	f.Add([]byte("name = \"x\"\n[workload]\nkind = \"dag\"\n[[workload.node]]\nname = \"a\"\nparents = [\"a\"]\n"), "workload.kind=tree")

	const name = "fuzz/exp.toml"
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		e, err := experiments.Parse(name, data)
		if err != nil {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if set != "" {
			if err := e.Set(set); err != nil {
				return
			}
		}
		if !small(e) {
			return
		}
		_, _ = e.Resolve()
	})
}

// small reports whether resolving e generates a workload and cluster of at most a few dozen
// queries, calls per query and workers.
func small(e *experiments.Experiment) bool {
	w, c := e.Workload, e.Cluster
	// An unset count takes the question file's length (thousands): only set, small counts.
	if w.Kind == "batch" && (w.Requests < 1 || w.Requests > 40) || w.Kind != "batch" && (w.Queries < 1 || w.Queries > 40) {
		return false
	}
	if w.Queries > 40 || w.Requests > 40 || w.ExpertsPerQuery > 12 || w.Layers > 6 || len(w.Proposers) > 12 || len(w.Shape) > 6 || c.Workers > 16 || len(c.Groups) > 8 {
		return false
	}
	for _, n := range w.Shape {
		if n > 12 {
			return false
		}
	}
	for _, g := range c.Groups {
		if g.Count > 16 {
			return false
		}
	}
	return true
}
