// Building the page from elements, never from HTML text: whatever the API returns (tenant names, descriptions,
// audit entries) is shown as text and can never become markup or script.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'text') el.textContent = value;
    else if (key === 'value') el.value = value;
    else if (key === 'checked') el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A form field with its label and a place for the server's message about it (`data-path` is the JSON pointer
// of the request body field it edits, where a 422's details land).
export function field(label, input, path, hint) {
  return h('label', { class: 'field', 'data-path': path },
    h('span', { class: 'label', text: label }), input,
    hint ? h('span', { class: 'hint', text: hint }) : null,
    h('span', { class: 'field-error', role: 'alert' }));
}

// Puts each 422 detail under the field whose path is the longest prefix of the detail's; returns the details
// no field took.
export function showFieldErrors(form, details) {
  for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
  for (const el of form.querySelectorAll('.field.invalid')) el.classList.remove('invalid');
  const fields = [...form.querySelectorAll('.field[data-path]')];
  const rest = [];
  for (const detail of details || []) {
    const owner = fields
      .filter((f) => detail.path === f.dataset.path || detail.path.startsWith(f.dataset.path + '/'))
      .sort((a, b) => b.dataset.path.length - a.dataset.path.length)[0];
    if (!owner) { rest.push(detail); continue; }
    owner.classList.add('invalid');
    const slot = owner.querySelector('.field-error');
    slot.textContent = (slot.textContent ? slot.textContent + '; ' : '') +
      (detail.path === owner.dataset.path ? '' : detail.path.slice(owner.dataset.path.length + 1) + ': ') +
      detail.message;
  }
  return rest;
}

export function button(text, onclick, cls) {
  return h('button', { type: 'button', class: cls || 'secondary', onclick }, text);
}

// A time as the API and the command line show it: ISO 8601 in UTC (to the second), whatever the browser's zone.
export function utc(at) {
  return at.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function time(iso) {
  if (!iso) return '';
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  return h('time', { datetime: iso, title: iso }, utc(at));
}

export function ago(iso) {
  const secs = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (secs < 60) return `${secs} s ago`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
  return `${Math.floor(secs / 3600)} h ago`;
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind || ''}`, text });
}

export function number(n) {
  return Number(n || 0).toLocaleString('en-US');
}

// A secret the API shows once (a credential's, a token's): in a box that says so, with a copy button, until the
// page changes. It is never stored.
export function revealSecret(box, secret, warning) {
  const code = h('code', { id: 'new-secret', text: secret });
  const copied = h('span', { class: 'muted' });
  mount(box, h('div', { class: 'secret warn-box', role: 'alert' },
    h('strong', { text: warning }),
    h('div', { class: 'secret-line' }, code,
      button('Copy', async () => {
        try {
          await navigator.clipboard.writeText(secret);
          copied.textContent = 'copied';
        } catch {
          getSelection().selectAllChildren(code);
          copied.textContent = 'selected: press Ctrl+C';
        }
      }), copied),
    button('I have stored it', () => box.replaceChildren(), 'link')));
}
