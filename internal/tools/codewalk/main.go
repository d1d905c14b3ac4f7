package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the package's directory")
	partsFlag := flag.String("parts", "", "part=file.go,file.go;part=... (files not named are shared)")
	arrows := flag.Bool("arrows", false, "list the arrows between parts")
	flag.Parse()
	parts := parseParts(*partsFlag)
	p, err := load(*dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, entry := range flag.Args() {
		seq, n, err := p.walk(entry)
		if err != nil {
			log.Fatal(err)
		}
		files, fileReturns := visits(seq, func(f string) string { return f })
		ps, partReturns := visits(seq, func(f string) string { return parts[f] })
		fmt.Printf("%s: %d functions; %d files, %d returns: %s; %d parts, %d returns: %s\n", entry, n,
			len(files), fileReturns, strings.Join(files, " "), len(ps), partReturns, strings.Join(ps, " "))
	}
	all, between := p.arrows(parts)
	fmt.Printf("arrows between files: %d; between parts: %d\n", all, len(between))
	if *arrows {
		for _, a := range between {
			fmt.Println(" ", a)
		}
	}
}

// parseParts reads -parts into file → part.
func parseParts(s string) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(s, ";") {
		name, files, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		for _, f := range strings.Split(files, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out[f] = name
			}
		}
	}
	return out
}

type pkg struct {
	fset  *token.FileSet
	types *types.Package
	info  *types.Info
	decls map[types.Object]*ast.FuncDecl
}

// load type-checks the package's non-test files.
func load(dir string) (*pkg, error) {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, m, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	tp, err := conf.Check(filepath.Base(dir), fset, files, info)
	if err != nil {
		return nil, err
	}
	p := &pkg{fset: fset, types: tp, info: info, decls: map[types.Object]*ast.FuncDecl{}}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				p.decls[info.Defs[fd.Name]] = fd
			}
		}
	}
	return p, nil
}

func (p *pkg) fileOf(pos token.Pos) string { return filepath.Base(p.fset.Position(pos).Filename) }

// walk returns the files of the walk from entry, one per step (a call,
// and the return to the caller), and the number of functions reached.
func (p *pkg) walk(entry string) ([]string, int, error) {
	var start types.Object
	if tn, mn, ok := strings.Cut(entry, "."); ok {
		t := p.types.Scope().Lookup(tn)
		if t == nil {
			return nil, 0, fmt.Errorf("%s: no type %s", entry, tn)
		}
		start, _, _ = types.LookupFieldOrMethod(t.Type(), true, p.types, mn)
	} else {
		start = p.types.Scope().Lookup(entry)
	}
	if p.decls[start] == nil {
		return nil, 0, fmt.Errorf("%s: no function of the package", entry)
	}
	seen := map[types.Object]bool{}
	var seq []string
	var visit func(o types.Object)
	visit = func(o types.Object) {
		if seen[o] {
			return
		}
		seen[o] = true
		here := p.fileOf(o.Pos())
		seq = append(seq, here)
		ast.Inspect(p.decls[o].Body, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			if c := p.info.Uses[id]; c != nil && p.decls[c] != nil {
				visit(c)
				seq = append(seq, here) // back in the caller
			}
			return true
		})
	}
	visit(start)
	return seq, len(seen), nil
}

// visits returns the distinct keys of seq in first-visit order (empty
// keys skipped) and how often seq comes back to a key it had left.
func visits(seq []string, key func(string) string) (order []string, returns int) {
	left := map[string]bool{}
	cur := ""
	for _, f := range seq {
		k := key(f)
		if k == "" || k == cur {
			continue
		}
		if cur != "" {
			left[cur] = true
		}
		if left[k] {
			returns++
		} else {
			order = append(order, k)
		}
		cur = k
	}
	return order, returns
}

// arrows counts the file pairs (A uses what B declares) and lists those
// between two parts.
func (p *pkg) arrows(parts map[string]string) (int, []string) {
	all := map[[2]string]bool{}
	for id, o := range p.info.Uses {
		if o.Pkg() != p.types || !o.Pos().IsValid() || !declared(p.types, o) {
			continue
		}
		if from, to := p.fileOf(id.Pos()), p.fileOf(o.Pos()); from != to {
			all[[2]string{from, to}] = true
		}
	}
	var between []string
	for a := range all {
		if pa, pb := parts[a[0]], parts[a[1]]; pa != "" && pb != "" && pa != pb {
			between = append(between, fmt.Sprintf("%s -> %s (%s -> %s)", pa, pb, a[0], a[1]))
		}
	}
	sort.Strings(between)
	return len(all), between
}

// declared reports whether o is declared at package level, or is a method
// or a field.
func declared(tp *types.Package, o types.Object) bool {
	if o.Parent() == tp.Scope() {
		return true
	}
	switch x := o.(type) {
	case *types.Func:
		return x.Type().(*types.Signature).Recv() != nil
	case *types.Var:
		return x.IsField()
	}
	return false
}

func init() { log.SetFlags(0); log.SetOutput(os.Stderr) }
