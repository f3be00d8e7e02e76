package experiments

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/mosaic-sched/mosaic/internal/dataset"
	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// What the points of a sweep share while they resolve. Each point is a copy of the experiment
// as loaded (Clone) with its assignments set, and resolves on its own, as `mosaic sim` would
// resolve it alone; its copy points to a resolveShare, through which it reuses what another
// point with the same inputs already built:
//
//   - the data files (question lists, answer files, workload files, CSV columns of empirical
//     distributions and arrival traces), read and parsed once per sweep, keyed by path (and
//     column): nothing writes them while a sweep runs;
//   - the catalog and the cost profile, built once per pair of catalog and profile files;
//   - the workload (generated, imported or read, with its arrivals), built once per
//     workloadKey: a hash of everything the building reads (the experiment's name, seed,
//     [workload] and [[model]] tables, which keys the command line set, the file's folder and
//     the shared data folder), never of a pointer. A workload is read-only once built (the
//     Driver and the backends only read the calls, and policies of one run share it already),
//     so the points that share it run on one copy; each still checks that its own cluster can
//     serve every call, and gets its own map of planning distributions.
//
// What a point shares is exactly what it would have built itself, so its results are
// byte-identical to running it alone (TestSweepSharesAndMatchesPlainRuns).

// resolveShare is what the resolutions of one pass over a sweep's points share.
type resolveShare struct {
	files     *fileCache
	catalogs  *onceMap[catalogKey, catalogs]
	workloads *workloadCache
	runs      *runCache
}

// onceMap computes each key's value once, however many goroutines ask for it together; a
// failed computation is not remembered (each caller then computes its own error).
type onceMap[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*onceEntry[V]
}

type onceEntry[V any] struct {
	done chan struct{} // closed once v and err are set
	v    V
	err  error
}

func (o *onceMap[K, V]) get(k K, f func() (V, error)) (V, error) {
	o.mu.Lock()
	if e, ok := o.m[k]; ok {
		o.mu.Unlock()
		<-e.done
		if e.err == nil {
			return e.v, nil
		}
		return f()
	}
	if o.m == nil {
		o.m = map[K]*onceEntry[V]{}
	}
	e := &onceEntry[V]{done: make(chan struct{})}
	o.m[k] = e
	o.mu.Unlock()
	e.v, e.err = f()
	if e.err != nil {
		o.mu.Lock()
		delete(o.m, k)
		o.mu.Unlock()
	}
	close(e.done)
	return e.v, e.err
}

// fileCache holds the data files a sweep reads, parsed, by kind, path and column.
type fileCache struct {
	onceMap[fileKey, any]
}

type fileKey struct{ kind, path, column string }

// sharedRead returns read's value for the file of key: read once per sweep when e is a point
// of one, else read now.
func sharedRead[T any](e *Experiment, k fileKey, read func() (T, error)) (T, error) {
	if e.share == nil {
		return read()
	}
	v, err := e.share.files.get(k, func() (any, error) { return read() })
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// readQuestions is traces.ReadQuestions, once per sweep; the caller gets its own slice.
func (e *Experiment) readQuestions(path string) ([]traces.Question, error) {
	qs, err := sharedRead(e, fileKey{"questions", path, ""}, func() ([]traces.Question, error) { return traces.ReadQuestions(path) })
	return slices.Clone(qs), err
}

// readColumn is traces.ReadColumn, once per sweep; the caller gets its own slice.
func (e *Experiment) readColumn(path, column string) ([]int, error) {
	vs, err := sharedRead(e, fileKey{"column", path, column}, func() ([]int, error) { return traces.ReadColumn(path, column) })
	return slices.Clone(vs), err
}

// readTimestamps is traces.ReadTimestamps, once per sweep; the caller gets its own slice.
func (e *Experiment) readTimestamps(path, column string) ([]float64, error) {
	ts, err := sharedRead(e, fileKey{"timestamps", path, column}, func() ([]float64, error) { return traces.ReadTimestamps(path, column) })
	return slices.Clone(ts), err
}

// listAnswerModels is traces.ListAnswerModels, once per sweep; the caller gets its own slice.
func (e *Experiment) listAnswerModels(path string) ([]string, error) {
	ms, err := sharedRead(e, fileKey{"answer-models", path, ""}, func() ([]string, error) { return traces.ListAnswerModels(path) })
	return slices.Clone(ms), err
}

// importAnswers is traces.ImportAnswers with the answer file read once per sweep (building a
// workload only reads the answer set).
func (e *Experiment) importAnswers(path string, spec traces.AnswerImport, seed uint64) (*traces.Workload, error) {
	set, err := sharedRead(e, fileKey{"answers", path, ""}, func() (*traces.AnswerSet, error) { return traces.ReadAnswerSet(path) })
	if err != nil {
		return nil, err
	}
	return spec.Build(set, seed)
}

// readJSONL is traces.ReadJSONL with the file's bytes read once per sweep (each point that
// builds the workload decodes its own copy).
func (e *Experiment) readJSONL(path string) (*traces.Workload, error) {
	data, err := sharedRead(e, fileKey{"jsonl", path, ""}, func() ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading workload: %w", err)
		}
		defer f.Close()
		return io.ReadAll(f)
	})
	if err != nil {
		return nil, err
	}
	return traces.DecodeJSONL(path, bytes.NewReader(data))
}

// catalogKey names the files a catalog and profile are built from ("" for none).
type catalogKey struct{ catalog, profile string }

// catalogs are the GPU, model and engine catalog and the cost profile of an experiment. Once
// built nothing changes them (an experiment's own coefficients go into a copy of the profile).
type catalogs struct {
	catalog *sim.Catalog
	profile *sim.Profile
}

// loadCatalogs sets r's catalog and profile: the built-in ones extended by the files the
// experiment names ([cluster] catalog and profile); in a sweep, built once per pair of files.
func (r *Resolved) loadCatalogs() error {
	e := r.Experiment
	build := func() (catalogs, error) {
		c := catalogs{sim.DefaultCatalog(), sim.DefaultProfile()}
		if e.Cluster.Catalog != "" {
			if err := c.catalog.AddFile(e.path(e.Cluster.Catalog)); err != nil {
				return c, e.errorf("cluster.catalog", "%v", err)
			}
		}
		if e.Cluster.Profile != "" {
			p, err := sim.LoadProfile(e.path(e.Cluster.Profile), nil)
			if err != nil {
				return c, e.errorf("cluster.profile", "%v", err)
			}
			c.profile = p
		}
		return c, nil
	}
	var c catalogs
	var err error
	if e.share == nil {
		c, err = build()
	} else {
		c, err = e.share.catalogs.get(catalogKey{e.path(e.Cluster.Catalog), e.path(e.Cluster.Profile)}, build)
	}
	if err != nil {
		return err
	}
	r.Catalog, r.Profile = c.catalog, c.profile
	return nil
}

// workloadKey identifies a workload by the content of everything that builds it.
type workloadKey [sha256.Size]byte

// workloadKeyOf returns the key of the workload e builds as a graph workload of kind: a hash
// of the experiment's name and seed, its [workload] and [[model]] tables (values, not
// pointers), the catalog file (models' context limits), the keys the command line set (which
// turn defaults into explicit values), the file's name and folder (relative paths) and the
// shared data folder ("data:" paths). ok is false when they cannot be encoded (a NaN), and the
// workload is then built by each point.
func workloadKeyOf(e *Experiment, kind string) (k workloadKey, ok bool) {
	data, err := json.Marshal(struct {
		Kind, Name                     string
		Seed                           int64
		Workload                       Workload
		Models                         []Model
		Catalog, File, Dir, SharedData string
		Overrides                      []string
	}{kind, e.Name, e.Seed, e.Workload, e.Models, e.Cluster.Catalog, e.File(), e.dir, dataset.Dir(),
		slices.Sorted(maps.Keys(e.overrides))})
	if err != nil {
		return k, false
	}
	return sha256.Sum256(data), true
}

// builtWorkload is what building a graph workload gives: the workload with its arrivals, the
// generator's spec, and the output distributions planners use where they differ from the
// models' own.
type builtWorkload struct {
	workload *traces.Workload
	spec     *traces.GenSpec
	graph    *traces.GraphSpec
	outputs  map[policies.LayerModel]traces.LengthDist
	arrivals traces.Arrivals
}

// workloadCache keeps each workload the points of a sweep will share from the first point
// that builds it to the last that takes it, then lets it go: it holds at most the workloads of
// the points running at once (a sweep runs the points of one workload together), never one
// per point.
type workloadCache struct {
	mu      sync.Mutex
	entries map[workloadKey]*workloadEntry
	// built and reused count the workloads built for the cache and the points that took one
	// built by another.
	built, reused int
}

type workloadEntry struct {
	pending int           // points expected to take it that have not yet
	done    chan struct{} // nil until a point builds it; closed once w and err are set
	w       *builtWorkload
	err     error
}

// expect announces a point that will take the workload of k.
func (c *workloadCache) expect(k workloadKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[workloadKey]*workloadEntry{}
	}
	e := c.entries[k]
	if e == nil {
		e = &workloadEntry{}
		c.entries[k] = e
	}
	e.pending++
}

// take returns the workload of k: the one another point built (hit), or one that build makes
// now, kept for the points still expected. A key no point announced is built and not kept; a
// failed build is not kept either (the next point builds again, and fails with its own error).
func (c *workloadCache) take(k workloadKey, build func() (*builtWorkload, error)) (w *builtWorkload, hit bool, err error) {
	c.mu.Lock()
	e := c.entries[k]
	if e == nil {
		c.mu.Unlock()
		w, err := build()
		return w, false, err
	}
	e.pending--
	if e.pending <= 0 {
		delete(c.entries, k) // the last point expected: the cache lets it go
	}
	if e.done != nil {
		c.mu.Unlock()
		<-e.done
		if e.err != nil {
			w, err := build()
			return w, false, err
		}
		c.mu.Lock()
		c.reused++
		c.mu.Unlock()
		return e.w, true, nil
	}
	e.done = make(chan struct{})
	c.built++
	c.mu.Unlock()
	e.w, e.err = build()
	close(e.done)
	return e.w, false, e.err
}

// counts returns the workloads built and the points that reused one.
func (c *workloadCache) counts() (built, reused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.built, c.reused
}

// buildWorkload builds m's workload with build (which fills m in), or, for a point of a
// sweep, takes the one another point with the same workloadKey built; m is then filled in
// from it, after checking that this point's engines can serve every call.
func (r *Resolved) buildWorkload(kind string, m *GraphWorkload, build func() error) error {
	e := r.Experiment
	if e.share == nil {
		return build()
	}
	k, ok := workloadKeyOf(e, kind)
	if !ok {
		return build()
	}
	w, hit, err := e.share.workloads.take(k, func() (*builtWorkload, error) {
		if err := build(); err != nil {
			return nil, err
		}
		return &builtWorkload{workload: m.Workload, spec: m.Spec, graph: m.Graph, outputs: maps.Clone(m.Outputs), arrivals: m.Arrivals}, nil
	})
	if err != nil || !hit {
		return err
	}
	if err := r.checkLengths(w.workload); err != nil {
		return err
	}
	m.Workload, m.Spec, m.Graph, m.Arrivals = w.workload, w.spec, w.graph, w.arrivals
	maps.Copy(m.Outputs, w.outputs)
	return nil
}
