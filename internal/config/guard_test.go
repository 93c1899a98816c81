package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// guardBase is a valid config of one cluster of three nodes and two
// listeners: six routes.
func guardBase() *Config {
	c := &Config{
		Credentials: Credentials{
			Monitor:     Credential{User: "monitor", Password: "m-secret"},
			Replication: Credential{User: "repl", Password: "r-secret"},
		},
		Users: []User{{Name: "app", Password: "app-secret"}},
		Clusters: []Cluster{{Name: "main", Nodes: []Node{
			{Name: "db1", Address: "127.0.0.1:3306"},
			{Name: "db2", Address: "127.0.0.1:3307"},
			{Name: "db3", Address: "127.0.0.1:3308"},
		}}},
		Listeners: []Listener{
			{Name: "rw", Address: "127.0.0.1:6446", Cluster: "main", Role: RolePrimary},
			{Name: "ro", Address: "127.0.0.1:6447", Cluster: "main", Role: RoleReplica},
		},
	}
	c.ApplyDefaults()
	return c
}

// tenBase has ten listeners on the cluster of guardBase: thirty routes.
func tenBase() *Config {
	c := guardBase()
	for i := range 8 {
		c.Listeners = append(c.Listeners, Listener{Name: fmt.Sprintf("t%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 7000+i), Cluster: "main", Role: RoleReplica})
	}
	return c
}

func liveMain() Live {
	return Live{
		Sessions: map[string]int{"rw": 4},
		Clusters: map[string]LiveCluster{"main": {Primary: "db1", Serving: []string{"db2"}}},
	}
}

func TestGuard(t *testing.T) {
	tests := []struct {
		name   string
		cur    func() *Config
		mutate func(c *Config) *Config
		live   Live
		want   []string // rules, in order; nil = allowed
		msg    string   // substring of the first violation's message
	}{
		{"no change", guardBase, func(c *Config) *Config { return c }, liveMain(), nil, ""},
		{"nil new config", guardBase, func(*Config) *Config { return nil }, liveMain(),
			[]string{RuleEmpty, RuleListenerInUse, RuleClusterInUse, RuleNodeInUse, RuleNodeInUse}, "there is no new config"},
		{"empty config", guardBase, func(*Config) *Config { return &Config{} }, Live{},
			[]string{RuleEmpty}, "no listeners"},
		{"no listeners", guardBase, func(c *Config) *Config { c.Listeners = nil; return c }, Live{},
			[]string{RuleEmpty}, "the new config has no listeners"},
		{"no clusters", guardBase, func(c *Config) *Config { c.Clusters = nil; return c }, Live{},
			[]string{RuleEmpty}, "the new config has no clusters"},
		{"empty config on first apply", func() *Config { return nil }, func(*Config) *Config { return &Config{} }, Live{},
			[]string{RuleEmpty}, "no listeners"},
		{"first apply of a good config", func() *Config { return nil }, func(c *Config) *Config { return guardBase() }, Live{}, nil, ""},
		{"90% of routes dropped", tenBase, func(c *Config) *Config { c.Listeners = c.Listeners[:1]; return c }, Live{},
			[]string{RuleRoutesRemoved}, "27 of 30 routes (90%) are removed, more than config.guard.max_removed_fraction 0.2 (20%)"},
		{"20% of routes is the limit, allowed", tenBase, func(c *Config) *Config { c.Listeners = c.Listeners[:8]; return c }, Live{}, nil, ""},
		{"a little more than 20% is refused", tenBase, func(c *Config) *Config { c.Listeners = c.Listeners[:7]; return c }, Live{},
			[]string{RuleRoutesRemoved}, "9 of 30 routes (30%)"},
		{"limit of the current config applies, not the new one's", tenBase, func(c *Config) *Config {
			one := 1.0
			c.Versioning.Guard.MaxRemovedFraction = &one
			c.Listeners = c.Listeners[:1]
			return c
		}, Live{}, []string{RuleRoutesRemoved}, "27 of 30"},
		{"limit 0 refuses any removal", func() *Config {
			c := tenBase()
			zero := 0.0
			c.Versioning.Guard.MaxRemovedFraction = &zero
			return c
		}, func(c *Config) *Config { c.Listeners = c.Listeners[:9]; return c }, Live{}, []string{RuleRoutesRemoved}, "3 of 30"},
		{"node that is primary removed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[1:]
			return c
		}, liveMain(), []string{RuleNodeInUse, RuleRoutesRemoved}, `node "db1" of cluster "main" (127.0.0.1:3306) is removed but is the primary`},
		{"address of the primary changed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes[0].Address = "127.0.0.1:42999"
			return c
		}, liveMain(), []string{RuleAddressInUse}, `node "db1" of cluster "main" is the primary and its address changes from 127.0.0.1:3306 to 127.0.0.1:42999`},
		{"address of a serving replica changed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes[1].Address = "db2.example:3306"
			return c
		}, liveMain(), []string{RuleAddressInUse}, "run `switchyard drain db2 --cluster main --wait` first"},
		{"address of a node neither primary nor serving changed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes[2].Address = "127.0.0.1:3309"
			return c
		}, liveMain(), nil, ""},
		{"node that is a serving replica removed", tenBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = []Node{c.Clusters[0].Nodes[0], c.Clusters[0].Nodes[2]}
			return c
		}, liveMain(), []string{RuleNodeInUse, RuleRoutesRemoved}, "is a serving replica"},
		{"node neither primary nor serving, within the limit", func() *Config {
			c := guardBase()
			half := 0.5
			c.Versioning.Guard.MaxRemovedFraction = &half
			return c
		}, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[:2]
			return c
		}, liveMain(), nil, ""},
		{"one drained node without sessions of three removed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[:2]
			return c
		}, Live{Sessions: map[string]int{"rw": 4}, Clusters: map[string]LiveCluster{"main": {Primary: "db1", Serving: []string{"db2"},
			Drained: []string{"db3"}, NodeSessions: map[string]int{"db1": 4}}}}, nil, ""},
		{"one drained node that still has sessions removed", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[:2]
			return c
		}, Live{Clusters: map[string]LiveCluster{"main": {Primary: "db1", Drained: []string{"db3"}, NodeSessions: map[string]int{"db3": 1}}}},
			[]string{RuleRoutesRemoved}, "drain them first (`switchyard drain db3 --cluster main --wait`)"},
		{"one undrained idle node of three removed: refused, suggests drain", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[:2]
			return c
		}, liveMain(), []string{RuleRoutesRemoved}, "2 of 6 routes (33%) are removed, more than config.guard.max_removed_fraction 0.2 (20%); to remove nodes, drain them first (`switchyard drain db3 --cluster main --wait`)"},
		{"drained node removed while a proxy does not report sessions", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = c.Clusters[0].Nodes[:2]
			return c
		}, Live{SessionsUnknown: []string{"p1"}, Clusters: map[string]LiveCluster{"main": {Primary: "db1", Drained: []string{"db3"}}}},
			[]string{RuleRoutesRemoved}, "2 of 6 routes"},
		{"listener with sessions removed", tenBase, func(c *Config) *Config {
			c.Listeners = c.Listeners[1:]
			return c
		}, liveMain(), []string{RuleListenerInUse}, `listener "rw" (127.0.0.1:6446) is removed but carries 4 open client sessions`},
		{"listener without sessions removed, within the limit", tenBase, func(c *Config) *Config {
			c.Listeners = c.Listeners[:9]
			return c
		}, liveMain(), nil, ""},
		{"listener removed while a proxy does not report sessions", tenBase, func(c *Config) *Config {
			c.Listeners = c.Listeners[:9]
			return c
		}, Live{SessionsUnknown: []string{"p2", "p1"}}, []string{RuleListenerInUse}, "may carry sessions: proxies p1, p2 do not report theirs"},
		{"cluster with sessions removed", func() *Config {
			c := guardBase()
			c.Clusters = append(c.Clusters, Cluster{Name: "other", Nodes: []Node{{Name: "o1", Address: "127.0.0.1:4306"}}})
			c.Listeners = append(c.Listeners, Listener{Name: "other-rw", Address: "127.0.0.1:6450", Cluster: "other", Role: RolePrimary})
			c.ApplyDefaults()
			return c
		}, func(c *Config) *Config {
			c.Clusters = c.Clusters[:1]
			c.Listeners = c.Listeners[:2]
			return c
		}, Live{Sessions: map[string]int{"other-rw": 2}, Clusters: map[string]LiveCluster{"other": {Primary: "o1"}}},
			[]string{RuleListenerInUse, RuleClusterInUse, RuleNodeInUse}, `listener "other-rw"`},
		{"add a replica", guardBase, func(c *Config) *Config {
			c.Clusters[0].Nodes = append(c.Clusters[0].Nodes, Node{Name: "db4", Address: "127.0.0.1:3309", Promotion: PromotionNeutral})
			return c
		}, liveMain(), nil, ""},
		{"change the lag limit", guardBase, func(c *Config) *Config {
			c.Clusters[0].ReadRouting.MaxLag = Duration(3 * time.Second)
			return c
		}, liveMain(), nil, ""},
		{"move a listener to another address", guardBase, func(c *Config) *Config {
			c.Listeners[1].Address = "127.0.0.1:7447"
			return c
		}, liveMain(), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := tt.cur()
			var next *Config
			if cur != nil {
				next = tt.mutate(cloneForTest(t, cur))
			} else {
				next = tt.mutate(nil)
			}
			vs := Guard(cur, next, tt.live)
			var rules []string
			for _, v := range vs {
				rules = append(rules, v.Rule)
			}
			if fmt.Sprint(rules) != fmt.Sprint(tt.want) {
				t.Fatalf("rules %v, want %v\n%v", rules, tt.want, vs)
			}
			if tt.msg != "" && !strings.Contains(vs[0].Msg, tt.msg) {
				t.Errorf("first violation %q, want it to contain %q", vs[0].Msg, tt.msg)
			}
		})
	}
}

// cloneForTest deep-copies c through Marshal/Parse.
func cloneForTest(t *testing.T, c *Config) *Config {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGuardErrorListsEveryViolation(t *testing.T) {
	cur := tenBase()
	next := cloneForTest(t, cur)
	next.Listeners = next.Listeners[1:2]
	vs := Guard(cur, next, liveMain())
	err := error(&GuardError{Violations: vs, Diff: ComputeDiff(cur, next)})
	var ge *GuardError
	if !errors.As(err, &ge) || len(ge.Violations) != 2 {
		t.Fatalf("errors.As: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"destructive change refused (2 reasons)", "listener-in-use: listener \"rw\"", "routes-removed: 27 of 30"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestRoutes(t *testing.T) {
	c := guardBase()
	rs := c.Routes()
	if len(rs) != 6 || rs[0].String() != "rw -> main/db1" || rs[5].String() != "ro -> main/db3" || rs[5].Role != RoleReplica {
		t.Fatalf("routes %v", rs)
	}
	c.Listeners = append(c.Listeners, Listener{Name: "dangling", Cluster: "nosuch"})
	if n := len(c.Routes()); n != 6 {
		t.Errorf("a listener on an undefined cluster has routes: %d", n)
	}
	if (*Config)(nil).Routes() != nil {
		t.Error("nil config has routes")
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // substrings of String()
		check  func(t *testing.T, d Diff)
	}{
		{"identical", func(*Config) {}, []string{"no changes"}, func(t *testing.T, d Diff) {
			if !d.Empty() {
				t.Errorf("not empty: %+v", d)
			}
		}},
		{"add a replica", func(c *Config) {
			c.Clusters[0].Nodes = append(c.Clusters[0].Nodes, Node{Name: "db4", Address: "127.0.0.1:3309", Promotion: PromotionPrefer})
		}, []string{"nodes:\n  + main/db4  127.0.0.1:3309 (promotion prefer)", "routes: 6 -> 8 (0 removed, 2 added)", "  + ro -> main/db4", "  + rw -> main/db4"},
			func(t *testing.T, d Diff) {
				if len(d.Nodes) != 1 || len(d.Routes) != 2 || len(d.Listeners)+len(d.Clusters)+len(d.Users)+len(d.Policies) != 0 {
					t.Errorf("diff %+v", d)
				}
			}},
		{"change lag limit and probe interval", func(c *Config) {
			c.Clusters[0].ReadRouting.MaxLag = Duration(3 * time.Second)
			c.Probe.Interval = Duration(2 * time.Second)
		}, []string{"policies:\n  ~ clusters[main].read_routing.max_lag  10s -> 3s\n  ~ probe.interval  1s -> 2s"}, nil},
		{"hooks added, changed, removed; secrets not shown", func(c *Config) {
			c.Hooks = []Hook{{Name: "chat", Events: []string{HookDeadPrimary}, URL: "https://hooks.example.com/T000/B000/s3cretpath",
				Headers: []HookHeader{{Name: "Authorization", Value: "Bearer s3cret"}}}}
		}, []string{"hooks[chat]  added (events dead_primary, url https://hooks.example.com/…)"}, func(t *testing.T, d Diff) {
			if strings.Contains(d.String(), "s3cret") {
				t.Errorf("diff shows a hook secret:\n%s", d)
			}
			old := &Config{Hooks: []Hook{{Name: "chat", Events: []string{HookDeadPrimary}, URL: "https://hooks.example.com/a/s3cret",
				Headers: []HookHeader{{Name: "Authorization", Value: "Bearer s3cret"}}}, {Name: "gone", Events: []string{HookAlarmRaised}, Command: []string{"/bin/true"}}}}
			nw := &Config{Hooks: []Hook{{Name: "chat", Events: []string{HookDeadPrimary, HookFailoverEnd}, URL: "https://hooks.example.com/b/s3cret2",
				Headers: []HookHeader{{Name: "Authorization", Value: "Bearer s3cret2"}}}}}
			got := strings.Join(hookDiff(old.Hooks, nw.Hooks), "\n")
			for _, w := range []string{"hooks[chat].events: [dead_primary] -> [dead_primary, failover_end]", "hooks[chat].headers: (changed)",
				"hooks[chat].url: https://hooks.example.com/… -> https://hooks.example.com/…", "hooks[gone]: removed"} {
				if !strings.Contains(got, w) {
					t.Errorf("hook diff lacks %q:\n%s", w, got)
				}
			}
			if strings.Contains(got, "s3cret") {
				t.Errorf("hook diff shows a secret:\n%s", got)
			}
		}},
		{"remove a listener, change another", func(c *Config) {
			c.Listeners = c.Listeners[:1]
			c.Listeners[0].Address = "127.0.0.1:7446"
		}, []string{"listeners:\n  - ro  127.0.0.1:6447 -> main (replica)\n  ~ rw  address: 127.0.0.1:6446 -> 127.0.0.1:7446", "routes: 6 -> 3 (3 removed, 0 added)"}, nil},
		{"node address and promotion", func(c *Config) {
			c.Clusters[0].Nodes[1].Address = "127.0.0.1:4407"
			c.Clusters[0].Nodes[1].Promotion = PromotionMustNot
		}, []string{"  ~ main/db2\n      address: 127.0.0.1:3307 -> 127.0.0.1:4407\n      promotion: neutral -> must_not"}, nil},
		{"users: passwords never shown", func(c *Config) {
			c.Users[0].Password = "new-secret"
			c.Users = append(c.Users, User{Name: "report", PasswordHash: "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"})
			c.Credentials.Monitor.Password = "another-secret"
		}, []string{"users:\n  ~ app  password: (changed)\n  + report", "credentials.monitor.password  (changed)"}, nil},
		{"cluster flavor, fallback and guard", func(c *Config) {
			c.Clusters[0].Flavor = FlavorMySQL
			f := false
			c.Clusters[0].ReadRouting.FallbackToPrimary = &f
			half := 0.5
			c.Versioning.Guard.MaxRemovedFraction = &half
		}, []string{"clusters:\n  ~ main  flavor: mariadb -> mysql", "clusters[main].read_routing.fallback_to_primary  true -> false", "config.guard.max_removed_fraction  0.2 -> 0.5"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := guardBase()
			next := cloneForTest(t, old)
			tt.mutate(next)
			d := ComputeDiff(old, next)
			s := d.String()
			for _, w := range tt.want {
				if !strings.Contains(s, w) {
					t.Errorf("diff does not contain %q:\n%s", w, s)
				}
			}
			for _, secret := range []string{"secret", "2470C0C0"} {
				if strings.Contains(s, secret) || strings.Contains(fmt.Sprintf("%+v", d), secret) {
					t.Errorf("diff shows a secret:\n%s", s)
				}
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

func TestDiffFromNothing(t *testing.T) {
	d := ComputeDiff(nil, guardBase())
	if len(d.Listeners) != 2 || len(d.Clusters) != 1 || len(d.Nodes) != 3 || len(d.Users) != 1 || d.RoutesBefore != 0 || d.RoutesAfter != 6 {
		t.Fatalf("diff from nothing: %+v", d)
	}
	for _, c := range d.Listeners {
		if c.Kind != Added {
			t.Errorf("%+v not added", c)
		}
	}
	d = ComputeDiff(guardBase(), nil)
	if d.RemovedRoutes() != 6 || len(d.Nodes) != 3 || d.Nodes[0].Kind != Removed {
		t.Fatalf("diff to nothing: %+v", d)
	}
}

func TestRestartOnly(t *testing.T) {
	cur := guardBase()
	next := guardBase()
	next.Listeners[0].Address = "127.0.0.1:7446"
	next.Admin.Address = "127.0.0.1:9999"
	next.Clusters[0].ReadRouting.MaxLag = Duration(3 * time.Second)
	got := ComputeDiff(cur, next).RestartOnly()
	want := []string{"listener rw changed", "admin.address"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("RestartOnly = %q, want %q", got, want)
	}
	if ro := ComputeDiff(cur, guardBase()).RestartOnly(); len(ro) != 0 {
		t.Fatalf("no change: %q", ro)
	}
}
