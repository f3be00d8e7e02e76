package names

import (
	"fmt"
	"strings"
	"testing"
)

// TestIndexMatchesMap adds n distinct names to an Index and to a map, for n on both sides of
// the switch to a map, then each of the first half again, and requires the same answers for
// every name added, for copies of them (other data pointers) and for names never added.
func TestIndexMatchesMap(t *testing.T) {
	for _, n := range []int{0, 1, scanMax - 1, scanMax, scanMax + 1, 40} {
		var x Index
		want := map[string]int{}
		for i := range n + n/2 {
			name := fmt.Sprintf("model-%d", i%n) // the first half come twice
			got := x.Add(name)
			if w, ok := want[name]; ok && got != w {
				t.Fatalf("%d names: %q added again got index %d, first %d", n, name, got, w)
			}
			if _, ok := want[name]; !ok {
				want[name] = len(want)
			}
			if got != want[name] {
				t.Fatalf("%d names: %q got index %d, want %d", n, name, got, want[name])
			}
		}
		if x.Len() != len(want) || len(want) != n {
			t.Fatalf("%d names: Len %d, want %d", n, x.Len(), len(want))
		}
		if (x.m != nil) != (n > scanMax) {
			t.Fatalf("%d names: a map %v, want one past %d names", n, x.m != nil, scanMax)
		}
		for name, w := range want {
			for _, k := range []string{name, strings.Clone(name)} {
				if i, ok := x.Get(k); !ok || i != w {
					t.Fatalf("%d names: Get(%q) = %d, %v; want %d, true", n, k, i, ok, w)
				}
			}
		}
		for _, k := range []string{"", "model", "model-", "model-999", "Model-0"} {
			if i, ok := x.Get(k); ok {
				t.Fatalf("%d names: Get(%q) = %d, true for a name never added", n, k, i)
			}
		}
	}
}

var sink int

// BenchmarkGet looks up six model names (the online example's) with Get and with a map.
func BenchmarkGet(b *testing.B) {
	models := []string{"LlamaR1", "QwenR1", "Gemma", "Exaone", "GLM", "Qwen"}
	var x Index
	m := map[string]int{}
	for i, n := range models {
		x.Add(n)
		m[n] = i
	}
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			for _, n := range models {
				i, _ := x.Get(n)
				sink += i
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			for _, n := range models {
				sink += m[n]
			}
		}
	})
}
