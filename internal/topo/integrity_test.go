package topo_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
)

func mustKeyring(t *testing.T, keys ...string) *topo.Keyring {
	t.Helper()
	var bs [][]byte
	for _, k := range keys {
		bs = append(bs, []byte(k))
	}
	kr, err := topo.NewKeyring(bs...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestKeyringSignVerify(t *testing.T) {
	oldKey, newKey := "old-key-0123456789abcdef", "new-key-0123456789abcdef"
	old := mustKeyring(t, oldKey)
	doc := []byte(`{"rev":7,"author":"alice@h","guard_overridden":false}`)
	signed, err := old.Sign(topo.IntegrityConfigRevision, doc)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(signed, &back); err != nil || back["rev"] != 7.0 {
		t.Fatalf("signed document is not the same JSON object: %s (%v)", signed, err)
	}
	body, err := old.Verify(topo.IntegrityConfigRevision, signed)
	if err != nil || string(body) != string(doc) {
		t.Fatalf("verify: %q, %v", body, err)
	}

	// Rotation: a keyring whose first key is new still verifies the old
	// key's documents, and signs with the new one.
	rotated := mustKeyring(t, newKey, oldKey)
	if _, err := rotated.Verify(topo.IntegrityConfigRevision, signed); err != nil {
		t.Fatalf("rotated keyring refuses a document of its second key: %v", err)
	}
	if s2, _ := rotated.Sign(topo.IntegrityConfigRevision, doc); !strings.Contains(string(s2), rotated.SigningKeyID()) {
		t.Fatalf("rotated keyring did not sign with its first key: %s", s2)
	}

	refuse := func(name string, kr *topo.Keyring, domain string, value []byte, want string) {
		t.Helper()
		_, err := kr.Verify(domain, value)
		if !errors.Is(err, topo.ErrIntegrity) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want ErrIntegrity with %q", name, err, want)
		}
	}
	refuse("unsigned", old, topo.IntegrityConfigRevision, doc, "carries no MAC")
	refuse("flag flipped", old, topo.IntegrityConfigRevision,
		[]byte(strings.Replace(string(signed), `"guard_overridden":false`, `"guard_overridden":true`, 1)), "does not match")
	refuse("revision renumbered", old, topo.IntegrityConfigRevision,
		[]byte(strings.Replace(string(signed), `"rev":7`, `"rev":8`, 1)), "does not match")
	refuse("author changed", old, topo.IntegrityConfigRevision,
		[]byte(strings.Replace(string(signed), `alice`, `mallory`, 1)), "does not match")
	refuse("other domain", old, topo.IntegrityClusterState, signed, "does not match")
	refuse("unknown key", mustKeyring(t, newKey), topo.IntegrityConfigRevision, signed, "not in this process's keyring")
	forged, _ := mustKeyring(t, "attacker-key-0123456789").Sign(topo.IntegrityConfigRevision, doc)
	refuse("attacker's key", old, topo.IntegrityConfigRevision, forged, "not in this process's keyring")
	refuse("garbage MAC", old, topo.IntegrityConfigRevision, []byte(`{"rev":7,"mac":"hmac-sha256:zz"}`), "malformed")

	if _, err := topo.NewKeyring([]byte("short")); err == nil {
		t.Error("a 5-byte key was accepted")
	}
}

// TestDecodeStateIntegrity: with a keyring set, a cluster state not signed
// by it (a forged primary written straight into etcd) is invalid; the
// controller's encoding passes.
func TestDecodeStateIntegrity(t *testing.T) {
	topo.SetIntegrity(mustKeyring(t, "state-key-0123456789abcdef"))
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	nodes := topo.NodeAddrs{"db1": "127.0.0.1:1", "db2": "127.0.0.1:2"}
	st := topo.ClusterState{Cluster: "main", Phase: topo.PhaseStable, Primary: "db1", Epoch: 3,
		Nodes: []topo.NodeState{{Name: "db1"}, {Name: "db2"}}}
	good, err := topo.EncodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := topo.DecodeState(good, "main", nil, nodes); err != nil || got.Primary != "db1" {
		t.Fatalf("signed state: %+v, %v", got, err)
	}
	forged := st
	forged.Primary, forged.Epoch = "db2", 4
	raw, _ := json.Marshal(forged)
	_, err = topo.DecodeState(raw, "main", &st, nodes)
	if !errors.Is(err, topo.ErrStateInvalid) || !errors.Is(err, topo.ErrIntegrity) {
		t.Fatalf("forged unsigned state: %v, want ErrStateInvalid and ErrIntegrity", err)
	}
	topo.SetIntegrity(nil)
	if _, err := topo.DecodeState(good, "main", nil, nodes); err != nil {
		t.Fatalf("a reader without a keyring refuses a signed state: %v", err)
	}
}

// Operator requests: without a keyring they are plain JSON; with one they
// are signed, an unsigned or changed one decodes with an error wrapping
// ErrIntegrity (and its id, for the refusal), and a signed cluster state
// does not pass as a request.
func TestRequestIntegrity(t *testing.T) {
	r := topo.Request{ID: "r1", Kind: topo.RequestFailover, Cluster: "main", Target: "node2", State: topo.RequestPending}
	plain, err := topo.EncodeRequest(&r)
	if err != nil || strings.Contains(string(plain), `"mac"`) {
		t.Fatalf("unsigned encode: %s %v", plain, err)
	}
	if got, err := topo.DecodeRequest(plain); err != nil || got.Target != "node2" {
		t.Fatalf("decode without keyring: %+v %v", got, err)
	}

	topo.SetIntegrity(mustKeyring(t, "request-key-0123456789abcdef"))
	t.Cleanup(func() { topo.SetIntegrity(nil) })
	signed, err := topo.EncodeRequest(&r)
	if err != nil || !strings.Contains(string(signed), `"mac":"hmac-sha256:`) {
		t.Fatalf("signed encode: %s %v", signed, err)
	}
	if got, err := topo.DecodeRequest(signed); err != nil || got.Target != "node2" {
		t.Fatalf("decode signed: %+v %v", got, err)
	}
	if got, err := topo.DecodeRequest(plain); !errors.Is(err, topo.ErrIntegrity) || got.ID != "r1" {
		t.Fatalf("decode unsigned with keyring: %+v %v; want ErrIntegrity with the id", got, err)
	}
	changed := []byte(strings.Replace(string(signed), `"node2"`, `"node3"`, 1))
	if _, err := topo.DecodeRequest(changed); !errors.Is(err, topo.ErrIntegrity) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("decode changed: %v", err)
	}
	st := topo.ClusterState{Cluster: "main", Epoch: 1}
	sb, err := topo.EncodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.DecodeRequest(sb); !errors.Is(err, topo.ErrIntegrity) {
		t.Fatalf("a signed state decoded as a request: %v", err)
	}
	if _, err := topo.DecodeRequest([]byte("{")); err == nil || errors.Is(err, topo.ErrIntegrity) {
		t.Fatalf("bad JSON: %v", err)
	}
}

// A signed document re-serialized by another JSON encoder (indented, the
// "mac" member moved) is refused, and the error says it was re-serialized
// rather than that it carries no MAC.
func TestVerifyReserializedDocument(t *testing.T) {
	kr, err := topo.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := kr.Sign(topo.IntegrityClusterState, []byte(`{"cluster":"main","epoch":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Verify(topo.IntegrityClusterState, signed); err != nil {
		t.Fatalf("genuine document: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(signed, &m); err != nil {
		t.Fatal(err)
	}
	re, err := json.MarshalIndent(m, "", "  ") // sorted keys: "mac" no longer last
	if err != nil {
		t.Fatal(err)
	}
	_, err = kr.Verify(topo.IntegrityClusterState, re)
	if !errors.Is(err, topo.ErrIntegrity) || !strings.Contains(err.Error(), "re-serialized") {
		t.Fatalf("re-serialized document: %v, want an integrity error saying it was re-serialized", err)
	}
	_, err = kr.Verify(topo.IntegrityClusterState, []byte(`{"cluster":"main","epoch":3}`))
	if err == nil || !strings.Contains(err.Error(), "carries no MAC") {
		t.Fatalf("unsigned document: %v", err)
	}
}
