package engine_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// repoRoot is the module's root, the parent of this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above engine/: %v", err)
	}
	return root
}

// citable are the files whose comments and prose cite the docs.
var citable = map[string]bool{".go": true, ".c": true, ".h": true, ".cu": true, ".cuh": true, ".comp": true,
	".glsl": true, ".md": true, ".sh": true}

// sourceTexts returns every citable file of the tree (relative path ->
// text), skipping hidden directories and generated SPIR-V.
func sourceTexts(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "peers" || name == "spv") {
				return filepath.SkipDir
			}
			return nil
		}
		if !citable[filepath.Ext(name)] {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flatten joins comment lines so that a citation wrapped over two lines
// reads as one: a newline and the next line's comment marker become a
// space.
var lineJoin = regexp.MustCompile(`\n[ \t]*(//+|#+|\*+)?[ \t]*`)

func flatten(s string) string { return lineJoin.ReplaceAllString(s, " ") }

// headings returns a Markdown file's headings: their text, and the section
// numbers of the numbered ones ("## 9. The model" gives "9").
func headings(md string) (titles, numbers map[string]bool) {
	titles, numbers = map[string]bool{}, map[string]bool{}
	num := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)*)\.?\s`)
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		titles[h] = true
		if m := num.FindStringSubmatch(h); m != nil {
			numbers[m[1]] = true
			titles[strings.TrimSpace(h[len(m[0]):])] = true
		}
	}
	return titles, numbers
}

// hasHeading reports whether a heading is h or begins with it (a citation
// may shorten a long heading).
func hasHeading(titles map[string]bool, h string) bool {
	for ti := range titles {
		if strings.HasPrefix(ti, h) {
			return true
		}
	}
	return false
}

var (
	// docs/NAME.md (or NAME.md inside docs/), then optionally
	// "section(s) 3, 4 and 8" / "sections 2-3", or ', "Heading"' /
	// ' ("Heading")'.
	citeRe    = regexp.MustCompile(`(docs/)?\b([A-Z][A-Za-z]*\.md)\b(?:,? (sections?) ([0-9][0-9.]*(?:(?:, | and |-)[0-9][0-9.]*)*)|,? \(?"([^"]+)"\)?)?`)
	sectionRe = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)*`)
	specRe    = regexp.MustCompile(`\bspec/[a-z-]+\.md|\bspec sections? [0-9]`)
)

// TestCitations checks that every citation of a document in docs/ (in the
// code's comments and in the docs themselves) names a file that exists and,
// where it names a section ("docs/MATH.md section 4") or a heading
// ("docs/MAD.md, "The models""), one the file has; and that nothing cites
// the design documents the repository does not hold.
func TestCitations(t *testing.T) {
	root := repoRoot(t)
	texts := sourceTexts(t, root)
	type doc struct{ titles, numbers map[string]bool }
	docs := map[string]doc{}
	for p, s := range texts {
		if dir, name := filepath.Split(p); dir == "docs/" && strings.HasSuffix(name, ".md") {
			ti, nu := headings(s)
			docs[name] = doc{ti, nu}
		}
	}
	n := 0
	for p, s := range texts {
		if p == "engine/docs_test.go" {
			continue // its own patterns and messages
		}
		flat := flatten(s)
		if m := specRe.FindString(flat); m != "" {
			t.Errorf("%s cites %q, a document the repository does not hold (cite docs/MATH.md)", p, m)
		}
		inDocs := strings.HasPrefix(p, "docs/")
		for _, m := range citeRe.FindAllStringSubmatch(flat, -1) {
			if m[1] == "" && !inDocs {
				continue // README.md and the like outside docs/
			}
			name := m[2]
			d, ok := docs[name]
			if !ok {
				if m[1] != "" || strings.ToUpper(name) == name {
					t.Errorf("%s cites docs/%s, which does not exist", p, name)
				}
				continue
			}
			n++
			if m[3] != "" {
				for _, sec := range sectionRe.FindAllString(m[4], -1) {
					top := strings.Split(sec, ".")[0]
					if !d.numbers[sec] && !d.numbers[top] {
						t.Errorf("%s cites docs/%s section %s, which it does not have", p, name, sec)
					}
				}
			}
			if h := m[5]; h != "" && !hasHeading(d.titles, h) {
				t.Errorf("%s cites docs/%s, %q: no such heading", p, name, h)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no citations at all; the scan is broken")
	}
}

// TestOpsTable checks that docs/OPS.md has a row for every op a Device
// offers (engine.Ops and engine.MultiTensorOps) and that the files its
// rows name exist.
func TestOpsTable(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "OPS.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile("^\\| `([A-Za-z0-9]+)`").FindStringSubmatch(l); m != nil {
			rows[m[1]] = l
		}
	}
	for _, it := range []reflect.Type{reflect.TypeFor[engine.Ops](), reflect.TypeFor[engine.MultiTensorOps]()} {
		for i := range it.NumMethod() {
			name := it.Method(i).Name
			if _, ok := rows[name]; !ok {
				t.Errorf("docs/OPS.md has no row for %s.%s", it.Name(), name)
			}
		}
	}
	var cuda strings.Builder
	for _, pat := range []string{"*.cu", "*.cuh"} {
		ms, _ := filepath.Glob(filepath.Join(root, "shaders", "cuda", pat))
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			cuda.Write(b)
		}
	}
	kernel := regexp.MustCompile("`([a-z][a-z0-9_]*)(\\*[a-z0-9_]*)?`")
	file := regexp.MustCompile("`((?:engine|shaders)/[A-Za-z0-9_/]+\\.(?:go|cu|cuh|comp|glsl))`")
	shader := regexp.MustCompile("`([a-z0-9_]+)\\.comp`")
	for op, l := range rows {
		for _, m := range file.FindAllStringSubmatch(l, -1) {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("docs/OPS.md, %s: %s does not exist", op, m[1])
			}
		}
		if cols := strings.Split(l, "|"); len(cols) > 5 {
			for _, m := range kernel.FindAllStringSubmatch(cols[5], -1) {
				if !strings.Contains(cuda.String(), m[1]) {
					t.Errorf("docs/OPS.md, %s: no CUDA kernel %s%s in shaders/cuda", op, m[1], m[2])
				}
			}
		}
		for _, m := range shader.FindAllStringSubmatch(l, -1) {
			if _, err := os.Stat(filepath.Join(root, "shaders", m[1]+".comp")); err != nil {
				t.Errorf("docs/OPS.md, %s: shaders/%s.comp does not exist", op, m[1])
			}
		}
	}
}
