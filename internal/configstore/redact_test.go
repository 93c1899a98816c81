package configstore

import (
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
)

func TestRedactYAML(t *testing.T) {
	cfg := baseConfig(t, 0)
	cfg.Users = append(cfg.Users, config.User{Name: "report", PasswordHash: "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"})
	cfg.Hooks = []config.Hook{{Name: "chat", Events: []string{config.HookDeadPrimary}, URL: "https://hooks.example.com/x",
		Headers: []config.HookHeader{{Name: "Authorization", Value: "Bearer hook-secret"}}}}
	data, _ := cfg.Marshal()
	out, err := RedactYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, secret := range []string{"m-secret", "r-secret", "app-secret", "2470C0C0", "hook-secret"} {
		if strings.Contains(s, secret) {
			t.Errorf("redacted YAML shows %q:\n%s", secret, s)
		}
	}
	if strings.Count(s, Redacted) != 5 || !strings.Contains(s, "user: monitor") || !strings.Contains(s, "address: 127.0.0.1:3306") {
		t.Errorf("redacted YAML:\n%s", s)
	}
	if _, err := RedactYAML([]byte("a: [")); err == nil {
		t.Error("broken YAML accepted")
	}
}
