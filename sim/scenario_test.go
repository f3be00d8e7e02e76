package sim_test

import (
	"bufio"
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

var update = flag.Bool("update", false, "rewrite the expected output of the scenario files in testdata/")

// TestScenarios runs the engine scripts in testdata/*.txt, in the style of etcd-io/raft's
// interaction tests. A file is a sequence of commands, each followed by a line "----" and the
// output it must produce, up to a blank line; lines starting with # are comments. Run with
// -update to rewrite the outputs, then read the diff.
//
// Commands:
//
//	engine gpu=A100-80GB model=llama-3-8b blocks=64 max_num_seqs=4 budget=2048 chunked=true [block_size=16] [watermark=0]
//	       [compute_eff=F memory_eff=F attention_eff=F overhead_ms=F per_seq_ms=F]
//	add id=1 prompt=100 output=20
//	step [n=1]                    n calls of Engine.Step, one line each
//	advance [n=1] [horizon=US]    n calls of Engine.Advance (horizon in microseconds, 0 = none)
//	run [mode=advance|step]       call until the engine is idle
//	print                         engine state and per-request progress
//
// An iteration prints as
//
//	t=CLOCK dur=DURATION steps=S seqs=N prefill=P produced=[id:tokens ...] first=[ids] finished=[ids] preempted=[ids] admitted=[ids]
//
// with times in microseconds, rounded; t is the virtual clock after the iteration.
//
// The engine's cost model takes the coefficients of sim.DefaultProfile() for the GPU, with the
// optional overrides. The files in testdata pin all five timing coefficients, so that refitting
// the built-in profile does not change their expected durations.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			runScenario(t, path)
		})
	}
}

// scriptItem is a command with its expected output, or a run of comment and blank lines.
type scriptItem struct {
	line    int // of the command
	cmd     string
	want    string
	comment []string
}

func parseScript(t *testing.T, path string) []scriptItem {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var items []scriptItem
	sc := bufio.NewScanner(bytes.NewReader(data))
	ln := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		ln++
		return sc.Text(), true
	}
	for {
		line, ok := next()
		if !ok {
			break
		}
		if trimmed := strings.TrimSpace(line); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			if n := len(items); n > 0 && items[n-1].cmd == "" {
				items[n-1].comment = append(items[n-1].comment, line)
			} else {
				items = append(items, scriptItem{comment: []string{line}})
			}
			continue
		}
		it := scriptItem{line: ln, cmd: strings.TrimSpace(line)}
		sep, ok := next()
		require.True(t, ok && sep == "----", "%s:%d: command %q must be followed by ----", path, ln, it.cmd)
		var out []string
		for {
			l, ok := next()
			if !ok || l == "" {
				break
			}
			out = append(out, l)
		}
		it.want = strings.Join(out, "\n")
		items = append(items, it)
		items = append(items, scriptItem{comment: []string{""}}) // the blank line that ended it
	}
	require.NoError(t, sc.Err())
	return items
}

func runScenario(t *testing.T, path string) {
	items := parseScript(t, path)
	h := &harness{}
	var out strings.Builder
	for i := range items {
		it := &items[i]
		if it.cmd == "" {
			for _, c := range it.comment {
				out.WriteString(c + "\n")
			}
			continue
		}
		got := strings.TrimRight(h.exec(it.cmd), "\n")
		require.NotContains(t, got, "\n\n", "%s:%d: output must not contain blank lines", path, it.line)
		out.WriteString(it.cmd + "\n----\n" + got + "\n")
		if !*update {
			assert.Equal(t, it.want, got, "%s:%d: %s", path, it.line, it.cmd)
		}
	}
	if *update {
		text := strings.TrimRight(out.String(), "\n") + "\n"
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
}

// harness holds one engine and what the script has seen of it.
type harness struct {
	eng  *sim.Engine
	cfg  sim.EngineConfig
	now  time.Duration
	reqs []*scriptReq
	byID map[uint64]*scriptReq
}

type scriptReq struct {
	sim.Request
	produced, preempted int
	first, finish       time.Duration
	hasFirst, done      bool
}

func (h *harness) exec(line string) string {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Sprintf("error: argument %q is not key=value", f)
		}
		args[k] = v
	}
	cmd := fields[0]
	if cmd != "engine" && h.eng == nil {
		return "error: no engine (start the script with an engine command)"
	}
	var out string
	var err error
	switch cmd {
	case "engine":
		out, err = h.cmdEngine(args)
	case "add":
		out, err = h.cmdAdd(args)
	case "step", "advance":
		out, err = h.cmdCalls(cmd, args)
	case "run":
		out, err = h.cmdRun(args)
	case "print":
		out = h.cmdPrint()
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return out
}

type argReader struct {
	args map[string]string
	err  error
}

func (a *argReader) int(key string, def int, required bool) int {
	v, ok := a.args[key]
	delete(a.args, key)
	if !ok {
		if required && a.err == nil {
			a.err = fmt.Errorf("missing %s=", key)
		}
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && a.err == nil {
		a.err = fmt.Errorf("%s: %w", key, err)
	}
	return n
}

func (a *argReader) str(key, def string) string {
	v, ok := a.args[key]
	delete(a.args, key)
	if !ok {
		return def
	}
	return v
}

func (a *argReader) done() error {
	if a.err != nil {
		return a.err
	}
	for k := range a.args {
		return fmt.Errorf("unknown argument %s", k)
	}
	return nil
}

func (h *harness) cmdEngine(args map[string]string) (string, error) {
	coefArgs := map[string]string{}
	for _, k := range []string{"compute_eff", "memory_eff", "attention_eff", "overhead_ms", "per_seq_ms"} {
		if v, ok := args[k]; ok {
			coefArgs[k] = v
			delete(args, k)
		}
	}
	a := &argReader{args: args}
	gpuName := a.str("gpu", "A100-80GB")
	modelName := a.str("model", "llama-3-8b")
	chunked, err := strconv.ParseBool(a.str("chunked", "true"))
	if err != nil {
		return "", fmt.Errorf("chunked: %w", err)
	}
	cfg := sim.EngineConfig{
		NumBlocks:        a.int("blocks", 0, true),
		MaxNumSeqs:       a.int("max_num_seqs", 0, true),
		MaxBatchedTokens: a.int("budget", 0, true),
		BlockSize:        a.int("block_size", 16, false),
		WatermarkBlocks:  a.int("watermark", 0, false),
		ChunkedPrefill:   chunked,
	}
	if err := a.done(); err != nil {
		return "", err
	}
	cat := sim.DefaultCatalog()
	g, err := cat.GPU(gpuName)
	if err != nil {
		return "", err
	}
	m, err := cat.Model(modelName)
	if err != nil {
		return "", err
	}
	coef := sim.DefaultProfile().For(g)
	for _, o := range []struct {
		key string
		dst *float64
	}{
		{"compute_eff", &coef.ComputeEfficiency},
		{"memory_eff", &coef.MemoryEfficiency},
		{"attention_eff", &coef.AttentionEfficiency},
		{"overhead_ms", &coef.IterationOverheadMS},
		{"per_seq_ms", &coef.PerSeqOverheadMS},
	} {
		if v, ok := coefArgs[o.key]; ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", fmt.Errorf("%s: %w", o.key, err)
			}
			*o.dst = f
		}
	}
	cm, err := sim.NewCostModel(m, g, coef)
	if err != nil {
		return "", err
	}
	eng, err := sim.NewEngine(cfg, cm)
	if err != nil {
		return "", err
	}
	*h = harness{eng: eng, cfg: cfg, byID: map[uint64]*scriptReq{}}
	return fmt.Sprintf("ok: %s on %s, %d KV blocks of %d tokens (%d tokens), watermark %d",
		m.ID, g.Name, cfg.NumBlocks, cfg.BlockSize, cfg.NumBlocks*cfg.BlockSize, cfg.WatermarkBlocks), nil
}

func (h *harness) cmdAdd(args map[string]string) (string, error) {
	a := &argReader{args: args}
	r := sim.Request{
		ID:           uint64(a.int("id", 0, true)),
		PromptTokens: a.int("prompt", 0, true),
		OutputTokens: a.int("output", 0, true),
	}
	if err := a.done(); err != nil {
		return "", err
	}
	if _, dup := h.byID[r.ID]; dup {
		return "", fmt.Errorf("the script already added request %d", r.ID)
	}
	if err := h.eng.Add(r); err != nil {
		return "", err
	}
	sr := &scriptReq{Request: r}
	h.reqs = append(h.reqs, sr)
	h.byID[r.ID] = sr
	return "ok", nil
}

func (h *harness) cmdCalls(cmd string, args map[string]string) (string, error) {
	a := &argReader{args: args}
	n := a.int("n", 1, false)
	horizon := time.Duration(a.int("horizon", 0, false)) * time.Microsecond
	if cmd == "step" && horizon != 0 {
		return "", fmt.Errorf("step takes no horizon")
	}
	if err := a.done(); err != nil {
		return "", err
	}
	var b strings.Builder
	for range n {
		if cmd == "step" {
			b.WriteString(h.record(h.eng.Step()) + "\n")
		} else {
			b.WriteString(h.record(h.eng.Advance(horizon)) + "\n")
		}
	}
	return b.String(), nil
}

func (h *harness) cmdRun(args map[string]string) (string, error) {
	a := &argReader{args: args}
	mode := a.str("mode", "advance")
	if err := a.done(); err != nil {
		return "", err
	}
	if mode != "advance" && mode != "step" {
		return "", fmt.Errorf("mode must be advance or step, not %q", mode)
	}
	var b strings.Builder
	for i := 0; !h.eng.Idle(); i++ {
		if i == 10_000 {
			return b.String() + "error: not idle after 10000 calls", nil
		}
		var it *sim.Iteration
		if mode == "step" {
			it = h.eng.Step()
		} else {
			it = h.eng.Advance(0)
		}
		b.WriteString(h.record(it) + "\n")
	}
	return b.String(), nil
}

func micros(d time.Duration) int64 { return d.Round(time.Microsecond).Microseconds() }

func ids(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(x, 10)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// record updates the harness with one iteration and formats it.
func (h *harness) record(it *sim.Iteration) string {
	if it.Steps == 0 && len(it.Preempted) == 0 {
		return "idle"
	}
	h.now += it.Duration
	produced := make([]string, len(it.Produced))
	for i, p := range it.Produced {
		produced[i] = fmt.Sprintf("%d:%d", p.ID, p.Tokens)
		h.byID[p.ID].produced += p.Tokens
	}
	for _, id := range it.FirstToken {
		r := h.byID[id]
		r.first, r.hasFirst = h.now, true
	}
	for _, id := range it.Finished {
		r := h.byID[id]
		r.finish, r.done = h.now, true
	}
	for _, id := range it.Preempted {
		h.byID[id].preempted++
	}
	return fmt.Sprintf("t=%dus dur=%dus steps=%d seqs=%d prefill=%d produced=[%s] first=%s finished=%s preempted=%s admitted=%s",
		micros(h.now), micros(it.Duration), it.Steps, it.Seqs, it.PrefillTokens, strings.Join(produced, " "),
		ids(it.FirstToken), ids(it.Finished), ids(it.Preempted), ids(it.Admitted))
}

func (h *harness) cmdPrint() string {
	var b strings.Builder
	st := h.eng.Stats()
	used := int(math.Round(h.eng.KVUsage() * float64(h.cfg.NumBlocks)))
	fmt.Fprintf(&b, "t=%dus running=%d waiting=%d kv=%d/%d steps=%d busy=%dus preemptions=%d mean_batch=%.2f\n",
		micros(h.now), h.eng.Running(), h.eng.Waiting(), used, h.cfg.NumBlocks, st.Steps, micros(st.Busy), st.Preemptions, st.MeanBatch)
	reqs := slices.Clone(h.reqs)
	slices.SortFunc(reqs, func(a, b *scriptReq) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range reqs {
		first, finish := "-", "-"
		if r.hasFirst {
			first = fmt.Sprintf("%dus", micros(r.first))
		}
		if r.done {
			finish = fmt.Sprintf("%dus", micros(r.finish))
		}
		fmt.Fprintf(&b, "req %d: prompt=%d output=%d produced=%d first=%s finished=%s preempted=%d\n",
			r.ID, r.PromptTokens, r.OutputTokens, r.produced, first, finish, r.preempted)
	}
	return b.String()
}
