// Search: the global view (every member's objects as one cluster) by kind, namespace, label
// selector, field selector and name substring, as server-side Tables with the CLUSTER
// column, paged with limit/continue and drawn virtualized; an object opens as YAML
// (managedFields folded) from its member through clusters/<name>.

import {ApiError, VIEW, errorText, request} from './api.js';
import {h, replace, vtable} from './dom.js';
import {render as yaml} from './yaml.js';

const GLOBAL = `${VIEW}/global`;
const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io, application/json';
/** Pages read at most for one page of name-substring matches. */
const MAX_SCAN_PAGES = 20;

/** The form's values survive leaving and coming back within the tab. */
const state = {kind: '/api/v1|pods|true', namespace: '', labelSelector: '', fieldSelector: '', name: '', limit: '100'};
let kinds = null;

/** Listable kinds of the view: [{label, value: 'gvPath|plural|namespaced'}], pods first. */
async function viewKinds(signal) {
  if (kinds) return kinds;
  const out = [];
  const add = (gvPath, list) => {
    for (const r of list.resources || []) {
      if (r.name.includes('/') || !(r.verbs || []).includes('list')) continue;
      const gv = gvPath.replace(/^\/apis?\//, '');
      out.push({label: `${r.name}${gv === 'v1' ? '' : `.${gv.split('/')[0]}`}`, value: `${gvPath}|${r.name}|${r.namespaced}`});
    }
  };
  add('/api/v1', await request(`${GLOBAL}/api/v1`, {signal}));
  const groups = await request(`${GLOBAL}/apis`, {signal}).catch(() => ({groups: []}));
  await Promise.all((groups.groups || []).map(async (g) => {
    const gvPath = `/apis/${g.preferredVersion.groupVersion}`;
    const list = await request(`${GLOBAL}${gvPath}`, {signal}).catch(() => null);
    if (list) add(gvPath, list);
  }));
  out.sort((a, b) => (a.label === 'pods' ? -1 : b.label === 'pods' ? 1 : a.label.localeCompare(b.label)));
  kinds = out;
  return out;
}

function cellText(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** Mounts the page into `root` until `signal` aborts. */
export function mount(root, signal) {
  const kindSel = h('select', {name: 'kind', 'aria-label': 'kind'}, h('option', {value: state.kind}, 'pods'));
  const field = (name, label, placeholder) => h('label', {}, label, h('input', {name, type: 'text', value: state[name], placeholder, spellcheck: 'false'}));
  const limitSel = h('select', {name: 'limit', 'aria-label': 'page size'}, ['50', '100', '500'].map((n) => h('option', {value: n, selected: n === state.limit}, `${n} per page`)));
  const submit = h('button', {type: 'submit', class: 'btn'}, 'Search');
  const form = h('form', {class: 'search', id: 'search-form'},
    h('label', {}, 'Kind', kindSel),
    field('namespace', 'Namespace', 'all namespaces'),
    field('labelSelector', 'Label selector', 'app=web,tier in (a,b)'),
    field('fieldSelector', 'Field selector', 'status.phase=Running'),
    field('name', 'Name contains', 'substring'),
    h('label', {}, 'Page', limitSel), submit);
  const status = h('div', {class: 'notice', data: {role: 'search-status'}});
  const err = h('div', {data: {role: 'search-error'}});
  const prev = h('button', {type: 'button', class: 'btn secondary', disabled: true}, 'Previous');
  const next = h('button', {type: 'button', class: 'btn secondary', disabled: true}, 'Next');
  const results = h('div', {data: {role: 'results'}});
  const panel = h('aside', {class: 'panel', hidden: true});
  replace(root, h('div', {class: 'toolbar'}, h('h1', {}, 'Search the global view')), form, err, status, results,
    h('div', {class: 'pager'}, prev, next), panel);

  viewKinds(signal).then((ks) => {
    replace(kindSel, ks.map((k) => h('option', {value: k.value, selected: k.value === state.kind}, k.label)));
  }).catch((e) => { if (!signal.aborted) replace(err, errorBox(e)); });

  let table = null;
  let columns = [];
  const tokens = ['']; // continue token of each page read so far
  let page = 0;

  function errorBox(e) {
    return h('p', {class: e instanceof ApiError && e.code === 403 ? 'error forbidden' : 'error', data: {code: String(e.code || '')}}, errorText(e));
  }

  function read() {
    const data = new FormData(form);
    for (const k of Object.keys(state)) state[k] = String(data.get(k) ?? state[k]).trim();
  }

  function listPath() {
    const [gvPath, plural, namespaced] = state.kind.split('|');
    const ns = namespaced === 'true' && state.namespace ? `/namespaces/${encodeURIComponent(state.namespace)}` : '';
    return `${GLOBAL}${gvPath}${ns}/${plural}`;
  }

  async function fetchPage(cont) {
    const scan = Boolean(state.name);
    const want = Number(state.limit);
    const rows = [];
    let meta = {};
    let scanned = 0;
    let c = cont;
    for (let i = 0; i < (scan ? MAX_SCAN_PAGES : 1); i++) {
      const q = new URLSearchParams({limit: String(scan ? 500 : want)});
      if (state.labelSelector) q.set('labelSelector', state.labelSelector);
      if (state.fieldSelector) q.set('fieldSelector', state.fieldSelector);
      if (c) q.set('continue', c);
      const t = await request(`${listPath()}?${q}`, {accept: TABLE, signal});
      if (t.columnDefinitions?.length) columns = t.columnDefinitions;
      meta = t.metadata || {};
      scanned += (t.rows || []).length;
      for (const r of t.rows || []) {
        const name = r.object?.metadata?.name || cellText(r.cells?.[0]);
        if (!scan || name.toLowerCase().includes(state.name.toLowerCase())) rows.push(r);
      }
      c = meta.continue || '';
      if (!c || rows.length >= want) break;
    }
    return {rows, next: c, scanned, remaining: meta.remainingItemCount};
  }

  function draw(res) {
    const shown = columns.map((col, i) => ({...col, i})).filter((col) => !col.priority);
    const width = (col) => (col.name === 'Name' ? 'minmax(200px, 2fr)' : col.name.toLowerCase() === 'cluster' ? 'minmax(110px, 1fr)' : 'minmax(60px, 1fr)');
    const cols = [{title: 'Namespace', width: 'minmax(100px, 1fr)'}, ...shown.map((col) => ({title: col.name, width: width(col)}))];
    table = vtable(cols, (r) => [h('div', {}, r.object?.metadata?.namespace || ''), ...shown.map((col) => h('div', {data: {col: col.name.toLowerCase()}}, cellText(r.cells?.[col.i])))],
      {rowHeight: 28, onOpen: open, empty: 'No objects match.'});
    replace(results, table.el);
    table.set(res.rows);
    const more = res.next ? ` · more after this page${res.remaining ? ` (about ${res.remaining} left)` : ''}` : '';
    status.textContent = `page ${page + 1} · ${res.rows.length} objects${state.name ? ` matching “${state.name}” of ${res.scanned} read` : ''}${more}`;
    prev.disabled = page === 0;
    next.disabled = !res.next;
  }

  async function go(p) {
    replace(err);
    status.textContent = 'Searching…';
    try {
      const res = await fetchPage(tokens[p]);
      page = p;
      tokens.length = p + 1;
      if (res.next) tokens.push(res.next);
      if (!signal.aborted) draw(res);
    } catch (e) {
      if (signal.aborted) return;
      status.textContent = '';
      replace(results);
      replace(err, errorBox(e));
    }
  }

  async function open(row) {
    const md = row.object?.metadata || {};
    const cluster = md.annotations?.['fedctl.io/cluster'];
    const [gvPath, plural] = state.kind.split('|');
    const ns = md.namespace ? `/namespaces/${encodeURIComponent(md.namespace)}` : '';
    const base = cluster ? `${VIEW}/clusters/${encodeURIComponent(cluster)}` : GLOBAL;
    const title = h('h2', {}, `${cluster ? `${cluster} · ` : ''}${md.namespace ? `${md.namespace}/` : ''}${md.name}`);
    const bodyEl = h('div', {class: 'panel-body yaml', data: {role: 'yaml'}}, h('p', {class: 'notice'}, 'Loading…'));
    const close = h('button', {type: 'button', class: 'btn secondary', on: {click: () => { panel.hidden = true; replace(panel); }}}, 'Close');
    replace(panel, h('div', {class: 'panel-head'}, title, close), bodyEl);
    panel.hidden = false;
    try {
      const obj = await request(`${base}${gvPath}${ns}/${plural}/${encodeURIComponent(md.name)}`, {signal});
      replace(bodyEl, yaml(obj));
    } catch (e) {
      if (!signal.aborted) replace(bodyEl, errorBox(e));
    }
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    read();
    tokens.length = 1;
    go(0);
  });
  prev.addEventListener('click', () => go(Math.max(0, page - 1)));
  next.addEventListener('click', () => go(page + 1));
  const onKey = (ev) => { if (ev.key === 'Escape') { panel.hidden = true; replace(panel); } };
  document.addEventListener('keydown', onKey);
  signal.addEventListener('abort', () => document.removeEventListener('keydown', onKey));
}
