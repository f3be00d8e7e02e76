package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mosaic-sched/mosaic/results"
)

// Sweep is a grid of experiment variants: every combination of the values of its keys (the
// first key varies slowest).
type Sweep struct {
	Keys   []string   `json:"keys"`
	Values [][]string `json:"values"`
}

// ParseSweep parses --sweep arguments of the form key=v1,v2,...
func ParseSweep(args []string) (Sweep, error) {
	var s Sweep
	seen := map[string]bool{}
	for _, a := range args {
		key, vals, ok := strings.Cut(a, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || vals == "" {
			return s, fmt.Errorf("--sweep %q: want key=v1,v2,...", a)
		}
		if seen[key] {
			return s, fmt.Errorf("--sweep %s: key given twice", key)
		}
		seen[key] = true
		var vs []string
		for _, v := range strings.Split(vals, ",") {
			if v = strings.TrimSpace(v); v == "" {
				return s, fmt.Errorf("--sweep %q: empty value", a)
			}
			vs = append(vs, v)
		}
		s.Keys = append(s.Keys, key)
		s.Values = append(s.Values, vs)
	}
	return s, nil
}

// Point is one variant of a sweep.
type Point struct {
	Index  int      `json:"index"`
	Name   string   `json:"name"`   // folder name
	Assign []string `json:"assign"` // key=value, in key order
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._=+-]`)

// Points enumerates the grid in a fixed order.
func (s Sweep) Points() []Point {
	n := 1
	for _, v := range s.Values {
		n *= len(v)
	}
	pts := make([]Point, 0, n)
	for i := 0; i < n; i++ {
		rem := i
		assign := make([]string, len(s.Keys))
		for k := len(s.Keys) - 1; k >= 0; k-- {
			vs := s.Values[k]
			assign[k] = s.Keys[k] + "=" + vs[rem%len(vs)]
			rem /= len(vs)
		}
		name := unsafeChars.ReplaceAllString(strings.Join(assign, "__"), "_")
		pts = append(pts, Point{Index: i, Name: fmt.Sprintf("%04d_%s", i, name), Assign: assign})
	}
	return pts
}

// ParseShard parses "i/n" (1 <= i <= n).
//
// "auto" takes the shard from a batch scheduler's environment: a Slurm job array
// (SLURM_ARRAY_TASK_ID, counted from SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT tasks) or a
// Kubernetes Indexed Job (JOB_COMPLETION_INDEX, from 0, with the number of shards given as
// "auto/N" or in MOSAIC_SHARDS). getenv reads the environment (os.Getenv).
func ParseShard(s string, getenv func(string) string) (i, n int, err error) {
	if s == "auto" || strings.HasPrefix(s, "auto/") {
		return autoShard(s, getenv)
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, fmt.Errorf("--shard %q: want i/n with 1 <= i <= n", s)
	}
	return i, n, nil
}

func autoShard(s string, getenv func(string) string) (int, int, error) {
	num := func(name string) (int, bool, error) {
		v := getenv(name)
		if v == "" {
			return 0, false, nil
		}
		x, err := strconv.Atoi(v)
		if err != nil {
			return 0, true, fmt.Errorf("--shard %s: %s=%q is not an integer", s, name, v)
		}
		return x, true, nil
	}
	if id, ok, err := num("SLURM_ARRAY_TASK_ID"); ok || err != nil {
		if err != nil {
			return 0, 0, err
		}
		count, okc, err := num("SLURM_ARRAY_TASK_COUNT")
		if err != nil {
			return 0, 0, err
		}
		lo, _, err := num("SLURM_ARRAY_TASK_MIN")
		if err != nil {
			return 0, 0, err
		}
		if !okc || count < 1 || id < lo || id-lo >= count {
			return 0, 0, fmt.Errorf("--shard %s: SLURM_ARRAY_TASK_ID=%d with SLURM_ARRAY_TASK_MIN=%d and SLURM_ARRAY_TASK_COUNT=%q is not a shard of a contiguous array (use --array=1-N)", s, id, lo, getenv("SLURM_ARRAY_TASK_COUNT"))
		}
		return id - lo + 1, count, nil
	}
	if idx, ok, err := num("JOB_COMPLETION_INDEX"); ok || err != nil {
		if err != nil {
			return 0, 0, err
		}
		n := 0
		if _, b, found := strings.Cut(s, "/"); found {
			if n, err = strconv.Atoi(b); err != nil {
				return 0, 0, fmt.Errorf("--shard %s: want auto/N with N the number of shards", s)
			}
		} else if v, okn, err := num("MOSAIC_SHARDS"); err != nil {
			return 0, 0, err
		} else if okn {
			n = v
		}
		if n < 1 || idx < 0 || idx >= n {
			return 0, 0, fmt.Errorf("--shard %s: JOB_COMPLETION_INDEX=%d needs the number of shards (the Job's completions) as --shard auto/N or MOSAIC_SHARDS, with 0 <= index < N", s, idx)
		}
		return idx + 1, n, nil
	}
	return 0, 0, fmt.Errorf("--shard %s: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set", s)
}

// Shard returns the points of shard i of n: those whose index is i-1 modulo n. The shards of
// a grid cover every point exactly once.
func Shard(pts []Point, i, n int) []Point {
	var out []Point
	for _, p := range pts {
		if p.Index%n == i-1 {
			out = append(out, p)
		}
	}
	return out
}

// SweepInfo is sweep.json: the grid and which of its points a folder holds.
type SweepInfo struct {
	Experiment string  `json:"experiment"`
	Sweep      Sweep   `json:"sweep"`
	Points     []Point `json:"points"`
	Shard      string  `json:"shard,omitempty"`
	// Overrides are the command line's --seed and --set, which every shard of a grid must
	// share.
	Overrides []string `json:"overrides,omitempty"`
}

// SweepLoader returns a fresh experiment (the file, with command-line overrides) for a point.
// A Sweeper calls it once and gives each point a copy (Experiment.Clone).
type SweepLoader func() (*Experiment, error)

// Sweeper runs variants of one experiment: the points of a grid, a shard of it, or any list of
// points. It loads the experiment once; each point resolves its own copy with its assignments
// set, sharing what another point built from the same inputs (the data files, the catalogs,
// the workload: see sweepshare.go), and runs as it would alone, so that its results are
// byte-identical to a plain run of the same variant. Points that share a workload run
// together, so that a sweep holds at most the workloads of the points running at once.
type Sweeper struct {
	base     *Experiment
	files    *fileCache
	catalogs *onceMap[catalogKey, catalogs]
	// slots bounds the policies simulating at once, over every point: one per core.
	slots chan struct{}
	// last is the share of the last pass (Check or a run), for Stats.
	mu   sync.Mutex
	last *resolveShare
}

// NewSweeper loads the experiment (load is called once).
func NewSweeper(load SweepLoader) (*Sweeper, error) {
	base, err := load()
	if err != nil {
		return nil, err
	}
	return &Sweeper{base: base, files: &fileCache{}, catalogs: &onceMap[catalogKey, catalogs]{},
		slots: make(chan struct{}, runtime.GOMAXPROCS(0))}, nil
}

// Variant returns point p's experiment: a copy of the loaded one with p's assignments set. The
// error is Set's.
func (sw *Sweeper) Variant(p Point) (*Experiment, error) {
	e := sw.base.Clone()
	for _, a := range p.Assign {
		if err := e.Set(a); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// share starts a pass over points: the sweep's files and catalogs, and a workload cache and
// a run cache of its own, which expect the points' workloads and run groups (sweepruns.go).
// It returns the order to visit the points in: grouped by workload (in the order of each
// group's first point), each group by run group (likewise), each run group in point order.
func (sw *Sweeper) share(pts []Point) (*resolveShare, []int) {
	sh := &resolveShare{files: sw.files, catalogs: sw.catalogs, workloads: &workloadCache{}, runs: &runCache{}}
	sw.mu.Lock()
	sw.last = sh
	sw.mu.Unlock()
	// groups[g] is a workload's run groups, each a list of points.
	var groups [][][]int
	at := map[workloadKey]int{}
	type place struct{ group, run int } // a run group's workload group and place in it
	runAt := map[string]place{}
	for i, p := range pts {
		e, err := sw.Variant(p)
		if err != nil {
			groups = append(groups, [][]int{{i}}) // fails when it runs, naming the point
			continue
		}
		rk := runGroupKey(p)
		sh.runs.expect(rk)
		kind := lower(e.Workload.Kind)
		k, ok := workloadKey{}, false
		if kind == KindMoA || kind == KindLayered || kind == KindTree || kind == KindDAG {
			k, ok = workloadKeyOf(e, kind)
		}
		if ok {
			sh.workloads.expect(k)
		}
		if pl, seen := runAt[rk]; seen {
			groups[pl.group][pl.run] = append(groups[pl.group][pl.run], i)
			continue
		}
		g := len(groups)
		if ok {
			if seen, found := at[k]; found {
				g = seen
			} else {
				at[k] = g
			}
		}
		if g == len(groups) {
			groups = append(groups, nil)
		}
		runAt[rk] = place{g, len(groups[g])}
		groups[g] = append(groups[g], []int{i})
	}
	var order []int
	for _, g := range groups {
		order = append(order, slices.Concat(g...)...)
	}
	return sh, order
}

// point returns p's experiment resolving through sh.
func (sw *Sweeper) point(p Point, sh *resolveShare) (*Experiment, error) {
	e, err := sw.Variant(p)
	if err != nil {
		return nil, fmt.Errorf("sweep point %s: %w", p.Name, err)
	}
	e.share = sh
	return e, nil
}

// Check resolves every point, one after another, and returns the first error (naming its
// point), so that a grid with a point that cannot run fails before any runs. Each workload is
// built once, and let go once its points are checked.
func (sw *Sweeper) Check(pts []Point) error {
	sh, order := sw.share(pts)
	for _, i := range order {
		e, err := sw.point(pts[i], sh)
		if err != nil {
			return err
		}
		if _, err := e.Resolve(); err != nil {
			return fmt.Errorf("sweep point %s: %w", pts[i].Name, err)
		}
	}
	return nil
}

// SweepStats says what the points of a pass shared.
type SweepStats struct {
	// Workloads is the number of workloads built to be shared; Reused the number of points
	// that took one another point built.
	Workloads, Reused int
	// Runs is the number of the points' policy runs, Simulated the number simulated (the
	// others took the run of a policy that runs the same simulation: sweepruns.go).
	Runs, Simulated int
}

// Stats returns what the points of the last pass (Check or a run) shared.
func (sw *Sweeper) Stats() SweepStats {
	sw.mu.Lock()
	sh := sw.last
	sw.mu.Unlock()
	if sh == nil {
		return SweepStats{}
	}
	built, reused := sh.workloads.counts()
	runs, simulated := sh.runs.counts()
	return SweepStats{Workloads: built, Reused: reused, Runs: runs, Simulated: simulated}
}

// RunSweep simulates the points of the grid (a shard of it when n > 1), several at a time,
// each into its own folder under dir, and writes dir/summary.csv with the swept keys as
// columns and dir/sweep.json. info and host fill each point's run.json and host.json.
// overrides are the command line's --seed and --set, recorded for merge's check.
func RunSweep(ctx context.Context, load SweepLoader, s Sweep, shard, shards int, overrides []string, dir string, info RunInfo, host HostInfo, progress func(done, total int)) error {
	sw, err := NewSweeper(load)
	if err != nil {
		return err
	}
	return sw.RunSweep(ctx, s, shard, shards, overrides, dir, info, host, progress)
}

// RunSweep is the package's RunSweep on the loaded experiment.
func (sw *Sweeper) RunSweep(ctx context.Context, s Sweep, shard, shards int, overrides []string, dir string, info RunInfo, host HostInfo, progress func(done, total int)) error {
	pts := s.Points()
	if shards > 1 {
		pts = Shard(pts, shard, shards)
	}
	if len(pts) == 0 {
		return errors.New("sweep: this shard has no points")
	}
	d, err := results.Open(dir, "")
	if err != nil {
		return err
	}
	defer d.Close()
	rows, err := sw.runPoints(ctx, pts, dir, info, host, progress)
	if err != nil {
		return err
	}
	si := SweepInfo{Experiment: sw.base.Name, Sweep: s, Points: pts, Overrides: overrides}
	if shards > 1 {
		si.Shard = fmt.Sprintf("%d/%d", shard, shards)
	}
	return writeSweep(dir, si, rows)
}

// RunPoints simulates experiment variants, several at a time, each into its own folder under
// dir (named by the point), and returns their summary rows in point order.
// It holds dir's lock meanwhile, and each point's.
func RunPoints(ctx context.Context, load SweepLoader, pts []Point, dir string, info RunInfo, host HostInfo, progress func(done, total int)) ([][]results.SummaryRow, error) {
	sw, err := NewSweeper(load)
	if err != nil {
		return nil, err
	}
	return sw.RunPoints(ctx, pts, dir, info, host, progress)
}

// RunPoints is the package's RunPoints on the loaded experiment.
func (sw *Sweeper) RunPoints(ctx context.Context, pts []Point, dir string, info RunInfo, host HostInfo, progress func(done, total int)) ([][]results.SummaryRow, error) {
	d, err := results.Open(dir, "")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return sw.runPoints(ctx, pts, dir, info, host, progress)
}

// runPoints is RunPoints under a lock its caller holds: twice as many points at a time as
// there are cores, those of one workload and run group together. Their policies simulate on
// one core each (sw.slots), and a point writes its files while others simulate.
func (sw *Sweeper) runPoints(ctx context.Context, pts []Point, dir string, info RunInfo, host HostInfo, progress func(done, total int)) ([][]results.SummaryRow, error) {
	sh, order := sw.share(pts)
	rows := make([][]results.SummaryRow, len(pts))
	errs := make([]error, len(pts))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range min(2*runtime.GOMAXPROCS(0), len(pts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := pts[i]
				rows[i], errs[i] = sw.runPoint(ctx, p, sh, filepath.Join(dir, p.Name), info, host)
				mu.Lock()
				done++
				if progress != nil {
					progress(done, len(pts))
				}
				mu.Unlock()
			}
		}()
	}
	for _, i := range order {
		next <- i
	}
	close(next)
	wg.Wait()
	return rows, errors.Join(errs...)
}

func (sw *Sweeper) runPoint(ctx context.Context, p Point, sh *resolveShare, dir string, info RunInfo, host HostInfo) ([]results.SummaryRow, error) {
	rk := runGroupKey(p)
	defer sh.runs.done(rk)
	e, err := sw.point(p, sh)
	if err != nil {
		return nil, err
	}
	r, err := e.Resolve()
	if err != nil {
		return nil, fmt.Errorf("sweep point %s: %w", p.Name, err)
	}
	run, err := r.simulateShared(ctx, sh.runs, sh.runs.group(rk), sw.slots)
	if err != nil {
		return nil, fmt.Errorf("sweep point %s: %w", p.Name, err)
	}
	if err := run.WriteDir(dir, info, host); err != nil {
		return nil, err
	}
	return run.Summaries, nil
}

// writeSweep writes the combined summary (swept keys first, named as given, "sweep."-prefixed
// where a key is also a summary column such as seed; then the point's folder) and sweep.json.
func writeSweep(dir string, si SweepInfo, rows [][]results.SummaryRow) error {
	var header []string
	for _, k := range si.Sweep.Keys {
		if slices.Contains(results.SummaryHeader, k) {
			k = "sweep." + k // a key such as seed is also a summary column
		}
		header = append(header, k)
	}
	header = append(append(header, "point"), results.SummaryHeader...)
	var recs []sweepRow
	for i, p := range si.Points {
		for _, r := range rows[i] {
			recs = append(recs, sweepRow{point: p, row: r})
		}
	}
	f, err := os.Create(filepath.Join(dir, "summary.csv"))
	if err != nil {
		return err
	}
	if err := results.WriteCSV(f, header, recs); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(si, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sweep.json"), append(data, '\n'), 0o644)
}

type sweepRow struct {
	point Point
	row   results.SummaryRow
}

func (r sweepRow) Record() []string {
	var out []string
	for _, a := range r.point.Assign {
		_, v, _ := strings.Cut(a, "=")
		out = append(out, v)
	}
	return append(append(out, r.point.Name), r.row.Record()...)
}

// Merge combines the folders of a sweep's shards into out: it checks that they are shards of
// the same grid covering every point exactly once, copies the points' folders and writes the
// combined summary.csv and sweep.json.
func Merge(dirs []string, out string) error {
	d, err := results.Open(out, "")
	if err != nil {
		return err
	}
	defer d.Close()
	var grid *SweepInfo
	byIndex := map[int]string{} // point index -> shard dir
	var points []Point
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "sweep.json"))
		if err != nil {
			return fmt.Errorf("merge: %w (is %s a sweep folder?)", err, d)
		}
		var si SweepInfo
		if err := json.Unmarshal(data, &si); err != nil {
			return fmt.Errorf("merge: %s/sweep.json: %w", d, err)
		}
		if grid == nil {
			grid = &si
		} else if si.Experiment != grid.Experiment || !sameSweep(si.Sweep, grid.Sweep) {
			return fmt.Errorf("merge: %s is a sweep of another grid (%s %v) than %s (%s %v)", d, si.Experiment, si.Sweep.Keys, dirs[0], grid.Experiment, grid.Sweep.Keys)
		} else if a, b := strings.Join(si.Overrides, " "), strings.Join(grid.Overrides, " "); a != b {
			return fmt.Errorf("merge: %s was run with overrides [%s] and %s with [%s]: its points are not of the same experiment", d, a, dirs[0], b)
		}
		for _, p := range si.Points {
			if prev, dup := byIndex[p.Index]; dup {
				return fmt.Errorf("merge: point %s is in both %s and %s", p.Name, prev, d)
			}
			byIndex[p.Index] = d
			points = append(points, p)
		}
	}
	all := grid.Sweep.Points()
	var missing []string
	for _, p := range all {
		if _, ok := byIndex[p.Index]; !ok {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("merge: %d of the grid's %d points are missing: %s", len(missing), len(all), strings.Join(missing, ", "))
	}
	sort.Slice(points, func(i, j int) bool { return points[i].Index < points[j].Index })
	rows := make([][]results.SummaryRow, len(points))
	for i, p := range points {
		src := filepath.Join(byIndex[p.Index], p.Name)
		rs, err := results.ReadSummaryCSV(filepath.Join(src, "summary.csv"))
		if err != nil {
			return err
		}
		rows[i] = rs
		dst := filepath.Join(out, p.Name)
		if filepath.Clean(src) != filepath.Clean(dst) {
			if err := copyDir(src, dst); err != nil {
				return err
			}
		}
	}
	return writeSweep(out, SweepInfo{Experiment: grid.Experiment, Sweep: grid.Sweep, Points: points, Overrides: grid.Overrides}, rows)
}

func sameSweep(a, b Sweep) bool {
	if len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		if a.Keys[i] != b.Keys[i] || strings.Join(a.Values[i], ",") != strings.Join(b.Values[i], ",") {
			return false
		}
	}
	return true
}

func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue // the lock file and temporaries are the folder's own
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		o, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			in.Close()
			return err
		}
		_, err = io.Copy(o, in)
		in.Close()
		if cerr := o.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
