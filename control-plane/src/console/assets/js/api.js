// The REST API, as the console calls it. The admin token lives in sessionStorage (this tab only, gone when it
// closes) and travels only in the Authorization header: never in a URL, a cookie or a log.

const TOKEN = 'switchyard.console.token';

export const token = {
  get: () => sessionStorage.getItem(TOKEN),
  set: (value) => sessionStorage.setItem(TOKEN, value),
  clear: () => sessionStorage.removeItem(TOKEN),
};

export class ApiError extends Error {
  constructor(status, body, headers) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
    this.details = (body && body.details) || [];
    this.headers = headers;
  }
}

let signedOut = () => {};
export function onSignedOut(callback) { signedOut = callback; }

// One call: the parsed JSON body and the headers; any status but 2xx (and 304) is thrown as an ApiError.
export async function call(method, path, body, headers) {
  const init = { method, headers: { Authorization: `Bearer ${token.get()}`, ...(headers || {}) } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (response.status === 401) {
    token.clear();
    signedOut();
  }
  if (!response.ok) throw new ApiError(response.status, json, response.headers);
  return { body: json, headers: response.headers, status: response.status };
}

export const api = {
  get: async (path) => (await call('GET', path)).body,
  post: async (path, body) => (await call('POST', path, body === undefined ? {} : body)).body,
  put: async (path, body) => (await call('PUT', path, body)).body,
  patch: async (path, body) => (await call('PATCH', path, body)).body,
  del: async (path) => (await call('DELETE', path)).body,
};

export const enc = encodeURIComponent;

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(key, value);
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}
