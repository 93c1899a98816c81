// Switchyard web console: sessions, config history and rollback, actions (loaded after app.js; see app.js).
'use strict';

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
      h('td', {}, canAct() ? h('button', { class: 'danger', onclick: () => killSession(x) }, 'Kill') : null))))));
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
        curRev && r.revision !== curRev && canAct() ? h('button', { class: 'danger', onclick: () => rollback(r.revision, curRev) }, 'Roll back to this') : null))))));
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
  // Execute is offered to the operator role only; a viewer plans.
  const goBtn = canAct() ? h('button', { id: 'act-go', class: 'danger', disabled: true, onclick: runAction }, 'Execute') : null;
  const root = h('div', {}, h('h2', {}, 'Actions'),
    canAct() ? null : h('div', { class: 'panel warnc', id: 'act-viewer' }, viewerNote()),
    h('div', { class: 'panel' }, h('div', { class: 'grid' },
      f('act-cluster', cluster), f('act-action', action),
      h('label', { for: 'act-node', id: 'lbl-node' }, 'Node'), node,
      h('label', { for: 'act-for', id: 'lbl-for' }, 'For'), dur,
      h('label', { for: 'act-replace', id: 'lbl-replace' }, 'Replace reason'), replace,
      h('label', { for: 'act-finding', id: 'lbl-finding' }, 'Finding'), finding,
      h('label', {}, 'Overrides'), flags,
      f('act-reason', reason)),
    h('div', { class: 'row' }, planBtn, goBtn, h('span', { class: 'muted' }, canAct()
      ? 'Every action is planned first; Execute is enabled once the plan is shown and a reason is given.'
      : 'Plan shows what the action would do and what the server would refuse.'))),
    h('div', { id: 'act-plan-out' }), h('div', { id: 'act-result' }));
  const invalidate = () => { A.planned = null; $('act-plan-out').replaceChildren(); updateGo(); };
  for (const el of [cluster, action, node, dur, replace, finding]) el.addEventListener('change', () => { if (el === action || el === cluster) refreshActionChoices(true); invalidate(); });
  reason.addEventListener('input', updateGo);
  setTimeout(() => refreshActionChoices(true), 0);
  return root;
}

// viewerNote says why the actions page offers no Execute.
function viewerNote() {
  return S.whoami
    ? 'Your token (' + S.whoami.name + ') has the viewer role: you can plan, but Execute is not offered; acting needs an operator token.'
    : 'Checking your token\'s role…';
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
  // The refusals come first: on a 768-pixel screen they are seen
  // without scrolling past the steps.
  return [
    h('p', {}, r && r.ok ? badge('the server would accept it', 'ok') : badge('refused', 'bad')),
    refusals.length ? [h('h3', {}, 'Refusals'), h('ul', { class: 'refusals', id: 'refusals' }, refusals.map((x) => h('li', {}, x))),
      h('p', { class: 'muted' }, 'To act anyway tick the override the refusal names (and say why in the reason).')] : null,
    kv.length ? h('div', { class: 'grid' }, kv.map(([k, v]) => [h('label', {}, k), h('span', {}, String(v))])) : null,
    (p.steps || []).length ? [h('h3', {}, 'Steps'), h('ol', { class: 'steps' }, p.steps.map((x) => h('li', {}, typeof x === 'string' ? x : JSON.stringify(x))))] : null,
    (p.candidates || []).length ? [h('h3', {}, 'Candidates'), h('table', {},
      h('thead', {}, h('tr', {}, ['node', 'eligible', 'GTID', 'why not'].map((t) => h('th', {}, t)))),
      h('tbody', {}, p.candidates.map((c) => h('tr', {}, h('td', {}, c.node), h('td', {}, c.eligible ? 'yes' : 'no'),
        h('td', { class: 'mono' }, c.gtid || ''), h('td', {}, c.rejected || '')))))] : null,
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
