package doccheck_test

import (
	"bufio"
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/mosaic-sched/mosaic/internal/doccheck"
)

// repoRoot walks up from the test's directory to the directory of go.mod and returns it with
// the module path go.mod declares.
func repoRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for line := range strings.SplitSeq(string(data), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
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

// docFiles lists README.md and docs/*.md, relative to the root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// markdown is a Markdown file split into what the checks read: its lines outside fenced code
// blocks (fenced lines are blanked, so line numbers stay true) and its fenced blocks.
type markdown struct {
	lines  []string // every line; fenced ones blanked
	blocks []fence
}

// fence is a fenced code block: the line of its opening fence (1-based) and its content.
type fence struct {
	line    int
	content []string
}

func readMarkdown(t *testing.T, path string) markdown {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var md markdown
	var open string // the opening fence's marker while inside a block
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case open == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			open = trimmed[:3]
			md.blocks = append(md.blocks, fence{line: n})
			md.lines = append(md.lines, "")
		case open != "" && strings.HasPrefix(trimmed, open):
			open = ""
			md.lines = append(md.lines, "")
		case open != "":
			b := &md.blocks[len(md.blocks)-1]
			b.content = append(b.content, line)
			md.lines = append(md.lines, "")
		default:
			md.lines = append(md.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return md
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpanRE = regexp.MustCompile("(?s)(`+)(.+?)(`+)")
	linkRE     = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
)

// anchors returns the heading anchors of a Markdown file as GitHub makes them: the heading's
// text, lower-cased, without characters other than letters, digits, spaces, hyphens and
// underscores, each space a hyphen; a repeated anchor gets -1, -2, ...
func anchors(md markdown) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range md.lines {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugify(m[2])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(heading string) string {
	// Links and images in a heading render as their text.
	heading = linkRE.ReplaceAllStringFunc(heading, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// link is a relative link found in a file.
type link struct {
	line   int
	target string
}

// links lists the relative links and images of a Markdown file, outside fenced blocks and
// code spans. Code spans are matched within a paragraph, as Markdown matches them.
func links(md markdown) []link {
	var out []link
	start := 0
	flush := func(end int) {
		if start >= end {
			return
		}
		para := strings.Join(md.lines[start:end], "\n")
		// Blank code spans, keeping their newlines so that line numbers stay true.
		para = codeSpanRE.ReplaceAllStringFunc(para, func(s string) string {
			m := codeSpanRE.FindStringSubmatch(s)
			if len(m[1]) != len(m[3]) {
				return s
			}
			return strings.Map(func(r rune) rune {
				if r == '\n' {
					return r
				}
				return 'x'
			}, s)
		})
		for _, loc := range linkRE.FindAllStringSubmatchIndex(para, -1) {
			target := para[loc[2]:loc[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, link{line: start + 1 + strings.Count(para[:loc[0]], "\n"), target: target})
		}
	}
	for i, line := range md.lines {
		if strings.TrimSpace(line) == "" {
			flush(i)
			start = i + 1
		}
	}
	flush(len(md.lines))
	return out
}

// TestLinksResolve checks every relative link and image of README.md and docs/*.md: its file
// exists, and its anchor, if any, is a heading of the file it points to.
func TestLinksResolve(t *testing.T) {
	root, _ := repoRoot(t)
	parsed := map[string]markdown{}
	read := func(rel string) markdown {
		if md, ok := parsed[rel]; ok {
			return md
		}
		md := readMarkdown(t, filepath.Join(root, filepath.FromSlash(rel)))
		parsed[rel] = md
		return md
	}
	checked := 0
	for _, file := range docFiles(t, root) {
		for _, l := range links(read(file)) {
			checked++
			path, anchor, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(file), filepath.FromSlash(path)))
				if strings.HasPrefix(target, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", file, l.line, l.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is not Markdown", file, l.line, l.target, target)
				continue
			}
			if !anchors(read(target))[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", file, l.line, l.target, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the Markdown reader is broken")
	}
}

// TestReadmeLength keeps the README short: the guides in docs/ hold the rest.
func TestReadmeLength(t *testing.T) {
	root, _ := repoRoot(t)
	md := readMarkdown(t, filepath.Join(root, "README.md"))
	if n := len(md.lines); n > doccheck.MaxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail into a guide in docs/ and link it", n, doccheck.MaxReadmeLines)
	}
}

// drawing reads the README's architecture drawing: the first fenced block after the
// "## Architecture" heading, one row of package paths per line, top row first.
func drawing(t *testing.T, root string) [][]string {
	t.Helper()
	md := readMarkdown(t, filepath.Join(root, "README.md"))
	heading := slices.IndexFunc(md.lines, func(l string) bool { return strings.TrimSpace(l) == "## Architecture" })
	if heading < 0 {
		t.Fatal(`README.md has no "## Architecture" heading`)
	}
	for _, b := range md.blocks {
		if b.line <= heading+1 {
			continue
		}
		var rows [][]string
		for _, line := range b.content {
			if f := strings.Fields(line); len(f) > 0 {
				rows = append(rows, f)
			}
		}
		return rows
	}
	t.Fatal(`README.md has no code block under "## Architecture"`)
	return nil
}

// modulePackages lists the module's packages (paths relative to the root) with their non-test
// imports of other module packages.
func modulePackages(t *testing.T, root, module string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "testdata" || name == "node_modules" || name == "vendor" || name == "bin") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading package %s: %w", path, err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		var imps []string
		for _, imp := range pkg.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imps = append(imps, r)
			}
		}
		pkgs[filepath.ToSlash(rel)] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestArchitectureDrawing checks the README's drawing against the imports: a drawn package
// imports only packages drawn on rows below its own, every drawn package exists, and every
// package outside internal/ is drawn.
func TestArchitectureDrawing(t *testing.T) {
	root, module := repoRoot(t)
	rows := drawing(t, root)
	pkgs := modulePackages(t, root, module)
	row := map[string]int{}
	for i, r := range rows {
		for _, p := range r {
			if _, dup := row[p]; dup {
				t.Errorf("README.md's architecture drawing shows %s twice", p)
			}
			row[p] = i
			if _, ok := pkgs[p]; !ok {
				t.Errorf("README.md's architecture drawing shows %s, which is not a package of the module", p)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		imps := pkgs[p]
		r, drawn := row[p]
		if !drawn {
			if !strings.HasPrefix(p, "internal/") && !strings.Contains(p, "/internal/") {
				t.Errorf("package %s is missing from README.md's architecture drawing", p)
			}
			continue
		}
		for _, imp := range imps {
			ir, ok := row[imp]
			if !ok {
				continue
			}
			if ir <= r {
				t.Errorf("README.md's architecture drawing puts %s (row %d) at or above %s (row %d), which imports it: move it lower", imp, ir+1, p, r+1)
			}
		}
	}
}
