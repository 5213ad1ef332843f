// Workloads: every propagated template (found through its Works) with its policy, its
// placement per member (desired share → ready replicas), the overrides applied and each
// member's Work status; a template's page adds a chart of ready replicas per member over
// the last minutes, sampled while the page is open and kept in the tab.

import {errorText, every, listAll, request, resourceOf} from './api.js';
import {age, h, replace, s, vtable} from './dom.js';

const WORKS = '/apis/work.fedctl.io/v1alpha1/works';
const TEMPLATE = 'propagation.fedctl.io/template';
const STATUS = 'fedctl.io/cluster-status';
const POLICY = 'policy.fedctl.io/name';
const POLICY_NS = 'policy.fedctl.io/namespace';
const CLUSTER = 'fedctl.io/cluster';
const OVERRIDES = 'policy.fedctl.io/applied-overrides';
const OVERRIDE_ERRORS = 'policy.fedctl.io/override-errors';
const HISTORY_MS = 10 * 60 * 1000;
const SAMPLE_MS = 2000;

/** Ready replicas per member over time, per template key: [{t, ready: {member: n}}]. */
const history = new Map();

/** `<group>/<Kind>/<namespace>/<name>` (the Works' template annotation) split up. */
function parseKey(key) {
  const [group, kind, namespace, ...name] = key.split('/');
  return {group, kind, namespace, name: name.join('/'), key};
}

function json(text, fallback) {
  try { return text ? JSON.parse(text) : fallback; } catch (_) { return fallback; }
}

function clusterStatus(tpl) {
  return json(tpl?.metadata?.annotations?.[STATUS], {});
}

function policyOf(tpl) {
  const a = tpl?.metadata?.annotations || {};
  if (!a[POLICY]) return '';
  return a[POLICY_NS] ? `PropagationPolicy ${a[POLICY_NS]}/${a[POLICY]}` : `ClusterPropagationPolicy ${a[POLICY]}`;
}

function workState(w) {
  const c = (w.status?.conditions || []).find((x) => x.type === 'Applied');
  if (!c) return {state: 'Pending', text: 'not reported yet'};
  return {state: c.status === 'True' ? 'Applied' : 'Failed', text: `${c.reason || ''} ${c.message || ''}`.trim()};
}

/** Templates of every Work: key → {key, works: [work], template}. */
async function templates(signal) {
  const works = (await listAll(WORKS, {signal})).items;
  const byKey = new Map();
  for (const w of works) {
    const key = w.metadata?.annotations?.[TEMPLATE];
    if (!key) continue;
    if (!byKey.has(key)) byKey.set(key, {...parseKey(key), works: [], template: null});
    byKey.get(key).works.push(w);
  }
  const kinds = new Map();
  for (const t of byKey.values()) kinds.set(`${t.group}/${t.kind}`, t);
  await Promise.all([...kinds.values()].map(async (t) => {
    const r = await resourceOf(t.group, t.kind).catch(() => null);
    if (!r) return;
    const list = await listAll(`${r.path}/${r.plural}`, {signal}).catch(() => ({items: []}));
    for (const o of list.items) {
      const k = `${t.group}/${t.kind}/${o.metadata.namespace || ''}/${o.metadata.name}`;
      if (byKey.has(k)) byKey.get(k).template = o;
    }
  }));
  return [...byKey.values()].sort((a, b) => a.key.localeCompare(b.key));
}

function placementChips(t) {
  const st = clusterStatus(t.template);
  const members = new Set([...Object.keys(st), ...t.works.map((w) => w.metadata.labels?.[CLUSTER]).filter(Boolean)]);
  return [...members].sort().map((m) => {
    const x = st[m] || {};
    const desired = x.share ?? x.replicas;
    const text = desired !== undefined ? `${m} ${x.readyReplicas ?? 0}/${desired}` : `${m}${x.applied === false ? ' ✗' : ''}`;
    const ok = x.applied !== false && (desired === undefined || (x.readyReplicas ?? 0) >= desired);
    return h('span', {class: ok ? 'chip ok' : 'chip bad', title: x.message || '', data: {placement: m, desired: String(desired ?? ''), ready: String(x.readyReplicas ?? '')}}, text);
  });
}

function listPage(root, signal) {
  const filter = h('input', {type: 'search', placeholder: 'filter by kind, namespace or name', 'aria-label': 'filter templates'});
  const note = h('span', {class: 'summary'});
  const err = h('div');
  const table = vtable([
    {title: 'Kind', width: '110px'}, {title: 'Namespace/Name', width: 'minmax(160px, 1.2fr)'}, {title: 'Policy', width: 'minmax(140px, 1fr)'},
    {title: 'Placement (ready/desired)', width: 'minmax(220px, 2fr)'}, {title: 'Overrides', width: 'minmax(100px, 1fr)'}, {title: 'Works', width: '110px'},
  ], (t) => {
    const states = t.works.map(workState);
    const applied = states.filter((x) => x.state === 'Applied').length;
    const failed = states.filter((x) => x.state === 'Failed').length;
    const overrides = new Set(t.works.flatMap((w) => json(w.metadata.annotations?.[OVERRIDES], [])));
    return [
      h('div', {}, t.kind),
      h('div', {class: 'mono', data: {template: t.key}}, t.namespace ? `${t.namespace}/${t.name}` : t.name),
      h('div', {}, policyOf(t.template) || '-'),
      h('div', {class: 'chips'}, placementChips(t)),
      h('div', {}, overrides.size ? [...overrides].join(', ') : '-'),
      h('div', {class: failed ? 'text-bad' : ''}, `${applied}/${t.works.length} applied${failed ? `, ${failed} failed` : ''}`),
    ];
  }, {rowHeight: 44, onOpen: (t) => { location.hash = `#/workloads/${encodeURIComponent(t.key)}`; }, empty: 'No propagated templates.'});
  replace(root, h('div', {class: 'toolbar'}, h('h1', {}, 'Workloads'), note, filter), err, table.el);
  let all = [];
  const show = () => {
    const q = filter.value.trim().toLowerCase();
    const shown = q ? all.filter((t) => t.key.toLowerCase().includes(q)) : all;
    note.textContent = `${all.length} templates${q ? ` · ${shown.length} shown` : ''}`;
    table.set(shown);
  };
  filter.addEventListener('input', show);
  every(4000, signal, async () => {
    try {
      all = await templates(signal);
      replace(err);
      show();
    } catch (e) {
      if (signal.aborted) return;
      replace(err, h('p', {class: e.code === 403 ? 'error forbidden' : 'error', data: {code: String(e.code || '')}}, errorText(e)));
    }
  });
}

function chart(samples, members) {
  const W = 720, H = 220, L = 36, R = 10, T = 10, B = 24;
  const now = Date.now();
  const t0 = Math.min(now - 60000, samples.length ? samples[0].t : now);
  const max = Math.max(1, ...samples.flatMap((x) => Object.values(x.ready)));
  const xOf = (t) => L + ((t - t0) / Math.max(1, now - t0)) * (W - L - R);
  const yOf = (v) => T + (1 - v / max) * (H - T - B);
  const kids = [];
  const step = Math.max(1, Math.ceil(max / 5));
  for (let v = 0; v <= max; v += step) {
    kids.push(s('line', {class: 'grid-line', x1: L, x2: W - R, y1: yOf(v), y2: yOf(v)}));
    kids.push(s('text', {x: L - 6, y: yOf(v) + 3, 'text-anchor': 'end'}, String(v)));
  }
  kids.push(s('line', {class: 'axis', x1: L, x2: L, y1: T, y2: H - B}));
  kids.push(s('line', {class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B}));
  kids.push(s('text', {x: L, y: H - 6}, `${age(now - t0)} ago`));
  kids.push(s('text', {x: W - R, y: H - 6, 'text-anchor': 'end'}, 'now'));
  members.forEach((m, i) => {
    const pts = samples.filter((x) => m in x.ready).map((x) => `${xOf(x.t).toFixed(1)},${yOf(x.ready[m]).toFixed(1)}`);
    if (pts.length) kids.push(s('polyline', {class: `c${i % 8}`, points: pts.join(' '), data: {member: m}}));
  });
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'ready replicas per member'}, kids);
  const legend = h('div', {class: 'legend'}, members.map((m, i) => h('span', {}, h('span', {class: `swatch c${i % 8}`}), m)));
  return h('div', {class: 'chart', data: {chartMembers: String(members.length)}}, svg, legend);
}

function templatePage(root, signal, key) {
  const t = parseKey(key);
  const head = h('div', {class: 'toolbar'}, h('a', {href: '#/workloads'}, '← Workloads'), h('h1', {}, `${t.kind} ${t.namespace ? `${t.namespace}/` : ''}${t.name}`));
  const body = h('div', {}, h('p', {class: 'notice'}, 'Loading…'));
  replace(root, head, body);
  if (!history.has(key)) history.set(key, []);
  const samples = history.get(key);
  every(SAMPLE_MS, signal, async () => {
    try {
      const r = await resourceOf(t.group, t.kind);
      if (!r) throw new Error(`${t.kind} is not served by the federation`);
      const path = `${r.path}${r.namespaced ? `/namespaces/${t.namespace}` : ''}/${r.plural}/${t.name}`;
      const selector = `propagation.fedctl.io/kind=${t.kind}`;
      const [tpl, works] = await Promise.all([
        request(path, {signal}),
        listAll(WORKS, {signal, params: {labelSelector: selector}}).then((l) => l.items.filter((w) => w.metadata.annotations?.[TEMPLATE] === key)),
      ]);
      const st = clusterStatus(tpl);
      const ready = {};
      for (const [m, x] of Object.entries(st)) if (x.readyReplicas !== undefined || x.share !== undefined) ready[m] = x.readyReplicas ?? 0;
      const now = Date.now();
      samples.push({t: now, ready});
      while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();
      if (signal.aborted) return;
      render(tpl, works, st);
    } catch (e) {
      if (signal.aborted) return;
      replace(body, h('p', {class: e.code === 403 ? 'error forbidden' : 'error', data: {code: String(e.code || '')}}, errorText(e)));
    }
  });

  function render(tpl, works, st) {
    const byMember = new Map(works.map((w) => [w.metadata.labels?.[CLUSTER] || w.metadata.namespace.replace(/^fed-exec-/, ''), w]));
    const members = [...new Set([...Object.keys(st), ...byMember.keys()])].sort();
    const spec = tpl.spec || {};
    const status = tpl.status || {};
    const rows = members.map((m) => {
      const x = st[m] || {};
      const w = byMember.get(m);
      const ws = w ? workState(w) : {state: 'No Work', text: ''};
      const errs = [...(x.overrideErrors || []), ...json(w?.metadata.annotations?.[OVERRIDE_ERRORS], [])];
      const manifests = w?.status?.manifestStatuses || [];
      return h('tr', {data: {member: m}},
        h('td', {}, m),
        h('td', {class: 'num', data: {field: 'desired'}}, String(x.share ?? '-')),
        h('td', {class: 'num', data: {field: 'ready'}}, String(x.readyReplicas ?? '-')),
        h('td', {class: 'num'}, String(x.availableReplicas ?? '-')),
        h('td', {class: 'num'}, String(x.updatedReplicas ?? '-')),
        h('td', {}, (x.overrides || json(w?.metadata.annotations?.[OVERRIDES], [])).join(', ') || '-',
          errs.length ? h('div', {class: 'error'}, errs.join('\n')) : null),
        h('td', {data: {field: 'work'}, title: ws.text}, ws.state, x.message ? h('div', {class: 'notice'}, x.message) : null,
          manifests.length ? h('div', {class: 'notice'}, `${manifests.filter((ms) => ms.applied).length}/${manifests.length} manifests applied`) : null));
    });
    replace(body,
      h('dl', {class: 'kv'},
        h('dt', {}, 'Policy'), h('dd', {}, policyOf(tpl) || '-'),
        spec.replicas !== undefined ? [h('dt', {}, 'Replicas'), h('dd', {}, `${spec.replicas} desired · ${status.readyReplicas ?? 0} ready · ${status.availableReplicas ?? 0} available (sums over members)`)] : null,
        h('dt', {}, 'Members'), h('dd', {}, String(members.length))),
      h('h3', {}, 'Ready replicas per member'),
      chart(samples, members.filter((m) => samples.some((x) => m in x.ready))),
      h('h3', {}, 'Placement and Work status'),
      h('table', {class: 'plain'},
        h('thead', {}, h('tr', {}, ['Member', 'Desired', 'Ready', 'Available', 'Updated', 'Overrides', 'Work'].map((c, i) => h('th', {class: i >= 1 && i <= 4 ? 'num' : ''}, c)))),
        h('tbody', {}, rows)));
  }
}

/** Mounts the list (no `arg`) or one template's page (`arg`: its key). */
export function mount(root, signal, arg) {
  if (arg) templatePage(root, signal, arg);
  else listPage(root, signal);
}
