package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/configstore"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// The admin API v1 (api/openapi.yaml describes every route): JSON in and
// out under /api/v1, bearer tokens with roles viewer (every GET and the
// plan POSTs, which change nothing) and
// operator (everything), errors as {"error", "code", "override"}. The
// actions call the same functions as the command line (internal/controller,
// internal/configstore), with the token's name as the actor.

// Error codes of the API (the "code" of an error body).
const (
	codeBadRequest   = "bad_request"
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeNotFound     = "not_found"
	codeRefused      = "refused"
	codeConflict     = "conflict"
	codeUnavailable  = "unavailable"
)

// anonymous is the actor of calls made without a token, when the API
// accepts them (no admin.tokens, loopback address).
const anonymous = "anonymous"

// Sessions is what the admin API needs of the proxy of this process
// (proxy.Server).
type Sessions interface {
	Sessions() []proxy.SessionInfo
	KillSession(id string, queryOnly bool) (string, error)
}

// apiError is an error answer.
type apiError struct {
	status   int
	code     string
	msg      string
	override string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf(format, args...)}
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]string{"error": e.msg, "code": e.code}
	if e.override != "" {
		body["override"] = e.override
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
	}
	writeJSONStatus(w, e.status, body)
}

// principal is who makes a call.
type principal struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Auth is false when the call was accepted without a token.
	Auth bool `json:"auth"`
}

type tokenHash struct {
	name, role string
	sum        [sha256.Size]byte
	expires    time.Time // zero: never
}

// authenticator checks bearer tokens against their SHA-256 (the only form
// kept in memory), in constant time, and refuses a token past its expiry.
type authenticator struct {
	tokens []tokenHash
	now    func() time.Time
	// open: no tokens and a loopback address, every call is accepted.
	open bool
}

func newAuthenticator(tokens []config.AdminToken, address string) (*authenticator, error) {
	a := &authenticator{now: time.Now}
	for i, t := range tokens {
		f := fmt.Sprintf("admin.tokens[%d]", i)
		sum, err := t.SHA256(f)
		if err != nil {
			return nil, err
		}
		exp, err := t.ExpiresAt()
		if err != nil {
			return nil, &config.FieldError{Field: f + ".expires", Msg: err.Error()}
		}
		a.tokens = append(a.tokens, tokenHash{name: t.Name, role: t.Role, sum: sum, expires: exp})
	}
	a.open = len(a.tokens) == 0 && config.IsLoopback(address)
	return a, nil
}

// identify returns the caller of r, or the 401 to answer.
func (a *authenticator) identify(r *http.Request) (principal, *apiError) {
	h := r.Header.Get("Authorization")
	if len(a.tokens) == 0 {
		if a.open {
			return principal{Name: anonymous, Role: config.RoleOperator}, nil
		}
		return principal{}, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized,
			msg: "no admin.tokens are configured and admin.address is not a loopback address: the API refuses every call; configure admin.tokens"}
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return principal{}, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized,
			msg: "missing token: send the header Authorization: Bearer <token> (admin.tokens)"}
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	found := -1
	for i := range a.tokens {
		// Every token is compared, so the time does not tell which matched.
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "invalid token (not one of admin.tokens)"}
	}
	t := a.tokens[found]
	if !t.expires.IsZero() && !a.now().Before(t.expires) {
		return principal{}, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized,
			msg: fmt.Sprintf("token %q expired at %s (admin.tokens expires)", t.name, t.expires.UTC().Format(time.RFC3339))}
	}
	return principal{Name: t.name, Role: t.role, Auth: true}, nil
}

// allows reports whether role may call method; readOnly marks a POST
// that changes nothing (a plan), which a viewer may call too.
func allows(role, method string, readOnly bool) bool {
	if role == config.RoleOperator {
		return true
	}
	return role == config.RoleViewer && (readOnly || method == http.MethodGet || method == http.MethodHead)
}

// route is one registered API route, for the OpenAPI check.
type route struct{ Method, Path string }

type api struct {
	o     Options
	auth  *authenticator
	mux   *http.ServeMux
	mu    sync.Mutex
	last  map[string]any // last status document read, served as stale when the store is down
	lastT time.Time

	routes []route
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p principal) (any, *apiError)

// handle registers method path; a mutating method needs the operator role.
// A handler returns the document to answer with 200, or an error.
func (a *api) handle(method, path string, h handlerFunc) {
	a.register(method, path, false, h)
}

// handleReadOnly registers a POST that changes nothing (a plan): role
// viewer may call it like a GET.
func (a *api) handleReadOnly(method, path string, h handlerFunc) {
	a.register(method, path, true, h)
}

func (a *api) register(method, path string, readOnly bool, h handlerFunc) {
	a.routes = append(a.routes, route{method, path})
	a.mux.HandleFunc(method+" "+path, func(w http.ResponseWriter, r *http.Request) {
		p, e := a.auth.identify(r)
		if e == nil && !allows(p.Role, r.Method, readOnly) {
			e = &apiError{status: http.StatusForbidden, code: codeForbidden,
				msg: fmt.Sprintf("token %q has role %s: %s %s needs role operator", p.Name, p.Role, r.Method, r.URL.Path)}
		}
		if e != nil {
			writeError(w, e)
			return
		}
		doc, e := h(w, r, p)
		if e != nil {
			writeError(w, e)
			return
		}
		if doc != nil {
			status := http.StatusOK
			if acc, ok := doc.(accepted); ok {
				status, doc = http.StatusAccepted, acc.doc
			}
			writeJSONStatus(w, status, doc)
		}
	})
}

// accepted marks a 202 answer.
type accepted struct{ doc any }

// decode reads a JSON body into v; unknown fields are errors naming them.
func decode(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(io.LimitReader(r.Body, 8<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("a JSON body is required")
		}
		return badRequest("body: %v", err)
	}
	return nil
}

// reasonOf checks the reason every change needs.
func reasonOf(reason string) *apiError {
	if strings.TrimSpace(reason) == "" {
		return badRequest("reason: required and non-empty (it is recorded with the change)")
	}
	return nil
}

// storeError maps an error of the store or of an operator call.
func storeError(err error) *apiError {
	switch {
	case errors.Is(err, controller.ErrUnknownCluster), errors.Is(err, controller.ErrUnknownNode), errors.Is(err, topo.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: codeNotFound, msg: err.Error()}
	case errors.Is(err, controller.ErrNoLeader):
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "the topology store did not answer in time: " + err.Error()}
	}
	return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: err.Error()}
}

// refused is a change a safety rule refused (409), with the message the
// command line prints.
func refused(msg, override string) *apiError {
	return &apiError{status: http.StatusConflict, code: codeRefused, msg: msg, override: override}
}

func (a *api) store() (topo.Store, *apiError) {
	if a.o.Store == nil {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "this process has no topology store connection"}
	}
	return a.o.Store, nil
}

func newAPI(o Options, mux *http.ServeMux) (*api, error) {
	auth, err := newAuthenticator(o.Tokens, o.Address)
	if err != nil {
		return nil, err
	}
	a := &api{o: o, auth: auth, mux: mux}
	a.handle("GET", "/api/v1/whoami", func(_ http.ResponseWriter, _ *http.Request, p principal) (any, *apiError) { return p, nil })
	a.handle("GET", "/api/v1/status", a.status)
	a.handle("GET", "/api/status", a.status)
	a.handle("GET", "/api/v1/events", a.events)
	a.handle("GET", "/api/v1/events/stream", a.eventStream)
	a.handleReadOnly("POST", "/api/v1/clusters/{c}/switchover/plan", a.switchoverPlan)
	a.handle("POST", "/api/v1/clusters/{c}/switchover", a.switchover)
	a.handle("GET", "/api/v1/clusters/{c}/operations/{id}", a.operation)
	a.handleReadOnly("POST", "/api/v1/clusters/{c}/failover/plan", a.failoverPlan)
	a.handle("POST", "/api/v1/clusters/{c}/failover", a.failover)
	a.handle("POST", "/api/v1/clusters/{c}/nodes/{n}/drain", a.drain)
	a.handle("POST", "/api/v1/clusters/{c}/nodes/{n}/undrain", a.undrain)
	a.handle("POST", "/api/v1/clusters/{c}/maintenance", a.maintenance)
	a.handle("POST", "/api/v1/clusters/{c}/nodes/{n}/maintenance", a.maintenance)
	a.handle("POST", "/api/v1/clusters/{c}/ack", a.ack)
	a.handle("GET", "/api/v1/config", a.configCurrent)
	a.handle("GET", "/api/v1/config/history", a.configHistory)
	a.handle("GET", "/api/v1/config/revisions/{rev}", a.configRevision)
	a.handle("POST", "/api/v1/config/validate", a.configValidate)
	a.handle("POST", "/api/v1/config/diff", a.configDiff)
	a.handle("POST", "/api/v1/config/apply", a.configApply)
	a.handle("POST", "/api/v1/config/rollback", a.configRollback)
	a.handle("GET", "/api/v1/sessions", a.sessions)
	a.handle("POST", "/api/v1/sessions/{id}/kill", a.killSession)
	// Unknown /api/v1 paths answer in the API's error format.
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: fmt.Sprintf("no API endpoint %s %s (see api/openapi.yaml)", r.Method, r.URL.Path)})
	})
	return a, nil
}

// status is the document of `switchyard status --json` plus stale,
// store_reachable and generated_at. When the store does not answer, the
// last document read is served with stale true (503 when there is none).
func (a *api) status(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	if a.o.Status == nil {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "this process has no topology store connection"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	doc, err := a.o.Status(ctx)
	now := time.Now().UTC()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		if a.last == nil {
			return nil, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "topology store unreachable: " + err.Error()}
		}
		out := make(map[string]any, len(a.last)+4)
		for k, v := range a.last {
			out[k] = v
		}
		out["stale"], out["store_reachable"], out["generated_at"] = true, false, a.lastT.Format(time.RFC3339)
		out["store_error"] = err.Error()
		return out, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, code: codeUnavailable, msg: err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, code: codeUnavailable, msg: err.Error()}
	}
	a.last, a.lastT = m, now
	out := make(map[string]any, len(m)+3)
	for k, v := range m {
		out[k] = v
	}
	out["stale"], out["store_reachable"], out["generated_at"] = false, true, now.Format(time.RFC3339)
	return out, nil
}

// events lists events newest first: of one cluster, or of every cluster.
func (a *api) events(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return nil, badRequest("limit: %q is not a number from 1 to 1000", s)
		}
		limit = n
	}
	prefix := a.o.Keys.EventsPrefix()
	if c := q.Get("cluster"); c != "" {
		prefix = a.o.Keys.Events(c)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	kvs, err := st.List(ctx, prefix)
	if err != nil {
		return nil, storeError(err)
	}
	evs := make([]topo.Event, 0, len(kvs))
	for _, kv := range kvs {
		if ev, err := topo.DecodeEvent(kv.Value); err == nil {
			evs = append(evs, ev)
		}
	}
	// Newest first; ids sort by time within a writer, the time across.
	sort.SliceStable(evs, func(i, j int) bool {
		if !evs[i].At.Equal(evs[j].At) {
			return evs[i].At.After(evs[j].At)
		}
		return evs[i].ID > evs[j].ID
	})
	if before := q.Get("before"); before != "" {
		i := slices.IndexFunc(evs, func(ev topo.Event) bool { return ev.ID == before })
		if i < 0 {
			return nil, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: fmt.Sprintf("before: no event %q (it may have been trimmed)", before)}
		}
		evs = evs[i+1:]
	}
	next := ""
	if len(evs) > limit {
		evs = evs[:limit]
		next = evs[limit-1].ID
	}
	return map[string]any{"events": evs, "next": next}, nil
}

// ssePing is how often the event stream sends a comment, so that proxies
// and browsers keep it open.
var ssePing = 15 * time.Second

// eventStream sends every new event as a server-sent event.
func (a *api) eventStream(w http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil, &apiError{status: http.StatusInternalServerError, code: codeUnavailable, msg: "streaming is not supported by this connection"}
	}
	prefix := a.o.Keys.EventsPrefix()
	if c := r.URL.Query().Get("cluster"); c != "" {
		prefix = a.o.Keys.Events(c)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	_, ch, err := st.Watch(ctx, prefix)
	if err != nil {
		return nil, storeError(err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	fl.Flush()
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return nil, nil
			}
			fl.Flush()
		case ev, ok := <-ch:
			if !ok {
				return nil, nil
			}
			if ev.Err != nil {
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(map[string]string{"error": ev.Err.Error()}))
				fl.Flush()
				return nil, nil
			}
			if ev.Type != topo.EventPut {
				continue
			}
			te, err := topo.DecodeEvent(ev.KV.Value)
			if err != nil {
				continue
			}
			if _, err := fmt.Fprintf(w, "event: event\ndata: %s\n\n", mustJSON(te)); err != nil {
				return nil, nil
			}
			fl.Flush()
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

type switchoverBody struct {
	Target      string `json:"target"`
	Reason      string `json:"reason"`
	Force       bool   `json:"force"`
	Warm        bool   `json:"warm"`
	RequireWarm bool   `json:"require_warm"`
}

func (a *api) switchoverPlan(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Target string `json:"target"`
	}
	if r.ContentLength != 0 {
		if e := decode(r, &b); e != nil {
			return nil, e
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	plan, err := controller.PlanSwitchover(ctx, st, a.o.Keys, r.PathValue("c"), b.Target)
	if err != nil {
		return nil, storeError(err)
	}
	return map[string]any{"ok": len(plan.Refusals) == 0, "plan": plan, "refusals": plan.Refusals}, nil
}

// switchover hands a switchover to the controller leader and answers 202
// with the operation to follow. Unless force, a plan that the published
// state already refuses is 409 with its reasons (the leader checks again
// with fresh probes either way).
func (a *api) switchover(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b switchoverBody
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	c := r.PathValue("c")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if !b.Force {
		plan, err := controller.PlanSwitchover(ctx, st, a.o.Keys, c, b.Target)
		if err != nil {
			return nil, storeError(err)
		}
		if len(plan.Refusals) > 0 {
			return nil, refused("switchover refused: "+strings.Join(plan.Refusals, "; "), "force")
		}
	}
	req := controller.SwitchoverRequest(c, controller.SwitchoverOptions{Target: b.Target, Warm: b.Warm, RequireWarm: b.RequireWarm, By: p.Name})
	req.Reason = b.Reason
	req, err := controller.Enqueue(ctx, st, a.o.Keys, req)
	if err != nil {
		return nil, storeError(err)
	}
	return accepted{operationDoc(c, req)}, nil
}

func operationDoc(cluster string, req topo.Request) map[string]any {
	return map[string]any{"id": req.ID, "status_url": "/api/v1/clusters/" + cluster + "/operations/" + req.ID, "state": req.State}
}

func (a *api) operation(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	req, err := controller.LookupRequest(ctx, st, a.o.Keys, r.PathValue("c"), r.PathValue("id"))
	if err != nil {
		return nil, storeError(err)
	}
	return req, nil
}

type failoverBody struct {
	Target string `json:"target"`
	Reason string `json:"reason"`
	// ForceStale and Force are the command line's --force-stale and
	// --force.
	ForceStale bool `json:"force_stale"`
	Force      bool `json:"force"`
}

func (a *api) failoverPlan(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Target string `json:"target"`
	}
	if r.ContentLength != 0 {
		if e := decode(r, &b); e != nil {
			return nil, e
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	req, err := controller.RequestFailover(ctx, st, a.o.Keys, r.PathValue("c"), controller.FailoverOptions{Target: b.Target, PlanOnly: true, By: p.Name})
	if err != nil && req.Plan == nil {
		if req.Message != "" {
			return nil, refused("failover plan: "+req.Message, "")
		}
		return nil, storeError(err)
	}
	refusals := controller.FailoverPlanRefusals(req.Plan, false)
	if (req.Plan == nil || req.Plan.Candidate == "") && len(refusals) == 0 {
		refusals = append(refusals, orText(req.Message, "no candidate"))
	}
	return map[string]any{"ok": len(refusals) == 0, "plan": req.Plan, "refusals": refusals}, nil
}

func (a *api) failover(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b failoverBody
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	c := r.PathValue("c")
	req, err := controller.FailoverRequest(c, controller.FailoverOptions{Target: b.Target, Force: b.ForceStale, ForceReachable: b.Force, Reason: b.Reason, By: p.Name})
	if err != nil {
		return nil, badRequest("%v", err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if req, err = controller.Enqueue(ctx, st, a.o.Keys, req); err != nil {
		return nil, storeError(err)
	}
	return accepted{operationDoc(c, req)}, nil
}

// record writes an operator event for a change that does not go through
// the leader; a failure is logged, the change stands.
func (a *api) record(ctx context.Context, p principal, ev topo.Event) {
	ev.Actor = p.Name
	if err := controller.RecordEvent(ctx, a.o.Store, a.o.Keys, "admin-api", ev); err != nil && a.o.Log != nil {
		a.o.Log.Warn("cannot record the change in the event log", "cluster", ev.Cluster, "code", ev.Code, "err", err)
	}
}

func (a *api) drain(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	c, n := r.PathValue("c"), r.PathValue("n")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	res, err := controller.Drain(ctx, st, a.o.Keys, c, n, controller.DrainOptions{By: p.Name, Reason: b.Reason})
	if err != nil {
		return nil, drainError(err)
	}
	return map[string]any{"ok": true, "result": res}, nil
}

// drainError maps a drain or undrain failure: an unknown cluster or node
// as the store reports it (404), anything else a refusal (409).
func drainError(err error) *apiError {
	if errors.Is(err, controller.ErrUnknownCluster) || errors.Is(err, controller.ErrUnknownNode) || errors.Is(err, topo.ErrNotFound) {
		return storeError(err)
	}
	return refused(err.Error(), "")
}

func (a *api) undrain(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	c, n := r.PathValue("c"), r.PathValue("n")
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	was, err := controller.UndrainBy(ctx, st, a.o.Keys, c, n, p.Name, b.Reason)
	if err != nil {
		return nil, drainError(err)
	}
	msg := fmt.Sprintf("%s was not drained", n)
	if was {
		msg = fmt.Sprintf("%s undrained: it serves reads again once the controller sees it replicating, and may be promoted", n)
	}
	return map[string]any{"ok": true, "was_drained": was, "message": msg}, nil
}

func (a *api) maintenance(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		On      *bool  `json:"on"`
		Reason  string `json:"reason"`
		For     string `json:"for"`
		Replace bool   `json:"replace"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if b.On == nil {
		return nil, badRequest("on: required (true turns maintenance on, false off)")
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	var dur time.Duration
	if b.For != "" {
		d, err := time.ParseDuration(b.For)
		if err != nil || d <= 0 {
			return nil, badRequest("for: %q is not a positive duration such as 30m or 2h", b.For)
		}
		dur = d
	}
	if !*b.On && (dur != 0 || b.Replace) {
		return nil, badRequest("for, replace: apply to on only")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := controller.RequestMaintenance(ctx, st, a.o.Keys, r.PathValue("c"), controller.MaintenanceOptions{
		On: *b.On, Node: r.PathValue("n"), Reason: b.Reason, For: dur, Replace: b.Replace, By: p.Name})
	if err != nil {
		if req.Message != "" {
			override := ""
			if strings.Contains(req.Message, "replace") {
				override = "replace"
			}
			return nil, refused("maintenance: "+req.Message, override)
		}
		return nil, storeError(err)
	}
	return map[string]any{"ok": true, "message": req.Message, "request": req}, nil
}

func (a *api) ack(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Finding    string `json:"finding"`
		Reason     string `json:"reason"`
		ResetFloor bool   `json:"reset_floor"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	reason := b.Reason
	if b.Finding != "" {
		reason = "finding " + b.Finding + ": " + reason
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var req topo.Request
	var err error
	if b.ResetFloor {
		req, err = controller.RequestFloorReset(ctx, st, a.o.Keys, r.PathValue("c"), reason, p.Name)
	} else {
		req, err = controller.RequestAck(ctx, st, a.o.Keys, r.PathValue("c"), reason, p.Name)
	}
	if err != nil {
		if req.Message != "" {
			return nil, refused(req.Message, "")
		}
		return nil, storeError(err)
	}
	return map[string]any{"ok": true, "message": req.Message}, nil
}

func redacted(y string) string {
	out, err := configstore.RedactYAML([]byte(y))
	if err != nil {
		return ""
	}
	return string(out)
}

func (a *api) configCurrent(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rev, _, s, err := configstore.Current(ctx, st, a.o.Keys)
	if err != nil {
		return nil, storeError(err)
	}
	doc := map[string]any{"revision": rev.Rev, "yaml": redacted(rev.YAML), "applied_by": rev.Author, "at": rev.Time,
		"reason": rev.Reason, "sha256": rev.SHA256, "source": rev.Source}
	if s != nil && s.CurrentErr != nil {
		doc["current_error"] = s.CurrentErr.Error()
	}
	return doc, nil
}

func (a *api) configHistory(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, badRequest("limit: %q is not a positive number", s)
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	s, err := configstore.Load(ctx, st, a.o.Keys)
	if err != nil {
		return nil, storeError(err)
	}
	revs := []map[string]any{}
	for i := len(s.History) - 1; i >= 0; i-- {
		h := s.History[i]
		revs = append(revs, map[string]any{"revision": h.Rev, "actor": h.Author, "reason": h.Reason, "at": h.Time,
			"guard_overridden": h.GuardOverridden, "source": h.Source, "sha256": h.SHA256})
		if h.Refused != "" {
			revs[len(revs)-1]["refused"] = h.Refused
		}
		if limit > 0 && len(revs) == limit {
			break
		}
	}
	return map[string]any{"revisions": revs}, nil
}

func (a *api) configRevision(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	n, err := strconv.ParseInt(r.PathValue("rev"), 10, 64)
	if err != nil || n < 1 {
		return nil, badRequest("rev: %q is not a revision number", r.PathValue("rev"))
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rev, _, err := configstore.Get(ctx, st, a.o.Keys, n)
	if err != nil {
		return nil, storeError(err)
	}
	return map[string]any{"revision": rev.Rev, "yaml": redacted(rev.YAML), "actor": rev.Author, "reason": rev.Reason, "at": rev.Time}, nil
}

// parseConfig parses and validates a YAML document as `config validate`
// does: the errors one per field, the warnings (secrets not resolvable
// here, unsafe admin settings).
func parseConfig(y string) (*config.Config, []string, []string) {
	c, err := config.Parse([]byte(y))
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		return nil, splitErrors(err), []string{}
	}
	warnings := []string{}
	if serr := c.CheckSecrets(); serr != nil {
		for _, s := range splitErrors(serr) {
			warnings = append(warnings, "secret cannot be resolved where the admin endpoint runs: "+s)
		}
	}
	warnings = append(warnings, c.AdminWarnings()...)
	return c, []string{}, warnings
}

func splitErrors(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, splitErrors(e)...)
		}
		return out
	}
	for _, l := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

type yamlBody struct {
	YAML string `json:"yaml"`
}

func (a *api) configValidate(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	var b yamlBody
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	_, errs, warnings := parseConfig(b.YAML)
	return map[string]any{"valid": len(errs) == 0, "errors": errs, "warnings": warnings}, nil
}

func violations(vs []config.Violation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

func pendingRestart(d config.Diff) []string {
	if ro := d.RestartOnly(); ro != nil {
		return ro
	}
	return []string{}
}

func (a *api) configDiff(_ http.ResponseWriter, r *http.Request, _ principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b yamlBody
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	cfg, errs, _ := parseConfig(b.YAML)
	if cfg == nil {
		return nil, badRequest("yaml: %s", strings.Join(errs, "; "))
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := configstore.Apply(ctx, st, a.o.Keys, configstore.Change{Config: cfg, DryRun: true})
	if err != nil {
		return nil, storeError(err)
	}
	doc := map[string]any{"diff": res.Diff.String(), "pending_restart": pendingRestart(res.Diff), "destructive": len(res.Violations) > 0,
		"refusals": violations(res.Violations), "unchanged": res.Unchanged}
	if res.Previous != nil {
		doc["base_revision"] = res.Previous.Rev
	}
	return doc, nil
}

// changeResult answers an apply or a rollback.
func changeResult(res *configstore.Result, err error) (any, *apiError) {
	var ref *configstore.RefusedError
	switch {
	case errors.As(err, &ref):
		return nil, refused(strings.TrimPrefix(err.Error(), "configstore: "), "override_guard")
	case errors.Is(err, configstore.ErrConflict):
		return nil, &apiError{status: http.StatusConflict, code: codeConflict, msg: err.Error() + " (read GET /api/v1/config again and diff against it)"}
	case errors.Is(err, topo.ErrNotFound):
		return nil, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: err.Error()}
	case err != nil:
		return nil, storeError(err)
	}
	doc := map[string]any{"revision": res.Revision.Rev, "unchanged": res.Unchanged, "diff": res.Diff.String(),
		"pending_restart": pendingRestart(res.Diff), "guard_overridden": res.Revision.GuardOverridden, "warnings": res.Warnings}
	if res.Warnings == nil {
		doc["warnings"] = []string{}
	}
	return doc, nil
}

func (a *api) configApply(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		YAML          string `json:"yaml"`
		BaseRevision  int64  `json:"base_revision"`
		Reason        string `json:"reason"`
		OverrideGuard bool   `json:"override_guard"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	cfg, errs, _ := parseConfig(b.YAML)
	if cfg == nil {
		return nil, badRequest("yaml: %s", strings.Join(errs, "; "))
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := configstore.Apply(ctx, st, a.o.Keys, configstore.Change{Config: cfg, Reason: b.Reason, Author: p.Name,
		Source: configstore.SourceApply, AllowDestructive: b.OverrideGuard, ExpectRev: b.BaseRevision,
		OverrideHint: `to apply it anyway: send "override_guard": true with the reason (the override and its reason are recorded in the history)`})
	return changeResult(res, err)
}

func (a *api) configRollback(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	var b struct {
		Revision      int64  `json:"revision"`
		Reason        string `json:"reason"`
		OverrideGuard bool   `json:"override_guard"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if b.Revision < 1 {
		return nil, badRequest("revision: required, the revision to restore (GET /api/v1/config/history)")
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := configstore.Rollback(ctx, st, a.o.Keys, b.Revision, configstore.Change{Reason: b.Reason, Author: p.Name,
		AllowDestructive: b.OverrideGuard,
		OverrideHint:     `to roll back anyway: send "override_guard": true with the reason (the override and its reason are recorded in the history)`})
	return changeResult(res, err)
}

func (a *api) sessions(_ http.ResponseWriter, _ *http.Request, _ principal) (any, *apiError) {
	if a.o.Sessions == nil {
		return map[string]any{"sessions": []proxy.SessionInfo{}, "proxy": false}, nil
	}
	return map[string]any{"sessions": a.o.Sessions.Sessions(), "proxy": true}, nil
}

func (a *api) killSession(_ http.ResponseWriter, r *http.Request, p principal) (any, *apiError) {
	var b struct {
		Reason    string `json:"reason"`
		QueryOnly bool   `json:"query_only"`
	}
	if e := decode(r, &b); e != nil {
		return nil, e
	}
	if e := reasonOf(b.Reason); e != nil {
		return nil, e
	}
	id := r.PathValue("id")
	if a.o.Sessions == nil {
		return nil, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: fmt.Sprintf("session %s: this process runs no proxy", id)}
	}
	var cluster, user string
	for _, s := range a.o.Sessions.Sessions() {
		if s.ID == id {
			cluster, user = s.Cluster, s.User
		}
	}
	msg, err := a.o.Sessions.KillSession(id, b.QueryOnly)
	if errors.Is(err, proxy.ErrNoSession) {
		return nil, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: err.Error()}
	}
	if err != nil {
		return nil, refused(err.Error(), "")
	}
	if a.o.Log != nil {
		a.o.Log.Info("session killed through the admin API", "session", id, "user", user, "query_only", b.QueryOnly, "actor", p.Name, "reason", b.Reason, "result", msg)
	}
	if cluster != "" && a.o.Store != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		what := "session"
		if b.QueryOnly {
			what = "statement of session"
		}
		a.record(ctx, p, topo.Event{Cluster: cluster, Code: "session_kill",
			Message: fmt.Sprintf("%s %s (user %s) killed by %s: %s; %s", what, id, user, p.Name, b.Reason, msg)})
	}
	return map[string]any{"ok": true, "message": msg}, nil
}
