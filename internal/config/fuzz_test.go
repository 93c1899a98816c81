package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that parsing and validating never panic, and that any
// config that validates survives Marshal → Parse unchanged and still
// validates (what publishing the config to etcd and reading it back does).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("probe: {interval: 1s, timeout: soon}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if err := c.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a valid config: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal()) of a valid config: %v\n%s", err, out)
		}
		if err := c2.Validate(); err != nil {
			t.Fatalf("re-parsed valid config does not validate: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", c, c2, out)
		}
	})
}
