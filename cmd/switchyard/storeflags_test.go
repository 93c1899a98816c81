package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// TestStoreFlagsWithoutConfig: with --etcd-endpoints and
// --integrity-key-file (no config file) status verifies: a forged event,
// proxy report and drained nodes document are marked UNVERIFIED, the
// signed ones are not; the same command without a key says once on stderr
// that the signed documents are not verified.
func TestStoreFlagsWithoutConfig(t *testing.T) {
	keyHex := "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	keyFile := filepath.Join(t.TempDir(), "integrity.key")
	if err := os.WriteFile(keyFile, []byte(keyHex+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := topo.NewKeyring([]byte(keyHex))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.SetIntegrity(nil); topo.OnUnverifiedSigned(nil) })
	eps := topotest.StartEtcd(t)
	st := topotest.Connect(t, eps)
	keys := topo.Keys{Prefix: "/switchyard"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(key string, b []byte) {
		t.Helper()
		if _, err := st.Create(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	topo.SetIntegrity(kr)
	s := topo.ClusterState{Cluster: "main", Primary: "n1", Epoch: 2, Phase: topo.PhaseStable, Leader: "ctl",
		Nodes: []topo.NodeState{{Name: "n1", Address: "127.0.0.1:1", Role: topo.RolePrimary}}}
	b, err := topo.EncodeState(&s)
	if err != nil {
		t.Fatal(err)
	}
	put(keys.ClusterState("main"), b)
	now := time.Now().UTC()
	good := topo.Event{ID: topo.EventID(now, 1), Cluster: "main", At: now, Kind: topo.EventOperator, Message: "genuine event", Leader: "ctl"}
	b, _ = topo.EncodeEvent(&good)
	put(keys.Event("main", good.ID), b)
	goodReg := topo.ProxyRegistration{ID: "p-good", Epochs: map[string]int64{"main": 2}, StartedAt: now, UpdatedAt: now}
	b, _ = topo.EncodeSigned(topo.IntegrityProxyRegistration, &goodReg)
	put(keys.Proxy("p-good"), b)
	topo.SetIntegrity(nil)
	forged := topo.Event{ID: topo.EventID(now, 2), Cluster: "main", At: now, Kind: topo.EventOperator, Message: "forged event", Leader: "ctl"}
	b, _ = json.Marshal(forged)
	put(keys.Event("main", forged.ID), b)
	b, _ = json.Marshal(topo.ProxyRegistration{ID: "p-forged", Epochs: map[string]int64{"main": 2}, StartedAt: now, UpdatedAt: now})
	put(keys.Proxy("p-forged"), b)
	b, _ = json.Marshal(topo.DrainedNodes{Cluster: "main", Nodes: map[string]topo.DrainRecord{"n1": {Since: now}}})
	put(keys.Drained("main"), b)

	var notice bytes.Buffer
	noticeOut = &notice
	t.Cleanup(func() { noticeOut = os.Stderr })
	out, err := runStatus(t, "--etcd-endpoints", strings.Join(eps, ","), "--integrity-key-file", keyFile)
	if err != nil {
		t.Fatalf("status with --integrity-key-file: %v\n%s", err, out)
	}
	t.Logf("status:\n%s", out)
	for _, want := range []string{"UNVERIFIED (integrity check failed: the document carries no MAC", "p-forged UNVERIFIED", "DRAINED NODES UNVERIFIED"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if (strings.Contains(line, "genuine event") || strings.Contains(line, "p-good")) && strings.Contains(line, "UNVERIFIED") {
			t.Errorf("a signed document is marked: %s", line)
		}
	}
	if notice.Len() != 0 {
		t.Errorf("notice with a key: %q", notice.String())
	}

	out, err = runStatus(t, "--etcd-endpoints", strings.Join(eps, ","))
	if err != nil {
		t.Fatalf("status without a key: %v\n%s", err, out)
	}
	if got := strings.Count(notice.String(), unsignedNotice); got != 1 {
		t.Fatalf("without a key the notice was printed %d times (%q); want once", got, notice.String())
	}
	if strings.Contains(out, "UNVERIFIED") {
		t.Fatalf("without a key nothing can be marked:\n%s", out)
	}
}
