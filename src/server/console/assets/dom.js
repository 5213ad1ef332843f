// DOM utilities of the console: elements built with createElement and textContent only (no
// HTML strings, so nothing from the API is ever parsed as markup), formatting of ages and
// Kubernetes quantities, and a virtualized list that renders only the rows in view.

/** `h('div', {class: 'x', data: {member: 'a'}, on: {click: f}}, child, 'text', …)`. */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Like `h`, for SVG elements. */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = dv;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) el.addEventListener(ev, f);
    else if (k === 'text') el.textContent = v;
    else if (k === 'value' && 'value' in el) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el` with `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** A compact age: `42s`, `5m`, `3h`, `2d` (kubectl's style); `-` when unknown. */
export function age(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '-';
  const sec = Math.max(0, Math.floor(ms / 1000));
  if (sec < 120) return `${sec}s`;
  const min = Math.floor(sec / 60);
  if (min < 120) return `${min}m`;
  const hr = Math.floor(min / 60);
  if (hr < 48) return `${hr}h`;
  return `${Math.floor(hr / 24)}d`;
}

const SUFFIX = {
  n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A Kubernetes quantity (`250m`, `8Gi`, `1.5`, `1e3`) as a number; `NaN` when malformed. */
export function quantity(q) {
  if (q === undefined || q === null) return NaN;
  if (typeof q === 'number') return q;
  const m = /^([+-]?[0-9.]+)([eE][+-]?[0-9]+)?(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(String(q).trim());
  if (!m) return NaN;
  const base = parseFloat(m[1] + (m[2] || ''));
  return base * SUFFIX[m[3] || ''];
}

/** Bytes in binary units: `512 B`, `3.2 MiB`. */
export function bytes(n) {
  if (!Number.isFinite(n)) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

/** A count with thin grouping: `1 234 567`. */
export function count(n) {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-';
}

/** The value of `resource` (cpu, memory, pods) shown short: cores, bytes or a count. */
export function resourceText(resource, n) {
  if (!Number.isFinite(n)) return '-';
  if (resource === 'memory') return bytes(n);
  if (resource === 'cpu') return n >= 10 ? n.toFixed(0) : n.toFixed(n >= 1 ? 1 : 2);
  return count(n);
}

/** A usage bar: `label used/total` above a track filled to `used/total`. */
export function bar(label, used, total, fmt = (x) => String(x)) {
  const frac = total > 0 && Number.isFinite(used) ? Math.min(1, used / total) : 0;
  const fill = h('div', {class: frac >= 0.95 ? 'fill full' : frac >= 0.8 ? 'fill high' : 'fill'});
  // CSSOM (not a style attribute): allowed by the CSP
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  return h('div', {class: 'bar', title: `${label}: ${fmt(used)} of ${fmt(total)} allocated`, data: {resource: label}},
    h('div', {class: 'label'}, h('span', {}, label), h('span', {}, `${fmt(used)} / ${fmt(total)}`)),
    h('div', {class: 'track'}, fill));
}

/**
 * A virtualized table: a header and a scrolling body that holds only the rows in view (plus
 * a few above and below), so a list of 100,000 rows costs as much DOM as one screen.
 * `columns`: [{title, width (CSS grid track)}]; `row(item, index)` returns the cells.
 * Returns {el, set(items)}; `onOpen(item)` makes rows clickable.
 */
export function vtable(columns, row, {rowHeight = 30, height = 540, onOpen = null, empty = 'Nothing to show.'} = {}) {
  const template = columns.map((c) => c.width || '1fr').join(' ');
  const head = h('div', {class: 'vhead'}, columns.map((c) => h('div', {}, c.title)));
  head.style.gridTemplateColumns = template;
  const spacer = h('div', {class: 'vspacer'});
  const scroll = h('div', {class: 'vscroll'}, spacer);
  const note = h('div', {class: 'notice'});
  const el = h('div', {class: 'vtable'}, head, scroll, note);
  let items = [];
  let drawn = '';
  function draw() {
    const top = scroll.scrollTop;
    const first = Math.max(0, Math.floor(top / rowHeight) - 5);
    const last = Math.min(items.length, Math.ceil((top + height) / rowHeight) + 5);
    const key = `${first}:${last}:${items.length}`;
    if (key === drawn) return;
    drawn = key;
    const rows = [];
    for (let i = first; i < last; i++) {
      const r = h('div', {class: onOpen ? 'vrow link' : 'vrow', data: {row: String(i)}}, row(items[i], i));
      r.style.gridTemplateColumns = template;
      r.style.top = `${i * rowHeight}px`;
      r.style.height = `${rowHeight}px`;
      if (onOpen) {
        const it = items[i];
        r.addEventListener('click', () => onOpen(it));
      }
      rows.push(r);
    }
    spacer.replaceChildren(...rows);
  }
  scroll.addEventListener('scroll', () => requestAnimationFrame(draw), {passive: true});
  return {
    el,
    set(next) {
      items = next;
      drawn = '';
      spacer.style.height = `${items.length * rowHeight}px`;
      scroll.style.height = `${Math.min(height, Math.max(rowHeight, items.length * rowHeight))}px`;
      note.textContent = items.length === 0 ? empty : '';
      draw();
    },
  };
}
