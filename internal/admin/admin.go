package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-db/switchyard/internal/console"
	"github.com/switchyard-db/switchyard/internal/proxy"
)

// Options configure the admin server.
type Options struct {
	// Address is host:port to listen on.
	Address string
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Status returns the document served at /api/status (marshalled as JSON).
	// May be nil.
	Status func(ctx context.Context) (any, error)
	// Healthy reports liveness problems for /healthz; nil error = healthy.
	// May be nil (always healthy).
	Healthy func() error
	// Ready reports readiness for /readyz (503 with the reason when not
	// ready, e.g. the store unreachable). May be nil (/readyz then answers
	// like /healthz for the process part).
	Ready func() error
	// Listeners reports what each proxy listener of this process can
	// serve (proxy.Server.Health); /readyz, /primary and /replica are
	// built from it (health.go). May be nil: a process without a proxy has
	// no listeners, /readyz then checks Ready only and /primary, /replica
	// answer 503.
	Listeners func() []proxy.ListenerHealth
	// Pprof serves net/http/pprof's handlers under /debug/pprof/ (config
	// admin.pprof).
	Pprof bool
	Log   *slog.Logger
}

// Server is a running admin endpoint.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Start listens on o.Address and serves in the background. The error names
// the address when it cannot listen.
func Start(o Options) (*Server, error) {
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s (config admin.address): %w", o.Address, err)
	}
	mux := http.NewServeMux()
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
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	if o.Status != nil {
		mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			defer cancel()
			doc, err := o.Status(ctx)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(doc)
		})
	}
	// The web console: its page at / and its assets under /console/ (only
	// those paths, so that an API path not served here stays 404).
	ui := console.Handler()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /console", ui)
	mux.Handle("GET /console/", ui)
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && o.Log != nil {
			o.Log.Error("admin server stopped", "address", o.Address, "err", err)
		}
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, waiting up to 2 s for requests in flight.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
