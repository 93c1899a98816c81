package config

import (
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strings"
)

// Route is one path a client connection can take through Switchyard: a
// listener, the cluster it serves and one node of that cluster. Which node a
// primary listener uses is discovered (the current primary), and a replica
// listener spreads over serving replicas, so every node of the cluster is a
// possible target of every listener of the cluster: a config with listeners
// rw and ro on a cluster of three nodes has six routes. Removing a listener
// removes its routes; removing a node removes one route per listener of its
// cluster.
type Route struct {
	Listener string `json:"listener"`
	Cluster  string `json:"cluster"`
	Node     string `json:"node"`
	// Role is the listener's role (primary or replica).
	Role string `json:"role"`
}

// String formats as "listener -> cluster/node".
func (r Route) String() string { return r.Listener + " -> " + r.Cluster + "/" + r.Node }

// Routes returns every route of c, in listener then node order. A nil
// config has none.
func (c *Config) Routes() []Route {
	if c == nil {
		return nil
	}
	var out []Route
	for _, l := range c.Listeners {
		cl := c.Cluster(l.Cluster)
		if cl == nil {
			continue
		}
		for _, n := range cl.Nodes {
			out = append(out, Route{Listener: l.Name, Cluster: cl.Name, Node: n.Name, Role: l.Role})
		}
	}
	return out
}

// ChangeKind says how an item changed between two configs.
type ChangeKind string

// The kinds of change.
const (
	Added   ChangeKind = "added"
	Removed ChangeKind = "removed"
	Changed ChangeKind = "changed"
)

// Change is one item that differs between two configs.
type Change struct {
	Kind ChangeKind `json:"kind"`
	// Name identifies the item: a listener, cluster or user name;
	// "cluster/node" for a node; "listener -> cluster/node" for a route; the
	// field path (`probe.interval`, `clusters[main].read_routing.max_lag`)
	// for a policy.
	Name string `json:"name"`
	// Details describe the item (added, removed) or each changed field as
	// "field: old -> new" (changed). Secrets (password, password_env,
	// password_file, password_hash) are never shown, only "(changed)".
	Details []string `json:"details,omitempty"`
}

// Diff is what changes from one config to another, by kind of item. Each
// list is sorted by name; an empty Diff means the configs are equivalent.
type Diff struct {
	Listeners []Change `json:"listeners,omitempty"`
	Clusters  []Change `json:"clusters,omitempty"`
	Nodes     []Change `json:"nodes,omitempty"`
	Users     []Change `json:"users,omitempty"`
	// Routes lists added and removed routes (see Route).
	Routes []Change `json:"routes,omitempty"`
	// Policies are every other setting: each cluster's flavor and
	// read_routing, and the etcd, admin, credentials, probe, proxy,
	// switchover and config sections, one change per field.
	Policies []Change `json:"policies,omitempty"`
	// RoutesBefore and RoutesAfter count the routes of the old and new
	// config.
	RoutesBefore int `json:"routes_before"`
	RoutesAfter  int `json:"routes_after"`
}

// Empty reports whether nothing changes.
func (d Diff) Empty() bool {
	return len(d.Listeners)+len(d.Clusters)+len(d.Nodes)+len(d.Users)+len(d.Routes)+len(d.Policies) == 0
}

// restartOnlyPrefixes are the settings the running processes read only at
// start: the embedded or external etcd, the admin endpoint (address,
// tokens, TLS files' names, metrics_auth, whether it serves profiles).
var restartOnlyPrefixes = []string{"etcd.", "admin."}

// RestartOnly lists the changes of d that the running proxies and `up`
// processes do not apply until they restart, one line each: every listener
// change (a listener is bound at start: added, removed, new address, cluster
// or role) and the etcd and admin settings. The rest of the diff is
// applied live. Empty when nothing needs a restart.
func (d Diff) RestartOnly() []string {
	var out []string
	for _, c := range d.Listeners {
		out = append(out, fmt.Sprintf("listener %s %s", c.Name, c.Kind))
	}
	return append(out, d.RestartOnlySettings()...)
}

// RestartOnlySettings is RestartOnly without the listener changes: the
// etcd and admin.address settings, which a process without listeners (a
// controller) also reads only at start.
func (d Diff) RestartOnlySettings() []string {
	var out []string
	for _, c := range d.Policies {
		for _, p := range restartOnlyPrefixes {
			if strings.HasPrefix(c.Name, p) {
				out = append(out, c.Name)
				break
			}
		}
	}
	return out
}

// RemovedRoutes counts the routes the new config removes.
func (d Diff) RemovedRoutes() int {
	n := 0
	for _, r := range d.Routes {
		if r.Kind == Removed {
			n++
		}
	}
	return n
}

// String renders the diff for people, one section per kind of item:
//
//	listeners:
//	  + ro2  127.0.0.1:6448 -> main (replica)
//	nodes:
//	  - main/db3  10.0.1.3:3306 (promotion neutral)
//	routes: 6 -> 4 (2 removed)
//	  - rw -> main/db3
//	policies:
//	  ~ clusters[main].read_routing.max_lag: 10s -> 5s
//
// "no changes" when the diff is empty.
func (d Diff) String() string {
	if d.Empty() {
		return "no changes\n"
	}
	var b strings.Builder
	section := func(title string, cs []Change) {
		if len(cs) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		writeChanges(&b, cs)
	}
	section("listeners", d.Listeners)
	section("clusters", d.Clusters)
	section("nodes", d.Nodes)
	section("users", d.Users)
	if len(d.Routes) > 0 || d.RoutesBefore != d.RoutesAfter {
		added := len(d.Routes) - d.RemovedRoutes()
		fmt.Fprintf(&b, "routes: %d -> %d (%d removed, %d added)\n", d.RoutesBefore, d.RoutesAfter, d.RemovedRoutes(), added)
		writeChanges(&b, d.Routes)
	}
	section("policies", d.Policies)
	return b.String()
}

func writeChanges(b *strings.Builder, cs []Change) {
	for _, c := range cs {
		mark := "~"
		switch c.Kind {
		case Added:
			mark = "+"
		case Removed:
			mark = "-"
		}
		if c.Kind == Changed && len(c.Details) > 1 {
			fmt.Fprintf(b, "  %s %s\n", mark, c.Name)
			for _, d := range c.Details {
				fmt.Fprintf(b, "      %s\n", d)
			}
			continue
		}
		if len(c.Details) == 0 {
			fmt.Fprintf(b, "  %s %s\n", mark, c.Name)
			continue
		}
		fmt.Fprintf(b, "  %s %s  %s\n", mark, c.Name, strings.Join(c.Details, "; "))
	}
}

// ComputeDiff returns what changes from old to new. A nil old (no config
// yet) makes everything of new an addition; a nil new makes everything of
// old a removal. It is a pure function of its arguments.
func ComputeDiff(old, new *Config) Diff {
	if old == nil {
		old = &Config{}
	}
	if new == nil {
		new = &Config{}
	}
	var d Diff

	// Listeners.
	d.Listeners = diffNamed(old.Listeners, new.Listeners,
		func(l Listener) string { return l.Name },
		func(l Listener) []string {
			return []string{fmt.Sprintf("%s -> %s (%s)", l.Address, l.Cluster, l.Role)}
		},
		func(a, b Listener) []string { return leafDiff("", reflect.ValueOf(a), reflect.ValueOf(b), "name") })

	// Clusters (flavor only; nodes and read_routing have their own lists).
	d.Clusters = diffNamed(old.Clusters, new.Clusters,
		func(c Cluster) string { return c.Name },
		func(c Cluster) []string {
			return []string{fmt.Sprintf("flavor %s, %d nodes", c.Flavor, len(c.Nodes))}
		},
		func(a, b Cluster) []string {
			if a.Flavor != b.Flavor {
				return []string{fmt.Sprintf("flavor: %s -> %s", a.Flavor, b.Flavor)}
			}
			return nil
		})

	// Nodes, keyed cluster/node.
	type keyedNode struct {
		key string
		n   Node
	}
	nodesOf := func(c *Config) []keyedNode {
		var out []keyedNode
		for _, cl := range c.Clusters {
			for _, n := range cl.Nodes {
				out = append(out, keyedNode{cl.Name + "/" + n.Name, n})
			}
		}
		return out
	}
	d.Nodes = diffNamed(nodesOf(old), nodesOf(new),
		func(k keyedNode) string { return k.key },
		func(k keyedNode) []string {
			return []string{fmt.Sprintf("%s (promotion %s)", k.n.Address, k.n.Promotion)}
		},
		func(a, b keyedNode) []string { return leafDiff("", reflect.ValueOf(a.n), reflect.ValueOf(b.n), "name") })

	// Users: never show secrets.
	d.Users = diffNamed(old.Users, new.Users,
		func(u User) string { return u.Name },
		func(u User) []string { return nil },
		func(a, b User) []string { return leafDiff("", reflect.ValueOf(a), reflect.ValueOf(b), "name") })

	// Routes.
	before, after := old.Routes(), new.Routes()
	d.RoutesBefore, d.RoutesAfter = len(before), len(after)
	d.Routes = diffNamed(before, after,
		func(r Route) string { return r.String() },
		func(Route) []string { return nil },
		func(a, b Route) []string {
			if a.Role != b.Role {
				return []string{fmt.Sprintf("role: %s -> %s", a.Role, b.Role)}
			}
			return nil
		})

	// Policies: per-cluster read_routing, then the global sections.
	oldCl := map[string]Cluster{}
	for _, c := range old.Clusters {
		oldCl[c.Name] = c
	}
	var pol []string
	for _, c := range new.Clusters {
		if o, ok := oldCl[c.Name]; ok {
			pol = append(pol, leafDiff("clusters["+c.Name+"].read_routing", reflect.ValueOf(o.ReadRouting), reflect.ValueOf(c.ReadRouting))...)
			pol = append(pol, leafDiff("clusters["+c.Name+"].failover", reflect.ValueOf(o.Failover), reflect.ValueOf(c.Failover))...)
			if o.Durability != c.Durability {
				pol = append(pol, fmt.Sprintf("clusters[%s].durability: %s -> %s", c.Name, o.Durability, c.Durability))
			}
		}
	}
	ov, nv := reflect.ValueOf(*old), reflect.ValueOf(*new)
	t := ov.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		switch f.Name {
		case "Users", "Clusters", "Listeners":
			continue
		case "Hooks":
			pol = append(pol, hookDiff(old.Hooks, new.Hooks)...)
			continue
		}
		pol = append(pol, leafDiff(yamlKey(f), ov.Field(i), nv.Field(i))...)
	}
	sort.Strings(pol)
	for _, p := range pol {
		name, detail, _ := strings.Cut(p, ": ")
		d.Policies = append(d.Policies, Change{Kind: Changed, Name: name, Details: []string{detail}})
	}
	return d
}

// diffNamed compares two lists of items by name.
func diffNamed[T any](old, new []T, name func(T) string, describe func(T) []string, changed func(a, b T) []string) []Change {
	oldBy := map[string]T{}
	for _, o := range old {
		oldBy[name(o)] = o
	}
	newBy := map[string]T{}
	var out []Change
	for _, n := range new {
		k := name(n)
		newBy[k] = n
		o, ok := oldBy[k]
		if !ok {
			out = append(out, Change{Kind: Added, Name: k, Details: describe(n)})
			continue
		}
		if ds := changed(o, n); len(ds) > 0 {
			out = append(out, Change{Kind: Changed, Name: k, Details: ds})
		}
	}
	for _, o := range old {
		if _, ok := newBy[name(o)]; !ok {
			out = append(out, Change{Kind: Removed, Name: name(o), Details: describe(o)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// secretKeys are YAML keys whose values a diff never shows.
var secretKeys = map[string]bool{"password": true, "password_env": true, "password_file": true, "password_hash": true}

// leafDiff compares two values of the same type field by field and returns
// "path: old -> new" for each differing leaf (YAML key paths). Fields whose
// YAML key is in skip are ignored; secrets show as "(changed)".
func leafDiff(path string, a, b reflect.Value, skip ...string) []string {
	for a.Kind() == reflect.Pointer {
		switch {
		case a.IsNil() && b.IsNil():
			return nil
		case a.IsNil() || b.IsNil():
			return []string{fmt.Sprintf("%s: %s -> %s", path, show(a), show(b))}
		}
		a, b = a.Elem(), b.Elem()
	}
	if a.Kind() == reflect.Struct && a.Type() != reflect.TypeFor[Duration]() {
		var out []string
	fields:
		for i := range a.NumField() {
			key := yamlKey(a.Type().Field(i))
			for _, s := range skip {
				if key == s {
					continue fields
				}
			}
			p := key
			if path != "" {
				p = path + "." + key
			}
			if secretKeys[key] {
				if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
					out = append(out, p+": (changed)")
				}
				continue
			}
			out = append(out, leafDiff(p, a.Field(i), b.Field(i))...)
		}
		return out
	}
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s -> %s", path, show(a), show(b))}
}

func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "(unset)"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Slice {
		if v.Len() == 0 {
			return "[]"
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if v.Kind() == reflect.String && v.String() == "" {
		return `""`
	}
	return fmt.Sprint(v.Interface())
}

// hookDiff compares the hooks by name: "hooks[NAME]: added (events ...)",
// "hooks[NAME]: removed", "hooks[NAME].timeout: 10s -> 5s". Header values
// and a URL's path and query (a webhook URL often holds its token) are
// never shown, only that they changed.
func hookDiff(old, new []Hook) []string {
	var out []string
	oldBy := map[string]Hook{}
	for _, h := range old {
		oldBy[h.Name] = h
	}
	newBy := map[string]bool{}
	for _, h := range new {
		newBy[h.Name] = true
		p := "hooks[" + h.Name + "]"
		o, ok := oldBy[h.Name]
		if !ok {
			target := "command " + strings.Join(h.Command, " ")
			if h.URL != "" {
				target = "url " + redactURL(h.URL)
			}
			out = append(out, fmt.Sprintf("%s: added (events %s, %s)", p, strings.Join(h.Events, ", "), target))
			continue
		}
		out = append(out, leafDiff(p, reflect.ValueOf(o), reflect.ValueOf(h), "name", "url", "headers")...)
		if o.URL != h.URL {
			out = append(out, fmt.Sprintf("%s.url: %s -> %s", p, redactURL(o.URL), redactURL(h.URL)))
		}
		if !reflect.DeepEqual(o.Headers, h.Headers) {
			out = append(out, p+".headers: (changed)")
		}
	}
	for _, h := range old {
		if !newBy[h.Name] {
			out = append(out, "hooks["+h.Name+"]: removed")
		}
	}
	return out
}

// redactURL keeps a URL's scheme and host ("https://hooks.slack.com/…").
func redactURL(s string) string {
	if s == "" {
		return `""`
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(a URL)"
	}
	out := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		out += "/…"
	}
	return out
}
