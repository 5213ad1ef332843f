// A small YAML printer for showing API objects (block style, as `kubectl get -o yaml` prints
// them), with metadata.managedFields folded into a collapsed <details>.

import {h} from './dom.js';

const RESERVED = /^(true|false|yes|no|on|off|y|n|null|~)$/i;
const NUMBER = /^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^0x[0-9a-fA-F]+$|^0o[0-7]+$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$/;

function plainOk(s) {
  return s !== '' && /^[A-Za-z0-9_./(][A-Za-z0-9_ ./:()=,@+$-]*$/.test(s) && !/\s$/.test(s) && !s.includes(': ')
    && !s.includes(' #') && !RESERVED.test(s) && !NUMBER.test(s) && !s.endsWith(':');
}

function scalar(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  const s = String(v);
  return plainOk(s) ? s : JSON.stringify(s);
}

const key = (k) => (plainOk(k) ? k : JSON.stringify(k));
const pad = (n) => ' '.repeat(n);
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const simple = (v) => !(isObj(v) && Object.keys(v).length) && !(Array.isArray(v) && v.length) && !(typeof v === 'string' && v.includes('\n'));
const inline = (v) => (isObj(v) ? '{}' : Array.isArray(v) ? '[]' : scalar(v));

function block(s, indent, out) {
  const chomp = s.endsWith('\n') ? '' : '-';
  const lines = s.replace(/\n$/, '').split('\n');
  const head = out.pop();
  out.push(`${head} |${/^\s/.test(lines[0]) ? '2' : ''}${chomp}`);
  for (const l of lines) out.push(l ? pad(indent) + l : '');
}

function map(obj, indent, out, path) {
  for (const [k, v] of Object.entries(obj)) {
    const p = path ? `${path}.${k}` : k;
    if (p === 'metadata.managedFields' && Array.isArray(v)) {
      out.push({fold: `${pad(indent)}managedFields: # ${v.length} ${v.length === 1 ? 'entry' : 'entries'}, folded`});
      out.push(`${pad(indent)}managedFields:`);
      seq(v, indent, out, p);
      out.push({unfold: true});
      continue;
    }
    if (typeof v === 'string' && v.includes('\n')) {
      out.push(`${pad(indent)}${key(k)}:`);
      block(v, indent + 2, out);
    } else if (simple(v)) out.push(`${pad(indent)}${key(k)}: ${inline(v)}`);
    else if (Array.isArray(v)) {
      out.push(`${pad(indent)}${key(k)}:`);
      seq(v, indent, out, p);
    } else {
      out.push(`${pad(indent)}${key(k)}:`);
      map(v, indent + 2, out, p);
    }
  }
}

function seq(arr, indent, out, path) {
  for (const v of arr) {
    if (typeof v === 'string' && v.includes('\n')) {
      out.push(`${pad(indent)}-`);
      block(v, indent + 2, out);
    } else if (simple(v)) out.push(`${pad(indent)}- ${inline(v)}`);
    else if (Array.isArray(v)) {
      out.push(`${pad(indent)}-`);
      seq(v, indent + 2, out, `${path}[]`);
    } else {
      const sub = [];
      map(v, indent + 2, sub, `${path}[]`);
      const first = sub.findIndex((l) => typeof l === 'string');
      sub[first] = `${pad(indent)}- ${sub[first].slice(indent + 2)}`;
      out.push(...sub);
    }
  }
}

/** The YAML of `value` as lines, with `{fold}` / `{unfold}` markers around managedFields. */
export function lines(value) {
  const out = [];
  if (isObj(value)) map(value, 0, out, '');
  else if (Array.isArray(value)) seq(value, 0, out, '');
  else out.push(scalar(value));
  return out;
}

/** The YAML of `value` as plain text (managedFields included). */
export function text(value) {
  return lines(value).filter((l) => typeof l === 'string').join('\n');
}

/** The YAML of `value` as DOM: <pre> blocks, managedFields in a closed <details>. */
export function render(value) {
  const root = h('div', {class: 'yaml-doc'});
  let buf = [];
  let fold = null;
  const flush = () => {
    if (!buf.length) return;
    const pre = h('pre', {}, buf.join('\n'));
    if (fold) fold.appendChild(pre);
    else root.appendChild(pre);
    buf = [];
  };
  for (const l of lines(value)) {
    if (typeof l === 'string') buf.push(l);
    else if (l.fold) {
      flush();
      fold = h('details', {data: {fold: 'managedFields'}}, h('summary', {}, l.fold));
      root.appendChild(fold);
      buf = [];
      // the summary stands for the key line: skip it inside
      fold.dataset.skip = '1';
    } else if (l.unfold) {
      if (fold?.dataset.skip) buf.shift();
      flush();
      fold = null;
    }
  }
  flush();
  return root;
}
