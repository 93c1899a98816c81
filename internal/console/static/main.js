// Switchyard web console: the page list and start-up, loaded last (loaded after app.js; see app.js).
'use strict';

// Every page's render function, by the name in the URL fragment.
const VIEWS = {
  cluster: renderCluster,
  findings: renderFindings,
  events: renderEvents,
  proxies: renderProxies,
  sessions: renderSessions,
  config: renderConfig,
  actions: renderActions,
};

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
