package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
	"github.com/switchyard-db/switchyard/internal/topo"
)

func testState(epoch int64, primary string, serving ...string) topo.ClusterState {
	st := topo.ClusterState{Cluster: "c", Primary: primary, Epoch: epoch}
	for _, n := range []string{"n1", "n2", "n3"} {
		ns := topo.NodeState{Name: n, Address: "127.0.0.1:1" + n[1:]}
		for _, s := range serving {
			ns.Serving = ns.Serving || s == n
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st
}

func TestSnapshotPickAndValid(t *testing.T) {
	addrOf := func(string) string { return "" }
	snap := buildSnapshot(testState(1, "n1", "n1", "n2", "n3"), addrOf, nil)
	if snap.primary.node != "n1" || len(snap.replicas) != 2 {
		t.Fatalf("primary %v replicas %d (the primary must never count as a replica)", snap.primary, len(snap.replicas))
	}
	seen := map[string]int{}
	for range 10 {
		tg, err := snap.pick(roleReplica, true)
		if err != nil {
			t.Fatal(err)
		}
		seen[tg.node]++
	}
	if seen["n2"] != 5 || seen["n3"] != 5 {
		t.Fatalf("round robin %v", seen)
	}
	if tg, _ := snap.pick(rolePrimary, true); tg.node != "n1" {
		t.Fatalf("primary pick %v", tg)
	}
	n2 := snap.replicas[0]
	if !snap.valid(roleReplica, true, &backend{t: n2}) || snap.valid(rolePrimary, true, &backend{t: n2}) {
		t.Fatal("validity of a serving replica")
	}

	// No serving replica: fallback or a clear error.
	none := buildSnapshot(testState(1, "n1"), addrOf, nil)
	if tg, err := none.pick(roleReplica, true); err != nil || tg.node != "n1" {
		t.Fatalf("fallback pick %v %v", tg, err)
	}
	_, err := none.pick(roleReplica, false)
	if err == nil || err.Code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(err.Message, "no healthy replica") {
		t.Fatalf("no fallback: %v", err)
	}
	if none.valid(roleReplica, true, &backend{t: n2}) || !none.valid(roleReplica, true, &backend{t: none.primary}) {
		t.Fatal("validity under fallback")
	}
	// Replicas back: a session parked on the primary by fallback must move.
	if snap.valid(roleReplica, true, &backend{t: none.primary}) {
		t.Fatal("fallback session stays on the primary although replicas serve again")
	}

	// No primary, unknown primary name, no snapshot at all.
	for _, s := range []*routeSnapshot{buildSnapshot(testState(1, ""), addrOf, nil), buildSnapshot(testState(1, "zz"), addrOf, nil), nil} {
		if _, err := s.pick(rolePrimary, true); err == nil || err.Code != mysql.ER_UNKNOWN_ERROR {
			t.Fatalf("pick without primary: %v", err)
		}
	}

	// Addresses fall back to the config when the state lacks them.
	st := testState(1, "n1")
	st.Nodes[0].Address = ""
	s2 := buildSnapshot(st, func(n string) string { return "10.0.0.1:3306" }, nil)
	if s2.primary.addr != "10.0.0.1:3306" {
		t.Fatalf("config address fallback: %v", s2.primary)
	}
}

func TestSameRoutes(t *testing.T) {
	a := buildSnapshot(testState(1, "n1", "n2"), nil, nil)
	b := buildSnapshot(testState(2, "n1", "n2"), nil, nil)
	c := buildSnapshot(testState(2, "n2", "n3"), nil, nil)
	if !sameRoutes(a, b) || sameRoutes(a, c) || sameRoutes(nil, a) || !sameRoutes(nil, nil) {
		t.Fatal("sameRoutes")
	}
}

func TestAuthenticateUsers(t *testing.T) {
	hash := mysqlproto.FormatNativeHash(mysqlproto.NativeStage2(mysqlproto.NativeStage1("h-pw")))
	cfg := &config.Config{Users: []config.User{
		{Name: "plain", Password: "p-pw"},
		{Name: "hashed", PasswordHash: hash},
		{Name: "empty"},
	}}
	cfg.ApplyDefaults()
	rc, err := newRuntimeConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	scr := []byte("0123456789abcdefghij")
	tok := func(pw string) []byte { return mysqlproto.NativeToken(scr, mysqlproto.NativeStage1(pw)) }
	if _, s1, ok := rc.verifyNative(rc.users["plain"], scr, tok("p-pw")); !ok || s1 != mysqlproto.NativeStage1("p-pw") {
		t.Fatal("plaintext user")
	}
	if _, _, ok := rc.verifyNative(rc.users["plain"], scr, tok("nope")); ok {
		t.Fatal("wrong password accepted")
	}
	if _, _, ok := rc.verifyNative(rc.users["ghost"], scr, tok("p-pw")); ok {
		t.Fatal("unknown user accepted")
	}
	if rc.users["hashed"].stage1.Load() != nil {
		t.Fatal("hash-only user has SHA1(pw) before any login")
	}
	if _, s1, ok := rc.verifyNative(rc.users["hashed"], scr, tok("h-pw")); !ok || s1 != mysqlproto.NativeStage1("h-pw") {
		t.Fatal("hash-only user")
	}
	if p := rc.users["hashed"].stage1.Load(); p == nil || *p != mysqlproto.NativeStage1("h-pw") {
		t.Fatal("recovered SHA1(pw) not kept")
	}
	if _, _, ok := rc.verifyNative(rc.users["empty"], scr, nil); !ok {
		t.Fatal("empty password")
	}
	if _, _, ok := rc.verifyNative(rc.users["empty"], scr, tok("x")); ok {
		t.Fatal("empty-password user accepted a password")
	}
	// A config reload keeps the recovered value while the hash is unchanged.
	rc2, err := newRuntimeConfig(cfg, rc)
	if err != nil || rc2.users["hashed"].stage1.Load() == nil {
		t.Fatalf("reload lost the recovered SHA1(pw): %v", err)
	}
	cfg.Users[1].PasswordHash = mysqlproto.FormatNativeHash(mysqlproto.NativeStage2(mysqlproto.NativeStage1("new")))
	rc3, _ := newRuntimeConfig(cfg, rc2)
	if rc3.users["hashed"].stage1.Load() != nil {
		t.Fatal("changed hash kept the old SHA1(pw)")
	}
	cfg.Users[1].PasswordHash = "*nothex"
	if _, err := newRuntimeConfig(cfg, nil); err == nil || strings.Contains(err.Error(), "nothex") {
		t.Fatalf("bad hash: %v (must fail without echoing the hash)", err)
	}
}

func TestParseUse(t *testing.T) {
	cases := map[string]string{
		"USE otherdb":        "otherdb",
		"  use `my db`; ":    "my db",
		"Use\tx":             "x",
		"use `a``b`":         "a`b",
		"useless":            "",
		"USE a; SELECT 1":    "",
		"SELECT 1":           "",
		"use":                "",
		"use 'quoted'":       "",
		"/* c */ USE hidden": "",
	}
	for q, want := range cases {
		got, ok := parseUse([]byte(q))
		if got != want || ok != (want != "") {
			t.Errorf("parseUse(%q) = %q %v, want %q", q, got, ok, want)
		}
	}
}

func TestKindOf(t *testing.T) {
	relayed := []byte{mysql.COM_QUERY, mysql.COM_STMT_EXECUTE, mysql.COM_STMT_PREPARE, mysql.COM_STMT_FETCH,
		mysql.COM_FIELD_LIST, mysql.COM_INIT_DB, mysql.COM_PING, mysql.COM_STMT_RESET, mysql.COM_SET_OPTION,
		mysql.COM_RESET_CONNECTION, mysql.COM_STATISTICS, mysql.COM_STMT_CLOSE, mysql.COM_STMT_SEND_LONG_DATA,
		mysqlproto.ComStmtBulkExecute}
	for _, c := range relayed {
		if kindOf(c) == respRejected {
			t.Errorf("command 0x%02x rejected", c)
		}
	}
	for _, c := range []byte{mysql.COM_SHUTDOWN, mysql.COM_BINLOG_DUMP, mysql.COM_PROCESS_KILL, mysql.COM_REGISTER_SLAVE, 0xfe} {
		if kindOf(c) != respRejected {
			t.Errorf("command 0x%02x relayed", c)
		}
	}
}

func TestNewRejectsBadListeners(t *testing.T) {
	base := func() *config.Config {
		c := &config.Config{
			Clusters:  []config.Cluster{{Name: "c"}},
			Listeners: []config.Listener{{Name: "rw", Address: "127.0.0.1:0", Cluster: "c", Role: "primary"}},
		}
		c.ApplyDefaults()
		return c
	}
	for name, mut := range map[string]func(*config.Config){
		"role":    func(c *config.Config) { c.Listeners[0].Role = "writer" },
		"cluster": func(c *config.Config) { c.Listeners[0].Cluster = "nope" },
		"dup":     func(c *config.Config) { c.Listeners = append(c.Listeners, c.Listeners[0]) },
	} {
		c := base()
		mut(c)
		if _, err := New(Options{Config: c}); err == nil || !strings.Contains(err.Error(), "listeners[") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Bind failure names the listener and the address.
	c := base()
	s, _ := New(Options{Config: c})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c2 := base()
	c2.Listeners[0].Address = s.ListenerAddr("rw")
	s2, _ := New(Options{Config: c2})
	err := s2.Start()
	if err == nil || !strings.Contains(err.Error(), `listener "rw"`) || !strings.Contains(err.Error(), c2.Listeners[0].Address) {
		t.Fatalf("bind failure: %v", err)
	}
}

func TestCompressionStatusQuery(t *testing.T) {
	for q, want := range map[string]bool{
		"SHOW STATUS LIKE 'Compression'":              true,
		"show session status like 'compression' ;":    true,
		"  SHOW LOCAL\tSTATUS LIKE \"Compression\"\n": true,
		"SHOW GLOBAL STATUS LIKE 'Compression'":       false,
		"SHOW STATUS LIKE 'Compress%'":                false,
		"SHOW STATUS":                                 false,
		"SELECT 'SHOW STATUS LIKE ''Compression'''":   false,
	} {
		if got := compressionStatusQuery([]byte(q)); got != want {
			t.Errorf("compressionStatusQuery(%q) = %v", q, got)
		}
	}
}

func TestSetsGlobal(t *testing.T) {
	for q, want := range map[string]bool{
		"SET GLOBAL autocommit=0":                           true,
		"set global max_connect_errors=@saved":              true,
		"SET @@global.max_connect_errors=3":                 true,
		"set @@global.general_log = on":                     true,
		"SET a=1, GLOBAL b=2":                               true,
		"SET @save_autocommit=@@global.autocommit":          false,
		"set @save_global_general_log=@@global.general_log": false,
		"SET autocommit=0":                                  false,
		"SET @@session.autocommit=0":                        false,
	} {
		if got := setsGlobal([]byte(q)); got != want {
			t.Errorf("setsGlobal(%q) = %v, want %v", q, got, want)
		}
	}
}
