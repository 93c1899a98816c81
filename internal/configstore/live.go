package configstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// ReadLive reads what the guard needs to know about the running system:
// each cluster's primary and serving replicas from the published
// topo.ClusterState documents, and the open sessions per listener from the
// proxies' topo.ProxyRegistration documents (a proxy without a Sessions map
// is listed in Live.SessionsUnknown), the drained nodes from each cluster's
// topo.DrainedNodes and the sessions per node from the registrations'
// BackendSessions. Documents that do not decode are skipped.
func ReadLive(ctx context.Context, st topo.Store, keys topo.Keys) (config.Live, error) {
	live := config.Live{Sessions: map[string]int{}, Clusters: map[string]config.LiveCluster{}}
	kvs, err := st.List(ctx, keys.ClustersPrefix())
	if err != nil {
		return live, fmt.Errorf("configstore: read cluster states: %w", err)
	}
	drained := map[string][]string{}
	for _, kv := range kvs {
		if strings.HasSuffix(kv.Key, "/drained") {
			var d topo.DrainedNodes
			if json.Unmarshal(kv.Value, &d) == nil {
				c := strings.TrimSuffix(strings.TrimPrefix(kv.Key, keys.ClustersPrefix()), "/drained")
				for n := range d.Nodes {
					drained[c] = append(drained[c], n)
				}
			}
			continue
		}
	}
	for _, kv := range kvs {
		if !strings.HasSuffix(kv.Key, "/state") {
			continue
		}
		var cs topo.ClusterState
		if json.Unmarshal(kv.Value, &cs) != nil || cs.Cluster == "" {
			continue
		}
		lc := config.LiveCluster{Primary: cs.Primary, Drained: drained[cs.Cluster], NodeSessions: map[string]int{}}
		sort.Strings(lc.Drained)
		for _, n := range cs.Nodes {
			if n.Serving && n.Name != cs.Primary {
				lc.Serving = append(lc.Serving, n.Name)
			}
		}
		live.Clusters[cs.Cluster] = lc
	}
	pkvs, err := st.List(ctx, keys.Proxies())
	if err != nil {
		return live, fmt.Errorf("configstore: read proxy registrations: %w", err)
	}
	for _, kv := range pkvs {
		p, err := topo.DecodeProxyRegistration(kv.Value)
		if err != nil || p.Unverified != "" {
			continue // unreadable, or not written by a proxy holding the integrity key
		}
		if p.Sessions == nil {
			id := p.ID
			if id == "" {
				id = strings.TrimPrefix(kv.Key, keys.Proxies())
			}
			live.SessionsUnknown = append(live.SessionsUnknown, id)
			continue
		}
		for l, n := range p.Sessions {
			live.Sessions[l] += n
		}
		for _, b := range p.BackendSessions {
			if lc, ok := live.Clusters[b.Cluster]; ok && b.Sessions > 0 {
				lc.NodeSessions[b.Node] += b.Sessions
			}
		}
	}
	return live, nil
}
