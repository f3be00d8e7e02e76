package tomlx_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/tomlx"
)

type doc struct {
	Name  string `toml:"name"`
	Table struct {
		N int `toml:"n"`
		D struct {
			X int `toml:"x"`
		} `toml:"d"`
	} `toml:"table"`
	Items []struct {
		A string `toml:"a"`
	} `toml:"item"`
}

const src = `name = "x" # a comment with = sign
[table]
n = 1
d = { x = 2 }

[[item]]
a = "first"

[[item]]
a = "second" # "quoted # not a comment"
`

func TestLines(t *testing.T) {
	var d doc
	f, err := tomlx.Decode("f.toml", []byte(src), &d)
	require.NoError(t, err)
	for key, line := range map[string]int{
		"name": 1, "table": 2, "table.n": 3, "table.d": 4, "table.d.x": 4,
		"item[0]": 6, "item[0].a": 7, "item[1].a": 10, "item[1].missing": 9, "nothing": 0,
	} {
		assert.Equal(t, line, f.Line(key), key)
	}
	assert.EqualError(t, f.Errorf("item[1].a", "bad %s", "value"), "f.toml:10: item[1].a: bad value")
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown key", "name = \"x\"\n[table]\nm = 1\n", "f.toml:3: table.m: unknown key"},
		{"unknown in array table", "[[item]]\na = \"x\"\n[[item]]\nb = 1\n", "f.toml:4: item[1].b: unknown key"},
		{"unknown inline", "[table]\nd = { y = 1 }\n", "f.toml:2: table.d.y: unknown key"},
		{"type", "[table]\nn = \"one\"\n", "f.toml:2: table.n: incompatible types"},
		{"syntax", "name = \n", "f.toml:1"},
		{"several unknown", "a = 1\nb = 2\n", "f.toml:1: a: unknown key (all unknown keys: a, b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			_, err := tomlx.Decode("f.toml", []byte(tc.in), &d)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// FuzzDecode checks that no input makes the decoder or the line index panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(src))
	f.Add([]byte("[[item]]\nb = { c = [1, 2] }\n"))
	f.Add([]byte("a.b.c = 1\n[x.y]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		f, err := tomlx.Decode("f.toml", data, &d)
		if err == nil {
			_ = f.Line("table.n")
		}
	})
}
