// The message line above every page: what failed (with the API's status and error code) or what was done.

import { ApiError } from './api.js';
import { h, button } from './dom.js';

const box = () => document.getElementById('notice');

export function notice(kind, text) {
  const el = box();
  el.className = kind;
  el.hidden = !text;
  el.replaceChildren(text ? h('span', { text }) : '', text ? button('Dismiss', () => notice('', ''), 'link') : '');
}

export function fail(error) {
  if (error instanceof ApiError && error.status === 401) return;
  notice('error', error instanceof ApiError ? `${error.status} ${error.code || ''}: ${error.message}` : String(error));
}
