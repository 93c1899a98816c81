package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Pass-through accounts (proxy.backend_accounts): clients log in with the
// accounts of the cluster's own servers. Per cluster of a listener, the
// proxy reads every account (user, host, plugin, authentication_string)
// from the current primary — a replica when the primary does not answer —
// every refresh, and when a login names an account it does not know (at
// most once per accountsMinGap per cluster; the login waits for that read,
// at most proxy.connect_timeout twice). Users of the static list take
// precedence. MaxScale reads mysql.user the same way; the proxy learns
// SHA1(password) from each login (as with users[].password_hash), and
// grants are the backend's business: the backend login is the client's own
// account.
//
// Host patterns are matched against the client's address as the proxy sees
// it, in MariaDB's order (exact addresses, then patterns with the longest
// literal prefix, '%' last); host names other than patterns are never
// matched (no DNS lookups, like a server with skip-name-resolve), and
// 'localhost' only means the server's unix socket, so it never matches.
// The backend then matches the proxy's own address against its accounts.

// accountsMinGap bounds how often a login of an unknown account reads the
// accounts again.
const accountsMinGap = time.Second

// accountsState is the pass-through state of every cluster (Server.accounts).
type accountsState struct {
	mu       sync.Mutex
	clusters map[string]*clusterAccounts
	loaded   *prometheus.GaugeVec   // accounts in the table, by cluster
	loads    *prometheus.CounterVec // reads, by cluster and result
}

// clusterAccounts is one cluster's account table and its reader.
type clusterAccounts struct {
	cluster  string
	mu       sync.Mutex
	byName   map[string][]*userEntry // sorted by host precedence
	loadedAt time.Time
	inflight chan struct{} // closed when the running read ends; nil when none runs
	started  time.Time     // when the last read started
}

func (a *accountsState) initMetrics(reg prometheus.Registerer) error {
	a.clusters = map[string]*clusterAccounts{}
	a.loaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_proxy_backend_accounts",
		Help: "Accounts read from the cluster's servers for pass-through login (proxy.backend_accounts), by cluster.",
	}, []string{"cluster"})
	a.loads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_proxy_backend_account_loads_total",
		Help: "Reads of the servers' accounts, by cluster and result (ok|error).",
	}, []string{"cluster", "result"})
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{a.loaded, a.loads} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	return nil
}

func (a *accountsState) get(cluster string) *clusterAccounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	ca := a.clusters[cluster]
	if ca == nil {
		ca = &clusterAccounts{cluster: cluster}
		a.clusters[cluster] = ca
	}
	return ca
}

// startAccounts runs the periodic read of every listener cluster's
// accounts (it reads nothing while proxy.backend_accounts is off). Called
// by Start, under s.mu.
func (s *Server) startAccounts() {
	seen := map[string]bool{}
	for _, l := range s.listeners {
		if seen[l.cluster] {
			continue
		}
		seen[l.cluster] = true
		ca := s.accounts.get(l.cluster)
		s.bg.Add(1) // Start holds s.mu: not goBackground
		go func() {
			defer s.bg.Done()
			s.refreshAccounts(ca)
		}()
	}
}

func (s *Server) refreshAccounts(ca *clusterAccounts) {
	for {
		cfg := s.cfg.Load()
		wait := cfg.Proxy.BackendAccounts.Refresh.D()
		if wait <= 0 {
			wait = 30 * time.Second
		}
		if cfg.Proxy.BackendAccounts.Enabled {
			s.loadAccounts(ca, false)
		} else {
			ca.mu.Lock()
			ca.byName = nil
			ca.mu.Unlock()
			wait = time.Second // notice a config that turns it on
		}
		select {
		case <-s.closing:
			return
		case <-time.After(wait):
		}
	}
}

// passThrough returns the account of cluster that name at client address
// ip logs in with, or nil: when the table has none, it is read again first
// (at most once per accountsMinGap) and the login waits for that read.
func (s *Server) passThrough(cluster, name, ip string) *userEntry {
	if !s.cfg.Load().Proxy.BackendAccounts.Enabled {
		return nil
	}
	ca := s.accounts.get(cluster)
	if u := ca.find(name, ip); u != nil {
		return u
	}
	s.loadAccounts(ca, true)
	return ca.find(name, ip)
}

// loaded returns when the accounts were last read (zero: never).
func (ca *clusterAccounts) loaded() time.Time {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return ca.loadedAt
}

// find returns the first account named name whose host pattern matches ip.
func (ca *clusterAccounts) find(name, ip string) *userEntry {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil
	}
	for _, u := range ca.byName[name] {
		if hostMatches(u.host, addr.Unmap()) {
			return u
		}
	}
	return nil
}

// loadAccounts reads the accounts once and waits for the read (bounded
// by twice proxy.connect_timeout); a read already running is waited for
// instead. With limited (a login of an account the table does not have)
// reads start at most once per accountsMinGap, and the caller waits for
// one that started after it called — at most accountsMinGap more — so
// that an account created just before a login is found even when another
// login had the accounts read a moment earlier (mariadb-client-test's
// test_bug31669 creates an account and changes to it at once).
func (s *Server) loadAccounts(ca *clusterAccounts, limited bool) {
	asked := time.Now()
	for limited {
		ca.mu.Lock()
		ch, started := ca.inflight, ca.started
		ca.mu.Unlock()
		var wait <-chan time.Time
		switch {
		case ch != nil && !started.Before(asked):
			s.awaitAccounts(ch) // started after the login asked
			return
		case ch != nil:
		case time.Since(started) >= accountsMinGap:
			s.startAccountsRead(ca, true)
			continue
		default:
			wait = time.After(accountsMinGap - time.Since(started))
		}
		select {
		case <-ch: // nil when none runs: blocks
		case <-wait: // nil while one runs: blocks
		case <-time.After(2 * s.rc.Load().connectTimeout):
			return
		case <-s.closing:
			return
		}
	}
	if ch := s.startAccountsRead(ca, false); ch != nil {
		s.awaitAccounts(ch)
	}
}

// awaitAccounts waits for the read that closes ch (at most twice
// proxy.connect_timeout).
func (s *Server) awaitAccounts(ch chan struct{}) {
	select {
	case <-ch:
	case <-time.After(2 * s.rc.Load().connectTimeout):
	case <-s.closing:
	}
}

// startAccountsRead starts a read of the accounts, or with onlyIfGap
// does so only when none runs and the last one started accountsMinGap
// ago or more; it returns the channel closed when the running read ends
// (nil when none was started and none runs).
func (s *Server) startAccountsRead(ca *clusterAccounts, onlyIfGap bool) chan struct{} {
	rc := s.rc.Load()
	ca.mu.Lock()
	ch := ca.inflight
	if ch == nil {
		if onlyIfGap && time.Since(ca.started) < accountsMinGap {
			ca.mu.Unlock()
			return nil
		}
		ch = make(chan struct{})
		ca.inflight, ca.started = ch, time.Now()
		// Callers run in a session (Close waits for them before s.bg) or
		// in the refresh loop (in s.bg): the Add never races the Wait.
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-s.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			tab, from, err := s.readAccounts(ctx, ca.cluster, rc)
			var changed map[string]bool
			ca.mu.Lock()
			if err == nil {
				changed = changedAccounts(ca.byName, tab)
				ca.byName = mergeAccounts(tab, ca.byName)
				ca.loadedAt = time.Now()
			}
			ca.inflight = nil
			n := 0
			for _, us := range ca.byName {
				n += len(us)
			}
			ca.mu.Unlock()
			close(ch)
			if err != nil {
				s.accounts.loads.WithLabelValues(ca.cluster, "error").Inc()
				if ctx.Err() != nil {
					return // the proxy is closing
				}
				s.log.Warn("backend accounts: read failed; keeping the accounts read before", "cluster", ca.cluster, "err", err)
				return
			}
			if len(changed) > 0 {
				// Idle pooled connections of dropped accounts, or of
				// accounts whose password changed, would let their
				// next login skip the server's check.
				s.closeIdle(func(be *backend) bool { return be.t.cluster == ca.cluster && changed[be.key.user] })
			}
			s.accounts.loads.WithLabelValues(ca.cluster, "ok").Inc()
			s.accounts.loaded.WithLabelValues(ca.cluster).Set(float64(n))
			s.log.Debug("backend accounts read", "cluster", ca.cluster, "node", from, "accounts", n)
		}()
	}
	ca.mu.Unlock()
	return ch
}

// Reading the accounts. On MariaDB ≥ 10.4 mysql.global_priv holds each
// account's plugin and authentication_string in its JSON Priv column
// (mysql.user is a view over it); roles and anonymous accounts are left
// out. A locked account is kept: the proxy checks its password and the
// server refuses the backend login with its own error 4151, as it answers
// a direct login. MySQL keeps them in mysql.user (not tested here: there is no
// MySQL server package on the development machines).
const (
	accountsQueryMariaDB = "SELECT User, Host, IFNULL(JSON_VALUE(Priv, '$.plugin'), ''), " +
		"IFNULL(JSON_VALUE(Priv, '$.authentication_string'), '') FROM mysql.global_priv " +
		"WHERE User <> '' AND IFNULL(JSON_VALUE(Priv, '$.is_role'), '0') NOT IN ('1', 'true')"
	accountsQueryMySQL = "SELECT User, Host, plugin, authentication_string FROM mysql.user WHERE User <> ''"
)

// readAccounts reads the cluster's accounts from its primary, else from
// the first node that answers. It returns them by name and the node read.
func (s *Server) readAccounts(ctx context.Context, cluster string, rc *runtimeConfig) (map[string][]*userEntry, string, error) {
	cfg := s.cfg.Load()
	cl := cfg.Cluster(cluster)
	if cl == nil {
		return nil, "", fmt.Errorf("cluster %s is not configured", cluster)
	}
	cred := cfg.BackendAccountsCredential()
	pw, err := cred.Resolve()
	if err != nil {
		return nil, "", fmt.Errorf("proxy.backend_accounts: password of %s: %w", cred.User, err)
	}
	var order []*target
	if snap := s.route(cluster).snap.Load(); snap != nil {
		if snap.primary != nil {
			order = append(order, snap.primary)
		}
		order = append(order, snap.replicas...)
	}
	for _, n := range cl.Nodes {
		order = append(order, &target{cluster: cluster, node: n.Name, addr: n.Address})
	}
	query := accountsQueryMariaDB
	if cl.Flavor == "mysql" {
		query = accountsQueryMySQL
	}
	var errs []error
	tried := map[string]bool{}
	for _, t := range order {
		if ctx.Err() != nil {
			break
		}
		if t == nil || t.addr == "" || tried[t.addr] {
			continue
		}
		tried[t.addr] = true
		tab, err := queryAccounts(ctx, t.addr, cred.User, pw, query, rc.connectTimeout)
		if err == nil {
			return tab, t.node, nil
		}
		errs = append(errs, fmt.Errorf("%s (%s): %w", t.node, t.addr, err))
	}
	if len(errs) == 0 {
		return nil, "", fmt.Errorf("cluster %s has no node address", cluster)
	}
	return nil, "", errors.Join(errs...)
}

func queryAccounts(ctx context.Context, addr, user, pw, query string, timeout time.Duration) (map[string][]*userEntry, error) {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = user, pw, "tcp", addr
	mc.Timeout, mc.ReadTimeout, mc.WriteTimeout = timeout, 5*time.Second, 5*time.Second
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]*userEntry{}
	for rows.Next() {
		var name, host, plugin, auth string
		if err := rows.Scan(&name, &host, &plugin, &auth); err != nil {
			return nil, err
		}
		out[name] = append(out[name], accountEntry(name, host, plugin, auth))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, us := range out {
		sort.SliceStable(us, func(i, j int) bool { return hostRank(us[i].host) > hostRank(us[j].host) })
	}
	return out, nil
}

// accountEntry builds the entry of one server account.
func accountEntry(name, host, plugin, auth string) *userEntry {
	e := &userEntry{name: name, host: host, plugin: config.AuthNative}
	switch plugin {
	case "mysql_native_password", "":
		if auth == "" {
			e.empty = true
			return e
		}
		s2, err := mysqlproto.ParseNativeHash(auth)
		if err != nil {
			e.unsupported = "mysql_native_password (with an unreadable hash)"
			return e
		}
		e.stage2 = s2
	default:
		// ed25519 too: its public key checks clients, but the proxy
		// could not log into backends as the account.
		e.unsupported = plugin
	}
	return e
}

// mergeAccounts keeps, for accounts whose hash did not change, what
// earlier logins taught (stage1, the caching_sha2 verifier).
func mergeAccounts(tab, prev map[string][]*userEntry) map[string][]*userEntry {
	for name, us := range tab {
		for _, u := range us {
			for _, o := range prev[name] {
				if sameAccount(o, u) {
					u.stage1.Store(o.stage1.Load())
					u.sha2.Store(o.sha2.Load())
				}
			}
		}
	}
	return tab
}

// changedAccounts returns the names of prev whose accounts are gone from
// tab or differ there (host, hash, plugin).
func changedAccounts(prev, tab map[string][]*userEntry) map[string]bool {
	out := map[string]bool{}
	for name, old := range prev {
		now := tab[name]
		if len(now) != len(old) {
			out[name] = true
			continue
		}
		for i := range old {
			if !sameAccount(old[i], now[i]) {
				out[name] = true
			}
		}
	}
	return out
}

// sameAccount reports whether a and b are the same account with the same
// credentials (what a login learned about a stays true of b).
func sameAccount(a, b *userEntry) bool {
	return a.host == b.host && a.stage2 == b.stage2 && a.empty == b.empty && a.unsupported == b.unsupported
}

// hostRank orders host patterns as MariaDB does (sql_acl.cc get_sort): an
// address without wildcards first, then patterns by the length of their
// literal prefix, '%' (or empty) last.
func hostRank(h string) int {
	if h == "" || h == "%" {
		return 0
	}
	if i := strings.IndexAny(h, "%_"); i >= 0 {
		return 1 + i
	}
	return 1 << 16
}

// hostMatches reports whether the client address ip matches the account's
// host pattern: '%' and '_' wildcards (case-insensitive), an address, or
// address/netmask ("10.0.0.0/255.0.0.0"). Host names never match.
func hostMatches(pattern string, ip netip.Addr) bool {
	if pattern == "" || pattern == "%" {
		return true
	}
	if base, mask, ok := strings.Cut(pattern, "/"); ok {
		b, err1 := netip.ParseAddr(base)
		m := net.ParseIP(mask).To4()
		if err1 != nil || m == nil || !b.Is4() || !ip.Is4() {
			return false
		}
		bb, cb := b.As4(), ip.As4()
		for i := range 4 {
			if cb[i]&m[i] != bb[i] {
				return false
			}
		}
		return true
	}
	if strings.EqualFold(pattern, "localhost") {
		return false
	}
	return likeMatch(strings.ToLower(pattern), strings.ToLower(ip.String()))
}

// likeMatch is SQL LIKE without escapes: '%' any run, '_' one character.
func likeMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '%':
			for len(p) > 0 && p[0] == '%' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if likeMatch(p, s[i:]) {
					return true
				}
			}
			return false
		case '_':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}
