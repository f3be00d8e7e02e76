package results

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Stream writes a table's file as its rows come, in sections written side by side and joined
// in order: rows added to section i follow every row of the sections before it, whatever the
// order they came in (a table of several policies run at once, one section each). Section 0
// goes straight into the table's temporary file, the others into temporary files of their own
// beside it; Commit joins them and renames the whole into place, so that, as with Write, a
// reader never sees half a file. Nothing is in place before Commit; Abort, or the folder's
// Close, removes what was written.
//
// Rows are written as WriteCSVSeq writes them, byte for byte. Each section is written by one
// goroutine at a time; different sections may be written at once.
type Stream[R Recorder] struct {
	d        *Dir
	t        Table[R]
	path     string
	sections []*Section[R]
	done     bool
}

// Section is one section of a Stream.
type Section[R Recorder] struct {
	f      *os.File
	w      *bufio.Writer
	fields func(R, fieldSink)
	line   lineSink
	err    error
}

// OpenStream starts writing the table's file in sections parts (at least one).
func OpenStream[R Recorder](d *Dir, t Table[R], sections int) (*Stream[R], error) {
	s := &Stream[R]{d: d, t: t, path: d.File(t.Name)}
	for i := range max(1, sections) {
		name := "." + t.Name + ".tmp"
		if i > 0 {
			name = fmt.Sprintf(".%s.%d.tmp", t.Name, i)
		}
		f, err := os.Create(filepath.Join(d.path, name))
		if err != nil {
			s.Abort()
			return nil, fmt.Errorf("writing %s: %w", s.path, err)
		}
		sec := &Section[R]{f: f, w: bufio.NewWriterSize(f, 64<<10), fields: fieldsOf[R]()}
		s.sections = append(s.sections, sec)
		if i == 0 {
			if err := WriteCSV[R](sec.w, t.Header, nil); err != nil {
				s.Abort()
				return nil, fmt.Errorf("writing %s: %w", s.path, err)
			}
		}
	}
	d.mu.Lock()
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

// Section returns section i.
func (s *Stream[R]) Section(i int) *Section[R] { return s.sections[i] }

// Add writes a row at the end of the section. After an error, every later Add returns it.
func (sec *Section[R]) Add(r R) error {
	if sec.err != nil {
		return sec.err
	}
	line := &sec.line
	line.b, line.n = line.b[:0], 0
	if sec.fields != nil {
		sec.fields(r, line)
		line.b = append(line.b, '\n')
	} else {
		line.b = appendRecord(line.b, r.Record())
	}
	if _, err := sec.w.Write(line.b); err != nil {
		sec.err = fmt.Errorf("writing %s: %w", sec.f.Name(), err)
	}
	return sec.err
}

// Commit joins the sections in order into the table's file, which it renames into place.
func (s *Stream[R]) Commit() error {
	if s.done {
		return errors.New("results: a stream committed or aborted twice")
	}
	first := s.sections[0]
	err := first.flush()
	for _, sec := range s.sections[1:] {
		if err == nil {
			err = sec.flush()
		}
		if err == nil {
			_, err = sec.f.Seek(0, io.SeekStart)
		}
		if err == nil {
			_, err = io.Copy(first.f, sec.f)
		}
	}
	if err == nil {
		err = first.f.Close()
		first.f = nil
	}
	if err != nil {
		s.Abort()
		return fmt.Errorf("writing %s: %w", s.path, err)
	}
	tmp := filepath.Join(s.d.path, "."+s.t.Name+".tmp")
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if a := s.d.appenders[s.t.Name]; a != nil {
		_ = a.close() // it would append to the file replaced
		delete(s.d.appenders, s.t.Name)
	}
	s.close(false)
	return os.Rename(tmp, s.path)
}

// Abort removes what the stream wrote; the table's file, if any, stays as it was.
func (s *Stream[R]) Abort() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.close(true)
}

// close closes the sections' files (removing them all with remove, else the sections
// after the first, joined into it) and forgets the stream; the caller holds d.mu.
func (s *Stream[R]) close(remove bool) {
	if s.done {
		return
	}
	s.done = true
	delete(s.d.streams, s)
	for i, sec := range s.sections {
		if sec.f == nil {
			if remove {
				os.Remove(filepath.Join(s.d.path, "."+s.t.Name+".tmp"))
			}
			continue
		}
		sec.f.Close()
		if remove || i > 0 {
			os.Remove(sec.f.Name())
		}
	}
}

// abort is Abort for the folder's Close, which holds d.mu.
func (s *Stream[R]) abort() { s.close(true) }

// flush writes out the section's buffer.
func (sec *Section[R]) flush() error {
	if sec.err != nil {
		return sec.err
	}
	return sec.w.Flush()
}

// fieldsOf returns the fields method of a row type that has one (nil: write its Record).
func fieldsOf[R Recorder]() func(R, fieldSink) {
	var zero R
	switch any(zero).(type) {
	case CallRow:
		return any(CallRow.fields).(func(R, fieldSink))
	case QueryRow:
		return any(QueryRow.fields).(func(R, fieldSink))
	case WorkerRow:
		return any(WorkerRow.fields).(func(R, fieldSink))
	}
	return nil
}

// appendRecord appends a record as a CSV line, as encoding/csv writes it.
func appendRecord(b []byte, rec []string) []byte {
	line := lineSink{b: b}
	for _, f := range rec {
		line.str(f)
	}
	return append(line.b, '\n')
}
