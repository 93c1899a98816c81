package admin

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/switchyard-db/switchyard/internal/proxy"
)

// Health endpoints for load balancers and orchestrators, after Patroni's
// REST API (/primary, /replica, /health): each answers 200 with a line per
// listener when the condition holds and 503 with the reason when it does
// not. GET, HEAD and OPTIONS are accepted (HAProxy's `option httpchk`
// sends OPTIONS unless told otherwise).
//
//	/healthz                    liveness: 200 while the process runs (Options.Healthy)
//	/readyz                     200 when Options.Ready and Options.Degraded pass and every listener can serve
//	/readyz?listener=rw         Options.Ready and listener rw only (repeatable): a degraded process whose
//	                            listener serves from its last routing state (failsafe) is ready
//	/readyz?cluster=main        the same for the listeners of cluster main only
//	/readyz/listener/{name}     path form of ?listener=
//	/readyz/cluster/{name}      path form of ?cluster=
//	/primary[?cluster=main]     200 only when this process routes a reachable primary
//	/replica[?cluster=main]     200 only when a replica listener has a serving replica
//
// A listener can serve when its route has what its role needs
// (proxy.ListenerHealth.Problem empty): a primary listener a reachable
// primary, not fenced; a replica listener a serving replica or a primary to
// fall back on. An unknown listener or cluster name is 404 naming it.

func allowed(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	w.Header().Set("Allow", "GET, HEAD, OPTIONS")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// selectListeners returns the entries of all that match the listener and
// cluster names (empty: every one), or an error naming the unknown name.
func selectListeners(all []proxy.ListenerHealth, listeners, clusters []string) ([]proxy.ListenerHealth, error) {
	for _, name := range listeners {
		if !hasListener(all, func(h proxy.ListenerHealth) bool { return h.Listener == name }) {
			return nil, fmt.Errorf("no listener %q in this process (listeners[].name)", name)
		}
	}
	for _, name := range clusters {
		if !hasListener(all, func(h proxy.ListenerHealth) bool { return h.Cluster == name }) {
			return nil, fmt.Errorf("no listener of cluster %q in this process (listeners[].cluster)", name)
		}
	}
	var out []proxy.ListenerHealth
	for _, h := range all {
		if len(listeners) > 0 && !contains(listeners, h.Listener) {
			continue
		}
		if len(clusters) > 0 && !contains(clusters, h.Cluster) {
			continue
		}
		out = append(out, h)
	}
	return out, nil
}

func hasListener(all []proxy.ListenerHealth, ok func(proxy.ListenerHealth) bool) bool {
	for _, h := range all {
		if ok(h) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// describe is the one-line answer for a listener.
func describe(h proxy.ListenerHealth) string {
	if h.Problem != "" {
		return h.Problem
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listener %q (cluster %s, role %s, epoch %d)", h.Listener, h.Cluster, h.Role, h.Epoch)
	if h.PrimaryOK {
		fmt.Fprintf(&b, ": primary %s", h.Primary)
	}
	fmt.Fprintf(&b, ", %d serving replica(s)", h.Replicas)
	return b.String()
}

// healthHandlers registers the readiness and role endpoints on mux.
func healthHandlers(mux *http.ServeMux, o Options) {
	listeners := func() []proxy.ListenerHealth {
		if o.Listeners == nil {
			return nil
		}
		return o.Listeners()
	}
	ready := func(w http.ResponseWriter, r *http.Request, names, clusters []string) {
		if !allowed(w, r) {
			return
		}
		check := o.Ready
		if check == nil {
			check = o.Healthy
		}
		if check != nil {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		var degraded error
		if o.Degraded != nil {
			degraded = o.Degraded()
		}
		// The whole process is not ready while a part is down; a listener
		// (or a cluster's listeners) serving from its last routing state
		// is — a load balancer checking it must not take every proxy out
		// while the store is down and they serve (failsafe).
		if degraded != nil && len(names) == 0 && len(clusters) == 0 {
			http.Error(w, degraded.Error(), http.StatusServiceUnavailable)
			return
		}
		sel, err := selectListeners(listeners(), names, clusters)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var bad, good []string
		for _, h := range sel {
			if h.Problem != "" {
				bad = append(bad, h.Problem)
			} else {
				good = append(good, describe(h))
			}
		}
		if len(bad) > 0 {
			http.Error(w, "not ready: "+strings.Join(bad, "; "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		for _, g := range good {
			fmt.Fprintln(w, g)
		}
		if degraded != nil {
			fmt.Fprintf(w, "degraded, serving from the last routing state: %s\n", strings.ReplaceAll(degraded.Error(), "\n", "; "))
		}
	}
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ready(w, r, q["listener"], q["cluster"])
	})
	mux.HandleFunc("/readyz/listener/{name}", func(w http.ResponseWriter, r *http.Request) {
		ready(w, r, []string{r.PathValue("name")}, nil)
	})
	mux.HandleFunc("/readyz/cluster/{name}", func(w http.ResponseWriter, r *http.Request) {
		ready(w, r, nil, []string{r.PathValue("name")})
	})
	role := func(role string, ok func(proxy.ListenerHealth) bool, none string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !allowed(w, r) {
				return
			}
			sel, err := selectListeners(listeners(), nil, r.URL.Query()["cluster"])
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			var good, bad []string
			for _, h := range sel {
				if h.Role != role {
					continue
				}
				if ok(h) {
					good = append(good, describe(h))
				} else {
					bad = append(bad, orText(h.Problem, describe(h)))
				}
			}
			if len(good) == 0 {
				msg := none
				if len(bad) > 0 {
					msg += ": " + strings.Join(bad, "; ")
				}
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
			for _, g := range good {
				fmt.Fprintln(w, g)
			}
		}
	}
	mux.HandleFunc("/primary", role("primary", func(h proxy.ListenerHealth) bool { return h.PrimaryOK },
		"this process routes no reachable primary"))
	mux.HandleFunc("/replica", role("replica", func(h proxy.ListenerHealth) bool { return h.Replicas > 0 },
		"this process routes no serving replica"))
}

func orText(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
