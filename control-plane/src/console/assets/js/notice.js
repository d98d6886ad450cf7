// The message line above every page: what failed (with the API's status and error code) or what was done.

import { ApiError } from './api.js';
import { h, button, showFieldErrors } from './dom.js';

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

// A create form's failure: a 422's details at their fields (the rest in the message line), a 409 (the name is
// taken) at the name field, anything else in the message line.
export function createFailed(form, error) {
  if (error instanceof ApiError && error.status === 422) {
    if (showFieldErrors(form, error.details).length) fail(error);
  } else if (error instanceof ApiError && error.status === 409) {
    showFieldErrors(form, [{ path: '/name', message: error.message }]);
  } else fail(error);
}
