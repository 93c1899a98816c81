package configstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestApplyRefusesMonitorCredentialsThePrimaryRefuses: a new
// credentials.monitor password that the live primary refuses (a typo) is
// refused like a destructive change — every probe and failsafe check would
// fail with it — naming the account and the server's error; the right
// password for a new account passes; an unchanged account is not checked.
func TestApplyRefusesMonitorCredentialsThePrimaryRefuses(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 1})
	st := topotest.NewStore(t)
	ctx := context.Background()
	cfg := sb.Config()
	cfg.ApplyDefaults()
	if _, err := Apply(ctx, st, keys, Change{Config: cfg, Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	live := &config.Live{Clusters: map[string]config.LiveCluster{cfg.Clusters[0].Name: {Primary: cfg.Clusters[0].Nodes[0].Name}}}

	bad := *cfg
	bad.Credentials.Monitor.Password, bad.Credentials.Monitor.PasswordEnv, bad.Credentials.Monitor.PasswordFile = "typo-"+sb.RootPassword, "", ""
	res, err := Apply(ctx, st, keys, Change{Config: &bad, Reason: "typo", Live: live})
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("a monitor password the primary refuses: %v, want refused", err)
	}
	if len(res.Violations) != 1 || res.Violations[0].Rule != RuleCredentialsRefused ||
		!strings.Contains(res.Violations[0].Msg, "access denied") && !strings.Contains(res.Violations[0].Msg, "Access denied") {
		t.Fatalf("violations %+v", res.Violations)
	}
	t.Logf("refused: %s", res.Violations[0].Msg)

	mustExecRoot(t, sb, "CREATE USER 'mon2'@'%' IDENTIFIED BY 'mon2-secret'")
	good := *cfg
	good.Credentials.Monitor = config.Credential{User: "mon2", Password: "mon2-secret"}
	if _, err := Apply(ctx, st, keys, Change{Config: &good, Reason: "new monitor account", Live: live}); err != nil {
		t.Fatalf("a new monitor account the primary accepts: %v", err)
	}
}

func mustExecRoot(t *testing.T, sb *sandbox.Cluster, q string) {
	t.Helper()
	db := sandboxtest.DB(t, sb, 0, "root", sb.RootPassword, "")
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
}
