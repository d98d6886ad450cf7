// Tokens (admins only): the API's tokens with their roles, creating one (its secret shown once), rotating one (a
// new secret; the old one keeps working for the overlap asked) and revoking one.

import { api } from './api.js';
import { h, mount, field, button, time, badge, revealSecret } from './dom.js';
import { notice, fail, createFailed } from './notice.js';

const ROLES = ['viewer', 'operator', 'admin', 'tenant-owner'];
const POLICIES = ['read_only', 'commands', 'ip_allow', 'ip_deny', 'blocked_keys', 'tracking', 'scripts'];

// `issued`: a token just created or rotated, whose secret the page shows (once) above the list.
export async function list(main, issued) {
  const { tokens } = await api.get('/v1/tokens');
  const secretBox = h('div', { id: 'secret-box' });
  const reload = () => list(main).catch(fail);
  const shown = (token, what) => list(main, { ...token, what }).catch(fail);
  mount(main,
    h('div', { class: 'page-head' }, h('h1', { text: 'Tokens' })),
    secretBox,
    h('div', { class: 'columns' },
      h('section', { class: 'grow' },
        h('table', { class: 'list', id: 'tokens' },
          h('thead', {}, h('tr', {}, ['Id', 'Name', 'Role', 'Tenants', 'Created', 'State', ''].map((t) => h('th', { text: t })))),
          h('tbody', {}, tokens.map((t) => row(t, reload, shown)))),
        tokens.length ? null : h('p', { class: 'muted', text: 'No API tokens yet: only the start-up admin tokens work.' })),
      createForm(shown)));
  if (issued) {
    revealSecret(secretBox, issued.token,
      `Token ${issued.name} ${issued.what}: copy its secret now. It is shown only once and cannot be read again.`);
  }
}

function scope(t) {
  if (t.role !== 'tenant-owner') return 'all';
  const parts = [...(t.tenants || [])];
  if (t.tenant_prefix !== undefined) parts.push(`${t.tenant_prefix}*`);
  const policies = (t.policies || []).length ? `; may change ${t.policies.join(', ')}` : '';
  return parts.join(', ') + policies;
}

function row(t, reload, shown) {
  const state = t.revoked_at ? badge('revoked', 'bad')
    : t.previous_valid_until ? badge('rotating', 'warn') : badge('valid', 'good');
  return h('tr', { 'data-token': t.name, class: t.revoked_at ? 'revoked' : '' },
    h('td', { text: t.id }), h('td', { class: 'mono', text: t.name }), h('td', { text: t.role }),
    h('td', { text: scope(t) }), h('td', {}, time(t.created_at)),
    h('td', {}, state, t.previous_valid_until ? h('span', { class: 'muted' }, ' old secret until ', time(t.previous_valid_until)) : null),
    h('td', {}, t.revoked_at ? null : h('div', { class: 'actions' },
      button('Rotate', async () => {
        const overlap = prompt(`Rotate ${t.name}: for how many seconds should the old secret keep working (0 to 86400)?`, '300');
        if (overlap === null) return;
        try {
          await shown(await api.post(`/v1/tokens/${t.id}/rotate`, { overlap_secs: Number(overlap) }), 'rotated');
        } catch (error) { fail(error); }
      }, 'secondary small rotate'),
      button('Revoke', async () => {
        if (!confirm(`Revoke token ${t.name}? Both its secrets stop working at once.`)) return;
        try { await api.del(`/v1/tokens/${t.id}`); notice('ok', `Revoked token ${t.name}.`); await reload(); } catch (error) { fail(error); }
      }, 'danger small revoke'))));
}

function createForm(shown) {
  const name = h('input', { id: 'new-token-name', required: true, pattern: '[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}' });
  const role = h('select', { id: 'new-token-role' }, ROLES.map((r) => h('option', { value: r }, r)));
  const tenants = h('input', { id: 'new-token-tenants', placeholder: 'acme, globex' });
  const prefix = h('input', { id: 'new-token-prefix', placeholder: 'team-a-' });
  const policies = POLICIES.map((p) => h('input', { type: 'checkbox', value: p, class: 'new-token-policy' }));
  const owner = h('fieldset', { class: 'owner-scope' },
    field('Tenants (comma-separated)', tenants, '/tenants'),
    field('Tenant name prefix', prefix, '/tenant_prefix'),
    h('div', { class: 'checks', 'data-path': '/policies' }, policies.map((box) => field(box.value, box))));
  const showScope = () => { owner.hidden = role.value !== 'tenant-owner'; };
  role.addEventListener('change', showScope);
  showScope();
  const form = h('form', { class: 'card', id: 'create-token', onsubmit: async (event) => {
    event.preventDefault();
    const body = { name: name.value, role: role.value };
    if (role.value === 'tenant-owner') {
      body.tenants = tenants.value.split(',').map((t) => t.trim()).filter(Boolean);
      if (prefix.value) body.tenant_prefix = prefix.value;
      body.policies = policies.filter((box) => box.checked).map((box) => box.value);
    }
    try {
      await shown(await api.post('/v1/tokens', body), 'created');
    } catch (error) {
      createFailed(form, error);
    }
  } },
  h('h2', { text: 'New token' }),
  field('Name', name, '/name', 'shown in the audit and access logs as token:<name>'),
  field('Role', role, '/role', 'admin: everything; operator: all but tokens; viewer: read only; tenant-owner: its tenants'),
  owner,
  h('button', { type: 'submit' }, 'Create token'));
  return form;
}
