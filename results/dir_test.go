package results_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/results"
)

// The test binary doubles as a second process that holds a folder's lock: it locks the folder
// named by RESULTSDIR_HOLD, says "locked", and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("RESULTSDIR_HOLD"); dir != "" {
		if _, err := results.Open(dir, "holder for the test"); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {} // until killed
	}
	os.Exit(m.Run())
}

// holder starts a process that holds dir's lock and returns it once it does.
func holder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RESULTSDIR_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	return cmd
}

// A folder another process writes is refused at once, naming that process's PID and command;
// the kernel releases the lock when the holder dies, however it dies.
func TestLockAgainstAnotherProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	h := holder(t, dir)
	_, err := results.Open(dir, "second")
	require.ErrorIs(t, err, results.ErrLocked)
	assert.Contains(t, err.Error(), "PID "+strconv.Itoa(h.Process.Pid))
	assert.Contains(t, err.Error(), "holder for the test")
	assert.Contains(t, err.Error(), dir)

	require.NoError(t, h.Process.Signal(syscall.SIGKILL)) // a crash: no clean-up runs
	_ = h.Wait()
	d, err := results.Open(dir, "third")
	require.NoError(t, err, "a dead holder's lock is gone")
	require.NoError(t, d.Close())
}

// Within one process too, a second writer of the same folder is refused until the first
// closes it.
func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	d, err := results.Open(dir, "first")
	require.NoError(t, err)
	_, err = results.Open(dir, "second")
	require.ErrorIs(t, err, results.ErrLocked)
	assert.Contains(t, err.Error(), fmt.Sprintf("PID %d (first", os.Getpid()))
	require.NoError(t, d.Close())
	d, err = results.Open(dir, "second")
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

func call(policy string, id int, status string) results.CallRow {
	return results.CallRow{Policy: policy, Query: id / 3, Call: id, Role: "expert", Model: "M", Worker: 0, InputTokens: 10,
		OutputTokens: 5, EndS: float64(id), Status: status, Attempts: 1}
}

// Rows appended as they are measured survive; superseding a policy's rows replaces exactly
// them, where they were, and leaves every other policy's as they are.
func TestAppendAndSupersede(t *testing.T) {
	dir := t.TempDir()
	d, err := results.Open(dir, "")
	require.NoError(t, err)
	defer d.Close()
	for _, r := range []results.CallRow{call("a", 0, "done"), call("a", 1, "done"), call("b", 0, "failed"), call("b", 1, "done"), call("b", 0, "done")} {
		require.NoError(t, results.Append(d, results.Calls, r))
	}
	rows, err := results.ReadCallsCSV(d.File("calls.csv"))
	require.NoError(t, err)
	require.Len(t, rows, 5, "appended rows are on disk at once")

	require.NoError(t, results.Supersede(d, results.Calls, "b", []results.CallRow{call("b", 0, "done"), call("b", 1, "done")}))
	require.NoError(t, results.Append(d, results.Calls, call("c", 0, "done")), "appending after a supersession reopens the new file")
	rows, err = results.ReadCallsCSV(d.File("calls.csv"))
	require.NoError(t, err)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s/%d/%s", r.Policy, r.Call, r.Status))
	}
	assert.Equal(t, []string{"a/0/done", "a/1/done", "b/0/done", "b/1/done", "c/0/done"}, got, "one row per call, the stale failed row gone")

	// A policy superseded before any of its rows was appended goes last.
	require.NoError(t, results.Supersede(d, results.Workers, "a", []results.WorkerRow{{Policy: "a", Kind: "busy", EndS: 1}}))
	w, err := results.ReadWorkersCSV(d.File("workers.csv"))
	require.NoError(t, err)
	assert.Len(t, w, 1)
}

// A line torn by a crash in the middle of an append is cut off before the next append, so the
// file stays readable.
func TestTornLine(t *testing.T) {
	dir := t.TempDir()
	d, err := results.Open(dir, "")
	require.NoError(t, err)
	require.NoError(t, results.Append(d, results.Calls, call("a", 0, "done")))
	require.NoError(t, d.Close())
	f, err := os.OpenFile(filepath.Join(dir, "calls.csv"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("a,0,1,exp")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	d, err = results.Open(dir, "")
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, results.Append(d, results.Calls, call("a", 1, "done")))
	rows, err := results.Rows(d, results.Calls)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	data, err := os.ReadFile(filepath.Join(dir, "calls.csv"))
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(data), "exp\n"), "the torn line is gone")
	names, _ := os.ReadDir(dir)
	var files []string
	for _, n := range names {
		files = append(files, n.Name())
	}
	assert.True(t, slices.Contains(files, results.LockName))
}
