package status

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Every failure class is told apart by type or code, whatever the wrapping.
func TestClassifyStoreError(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		kind string
	}{
		{"refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, StoreRefused},
		{"deadline", fmt.Errorf("etcd does not answer: %w", context.DeadlineExceeded), StoreTimeout},
		{"dns", &net.DNSError{Err: "no such host", Name: "etcd.invalid", IsNotFound: true}, StoreResolve},
		{"auth", fmt.Errorf("list: %w", rpctypes.ErrAuthFailed), StoreAuth},
		{"permission", rpctypes.ErrPermissionDenied, StoreAuth},
		{"tls", fmt.Errorf("handshake: %w", x509.UnknownAuthorityError{}), StoreTLS},
		{"other", errors.New("something else"), StoreOther},
	} {
		t.Run(c.name, func(t *testing.T) {
			var se *StoreError
			if err := ClassifyStoreError("127.0.0.1:2379", c.err); !errors.As(err, &se) || se.Kind != c.kind {
				t.Fatalf("kind %v, want %s (%v)", se, c.kind, err)
			}
		})
	}
}

// DialStore reports the refusal of a closed port at once, and succeeds
// when any endpoint accepts.
func TestDialStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	ctx := context.Background()
	err = DialStore(ctx, []string{"http://" + deadAddr}, 2*time.Second)
	var se *StoreError
	if !errors.As(err, &se) || se.Kind != StoreRefused || se.Addr != deadAddr {
		t.Fatalf("closed port: %v", err)
	}
	if err := DialStore(ctx, []string{deadAddr, ln.Addr().String()}, 2*time.Second); err != nil {
		t.Fatalf("one endpoint listening: %v", err)
	}
}
