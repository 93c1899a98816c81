package configstore

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Redacted replaces secret values in RedactYAML's output.
const Redacted = "(redacted)"

// RedactYAML returns a config's YAML with the values of password,
// password_hash and (hook headers') value replaced by Redacted, for showing a stored revision to
// people. Comments are dropped. An error means the YAML does not parse.
func RedactYAML(data []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("configstore: redact: %w", err)
	}
	redactNode(&root, 0)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("configstore: redact: %w", err)
	}
	return b.Bytes(), nil
}

func redactNode(n *yaml.Node, depth int) {
	if n == nil || depth > 32 {
		return
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if (k.Value == "password" || k.Value == "password_hash" || k.Value == "value") && v.Kind == yaml.ScalarNode && v.Value != "" {
				v.Value, v.Tag, v.Style = Redacted, "!!str", 0
				continue
			}
			redactNode(v, depth+1)
		}
		return
	}
	for _, c := range n.Content {
		redactNode(c, depth+1)
	}
}
