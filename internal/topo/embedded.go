package topo

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EmbeddedOptions configures StartEmbedded (config etcd.embedded).
type EmbeddedOptions struct {
	// DataDir holds etcd's data (WAL and snapshots). It is created with mode
	// 0700 if missing; an existing one is reused, so a restart keeps every key.
	DataDir string
	// ClientAddress is the loopback host:port etcd serves clients on
	// (etcd.embedded.client_address), e.g. "127.0.0.1:2379".
	ClientAddress string
	// PeerAddress is the loopback host:port for etcd's peer (raft) traffic
	// (etcd.embedded.peer_address), e.g. "127.0.0.1:2380".
	PeerAddress string
	// Log receives etcd's warnings and errors (its info output is dropped).
	// Nil discards them.
	Log *slog.Logger
	// StartTimeout bounds waiting for the server to be ready. Default 30s.
	StartTimeout time.Duration
	// UnsafeNoFsync disables fsync (etcd --unsafe-no-fsync). Only for tests:
	// data may be lost on a machine crash.
	UnsafeNoFsync bool
}

// embeddedName is the member name of the embedded etcd.
const embeddedName = "switchyard"

// Embedded is a single-node etcd running inside this process, serving on
// loopback only. Create it with StartEmbedded and stop it with Close.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
	closing   atomic.Bool

	failOnce sync.Once
	failed   chan struct{} // closed on the first Panic/Fatal entry of etcd
	failErr  error         // set before failed is closed
}

// benignEtcdWarning reports etcd warnings that do not apply to a
// loopback-only single node without authentication; they are logged at
// debug level.
func benignEtcdWarning(msg string) bool {
	switch msg {
	case "Running http and grpc server on single port. This is not recommended for production.",
		"simple token is not cryptographically signed":
		return true
	}
	return false
}

// StartEmbedded starts a single-node etcd (go.etcd.io/etcd/server/v3/embed)
// with member name "switchyard" in o.DataDir, serving clients on
// o.ClientAddress and peers on o.PeerAddress, and waits until it is ready to
// serve (at most o.StartTimeout). Both addresses must be loopback. Periodic
// compaction keeps one hour of history so frequent state writes do not grow
// the database without bound. An address already in use is reported naming
// the config field to change.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.DataDir == "" {
		return nil, errors.New("topo: embedded etcd: etcd.embedded.data_dir is empty")
	}
	clientURL, err := loopbackURL(o.ClientAddress, "etcd.embedded.client_address")
	if err != nil {
		return nil, err
	}
	peerURL, err := loopbackURL(o.PeerAddress, "etcd.embedded.peer_address")
	if err != nil {
		return nil, err
	}
	if o.ClientAddress == o.PeerAddress {
		return nil, fmt.Errorf("topo: embedded etcd: etcd.embedded.client_address and etcd.embedded.peer_address are both %s; give them different ports", o.ClientAddress)
	}
	// Check the ports before etcd does: its own error is a bare bind error
	// after it has already written its data dir.
	for _, a := range []struct{ addr, field string }{
		{o.ClientAddress, "etcd.embedded.client_address"},
		{o.PeerAddress, "etcd.embedded.peer_address"},
	} {
		if err := checkFree(a.addr, a.field); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("topo: embedded etcd: create etcd.embedded.data_dir: %w", err)
	}
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}

	cfg := embed.NewConfig()
	cfg.Name = embeddedName
	cfg.Dir = o.DataDir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "switchyard"
	cfg.EnableGRPCGateway = false
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	cfg.UnsafeNoFsync = o.UnsafeNoFsync
	cfg.LogLevel = "warn"
	emb := &Embedded{endpoints: []string{clientURL.String()}, failed: make(chan struct{})}
	demote := func(msg string) bool { return emb.closing.Load() || benignEtcdWarning(msg) }
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLoggerFatal(o.Log, "etcd", zapcore.WarnLevel, demote, emb.fail))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("topo: embedded etcd: address in use (check etcd.embedded.client_address %s and etcd.embedded.peer_address %s): %w",
				o.ClientAddress, o.PeerAddress, err)
		}
		return nil, fmt.Errorf("topo: start embedded etcd in %s: %w", o.DataDir, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		emb.closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("topo: embedded etcd in %s failed while starting: %w", o.DataDir, err)
	case <-timer.C:
		emb.closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("topo: embedded etcd in %s not ready after %s; check its log and the data dir", o.DataDir, timeout)
	}
	emb.etcd = e
	return emb, nil
}

// Endpoints returns the client URLs ("http://host:port") to give NewEtcd.
func (e *Embedded) Endpoints() []string {
	return append([]string(nil), e.endpoints...)
}

// Err returns a channel that receives a fatal error of the running server.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Failed is closed when etcd hit an error it treats as fatal (it logs at
// Panic or Fatal level: a WAL or snapshot file it cannot purge or save,
// e.g. "too many open files"). Such an entry does not end the process: the
// etcd goroutine that logged it ends instead, and the server may serve on
// or be stuck; its owner should Close it and start a new one on the same
// data directory. FailErr says what failed.
func (e *Embedded) Failed() <-chan struct{} { return e.failed }

// FailErr returns etcd's fatal error once Failed is closed, else nil.
func (e *Embedded) FailErr() error {
	select {
	case <-e.failed:
		return e.failErr
	default:
		return nil
	}
}

// Stopped is closed when the server has stopped, by Close or on its own.
func (e *Embedded) Stopped() <-chan struct{} { return e.etcd.Server.StopNotify() }

// fail records etcd's first Panic/Fatal entry.
func (e *Embedded) fail(msg string, err error) {
	e.failOnce.Do(func() {
		if err != nil {
			e.failErr = fmt.Errorf("topo: embedded etcd: %s: %w", msg, err)
		} else {
			e.failErr = fmt.Errorf("topo: embedded etcd: %s", msg)
		}
		close(e.failed)
	})
}

// logger is the zap logger etcd logs through (for tests).
func (e *Embedded) logger() *zap.Logger { return e.etcd.GetLogger() }

// Close stops the server gracefully and waits until it has stopped. It is
// safe to call more than once; it always returns nil.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		// Stopping makes etcd log its closed listeners as errors.
		e.closing.Store(true)
		e.etcd.Close()
		<-e.etcd.Server.StopNotify()
	})
	return nil
}

// loopbackURL turns a loopback host:port into an http URL, naming field in
// its error.
func loopbackURL(addr, field string) (*url.URL, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("topo: embedded etcd: %s %q is not host:port: %w", field, addr, err)
	}
	if port == "" || port == "0" {
		return nil, fmt.Errorf("topo: embedded etcd: %s %q needs an explicit port", field, addr)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("topo: embedded etcd: %s %q is not a loopback address; the embedded etcd serves loopback only (use an external etcd cluster otherwise)", field, addr)
	}
	return &url.URL{Scheme: "http", Host: addr}, nil
}

// checkFree reports an address already in use by another process.
func checkFree(addr, field string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("topo: embedded etcd: %s %s is already in use; stop what is listening there or set %s to a free port: %w", field, addr, field, err)
		}
		return fmt.Errorf("topo: embedded etcd: cannot listen on %s %s: %w", field, addr, err)
	}
	return ln.Close()
}
