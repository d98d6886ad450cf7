// Usage: the platform's overview (the busiest tenants now by ops/s, errors and connections; every tenant's
// traffic over the day; which resources the gateways reach) and a tenant's usage (its traffic charts, its near
// cache, how far its double-write secondaries are from the primary, hot keys, big keys and slow log). Refreshed
// every 5 seconds while shown. Each credential's last use is in the tenant's credential list.

import { api, enc } from './api.js';
import { h, mount, time } from './dom.js';
import { fail } from './notice.js';
import { lineChart, short } from './chart.js';
import { tenantHeader } from './tenants.js';
import { health, gatewayViews } from './resources.js';

const REFRESH_MS = 5000;

const nowSecs = () => Math.floor(Date.now() / 1000);
const ms = (us) => (us === undefined || us === null ? undefined : us / 1000);

// How far back the charts reach, in minutes (the API keeps a day).
function spanSelect(id) {
  return h('select', { id },
    [[60, 'last hour'], [360, 'last 6 hours'], [1440, 'last 24 hours']].map(([m, t]) => h('option', { value: m, text: t })));
}

function charts(points, from, prefix, title) {
  return h('div', { class: 'charts' },
    lineChart(`${prefix}-ops`, `${title}ops/s`, points, (p) => p.ops_per_sec, from, nowSecs()),
    lineChart(`${prefix}-errors`, `${title}errors/s`, points, (p) => p.errors_per_sec, from, nowSecs()),
    lineChart(`${prefix}-connections`, `${title}connections`, points, (p) => p.connections, from, nowSecs()),
    lineChart(`${prefix}-p99`, `${title}p99 latency, ms (where timed)`, points, (p) => ms(p.p99_us), from, nowSecs()));
}

function table(id, headings, rows, empty) {
  return h('table', { class: 'list', id },
    h('thead', {}, h('tr', {}, headings.map((t) => h('th', { text: t })))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: headings.length, class: 'muted', text: empty }))));
}

function top(id, title, tenants) {
  const rows = tenants.map((t) => h('tr', {},
    h('td', {}, h('a', { href: `#/tenants/${enc(t.tenant)}/usage`, text: t.tenant })),
    h('td', { text: short(t.ops_per_sec) }), h('td', { text: short(t.errors_per_sec) }),
    h('td', { text: t.connections }), h('td', { text: t.p99_us === undefined ? '' : short(ms(t.p99_us)) })));
  return h('section', { class: 'card' }, h('h2', { text: title }),
    table(id, ['Tenant', 'ops/s', 'errors/s', 'connections', 'p99 ms'], rows, 'None in the last two minutes.'));
}

// Every registered resource: up or down, and what each gateway sees.
function resourceHealth(resources) {
  const count = (test) => resources.filter(test).length;
  const up = count((r) => r.reachability && !r.reachability.down);
  const down = count((r) => r.reachability?.down);
  const rows = resources.map((r) => h('tr', { 'data-resource': r.name },
    h('td', {}, h('a', { href: '#/resources', class: 'mono', text: r.name })),
    h('td', {}, health(r)), h('td', {}, gatewayViews(r))));
  return h('section', { class: 'card' },
    h('h2', { text: 'Resources' }),
    h('p', { id: 'resources-summary', text: `${up} up, ${down} down, ${resources.length - up - down} not reported` }),
    table('resource-health', ['Resource', 'Health', 'Gateways'], rows, 'No resource registered.'));
}

export async function overview(main) {
  const span = spanSelect('usage-span');
  const body = h('div');
  const refresh = async () => {
    const [usage, { resources }] = await Promise.all([api.get('/v1/usage?limit=10'), api.get('/v1/resources')]);
    const from = nowSecs() - Number(span.value) * 60;
    mount(body, charts(usage.total.filter((p) => p.minute >= from), from, 'total', 'All tenants: '),
      h('div', { class: 'columns three' },
        top('top-ops', 'Busiest by ops/s', usage.by_ops),
        top('top-errors', 'Most errors', usage.by_errors),
        top('top-connections', 'Most connections', usage.by_connections)),
      resourceHealth(resources));
  };
  span.addEventListener('change', () => refresh().catch(fail));
  mount(main, h('div', { class: 'page-head' }, h('h1', { text: 'Usage' }), span,
    h('span', { class: 'muted', text: 'by minute, every gateway summed; "now" is the last two minutes; refreshed every 5 s' })),
  body);
  await refresh();
  const timer = setInterval(() => refresh().catch(fail), REFRESH_MS);
  return () => clearInterval(timer);
}

// The tenant's keys and their memory, asked of its Redis once when the page opens (not at every refresh).
function keyspaceCard(keyspace) {
  const figures = keyspace.error
    ? h('p', { class: 'error-text', text: `Not known: ${keyspace.error}` })
    : h('p', {}, h('strong', { id: 'keyspace-keys', text: short(keyspace.keys) }), ' keys, about ',
      h('strong', { id: 'keyspace-memory', text: `${short((keyspace.memory_bytes || 0) / 1048576)} MiB` }),
      h('span', { class: 'muted', text: {
        exact: ' (its own databases: DBSIZE; memory is each server\'s apportioned by its share of the keys)',
        sampled: ' (a key namespace in shared databases: estimated from a sample of random keys)',
        shared: ` (every key of databases it shares without a namespace, with ${(keyspace.shared_with || []).join(', ')})`,
      }[keyspace.method] }));
  return h('section', { class: 'card', id: 'keyspace' }, h('h2', { text: 'Keys and memory' }), figures,
    h('p', { class: 'muted' }, 'Asked at ', time(keyspace.asked_at)));
}

// How far each double-write secondary is from the primary: the share of differing keys among those the gateways
// sampled, the repair's backlog and what it repaired (docs/route-tables.md#repair-of-missed-writes).
function divergenceCard({ secondaries }) {
  const percent = (s) => (s.estimate === undefined ? 'not sampled' : `${short(s.estimate * 100)}%`);
  const rows = secondaries.map((s) => h('tr', { 'data-resource': s.resource },
    h('td', { class: 'mono', text: s.resource }),
    h('td', { class: s.estimate > 0 ? 'error-text' : '', text: percent(s) }),
    h('td', { text: `${short(s.differing)} of ${short(s.samples)}` }),
    h('td', { text: short(s.pending) + (s.catching_up ? ' (catching up: every key compared)' : '') }),
    h('td', { text: short(s.repaired) }), h('td', {}, time(s.reported_at))));
  return h('section', { class: 'card', id: 'divergence' }, h('h2', { text: 'Double-write divergence' }),
    table('divergence-table', ['Secondary', 'Differing keys (estimate)', 'Sampled', 'Repair backlog', 'Repaired', 'Reported'],
      rows, 'No double-write secondary reported by a gateway.'));
}

// The tenant's near cache over the span shown (docs/near-cache.md): its reads answered from memory, as a ratio and
// minute by minute, what it dropped, and the bytes it held (at the last minute reported, and by minute); absent
// without the cache.
function nearCacheCard(points, from) {
  const minutes = points.filter((p) => p.near_cache);
  if (!minutes.length) return null;
  const sum = (key) => minutes.reduce((total, p) => total + p.near_cache[key], 0);
  const [hits, misses] = [sum('hits'), sum('misses')];
  const ratio = hits + misses ? `${((hits / (hits + misses)) * 100).toFixed(1)}%` : 'no read';
  const bytes = minutes[minutes.length - 1].near_cache.bytes;
  const cell = (figure, text) => h('td', { 'data-figure': figure, text });
  return h('section', { class: 'card', id: 'near-cache' }, h('h2', { text: 'Near cache' }),
    table('near-cache-table', ['Hit ratio', 'Hits', 'Misses', 'Invalidations', 'Evictions', 'Bytes held'], [h('tr', {},
      cell('hit-ratio', ratio), cell('hits', short(hits)), cell('misses', short(misses)),
      cell('invalidations', short(sum('invalidations'))), cell('evictions', short(sum('evictions'))),
      cell('bytes', short(bytes)))], ''),
    h('div', { class: 'charts' },
      lineChart('tenant-near-cache-ratio', 'hit ratio, %', minutes,
        (p) => (p.near_cache.hit_ratio === undefined ? 0 : p.near_cache.hit_ratio * 100), from, nowSecs()),
      lineChart('tenant-near-cache-bytes', 'bytes held', minutes, (p) => p.near_cache.bytes, from, nowSecs())));
}

export async function tenant(main, name) {
  const span = spanSelect('usage-span');
  const body = h('div');
  const base = `/v1/tenants/${enc(name)}`;
  const keyspace = h('div', {}, h('p', { class: 'muted', text: 'Asking its Redis for its keys…' }));
  api.get(`${base}/keyspace`).then((k) => mount(keyspace, keyspaceCard(k))).catch(fail);
  const refresh = async () => {
    const minutes = Number(span.value);
    const [usage, hot, big, slow, divergence] = await Promise.all([
      api.get(`${base}/usage?minutes=${minutes}`), api.get(`${base}/hot-keys`),
      api.get(`${base}/big-keys`), api.get(`${base}/slowlog`), api.get(`${base}/divergence`)]);
    const from = nowSecs() - minutes * 60;
    mount(body, charts(usage.points, from, 'tenant', ''), nearCacheCard(usage.points, from), divergenceCard(divergence),
      h('div', { class: 'columns three' },
        h('section', { class: 'card' }, h('h2', { text: 'Hot keys (last minute)' }),
          table('hot-keys', ['Key', 'Accesses'], hot.keys.map((k) => h('tr', {},
            h('td', { class: 'mono', text: k.key }), h('td', { text: short(k.count) }))), 'No hot key.')),
        h('section', { class: 'card' }, h('h2', { text: 'Big keys (last hour)' }),
          table('big-keys', ['Key', 'Command', 'Bytes', 'Gateway'], big.keys.map((k) => h('tr', {},
            h('td', { class: 'mono', text: k.key ?? '' }), h('td', { text: `${k.command} (${k.direction})` }),
            h('td', { text: short(k.bytes) }), h('td', { class: 'mono', text: k.gateway }))), 'No big key.')),
        h('section', { class: 'card' }, h('h2', { text: 'Slow log (last hour)' }),
          table('slow-log', ['When', 'ms', 'Command', 'Gateway'], slow.entries.map((e) => h('tr', {},
            h('td', {}, time(new Date(e.timestamp * 1000).toISOString())), h('td', { text: short(ms(e.duration_us)) }),
            h('td', { class: 'mono', text: e.args.join(' ') }), h('td', { class: 'mono', text: e.gateway }))), 'Nothing slow.'))));
  };
  span.addEventListener('change', () => refresh().catch(fail));
  mount(main, tenantHeader(name, 'usage'),
    h('div', { class: 'page-head' }, h('h2', { text: 'Traffic' }), span,
      h('span', { class: 'muted', text: 'every gateway summed, by minute; refreshed every 5 s' })),
    keyspace, body);
  await refresh();
  const timer = setInterval(() => refresh().catch(fail), REFRESH_MS);
  return () => clearInterval(timer);
}
