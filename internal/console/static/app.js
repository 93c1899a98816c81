// Switchyard web console. Plain JavaScript, no build step: it reads and acts
// through the admin API (/api/v1/..., /api/status where /api/v1/status is
// not served) with the bearer token typed into the login form.
//
// The scripts share one global scope and load in order: app.js (state, DOM
// and API helpers, login, status polling and the stale/store banners, the
// modal), cluster.js, events.js, manage.js (the pages), main.js (the page
// list and start-up).
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
  const could = canAct();
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
  // The buttons that act are offered to the operator role only.
  if (could !== canAct() && ['actions', 'sessions', 'config'].includes(S.view)) renderView();
  else if ($('act-viewer')) $('act-viewer').textContent = viewerNote();
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

// canAct: the caller may change things, so the buttons that act are
// shown. Until whoami answers they are not; an endpoint without whoami
// (404) or whose whoami fails leaves the decision to the server.
function canAct() {
  if (S.whoami) return S.whoami.auth === false || S.whoami.role === 'operator';
  return !!S.whoamiNote;
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
    if (d.stale === true) {
      const g = generatedAt(d);
      stale.push('Data is stale: the endpoint marks this status as stale' +
        (!isNaN(g) ? '; it was read ' + ago(g) : '') + (d.store_error ? ' (' + d.store_error + ')' : '') + '.');
    }
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
