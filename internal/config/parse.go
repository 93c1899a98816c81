package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrEmpty is returned (wrapped) by Parse and ValidateFile for a document
// with no content: an empty file, only comments, or null.
var ErrEmpty = errors.New("empty document: a config needs at least clusters, listeners, users and credentials")

// FileError is an error about a config file. Error prefixes every problem
// with the file's path, one problem per line, like a compiler:
//
//	switchyard.yaml: line 4: etcd.prefixx: unknown field (known: ...)
//	switchyard.yaml: listeners[1].cluster: cluster "foo" is not defined (defined: main)
type FileError struct {
	Path string
	Err  error
}

// Error returns one line per problem, each prefixed with the path.
func (e *FileError) Error() string {
	lines := strings.Split(e.Err.Error(), "\n")
	for i, l := range lines {
		lines[i] = e.Path + ": " + l
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the underlying problems (use errors.As to find a
// *FieldError).
func (e *FileError) Unwrap() error { return e.Err }

// ValidateFile reads the file at path, parses it strictly, applies defaults
// and validates it: what `switchyard config validate FILE` and every role at
// start-up run. Relative password_file paths and etcd.embedded.data_dir are
// made relative to the file's directory (absolute in the returned config).
// Errors are *FileError: every line starts with the path; YAML syntax,
// unknown-key and type errors keep their line number. Secrets are not
// resolved (see CheckSecrets).
func ValidateFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{Path: path, Err: fmt.Errorf("cannot read config: %w", err)}
	}
	c, err := decodeStrict(data)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	c.ApplyDefaults()
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	c.resolvePaths(dir)
	if err := c.Validate(); err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return c, nil
}

// resolvePaths makes relative file paths relative to dir.
func (c *Config) resolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&c.Etcd.Embedded.DataDir)
	abs(&c.Etcd.TLS.CAFile)
	abs(&c.Etcd.TLS.CertFile)
	abs(&c.Etcd.TLS.KeyFile)
	abs(&c.Etcd.PasswordFile)
	abs(&c.Etcd.IntegrityKeyFile)
	abs(&c.Credentials.Monitor.PasswordFile)
	abs(&c.Credentials.Replication.PasswordFile)
	for i := range c.Users {
		abs(&c.Users[i].PasswordFile)
	}
	abs(&c.Proxy.RSAKeyFile)
	abs(&c.Proxy.BackendAccounts.PasswordFile)
	for i := range c.Admin.Tokens {
		abs(&c.Admin.Tokens[i].TokenFile)
	}
	abs(&c.Admin.TLS.CertFile)
	abs(&c.Admin.TLS.KeyFile)
	for i := range c.Hooks {
		for j := range c.Hooks[i].Headers {
			abs(&c.Hooks[i].Headers[j].ValueFile)
		}
	}
}

// decodeStrict decodes one YAML document into a Config, rejecting unknown
// keys, and rewrites yaml's errors to name the field path.
func decodeStrict(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ErrEmpty
		}
		return nil, syntaxError(err)
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(err)
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			return nil, fmt.Errorf("line %d: a second YAML document starts here; a config is a single document (remove the \"---\" or split the file)", extra.Content[0].Line)
		}
	}
	if len(root.Content) == 0 || isNull(root.Content[0]) {
		return nil, ErrEmpty
	}
	if top := root.Content[0]; top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the config must be a mapping of keys (clusters, listeners, ...), not %s", top.Line, kindName(top))
	}

	var c Config
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	err := strict.Decode(&c)
	if err == nil {
		return &c, nil
	}
	idx := lineIndex{}
	idx.add(root.Content[0], "", 0)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		errs := make([]error, len(te.Errors))
		for i, m := range te.Errors {
			errs[i] = errors.New(idx.annotate(m))
		}
		return nil, errors.Join(errs...)
	}
	return nil, errors.New(idx.annotate(err.Error()))
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// syntaxError drops yaml's "yaml: " prefix so messages read "line 3: ...".
func syntaxError(err error) error {
	return errors.New("YAML syntax error: " + strings.TrimPrefix(err.Error(), "yaml: "))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the scalar %q", clip(n.Value))
	case yaml.AliasNode:
		return "an alias"
	}
	return "a " + n.Tag
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// lineIndex maps a line number to the field paths of the YAML nodes on it.
type lineIndex map[int][]lineEntry

type lineEntry struct {
	path  string
	kind  entryKind
	key   string // for keyEntry: the key
	value string // for scalarEntry: the value
}

type entryKind int

const (
	keyEntry entryKind = iota
	scalarEntry
	seqEntry
	mapEntry
)

// maxIndexDepth bounds the walk; deeper nesting has no meaning in a config.
const maxIndexDepth = 32

func (ix lineIndex) add(n *yaml.Node, path string, depth int) {
	if n == nil || depth > maxIndexDepth {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		ix[n.Line] = append(ix[n.Line], lineEntry{path: path, kind: mapEntry})
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" {
				ix.add(v, path, depth+1)
				continue
			}
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			ix[k.Line] = append(ix[k.Line], lineEntry{path: p, kind: keyEntry, key: k.Value})
			ix.add(v, p, depth+1)
		}
	case yaml.SequenceNode:
		ix[n.Line] = append(ix[n.Line], lineEntry{path: path, kind: seqEntry})
		for i, v := range n.Content {
			ix.add(v, path+"["+strconv.Itoa(i)+"]", depth+1)
		}
	case yaml.ScalarNode, yaml.AliasNode:
		ix[n.Line] = append(ix[n.Line], lineEntry{path: path, kind: scalarEntry, value: n.Value})
	}
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): (.*)$`)
	notFoundRE = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	dupKeyRE   = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	typeRE     = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
	quotedRE   = regexp.MustCompile("`([^`]*)`|\"((?:[^\"\\\\]|\\\\.)*)\"")
)

// hint describes the node a yaml message is about.
type hint struct {
	key     string    // a mapping key
	kind    entryKind // with hasKind: a list or mapping value
	value   string    // a prefix of a scalar value
	hasKind bool
}

// annotate rewrites one yaml message "line N: msg" to "line N: path: msg",
// with friendlier wording for unknown fields and type errors.
func (ix lineIndex) annotate(msg string) string {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	body := m[2]
	var h hint
	if f := notFoundRE.FindStringSubmatch(body); f != nil {
		h.key = f[1]
		body = "unknown field"
		if known := knownFields(f[2]); known != "" {
			body += " (known: " + known + ")"
		}
		if ix.pathFor(line, h) == "" {
			body = fmt.Sprintf("unknown field %q", f[1])
		}
	} else if f := dupKeyRE.FindStringSubmatch(body); f != nil {
		h.key = f[1]
		body = fmt.Sprintf("key %q appears twice (first at line %s)", f[1], f[2])
	} else if f := typeRE.FindStringSubmatch(body); f != nil {
		switch f[1] {
		case "!!seq":
			h.kind, h.hasKind = seqEntry, true
		case "!!map":
			h.kind, h.hasKind = mapEntry, true
		default:
			h.value = strings.TrimSuffix(f[2], "...")
		}
		body = fmt.Sprintf("expected %s, got %s", typeWord(f[3]), gotWord(f[1], f[2]))
	} else if q := quotedRE.FindStringSubmatch(body); q != nil {
		h.value = q[1]
		if q[2] != "" {
			if u, err := strconv.Unquote(`"` + q[2] + `"`); err == nil {
				h.value = u
			}
		}
	}
	if path := ix.pathFor(line, h); path != "" {
		return fmt.Sprintf("line %d: %s: %s", line, path, body)
	}
	return fmt.Sprintf("line %d: %s", line, body)
}

// pathFor picks the field path of the node a message on line is about: the
// key named h.key if given; else the only path on the line; else the only
// list or mapping (h.hasKind) or the only scalar starting with h.value; else
// the only key on the line. "" when it cannot tell.
func (ix lineIndex) pathFor(line int, h hint) string {
	entries := ix[line]
	if h.key != "" {
		for _, e := range entries {
			if e.kind == keyEntry && e.key == h.key {
				return e.path
			}
		}
		return ""
	}
	unique := func(match func(lineEntry) bool) (string, bool) {
		var p string
		n := 0
		for _, e := range entries {
			if match(e) && (n == 0 || e.path != p) {
				p = e.path
				n++
			}
		}
		return p, n == 1
	}
	if p, ok := unique(func(lineEntry) bool { return true }); ok {
		return p
	}
	if h.hasKind {
		// A block list or mapping starts on the line of its first item, so
		// nested collections share a line; they form a chain of paths and
		// the innermost is the one that cannot be decoded.
		var inner string
		for _, e := range entries {
			if e.kind != h.kind {
				continue
			}
			switch {
			case inner == "" || strings.HasPrefix(e.path, inner):
				inner = e.path
			case !strings.HasPrefix(inner, e.path):
				inner = "\x00" // two unrelated candidates
			}
		}
		if inner != "" && inner != "\x00" {
			return inner
		}
	}
	if h.value != "" {
		if p, ok := unique(func(e lineEntry) bool { return e.kind == scalarEntry && strings.HasPrefix(e.value, h.value) }); ok {
			return p
		}
	}
	if p, ok := unique(func(e lineEntry) bool { return e.kind == keyEntry }); ok {
		return p
	}
	return ""
}

// typeWord names the YAML shape a Go type expects.
func typeWord(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool" || goType == "*bool":
		return "true or false"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "an integer"
	case goType == "config.Duration":
		return `a duration like "1s"`
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "config.") || strings.HasPrefix(goType, "map["):
		return "a mapping"
	}
	return goType
}

func gotWord(tag, value string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	case "!!null":
		return "null"
	}
	return "`" + value + "`"
}

// knownFields lists the YAML keys of the config struct type named like
// "config.EtcdConfig", in declaration order.
func knownFields(typeName string) string {
	t := findType(reflect.TypeFor[Config](), typeName, map[reflect.Type]bool{})
	if t == nil {
		return ""
	}
	var keys []string
	for i := range t.NumField() {
		if k := yamlKey(t.Field(i)); k != "" {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ", ")
}

func findType(t reflect.Type, name string, seen map[reflect.Type]bool) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	if t.String() == name {
		return t
	}
	for i := range t.NumField() {
		if f := findType(t.Field(i).Type, name, seen); f != nil {
			return f
		}
	}
	return nil
}

func yamlKey(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}
