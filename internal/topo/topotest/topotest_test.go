package topotest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func TestNewStore(t *testing.T) {
	s := topotest.NewStore(t)
	ctx := context.Background()
	v, err := s.Create(ctx, "/t/a", []byte("1"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	kv, err := s.Get(ctx, "/t/a")
	if err != nil || string(kv.Value) != "1" || kv.Version != v {
		t.Fatalf("get = %+v, %v; want value 1 version %d", kv, err, v)
	}
	if _, err := s.Get(ctx, "/t/b"); !errors.Is(err, topo.ErrNotFound) {
		t.Fatalf("get missing: %v, want ErrNotFound", err)
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e := topotest.StartEmbedded(t, dir)
	s, err := topo.NewEtcd(topo.EtcdOptions{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/t/kept", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	e.Close()

	e2 := topotest.StartEmbedded(t, dir)
	s2 := topotest.Connect(t, e2.Endpoints())
	kv, err := s2.Get(ctx, "/t/kept")
	if err != nil || string(kv.Value) != "yes" {
		t.Fatalf("after restart: %+v, %v; want the key written before", kv, err)
	}
}
