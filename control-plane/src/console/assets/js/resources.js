// Resources: the registered backends, whether the gateways reach each, who uses each, registering, editing
// (passwords stay masked: `***` keeps the stored one) and deleting (refused while a current route uses it).

import { api, enc, ApiError } from './api.js';
import { h, mount, field, showFieldErrors, button, badge, time } from './dom.js';
import { notice, fail, createFailed } from './notice.js';
import { can } from './session.js';

export async function list(main) {
  const { resources } = await api.get('/v1/resources');
  const table = h('table', { class: 'list', id: 'resources' },
    h('thead', {}, h('tr', {}, ['Name', 'URL', 'Health', 'Description', 'Used by', ''].map((t) => h('th', { text: t })))),
    h('tbody', {}, resources.map((r) => row(r, () => list(main).catch(fail)))));
  mount(main,
    h('div', { class: 'page-head' }, h('h1', { text: 'Resources' })),
    h('div', { class: 'columns' },
      h('section', { class: 'grow' }, table,
        resources.length ? null : h('p', { class: 'muted', text: 'No resources registered: routes may still name URLs inline.' })),
      can.change() ? createForm(() => list(main).catch(fail)) : null));
}

function row(r, reload) {
  const tr = h('tr', { 'data-resource': r.name },
    h('td', { class: 'mono', text: r.name }),
    h('td', { class: 'mono', text: r.url }),
    h('td', { class: 'health' }, health(r), gatewayViews(r)),
    h('td', { text: r.description }),
    h('td', {}, r.used_by.length
      ? r.used_by.map((t, i) => [i ? ', ' : '', h('a', { href: `#/tenants/${enc(t)}/route`, text: t })])
      : h('span', { class: 'muted', text: 'nobody' })),
    h('td', {}, can.change() && h('div', { class: 'actions' },
      button('Edit', () => tr.replaceWith(editRow(r, reload)), 'secondary small'),
      button('Delete', async () => {
        if (!confirm(`Delete resource ${r.name}?`)) return;
        try {
          await api.del(`/v1/resources/${enc(r.name)}`);
          notice('ok', `Deleted resource ${r.name}.`);
          reload();
        } catch (error) {
          if (error instanceof ApiError && error.status === 409) {
            notice('error', `${r.name} cannot be deleted: the current route of ${r.used_by.join(', ') || 'a tenant'} uses it. ` +
              'Change those routes to another resource first (their history may keep naming it). Server: ' + error.message);
          } else fail(error);
        }
      }, 'danger small'))));
  return tr;
}

// A new URL that points at other data than the routes using the resource stored keys in (409 keys_would_move),
// or that does not answer its probe (422), is refused; the form then offers "Force" to save it anyway.
function editRow(r, reload) {
  const url = h('input', { class: 'edit-url', value: r.url, spellcheck: 'false' });
  const description = h('input', { class: 'edit-description', value: r.description });
  const force = h('input', { class: 'edit-force', type: 'checkbox' });
  const forceField = field('Force', force, '/force', 'save even if the routes using it lose their keys, or the URL does not answer (yet)');
  forceField.hidden = true;
  const form = h('form', { class: 'inline', onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api.put(`/v1/resources/${enc(r.name)}`, { url: url.value, description: description.value, force: force.checked });
      notice('ok', `Saved resource ${r.name}.`);
      reload();
    } catch (error) {
      if (error instanceof ApiError && error.code === 'keys_would_move') {
        forceField.hidden = false;
        showFieldErrors(form, error.details);
        notice('error', `Not saved: ${error.message.replace(/; pass "force".*/, '')}. Tick "Force" to save anyway.`);
      } else if (error instanceof ApiError && error.status === 422) {
        // Only a failed probe can be forced; a URL that breaks a route cannot.
        forceField.hidden = !error.message.includes('"force"');
        if (showFieldErrors(form, error.details).length) fail(error);
      } else fail(error);
    }
  } },
  field('URL', url, '/url', 'a password shown as *** keeps the stored one'),
  field('Description', description, '/description'),
  forceField,
  h('button', { type: 'submit', class: 'small' }, 'Save'),
  button('Cancel', reload, 'link'));
  return h('tr', { class: 'editing' }, h('td', { class: 'mono', text: r.name }), h('td', { colspan: 5 }, form));
}

function createForm(reload) {
  const name = h('input', { id: 'new-resource-name', required: true });
  const url = h('input', { id: 'new-resource-url', required: true, placeholder: 'redis://host:6379', spellcheck: 'false' });
  const description = h('input', { id: 'new-resource-description' });
  const form = h('form', { class: 'card', id: 'create-resource', onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api.post('/v1/resources', { name: name.value, url: url.value, description: description.value });
      notice('ok', `Registered resource ${name.value}.`);
      reload();
    } catch (error) {
      createFailed(form, error);
    }
  } },
  h('h2', { text: 'Register a resource' }),
  field('Name', name, '/name'),
  field('URL', url, '/url', 'redis://, rediss://, redis-sentinel://, redis-cluster://'),
  field('Description', description, '/description'),
  h('button', { type: 'submit' }, 'Register'));
  return form;
}

// Whether the gateways reach the resource: up (every gateway that reported it lately), down (none), or down on
// some of them; "not reported" when no gateway named it lately (no route uses it, or no gateway runs).
export function health(r) {
  const reach = r.reachability;
  if (!reach) return badge('not reported', '');
  if (!reach.down) return badge('up', 'good');
  if (!reach.up) return badge('down', 'bad');
  return badge(`down on ${reach.down} of ${reach.up + reach.down}`, 'warn');
}

// Each gateway's view: up or down since when, and the last error it saw.
export function gatewayViews(r) {
  const gateways = r.reachability?.gateways || [];
  return h('ul', { class: 'reach' }, gateways.map((g) => h('li', { 'data-gateway': g.gateway, 'data-up': g.up },
    h('span', { class: 'mono', text: g.gateway }), `: ${g.up ? 'up' : 'down'} since `, time(g.since),
    g.last_error ? h('span', { class: 'muted', text: ` (last error: ${g.last_error})` }) : null)));
}
