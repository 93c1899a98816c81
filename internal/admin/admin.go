package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/console"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Options configure the admin server.
type Options struct {
	// Address is host:port to listen on.
	Address string
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Status returns the document served at /api/v1/status and
	// /api/status (marshalled as JSON). May be nil.
	Status func(ctx context.Context) (any, error)
	// Healthy reports liveness problems for /healthz; nil error = healthy.
	// May be nil (always healthy).
	Healthy func() error
	// Ready reports readiness for /readyz (503 with the reason when not
	// ready, e.g. no routing state yet). May be nil (/readyz then answers
	// like /healthz for the process part).
	Ready func() error
	// Degraded reports parts of the process that are down while the
	// listeners keep serving from their last routing state (the store
	// unreachable: failsafe; the embedded etcd restarting): plain /readyz
	// is 503 naming them, while /readyz scoped to listeners or clusters
	// (what load balancers check) stays 200 when those listeners can serve,
	// and says it is degraded. May be nil.
	Degraded func() error
	// Listeners reports what each proxy listener of this process can
	// serve (proxy.Server.Health); /readyz, /primary and /replica are
	// built from it (health.go). May be nil: a process without a proxy has
	// no listeners, /readyz then checks Ready only and /primary, /replica
	// answer 503.
	Listeners func() []proxy.ListenerHealth
	// Pprof serves net/http/pprof's handlers under /debug/pprof/ (config
	// admin.pprof).
	Pprof bool
	// Store and Keys are the topology store the API reads and changes
	// through. A nil Store: the API's store endpoints answer 503.
	Store topo.Store
	Keys  topo.Keys
	// Tokens are admin.tokens: their secrets are resolved at Start and
	// only their SHA-256 is kept. None: the API needs no token on a
	// loopback Address and refuses every call on any other.
	Tokens []config.AdminToken
	// TLS is admin.tls: HTTPS with this certificate, read again when its
	// files change and on ReloadTLS.
	TLS config.AdminTLS
	// MetricsAuth makes /metrics need a token (any role).
	MetricsAuth bool
	// Sessions is the proxy of this process, for /api/v1/sessions; nil in
	// a controller-only process.
	Sessions Sessions
	Log      *slog.Logger
}

// Server is a running admin endpoint.
type Server struct {
	srv   *http.Server
	ln    net.Listener
	api   *api
	certs *certReloader
}

// Start listens on o.Address and serves in the background. The error names
// the address when it cannot listen, and the field when a token's secret
// or the certificate cannot be read.
func Start(o Options) (*Server, error) {
	s := &Server{}
	if o.TLS.Enabled() {
		certs, err := newCertReloader(o.TLS, o.Log)
		if err != nil {
			return nil, err
		}
		s.certs = certs
	}
	mux := http.NewServeMux()
	a, err := newAPI(o, mux)
	if err != nil {
		return nil, err
	}
	s.api = a
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if o.Healthy != nil {
			if err := o.Healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	healthHandlers(mux, o)
	if o.Gatherer != nil {
		metrics := promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			if o.MetricsAuth {
				if _, e := a.auth.identify(r); e != nil {
					writeError(w, e)
					return
				}
			}
			metrics.ServeHTTP(w, r)
		})
	}
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	// The web console: its page at / and its assets under /console/ (only
	// those paths, so that an API path not served here stays 404).
	ui := console.Handler()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /console", ui)
	mux.Handle("GET /console/", ui)
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s (config admin.address): %w", o.Address, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	serve := func() error { return s.srv.Serve(ln) }
	if s.certs != nil {
		s.srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.getCertificate}
		serve = func() error { return s.srv.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && o.Log != nil {
			o.Log.Error("admin server stopped", "address", o.Address, "err", err)
		}
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// TLS reports whether the endpoint serves HTTPS.
func (s *Server) TLS() bool { return s.certs != nil }

// ReloadTLS reads the certificate files again (SIGHUP); on error the
// previous certificate stays in use. A no-op without admin.tls.
func (s *Server) ReloadTLS() error {
	if s.certs == nil {
		return nil
	}
	return s.certs.Reload()
}

// Close stops the server, waiting up to 2 s for requests in flight (event
// streams are cut).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return s.srv.Close()
	}
	return err
}
