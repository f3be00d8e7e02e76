package results

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockName is the lock file's name inside a results folder. The file stays behind when the
// lock is released (removing it would let a third process lock a new file while a second
// still holds the old one); only the lock on it, not its presence, means the folder is in use.
const LockName = ".mosaic.lock"

// ErrLocked is the error (wrapped) of Lock when another process holds the folder.
var ErrLocked = errors.New("results folder in use")

// lock takes the exclusive lock of dir (created if missing) without waiting: when another
// process holds it, the error names that process's PID and command as it recorded them.
func lock(dir, command string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the results folder: %w", err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking the results folder %s: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is being written by %s; wait for it to end or write to another folder", ErrLocked, dir, holder)
		}
		return nil, fmt.Errorf("locking the results folder %s: %w", dir, err)
	}
	// The lock is ours: say who holds it, for the process that finds it taken.
	rec := fmt.Sprintf("%d\n%s\n%s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339), oneLine(command))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(rec), 0)
	}
	return f, nil
}

// readHolder describes the process that holds the lock, from what it wrote into the file.
func readHolder(f *os.File) string {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	lines := strings.SplitN(string(bytes.TrimSpace(buf[:n])), "\n", 3)
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return "another process (it has not yet recorded its PID)"
	}
	s := fmt.Sprintf("PID %d", pid)
	if len(lines) == 3 && lines[2] != "" {
		s += fmt.Sprintf(" (%s", lines[2])
		if len(lines[1]) > 0 {
			s += ", since " + lines[1]
		}
		s += ")"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// unlock releases the lock: closing the file drops it.
func unlock(f *os.File) error {
	if f == nil {
		return nil
	}
	_ = f.Truncate(0)
	return f.Close()
}
