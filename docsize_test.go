package azlease_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The documentation's size limits, in lines of comment: the package
// documentation is an overview a newcomer reads in a few minutes, and each
// exported type, function and field says what it guarantees, costs and
// asks of its caller in a dozen lines or so. Mechanisms and derivations
// belong in docs/design.
const (
	maxPackageDocLines = 100
	maxTypeDocLines    = 20
	maxFuncDocLines    = 20
	maxFieldDocLines   = 8
)

// docSizeExempt are the symbols not held to the limits yet (a type exempts
// its fields, methods and constructors too): none since issue 35 rewrote the
// fair locks' docs.
var docSizeExempt = map[string]bool{}

func commentLines(s string) int {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// TestDocSizes: the package documentation, and every exported type's,
// function's, method's and struct field's doc comment, stay within the
// limits above, except docSizeExempt; in the root package and in the
// capabilities built on it (docSizePackages).
func TestDocSizes(t *testing.T) {
	for _, dir := range docSizePackages {
		t.Run(dir, func(t *testing.T) { checkDocSizes(t, dir) })
	}
}

// docSizePackages are the directories TestDocSizes holds to the limits
// (azleasetest, a test kit, is not: its package doc is longer).
var docSizePackages = []string{".", "shards", "gocronlock", "azleasetest"}

func checkDocSizes(t *testing.T, dir string) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, filepath.ToSlash(filepath.Join("github.com/azlease/azlease", dir)))
	require.NoError(t, err)

	assert.LessOrEqual(t, commentLines(d.Doc), maxPackageDocLines, "the package documentation (%s/doc.go)", dir)
	checkFuncs := func(owner string, fs []*doc.Func) {
		for _, f := range fs {
			name := f.Name
			if f.Recv != "" {
				name = owner + "." + f.Name
			}
			if docSizeExempt[name] {
				continue
			}
			assert.LessOrEqual(t, commentLines(f.Doc), maxFuncDocLines, "%s's doc comment", name)
		}
	}
	checkFuncs("", d.Funcs)
	for _, ty := range d.Types {
		if docSizeExempt[ty.Name] {
			continue
		}
		assert.LessOrEqual(t, commentLines(ty.Doc), maxTypeDocLines, "type %s's doc comment", ty.Name)
		checkFuncs(ty.Name, ty.Funcs)
		checkFuncs(ty.Name, ty.Methods)
		for _, spec := range ty.Decl.Specs {
			st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, f := range st.Fields.List {
				if f.Doc == nil || len(f.Names) == 0 || !f.Names[0].IsExported() {
					continue
				}
				assert.LessOrEqual(t, commentLines(f.Doc.Text()), maxFieldDocLines, "%s.%s's doc comment", ty.Name, f.Names[0].Name)
			}
		}
	}
}

// TestDesignNotesHaveSequenceDiagrams: every note in docs/design shows its
// mechanism as a Mermaid sequence diagram.
func TestDesignNotesHaveSequenceDiagrams(t *testing.T) {
	notes, err := filepath.Glob("docs/design/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, notes)
	for _, n := range notes {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		assert.Contains(t, string(b), "```mermaid\nsequenceDiagram", "%s: a Mermaid sequence diagram", n)
	}
}
