// The console's shell: sign-in, navigation and the page router (`#/section/...` in the URL's fragment, so the
// server serves one page and the browser's back button works).

import { token, onSignedOut, ApiError } from './api.js';
import { h, mount, field } from './dom.js';
import { notice, fail } from './notice.js';
import * as tenants from './tenants.js';
import * as resources from './resources.js';
import * as routes from './routes.js';
import * as gateways from './gateways.js';
import * as migrations from './migrations.js';
import * as audit from './audit.js';
import * as tokens from './tokens.js';
import * as usage from './usage.js';
import * as session from './session.js';

const main = document.getElementById('main');
let leave = null;

// (fragment pattern, page name for `body[data-page]`, page): a page renders into `main` and may return a
// function that stops what it started (polling).
const pages = [
  [/^tenants$/, 'tenants', tenants.list],
  [/^tenants\/([^/]+)$/, 'tenant', tenants.show],
  [/^tenants\/([^/]+)\/route$/, 'route', routes.edit],
  [/^tenants\/([^/]+)\/history$/, 'history', routes.history],
  [/^tenants\/([^/]+)\/usage$/, 'tenant-usage', usage.tenant],
  [/^usage$/, 'usage', usage.overview],
  [/^tenants\/([^/]+)\/migrations$/, 'migrations', migrations.list],
  [/^tenants\/([^/]+)\/migrations\/(\d+)$/, 'migration', migrations.show],
  [/^resources$/, 'resources', resources.list],
  [/^gateways$/, 'gateways', gateways.show],
  [/^audit$/, 'audit', audit.show],
  [/^tokens$/, 'tokens', tokens.list],
];

async function route() {
  if (leave) { leave(); leave = null; }
  notice('', '');
  const signedIn = Boolean(token.get());
  if (signedIn && !session.who()) {
    // A reload of the page: the token is still in the tab, who it is must be asked again.
    try { await session.load(); } catch (error) { fail(error); return; }
  }
  showNav(signedIn);
  if (!signedIn) { signIn(); return; }
  const path = location.hash.replace(/^#\/?/, '') || 'tenants';
  const section = path.split('/')[0];
  for (const link of document.querySelectorAll('#nav a')) {
    link.classList.toggle('active', link.dataset.section === section);
  }
  const found = pages.find(([pattern]) => pattern.test(path));
  if (!found) { mount(main, h('h1', { text: 'Not found' })); return; }
  const params = path.match(found[0]).slice(1).map(decodeURIComponent);
  document.body.dataset.page = found[1];
  // `ready` once the page has drawn what it first fetched (what a test, or a person, may then act on).
  delete document.body.dataset.ready;
  mount(main, h('p', { class: 'muted', text: 'Loading…' }));
  try {
    leave = (await found[2](main, ...params)) || null;
    document.body.dataset.ready = 'true';
  } catch (error) {
    fail(error);
  }
}

// The navigation offers only the sections the token may read; the header says who is signed in.
function showNav(signedIn) {
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('sign-out').hidden = !signedIn;
  const me = session.who();
  const whoami = document.getElementById('whoami');
  whoami.hidden = !signedIn || !me;
  whoami.textContent = me ? `${me.actor} (${me.role})` : '';
  if (me) document.body.dataset.role = me.role;
  for (const link of document.querySelectorAll('#nav a[data-needs]')) {
    link.hidden = !session.can[link.dataset.needs]();
  }
}

function signIn() {
  document.body.dataset.page = 'sign-in';
  document.body.dataset.ready = 'true';
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, minlength: 16 });
  const error = h('p', { class: 'error-text', role: 'alert' });
  const form = h('form', { class: 'card sign-in', onsubmit: async (event) => {
    event.preventDefault();
    token.set(input.value);
    try {
      // Who the token is, and so what the console offers: any role's token is welcome.
      await session.load();
      input.value = '';
      route();
    } catch (e) {
      token.clear();
      session.forget();
      error.textContent = e instanceof ApiError && e.status === 401
        ? 'This token is not a valid token of this control plane.' : String(e.message || e);
    }
  } },
  h('h1', { text: 'Sign in' }),
  h('p', { class: 'muted', text: 'Paste an API token (or a start-up --admin-token). It stays in this browser tab only and is sent only in the Authorization header. The console offers what its role may do.' }),
  field('Token', input),
  error,
  h('button', { type: 'submit', id: 'sign-in' }, 'Sign in'));
  mount(main, form);
  input.focus();
}

// A 401 anywhere but on the sign-in page means the token stopped working (revoked, rotated past its overlap, or
// removed from --admin-token).
onSignedOut(() => {
  if (document.body.dataset.page === 'sign-in') return;
  session.forget();
  notice('error', 'Signed out: the token was refused.');
  signIn();
  showNav(false);
});

document.getElementById('sign-out').addEventListener('click', () => {
  token.clear();
  session.forget();
  location.hash = '#/tenants';
  route();
});

window.addEventListener('hashchange', route);
window.addEventListener('error', (event) => notice('error', `Console error: ${event.message}`));
window.addEventListener('unhandledrejection', (event) => fail(event.reason));
route();
