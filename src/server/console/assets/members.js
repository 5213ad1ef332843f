// Members: one card per zone, a tile per member Cluster (Ready and since when, version,
// nodes, allocated/allocatable bars, heartbeat age, taints, labels), kept live by an
// informer on clusters.cluster.fedctl.io; each zone pages its members so 1,000 of them
// paint at once.

import {errorText, informer, serverNow} from './api.js';
import {age, bar, h, quantity, replace, resourceText} from './dom.js';

const CLUSTERS = '/apis/cluster.fedctl.io/v1alpha1/clusters';
/** A heartbeat older than this marks a member stale (the server's default grace period). */
export const STALE_AFTER_MS = 40000;
const PER_PAGE = 48;
const RESOURCES = ['cpu', 'memory', 'pods'];

function readyOf(c) {
  return (c.status?.conditions || []).find((x) => x.type === 'Ready') || null;
}

function zoneOf(c) {
  return c.spec?.zone || c.metadata?.labels?.['topology.kubernetes.io/zone'] || '(no zone)';
}

function heartbeatOf(c) {
  const t = Date.parse(readyOf(c)?.lastHeartbeatTime || '');
  return Number.isNaN(t) ? null : t;
}

function summary(c) {
  const rs = c.status?.resourceSummary || {};
  const out = {};
  for (const r of RESOURCES) {
    out[r] = {used: quantity(rs.allocated?.[r] ?? 0), total: quantity(rs.allocatable?.[r])};
  }
  return out;
}

function isStale(c, now) {
  const ready = readyOf(c);
  const hb = heartbeatOf(c);
  return !ready || ready.status !== 'True' || (hb !== null && now - hb > STALE_AFTER_MS);
}

function tile(c, now) {
  const ready = readyOf(c);
  const status = ready ? ready.status : 'Unknown';
  const since = Date.parse(ready?.lastTransitionTime || '');
  const hb = heartbeatOf(c);
  const stale = isStale(c, now);
  const nodes = c.status?.nodeSummary;
  const sum = summary(c);
  const labels = Object.entries(c.metadata?.labels || {});
  const taints = c.spec?.taints || [];
  const badge = status === 'True' ? h('span', {class: 'badge ok'}, 'Ready')
    : h('span', {class: 'badge bad'}, status === 'False' ? 'NotReady' : 'Unknown');
  badge.title = ready ? `${ready.reason || ''}: ${ready.message || ''}` : 'no Ready condition yet';
  return h('div', {class: stale ? 'member stale' : 'member', data: {member: c.metadata.name, ready: status, stale: String(stale)}},
    h('div', {class: 'title'}, h('span', {class: 'name', title: c.metadata.name}, c.metadata.name), badge),
    h('div', {class: 'facts'},
      h('span', {data: {fact: 'since'}}, !ready ? 'no Ready condition yet' : `${status === 'True' ? 'Ready' : 'NotReady'} for ${Number.isNaN(since) ? '-' : age(now - since)}`),
      h('span', {data: {fact: 'version'}}, c.status?.kubernetesVersion || 'version -'),
      h('span', {data: {fact: 'nodes'}}, `nodes ${nodes ? `${nodes.readyNum ?? 0}/${nodes.totalNum ?? 0}` : '-'}`),
      h('span', {data: {fact: 'heartbeat'}, class: hb !== null && now - hb > STALE_AFTER_MS ? 'late' : ''}, `heartbeat ${hb === null ? '-' : `${age(now - hb)} ago`}`)),
    ready && status !== 'True' && ready.message ? h('div', {class: 'facts'}, `${ready.reason}: ${ready.message}`) : null,
    h('div', {class: 'bars'}, RESOURCES.map((r) => bar(r, sum[r].used, sum[r].total, (x) => resourceText(r, x)))),
    taints.length || labels.length ? h('div', {class: 'chips'},
      taints.map((t) => h('span', {class: 'chip taint', title: 'taint'}, `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`)),
      labels.slice(0, 8).map(([k, v]) => h('span', {class: 'chip', title: `${k}=${v}`}, `${k}=${v}`)),
      labels.length > 8 ? h('span', {class: 'chip'}, `+${labels.length - 8}`) : null) : null);
}

function zoneCard(zone, list, now, page, setPage) {
  const ready = list.filter((c) => readyOf(c)?.status === 'True').length;
  const stale = list.filter((c) => isStale(c, now)).length;
  const totals = {};
  for (const r of RESOURCES) totals[r] = {used: 0, total: 0};
  for (const c of list) {
    const sm = summary(c);
    for (const r of RESOURCES) {
      if (Number.isFinite(sm[r].used)) totals[r].used += sm[r].used;
      if (Number.isFinite(sm[r].total)) totals[r].total += sm[r].total;
    }
  }
  const pages = Math.max(1, Math.ceil(list.length / PER_PAGE));
  const p = Math.min(page, pages - 1);
  const shown = list.slice(p * PER_PAGE, (p + 1) * PER_PAGE);
  return h('section', {class: 'zone', data: {zone}},
    h('div', {class: 'zone-head'},
      h('h2', {}, `Zone ${zone}`),
      h('span', {class: 'counts'}, `${ready}/${list.length} Ready${stale ? ` · ${stale} stale` : ''}`),
      h('div', {class: 'bars'}, RESOURCES.map((r) => bar(r, totals[r].used, totals[r].total, (x) => resourceText(r, x))))),
    h('div', {class: 'grid'}, shown.map((c) => tile(c, now))),
    pages > 1 ? h('div', {class: 'pager'},
      h('button', {type: 'button', class: 'btn secondary', disabled: p === 0, on: {click: () => setPage(p - 1)}}, 'Previous'),
      h('span', {}, `members ${p * PER_PAGE + 1}–${p * PER_PAGE + shown.length} of ${list.length}`),
      h('button', {type: 'button', class: 'btn secondary', disabled: p >= pages - 1, on: {click: () => setPage(p + 1)}}, 'Next')) : null);
}

/** Mounts the page into `root` until `signal` aborts. */
export function mount(root, signal) {
  const clusters = new Map();
  let synced = false;
  let error = null;
  let painted = false;
  const pages = new Map();
  const filter = h('input', {type: 'search', placeholder: 'filter by name or label', 'aria-label': 'filter members'});
  const onlyStale = h('input', {type: 'checkbox', id: 'only-stale'});
  const counts = h('span', {class: 'summary', data: {role: 'counts'}});
  const banner = h('div');
  const zones = h('div', {class: 'zones'}, h('p', {class: 'notice'}, 'Loading members…'));
  replace(root,
    h('div', {class: 'toolbar'}, h('h1', {}, 'Members'), counts, filter,
      h('label', {for: 'only-stale'}, onlyStale, ' stale only')),
    banner, zones);

  let scheduled = false;
  function schedule() {
    if (scheduled || signal.aborted) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; render(); });
  }

  function render() {
    if (signal.aborted) return;
    replace(banner, error ? h('p', {class: error.code === 403 ? 'error forbidden' : 'error', data: {code: String(error.code || '')}},
      synced ? `${errorText(error)} — showing the last state seen, retrying` : errorText(error)) : null);
    if (!synced) {
      if (error) replace(zones);
      return;
    }
    const now = serverNow();
    const q = filter.value.trim().toLowerCase();
    const all = [...clusters.values()];
    const list = all.filter((c) => (!onlyStale.checked || isStale(c, now)) && (!q || c.metadata.name.toLowerCase().includes(q)
      || Object.entries(c.metadata.labels || {}).some(([k, v]) => `${k}=${v}`.toLowerCase().includes(q))));
    const byZone = new Map();
    for (const c of list) {
      const z = zoneOf(c);
      if (!byZone.has(z)) byZone.set(z, []);
      byZone.get(z).push(c);
    }
    const ready = all.filter((c) => readyOf(c)?.status === 'True').length;
    const stale = all.filter((c) => isStale(c, now)).length;
    counts.textContent = `${all.length} members · ${ready} Ready · ${stale} stale · ${byZone.size} zones`;
    const cards = [...byZone.keys()].sort().map((z) => {
      const ms = byZone.get(z).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
      return zoneCard(z, ms, now, pages.get(z) || 0, (p) => { pages.set(z, p); schedule(); });
    });
    replace(zones, cards.length ? cards : h('p', {class: 'notice'}, all.length ? 'No member matches.' : 'No members have joined yet.'));
    if (!painted) {
      painted = true;
      performance.mark('console:members-rendered', {detail: {members: all.length}});
    }
  }

  filter.addEventListener('input', schedule);
  onlyStale.addEventListener('change', schedule);
  const tick = setInterval(schedule, 1000);
  signal.addEventListener('abort', () => clearInterval(tick));
  informer(CLUSTERS, {
    onList(items) {
      if (!synced) performance.mark('console:members-listed', {detail: {members: items.length}});
      clusters.clear();
      for (const c of items) clusters.set(c.metadata.name, c);
      synced = true;
      schedule();
    },
    onEvent(type, c) {
      if (type === 'DELETED') clusters.delete(c.metadata.name);
      else clusters.set(c.metadata.name, c);
      schedule();
    },
    onError(e) {
      if (e === error) return;
      error = e;
      schedule();
    },
  }, signal);
}
