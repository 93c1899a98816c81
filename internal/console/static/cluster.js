// Switchyard web console: the cluster, findings and proxies pages (loaded after app.js; see app.js).
'use strict';

// ---------- views ----------


function route() {
  const v = (location.hash || '#cluster').slice(1);
  S.view = VIEWS[v] ? v : 'cluster';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === S.view);
  clearInterval(S.sessionsTimer);
  renderView();
}

function renderView() {
  const view = $('view');
  const node = VIEWS[S.view]();
  if (node) view.replaceChildren(node);
}

function noData() {
  if (S.fetchErr && !S.doc) return h('div', { class: 'panel error' }, 'No status yet: ' + errText(S.fetchErr));
  return h('div', { class: 'panel muted' }, 'Loading status…');
}

// probeOf returns the freshest probe of node n: the leader's last probe
// round when it is newer than the state's and the role is the same.
function probeOf(doc, cs, n) {
  const r = doc.rounds && doc.rounds[cs.cluster];
  if (r && r.nodes) {
    const rn = r.nodes.find((x) => x.name === n.name);
    if (rn && rn.role === n.role && Date.parse(rn.probe.at) > Date.parse(n.probe.at || 0)) return rn.probe;
  }
  return n.probe || {};
}

function normHost(host) {
  return host === 'localhost' || host === '::1' ? '127.0.0.1' : host;
}

// sourceOf returns the name of the node n replicates from, "" when it does
// not replicate, or "external host:port" when the source is no node of the
// cluster.
function sourceOf(cs, p) {
  if (!p.source_host) return '';
  const want = normHost(p.source_host) + ':' + p.source_port;
  for (const m of cs.nodes || []) {
    const i = m.address.lastIndexOf(':');
    if (normHost(m.address.slice(0, i)) + ':' + m.address.slice(i + 1) === want) return m.name;
  }
  return 'external ' + p.source_host + ':' + p.source_port;
}

// nodeStates lists the routing states of node n as badges' [label, class, title].
function nodeStates(doc, cs, n, p) {
  const out = [];
  const q = cs.quarantined && cs.quarantined[n.name];
  if (q) out.push(['quarantined', 'bad', q]);
  const dr = doc.drained && doc.drained[cs.cluster] && doc.drained[cs.cluster][n.name];
  if (dr) {
    const by = [dr.reason, dr.by && 'by ' + dr.by, dr.until && 'until ' + fmtTime(dr.until)].filter(Boolean).join(', ');
    out.push(dr.maintenance ? ['maintenance', 'warn', by] : ['drained', 'warn', by]);
  }
  if (!p.reachable) out.push(['unreachable', 'bad', p.error || '']);
  if (n.role === 'primary') {
    out.push(p.read_only ? ['read_only', 'bad', 'the primary is read-only'] : ['writable', 'ok', '']);
  } else if (n.serving) {
    out.push(['serving', 'ok', '']);
  } else {
    out.push(['not serving', 'warn', n.reason || '']);
  }
  return out;
}

function lagText(p) {
  if (p.lag_seconds === undefined || p.lag_seconds === null) return p.replicating ? 'lag ?' : '';
  return 'lag ' + p.lag_seconds + 's';
}

function gtidOf(p) {
  return p.gtid_current || p.gtid_binlog || p.gtid_executed || '';
}

function renderCluster() {
  if (!S.doc) return noData();
  const d = S.doc;
  const root = h('div', { class: 'data' });
  append(root, [h('div', { class: 'muted' },
    'controller leader: ', h('b', {}, d.leader || '(none)'),
    ' · controllers: ', String((d.controllers || []).length),
    ' · proxies: ', String((d.proxies || []).length),
    d.config && d.config.current ? ' · config revision ' + d.config.current.rev : '',
    ' · status generated ', ago(generatedAt(d)))]);
  if (!clusters().length) append(root, [h('div', { class: 'panel muted' }, 'No cluster state in the store yet (is a controller running?).')]);
  for (const cs of clusters()) root.append(renderOneCluster(d, cs));
  return root;
}

function renderOneCluster(d, cs) {
  const panel = h('div', { class: 'panel cluster', 'data-cluster': cs.cluster });
  const head = h('div', { class: 'cluster-head' },
    h('h2', {}, 'Cluster ' + cs.cluster),
    h('span', {}, 'primary ', h('b', { class: 'cluster-primary' }, cs.primary || '(none)')),
    h('span', {}, 'epoch ' + cs.epoch),
    badge(cs.phase || 'stable', cs.phase && cs.phase !== 'stable' ? 'warn' : 'ok'),
    cs.target ? h('span', {}, 'target ' + cs.target) : null,
    cs.maintenance ? badge('maintenance', 'warn', cs.maintenance.reason) : null,
    cs.failover_block ? badge('failover blocked until ' + fmtTime(cs.failover_block.until), 'warn', cs.failover_block.reason) : null,
    cs.auto_disabled ? badge('auto failover disabled', 'bad', cs.auto_disabled) : null,
    cs.auto_failover ? (cs.auto_failover.ready
      ? badge('auto failover ready' + (cs.auto_failover.candidate ? ' → ' + cs.auto_failover.candidate : ''), 'ok')
      : badge('auto failover: ' + (cs.auto_failover.class || 'no'), 'warn', cs.auto_failover.reason)) : null,
    h('span', { class: 'muted' }, 'state written ' + ago(cs.updated_at)));
  panel.append(head);
  const prob = d.state_problems && d.state_problems[cs.cluster];
  if (prob) panel.append(h('div', { class: 'error' }, 'State document invalid: ' + prob));
  panel.append(h('div', { class: 'topo' }, drawTopology(d, cs)));
  panel.append(nodeTable(d, cs));
  return panel;
}

function drawTopology(d, cs) {
  const nodes = cs.nodes || [];
  const info = new Map();
  for (const n of nodes) {
    const p = probeOf(d, cs, n);
    info.set(n.name, { n, p, src: sourceOf(cs, p), children: [] });
  }
  const roots = [];
  for (const x of info.values()) {
    const parent = info.get(x.src);
    if (parent && x.src !== x.n.name) parent.children.push(x); else roots.push(x);
  }
  roots.sort((a, b) => (b.n.role === 'primary') - (a.n.role === 'primary'));
  const W = 230, H = 112, GX = 24, GY = 56;
  let leaf = 0;
  let depth = 0;
  const seen = new Set();
  const place = (x, lvl) => {
    if (seen.has(x)) return;
    seen.add(x);
    x.y = lvl;
    depth = Math.max(depth, lvl);
    if (!x.children.length) { x.x = leaf++; return; }
    for (const c of x.children) place(c, lvl + 1);
    const xs = x.children.filter((c) => c.x !== undefined).map((c) => c.x);
    x.x = xs.length ? (Math.min(...xs) + Math.max(...xs)) / 2 : leaf++;
  };
  for (const r of roots) place(r, 0);
  for (const x of info.values()) if (!seen.has(x)) place(x, 0); // cycles
  const width = Math.max(leaf, 1) * (W + GX) + GX;
  const height = (depth + 1) * (H + GY) + 10;
  const svg = s('svg', { viewBox: '0 0 ' + width + ' ' + height, role: 'img', 'aria-label': 'replication topology of ' + cs.cluster });
  svg.style.maxWidth = width + 'px'; // CSSOM, allowed by the page's CSP (a style attribute is not)
  const pos = (x) => [GX + x.x * (W + GX), 10 + x.y * (H + GY)];
  for (const x of info.values()) {
    for (const c of x.children) {
      const [px, py] = pos(x);
      const [cx, cy] = pos(c);
      const broken = c.p.io_running !== 'Yes' || !c.p.sql_running;
      svg.append(s('path', { class: 'edge' + (broken ? ' broken' : ''),
        d: `M${px + W / 2},${py + H} C${px + W / 2},${py + H + GY / 2} ${cx + W / 2},${cy - GY / 2} ${cx + W / 2},${cy}` }));
      const label = [lagText(c.p), broken ? 'IO ' + (c.p.io_running || 'No') + ' SQL ' + (c.p.sql_running ? 'Yes' : 'No') : ''].filter(Boolean).join(' · ');
      svg.append(s('text', { class: 'edge-label', x: cx + W / 2 + 6, y: cy - 8, text: label }));
    }
  }
  for (const x of info.values()) {
    const [px, py] = pos(x);
    const st = nodeStates(d, cs, x.n, x.p);
    const cls = ['node', x.n.role];
    if (!x.p.reachable) cls.push('down');
    for (const [l] of st) if (['quarantined', 'drained', 'maintenance'].includes(l)) cls.push(l);
    const g = s('g', { class: cls.join(' '), 'data-node': x.n.name, 'data-role': x.n.role, transform: `translate(${px},${py})` });
    g.append(s('rect', { width: W, height: H, rx: 6 }));
    g.append(s('text', { class: 'title', x: 8, y: 17, text: x.n.name + '  ' + x.n.role.toUpperCase() }));
    g.append(s('text', { x: 8, y: 33, text: x.n.address }));
    const worst = st.some(([, c]) => c === 'bad') ? 'st-bad' : st.some(([, c]) => c === 'warn') ? 'st-warn' : 'st-ok';
    g.append(s('text', { class: worst, x: 8, y: 49, text: st.map(([l]) => l).join(', ') }));
    const src = x.src && !info.get(x.src) ? 'from ' + x.src : '';
    g.append(s('text', { x: 8, y: 65, text: [x.n.role !== 'primary' ? lagText(x.p) : '', 'read_only ' + (x.p.read_only ? 'ON' : 'OFF'), src].filter(Boolean).join(' · ') }));
    g.append(s('text', { class: 'mono', x: 8, y: 81, text: 'gtid ' + shorten(gtidOf(x.p) || '-', 30) }));
    g.append(s('text', { x: 8, y: 97, text: x.p.reachable ? 'probe ' + ago(x.p.at) + (x.p.latency_ms ? ', ' + x.p.latency_ms.toFixed(1) + 'ms' : '') : shorten('probe failed: ' + (x.p.error || ''), 36) }));
    const tip = s('title', { text: [x.n.reason, x.p.error, x.p.last_io_error, x.p.last_sql_error, 'GTID ' + gtidOf(x.p)].filter(Boolean).join('\n') });
    g.append(tip);
    svg.append(g);
  }
  return svg;
}

function nodeTable(d, cs) {
  const rows = (cs.nodes || []).map((n) => {
    const p = probeOf(d, cs, n);
    return h('tr', { 'data-node': n.name, 'data-role': n.role },
      h('td', {}, h('b', {}, n.name), h('div', { class: 'muted' }, n.address)),
      h('td', {}, badge(n.role, n.role === 'primary' ? 'primary' : n.role === 'replica' ? 'info' : 'bad')),
      h('td', {}, nodeStates(d, cs, n, p).map(([l, c, t]) => badge(l, c, t)), n.reason ? h('div', { class: 'muted' }, n.reason) : null),
      h('td', {}, sourceOf(cs, p) || '-', p.source_host ? h('div', { class: 'muted' }, 'IO ' + (p.io_running || '-') + ' · SQL ' + (p.sql_running ? 'Yes' : 'No')) : null),
      h('td', {}, n.role === 'primary' ? '-' : (lagText(p) || '-')),
      h('td', {}, p.read_only ? 'ON' : 'OFF'),
      h('td', { class: 'mono' }, gtidOf(p) || '-'),
      h('td', {}, p.reachable ? ago(p.at) : h('span', { class: 'badc' }, ago(p.at) + ' ' + (p.error || 'unreachable'))),
      h('td', { class: 'error' }, [p.last_io_error, p.last_sql_error].filter(Boolean).join('\n')));
  });
  return h('div', { class: 'scroll' }, h('table', { class: 'nodes' },
    h('thead', {}, h('tr', {}, ['node', 'role', 'state', 'source', 'lag', 'read_only', 'GTID position', 'last probe', 'replication errors'].map((t) => h('th', {}, t)))),
    h('tbody', {}, rows)));
}

// ---------- findings and alarms ----------

function collectFindings() {
  const out = [];
  const d = S.doc;
  if (!d) return out;
  for (const cs of clusters()) {
    for (const a of cs.alarms || []) out.push({ cluster: cs.cluster, kind: 'alarm', code: a.code, node: a.node, text: a.message, since: a.since, sev: 'bad' });
    for (const a of cs.analysis || []) out.push({ cluster: cs.cluster, kind: 'finding', code: a.code, node: a.node, text: a.detail || '', sev: 'warn' });
    if (cs.auto_disabled) out.push({ cluster: cs.cluster, kind: 'alarm', code: 'auto_failover_disabled', text: cs.auto_disabled, sev: 'bad' });
    if (cs.failover_block) out.push({ cluster: cs.cluster, kind: 'block', code: 'failover_blocked', text: cs.failover_block.reason + ' (until ' + fmtTime(cs.failover_block.until) + ')', sev: 'warn' });
    for (const [node, why] of Object.entries(cs.quarantined || {})) out.push({ cluster: cs.cluster, kind: 'alarm', code: 'quarantined', node, text: why, sev: 'bad' });
  }
  for (const [c, why] of Object.entries(d.state_problems || {})) out.push({ cluster: c, kind: 'alarm', code: 'state_invalid', text: why, sev: 'bad' });
  for (const p of d.proxies || []) {
    if (p.unverified) out.push({ cluster: '', kind: 'proxy ' + p.id, code: 'unverified', text: 'this proxy report fails its integrity check, it is not shown as fact: ' + p.unverified, sev: 'bad' });
    if (p.config_alarm) out.push({ cluster: '', kind: 'proxy ' + p.id, code: 'config_alarm', text: p.config_alarm, sev: 'bad' });
    for (const [c, why] of Object.entries(p.state_alarms || {})) out.push({ cluster: c, kind: 'proxy ' + p.id, code: 'state_alarm', text: why, sev: 'bad' });
  }
  for (const c of (d.config && d.config.consumers) || []) {
    if (c.alarm) out.push({ cluster: '', kind: c.name + ' ' + c.id, code: 'config', text: c.alarm.reason + (c.alarm.rev ? ' (revision ' + c.alarm.rev + ')' : ''), since: c.alarm.since, sev: 'bad' });
  }
  return out;
}

function countFindings() {
  const n = collectFindings().filter((f) => f.sev === 'bad').length;
  $('nav-findings').textContent = n ? String(n) : '';
}

function renderFindings() {
  if (!S.doc) return noData();
  const f = collectFindings();
  const root = h('div', { class: 'data' }, h('h2', {}, 'Findings and alarms'));
  if (!f.length) {
    root.append(h('div', { class: 'panel okc', id: 'no-findings' }, 'No findings and no alarms.'));
    return root;
  }
  root.append(h('div', { class: 'panel scroll' }, h('table', { id: 'findings' },
    h('thead', {}, h('tr', {}, ['', 'cluster', 'source', 'code', 'node', 'what', 'since'].map((t) => h('th', {}, t)))),
    h('tbody', {}, f.map((x) => h('tr', { 'data-code': x.code },
      h('td', {}, badge(x.sev === 'bad' ? 'alarm' : 'finding', x.sev)),
      h('td', {}, x.cluster || '-'), h('td', {}, x.kind), h('td', { class: 'mono' }, x.code),
      h('td', {}, x.node || ''), h('td', {}, x.text), h('td', {}, x.since ? ago(x.since) : '')))))));
  root.append(h('p', { class: 'muted' }, 'Acknowledge a failover block or a finding from Actions → ack.'));
  return root;
}

// ---------- proxies ----------

function renderProxies() {
  if (!S.doc) return noData();
  const d = S.doc;
  const epochs = Object.fromEntries(clusters().map((c) => [c.cluster, c.epoch]));
  const cur = d.config && d.config.current ? d.config.current.rev : 0;
  const root = h('div', { class: 'data' }, h('h2', {}, 'Proxies'));
  const prows = (d.proxies || []).map((p) => h('tr', { 'data-proxy': p.id },
    h('td', {}, h('b', {}, p.id), p.unverified ? [' ', badge('UNVERIFIED', 'bad')] : ''),
    h('td', {}, (p.listeners || []).join(', ')),
    h('td', {}, Object.entries(p.epochs || {}).map(([c, e]) =>
      badge(c + ' ' + e + (epochs[c] !== undefined && epochs[c] !== e ? ' (cluster ' + epochs[c] + ')' : ''), epochs[c] === e ? 'ok' : 'warn'))),
    h('td', {}, p.config_rev ? badge('rev ' + p.config_rev, cur && p.config_rev !== cur ? 'warn' : 'ok') : '-',
      p.config_alarm ? h('div', { class: 'error' }, p.config_alarm) : null),
    h('td', {}, Object.entries(p.sessions || {}).map(([l, n]) => l + ': ' + n).join(', ') || '-'),
    h('td', {}, Object.entries(p.state_alarms || {}).map(([c, w]) => h('div', { class: 'error' }, c + ': ' + w)),
      Object.entries(p.failsafe || {}).filter(([, f]) => !f.ended).map(([c, f]) => badge('failsafe ' + c, 'warn', 'since ' + fmtTime(f.since)))),
    h('td', {}, ago(p.updated_at))));
  root.append(h('div', { class: 'panel scroll' }, prows.length ? h('table', { id: 'proxies' },
    h('thead', {}, h('tr', {}, ['proxy', 'listeners', 'epochs', 'config revision', 'sessions', 'alarms', 'updated'].map((t) => h('th', {}, t)))),
    h('tbody', {}, prows)) : h('span', { class: 'muted' }, 'No proxy registered.')));
  const cons = (d.config && d.config.consumers) || [];
  root.append(h('h3', {}, 'Config applied by every process', cur ? ' (current revision ' + cur + ')' : ''));
  root.append(h('div', { class: 'panel scroll' }, cons.length ? h('table', {},
    h('thead', {}, h('tr', {}, ['process', 'id', 'applied revision', 'rejected', 'pending restart', 'alarm', 'updated'].map((t) => h('th', {}, t)))),
    h('tbody', {}, cons.map((c) => h('tr', {},
      h('td', {}, c.name), h('td', {}, c.id),
      h('td', {}, badge('rev ' + c.applied_rev, cur && c.applied_rev !== cur ? 'warn' : 'ok')),
      h('td', {}, c.rejected ? String(c.rejected) : ''),
      h('td', {}, (c.pending_restart || []).join(', ')),
      h('td', { class: 'error' }, c.alarm ? c.alarm.reason : ''),
      h('td', {}, ago(c.updated_at)))))) : h('span', { class: 'muted' }, 'No process reported its config.')));
  root.append(h('p', { class: 'muted' }, 'Controller leader: ' + (d.leader || '(none)') + '; controllers: ' + ((d.controllers || []).join(', ') || '(none)')));
  return root;
}
