package backend_test

import (
	"bufio"
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRoot finds the directory of go.mod above the test's directory and the module path it
// declares.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod declares no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// importer reads the non-test imports of the module's packages from their source.
type importer struct {
	root, module string
	cache        map[string][]string
}

// imports lists the non-test imports of the module's package at path.
func (im *importer) imports(t *testing.T, path string) []string {
	t.Helper()
	if imps, ok := im.cache[path]; ok {
		return imps
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, im.module), "/")
	pkg, err := build.ImportDir(filepath.Join(im.root, filepath.FromSlash(rel)), 0)
	var noGo *build.NoGoError
	if err != nil && !errors.As(err, &noGo) {
		t.Fatalf("reading package %s: %v", path, err)
	}
	im.cache[path] = pkg.Imports
	return pkg.Imports
}

func (im *importer) inModule(path string) bool {
	return path == im.module || strings.HasPrefix(path, im.module+"/")
}

// chain finds a path of non-test imports from the module's package from to the package
// forbidden, following only the module's own packages; nil if there is none.
func (im *importer) chain(t *testing.T, from, forbidden string) []string {
	seen := map[string]bool{}
	var walk func(p string) []string
	walk = func(p string) []string {
		if p == forbidden {
			return []string{p}
		}
		if seen[p] || !im.inModule(p) {
			return nil
		}
		seen[p] = true
		for _, q := range im.imports(t, p) {
			if c := walk(q); c != nil {
				return append([]string{p}, c...)
			}
		}
		return nil
	}
	return walk(from)
}

// TestBackendsDoNotImportPolicies keeps the dependency between the simulator and the policies
// one way: policies imports sim (its cost model), so the simulator (sim and its subpackages),
// the simulated Backend (simulated) and the real Backend (replay and its subpackages) must
// reach package policies by no chain of imports; they use this package's vocabulary instead.
func TestBackendsDoNotImportPolicies(t *testing.T) {
	root, module := moduleRoot(t)
	im := &importer{root: root, module: module, cache: map[string][]string{}}
	forbidden := module + "/policies"
	checked := 0
	for _, top := range []string{"sim", "simulated", "replay"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := build.ImportDir(p, 0); err != nil {
				return nil // no Go package here
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			path := module + "/" + filepath.ToSlash(rel)
			checked++
			if c := im.chain(t, path, forbidden); c != nil {
				t.Errorf("%s imports %s (%s): backends must use %s/policies/backend",
					path, forbidden, strings.Join(c, " -> "), module)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, must := range []string{"sim", "simulated", "replay"} {
		if _, ok := im.cache[module+"/"+must]; !ok {
			t.Errorf("package %s/%s was not checked", module, must)
		}
	}
	t.Logf("%d packages checked", checked)
}

// TestLeaf keeps this package a leaf: the standard library and traces only.
func TestLeaf(t *testing.T) {
	root, module := moduleRoot(t)
	im := &importer{root: root, module: module, cache: map[string][]string{}}
	for _, p := range im.imports(t, module+"/policies/backend") {
		std := !strings.Contains(strings.SplitN(p, "/", 2)[0], ".")
		if !std && p != module+"/traces" {
			t.Errorf("policies/backend imports %s: it may import only the standard library and traces", p)
		}
	}
}
