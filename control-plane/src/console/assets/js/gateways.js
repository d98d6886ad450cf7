// Gateways: which are live, the revision each serves, whether all live ones serve the current one, their last
// heartbeat and version, the control-plane replica each follows. Refreshed every 2 seconds while shown.

import { api } from './api.js';
import { h, mount, badge, ago, time } from './dom.js';
import { fail } from './notice.js';

export async function show(main) {
  const banner = h('div', { id: 'convergence' });
  const rows = h('tbody');
  const refresh = async () => {
    const fleet = await api.get('/v1/gateways');
    const live = fleet.gateways.filter((g) => g.live);
    const current = live.filter((g) => g.up_to_date).length;
    mount(banner, fleet.converged
      ? h('div', { class: 'ok-box' }, h('strong', { text: `Converged at revision ${fleet.revision}` }),
        ` — every live gateway (${live.length}) serves it.`)
      : h('div', { class: 'warn-box' }, h('strong', { text: `Not converged at revision ${fleet.revision}` }),
        ` — ${current} of ${live.length} live gateway(s) serve it.`));
    banner.dataset.converged = String(fleet.converged);
    banner.dataset.revision = String(fleet.revision);
    mount(rows, fleet.gateways.length ? fleet.gateways.map((g) => h('tr', { class: g.live ? '' : 'gone' },
      h('td', { class: 'mono', text: g.id }), h('td', { class: 'mono', text: g.address }),
      h('td', {}, g.live ? badge('live', 'good') : badge('silent', 'bad')),
      h('td', { text: g.revision }),
      h('td', {}, g.up_to_date ? badge('current', 'good') : badge(`behind by ${fleet.revision - g.revision}`, 'warn')),
      h('td', {}, h('span', { text: ago(g.last_seen) }), ' ', h('span', { class: 'muted' }, '(', time(g.last_seen), ')')),
      h('td', { class: 'mono', text: g.version }),
      h('td', { class: 'mono following', text: g.following
        ? `${g.following.url}${g.following.address ? ` (${g.following.address})` : ''}` : '' })))
      : h('tr', {}, h('td', { colspan: 8, class: 'muted', text: 'No gateway has reported yet.' })));
  };
  mount(main, h('div', { class: 'page-head' }, h('h1', { text: 'Gateways' }), h('span', { class: 'muted', text: 'refreshed every 2 s' })),
    banner,
    h('table', { class: 'list', id: 'gateways' },
      h('thead', {}, h('tr', {}, ['Id', 'Address', 'Live', 'Revision', 'Current?', 'Last heartbeat', 'Version', 'Following'].map((t) => h('th', { text: t })))),
      rows));
  await refresh();
  const timer = setInterval(() => refresh().catch(fail), 2000);
  return () => clearInterval(timer);
}
