// Command configref prints the README's configuration reference (a Markdown
// table: field, type, default, meaning) from the doc comments of the config
// schema in internal/config/config.go. Each field's comment ends with
// "Type: …. Default: …." or "Required"/"Optional"; see config.Config.
//
// Usage: go run ./tools/configref [path/to/config.go]
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strings"
)

func main() {
	path := "internal/config/config.go"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		fmt.Fprintln(os.Stderr, "configref:", err)
		os.Exit(1)
	}
	types := map[string]*ast.StructType{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				types[ts.Name.Name] = st
			}
		}
		return true
	})
	fmt.Println("| field | type | default | meaning |")
	fmt.Println("|---|---|---|---|")
	walk(types, "Config", "")
}

var (
	typeRe = regexp.MustCompile(`(?s)Type:\s*(.*?)\.(\s|$)`)
	defRe  = regexp.MustCompile(`(?s)Default:\s*(.*?)\.(\s|$)`)
)

func walk(types map[string]*ast.StructType, name, prefix string) {
	st := types[name]
	if st == nil {
		return
	}
	for _, fld := range st.Fields.List {
		if fld.Tag == nil || len(fld.Names) == 0 {
			continue
		}
		tag := reflect.StructTag(strings.Trim(fld.Tag.Value, "`")).Get("yaml")
		key, _, _ := strings.Cut(tag, ",")
		if key == "" || key == "-" {
			continue
		}
		path := prefix + key
		doc := strings.Join(strings.Fields(fld.Doc.Text()), " ")
		elem, list := elemType(fld.Type)
		if _, nested := types[elem]; nested {
			if list {
				fmt.Printf("| `%s` | %s | %s | %s |\n", path+"[]", typeOf(doc), defaultOf(doc), meaning(doc))
				walk(types, elem, path+"[].")
			} else {
				walk(types, elem, path+".")
			}
			continue
		}
		fmt.Printf("| `%s` | %s | %s | %s |\n", path, typeOf(doc), defaultOf(doc), meaning(doc))
	}
}

func elemType(e ast.Expr) (string, bool) {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name, false
	case *ast.StarExpr:
		return elemType(t.X)
	case *ast.ArrayType:
		n, _ := elemType(t.Elt)
		return n, true
	}
	return "", false
}

func typeOf(doc string) string {
	if m := typeRe.FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	return ""
}

func defaultOf(doc string) string {
	if m := defRe.FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	switch {
	case strings.Contains(doc, "Required"):
		return "required"
	case strings.Contains(doc, "Optional"):
		return "optional"
	}
	return ""
}

func meaning(doc string) string {
	if i := strings.Index(doc, "Type:"); i >= 0 {
		doc = doc[:i]
	}
	return strings.ReplaceAll(strings.TrimSpace(doc), "|", "\\|")
}
