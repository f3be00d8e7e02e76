// Package csvx reads a CSV file that starts with a header, one record at a time, and its fields
// by column name. It is the one place that reads a header, finds the columns, checks the
// required ones, counts lines and words the errors, so that every reader of the module's CSV
// files (results folders, traces, answer sets, sweeps) fails the same way: naming the file, the
// line and the column.
//
// A Reader is used like bufio.Scanner:
//
//	r, err := csvx.Open(path, csvx.Options{})
//	if err != nil {
//		return err
//	}
//	defer r.Close()
//	if err := r.Require("", "query", "latency_s"); err != nil {
//		return err // "calls.csv:1: missing column "latency_s""
//	}
//	for r.Next() {
//		q, lat := r.Int("query"), r.Secs("latency_s")
//		if lat < 0 {
//			r.Fail("latency_s", "is negative")
//		}
//		use(q, lat)
//	}
//	return r.Err() // "calls.csv:7: column query: "x" is not an integer"
//
// The field methods (Str, Int, Float, Secs and their ...Or forms for optional columns) never
// stop the caller: a field that does not parse records an error and returns the zero value,
// the Reader keeps the first error it records, and Next returns false once there is one. A
// reader therefore parses a whole record, checks what it must, and reads Err once after the
// loop; a record read in the same turn as the error is not wanted (the caller drops what it
// gathered).
//
// Lines are the file's own: a record's line is the line it starts on, so blank lines, comment
// lines and fields with line breaks do not shift the numbers.
package csvx

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Options say how to read a file. The zero value reads plain CSV whose records are as long as
// the header, and words errors "NAME:LINE: ...".
type Options struct {
	// Empty is the error message for a file without even a header, after "NAME:1: " (after
	// "NAME: " with Positions), e.g. "empty file, want the header of calls.csv". When it is
	// "", the error is io.EOF's, "NAME:1: EOF" (see HeaderError), and errors.Is(err, io.EOF) holds.
	Empty string
	// TrimHeader finds the columns by their header names with surrounding spaces trimmed
	// (Header still returns the names as written).
	TrimHeader bool
	// Comment, when not 0, starts comment lines, which are skipped (csv.Reader's Comment).
	Comment rune
	// FieldsPerRecord is csv.Reader's: 0 wants every record as long as the header, n > 0
	// exactly n fields (the header's too), -1 any number (a field past a short record's end
	// reads as "").
	FieldsPerRecord int
	// Positions makes errors name the column's position on the line too, as editors jump to:
	// "NAME:LINE:COL: COLUMN: message", and CSV syntax errors "NAME:LINE:COL: message".
	// Without it they read "NAME:LINE: column COLUMN: message" and "NAME:LINE: " followed by
	// encoding/csv's own message.
	Positions bool
	// HeaderError, when not "", starts the message of an error reading the header, after
	// "NAME:LINE: " and before the error's own, which it wraps: "NAME:1: reading header: EOF"
	// for an empty file (unless Empty words it), "NAME:1: reading header: parse error on line
	// 1, column 8: bare " in non-quoted-field" for a header that is not valid CSV.
	HeaderError string
}

// Reader reads the records of a CSV file after its header. Make one with Open or NewReader.
type Reader struct {
	name     string
	opt      Options
	cr       *csv.Reader
	closer   io.Closer
	header   []string
	col      map[string]int
	headLine int      // the line the header starts on
	rec      []string // the record last read (the header before the first Next); nil after the last
	line     int      // the line rec starts on
	err      error
}

// Open opens the file at path and reads its header (see NewReader); Close closes the file. An
// error opening it is os.Open's, as is (it names the path).
func Open(path string, opt Options) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(path, f, opt)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads the header of in; name (usually the path) starts every error message. A
// missing header is an error (see Options.Empty), and so is one that is not valid CSV.
func NewReader(name string, in io.Reader, opt Options) (*Reader, error) {
	cr := csv.NewReader(in)
	cr.Comment = opt.Comment
	cr.FieldsPerRecord = opt.FieldsPerRecord
	r := &Reader{name: name, opt: opt, cr: cr}
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) && opt.Empty != "" {
			if opt.Positions {
				return nil, fmt.Errorf("%s: %s", name, opt.Empty)
			}
			return nil, fmt.Errorf("%s:1: %s", name, opt.Empty)
		}
		return nil, r.readError(opt.HeaderError, err)
	}
	r.header, r.rec = head, head
	r.line, _ = cr.FieldPos(0)
	r.headLine = r.line
	r.col = make(map[string]int, len(head))
	for i, h := range head {
		if opt.TrimHeader {
			h = strings.TrimSpace(h)
		}
		r.col[h] = i // a repeated name finds its last column
	}
	return r, nil
}

// Close closes the file Open opened; it does nothing for a Reader made by NewReader.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Header returns the header's fields, as written.
func (r *Reader) Header() []string { return r.header }

// Has reports whether the header has the column.
func (r *Reader) Has(name string) bool {
	_, ok := r.col[name]
	return ok
}

// Require checks that the header has every named column. The error names the first one
// missing, "NAME:1: missing column "x"", followed by hint (when not "") after a space, e.g.
// "(want a,b,c)".
func (r *Reader) Require(hint string, names ...string) error {
	for _, n := range names {
		if !r.Has(n) {
			if hint != "" {
				return fmt.Errorf("%s:%d: missing column %q %s", r.name, r.headLine, n, hint)
			}
			return fmt.Errorf("%s:%d: missing column %q", r.name, r.headLine, n)
		}
	}
	return nil
}

// Next reads the next record and reports whether there is one: it returns false at the end
// of the file, on a record that is not valid CSV (or has the wrong number of fields), and once
// an error has been recorded; Err tells which.
func (r *Reader) Next() bool {
	if r.err != nil {
		r.rec = nil
		return false
	}
	rec, err := r.cr.Read()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = r.readError("", err)
		}
		r.rec = nil
		return false
	}
	r.rec = rec
	r.line, _ = r.cr.FieldPos(0)
	return true
}

// Err returns the first error recorded since the header: a record that is not valid CSV or a
// field that failed. It is nil at the end of a good file.
func (r *Reader) Err() error { return r.err }

// Line returns the line the current record starts on (the header's before the first Next).
func (r *Reader) Line() int { return r.line }

// Fields returns the current record's fields in file order (the header before the first
// Next). The slice is the Reader's: it changes with Next.
func (r *Reader) Fields() []string { return r.rec }

// Str returns the current record's field of the column. A column the header lacks records the
// error "NAME:1: missing column "x"" and reads as "".
func (r *Reader) Str(name string) string {
	i, ok := r.col[name]
	if !ok {
		r.setErr(fmt.Errorf("%s:%d: missing column %q", r.name, r.headLine, name))
		return ""
	}
	return r.field(i)
}

// Int parses the column's field as an integer; if it is not one, it records
// "column NAME: "x" is not an integer" and returns 0.
func (r *Reader) Int(name string) int {
	v, err := strconv.Atoi(r.Str(name))
	if err != nil {
		r.Fail(name, "is not an integer")
	}
	return v
}

// Float parses the column's field as a number (NaN and infinities included); if it is not
// one, it records "column NAME: "x" is not a number".
func (r *Reader) Float(name string) float64 {
	v, err := strconv.ParseFloat(r.Str(name), 64)
	if err != nil {
		r.Fail(name, "is not a number")
	}
	return v
}

// Secs parses the column's field as a time in seconds, which must be a finite number: NaN or
// an infinity records "column NAME: "Inf" is not a finite time".
func (r *Reader) Secs(name string) float64 {
	v := r.Float(name)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.Fail(name, "is not a finite time")
	}
	return v
}

// StrOr is Str for a column the file may lack (one added after older files were written): def
// when the header has no such column.
func (r *Reader) StrOr(name, def string) string {
	if !r.Has(name) {
		return def
	}
	return r.Str(name)
}

// IntOr is Int for a column the file may lack: def when the header has no such column.
func (r *Reader) IntOr(name string, def int) int {
	if !r.Has(name) {
		return def
	}
	return r.Int(name)
}

// FloatOr is Float for a column the file may lack: def when the header has no such column.
func (r *Reader) FloatOr(name string, def float64) float64 {
	if !r.Has(name) {
		return def
	}
	return r.Float(name)
}

// SecsOr is Secs for a column the file may lack: def when the header has no such column.
func (r *Reader) SecsOr(name string, def float64) float64 {
	if !r.Has(name) {
		return def
	}
	return r.Secs(name)
}

// Fail records that the current record's field of the column is wrong, unless an error is
// recorded already: "NAME:LINE: column COLUMN: "value" why" (see Options.Positions).
func (r *Reader) Fail(name, why string) {
	r.Failf(name, "%q %s", r.field(r.index(name)), why)
}

// Failf is Fail with a message of the caller's: "NAME:LINE: column COLUMN: message", or with
// Positions "NAME:LINE:COL: COLUMN: message".
func (r *Reader) Failf(name, format string, args ...any) {
	if r.err != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if r.opt.Positions {
		r.err = r.Errorf(r.index(name), "%s: %s", name, msg)
	} else {
		r.err = r.Errorf(r.index(name), "column %s: %s", name, msg)
	}
}

// Errorf returns an error at field i of the current record (of the header before the first
// Next), without recording it: "NAME:LINE: message", or with Positions "NAME:LINE:COL:
// message", COL being where the field starts (1 when there is no field i).
func (r *Reader) Errorf(i int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if !r.opt.Positions {
		return fmt.Errorf("%s:%d: %s", r.name, r.line, msg)
	}
	line, col := r.line, 1
	if i >= 0 && i < len(r.rec) {
		line, col = r.cr.FieldPos(i)
	}
	return fmt.Errorf("%s:%d:%d: %s", r.name, line, col, msg)
}

// index returns the column's index, or -1.
func (r *Reader) index(name string) int {
	if i, ok := r.col[name]; ok {
		return i
	}
	return -1
}

// field returns field i of the current record, "" past its end.
func (r *Reader) field(i int) string {
	if i < 0 || i >= len(r.rec) {
		return ""
	}
	return r.rec[i]
}

func (r *Reader) setErr(err error) {
	if r.err == nil {
		r.err = err
	}
}

// readError words an error of encoding/csv: "NAME:LINE: " and its message, or with Positions
// "NAME:LINE:COL: " and the syntax error alone; what (Options.HeaderError, for the header),
// when not "", goes between them after ": ".
func (r *Reader) readError(what string, err error) error {
	var pe *csv.ParseError
	isParse := errors.As(err, &pe)
	var at string
	switch {
	case r.opt.Positions && isParse:
		at, err = fmt.Sprintf("%s:%d:%d", r.name, pe.Line, pe.Column), pe.Err
	case r.opt.Positions:
		at = r.name
	case isParse:
		at = fmt.Sprintf("%s:%d", r.name, pe.StartLine)
	default:
		at = fmt.Sprintf("%s:%d", r.name, r.line+1)
	}
	if what != "" {
		return fmt.Errorf("%s: %s: %w", at, what, err)
	}
	return fmt.Errorf("%s: %w", at, err)
}
