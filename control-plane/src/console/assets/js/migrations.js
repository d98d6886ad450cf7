// Migrations of a tenant: start one (destination, ack mode, rate), then step through double-write, backfill,
// verify, cutover and finish with the buttons the state allows, watching the background tasks' progress live.

import { api, enc, ApiError } from './api.js';
import { h, mount, field, showFieldErrors, button, time, badge, number } from './dom.js';
import { notice, fail } from './notice.js';
import { can } from './session.js';
import { tenantHeader } from './tenants.js';
import { describe } from './routes.js';

const base = (tenant) => `/v1/tenants/${enc(tenant)}/migrations`;
const ACTIVE = ['double_write', 'backfilling', 'backfilled', 'verifying', 'verified', 'cut_over', 'rolling_back'];
// States whose background task runs: polled quickly.
const RUNNING = ['backfilling', 'verifying', 'rolling_back'];

export async function list(main, tenant) {
  const [{ migrations }, { resources }] = await Promise.all([api.get(base(tenant)), api.get('/v1/resources')]);
  const active = migrations.find((m) => ACTIVE.includes(m.state));
  mount(main, tenantHeader(tenant, 'migrations'),
    h('div', { class: 'columns' },
      h('section', { class: 'card grow' },
        h('h2', { text: 'Migrations' }),
        migrations.length ? h('table', { class: 'list', id: 'migration-list' },
          h('thead', {}, h('tr', {}, ['Id', 'State', 'Ack', 'Started', 'By'].map((t) => h('th', { text: t })))),
          h('tbody', {}, migrations.map((m) => h('tr', {},
            h('td', {}, h('a', { href: `#/tenants/${enc(tenant)}/migrations/${m.id}`, text: `#${m.id}` })),
            h('td', {}, stateBadge(m.state)), h('td', { text: m.ack }), h('td', {}, time(m.created_at)),
            h('td', { class: 'mono', text: m.author })))))
          : h('p', { class: 'muted', text: 'This tenant was never migrated.' })),
      active ? h('section', { class: 'card' }, h('p', {}, 'Migration ', h('a', { href: `#/tenants/${enc(tenant)}/migrations/${active.id}`, text: `#${active.id}` }), ' is in progress: one at a time.'))
        : can.change() ? startForm(tenant, resources) : null));
}

function startForm(tenant, resources) {
  const to = h('input', { id: 'migration-to', list: 'resource-names', required: true, placeholder: 'a resource name or URL', spellcheck: 'false' });
  const names = h('datalist', { id: 'resource-names' }, resources.map((r) => h('option', { value: r.name })));
  const ack = h('select', { id: 'migration-ack' }, ['primary', 'all', 'all_check_error'].map((a) => h('option', { value: a }, a)));
  const rate = h('input', { id: 'migration-rate', type: 'number', min: 0, value: 20000 });
  const form = h('form', { class: 'card', id: 'start-migration', onsubmit: async (event) => {
    event.preventDefault();
    try {
      const m = await api.post(base(tenant), { to: to.value, ack: ack.value, limits: { keys_per_sec: Number(rate.value) } });
      location.hash = `#/tenants/${enc(tenant)}/migrations/${m.id}`;
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        if (showFieldErrors(form, error.details).length) fail(error);
      } else fail(error);
    }
  } },
  h('h2', { text: 'Start a migration' }),
  h('p', { class: 'muted', text: 'Writes go to both deployments at once; reads stay on the current one until cutover.' }),
  field('Destination', h('span', {}, to, names), '/to', 'one target; a whole table (to re-shard) over the API'),
  field('Ack of double-written commands', ack, '/ack'),
  field('Keys per second for backfill and verify (0: unlimited)', rate, '/limits'),
  h('button', { type: 'submit' }, 'Start (double-write)'));
  return form;
}

function stateBadge(state) {
  const kind = state === 'finished' ? 'good' : state === 'aborted' ? 'bad' : 'warn';
  return badge(state.replace('_', ' '), kind);
}

const STEPS = [
  ['double_write', 'Double-write'],
  ['backfill', 'Backfill'],
  ['verify', 'Verify'],
  ['cut_over', 'Cutover'],
  ['finished', 'Finish'],
];
const REACHED = {
  double_write: 0, backfilling: 1, backfilled: 1, verifying: 2, verified: 2, cut_over: 3, rolling_back: 3, finished: 4,
  aborted: -1,
};

export async function show(main, tenant, id) {
  const box = h('div', { id: 'migration' });
  mount(main, tenantHeader(tenant, 'migrations'), box);
  let timer = null;
  const refresh = async () => {
    const [m, r] = await Promise.all([api.get(`${base(tenant)}/${id}`), api.get(`${base(tenant)}/${id}/readiness`)]);
    render(box, tenant, m, r, async (action) => {
      try {
        await api.post(`${base(tenant)}/${id}/${action}`);
        await refresh();
      } catch (error) { fail(error); }
    });
    // Polled quickly while a task runs or gateways catch up, slowly otherwise; not at all once it is history.
    clearTimeout(timer);
    if (ACTIVE.includes(m.state)) timer = setTimeout(() => refresh().catch(fail), RUNNING.includes(m.state) || !m.converged ? 300 : 2000);
  };
  await refresh();
  return () => clearTimeout(timer);
}

function render(box, tenant, m, r, step) {
  const reached = REACHED[m.state];
  const running = RUNNING.includes(m.state);
  const waiting = !m.converged && ACTIVE.includes(m.state);
  // Each step's button is enabled exactly when the API would take it (see POST .../{action}).
  const allowed = {
    backfill: m.state === 'double_write' && m.converged,
    verify: m.state === 'backfilled' || m.state === 'verified',
    cutover: m.state === 'verified',
    // The API refuses a cutover that is not ready (409 not_ready) unless forced.
    'cutover?force=true': m.state === 'verified' && !r.ready,
    finish: m.state === 'cut_over' && m.converged,
    // From cut_over an abort first repairs old from new (rolling_back); forced, it returns to old at once.
    abort: ACTIVE.includes(m.state) && m.state !== 'rolling_back',
    'abort?force=true': ['cut_over', 'rolling_back'].includes(m.state),
  };
  const action = (name, label, cls) => {
    const b = button(label, () => { b.disabled = true; step(name); }, cls || 'primary');
    b.id = `step-${name.replace('?force=true', '-force')}`;
    b.disabled = !allowed[name];
    return b;
  };
  mount(box,
    h('section', { class: 'card' },
      h('div', { class: 'page-head' }, h('h2', { text: `Migration #${m.id}` }), stateBadge(m.state)),
      h('ol', { class: 'stepper' }, STEPS.map(([key, label], i) => h('li', {
        class: m.state === 'aborted' ? 'aborted' : i < reached || m.state === 'finished' ? 'done' : i === reached ? 'now' : '',
        'data-step': key }, label))),
      h('p', { id: 'migration-state', 'data-state': m.state, class: 'muted' },
        `State ${m.state}; ack ${m.ack}; by ${m.author}; updated `, time(m.updated_at), '.'),
      waiting ? h('p', { class: 'warn-text', text: `Waiting for every live gateway to serve revision ${m.route_revision} before the next step.` }) : null,
      m.error ? h('p', { class: 'error-text', id: 'migration-error', text: `The last task stopped: ${m.error} (retried every 2 s)` }) : null,
      can.change() && h('div', { class: 'actions' },
        action('backfill', 'Backfill'), action('verify', m.state === 'verified' ? 'Verify again' : 'Verify'),
        action('cutover', 'Cut over'), r.ready ? null : action('cutover?force=true', 'Cut over anyway', 'danger'),
        action('finish', 'Finish'), action('abort', 'Abort', 'danger'),
        allowed['abort?force=true'] ? action('abort?force=true', 'Abort without repairing old', 'danger') : null)),
    readiness(r, ACTIVE.includes(m.state) && !['cut_over', 'rolling_back'].includes(m.state)),
    progress('Backfill', 'backfill', m.progress.backfill, running && m.state === 'backfilling'),
    progress('Verify', 'verify', m.progress.verify, running && m.state === 'verifying'),
    progress('Rollback (old repaired from new)', 'rollback', m.progress.rollback, running && m.state === 'rolling_back'),
    h('div', { class: 'columns' },
      h('section', { class: 'card grow' }, h('h3', { text: 'From' }), describe(m.from)),
      h('section', { class: 'card grow' }, h('h3', { text: 'To' }), describe(m.to))));
}

function progress(title, id, p, live) {
  if (!p) return null;
  const total = Math.max(p.estimated_total, p.scanned, 1);
  const counts = id === 'backfill'
    ? [['copied', p.copied], ['skipped', p.skipped], ['failed', p.failed]]
    : [['matched', p.matched], ['repaired', p.repaired], ['removed', p.removed], ['unresolved', p.unresolved], ['failed', p.failed]];
  const percent = p.finished_at ? 100 : Math.min(100, Math.floor((p.scanned / total) * 100));
  return h('section', { class: 'card', id: `progress-${id}` },
    h('div', { class: 'page-head' }, h('h3', { text: title }), p.finished_at ? badge('done', 'good') : live ? badge('running', 'warn') : null),
    h('progress', { max: 100, value: percent, 'data-scanned': p.scanned, 'data-total': p.estimated_total }),
    h('p', {}, h('strong', { text: `${percent}%` }), ` — ${number(p.scanned)} of ~${number(p.estimated_total)} keys scanned; `,
      counts.map(([k, v]) => `${k} ${number(v)}`).join(', '),
      p.gateway_repair ? `; the gateways' repair: ${number(p.gateway_repair.repaired)} repaired, ${number(p.gateway_repair.pending)} owed` : '',
      `; ${number(Math.round(p.keys_per_sec))} keys/s`,
      p.finished_at ? '' : p.eta_secs !== null && p.eta_secs !== undefined ? `; ETA ${p.eta_secs} s` : ''));
}

// What gateways counted of the tenant's commands against the destination (docs/migration.md#readiness); a
// tenant's readiness probe shows the same answer.
export function readiness(r, live) {
  const c = r.counts;
  const verdict = r.ready ? badge('ready', 'good') : badge('not ready', 'bad');
  return h('section', { class: 'card', id: 'migration-readiness', 'data-ready': String(r.ready) },
    h('div', { class: 'page-head' }, h('h3', { text: 'Readiness' }), verdict, live ? badge('counting', 'warn') : null),
    h('p', { class: 'muted' }, `${number(r.checked)} commands checked against the destination by ${r.gateways.length} gateway(s). `,
      'Would fail there: ', h('strong', { id: 'readiness-failing', text: `${number(c.cross_slot)} multi-key, ${number(c.transactions)} transactions, ${number(c.scripts)} scripts, ${number(c.unsupported)} unknown commands` }),
      `; split by the gateway (not atomic there): ${number(c.split)}.`,
      r.commands_checked ? '' : ` Commands not checked against the destination: ${r.commands_unchecked}.`),
    r.examples.length ? h('table', { class: 'list', id: 'readiness-examples' },
      h('thead', {}, h('tr', {}, ['Kind', 'Command', 'Keys', 'Count'].map((t) => h('th', { text: t })))),
      h('tbody', {}, r.examples.map((e) => h('tr', {},
        h('td', { text: e.kind }), h('td', { class: 'mono', text: e.command }),
        h('td', { class: 'mono', text: e.keys.join('  ') }), h('td', { text: number(e.count) })))))
      : null);
}
