// Package experiments defines the experiment file (TOML), validates it strictly — every error
// names the file, the line and the key — and resolves it into the simulator's objects.
//
// An experiment names a cluster (GPU kind and worker count), the models it uses (by catalog
// name), the engine settings, and a workload. The single-model batch workload
// (kind = "batch") serves N requests of one model on one GPU; the Mixture-of-Agents workload
// builds on the same [[model]] and [cluster] tables.
package experiments

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
)

// Quickstart is the built-in experiment `mosaic sim` (and `make run`) runs without arguments.
//
//go:embed quickstart.toml
var Quickstart []byte

// QuickstartName is the name quickstart errors are reported under.
const QuickstartName = "experiments/quickstart.toml"

// Experiment is the decoded experiment file.
type Experiment struct {
	Name     string   `toml:"name"`
	Seed     uint64   `toml:"seed"`
	Cluster  Cluster  `toml:"cluster"`
	Engine   Engine   `toml:"engine"`
	Models   []Model  `toml:"model"`
	Workload Workload `toml:"workload"`

	file *tomlx.File
	dir  string // directory of the file, for relative paths
}

// Cluster is the hardware.
type Cluster struct {
	GPU     string `toml:"gpu"`
	Workers int    `toml:"workers"`
	// Catalog is an optional TOML file of extra GPUs and models.
	Catalog string `toml:"catalog"`
	// Profile is an optional cost-model profile (fitted coefficients).
	Profile string `toml:"profile"`
}

// Engine sets each worker's inference engine; zero values take vLLM's defaults.
type Engine struct {
	MaxNumSeqs           int     `toml:"max_num_seqs"`
	MaxBatchedTokens     int     `toml:"max_batched_tokens"`
	ChunkedPrefill       *bool   `toml:"chunked_prefill"`
	GPUMemoryUtilization float64 `toml:"gpu_memory_utilization"`
	BlockSize            int     `toml:"block_size"`
}

// Model is a model used by the experiment.
type Model struct {
	// Name is how the workload refers to the model.
	Name string `toml:"name"`
	// Arch is the catalog entry: a Hugging Face id or an alias.
	Arch string `toml:"arch"`
	// OutputTokens is the model's output-length distribution.
	OutputTokens *Dist `toml:"output_tokens"`
}

// Workload says what work the cluster serves.
type Workload struct {
	// Kind is "batch": Requests requests of Model.
	Kind string `toml:"kind"`
	// Model names the [[model]] a batch workload uses (default: the only one).
	Model    string `toml:"model"`
	Requests int    `toml:"requests"`
	// InputTokens is the prompt-length distribution.
	InputTokens *Dist `toml:"input_tokens"`
	// OutputTokens overrides the model's output-length distribution.
	OutputTokens *Dist `toml:"output_tokens"`
	// ArrivalRate is a Poisson arrival rate in requests per second; 0 is an offline batch
	// (every request at time 0).
	ArrivalRate float64 `toml:"arrival_rate"`
}

// Dist is a length distribution: {dist = "fixed", value = N}, {dist = "lognormal", mean = M,
// p99 = P, max = X [, min = 1]} or {dist = "uniform", min = A, max = B}.
type Dist struct {
	Dist  string  `toml:"dist"`
	Value int     `toml:"value"`
	Mean  float64 `toml:"mean"`
	P99   float64 `toml:"p99"`
	Min   int     `toml:"min"`
	Max   int     `toml:"max"`
}

// Load reads and decodes an experiment file. Unknown keys and wrong types are errors.
func Load(path string) (*Experiment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading experiment: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes an experiment from data; name is used in error messages and relative paths
// are resolved against its directory.
func Parse(name string, data []byte) (*Experiment, error) {
	var e Experiment
	f, err := tomlx.Decode(name, data, &e)
	if err != nil {
		return nil, err
	}
	e.file = f
	e.dir = filepath.Dir(name)
	return &e, nil
}

// errorf returns an error located at key.
func (e *Experiment) errorf(key, format string, args ...any) error {
	return e.file.Errorf(key, format, args...)
}

// path resolves a path given in the file relative to the file's directory.
func (e *Experiment) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.dir, p)
}

// File returns the name the experiment was loaded from.
func (e *Experiment) File() string { return e.file.Path }

func modelKey(i int, field string) string {
	k := fmt.Sprintf("model[%d]", i)
	if field != "" {
		k += "." + field
	}
	return k
}

func lower(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
