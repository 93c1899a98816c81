package config

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var defaultRE = regexp.MustCompile(`Default: ("[^"]*"|\S+?)\.(?:\s|$)`)

// fieldDocs returns, per struct type in config.go, the doc comment of each
// field.
func fieldDocs(t *testing.T) map[string]map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		fields := map[string]string{}
		for _, fl := range st.Fields.List {
			for _, name := range fl.Names {
				fields[name.Name] = fl.Doc.Text()
			}
		}
		out[ts.Name.Name] = fields
		return false
	})
	return out
}

// TestDocumentedDefaults keeps the doc comments of config.go — the source of
// the README's config reference — in step with ApplyDefaults: every field
// states its type; a field whose doc names a default gets exactly that
// default; a field ApplyDefaults fills says so in its doc.
func TestDocumentedDefaults(t *testing.T) {
	docs := fieldDocs(t)
	c := &Config{Clusters: []Cluster{{Nodes: []Node{{}}}}, Users: []User{{}}, Listeners: []Listener{{}}, Hooks: []Hook{{Headers: []HookHeader{{}}}}, Admin: AdminConfig{Tokens: []AdminToken{{}}}}
	c.ApplyDefaults()
	checked := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		typ := v.Type()
		fields, ok := docs[typ.Name()]
		if !ok {
			t.Errorf("no doc comments found for type %s", typ.Name())
			return
		}
		for i := range typ.NumField() {
			sf, fv := typ.Field(i), v.Field(i)
			doc := fields[sf.Name]
			where := typ.Name() + "." + sf.Name
			if !strings.Contains(doc, "Type: ") {
				t.Errorf("%s: doc comment does not state its type (\"Type: ...\"): %q", where, doc)
			}
			m := defaultRE.FindStringSubmatch(doc)
			nested := sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[Duration]()
			switch {
			case nested:
				walk(fv)
				continue
			case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
				walk(fv.Index(0))
			}
			if m == nil {
				if !strings.Contains(doc, "Required") && !strings.Contains(doc, "Optional") {
					t.Errorf("%s: doc states neither a default, Required nor Optional: %q", where, doc)
				}
				if sf.Type.Kind() != reflect.Slice && !fv.IsZero() {
					t.Errorf("%s: ApplyDefaults sets %v but the doc names no default", where, fv)
				}
				continue
			}
			checked++
			if got := formatDefault(fv); got != m[1] {
				t.Errorf("%s: doc says default %s, ApplyDefaults gives %s", where, m[1], got)
			}
		}
	}
	walk(reflect.ValueOf(c).Elem())
	if checked < 15 {
		t.Errorf("only %d documented defaults checked; the doc format changed?", checked)
	}
}

func formatDefault(v reflect.Value) string {
	if d, ok := v.Interface().(Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Pointer:
		if v.IsNil() {
			return "nil"
		}
		return formatDefault(v.Elem())
	}
	return fmt.Sprint(v.Interface())
}
