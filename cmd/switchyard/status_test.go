package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

func runStatus(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"status"}, args...))
	err := root.Execute()
	return out.String(), err
}

// With nothing listening, status says so at once (a refused connection is
// not a timeout) and exits 2; an endpoint that accepts and never answers
// is a timeout, also 2.
func TestStatusStoreUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	start := time.Now()
	_, err = runStatus(t, "--etcd-endpoints", closed)
	took := time.Since(start)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitStoreUnreachable {
		t.Fatalf("refused: err %v, want exit %d", err, exitStoreUnreachable)
	}
	if want := "store unreachable at " + closed + ": connection refused"; !strings.Contains(ee.msg, want) {
		t.Fatalf("refused: message %q lacks %q", ee.msg, want)
	}
	// The etcd client's dial timeout is 2 s; a refused connect must not
	// wait for it.
	if took > 1500*time.Millisecond {
		t.Fatalf("refused: status took %s, want well under the 2s dial timeout", took)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accept, never answer
		}
	}()
	_, err = runStatus(t, "--etcd-endpoints", silent.Addr().String())
	if !errors.As(err, &ee) || ee.code != exitStoreUnreachable || !strings.Contains(ee.msg, "no answer before the timeout") {
		t.Fatalf("silent endpoint: err %v, want exit %d and a timeout message", err, exitStoreUnreachable)
	}
	if strings.Contains(ee.msg, "connection refused") {
		t.Fatalf("silent endpoint reported as refused: %q", ee.msg)
	}
}

// An etcd with authentication on refuses status, which has no
// credentials: exit 3 and a message saying it is the credentials, not
// reachability.
func TestStatusStoreAuthRequired(t *testing.T) {
	eps := topotest.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.UserAdd(ctx, "root", "root-password"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = runStatus(t, "--etcd-endpoints", strings.Join(eps, ","))
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitStoreDenied || !strings.Contains(ee.msg, "refused the credentials") {
		t.Fatalf("etcd with auth on: err %v, want exit %d and a credentials message", err, exitStoreDenied)
	}
	t.Logf("exit %d: %s", ee.code, ee.msg)
}
