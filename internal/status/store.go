package status

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/switchyard-db/switchyard/internal/topo"
)

// Why the topology store could not be read (StoreError.Kind).
const (
	// StoreRefused: nothing listens at the address (ECONNREFUSED), known at
	// once; usually `switchyard up` is not running.
	StoreRefused = "refused"
	// StoreTimeout: no answer within the dial timeout (etcd.dial_timeout):
	// a firewall dropping packets, a host down, or an etcd that accepts
	// connections and does not answer (no quorum).
	StoreTimeout = "timeout"
	// StoreResolve: the host name does not resolve.
	StoreResolve = "resolve"
	// StoreAuth: etcd answered and refused the credentials or the
	// permission (gRPC Unauthenticated / PermissionDenied).
	StoreAuth = "auth"
	// StoreTLS: the TLS handshake failed (unknown authority, bad
	// certificate, a TLS client against a plain-text etcd or the reverse).
	StoreTLS = "tls"
	// StoreOther: any other failure.
	StoreOther = "other"
)

// StoreError says why the topology store at Addr could not be read.
type StoreError struct {
	// Addr is the endpoint (host:port) the last failure was about.
	Addr string
	// Kind is one of the Store* constants.
	Kind string
	// Err is the underlying error.
	Err error
}

func (e *StoreError) Error() string {
	switch e.Kind {
	case StoreRefused:
		return fmt.Sprintf("store unreachable at %s: connection refused (is `switchyard up` running?)", e.Addr)
	case StoreTimeout:
		return fmt.Sprintf("store unreachable at %s: no answer before the timeout (host down, packets dropped, or etcd without quorum): %v", e.Addr, e.Err)
	case StoreResolve:
		return fmt.Sprintf("store unreachable at %s: cannot resolve the host: %v", e.Addr, e.Err)
	case StoreAuth:
		return fmt.Sprintf("store at %s refused the credentials or the permission: %v", e.Addr, e.Err)
	case StoreTLS:
		return fmt.Sprintf("store at %s: TLS handshake failed: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("store at %s: %v", e.Addr, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// EndpointAddr returns the host:port of an etcd endpoint given as a URL
// (http://127.0.0.1:2379) or as host:port.
func EndpointAddr(ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

// DialStore opens a TCP connection to every endpoint in parallel, each
// bounded by timeout, and returns nil as soon as one accepts. When none
// does it returns a *StoreError for the first endpoint, classified: a
// refused connection is known at once, without waiting for the timeout.
// This tells "nothing listens" from "etcd does not answer" before the etcd
// client, which retries until its own timeout, is involved.
func DialStore(ctx context.Context, endpoints []string, timeout time.Duration) error {
	if len(endpoints) == 0 {
		return &StoreError{Kind: StoreOther, Err: errors.New("no etcd endpoint configured (etcd.endpoints)")}
	}
	type result struct {
		i   int
		err error
	}
	ch := make(chan result, len(endpoints))
	d := net.Dialer{Timeout: timeout}
	for i, ep := range endpoints {
		go func() {
			c, err := d.DialContext(ctx, "tcp", EndpointAddr(ep))
			if err == nil {
				_ = c.Close()
			}
			ch <- result{i, err}
		}()
	}
	errs := make([]error, len(endpoints))
	for range endpoints {
		r := <-ch
		if r.err == nil {
			return nil
		}
		errs[r.i] = r.err
	}
	return ClassifyStoreError(EndpointAddr(endpoints[0]), errs[0])
}

// ClassifyStoreError wraps err, a failure to reach or read the store at
// addr, in a *StoreError with its Kind (by errno, net.Error timeouts, DNS
// errors, gRPC codes and TLS/x509 error types; never by message text). A
// *StoreError is returned as is.
func ClassifyStoreError(addr string, err error) error {
	if err == nil {
		return nil
	}
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	e := &StoreError{Addr: addr, Kind: StoreOther, Err: err}
	var dnsErr *net.DNSError
	var nerr net.Error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr x509.CertificateInvalidError
	var recErr tls.RecordHeaderError
	var alert tls.AlertError
	var verr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Kind = StoreRefused
	case errors.Is(err, topo.ErrAuth),
		errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken),
		errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		// InvalidArgument codes, not Unauthenticated.
		e.Kind = StoreAuth
	case errors.As(err, &dnsErr):
		e.Kind = StoreResolve
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &certErr),
		errors.As(err, &recErr), errors.As(err, &alert), errors.As(err, &verr):
		e.Kind = StoreTLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		e.Kind = StoreTimeout
	default:
		// etcd's client returns rpctypes.EtcdError (with a Code method)
		// or a gRPC status.
		code := codes.OK
		var coded interface{ Code() codes.Code }
		if errors.As(err, &coded) {
			code = coded.Code()
		} else if s, ok := grpcstatus.FromError(err); ok {
			code = s.Code()
		}
		switch code {
		case codes.Unauthenticated, codes.PermissionDenied:
			e.Kind = StoreAuth
		case codes.DeadlineExceeded, codes.Unavailable:
			e.Kind = StoreTimeout
		}
	}
	if e.Kind == StoreAuth || e.Kind == StoreTLS {
		// The wrappers around it say "did not answer"; the cause is
		// enough.
		e.Err = innermost(err)
	}
	return e
}

// innermost is the last error of err's Unwrap chain.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
