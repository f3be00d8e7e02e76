package csvx_test

import (
	"encoding/csv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// row is what readRows makes of a record: id and t are required, note and w optional.
type row struct {
	ID   int
	T    float64
	Note string
	W    float64
}

// readRows reads src as a reader of the module would: required columns, typed fields, a
// check of its own, and Err once after the loop.
func readRows(src string, opt csvx.Options) ([]row, error) {
	r, err := csvx.NewReader("f.csv", strings.NewReader(src), opt)
	if err != nil {
		return nil, err
	}
	if err := r.Require("(want id,t)", "id", "t"); err != nil {
		return nil, err
	}
	var rows []row
	for r.Next() {
		x := row{ID: r.Int("id"), T: r.Secs("t"), Note: r.StrOr("note", "-"), W: r.FloatOr("w", 1)}
		if x.ID < 0 {
			r.Fail("id", "is negative")
		}
		rows = append(rows, x)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		opt       csvx.Options
		want      []row
		err       string
	}{
		{name: "good", src: "id,t\n1,0.5\n2,3\n", want: []row{{1, 0.5, "-", 1}, {2, 3, "-", 1}}},
		{name: "header only", src: "id,t\n"},
		{name: "extra columns are ignored", src: "x,id,y,t\na,1,b,2\n", want: []row{{1, 2, "-", 1}}},
		{name: "optional columns present", src: "w,id,t,note\n2.5,1,0.5,hi\n", want: []row{{1, 0.5, "hi", 2.5}}},
		{name: "optional column present and bad", src: "id,t,w\n1,0.5,x\n", err: `f.csv:2: column w: "x" is not a number`},
		{name: "missing column", src: "id,x\n1,2\n", err: `f.csv:1: missing column "t" (want id,t)`},
		{name: "missing column after blank lines", src: "\n\nid\n1\n", err: `f.csv:3: missing column "t" (want id,t)`},
		{name: "not an integer", src: "id,t\n1,0.5\n1.5,1\n", err: `f.csv:3: column id: "1.5" is not an integer`},
		{name: "not a number", src: "id,t\n1,soon\n", err: `f.csv:2: column t: "soon" is not a number`},
		{name: "NaN seconds", src: "id,t\n1,NaN\n", err: `f.csv:2: column t: "NaN" is not a finite time`},
		{name: "infinite seconds", src: "id,t\n1,+Inf\n", err: `f.csv:2: column t: "+Inf" is not a finite time`},
		{name: "negative infinite seconds", src: "id,t\n1,-inf\n", err: `f.csv:2: column t: "-inf" is not a finite time`},
		{name: "out of range seconds", src: "id,t\n1,1e400\n", err: `f.csv:2: column t: "1e400" is not a number`},
		{name: "caller's check", src: "id,t\n-1,2\n", err: `f.csv:2: column id: "-1" is negative`},
		{name: "first error of a record", src: "id,t\n-1,x\n", err: `f.csv:2: column t: "x" is not a number`},
		{name: "first error of the file", src: "id,t\nx,1\n2,y\n", err: `f.csv:2: column id: "x" is not an integer`},
		{name: "short record", src: "id,t\n1,0.5\n2\n", err: "f.csv:3: record on line 3: wrong number of fields"},
		{name: "long record", src: "id,t\n1,0.5,7\n", err: "f.csv:2: record on line 2: wrong number of fields"},
		{name: "torn record", src: "id,t\n1,0.5\n2,\"3\n", err: `f.csv:3: parse error on line 3, column 6: extraneous or missing " in quoted-field`},
		{name: "bare quote", src: "id,t\n1,0\"5\n", err: `f.csv:2: parse error on line 2, column 4: bare " in non-quoted-field`},
		{name: "empty file", src: "", err: "f.csv:1: EOF"},
		{name: "empty file, message", src: "", opt: csvx.Options{Empty: "empty file, want the header id,t"}, err: "f.csv:1: empty file, want the header id,t"},
		{name: "bad header", src: "id,\"t\n", err: `f.csv:1: parse error on line 1, column 7: extraneous or missing " in quoted-field`},
		// Lines are the file's: blank lines are skipped but counted, a quoted line break
		// counts, and a record's line is the one it starts on.
		{name: "lines", src: "id,t,note\n\n1,0.5,\"a\nb\"\n\nx,1,c\n", err: `f.csv:6: column id: "x" is not an integer`},
		{name: "comments", src: "# a profile\nid,t\n# more\n1,2\nz,1\n", opt: csvx.Options{Comment: '#'}, err: `f.csv:5: column id: "z" is not an integer`},
		{name: "untrimmed header", src: " id , t \n1,2\n", err: `f.csv:1: missing column "id" (want id,t)`},
		{name: "trimmed header", src: " id , t \n1,2\n", opt: csvx.Options{TrimHeader: true}, want: []row{{1, 2, "-", 1}}},
		{name: "any number of fields", src: "id,t,note\n1,2\n3,4,x,y\n", opt: csvx.Options{FieldsPerRecord: -1}, want: []row{{1, 2, "", 1}, {3, 4, "x", 1}}},
		{name: "any number of fields, required one absent", src: "id,t\n1\n", opt: csvx.Options{FieldsPerRecord: -1}, err: `f.csv:2: column t: "" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := readRows(tc.src, tc.opt)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				assert.Nil(t, rows)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, rows)
		})
	}
}

// With Positions, errors name the field's line and column, as the traces' strict readers do.
func TestPositions(t *testing.T) {
	opt := csvx.Options{Positions: true, Empty: "empty file: want the header a,b"}
	read := func(src string) error {
		r, err := csvx.NewReader("p.csv", strings.NewReader(src), opt)
		if err != nil {
			return err
		}
		if h := r.Header(); h[0] != "a" {
			return r.Errorf(0, "header column 1 is %q, want %q", h[0], "a")
		}
		for r.Next() {
			r.Int("b")
			if r.Str("a") == "" {
				r.Failf("a", "missing")
			}
		}
		return r.Err()
	}
	for _, tc := range []struct{ name, src, err string }{
		{"empty", "", "p.csv: empty file: want the header a,b"},
		{"header", "x,b\n", `p.csv:1:1: header column 1 is "x", want "a"`},
		{"Fail", "a,b\n1,2\n1,  x\n", `p.csv:3:3: b: "  x" is not an integer`},
		{"Failf", "a,b\n\n,2\n", "p.csv:3:1: a: missing"},
		{"field count", "a,b\n1,2\n1\n", "p.csv:3:1: wrong number of fields"},
		{"syntax", "a,b\n1,2\"\n", `p.csv:2:4: bare " in non-quoted-field`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.EqualError(t, read(tc.src), tc.err)
		})
	}
}

// HeaderError starts the errors of reading the header, and only those.
func TestHeaderError(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		opt       csvx.Options
		err       string
	}{
		{name: "empty file", src: "", err: "f.csv:1: reading header: EOF"},
		{name: "blank lines", src: "\n\n", err: "f.csv:1: reading header: EOF"},
		{name: "empty file, message", src: "", opt: csvx.Options{Empty: "empty file"}, err: "f.csv:1: empty file"},
		{name: "bad header", src: "id,\"t\n", err: `f.csv:1: reading header: parse error on line 1, column 7: extraneous or missing " in quoted-field`},
		{name: "bad header after blank lines", src: "\n\nid,t\"\n", err: `f.csv:3: reading header: parse error on line 3, column 5: bare " in non-quoted-field`},
		{name: "positions", src: "id,t\"\n", opt: csvx.Options{Positions: true}, err: `f.csv:1:5: reading header: bare " in non-quoted-field`},
		{name: "positions, empty file", src: "", opt: csvx.Options{Positions: true}, err: "f.csv: reading header: EOF"},
		{name: "a record's error", src: "id,t\n1,2\n3\n", err: "f.csv:3: record on line 3: wrong number of fields"},
		{name: "a missing column", src: "id\n1\n", err: `f.csv:1: missing column "t" (want id,t)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.HeaderError = "reading header"
			_, err := readRows(tc.src, tc.opt)
			require.EqualError(t, err, tc.err)
		})
	}

	_, err := readRows("", csvx.Options{HeaderError: "reading header"})
	assert.ErrorIs(t, err, io.EOF, "the error wraps encoding/csv's")
	_, err = readRows("a\"\n", csvx.Options{HeaderError: "reading header"})
	var pe *csv.ParseError
	assert.ErrorAs(t, err, &pe)
}

func TestReader(t *testing.T) {
	r, err := csvx.NewReader("f.csv", strings.NewReader("a,b\n1,2\n3,4\n"), csvx.Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, r.Header())
	assert.Equal(t, []string{"a", "b"}, r.Fields(), "the header before the first Next")
	assert.Equal(t, 1, r.Line())
	assert.True(t, r.Has("a"))
	assert.False(t, r.Has("c"))
	require.NoError(t, r.Require("", "b", "a"))
	require.True(t, r.Next())
	assert.Equal(t, []string{"1", "2"}, r.Fields())
	assert.Equal(t, 2, r.Line())
	assert.Equal(t, "x", r.StrOr("c", "x"))
	assert.Equal(t, 7, r.IntOr("c", 7))
	assert.InDelta(t, 2.5, r.SecsOr("c", 2.5), 0)
	assert.InDelta(t, 2, r.SecsOr("b", 0), 0)
	require.NoError(t, r.Err())
	assert.Empty(t, r.Str("c"), "a column the header lacks")
	assert.EqualError(t, r.Err(), `f.csv:1: missing column "c"`)
	assert.False(t, r.Next(), "an error stops the reading")
	assert.NoError(t, r.Close())

	r, err = csvx.NewReader("f.csv", strings.NewReader(""), csvx.Options{})
	assert.Nil(t, r)
	assert.ErrorIs(t, err, io.EOF, "an empty file without Options.Empty")
}

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.csv")
	_, err := csvx.Open(path, csvx.Options{})
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.ErrorContains(t, err, path)

	require.NoError(t, os.WriteFile(path, []byte("a\n1\n2\n"), 0o644))
	r, err := csvx.Open(path, csvx.Options{})
	require.NoError(t, err)
	var got []int
	for r.Next() {
		got = append(got, r.Int("a"))
	}
	require.NoError(t, r.Err())
	assert.Equal(t, []int{1, 2}, got)
	require.NoError(t, r.Close())

	require.NoError(t, os.WriteFile(path, []byte("a\n\"1\n"), 0o644))
	r, err = csvx.Open(path, csvx.Options{})
	require.NoError(t, err)
	assert.False(t, r.Next())
	assert.ErrorContains(t, r.Err(), path+":2: parse error on line 2")
	require.NoError(t, r.Close())
}

// FuzzRead checks that no input makes a Reader panic, and that errors name the file.
func FuzzRead(f *testing.F) {
	for _, s := range []string{"id,t\n1,0.5\n", "id,t,note,w\n1,2,\"a\nb\",3\n", "id\n1\n", "\n\nid,t\n#x\n1,NaN\n", ""} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, src string, positions bool) {
		for _, opt := range []csvx.Options{{Positions: positions}, {Positions: positions, FieldsPerRecord: -1, Comment: '#', TrimHeader: true, HeaderError: "reading header"}} {
			if _, err := readRows(src, opt); err != nil && !strings.HasPrefix(err.Error(), "f.csv") {
				t.Fatalf("the error does not name the file: %v", err)
			}
		}
	})
}
