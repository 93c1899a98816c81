// Switchyard web console: the event timeline (loaded after app.js; see app.js).
'use strict';

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
      h('td', {}, e.unverified ? [badge('UNVERIFIED', 'bad'), ' ' + e.message + ' (integrity: ' + e.unverified + ')'] : e.message), h('td', {}, String(e.epoch)), h('td', {}, e.actor || e.leader || ''))))));
}
