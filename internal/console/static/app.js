// Switchyard web console. Plain JavaScript, no build step: it reads and acts
// through the admin API (/api/v1/..., /api/status where /api/v1/status is
// not served) with the bearer token typed into the login form.
'use strict';

const POLL_MS = 2000;          // status refresh period
const STALE_AFTER_MS = 15000;  // status older than this is marked stale
const EVENTS_POLL_MS = 5000;   // event polling when the stream is not served
const TOKEN_KEY = 'switchyard.token';

const S = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  whoami: null,         // {name, role, auth} or null when unknown
  whoamiNote: '',
  doc: null,            // last status document
  legacy: false,        // true: /api/v1/status is 404, reading /api/status
  lastOK: 0,            // ms of the last successful status fetch
  fetchErr: null,       // error of the last status fetch, null when it worked
  view: 'cluster',
  eventCluster: '',
  events: new Map(),    // id -> event of eventCluster
  eventsNext: '',
  eventsMode: '',       // "stream" | "polling" | "status" | ""
  eventsAbort: null,
  eventsTimer: 0,
  sessionsTimer: 0,
};

// ---------- DOM helpers ----------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'text') el.textContent = v; else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) if (c) el.append(c);
  return el;
}

function badge(label, cls, title) {
  return h('span', { class: 'badge b-' + (cls || 'muted'), title: title || undefined }, label);
}

function $(id) { return document.getElementById(id); }

function fmtDur(ms) {
  if (!isFinite(ms)) return '?';
  if (ms < 0) ms = 0;
  if (ms < 1000) return Math.round(ms) + 'ms';
  const sec = ms / 1000;
  if (sec < 60) return sec.toFixed(sec < 10 ? 1 : 0) + 's';
  if (sec < 3600) return Math.floor(sec / 60) + 'm ' + Math.floor(sec % 60) + 's';
  if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
  return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
}

function ago(t) {
  const ms = typeof t === 'number' ? t : Date.parse(t);
  if (!ms || isNaN(ms) || ms <= 0) return '';
  return fmtDur(Date.now() - ms) + ' ago';
}

function fmtTime(t) {
  const d = new Date(t);
  if (isNaN(d)) return '';
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function shorten(str, n) {
  str = String(str || '');
  return str.length > n ? str.slice(0, n - 1) + '…' : str;
}

// ---------- API ----------

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || ('HTTP ' + status));
    this.status = status;
    this.body = body || {};
  }
}

function errText(e) {
  if (!(e instanceof APIError)) return String(e && e.message || e);
  let t = e.message;
  if (e.status === 404 && !e.body.code) t = 'not served by this admin endpoint (404)';
  else if (e.status && !t.startsWith(String(e.status))) t = e.status + ' ' + t;
  if (e.body.override) t += ' (override: ' + e.body.override + ')';
  return t;
}

function authHeaders(extra) {
  const hd = Object.assign({ Accept: 'application/json' }, extra || {});
  if (S.token) hd.Authorization = 'Bearer ' + S.token;
  return hd;
}

async function api(method, path, body) {
  const opts = { method, headers: authHeaders(), cache: 'no-store', signal: AbortSignal.timeout(10000) };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    throw new APIError(0, { error: 'admin endpoint unreachable: ' + e.message, code: 'unavailable' });
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!resp.ok) {
    const b = data && typeof data === 'object' && !Array.isArray(data) ? data : { error: text.trim() || resp.statusText };
    if (resp.status === 401) needLogin(b.error || 'the admin API wants a token');
    throw new APIError(resp.status, b);
  }
  return data;
}

// ---------- login / whoami ----------

function needLogin(why) {
  const b = $('banner-auth');
  b.textContent = 'Authentication needed: ' + why + '. Log in with a bearer token.';
  b.hidden = false;
  $('login').hidden = false;
  if (S.token) $('login-error').textContent = 'The token was refused: ' + why;
}

async function loadWhoami() {
  try {
    S.whoami = await api('GET', '/api/v1/whoami');
    S.whoamiNote = '';
    $('banner-auth').hidden = true;
    $('login').hidden = true;
    $('login-error').textContent = '';
  } catch (e) {
    S.whoami = null;
    if (e.status === 404) S.whoamiNote = 'identity not served by this endpoint';
    else if (e.status !== 401) S.whoamiNote = 'whoami failed: ' + errText(e);
  }
  renderWho();
}

function renderWho() {
  const w = $('who');
  w.replaceChildren();
  if (S.whoami) {
    if (S.whoami.auth === false) {
      append(w, [badge('no auth', 'warn', 'no tokens are configured: the admin API answers without one (loopback only)')]);
    } else {
      append(w, [h('span', { id: 'whoami' }, S.whoami.name + ' (' + S.whoami.role + ')')]);
    }
  } else if (S.whoamiNote) {
    append(w, [h('span', { class: 'muted' }, S.whoamiNote)]);
  }
  if (S.token) {
    append(w, [h('button', { onclick: logout }, 'Log out')]);
  } else {
    append(w, [h('button', { onclick: () => { $('login').hidden = false; $('login-token').focus(); } }, 'Log in')]);
  }
}

function canAct() {
  return !S.whoami || S.whoami.auth === false || S.whoami.role === 'operator';
}

function logout() {
  S.token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  S.whoami = null;
  loadWhoami();
}

function setupLogin() {
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const t = $('login-token').value.trim();
    if (!t) return;
    S.token = t;
    sessionStorage.setItem(TOKEN_KEY, t);
    $('login-token').value = '';
    $('login-error').textContent = '';
    await loadWhoami();
    if (!S.whoami && !S.whoamiNote) {
      S.token = '';
      sessionStorage.removeItem(TOKEN_KEY);
      renderWho();
    } else {
      pollStatusOnce();
    }
  });
}

// ---------- status polling and staleness ----------

async function fetchStatus() {
  if (!S.legacy) {
    try {
      return await api('GET', '/api/v1/status');
    } catch (e) {
      if (e.status !== 404) throw e;
      S.legacy = true;
    }
  }
  return api('GET', '/api/status');
}

async function pollStatusOnce() {
  try {
    S.doc = await fetchStatus();
    S.lastOK = Date.now();
    S.fetchErr = null;
  } catch (e) {
    S.fetchErr = e;
  }
  $('source').textContent = S.legacy ? 'status: /api/status' : 'status: /api/v1/status';
  renderBanners();
  onStatus();
}

async function pollLoop() {
  await pollStatusOnce();
  setTimeout(pollLoop, POLL_MS);
}

function generatedAt(d) {
  return Date.parse(d.generated_at || d.collected_at || '');
}

function renderBanners() {
  const d = S.doc;
  const store = [];
  const stale = [];
  if (S.fetchErr && S.fetchErr.status !== 401) { // a 401 raises the login banner instead
    const e = S.fetchErr;
    if (e.status === 503 || (e.body && e.body.code === 'unavailable' && e.status !== 0)) {
      store.push('Topology store unreachable: ' + e.message + '. Actions will fail until it answers.');
    }
    stale.push('Data is stale: the status fetch is failing (' + errText(e) + ')' +
      (S.lastOK ? '; showing what was read ' + ago(S.lastOK) + '.' : '; nothing was read yet.'));
  }
  if (d) {
    if (d.store_reachable === false) store.push('Topology store unreachable: the status shown is the last the endpoint could read.');
    if (d.stale === true) stale.push('Data is stale: the endpoint marks this status as stale.');
    const g = generatedAt(d);
    if (!S.fetchErr && !isNaN(g) && Date.now() - g > STALE_AFTER_MS) {
      stale.push('Data is stale: the status was generated ' + ago(g) + '.');
    }
  }
  const bs = $('banner-store');
  bs.textContent = store.join(' ');
  bs.hidden = store.length === 0;
  const bt = $('banner-stale');
  bt.textContent = stale.join(' ');
  bt.hidden = stale.length === 0;
  document.body.classList.toggle('stale', stale.length > 0);
}

function clusters() {
  return (S.doc && S.doc.clusters) || [];
}

function clusterNames() {
  return clusters().map((c) => c.cluster);
}

function onStatus() {
  countFindings();
  if (!S.eventCluster && clusterNames().length) {
    S.eventCluster = clusterNames()[0];
    startEvents();
  }
  if (S.eventsMode === 'status') mergeStatusEvents();
  if (['cluster', 'findings', 'proxies'].includes(S.view)) renderView();
  if (S.view === 'events') renderEventsList();
  if (S.view === 'actions') refreshActionChoices();
}

// ---------- views ----------

const VIEWS = {
  cluster: renderCluster,
  findings: renderFindings,
  events: renderEvents,
  proxies: renderProxies,
  sessions: renderSessions,
  config: renderConfig,
  actions: renderActions,
};

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

// ---------- events ----------

function stopEvents() {
  if (S.eventsAbort) S.eventsAbort.abort();
  S.eventsAbort = null;
  clearTimeout(S.eventsTimer);
}

function addEvents(list) {
  for (const e of list || []) if (e && e.id) S.events.set(e.id, e);
  if (S.events.size > 2000) {
    const keep = sortedEvents().slice(0, 1000);
    S.events = new Map(keep.map((e) => [e.id, e]));
  }
}

function sortedEvents() {
  return [...S.events.values()].sort((a, b) => (Date.parse(b.at) - Date.parse(a.at)) || (a.id < b.id ? 1 : -1));
}

function mergeStatusEvents() {
  addEvents(S.doc && S.doc.events && S.doc.events[S.eventCluster]);
}

async function loadEventsPage(before) {
  let q = '/api/v1/events?cluster=' + encodeURIComponent(S.eventCluster) + '&limit=100';
  if (before) q += '&before=' + encodeURIComponent(before);
  const r = await api('GET', q);
  addEvents(r.events);
  return r;
}

async function startEvents() {
  stopEvents();
  S.events = new Map();
  S.eventsNext = '';
  const cluster = S.eventCluster;
  if (!cluster) return;
  try {
    const r = await loadEventsPage('');
    S.eventsNext = r.next || '';
  } catch (e) {
    if (e.status === 404) {
      S.eventsMode = 'status';
      mergeStatusEvents();
      renderEventsList();
      return;
    }
  }
  streamEvents(cluster);
}

async function streamEvents(cluster) {
  const ctl = new AbortController();
  S.eventsAbort = ctl;
  try {
    const resp = await fetch('/api/v1/events/stream?cluster=' + encodeURIComponent(cluster),
      { headers: authHeaders({ Accept: 'text/event-stream' }), signal: ctl.signal, cache: 'no-store' });
    if (!resp.ok || !resp.body) throw new APIError(resp.status, { error: 'event stream: HTTP ' + resp.status });
    S.eventsMode = 'stream';
    renderEventsList();
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf = (buf + value).replace(/\r\n/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let name = 'message';
        const data = [];
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) continue;
          if (line.startsWith('event:')) name = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        }
        if (!data.length || (name !== 'event' && name !== 'message')) continue;
        try { addEvents([JSON.parse(data.join('\n'))]); } catch (_) { /* not an event */ }
        renderEventsList();
      }
    }
  } catch (e) {
    if (ctl.signal.aborted) return;
  }
  if (ctl.signal.aborted || cluster !== S.eventCluster) return;
  // The stream ended or is not served: poll, and try the stream again later.
  S.eventsMode = 'polling';
  renderEventsList();
  pollEvents(cluster, 0);
}

async function pollEvents(cluster, n) {
  if (cluster !== S.eventCluster) return;
  try {
    await loadEventsPage('');
  } catch (e) {
    if (e.status === 404) { S.eventsMode = 'status'; mergeStatusEvents(); }
  }
  renderEventsList();
  if (S.eventsMode !== 'polling') return;
  S.eventsTimer = setTimeout(() => {
    if (n >= 12) streamEvents(cluster); // retry the stream about every minute
    else pollEvents(cluster, n + 1);
  }, EVENTS_POLL_MS);
}

function renderEvents() {
  const sel = h('select', { id: 'event-cluster', onchange: (e) => { S.eventCluster = e.target.value; startEvents(); } },
    clusterNames().map((c) => h('option', { value: c, selected: c === S.eventCluster }, c)));
  const more = h('button', { id: 'events-more', onclick: async () => {
    if (!S.eventsNext) return;
    try { const r = await loadEventsPage(S.eventsNext); S.eventsNext = r.next || ''; } catch (e) { alertBox(errText(e)); }
    renderEventsList();
  } }, 'Older events');
  return h('div', {},
    h('div', { class: 'row' }, h('h2', {}, 'Event timeline'), h('label', {}, 'cluster'), sel,
      h('span', { id: 'events-mode', class: 'muted' }), more),
    h('div', { id: 'events-list', class: 'panel scroll data' }));
}

function renderEventsList() {
  const el = $('events-list');
  if (!el || S.view !== 'events') return;
  const mode = { stream: 'live (stream)', polling: 'polling every ' + EVENTS_POLL_MS / 1000 + 's (stream not available)',
    status: 'recent events from the status document only (the events API is not served)' }[S.eventsMode] || 'connecting…';
  $('events-mode').textContent = mode;
  $('events-more').disabled = !S.eventsNext || S.eventsMode === 'status';
  const evs = sortedEvents();
  if (!evs.length) { el.replaceChildren(h('span', { class: 'muted' }, 'No events.')); return; }
  el.replaceChildren(h('table', { id: 'events' },
    h('thead', {}, h('tr', {}, ['time', 'kind', 'code', 'node', 'message', 'epoch', 'actor'].map((t) => h('th', {}, t)))),
    h('tbody', {}, evs.map((e) => h('tr', { 'data-event': e.id },
      h('td', { title: e.at }, fmtTime(e.at), h('div', { class: 'muted' }, ago(e.at))),
      h('td', {}, e.kind), h('td', { class: 'mono' }, e.code || ''), h('td', {}, e.node || ''),
      h('td', {}, e.message), h('td', {}, String(e.epoch)), h('td', {}, e.actor || e.leader || ''))))));
}

// ---------- proxies ----------

function renderProxies() {
  if (!S.doc) return noData();
  const d = S.doc;
  const epochs = Object.fromEntries(clusters().map((c) => [c.cluster, c.epoch]));
  const cur = d.config && d.config.current ? d.config.current.rev : 0;
  const root = h('div', { class: 'data' }, h('h2', {}, 'Proxies'));
  const prows = (d.proxies || []).map((p) => h('tr', { 'data-proxy': p.id },
    h('td', {}, h('b', {}, p.id)),
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

// ---------- sessions ----------

function renderSessions() {
  const root = h('div', {}, h('div', { class: 'row' }, h('h2', {}, 'Client sessions'),
    h('button', { onclick: () => loadSessions() }, 'Refresh'), h('span', { id: 'sessions-note', class: 'muted' })),
  h('div', { id: 'sessions-list', class: 'panel scroll' }, h('span', { class: 'muted' }, 'Loading…')));
  setTimeout(() => loadSessions(), 0);
  S.sessionsTimer = setInterval(() => { if ($('modal').hidden) loadSessions(); }, 5000);
  return root;
}

async function loadSessions() {
  const el = $('sessions-list');
  if (!el) return;
  let r;
  try {
    r = await api('GET', '/api/v1/sessions');
  } catch (e) {
    el.replaceChildren(h('span', { class: 'error' }, e.status === 404
      ? 'This admin endpoint does not serve /api/v1/sessions.' : 'Sessions: ' + errText(e)));
    return;
  }
  $('sessions-note').textContent = 'read ' + fmtTime(Date.now()) + (r.proxy === false ? ' · this process runs no proxy' : '');
  const list = r.sessions || [];
  if (!list.length) { el.replaceChildren(h('span', { class: 'muted' }, 'No client session.')); return; }
  el.replaceChildren(h('table', { id: 'sessions' },
    h('thead', {}, h('tr', {}, ['id', 'user', 'client', 'listener', 'backend', 'age', 'state', 'statement', ''].map((t) => h('th', {}, t)))),
    h('tbody', {}, list.map((x) => h('tr', { 'data-session': x.id },
      h('td', { class: 'mono' }, x.id), h('td', {}, x.user), h('td', {}, x.client_addr), h('td', {}, x.listener),
      h('td', {}, x.backend_node || '-'), h('td', {}, fmtDur((x.age_s || 0) * 1000)),
      h('td', {}, badge(x.state, x.state === 'in_transaction' || x.in_transaction ? 'warn' : x.state === 'held' ? 'bad' : 'muted')),
      h('td', { class: 'mono' }, x.current_statement || ''),
      h('td', {}, h('button', { class: 'danger', disabled: !canAct(), title: canAct() ? undefined : 'needs the operator role',
        onclick: () => killSession(x) }, 'Kill')))))));
}

function killSession(x) {
  const reason = h('textarea', { id: 'kill-reason', placeholder: 'why (recorded in the event log)' });
  const qonly = h('input', { type: 'checkbox', id: 'kill-query-only' });
  const out = h('div', { class: 'error' });
  const go = h('button', { class: 'danger', disabled: true, onclick: async () => {
    go.disabled = true;
    try {
      await api('POST', '/api/v1/sessions/' + encodeURIComponent(x.id) + '/kill', { reason: reason.value.trim(), query_only: qonly.checked });
      closeModal();
      loadSessions();
    } catch (e) { out.textContent = errText(e); go.disabled = false; }
  } }, 'Kill session');
  reason.addEventListener('input', () => { go.disabled = !reason.value.trim(); });
  openModal(h('div', {}, h('h2', {}, 'Kill session ' + x.id),
    h('p', {}, x.user + ' from ' + x.client_addr + ' on ' + x.listener + ' → ' + (x.backend_node || '-') + ', ' + x.state +
      (x.in_transaction ? ' (in a transaction: it is rolled back)' : '')),
    x.current_statement ? h('pre', {}, x.current_statement) : null,
    h('div', { class: 'grid' }, h('label', { for: 'kill-reason' }, 'Reason'), reason,
      h('label', { for: 'kill-query-only' }, 'Statement only'), h('span', {}, qonly, ' kill the running statement, keep the session')),
    out, h('div', { class: 'row' }, go, h('button', { onclick: closeModal }, 'Cancel'))));
}

// ---------- config ----------

function renderConfig() {
  const root = h('div', {}, h('h2', {}, 'Configuration'),
    h('div', { id: 'config-current', class: 'panel' }, h('span', { class: 'muted' }, 'Loading…')),
    h('h3', {}, 'History'),
    h('div', { id: 'config-history', class: 'panel scroll' }, h('span', { class: 'muted' }, 'Loading…')),
    h('div', { id: 'config-diff' }));
  setTimeout(loadConfig, 0);
  return root;
}

const revCache = new Map();
async function revisionYAML(rev) {
  if (!revCache.has(rev)) {
    const r = await api('GET', '/api/v1/config/revisions/' + rev);
    revCache.set(rev, r.yaml || '');
  }
  return revCache.get(rev);
}

async function loadConfig() {
  const cur = $('config-current');
  const hist = $('config-history');
  if (!cur) return;
  let current = null;
  try {
    current = await api('GET', '/api/v1/config');
    cur.replaceChildren(h('div', {}, 'Current revision ', h('b', {}, String(current.revision)),
      current.applied_by ? ' applied by ' + current.applied_by : '', current.at ? ' at ' + fmtTime(current.at) : ''),
    h('details', {}, h('summary', {}, 'YAML'), h('pre', {}, current.yaml || '')));
  } catch (e) {
    const c = S.doc && S.doc.config && S.doc.config.current;
    cur.replaceChildren(e.status === 404 && c
      ? h('div', {}, 'Current revision ', h('b', {}, String(c.rev)), ' by ' + (c.author || '?') + ' at ' + fmtTime(c.time) + ': ' + (c.reason || ''),
        h('div', { class: 'muted' }, 'History, diffs and rollback need /api/v1/config, which this endpoint does not serve.'))
      : h('span', { class: 'error' }, 'Config: ' + errText(e)));
  }
  let revs;
  try {
    revs = (await api('GET', '/api/v1/config/history?limit=50')).revisions || [];
  } catch (e) {
    hist.replaceChildren(h('span', { class: 'error' }, e.status === 404 ? 'Config history is not served by this endpoint.' : 'History: ' + errText(e)));
    return;
  }
  const curRev = current ? current.revision : 0;
  hist.replaceChildren(h('table', { id: 'config-revisions' },
    h('thead', {}, h('tr', {}, ['revision', 'actor', 'reason', 'at', 'guard', ''].map((t) => h('th', {}, t)))),
    h('tbody', {}, revs.map((r) => h('tr', { 'data-revision': r.revision },
      h('td', {}, h('b', {}, String(r.revision)), r.revision === curRev ? badge('current', 'ok') : null),
      h('td', {}, r.actor || ''), h('td', {}, r.reason || ''), h('td', {}, fmtTime(r.at)),
      h('td', {}, r.guard_overridden ? badge('guard overridden', 'warn') : ''),
      h('td', {},
        r.revision > 1 ? h('button', { onclick: () => showRevDiff(r.revision - 1, r.revision) }, 'Diff with previous') : null, ' ',
        curRev && r.revision !== curRev ? h('button', { onclick: () => showRevDiff(r.revision, curRev) }, 'Diff with current') : null, ' ',
        curRev && r.revision !== curRev ? h('button', { class: 'danger', disabled: !canAct(), onclick: () => rollback(r.revision, curRev) }, 'Roll back to this') : null))))));
}

async function showRevDiff(a, b) {
  const el = $('config-diff');
  try {
    const [ya, yb] = await Promise.all([revisionYAML(a), revisionYAML(b)]);
    el.replaceChildren(h('div', { class: 'panel' }, h('h3', {}, 'Revision ' + a + ' → ' + b), diffView(lineDiff(ya, yb))));
  } catch (e) {
    el.replaceChildren(h('div', { class: 'panel error' }, errText(e)));
  }
}

// lineDiff returns the lines of a unified diff of a and b (LCS of lines,
// 3 lines of context).
function lineDiff(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  const n = x.length;
  const m = y.length;
  if (n * m > 4e6) return ['@@ too large to compare here @@'];
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) {
    L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { ops.push([' ', x[i]]); i++; j++; }
    else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) { ops.push(['+', y[j]]); j++; }
    else { ops.push(['-', x[i]]); i++; }
  }
  const out = [];
  let last = -1;
  ops.forEach((op, k) => {
    if (op[0] === ' ') return;
    const from = Math.max(k - 3, last + 1);
    if (from > last + 1 && out.length) out.push('@@');
    for (let c = from; c < k; c++) out.push(' ' + ops[c][1]);
    out.push(op[0] + op[1]);
    last = k;
    for (let c = k + 1; c <= Math.min(k + 3, ops.length - 1) && ops[c][0] === ' '; c++) { out.push(' ' + ops[c][1]); last = c; }
  });
  return out.length ? out : ['(no difference)'];
}

function diffView(lines) {
  return h('pre', { class: 'diff' }, lines.map((l) => h('span', {
    class: l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : l.startsWith('@@') ? 'hunk' : undefined }, l + '\n')));
}

async function rollback(rev, curRev) {
  let yaml;
  let server = null;
  let err = '';
  try {
    yaml = await revisionYAML(rev);
    server = await api('POST', '/api/v1/config/diff', { yaml });
  } catch (e) { err = errText(e); }
  let local = [];
  try { local = lineDiff(await revisionYAML(curRev), yaml || ''); } catch (_) { /* shown from the server */ }
  const reason = h('textarea', { id: 'rollback-reason', placeholder: 'why (recorded with the new revision)' });
  const out = h('div', { class: 'error' });
  const go = h('button', { class: 'danger', disabled: true, onclick: async () => {
    go.disabled = true;
    try {
      const r = await api('POST', '/api/v1/config/rollback', { revision: rev, reason: reason.value.trim() });
      closeModal();
      alertBox('Rolled back to revision ' + rev + ': new revision ' + (r && r.revision));
      revCache.clear();
      loadConfig();
    } catch (e) { out.textContent = errText(e); go.disabled = false; }
  } }, 'Roll back');
  reason.addEventListener('input', () => { go.disabled = !reason.value.trim(); });
  openModal(h('div', {},
    h('h2', {}, 'Roll back to revision ' + rev),
    h('p', {}, 'The current revision ' + curRev + ' is replaced by a new revision with the content of ' + rev + '. What changes:'),
    server ? [diffView((server.diff || '(no difference)').split('\n')),
      server.destructive ? h('p', { class: 'badc' }, 'This change is destructive.') : null,
      (server.pending_restart || []).length ? h('p', { class: 'warnc' }, 'Needs a restart to take effect: ' + server.pending_restart.join(', ')) : null,
      (server.refusals || []).length ? [h('p', {}, 'The guard refuses it:'), h('ul', { class: 'refusals' }, server.refusals.map((r) => h('li', {}, r)))] : null]
      : [h('p', { class: 'error' }, 'The server could not compute the diff: ' + err), diffView(local)],
    h('div', { class: 'grid' }, h('label', { for: 'rollback-reason' }, 'Reason'), reason),
    out, h('div', { class: 'row' }, go, h('button', { onclick: closeModal }, 'Cancel'))));
}

// ---------- actions ----------

const ACTIONS = {
  switchover: { label: 'switchover', node: 'target', plan: (c) => '/api/v1/clusters/' + c + '/switchover/plan', path: (c) => '/api/v1/clusters/' + c + '/switchover', flags: [['force', 'force: switch over despite the refusals below']] },
  failover: { label: 'failover', node: 'target', plan: (c) => '/api/v1/clusters/' + c + '/failover/plan', path: (c) => '/api/v1/clusters/' + c + '/failover',
    flags: [['force_stale', 'force_stale: accept a candidate behind another replica or lagging'], ['force', 'force: fail over although the primary is healthy and reachable (prefer switchover)']] },
  drain: { label: 'drain node', node: 'node', path: (c, n) => '/api/v1/clusters/' + c + '/nodes/' + n + '/drain' },
  undrain: { label: 'undrain node', node: 'node', path: (c, n) => '/api/v1/clusters/' + c + '/nodes/' + n + '/undrain' },
  maintenance_on: { label: 'maintenance on (cluster)', maint: true, on: true, path: (c) => '/api/v1/clusters/' + c + '/maintenance' },
  maintenance_off: { label: 'maintenance off (cluster)', on: false, path: (c) => '/api/v1/clusters/' + c + '/maintenance' },
  node_maintenance_on: { label: 'maintenance on (node)', node: 'node', maint: true, on: true, path: (c, n) => '/api/v1/clusters/' + c + '/nodes/' + n + '/maintenance' },
  node_maintenance_off: { label: 'maintenance off (node)', node: 'node', on: false, path: (c, n) => '/api/v1/clusters/' + c + '/nodes/' + n + '/maintenance' },
  ack: { label: 'ack (lift a failover block / finding)', ack: true, path: (c) => '/api/v1/clusters/' + c + '/ack' },
};

const A = { planned: null, follow: 0 };

function renderActions() {
  const f = (id, el) => [h('label', { for: id }, el.dataset.label), el];
  const cluster = h('select', { id: 'act-cluster', 'data-label': 'Cluster' });
  const action = h('select', { id: 'act-action', 'data-label': 'Action' },
    Object.entries(ACTIONS).map(([k, a]) => h('option', { value: k }, a.label)));
  const node = h('select', { id: 'act-node', 'data-label': 'Node' });
  const dur = h('input', { id: 'act-for', 'data-label': 'For', placeholder: 'e.g. 30m (empty: until turned off)' });
  const replace = h('input', { id: 'act-replace', type: 'checkbox', 'data-label': 'Replace reason' });
  const finding = h('select', { id: 'act-finding', 'data-label': 'Finding' });
  const flags = h('div', { id: 'act-flags' });
  const reason = h('textarea', { id: 'act-reason', 'data-label': 'Reason', placeholder: 'why (required; recorded in the event log with your name)' });
  const planBtn = h('button', { id: 'act-plan', class: 'primary', onclick: planAction }, 'Plan');
  const goBtn = h('button', { id: 'act-go', class: 'danger', disabled: true, onclick: runAction }, 'Execute');
  const root = h('div', {}, h('h2', {}, 'Actions'),
    canAct() ? null : h('div', { class: 'panel warnc' }, 'Your token has the viewer role: plans can be shown, actions need operator.'),
    h('div', { class: 'panel' }, h('div', { class: 'grid' },
      f('act-cluster', cluster), f('act-action', action),
      h('label', { for: 'act-node', id: 'lbl-node' }, 'Node'), node,
      h('label', { for: 'act-for', id: 'lbl-for' }, 'For'), dur,
      h('label', { for: 'act-replace', id: 'lbl-replace' }, 'Replace reason'), replace,
      h('label', { for: 'act-finding', id: 'lbl-finding' }, 'Finding'), finding,
      h('label', {}, 'Overrides'), flags,
      f('act-reason', reason)),
    h('div', { class: 'row' }, planBtn, goBtn, h('span', { class: 'muted' }, 'Every action is planned first; Execute is enabled once the plan is shown and a reason is given.'))),
    h('div', { id: 'act-plan-out' }), h('div', { id: 'act-result' }));
  const invalidate = () => { A.planned = null; $('act-plan-out').replaceChildren(); updateGo(); };
  for (const el of [cluster, action, node, dur, replace, finding]) el.addEventListener('change', () => { if (el === action || el === cluster) refreshActionChoices(true); invalidate(); });
  reason.addEventListener('input', updateGo);
  setTimeout(() => refreshActionChoices(true), 0);
  return root;
}

function refreshActionChoices(force) {
  const cl = $('act-cluster');
  if (!cl) return;
  const names = clusterNames();
  if (force || cl.options.length !== names.length) {
    const keep = cl.value;
    cl.replaceChildren(...names.map((c) => h('option', { value: c, selected: c === keep }, c)));
  }
  const a = ACTIONS[$('act-action').value];
  const cs = clusters().find((c) => c.cluster === cl.value);
  const node = $('act-node');
  const wantNodes = (cs && cs.nodes || []).map((n) => n.name);
  const opts = a.node === 'target' ? [''].concat(wantNodes.filter((n) => n !== (cs && cs.primary))) : wantNodes;
  if (force || node.options.length !== opts.length) {
    const keep = node.value;
    node.replaceChildren(...opts.map((n) => h('option', { value: n, selected: n === keep }, n || '(chosen by the controller)')));
  }
  const show = (id, on) => { $(id).hidden = !on; $('lbl-' + id.slice(4)).hidden = !on; };
  show('act-node', !!a.node);
  show('act-for', !!a.maint);
  show('act-replace', !!a.maint);
  show('act-finding', !!a.ack);
  if (force) {
    const fin = $('act-finding');
    const codes = [...new Set((cs && cs.analysis || []).map((x) => x.code).concat((cs && cs.alarms || []).map((x) => x.code)))];
    fin.replaceChildren(h('option', { value: '' }, '(all: lift the failover block)'), ...codes.map((c) => h('option', { value: c }, c)));
    $('act-flags').replaceChildren(...(a.flags || []).map(([k, label]) => h('div', {},
      h('input', { type: 'checkbox', id: 'flag-' + k, 'data-flag': k, onchange: updateGo }), ' ', h('label', { for: 'flag-' + k }, label))));
    if (!(a.flags || []).length) $('act-flags').append(h('span', { class: 'muted' }, 'none'));
  }
}

function actionRequest() {
  const key = $('act-action').value;
  const a = ACTIONS[key];
  const c = encodeURIComponent($('act-cluster').value);
  const n = encodeURIComponent($('act-node').value);
  const body = { reason: $('act-reason').value.trim() };
  if (a.node === 'target' && $('act-node').value) body.target = $('act-node').value;
  for (const el of document.querySelectorAll('#act-flags input[data-flag]')) body[el.dataset.flag] = el.checked;
  if (a.on !== undefined) body.on = a.on;
  if (a.maint) {
    if ($('act-for').value.trim()) body.for = $('act-for').value.trim();
    body.replace = $('act-replace').checked;
  }
  if (a.ack && $('act-finding').value) body.finding = $('act-finding').value;
  return { key, a, cluster: $('act-cluster').value, node: $('act-node').value, path: a.path(c, n), plan: a.plan ? a.plan(c) : '', body };
}

function updateGo() {
  const go = $('act-go');
  if (!go) return;
  const reason = $('act-reason').value.trim();
  let ok = !!A.planned && !!reason && canAct();
  if (ok && A.planned.refusals.length) {
    ok = [...document.querySelectorAll('#act-flags input[data-flag]')].some((el) => el.checked);
  }
  go.disabled = !ok;
  go.title = !A.planned ? 'plan first' : !reason ? 'a reason is required' : !canAct() ? 'needs the operator role'
    : go.disabled ? 'refused: tick an override to act anyway' : '';
}

async function planAction() {
  const req = actionRequest();
  const out = $('act-plan-out');
  $('act-result').replaceChildren();
  A.planned = null;
  updateGo();
  if (!req.cluster) { out.replaceChildren(h('div', { class: 'panel error' }, 'No cluster to act on.')); return; }
  if (req.a.node === 'node' && !req.node) { out.replaceChildren(h('div', { class: 'panel error' }, 'Choose a node.')); return; }
  if (req.plan) {
    out.replaceChildren(h('div', { class: 'panel muted' }, 'Planning…'));
    let r;
    try {
      const pb = {};
      if (req.body.target) pb.target = req.body.target;
      r = await api('POST', req.plan, pb);
    } catch (e) {
      out.replaceChildren(h('div', { class: 'panel error', id: 'plan-error' }, 'Plan failed: ' + errText(e)));
      return;
    }
    A.planned = { req, refusals: (r && r.refusals) || [] };
    out.replaceChildren(h('div', { class: 'panel', id: 'plan' }, h('h3', {}, 'Plan: ' + req.a.label + ' of ' + req.cluster), planView(r)));
  } else {
    A.planned = { req, refusals: [] };
    out.replaceChildren(h('div', { class: 'panel', id: 'plan' }, h('h3', {}, 'Plan: ' + req.a.label + ' of ' + req.cluster), localPlan(req)));
  }
  updateGo();
}

function planView(r) {
  const p = (r && r.plan) || {};
  const refusals = (r && r.refusals) || [];
  const kv = [['from', p.from || p.old_primary], ['to', p.to || p.candidate], ['fence', p.fence], ['lost', p.lost], ['floor', p.floor], ['warning', p.warning], ['refusal', p.refusal]]
    .filter(([, v]) => v);
  return [
    h('p', {}, r && r.ok ? badge('the server would accept it', 'ok') : badge('refused', 'bad')),
    kv.length ? h('div', { class: 'grid' }, kv.map(([k, v]) => [h('label', {}, k), h('span', {}, String(v))])) : null,
    (p.steps || []).length ? [h('h3', {}, 'Steps'), h('ol', { class: 'steps' }, p.steps.map((x) => h('li', {}, typeof x === 'string' ? x : JSON.stringify(x))))] : null,
    (p.candidates || []).length ? [h('h3', {}, 'Candidates'), h('table', {},
      h('thead', {}, h('tr', {}, ['node', 'eligible', 'GTID', 'why not'].map((t) => h('th', {}, t)))),
      h('tbody', {}, p.candidates.map((c) => h('tr', {}, h('td', {}, c.node), h('td', {}, c.eligible ? 'yes' : 'no'),
        h('td', { class: 'mono' }, c.gtid || ''), h('td', {}, c.rejected || '')))))] : null,
    refusals.length ? [h('h3', {}, 'Refusals'), h('ul', { class: 'refusals', id: 'refusals' }, refusals.map((x) => h('li', {}, x))),
      h('p', { class: 'muted' }, 'To act anyway tick the override the refusal names (and say why in the reason).')] : null,
    h('details', {}, h('summary', {}, 'Plan as JSON'), h('pre', {}, JSON.stringify(r, null, 2))),
  ];
}

function localPlan(req) {
  const cs = clusters().find((c) => c.cluster === req.cluster);
  const lines = [];
  const n = cs && (cs.nodes || []).find((x) => x.name === req.node);
  switch (req.key) {
    case 'drain':
      lines.push('Take ' + req.node + ' out of routing: no new session goes to it; open sessions finish.');
      if (n && n.role === 'primary') lines.push('It is the primary: the controller switches over first.');
      if (n && n.serving && cs.nodes.filter((x) => x.role === 'replica' && x.serving).length === 1) lines.push('It is the last serving replica: replica listeners fall back to the primary.');
      break;
    case 'undrain': lines.push('Put ' + req.node + ' back into routing once it is serving again.'); break;
    case 'maintenance_on': lines.push('Block automatic failover of ' + req.cluster + (req.body.for ? ' for ' + req.body.for : ' until maintenance is turned off') + '; routing goes on.'); break;
    case 'maintenance_off': lines.push('Allow automatic failover of ' + req.cluster + ' again.'); break;
    case 'node_maintenance_on': lines.push('Take ' + req.node + ' out of routing and candidacy' + (req.body.for ? ' for ' + req.body.for : '') + '.'); break;
    case 'node_maintenance_off': lines.push('Put ' + req.node + ' back into routing and candidacy.'); break;
    case 'ack': lines.push(req.body.finding ? 'Acknowledge finding ' + req.body.finding + '.' : 'Lift the failover block and re-enable automatic failover of ' + req.cluster + '.');
      if (cs && cs.failover_block) lines.push('Current block: ' + cs.failover_block.reason);
      if (cs && cs.auto_disabled) lines.push('Automatic failover is disabled: ' + cs.auto_disabled);
      break;
  }
  return [h('ul', {}, lines.map((l) => h('li', {}, l))),
    h('p', { class: 'muted' }, 'The server checks its safety rules when the request is sent; a refusal comes back with its reason.'),
    h('div', { class: 'mono' }, 'POST ' + req.path + ' ' + JSON.stringify(req.body))];
}

async function runAction() {
  const req = actionRequest();
  // The plan must be for what is sent; the reason and the overrides may
  // change after planning.
  const planned = (r) => {
    const b = Object.assign({}, r.body, { reason: '' });
    for (const [k] of r.a.flags || []) delete b[k];
    return r.path + ' ' + JSON.stringify(b);
  };
  if (!A.planned || planned(A.planned.req) !== planned(req)) {
    A.planned = null;
    updateGo();
    return;
  }
  const out = $('act-result');
  $('act-go').disabled = true;
  let r;
  try {
    r = await api('POST', req.path, req.body);
  } catch (e) {
    out.replaceChildren(h('div', { class: 'panel error', id: 'act-error' }, 'Refused: ' + errText(e)));
    updateGo();
    return;
  }
  A.planned = null;
  if (r && r.status_url) {
    out.replaceChildren(h('div', { class: 'panel', id: 'operation' }, h('h3', {}, 'Operation ' + r.id), h('div', { id: 'op-body' }, 'Waiting for the controller…')));
    followOperation(r.status_url);
  } else {
    out.replaceChildren(h('div', { class: 'panel okc', id: 'act-ok' }, 'Done.', h('pre', {}, JSON.stringify(r, null, 2))));
  }
  pollStatusOnce();
}

async function followOperation(url) {
  clearTimeout(A.follow);
  const body = $('op-body');
  if (!body) return;
  let op;
  try {
    op = await api('GET', url);
  } catch (e) {
    body.replaceChildren(h('span', { class: 'error' }, 'Status of the operation: ' + errText(e)), ' (retrying)');
    A.follow = setTimeout(() => followOperation(url), 2000);
    return;
  }
  const state = op.state || '?';
  body.replaceChildren(
    h('p', {}, badge(state, state === 'done' ? 'ok' : state === 'failed' ? 'bad' : 'info'), ' ', op.message || '',
      op.from_epoch ? ' epoch ' + op.from_epoch + (op.to_epoch ? ' → ' + op.to_epoch : '') : ''),
    (op.steps || []).length ? h('ol', { class: 'steps' }, op.steps.map((x) => h('li', { class: 'done' }, x))) : null,
    h('details', {}, h('summary', {}, 'as JSON'), h('pre', {}, JSON.stringify(op, null, 2))));
  if (state !== 'done' && state !== 'failed') A.follow = setTimeout(() => followOperation(url), 1000);
}

// ---------- modal ----------

function openModal(content) {
  $('modal-body').replaceChildren(content);
  $('modal').hidden = false;
}

function closeModal() {
  $('modal').hidden = true;
  $('modal-body').replaceChildren();
}

function alertBox(text) {
  openModal(h('div', {}, h('p', {}, text), h('button', { onclick: closeModal }, 'OK')));
}

// ---------- start ----------

function start() {
  setupLogin();
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('modal').hidden) closeModal(); });
  window.addEventListener('hashchange', route);
  renderWho();
  route();
  loadWhoami();
  pollLoop();
  setInterval(renderBanners, 1000); // ages in the banners move on between polls
}

document.addEventListener('DOMContentLoaded', start);
