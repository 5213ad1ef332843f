// The console's only way to the server: fetch of the public API with the signed-in bearer
// token, Status errors as exceptions, paged LISTs, and informers (LIST then WATCH over a
// streamed fetch, resumed from the last resourceVersion, re-listed after 410 Gone).

const KEY = 'fedctl.console.token';

/** The global view's prefix. */
export const VIEW = '/apis/search.fedctl.io/v1alpha1';

/** The signed-in token, kept in this tab's sessionStorage only. */
export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t);
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

let skew = 0;

/** The server's clock (from the `Date` of its answers), in ms since the epoch. */
export function serverNow() {
  return Date.now() + skew;
}

function noteDate(res) {
  const d = res.headers.get('date');
  if (d) {
    const t = Date.parse(d);
    // Date has 1 s resolution: only correct for skews beyond it
    if (!Number.isNaN(t) && Math.abs(t - Date.now()) > 1500) skew = t - Date.now();
  }
}

/** A failed API call: the HTTP code, the Status `reason` and its `message` as the server wrote it. */
export class ApiError extends Error {
  constructor(code, reason, message) {
    super(message);
    this.code = code;
    this.reason = reason;
  }
  get forbidden() {
    return this.code === 403;
  }
}

async function errorOf(res) {
  const text = await res.text().catch(() => '');
  try {
    const st = JSON.parse(text);
    if (st && st.kind === 'Status') return new ApiError(res.status, st.reason || '', st.message || `${res.status}`);
  } catch (_) { /* not a Status */ }
  return new ApiError(res.status, res.statusText, text.trim() || `${res.status} ${res.statusText}`);
}

function headers(accept, body) {
  const h = {Accept: accept};
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  return h;
}

function unauthorized() {
  window.dispatchEvent(new CustomEvent('fedctl:unauthorized'));
}

/**
 * One request: the parsed JSON (or the text for a non-JSON answer), `{body, date}` with
 * `withDate`. Throws ApiError on a non-2xx answer (401 also signs the tab out).
 */
export async function request(path, {method = 'GET', body, accept = 'application/json', signal, withDate = false} = {}) {
  const res = await fetch(path, {
    method, signal, headers: headers(accept, body), body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store', credentials: 'omit', redirect: 'error',
  });
  noteDate(res);
  if (res.status === 401) unauthorized();
  if (!res.ok) throw await errorOf(res);
  const ct = res.headers.get('content-type') || '';
  const out = ct.includes('json') ? await res.json() : await res.text();
  if (!withDate) return out;
  const d = Date.parse(res.headers.get('date') || '');
  return {body: out, date: Number.isNaN(d) ? Date.now() : d};
}

/** Every item of a LIST, read in pages of `limit` (`continue`), and the list's resourceVersion. */
export async function listAll(path, {limit = 500, signal, params = {}} = {}) {
  const items = [];
  let cont = '';
  let rv = '';
  for (;;) {
    const q = new URLSearchParams({...params, limit: String(limit)});
    if (cont) q.set('continue', cont);
    const page = await request(`${path}?${q}`, {signal});
    items.push(...(page.items || []));
    rv = rv || page.metadata?.resourceVersion || '';
    cont = page.metadata?.continue || '';
    if (!cont) return {items, resourceVersion: rv};
  }
}

/**
 * Watches `path` from `rv`, calling `onEvent(type, object)` per event, until the server ends
 * the stream (resolves with the last resourceVersion seen) or an error (rejects: ApiError,
 * an ERROR event as its Status — 410 when the resourceVersion is too old).
 */
export async function watch(path, rv, onEvent, signal) {
  const q = new URLSearchParams({watch: '1', allowWatchBookmarks: 'true', timeoutSeconds: '300'});
  if (rv) q.set('resourceVersion', rv);
  const res = await fetch(`${path}?${q}`, {headers: headers('application/json'), signal, cache: 'no-store', credentials: 'omit', redirect: 'error'});
  noteDate(res);
  if (res.status === 401) unauthorized();
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let last = rv;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return last;
    buf += decoder.decode(value, {stream: true});
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line) continue;
      const ev = JSON.parse(line);
      if (ev.type === 'ERROR') {
        const st = ev.object || {};
        throw new ApiError(st.code || 500, st.reason || '', st.message || 'watch error');
      }
      const erv = ev.object?.metadata?.resourceVersion;
      if (erv) last = erv;
      if (ev.type !== 'BOOKMARK') onEvent(ev.type, ev.object);
    }
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

/**
 * An informer: LIST `path` (paged), then WATCH from the list's resourceVersion, resuming
 * after the stream ends and re-listing after 410 Gone, until `signal` aborts.
 * `onList(items)` replaces the whole set; `onEvent(type, obj)` applies one change;
 * `onError(err)` reports a failure (retried with backoff up to 10 s; `null`: healthy again).
 */
export async function informer(path, {onList, onEvent, onError}, signal) {
  let backoff = 500;
  while (!signal.aborted) {
    let rv;
    try {
      const list = await listAll(path, {signal});
      rv = list.resourceVersion;
      onList(list.items);
      onError(null);
      backoff = 500;
    } catch (e) {
      if (signal.aborted) return;
      onError(e);
      await sleep(backoff, signal);
      backoff = Math.min(10000, backoff * 2);
      continue;
    }
    while (!signal.aborted) {
      try {
        rv = await watch(path, rv, onEvent, signal);
        backoff = 500;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof ApiError && e.code === 410) break; // too old: re-list
        onError(e);
        await sleep(backoff, signal);
        backoff = Math.min(10000, backoff * 2);
        if (e instanceof ApiError) break;
      }
    }
  }
}

/** Calls `f(signal)` now and then every `ms` until `signal` aborts (never two at once). */
export async function every(ms, signal, f) {
  while (!signal.aborted) {
    try { await f(signal); } catch (_) { /* f reports its own errors */ }
    await sleep(ms, signal);
  }
}

const discovery = new Map();

/**
 * The REST path of `kind` in `group` (`''`: core) under `base` (`''`: the federation, or the
 * global view `VIEW + '/global'`): `{path: '/apis/apps/v1', plural: 'deployments', namespaced}`
 * from the preferred version's discovery; `null` when not served.
 */
export async function resourceOf(group, kind, base = '') {
  const key = `${base}|${group}`;
  let resources = discovery.get(key);
  if (!resources) {
    let gvPath;
    if (group === '') gvPath = '/api/v1';
    else {
      const g = await request(`${base}/apis/${group}`);
      gvPath = `/apis/${g.preferredVersion.groupVersion}`;
    }
    const list = await request(`${base}${gvPath}`);
    resources = {gvPath, items: list.resources || []};
    discovery.set(key, resources);
  }
  const r = resources.items.find((x) => x.kind === kind && !x.name.includes('/'));
  return r ? {path: resources.gvPath, plural: r.name, namespaced: r.namespaced} : null;
}

/** A box showing an API error as the server worded it (403s marked as such). */
export function errorText(e) {
  if (e instanceof ApiError) {
    const what = e.code === 403 ? 'Forbidden (403)' : e.code === 401 ? 'Unauthorized (401)' : `${e.reason || 'Error'} (${e.code})`;
    return `${what}: ${e.message}`;
  }
  return `Error: ${e && e.message ? e.message : e}`;
}
