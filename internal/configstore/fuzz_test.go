package configstore

import (
	"encoding/json"
	"testing"
)

// FuzzDecode checks that any stored value decodes or is refused without a
// panic and with a message, and that what decodes is internally consistent
// (its YAML hashes to its SHA256 and the config validates).
func FuzzDecode(f *testing.F) {
	cfg := baseConfig(f, 1)
	y, _ := cfg.Marshal()
	good, _ := json.Marshal(Revision{Rev: 1, SHA256: Hash(y), YAML: string(y)})
	f.Add(good)
	f.Add(y)
	f.Add([]byte{})
	f.Add([]byte("{}"))
	f.Add([]byte(`{"rev": 2, "sha256": "", "yaml": ""}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, value []byte) {
		r, c, err := Decode(value)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			if c != nil {
				t.Fatal("a config returned with an error")
			}
			return
		}
		if r == nil || c == nil || r.Rev <= 0 || Hash([]byte(r.YAML)) != r.SHA256 {
			t.Fatalf("inconsistent decode: %+v", r)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded config does not validate: %v", err)
		}
	})
}
