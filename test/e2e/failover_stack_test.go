package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/controller"
	"github.com/switchyard-db/switchyard/internal/loadgen"
	"github.com/switchyard-db/switchyard/internal/proxy"
	"github.com/switchyard-db/switchyard/internal/sandbox"
	"github.com/switchyard-db/switchyard/internal/sandbox/sandboxtest"
	"github.com/switchyard-db/switchyard/internal/topo"
	"github.com/switchyard-db/switchyard/internal/topo/topotest"
)

// foInterval is the probe interval of the failover scenarios.
const foInterval = 250 * time.Millisecond

// foOpts configure a failover scenario stack.
type foOpts struct {
	// SemiSync enables semi-synchronous replication (AFTER_SYNC).
	SemiSync bool
	// Mode is failover.mode ("auto" unless set).
	Mode string
	// Proxies is the number of proxies (default 1).
	Proxies int
	// NetNS runs every node in its own network namespace (see netLab).
	NetNS bool
	// Mutate edits the config before start.
	Mutate func(*config.Config)
	// ProxyEtcd, when set, gives proxy i the etcd endpoints to use (e.g.
	// through a relay that can be cut).
	ProxyEtcd func(i int, endpoints []string) []string
	// Registry, when set, receives the controller's metrics.
	Registry prometheus.Registerer
	// ProxyRegistry, when set, receives the first proxy's metrics.
	ProxyRegistry prometheus.Registerer
	// Endpoints, when set, is the etcd to use (e.g. a 3-member cluster)
	// instead of a fresh embedded one.
	Endpoints []string
	// ControllerEtcd, when set, gives the controller the etcd endpoints
	// to use (e.g. through a relay that can be cut).
	ControllerEtcd func(endpoints []string) []string
}

// foStack is a sandbox with etcd, one controller and N proxies in-process,
// each role with its own etcd client.
type foStack struct {
	t         *testing.T
	sb        *sandbox.Cluster
	cfg       *config.Config
	endpoints []string
	store     topo.Store
	keys      topo.Keys
	proxies   []*proxy.Server
	pcfgs     []*config.Config
	lab       *netLab
}

func startFO(t *testing.T, o foOpts) *foStack {
	t.Helper()
	if o.Mode == "" {
		o.Mode = config.FailoverAuto
	}
	if o.Proxies == 0 {
		o.Proxies = 1
	}
	sb := sandboxtest.Start(t, sandbox.Options{Nodes: 3, SemiSync: o.SemiSync})
	s := &foStack{t: t, sb: sb}
	cfg := sb.Config()
	if o.NetNS {
		s.lab = newNetLab(t, sb)
		for i := range cfg.Clusters[0].Nodes {
			cfg.Clusters[0].Nodes[i].Address = s.lab.addr(i)
		}
	}
	s.endpoints = o.Endpoints
	if s.endpoints == nil {
		s.endpoints = topotest.StartEtcd(t)
	}
	s.store = topotest.Connect(t, s.endpoints)
	cfg.Etcd.Endpoints = s.endpoints
	cfg.Probe.Interval = config.Duration(foInterval)
	cfg.Probe.Timeout = config.Duration(200 * time.Millisecond)
	cfg.Proxy.ConnectTimeout = config.Duration(500 * time.Millisecond)
	cfg.Switchover.CatchupTimeout = config.Duration(5 * time.Second)
	cfg.Clusters[0].Failover.Mode = o.Mode
	cfg.Clusters[0].Failover.RecoveryTimeout = config.Duration(20 * time.Second)
	cfg.Admin.Address = "off"
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	if o.Mutate != nil {
		o.Mutate(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config does not validate: %v", err)
	}
	s.cfg = cfg
	s.keys = topo.Keys{Prefix: cfg.Etcd.Prefix}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	log := topotest.Logger(t)
	ceps := s.endpoints
	if o.ControllerEtcd != nil {
		ceps = o.ControllerEtcd(ceps)
	}
	ctrl, err := controller.New(controller.Options{Config: cfg, Store: topotest.Connect(t, ceps), Keys: s.keys,
		ID: "ctrl-1", Log: log.With("role", "controller"), Registry: o.Registry})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctrl.Run(ctx) }()
	for i := 0; i < o.Proxies; i++ {
		pcfg := *cfg
		pcfg.Listeners = append([]config.Listener(nil), cfg.Listeners...)
		// Proxies log at error level only: clients retrying against a dead
		// primary would otherwise log a warning per attempt.
		var preg prometheus.Registerer
		if i == 0 {
			preg = o.ProxyRegistry
		}
		srv, err := proxy.New(proxy.Options{Config: &pcfg, ID: fmt.Sprintf("proxy-%d", i+1), Log: errorLogger(t).With("role", fmt.Sprintf("proxy-%d", i+1)), Registry: preg})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		s.proxies = append(s.proxies, srv)
		s.pcfgs = append(s.pcfgs, &pcfg)
		eps := s.endpoints
		if o.ProxyEtcd != nil {
			eps = o.ProxyEtcd(i, eps)
		}
		pst := topotest.Connect(t, eps)
		wg.Add(1)
		go func() { defer wg.Done(); _ = proxy.Follow(ctx, pst, s.keys, srv) }()
	}
	t.Cleanup(func() {
		cancel()
		for _, p := range s.proxies {
			p.Close()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("controller/proxies did not stop within 15s")
		}
	})
	s.waitState("discovery with every proxy on the epoch", 20*time.Second, func(st topo.ClusterState) bool {
		if st.Primary != "node1" {
			return false
		}
		for _, p := range s.proxies {
			if p.Epochs()["main"] != st.Epoch {
				return false
			}
		}
		for _, n := range st.Nodes {
			if n.Name != "node1" && !n.Serving {
				return false
			}
		}
		return true
	})
	return s
}

func (s *foStack) state() topo.ClusterState {
	s.t.Helper()
	var st topo.ClusterState
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st); err != nil {
		s.t.Fatalf("read cluster state: %v", err)
	}
	return st
}

// waitState polls the published state until ok, returning it and how long
// it took; it fails the test after timeout.
func (s *foStack) waitState(what string, timeout time.Duration, ok func(topo.ClusterState) bool) (topo.ClusterState, time.Duration) {
	s.t.Helper()
	start := time.Now()
	for {
		var st topo.ClusterState
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := topo.GetJSON(ctx, s.store, s.keys.ClusterState("main"), &st)
		cancel()
		if err == nil && ok(st) {
			return st, time.Since(start)
		}
		if time.Since(start) > timeout {
			s.t.Fatalf("%s: not reached within %s (last state: primary %q epoch %d phase %s analysis %+v; err %v)\nevents:\n%s",
				what, timeout, st.Primary, st.Epoch, st.Phase, st.Analysis, err, s.eventText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *foStack) events() []topo.Event {
	s.t.Helper()
	evs, err := controller.ListEvents(context.Background(), s.store, s.keys, "main", 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return evs
}

func (s *foStack) eventText() string {
	var b strings.Builder
	for _, ev := range s.events() {
		fmt.Fprintf(&b, "  %s %-9s %s\n", ev.At.Format("15:04:05.000"), ev.Kind, ev.Message)
	}
	return b.String()
}

// waitEvent waits for an event whose message contains substr.
func (s *foStack) waitEvent(substr string, timeout time.Duration) topo.Event {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, ev := range s.events() {
			if strings.Contains(ev.Message, substr) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no event containing %q within %s; events:\n%s", substr, timeout, s.eventText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failovers counts completed failovers in the event log.
func (s *foStack) failovers() int {
	n := 0
	for _, ev := range s.events() {
		if ev.Code == "failover_done" {
			n++
		}
	}
	return n
}

func (s *foStack) listener(p int, role string) string {
	for _, l := range s.pcfgs[p].Listeners {
		if l.Role == role {
			return s.proxies[p].ListenerAddr(l.Name)
		}
	}
	s.t.Fatalf("no %s listener", role)
	return ""
}

// dsn is an application DSN through proxy p's listener of role.
func (s *foStack) dsn(p int, role string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/sbtest?timeout=1s&readTimeout=10s&writeTimeout=10s", s.sb.AppUser, s.sb.AppPassword, s.listener(p, role))
}

// nodeAddr is node i's address as configured.
func (s *foStack) nodeAddr(i int) string { return s.cfg.Clusters[0].Nodes[i].Address }

// appDirect is an application DSN straight to node i (no proxy).
func (s *foStack) appDirect(i int, timeout time.Duration) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = s.sb.AppUser, s.sb.AppPassword, "tcp", s.nodeAddr(i), "sbtest"
	c.Timeout, c.ReadTimeout, c.WriteTimeout = timeout, timeout, timeout
	return c.FormatDSN()
}

// rootDSN is root's DSN for node i over its unix socket with database db.
func (s *foStack) rootDSN(i int, db string) string {
	c, err := mysql.ParseDSN(s.sb.RootDSN(i))
	if err != nil {
		s.t.Fatal(err)
	}
	c.DBName = db
	return c.FormatDSN()
}

// runCLI runs the switchyard binary against the etcd at endpoint.
func runCLI(ctx context.Context, endpoint string, args ...string) (string, error) {
	all := append([]string{"--etcd-endpoints", endpoint}, args...)
	out, err := exec.CommandContext(ctx, binPath, all...).CombinedOutput()
	return string(out), err
}

// root opens a root connection to node i over its unix socket (works
// whatever the network does).
func (s *foStack) root(i int) *sql.DB {
	s.t.Helper()
	db, err := sql.Open("mysql", s.sb.RootDSN(i))
	if err != nil {
		s.t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	s.t.Cleanup(func() { db.Close() })
	return db
}

func (s *foStack) exec(i int, q string, args ...any) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := s.root(i)
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		s.t.Fatalf("%s on %s: %v", q, s.sb.Nodes[i].Name, err)
	}
	db.Close()
}

// cli runs the switchyard binary against the stack's etcd.
func (s *foStack) cli(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := runCLI(ctx, s.endpoints[0], args...)
	if err != nil {
		s.t.Fatalf("switchyard %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// nodeIdx maps a node name to its index.
func nodeIdx(name string) int {
	var i int
	fmt.Sscanf(name, "node%d", &i)
	return i - 1
}

// workload is the ledger writers and readers (package loadgen) plus the
// id writer, all through proxy 0.
type workload struct {
	s      *foStack
	cancel context.CancelFunc
	resc   chan *loadgen.Result
	ids    *idWriter
}

func (s *foStack) startWorkload(writers int) *workload {
	s.t.Helper()
	ctx := context.Background()
	if err := loadgen.Setup(ctx, s.dsn(0, "primary"), ""); err != nil {
		s.t.Fatal(err)
	}
	ids, err := newIDWriter(ctx, s.dsn(0, "primary"))
	if err != nil {
		s.t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	w := &workload{s: s, cancel: cancel, resc: make(chan *loadgen.Result, 1), ids: ids}
	go func() {
		r, err := loadgen.Run(rctx, loadgen.Options{RW: s.dsn(0, "primary"), RO: s.dsn(0, "replica"), Writers: writers, Readers: 2,
			Interval: 5 * time.Millisecond})
		if err != nil {
			s.t.Error(err)
		}
		w.resc <- r
	}()
	ids.start(rctx)
	return w
}

// stop ends the workload, checks on node final (by a root connection) that
// every acknowledged ledger write and every acknowledged id is there and
// that no id was issued twice, and prints the figures.
func (w *workload) stop(final int) *loadgen.Result {
	s := w.s
	s.t.Helper()
	w.cancel()
	r := <-w.resc
	w.ids.wait()
	var b strings.Builder
	r.Print(&b, "ledger", map[int64]string{1: "node1", 2: "node2", 3: "node3"})
	s.t.Log("\n" + b.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Let the final primary settle: every write it acknowledged is in it.
	missing, err := loadgen.Check(ctx, s.rootDSN(final, "sbtest"), "", r.Acked)
	if err != nil {
		s.t.Fatalf("ledger check: %v", err)
	}
	s.t.Logf("ledger: %d acknowledged writes, %d missing on %s", len(r.Acked), len(missing), s.sb.Nodes[final].Name)
	if len(missing) > 0 {
		s.t.Errorf("%d acknowledged ledger writes lost (first id %d)", len(missing), missing[0])
		// Where the lost rows are, to tell a write the old primary
		// acknowledged and never shipped from a hole in a replica.
		for i := range s.sb.Nodes {
			db := s.root(i)
			var sid int64
			var at string
			err := db.QueryRowContext(ctx, "SELECT server_id, CAST(at AS CHAR) FROM sbtest.ledger WHERE id = ?", missing[0]).Scan(&sid, &at)
			s.t.Logf("lost id %d on %s: executed by server_id %d at %s (err %v); %s gtid_current_pos %s", missing[0], s.sb.Nodes[i].Name, sid, at, err,
				s.sb.Nodes[i].Name, rootString(db, "SELECT @@gtid_current_pos"))
			db.Close()
		}
	}
	lost, dup, err := w.ids.check(ctx, s.rootDSN(final, "sbtest"))
	if err != nil {
		s.t.Fatalf("id check: %v", err)
	}
	s.t.Logf("ids: %d acknowledged auto-increment ids, %d lost, %d issued twice", w.ids.count(), lost, dup)
	if lost > 0 || dup > 0 {
		s.t.Errorf("auto-increment ids: %d lost, %d issued twice", lost, dup)
	}
	if r.Writes == 0 {
		s.t.Errorf("the workload made no write")
	}
	return r
}

// idWriter inserts rows whose id the server issues (AUTO_INCREMENT) and
// remembers which id each acknowledged insert got: a stale node promoted
// would issue an id again (the 2012 incident).
type idWriter struct {
	db   *sql.DB
	mu   sync.Mutex
	got  map[int64]int64 // client sequence → id
	wg   sync.WaitGroup
	errs int
}

func newIDWriter(ctx context.Context, dsn string) (*idWriter, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS ids (id BIGINT AUTO_INCREMENT PRIMARY KEY, seq BIGINT NOT NULL UNIQUE) ENGINE=InnoDB"); err != nil {
		db.Close()
		return nil, fmt.Errorf("create ids: %w", err)
	}
	return &idWriter{db: db, got: map[int64]int64{}}, nil
}

func (w *idWriter) start(ctx context.Context) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.db.Close()
		for seq := int64(1); ctx.Err() == nil; seq++ {
			res, err := w.db.ExecContext(ctx, "INSERT INTO ids (seq) VALUES (?)", seq)
			if err != nil {
				w.mu.Lock()
				w.errs++
				w.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			id, err := res.LastInsertId()
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.got[seq] = id
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

func (w *idWriter) wait() { w.wg.Wait() }

func (w *idWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

// check reads the ids table on a node: lost counts acknowledged inserts
// missing (or stored with another id), dup counts ids acknowledged for two
// sequences.
func (w *idWriter) check(ctx context.Context, dsn string) (lost, dup int, err error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id, seq FROM ids")
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	have := map[int64]int64{} // seq → id
	for rows.Next() {
		var id, seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return 0, 0, err
		}
		have[seq] = id
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	owner := map[int64]int64{}
	for seq, id := range w.got {
		if have[seq] != id {
			lost++
		}
		if _, taken := owner[id]; taken {
			dup++
		}
		owner[id] = seq
	}
	return lost, dup, nil
}

// writableWatch probes every node as the application user at each
// interval and records how many accept writes (read_only=OFF for a user
// without READ_ONLY ADMIN). Unreachable nodes count as not writable: no
// client outside their partition can write to them.
type writableWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples int
	max     int
	over    []string // samples with more than one writable node
}

func (s *foStack) watchWritable() *writableWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writableWatch{cancel: cancel, done: make(chan struct{})}
	dbs := make([]*sql.DB, 3)
	for i := range dbs {
		dbs[i], _ = sql.Open("mysql", s.appDirect(i, 300*time.Millisecond))
		dbs[i].SetMaxOpenConns(1)
		dbs[i].SetConnMaxLifetime(time.Second)
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, db := range dbs {
				db.Close()
			}
		}()
		t := time.NewTicker(foInterval)
		defer t.Stop()
		for ctx.Err() == nil {
			var writable []string
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, db := range dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
					defer cancel()
					var ro int
					if err := db.QueryRowContext(pctx, "SELECT @@global.read_only").Scan(&ro); err == nil && ro == 0 {
						mu.Lock()
						writable = append(writable, s.sb.Nodes[i].Name)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			w.samples++
			w.max = max(w.max, len(writable))
			if len(writable) > 1 {
				w.over = append(w.over, time.Now().Format("15:04:05.000")+" "+strings.Join(writable, ","))
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return w
}

// stop ends the watch and returns the number of samples, the most writable
// nodes seen at once and the samples with more than one.
func (w *writableWatch) stop() (samples, most int, over []string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples, w.max, w.over
}

// mysqlErrNo returns the MySQL error number of err, or 0.
func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// errorLogger logs errors only, to the test log.
func errorLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// rootString runs q on db and returns its single value, or the error text.
func rootString(db *sql.DB, q string) string {
	var v string
	if err := db.QueryRow(q).Scan(&v); err != nil {
		return err.Error()
	}
	return v
}
