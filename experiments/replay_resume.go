package experiments

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/results"
	"github.com/mosaic-sched/mosaic/traces"
)

// Resuming a replay: what an interrupted run left in its folder, and whether a folder holds
// anything measured at all.

// resumeState is what an interrupted replay left behind.
type resumeState struct {
	summaries map[string]results.SummaryRow // completed policies, every call done
	// rows are the calls done in the interrupted run, by policy and call ID: their rows are
	// kept as they were measured.
	rows   map[string]map[int]results.CallRow
	done   map[string]map[int]policies.CallTiming
	offset map[string]time.Duration // when the interrupted policy's last recorded call ended
	info   replayInfo               // the run.json of the interrupted run
}

func newResumeState() *resumeState {
	return &resumeState{summaries: map[string]results.SummaryRow{}, rows: map[string]map[int]results.CallRow{},
		done: map[string]map[int]policies.CallTiming{}, offset: map[string]time.Duration{}}
}

// readResume reads what an interrupted replay in dir measured, with the strict readers of the
// results files (a malformed line is an error naming the file, line and column; a line torn by
// the interruption is cut off). A policy whose summary row is not "ok" runs again: its done
// calls are kept, the rest sent again.
func readResume(dir *results.Dir, r *Resolved) (*resumeState, error) {
	st := newResumeState()
	data, err := os.ReadFile(dir.File("run.json"))
	if err != nil {
		return nil, fmt.Errorf("--resume: %w (nothing to resume in %s)", err, dir.Path())
	}
	var info replayInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("--resume: %s: %w", dir.File("run.json"), err)
	}
	if info.Mode != "replay" || info.Seed != uint64(r.Seed) || info.Experiment == nil || info.Experiment.Name != r.Name {
		return nil, fmt.Errorf("--resume: %s holds a %s run of %q (seed %d), not a replay of %q (seed %d)", dir.Path(), info.Mode, nameOf(info.Experiment), info.Seed, r.Name, r.Seed)
	}
	fp, err := r.fingerprint()
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	if info.Fingerprint != fp {
		return nil, fmt.Errorf("--resume: the experiment differs from the one %s was started with (the workload, models, cluster or policies changed): resume with the same file and overrides, or start a new folder", dir.Path())
	}
	st.info = info
	summaries, err := results.Rows(dir, results.Summary)
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	for _, row := range summaries {
		if row.Status != results.StatusOK || row.FailedCalls > 0 {
			slog.Warn("--resume: the policy ended with failed calls: running them again", "policy", row.Policy, "failed_calls", row.FailedCalls)
			continue
		}
		st.summaries[row.Policy] = row
	}
	calls, err := results.Rows(dir, results.Calls)
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	for _, c := range calls {
		if c.Status != "done" {
			continue // sent again; its new row supersedes this one
		}
		if st.done[c.Policy] == nil {
			st.done[c.Policy] = map[int]policies.CallTiming{}
			st.rows[c.Policy] = map[int]results.CallRow{}
		}
		t := policies.CallTiming{Started: fromSeconds(c.StartS), FirstToken: fromSeconds(c.FirstTokenS), End: fromSeconds(c.EndS), Preemptions: c.Preemptions}
		st.done[c.Policy][c.Call] = t
		st.rows[c.Policy][c.Call] = c
		st.offset[c.Policy] = max(st.offset[c.Policy], t.End)
	}
	return st, nil
}

// fromSeconds converts a results file's seconds to a Duration, rounded to the nanosecond.
func fromSeconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// resultFiles are the files a replay writes into its folder, removed when a new run reuses a
// folder whose earlier run measured nothing.
var resultFiles = []string{"calls.csv", "queries.csv", "workers.csv", "summary.csv", "run.json", "host.json", "gpus.csv"}

// hasResults reports whether a results folder holds anything measured: a summary row or a
// call's row.
func hasResults(dir *results.Dir) (bool, error) {
	for _, name := range []string{"summary.csv", "calls.csv"} {
		data, err := os.ReadFile(dir.File(name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		// More than a header line.
		if i := bytes.IndexByte(data, '\n'); i >= 0 && len(bytes.TrimSpace(data[i+1:])) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// fingerprint identifies the experiment as resolved (file, overrides and seed included, the
// [replay] table excluded: the servers may change between an interrupted run and its
// resumption), so that --resume refuses to mix results of different experiments.
func (r *Resolved) fingerprint() (string, error) {
	e := *r.Experiment
	e.Replay = Replay{}
	data, err := json.Marshal(struct {
		E *Experiment
		W *traces.Workload
	}{&e, r.Graph.Workload})
	if err != nil {
		return "", fmt.Errorf("fingerprinting the experiment: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}
