// The audit log: every change with who made it, filtered by tenant, actor, action and time, paged newest first;
// each entry's before and after side by side.

import { api, query } from './api.js';
import { h, mount, field, button, time } from './dom.js';
import { fail } from './notice.js';
import { pretty } from './json.js';
import { diffView } from './diff.js';

const PAGE = 50;

// A `datetime-local` value (the browser's time zone) as RFC 3339 in UTC.
const utc = (local) => (local ? new Date(local).toISOString() : '');

export async function show(main) {
  const input = (id, placeholder) => h('input', { id, placeholder, autocomplete: 'off' });
  const tenant = input('audit-tenant', 'acme');
  const actor = input('audit-actor', 'admin:1a2b3c4d');
  const action = input('audit-action', 'route. or tenant.create');
  const since = h('input', { id: 'audit-since', type: 'datetime-local' });
  const until = h('input', { id: 'audit-until', type: 'datetime-local' });
  const rows = h('tbody');
  const more = h('div', { class: 'pager' });
  let before = null;
  const load = async (append) => {
    const page = await api.get(`/v1/audit${query({
      tenant: tenant.value, actor: actor.value, action: action.value,
      since: utc(since.value), until: utc(until.value), before: append ? before : null, limit: PAGE,
    })}`);
    const built = page.entries.map(entry);
    if (append) rows.append(...built);
    else mount(rows, built.length ? built : h('tr', {}, h('td', { colspan: 6, class: 'muted', text: 'No change matches.' })));
    before = page.entries.length ? page.entries[page.entries.length - 1].id : before;
    mount(more, page.entries.length === PAGE ? button('Older changes', () => load(true).catch(fail)) : null);
  };
  const filters = h('form', { class: 'card filters', id: 'audit-filters', onsubmit: (event) => { event.preventDefault(); load(false).catch(fail); } },
    field('Tenant', tenant), field('Actor', actor), field('Action', action),
    field('Since', since), field('Until', until),
    h('button', { type: 'submit' }, 'Filter'));
  mount(main, h('div', { class: 'page-head' }, h('h1', { text: 'Audit log' })), filters,
    h('table', { class: 'list', id: 'audit' },
      h('thead', {}, h('tr', {}, ['Revision', 'When', 'Actor', 'Action', 'Object', ''].map((t) => h('th', { text: t })))),
      rows),
    more);
  await load(false);
}

function entry(e) {
  const detail = h('tr', { class: 'detail', hidden: true }, h('td', { colspan: 6 }));
  const row = h('tr', {},
    h('td', { text: e.revision }), h('td', {}, time(e.at)), h('td', { class: 'mono', text: e.actor }),
    h('td', { class: 'mono', text: e.action }), h('td', { class: 'mono', text: e.object }),
    h('td', {}, button('Show change', () => {
      detail.hidden = !detail.hidden;
      if (!detail.hidden) {
        mount(detail.firstChild, diffView('Before', e.before ? pretty(e.before) : '', 'After', e.after ? pretty(e.after) : ''));
      }
    }, 'link')));
  return [row, detail];
}
