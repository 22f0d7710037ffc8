package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// flagRef is a flag named in a message: --name, not inside a word or a longer dash run.
var flagRef = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*[a-z0-9])`)

// hintPackages are the library packages whose error messages the commands print as they come,
// and the commands that print them. Each --flag such an error names must exist on each of them.
var hintPackages = map[string][]string{
	"../../store":   {"serve", "compact", "export", "inspect", "verify"},
	"../../wal":     {"serve", "compact", "export", "inspect", "verify"},
	"../../offline": {"compact", "export", "inspect", "verify"},
	"../../engine":  {"serve"},
	"../../server":  {"serve"},
}

// otherTools are flags of other programs a message may name, with the program's name, which the
// message must say too.
var otherTools = map[string]string{"data-binary": "curl"}

// TestHintsNameExistingFlags checks the rule "every hint names a flag that exists on the command
// that prints it": each --flag in a string of this package (attributed to the commands whose
// <name>Command function reaches it) and in an error message of a package of hintPackages must
// be a flag of those commands (or a global one). `compact` once said "pass --force" without
// having it.
func TestHintsNameExistingFlags(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	global := flagNames(app.Flags)
	global["help"], global["version"] = true, true
	flags := map[string]map[string]bool{}
	for _, c := range app.Commands {
		flags[c.Name] = flagNames(c.Flags)
		maps.Copy(flags[c.Name], global)
	}
	check := func(where, s string, cmds []string) {
		for _, m := range flagRef.FindAllStringSubmatch(s, -1) {
			if tool := otherTools[m[1]]; tool != "" && strings.Contains(s, tool) {
				continue
			}
			for _, c := range cmds {
				if !flags[c][m[1]] {
					t.Errorf("%s: %q names --%s, which `kvindex %s` does not define", where, s, m[1], c)
				}
			}
		}
	}

	// This package: a string belongs to every command whose constructor reaches its function.
	// Its package-level functions, variables and constants are the nodes; a name used in one's
	// body is an edge.
	fset := token.NewFileSet()
	funcs := map[string]ast.Node{}
	for _, f := range parseDir(t, fset, ".") {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok {
						for _, id := range vs.Names {
							funcs[id.Name] = vs
						}
					}
				}
			}
		}
	}
	reached := map[string][]string{} // function → commands
	for _, c := range app.Commands {
		root := c.Name + "Command"
		if funcs[root] == nil {
			t.Fatalf("command %s is not built by a function %s: name it so, or teach this test", c.Name, root)
		}
		seen := map[string]bool{}
		var walk func(name string)
		walk = func(name string) {
			if seen[name] || funcs[name] == nil {
				return
			}
			seen[name] = true
			reached[name] = append(reached[name], c.Name)
			ast.Inspect(funcs[name], func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					walk(id.Name)
				}
				return true
			})
		}
		walk(root)
	}
	n := 0
	for name, fd := range funcs {
		ast.Inspect(fd, func(node ast.Node) bool {
			if lit, ok := node.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				if flagRef.MatchString(s) {
					n++
				}
				check(fset.Position(lit.Pos()).String()+" ("+name+")", s, reached[name])
			}
			return true
		})
	}

	// The libraries' error messages: the string arguments of fmt.Errorf and errors.New.
	for _, dir := range slices.Sorted(maps.Keys(hintPackages)) {
		for _, f := range parseDir(t, fset, dir) {
			ast.Inspect(f, func(node ast.Node) bool {
				call, ok := node.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Errorf" && sel.Sel.Name != "New") {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "fmt" && pkg.Name != "errors") {
					return true
				}
				for _, a := range call.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						if flagRef.MatchString(s) {
							n++
						}
						check(fset.Position(lit.Pos()).String(), s, hintPackages[dir])
					}
				}
				return true
			})
		}
	}
	if n < 20 {
		t.Fatalf("found only %d strings naming a flag: the scan is broken", n)
	}
}

func flagNames(fs []cli.Flag) map[string]bool {
	m := map[string]bool{}
	for _, f := range fs {
		for _, n := range f.Names() {
			m[n] = true
		}
	}
	return m
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}
