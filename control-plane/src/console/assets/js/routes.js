// A tenant's route: the current table as a readable view and as JSON in an editor (syntax checked as you type,
// the server's 422 details shown on their lines, saved with If-Match so a concurrent change is a 412 shown as a
// diff), "explain a key", and the version history with a side-by-side diff of any two versions and rollback.

import { api, call, enc, query, ApiError } from './api.js';
import { h, mount, field, showFieldErrors, button, time, badge } from './dom.js';
import { notice, fail } from './notice.js';
import { can } from './session.js';
import { pretty, syntaxError, lineOf } from './json.js';
import { diffView } from './diff.js';
import { routeTableChecker } from './schema.js';
import { tenantHeader } from './tenants.js';

const TEMPLATE = { type: 'single', target: 'main' };

const path = (tenant) => `/v1/tenants/${enc(tenant)}/route`;

// The current version, or version 0 (no route yet).
async function current(tenant) {
  try {
    return (await call('GET', path(tenant))).body;
  } catch (error) {
    if (error instanceof ApiError && error.status === 404 && /no route yet/.test(error.message)) return null;
    throw error;
  }
}

export async function edit(main, tenant) {
  let base = await current(tenant);
  let version = base ? base.version : 0;
  const view = h('section', { class: 'card', id: 'route-view' });
  const gutter = h('pre', { class: 'gutter', 'aria-hidden': 'true' });
  const editor = h('textarea', { id: 'route-editor', spellcheck: 'false', autocomplete: 'off', wrap: 'off' });
  const status = h('p', { id: 'route-status', class: 'muted' });
  const problems = h('ul', { id: 'route-errors', class: 'problems' });
  const comment = h('input', { id: 'route-comment', placeholder: 'why this change' });
  const force = h('input', { id: 'route-force', type: 'checkbox' });
  const conflict = h('div', { id: 'route-conflict' });
  const explain = explainForm(tenant);
  let errorLines = new Set();

  const paintGutter = () => {
    const count = editor.value.split('\n').length;
    mount(gutter, Array.from({ length: count }, (_, i) =>
      h('span', { class: errorLines.has(i + 1) ? 'bad-line' : '' }, `${i + 1}\n`)));
    gutter.scrollTop = editor.scrollTop;
  };
  const showProblems = (items) => {
    errorLines = new Set(items.map((p) => p.line).filter(Boolean));
    mount(problems, items.map((p) => h('li', { class: 'problem', 'data-line': p.line || '' },
      p.line ? button(`line ${p.line}`, () => selectLine(editor, p.line), 'link') : null, ' ', h('span', { text: p.text }))));
    paintGutter();
  };
  let schemaCheck = null;
  const check = () => {
    const text = editor.value;
    const error = syntaxError(text);
    if (error) {
      status.className = 'error-text';
      status.textContent = `Not JSON: line ${error.line}, column ${error.column}: ${error.message}`;
      showProblems([{ line: error.line, text: `not JSON: ${error.message}` }]);
      return error;
    }
    const problems = schemaCheck ? schemaCheck(JSON.parse(text)) : [];
    if (problems.length) {
      status.className = 'error-text';
      status.textContent = `${problems.length} problem(s) against the route table schema (the server has the last word).`;
    } else {
      status.className = 'ok-text';
      status.textContent = `${schemaCheck ? 'Matches the route table schema' : 'JSON is well formed'} (saving over version ${version}; the server checks resources and buckets).`;
    }
    showProblems(problems.map((p) => ({ line: lineOf(text, p.path), text: `/route${p.path}: ${p.message}` })));
    return null;
  };
  routeTableChecker().then((checker) => { schemaCheck = checker; check(); }).catch(() => {});
  const load = (route, v) => {
    editor.value = pretty(route);
    version = v;
    check();
  };
  editor.addEventListener('input', check);
  editor.addEventListener('scroll', () => { gutter.scrollTop = editor.scrollTop; });

  const save = async () => {
    if (check()) return;
    const text = editor.value;
    showFieldErrors(form, []);
    try {
      const { body } = await call('PUT', path(tenant),
        { route: JSON.parse(text), comment: comment.value, force: force.checked },
        { 'If-Match': version ? `"${version}"` : '0' });
      base = body;
      load(body.route, body.version);
      comment.value = '';
      force.checked = false;
      conflict.replaceChildren();
      renderView(view, tenant, body);
      notice('ok', `Saved version ${body.version} (revision ${body.revision}): ${keysMoved(body.keys)}.`);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'keys_would_move') {
        showProblems(error.details.map((d) => ({ line: null, text: d.message })));
        notice('error', `Not saved: ${error.message.replace(/: pass "force".*/, '')}. Move the keys with a migration, or tick "Force" to save anyway.`);
        return;
      }
      if (error instanceof ApiError && error.status === 422) {
        const rest = showFieldErrors(form, error.details.filter((d) => d.path === '/comment'));
        const items = error.details.filter((d) => d.path !== '/comment').concat(rest).map((d) => {
          const pointer = d.path.startsWith('/route') ? d.path.slice('/route'.length) : null;
          return { line: pointer === null ? null : lineOf(text, pointer), text: `${d.path || '/'}: ${d.message}` };
        });
        showProblems(items.length ? items : [{ line: null, text: error.message }]);
        notice('error', `The server refused the table: ${error.message}`);
      } else if (error instanceof ApiError && error.status === 412) {
        const theirs = await current(tenant);
        showConflict(conflict, theirs, version, text, {
          take: () => { load(theirs.route, theirs.version); conflict.replaceChildren(); },
          mine: () => { version = theirs.version; conflict.replaceChildren(); check(); save(); },
        });
        conflict.scrollIntoView({ block: 'start' });
        notice('error', `Someone else changed the route: it is at version ${theirs ? theirs.version : 0}, you edited version ${version}.`);
      } else fail(error);
    }
  };
  const form = h('form', { class: 'card grow', id: 'route-form', onsubmit: (event) => { event.preventDefault(); save(); } },
    h('h2', { text: 'Edit as JSON' }),
    h('div', { class: 'editor' }, gutter, editor),
    status, problems,
    field('Comment', comment, '/comment'),
    field('Force', force, '/force', 'save even if keys would no longer be found, or a new resource does not answer (yet)'),
    h('div', { class: 'actions' },
      h('button', { type: 'submit', id: 'save-route' }, 'Save new version'),
      button('Revert to the current version', () => (base ? load(base.route, base.version) : load(TEMPLATE, 0)), 'secondary')),
    conflict);

  mount(main, tenantHeader(tenant, 'route'),
    h('div', { class: 'columns' }, h('div', { class: 'stack' }, view, explain), can.change() ? form : null));
  renderView(view, tenant, base);
  if (base) load(base.route, base.version);
  else load(TEMPLATE, 0);
}

// The guard's report of a saved change, in words: "no key moved", or the share of keys left where they are no
// longer found (a forced change).
function keysMoved(keys) {
  if (!keys || keys.estimate === 'none') return 'no key moved';
  const share = `${(keys.fraction * 100).toFixed(1)}%`;
  const dropped = keys.databases_dropped ? `, databases ${keys.databases_dropped} given up` : '';
  return `${share} of the keys are no longer found (${keys.estimate})${dropped}`;
}

function selectLine(textarea, line) {
  const lines = textarea.value.split('\n');
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  textarea.focus();
  textarea.setSelectionRange(start, start + (lines[line - 1] || '').length);
}

function showConflict(box, theirs, mine, text, actions) {
  const theirVersion = theirs ? theirs.version : 0;
  mount(box, h('div', { class: 'warn-box', role: 'alert' },
    h('h3', { text: `Conflict: the route moved on to version ${theirVersion} while you edited version ${mine}` }),
    theirs ? h('p', { class: 'muted' }, `Version ${theirVersion} by ${theirs.author}, `, time(theirs.created_at),
      theirs.comment ? `: “${theirs.comment}”` : '') : null,
    diffView(`Server: version ${theirVersion}`, theirs ? pretty(theirs.route) : '', 'Your edit', pretty(JSON.parse(text))),
    h('div', { class: 'actions' },
      button(`Load version ${theirVersion} into the editor`, actions.take, 'secondary'),
      button(`Save mine over version ${theirVersion}`, actions.mine, 'danger'))));
}

// The readable view: shards, hash, read and write sets, double-write and its ack mode.
function renderView(box, tenant, current) {
  if (!current) {
    mount(box, h('h2', { text: 'No route yet' }), h('p', { class: 'muted', text: `Clients of ${tenant} are refused until a route is saved.` }));
    return;
  }
  mount(box,
    h('h2', { text: `Version ${current.version}` }),
    h('p', { class: 'muted' }, `by ${current.author}, `, time(current.created_at), current.comment ? ` — ${current.comment}` : ''),
    describe(current.route));
}

export function describe(table) {
  const dbs = table.databases && table.databases > 1 ? h('p', {}, `${table.databases} databases`) : null;
  if (table.type === 'single') return h('div', { class: 'route-desc' }, badge('single'), dbs, target(table.target));
  if (table.type === 'sharded') {
    const hash = table.hash || { algorithm: 'ring' };
    return h('div', { class: 'route-desc' },
      badge('sharded'), ' ', h('span', { text: `hash ${hash.algorithm}${hash.buckets ? `, ${hash.buckets} buckets` : ''}` }), dbs,
      h('table', { class: 'list shards' },
        h('thead', {}, h('tr', {}, ['Shard', hash.algorithm === 'ring' ? 'Weight' : 'Buckets', 'Serves'].map((t) => h('th', { text: t })))),
        h('tbody', {}, (table.shards || []).map((s) => h('tr', {},
          h('td', { class: 'mono', text: s.name }),
          h('td', { class: 'mono', text: hash.algorithm === 'ring' ? String(s.weight || 1) : (s.buckets || []).join(', ') }),
          h('td', {}, target(s.target)))))));
  }
  if (table.type === 'double_write') {
    return h('div', { class: 'route-desc' },
      badge('double write (migration)', 'warn'), ' ', h('span', { text: `ack ${table.ack || 'primary'}` }),
      h('h4', { text: 'Primary (reads and first write)' }), describe(table.primary),
      h('h4', { text: 'Secondary (written after)' }), describe(table.secondary));
  }
  return h('pre', { text: pretty(table) });
}

function target(t) {
  if (typeof t === 'string') return h('div', { class: 'target' }, h('span', { class: 'label', text: 'reads & writes' }), resource(t));
  const write = t.write || { resources: [] };
  const read = t.read || { resources: [write.resources[0]], policy: 'primary' };
  const doubled = write.resources.length > 1;
  return h('div', { class: 'target' },
    h('div', {}, h('span', { class: 'label', text: `reads (${read.policy || 'primary'})` }), read.resources.map(resource)),
    h('div', {}, h('span', { class: 'label', text: doubled ? `writes, double-written, ack ${write.ack || 'primary'}` : 'writes' }),
      write.resources.map((r, i) => [i ? h('span', { class: 'arrow', text: '→' }) : null, resource(r)])));
}

function resource(name) {
  return h('span', { class: name.includes('://') ? 'resource url' : 'resource', text: name });
}

function explainForm(tenant) {
  const key = h('input', { id: 'explain-key', placeholder: 'user:42', autocomplete: 'off' });
  const result = h('div', { id: 'explain-result' });
  return h('form', { class: 'card', id: 'explain', onsubmit: async (event) => {
    event.preventDefault();
    try {
      const e = await api.get(`${path(tenant)}/explain${query({ key: key.value })}`);
      mount(result, h('dl', { class: 'explained' },
        h('dt', { text: 'Shard' }), h('dd', { text: e.shard === null ? '(single target)' : e.shard }),
        h('dt', { text: `Reads (${e.read_policy})` }), h('dd', {}, e.read.map(resource)),
        h('dt', { text: `Writes (ack ${e.ack})` }), h('dd', {}, e.write.map(resource)),
        h('dt', { text: 'Route version' }), h('dd', { text: e.version })));
    } catch (error) { fail(error); }
  } }, h('h2', { text: 'Explain a key' }), h('div', { class: 'inline' }, key, h('button', { type: 'submit', class: 'secondary' }, 'Explain')), result);
}

export async function history(main, tenant) {
  const versions = [];
  let before = null;
  do {
    const page = await api.get(`${path(tenant)}/versions${query({ limit: 100, before })}`);
    versions.push(...page.versions);
    before = page.next_before;
  } while (before && versions.length < 1000);
  const newest = versions.length ? versions[0].version : 0;
  const pick = (id, chosen) => h('select', { id }, versions.map((v) =>
    h('option', { value: v.version, selected: v.version === chosen }, `v${v.version} — ${v.comment || v.author}`)));
  const left = pick('diff-left', Math.max(1, newest - 1));
  const right = pick('diff-right', newest);
  const out = h('div', { id: 'diff-out' });
  const compare = async () => {
    try {
      const [a, b] = await Promise.all([left.value, right.value].map((v) => api.get(`${path(tenant)}/versions/${v}`)));
      mount(out, diffView(`Version ${a.version}`, pretty(a.route), `Version ${b.version}`, pretty(b.route)));
    } catch (error) { fail(error); }
  };
  const rollback = async (v) => {
    const comment = prompt(`Roll back to version ${v}: a new version equal to it. Comment:`, `rollback to version ${v}`);
    if (comment === null) return;
    try {
      let done;
      try {
        done = await api.post(`${path(tenant)}/rollback`, { version: v, comment });
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 'keys_would_move')) throw error;
        const details = error.details.map((d) => `  ${d.message}`).join('\n');
        if (!confirm(`${error.message.replace(/: pass "force".*/, '')}:\n${details}\n\nRoll back anyway?`)) return;
        done = await api.post(`${path(tenant)}/rollback`, { version: v, comment, force: true });
      }
      notice('ok', `Version ${done.version} is now version ${v}'s table (revision ${done.revision}): ${keysMoved(done.keys)}.`);
      await history(main, tenant);
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        notice('error', `Version ${v} is not valid any more: ${error.details.map((d) => `${d.path}: ${d.message}`).join('; ') || error.message}`);
      } else fail(error);
    }
  };
  mount(main, tenantHeader(tenant, 'history'),
    versions.length ? h('div', { class: 'stack' },
      h('section', { class: 'card' },
        h('h2', { text: 'Compare two versions' }),
        h('div', { class: 'inline' }, left, h('span', { text: 'with' }), right, button('Compare', compare, 'primary')),
        out),
      h('section', { class: 'card' },
        h('table', { class: 'list', id: 'versions' },
          h('thead', {}, h('tr', {}, ['Version', 'Comment', 'Author', 'Saved', ''].map((t) => h('th', { text: t })))),
          h('tbody', {}, versions.map((v) => h('tr', { 'data-version': v.version },
            h('td', { text: `v${v.version}` }), h('td', { text: v.comment }), h('td', { class: 'mono', text: v.author }),
            h('td', {}, time(v.created_at)),
            h('td', {}, v.version === newest ? badge('current', 'good') : !can.change() ? null
              : button(`Roll back to v${v.version}`, () => rollback(v.version), 'secondary small rollback'))))))))
      : h('p', { class: 'muted', text: 'No route versions yet.' }));
  if (versions.length > 1) await compare();
}
