// Tenants: the list (searched by name prefix, paged by name, so it stays quick at any number of tenants), the
// create form, a tenant's flags, limits and policies, its credentials, and its readiness probe.

import { api, enc, query, ApiError } from './api.js';
import { h, mount, field, showFieldErrors, button, time, badge, revealSecret } from './dom.js';
import { notice, fail } from './notice.js';
import { can } from './session.js';
import { readiness } from './migrations.js';

const PAGE = 50;

// The tabs every page of one tenant starts with.
export function tenantHeader(name, active) {
  const tab = (id, href, text) => h('a', { href, class: id === active ? 'tab active' : 'tab', 'data-tab': id }, text);
  return h('div', { class: 'tenant-header' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/tenants', text: 'Tenants' }), ' / '),
    h('h1', { text: name }),
    h('nav', { class: 'tabs' },
      tab('overview', `#/tenants/${enc(name)}`, 'Overview & credentials'),
      tab('route', `#/tenants/${enc(name)}/route`, 'Route'),
      tab('history', `#/tenants/${enc(name)}/history`, 'History'),
      tab('usage', `#/tenants/${enc(name)}/usage`, 'Usage'),
      can.readAll() ? tab('migrations', `#/tenants/${enc(name)}/migrations`, 'Migrations') : null));
}

export async function list(main) {
  const search = h('input', { id: 'tenant-search', type: 'search', placeholder: 'Name starts with…', autocomplete: 'off' });
  const rows = h('tbody');
  const pager = h('div', { class: 'pager' });
  // The `after` of every page shown so far: Previous goes back one.
  let cursors = [''];
  let timer = null;
  const load = async () => {
    const after = cursors[cursors.length - 1];
    const page = await api.get(`/v1/tenants${query({ prefix: search.value, after, limit: PAGE })}`);
    mount(rows, page.tenants.length ? page.tenants.map(row) :
      h('tr', {}, h('td', { colspan: 5, class: 'muted', text: search.value ? 'No tenant name starts with that.' : 'No tenants yet.' })));
    mount(pager,
      button('Previous', () => { cursors.pop(); load().catch(fail); }, cursors.length > 1 ? 'secondary' : 'secondary disabled'),
      h('span', { class: 'muted', text: `page ${cursors.length}` }),
      page.next_after ? button('Next', () => { cursors.push(page.next_after); load().catch(fail); }) : null);
    pager.firstChild.disabled = cursors.length <= 1;
  };
  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => { cursors = ['']; load().catch(fail); }, 150);
  });
  mount(main,
    h('div', { class: 'page-head' }, h('h1', { text: 'Tenants' }), search),
    h('div', { class: 'columns' },
      h('section', { class: 'grow' },
        h('table', { class: 'list', id: 'tenants' },
          h('thead', {}, h('tr', {}, ['Name', 'Description', 'Route', 'Limits', 'State'].map((t) => h('th', { text: t })))),
          rows),
        pager),
      can.change() ? createForm() : null));
  await load();
  search.focus();
  return () => clearTimeout(timer);
}

function row(t) {
  const limits = Object.entries(t.limits || {})
    .filter(([, v]) => typeof v === 'number').map(([k, v]) => `${k} ${v}`).join(', ');
  const scoped = limits && t.limits_scope === 'gateway' ? `${limits} per gateway` : limits;
  return h('tr', {},
    h('td', {}, h('a', { href: `#/tenants/${enc(t.name)}`, class: 'tenant-link', text: t.name })),
    h('td', { text: t.description }),
    h('td', {}, t.route_version ? h('a', { href: `#/tenants/${enc(t.name)}/route`, text: `v${t.route_version}` }) : badge('no route', 'warn')),
    h('td', { class: 'muted', text: scoped || 'defaults' }),
    h('td', {}, t.disabled ? badge('disabled', 'bad') : badge('enabled', 'good')));
}

function createForm() {
  const name = h('input', { id: 'new-tenant-name', required: true, pattern: '[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}' });
  const description = h('input', { id: 'new-tenant-description' });
  const form = h('form', { class: 'card', id: 'create-tenant', onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api.post('/v1/tenants', { name: name.value, description: description.value });
      location.hash = `#/tenants/${enc(name.value)}`;
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) showFieldErrors(form, error.details);
      else if (error instanceof ApiError && error.status === 409) showFieldErrors(form, [{ path: '/name', message: error.message }]);
      else fail(error);
    }
  } },
  h('h2', { text: 'New tenant' }),
  field('Name', name, '/name', 'A-Z a-z 0-9 _ . - (at most 64)'),
  field('Description', description, '/description'),
  h('button', { type: 'submit' }, 'Create tenant'));
  return form;
}

const lines = (list) => (list || []).join('\n');
const unlines = (text) => text.split('\n').map((s) => s.trim()).filter(Boolean);

export async function show(main, name) {
  const tenant = await api.get(`/v1/tenants/${enc(name)}`);
  const credentials = h('section', { class: 'card', id: 'credentials' });
  const probe = h('section', { class: 'card', id: 'readiness-probe' });
  const toggle = button(tenant.disabled ? 'Enable' : 'Disable…', async () => {
    const disabling = !tenant.disabled;
    if (disabling && !confirm(`Disable ${name}? Its clients are refused from the next snapshot on.`)) return;
    try {
      await api.patch(`/v1/tenants/${enc(name)}`, { disabled: disabling });
      notice('ok', `${name} is ${disabling ? 'disabled' : 'enabled'}.`);
      await show(main, name);
    } catch (error) { fail(error); }
  }, tenant.disabled ? 'primary' : 'danger');
  toggle.id = 'toggle-disabled';
  mount(main, tenantHeader(name, 'overview'),
    h('div', { class: 'page-head' }, h('p', {}, tenant.disabled ? badge('disabled', 'bad') : badge('enabled', 'good'),
      ' ', tenant.description), can.change() ? toggle : null),
    h('div', { class: 'columns' }, editForm(tenant), credentials), probe);
  await Promise.all([showCredentials(credentials, name), showProbe(probe, main, name)]);
}

// The tenant's readiness probe (docs/migration.md#readiness-without-a-migration): its readiness, or a form to start one.
async function showProbe(section, main, name) {
  const path = `/v1/tenants/${enc(name)}/readiness-probe`;
  let current = null;
  try { current = await api.get(path); } catch (error) { if (!(error instanceof ApiError && error.status === 404)) throw error; }
  const act = (run, done) => async () => {
    try { await run(); notice('ok', done); await show(main, name); } catch (error) { fail(error); }
  };
  if (current) {
    mount(section, h('h2', { text: 'Readiness probe' }),
      h('p', { class: 'muted' }, 'Towards ', h('code', { id: 'probe-to', text: JSON.stringify(current.to) }), ' since ', time(current.created_at), '.'),
      readiness(current, true),
      can.change() ? button('Stop probe', act(() => api.del(path), 'Readiness probe stopped.'), 'danger') : null);
    return;
  }
  if (!can.change()) return;
  const to = h('input', { id: 'probe-to-input', placeholder: 'resource name or URL' });
  mount(section, h('h2', { text: 'Readiness probe' }),
    h('p', { class: 'muted', text: 'Would this tenant\'s traffic work on another deployment? Gateways check its commands against it, without a migration.' }),
    field('Destination', to, '/to'),
    button('Start probe', act(() => api.put(path, { to: to.value }), 'Readiness probe started.'), 'primary'));
}

function editForm(t) {
  const description = h('input', { id: 'tenant-description', value: t.description });
  const disabled = h('input', { id: 'tenant-disabled', type: 'checkbox', checked: t.disabled });
  const allowAdmin = h('input', { id: 'tenant-allow-admin', type: 'checkbox', checked: t.allow_admin });
  const readOnly = h('input', { id: 'tenant-read-only', type: 'checkbox', checked: t.read_only });
  const limits = h('textarea', { id: 'tenant-limits', rows: 3, spellcheck: 'false', value: JSON.stringify(t.limits || {}, null, 2) });
  const scope = t.limits_scope || 'fleet';
  const limitsScope = h('select', { id: 'tenant-limits-scope' }, ['fleet', 'gateway'].map((s) =>
    h('option', { value: s, selected: s === scope }, s === 'fleet' ? 'fleet: shared by every gateway' : 'gateway: each gateway on its own')));
  const namespace = h('input', { id: 'tenant-namespace', value: t.namespace || '' });
  const commands = h('textarea', { id: 'tenant-commands', rows: 3, spellcheck: 'false', value: JSON.stringify(t.commands || {}) });
  const ipAllow = h('textarea', { id: 'tenant-ip-allow', rows: 2, value: lines(t.ip_allow) });
  const ipDeny = h('textarea', { id: 'tenant-ip-deny', rows: 2, value: lines(t.ip_deny) });
  const blocked = h('textarea', { id: 'tenant-blocked-keys', rows: 2, value: lines(t.blocked_keys) });
  const nearCache = h('textarea', { id: 'tenant-near-cache', rows: 2, spellcheck: 'false', value: t.near_cache ? JSON.stringify(t.near_cache) : '' });
  // Each field by its name in the PATCH: shown to everyone, editable where the token may change it (operators:
  // all; a tenant-owner: the policies its token lists), and only those are sent.
  const inputs = {
    description, disabled, allow_admin: allowAdmin, limits, limits_scope: limitsScope, namespace, read_only: readOnly,
    commands, ip_allow: ipAllow, ip_deny: ipDeny, blocked_keys: blocked, near_cache: nearCache,
  };
  const editable = Object.keys(inputs).filter((name) => can.edit(t.name, name));
  for (const [name, input] of Object.entries(inputs)) input.disabled = !editable.includes(name);
  const form = h('form', { class: 'card grow', id: 'edit-tenant', onsubmit: async (event) => {
    event.preventDefault();
    let parsed;
    try {
      parsed = { limits: JSON.parse(limits.value || '{}'), commands: JSON.parse(commands.value || '{}'),
        near_cache: nearCache.value.trim() ? JSON.parse(nearCache.value) : null };
    } catch (error) {
      const path = [['/limits', limits], ['/commands', commands], ['/near_cache', nearCache]]
        .find(([, input]) => input.value.trim() && !isJson(input.value));
      showFieldErrors(form, [{ path: path ? path[0] : '/limits', message: `not JSON: ${error.message}` }]);
      return;
    }
    try {
      const values = {
        description: description.value, disabled: disabled.checked, allow_admin: allowAdmin.checked,
        limits: parsed.limits, limits_scope: limitsScope.value, namespace: namespace.value || null, read_only: readOnly.checked,
        commands: parsed.commands, ip_allow: unlines(ipAllow.value), ip_deny: unlines(ipDeny.value),
        blocked_keys: unlines(blocked.value), near_cache: parsed.near_cache,
      };
      const saved = await api.patch(`/v1/tenants/${enc(t.name)}`,
        Object.fromEntries(editable.map((name) => [name, values[name]])));
      showFieldErrors(form, []);
      notice('ok', `Saved tenant ${saved.name}.`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        const rest = showFieldErrors(form, error.details);
        if (rest.length || !error.details.length) fail(error);
      } else fail(error);
    }
  } },
  h('h2', { text: 'Flags, limits and policies' }),
  can.change() ? null : h('p', { class: 'muted', id: 'tenant-editable', text: editable.length
    ? `This token may change only: ${editable.join(', ')}.` : 'Read only: this token may change none of these.' }),
  field('Description', description, '/description'),
  h('div', { class: 'checks' },
    field('Disabled (clients are refused)', disabled, '/disabled'),
    field('Allow admin commands', allowAdmin, '/allow_admin'),
    field('Read only', readOnly, '/read_only')),
  field('Limits (JSON, replaced as a whole)', limits, '/limits', 'max_connections, max_ops_per_sec, script_timeout_ms, output_buffer_limit, pubsub_output_buffer_limit'),
  field('Connection and rate limits hold for', limitsScope, '/limits_scope'),
  field('Key namespace', namespace, '/namespace', 'empty: none'),
  field('Commands (JSON: allow, deny)', commands, '/commands'),
  field('IP allow (one CIDR a line)', ipAllow, '/ip_allow'),
  field('IP deny (one CIDR a line)', ipDeny, '/ip_deny'),
  field('Blocked key patterns (one a line)', blocked, '/blocked_keys'),
  field('Near cache (JSON: max_bytes, keys, max_value_bytes)', nearCache, '/near_cache', 'empty: none; keys "hot" or "all"'),
  h('div', { class: 'actions' },
    editable.length ? h('button', { type: 'submit', id: 'save-tenant' }, 'Save') : null,
    can.change() ? button('Delete tenant…', async () => {
      if (!confirm(`Delete tenant ${t.name} with its credentials and route history? Its clients are refused at once.`)) return;
      try { await api.del(`/v1/tenants/${enc(t.name)}`); location.hash = '#/tenants'; } catch (error) { fail(error); }
    }, 'danger') : null));
  return form;
}

function isJson(text) {
  try { JSON.parse(text); return true; } catch { return false; }
}

async function showCredentials(section, tenant) {
  const { credentials } = await api.get(`/v1/tenants/${enc(tenant)}/credentials`);
  const may = can.credentials(tenant);
  const secretBox = h('div', { id: 'secret-box' });
  const issueDescription = h('input', { id: 'issue-description', placeholder: 'what will use it' });
  const importPassword = h('input', { id: 'import-password', type: 'password', autocomplete: 'new-password', minlength: 16 });
  const importDescription = h('input', { id: 'import-description' });
  const reload = () => showCredentials(section, tenant).catch(fail);
  const issue = h('form', { class: 'inline', id: 'issue-credential', onsubmit: async (event) => {
    event.preventDefault();
    try {
      const issued = await api.post(`/v1/tenants/${enc(tenant)}/credentials`, { description: issueDescription.value });
      await reload();
      // The one time this secret exists outside the clients: shown here until the page changes, never stored.
      revealSecret(section.querySelector('#secret-box'), issued.secret,
        `Credential ${issued.id}: copy this secret now. It is shown only once and cannot be read again.`);
    } catch (error) { fail(error); }
  } }, field('Description', issueDescription, '/description'), h('button', { type: 'submit', id: 'issue' }, 'Issue a secret'));
  const imported = h('form', { class: 'inline', id: 'import-credential', onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api.post(`/v1/tenants/${enc(tenant)}/credentials`, { password: importPassword.value, description: importDescription.value });
      importPassword.value = '';
      notice('ok', 'Imported the password.');
      await reload();
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) showFieldErrors(imported, error.details);
      else fail(error);
    }
  } }, field('Existing password (16+ characters)', importPassword, '/password'), field('Description', importDescription, '/description'),
  h('button', { type: 'submit', class: 'secondary' }, 'Import'));
  mount(section,
    h('h2', { text: 'Credentials' }),
    secretBox,
    h('table', { class: 'list', id: 'credential-list' },
      h('thead', {}, h('tr', {}, ['Id', 'Description', 'Kind', 'Created', 'State', 'Connections', 'Last used', ''].map((t) => h('th', { text: t })))),
      h('tbody', {}, credentials.map((c) => h('tr', { class: c.revoked_at ? 'revoked' : '' },
        h('td', { text: c.id }), h('td', { text: c.description }),
        h('td', { text: c.client_certificate ? 'client certificate' : c.imported ? 'imported' : 'issued' }),
        h('td', {}, time(c.created_at)),
        h('td', {}, c.revoked_at ? badge('revoked', 'bad') : badge('valid', 'good')),
        h('td', { class: 'connections', text: c.connections ?? 0 }),
        h('td', { class: 'last-used' }, c.last_used ? [time(c.last_used.at), h('span', { class: 'muted', text: ` on ${c.last_used.gateway}` })] : h('span', { class: 'muted', text: 'not in the last day' })),
        h('td', {}, c.revoked_at || !may ? null : button('Revoke', async () => {
          if (!confirm(`Revoke credential ${c.id}? Clients using it are refused from the next snapshot on.`)) return;
          try { await api.del(`/v1/tenants/${enc(tenant)}/credentials/${c.id}`); await reload(); } catch (error) { fail(error); }
        }, 'danger small')))))),
    credentials.length ? null : h('p', { class: 'muted', text: 'No credentials: no client can reach this tenant yet.' }),
    may ? [issue, imported] : null);
}
