package results

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Dir is a results folder opened for writing: locked against every other process until
// Close.
type Dir struct {
	path string
	lock *os.File

	mu        sync.Mutex
	appenders map[string]*appender
	// streams are the tables being written in sections (OpenStream), not yet committed.
	streams map[aborter]struct{}
}

// aborter is a Stream, whatever its rows.
type aborter interface{ abort() }

// Open creates dir if needed and locks it; command describes this process for the error
// another one gets while it holds the lock (e.g. "mosaic replay exp.toml -o out"; "": the
// process's command line).
func Open(dir, command string) (*Dir, error) {
	if command == "" {
		command = strings.Join(append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...), " ")
	}
	f, err := lock(dir, command)
	if err != nil {
		return nil, err
	}
	return &Dir{path: dir, lock: f, appenders: map[string]*appender{}, streams: map[aborter]struct{}{}}, nil
}

// Path is the folder.
func (d *Dir) Path() string { return d.path }

// File is the path of a file of the folder.
func (d *Dir) File(name string) string { return filepath.Join(d.path, name) }

// Close closes the appended files, removes what streams not committed wrote (OpenStream) and
// releases the lock.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := range d.streams {
		s.abort()
	}
	var errs []error
	for name, a := range d.appenders {
		errs = append(errs, a.close())
		delete(d.appenders, name)
	}
	errs = append(errs, unlock(d.lock))
	d.lock = nil
	return errors.Join(errs...)
}

// Table describes one results CSV: its file name, header, strict reader and the policy a row
// belongs to.
type Table[R Recorder] struct {
	Name   string
	Header []string
	Read   func(path string) ([]R, error)
	Policy func(R) string
}

// The tables of a results folder.
var (
	Calls = Table[CallRow]{Name: "calls.csv", Header: CallHeader, Read: ReadCallsCSV,
		Policy: func(r CallRow) string { return r.Policy }}
	Queries = Table[QueryRow]{Name: "queries.csv", Header: QueryHeader, Read: ReadQueriesCSV,
		Policy: func(r QueryRow) string { return r.Policy }}
	Workers = Table[WorkerRow]{Name: "workers.csv", Header: WorkerHeader, Read: ReadWorkersCSV,
		Policy: func(r WorkerRow) string { return r.Policy }}
	Summary = Table[SummaryRow]{Name: "summary.csv", Header: SummaryHeader, Read: ReadSummaryCSV,
		Policy: func(r SummaryRow) string { return r.Policy }}
)

// Write replaces the table's file with rows, through a temporary file renamed into place, so
// that a reader, or a run resumed after a crash, never sees half a file.
func Write[R Recorder](d *Dir, t Table[R], rows iter.Seq[R]) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replace(t.Name, func(f *os.File) error { return WriteCSVSeq(f, t.Header, rows) })
}

// AppendLines appends the CSV lines of rows to b, byte for byte as WriteCSVSeq writes them
// (without the header): rows formatted once may then go into several files (WriteSections).
func AppendLines[R Recorder](b []byte, rows iter.Seq[R]) []byte {
	fields := fieldsOf[R]()
	line := lineSink{b: b}
	for r := range rows {
		if fields == nil {
			line.b = appendRecord(line.b, r.Record())
			continue
		}
		line.n = 0
		fields(r, &line)
		line.b = append(line.b, '\n')
	}
	return line.b
}

// WriteSections replaces the table's file as Write does, with its header and then the lines
// of each section (made by AppendLines) in order: the file Write writes for the rows of the
// sections one after another.
func WriteSections[R Recorder](d *Dir, t Table[R], sections ...[]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replace(t.Name, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 64<<10)
		if err := WriteCSV[R](bw, t.Header, nil); err != nil {
			return err
		}
		for _, s := range sections {
			if _, err := bw.Write(s); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

// replace writes name through a temporary file renamed into place; an appender open on it is
// closed first (it would write to the replaced file).
func (d *Dir) replace(name string, write func(*os.File) error) error {
	if a := d.appenders[name]; a != nil {
		if err := a.close(); err != nil {
			return err
		}
		delete(d.appenders, name)
	}
	return WriteFile(d.File(name), write)
}

// WriteFile writes path through a temporary file beside it, renamed into place.
func WriteFile(path string, write func(*os.File) error) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// WriteBytes writes a whole file of the folder (run.json, host.json) through a temporary file.
func (d *Dir) WriteBytes(name string, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replace(name, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// Append adds one row to the table's file (created with its header when missing or empty) and
// flushes it to the operating system at once, so that a crash of this process loses no row
// already appended. A torn last line left by an earlier crash is cut off first.
func Append[R Recorder](d *Dir, t Table[R], row R) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.appenders[t.Name]
	if a == nil {
		var err error
		if a, err = openAppender(d.File(t.Name), t.Header); err != nil {
			return err
		}
		d.appenders[t.Name] = a
	}
	return a.write(row.Record())
}

// Supersede rewrites the table so that policy's rows are exactly rows: the rows an earlier
// run or this one appended for it are dropped, the new ones take the place of its first old
// row (or go last), and every other policy's rows stay as they were.
func Supersede[R Recorder](d *Dir, t Table[R], policy string, rows []R) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.appenders[t.Name]; a != nil {
		if err := a.close(); err != nil {
			return err
		}
		delete(d.appenders, t.Name)
	}
	path := d.File(t.Name)
	var old []R
	if _, err := os.Stat(path); err == nil {
		if _, err := TrimTornLine(path); err != nil {
			return err
		}
		if old, err = t.Read(path); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out := make([]R, 0, len(old)+len(rows))
	placed := false
	for _, r := range old {
		if t.Policy(r) != policy {
			out = append(out, r)
			continue
		}
		if !placed {
			out = append(out, rows...)
			placed = true
		}
	}
	if !placed {
		out = append(out, rows...)
	}
	return WriteFile(path, func(f *os.File) error { return WriteCSVSeq(f, t.Header, slices.Values(out)) })
}

// Rows reads the table's rows (none when the file is missing), cutting a torn last line first.
func Rows[R Recorder](d *Dir, t Table[R]) ([]R, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	path := d.File(t.Name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if _, err := TrimTornLine(path); err != nil {
		return nil, err
	}
	return t.Read(path)
}

// Remove deletes files of the folder that exist (an abandoned run's, before a new one).
func (d *Dir) Remove(names ...string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range names {
		if a := d.appenders[name]; a != nil {
			_ = a.close()
			delete(d.appenders, name)
		}
		if err := os.Remove(d.File(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// TrimTornLine cuts a file appended line by line back to its last complete line (ending in a
// newline), as a process killed in the middle of a write leaves it; it reports whether it cut.
func TrimTornLine(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && (len(data) == 0 || data[len(data)-1] == '\n')) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cut := 0
	for i := len(data) - 1; i >= 0; i-- {
		if data[i] == '\n' {
			cut = i + 1
			break
		}
	}
	return true, os.Truncate(path, int64(cut))
}

// appender appends CSV rows to a file and flushes after each.
type appender struct {
	f *os.File
	w *csv.Writer
}

func openAppender(path string, header []string) (*appender, error) {
	if _, err := TrimTornLine(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	a := &appender{f: f, w: csv.NewWriter(f)}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() == 0 {
		if err := a.write(header); err != nil {
			f.Close()
			return nil, err
		}
	}
	return a, nil
}

func (a *appender) write(rec []string) error {
	if err := a.w.Write(rec); err != nil {
		return fmt.Errorf("appending to %s: %w", a.f.Name(), err)
	}
	a.w.Flush()
	if err := a.w.Error(); err != nil {
		return fmt.Errorf("appending to %s: %w", a.f.Name(), err)
	}
	return nil
}

func (a *appender) close() error { return a.f.Close() }
