// Cache: the global view's shards (objects per shard and kind, from
// /apis/search.fedctl.io/v1alpha1/shards) and the server's own figures from /metrics (bytes
// per shard and kind, ingest lag and relists per member, stale members), refreshed every 5 s.

import {VIEW, errorText, every, request} from './api.js';
import {age, bytes, count, h, replace, vtable} from './dom.js';

/** Samples of a Prometheus text exposition: [{name, labels: {…}, value}]. */
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[3] || ''))) labels[l[1]] = l[2].replace(/\\"/g, '"').replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
    out.push({name: m[1], labels, value: Number(m[4])});
  }
  return out;
}

function stat(k, v) {
  return h('div', {class: 'stat'}, h('div', {class: 'v'}, v), h('div', {class: 'k'}, k));
}

function errorBox(e) {
  return h('p', {class: e.code === 403 ? 'error forbidden' : 'error', data: {code: String(e.code || '')}}, errorText(e));
}

/** Mounts the page into `root` until `signal` aborts. */
export function mount(root, signal) {
  const summary = h('div', {class: 'cards'});
  const shardsEl = h('div', {class: 'section'});
  const membersEl = h('div', {class: 'section'});
  replace(root, h('div', {class: 'toolbar'}, h('h1', {}, 'Global view cache')), summary, shardsEl, membersEl);
  const members = vtable([
    {title: 'Member', width: 'minmax(140px, 2fr)'}, {title: 'Ready', width: '80px'}, {title: 'View', width: '90px'},
    {title: 'Ingest lag', width: '110px'}, {title: 'Relists', width: '80px'}, {title: 'Kinds', width: '80px'},
  ], (m) => [
    h('div', {}, m.cluster),
    h('div', {}, m.ready === undefined ? '-' : m.ready ? 'Ready' : 'NotReady'),
    h('div', {class: m.stale ? 'text-bad' : ''}, m.stale ? 'stale' : 'current'),
    h('div', {data: {field: 'lag'}, title: m.lags.map(([r, s]) => `${r}: ${s === null ? 'no event yet' : age(s * 1000)}`).join('\n')}, m.lag === null ? '-' : age(m.lag * 1000)),
    h('div', {}, count(m.relists)),
    h('div', {}, String(m.lags.length)),
  ], {rowHeight: 28, height: 420, empty: 'No member is ingested.'});

  every(5000, signal, async () => {
    const [shards, metrics] = await Promise.allSettled([
      request(`${VIEW}/shards`, {signal}),
      request('/metrics', {accept: 'text/plain', signal, withDate: true}),
    ]);
    if (signal.aborted) return;
    const samples = metrics.status === 'fulfilled' ? parseMetrics(metrics.value.body) : [];
    const bytesOf = new Map(); // `${shard}|${resource}` → bytes
    for (const x of samples) if (x.name === 'fedctl_cache_bytes') bytesOf.set(`${x.labels.shard}|${x.labels.resource}`, x.value);

    if (shards.status === 'fulfilled') {
      const st = shards.value;
      const list = st.shards || [];
      const kinds = [...new Set(list.flatMap((x) => Object.keys(x.kinds || {})))].sort();
      const totalObjects = list.reduce((a, x) => a + (x.objects || 0), 0);
      const totalBytes = [...bytesOf.values()].reduce((a, b) => a + b, 0);
      replace(summary,
        stat('shards', `${list.length}${st.shardCount && st.shardCount !== list.length ? ` of ${st.shardCount}` : ''}`),
        stat('objects', count(totalObjects)),
        stat('bytes', metrics.status === 'fulfilled' ? bytes(totalBytes) : '-'),
        stat('shard map version', String(st.mapVersion ?? '-')),
        stat('synced', st.synced === undefined ? '-' : st.synced ? 'yes' : 'no'));
      replace(shardsEl, h('h3', {}, 'Objects (and bytes) per shard and kind'),
        h('table', {class: 'plain', data: {role: 'shards'}},
          h('thead', {}, h('tr', {}, h('th', {}, 'Shard'), h('th', {class: 'num'}, 'Objects'), kinds.map((k) => h('th', {class: 'num'}, k)))),
          h('tbody', {}, list.map((x) => h('tr', {data: {shard: String(x.id)}},
            h('td', {}, String(x.id)), h('td', {class: 'num'}, count(x.objects)),
            kinds.map((k) => {
              const b = bytesOf.get(`${x.id}|${k}`);
              return h('td', {class: 'num'}, count(x.kinds?.[k]?.objects), b !== undefined ? h('div', {class: 'notice'}, bytes(b)) : null);
            }))))));
    } else {
      replace(summary);
      replace(shardsEl, h('h3', {}, 'Shards'), errorBox(shards.reason));
    }

    if (metrics.status === 'fulfilled') {
      const now = metrics.value.date / 1000;
      const byCluster = new Map();
      const get = (c) => {
        if (!byCluster.has(c)) byCluster.set(c, {cluster: c, lags: [], relists: 0, stale: false, ready: undefined, lag: null});
        return byCluster.get(c);
      };
      for (const x of samples) {
        const c = x.labels.cluster;
        if (!c) continue;
        // 0: that kind's watch has delivered nothing yet (no lag to tell)
        if (x.name === 'fedctl_cache_ingest_last_event_timestamp_seconds') get(c).lags.push([x.labels.resource, x.value > 0 ? Math.max(0, now - x.value) : null]);
        else if (x.name === 'fedctl_cache_ingest_relists_total') get(c).relists += x.value;
        else if (x.name === 'fedctl_cache_member_stale') get(c).stale = x.value === 1;
        else if (x.name === 'fedctl_cluster_ready') get(c).ready = x.value === 1;
      }
      const rows = [...byCluster.values()].filter((m) => m.lags.length || m.stale).sort((a, b) => a.cluster.localeCompare(b.cluster));
      // a member's lag: since its least recent kind last delivered an event or bookmark
      for (const m of rows) {
        const known = m.lags.map(([, s]) => s).filter((s) => s !== null);
        m.lag = known.length ? Math.max(...known) : null;
      }
      replace(membersEl, h('h3', {}, `Ingest per member (${rows.length})`),
        h('p', {class: 'notice'}, 'Ingest lag: time since the member\'s watch last delivered an event or bookmark, for its least recent kind (kinds that delivered nothing yet left out).'), members.el);
      members.set(rows);
    } else {
      replace(membersEl, h('h3', {}, 'Ingest per member'), errorBox(metrics.reason));
    }
  });
}
