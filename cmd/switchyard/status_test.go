package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
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
