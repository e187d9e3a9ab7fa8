// The node table of the fleet and compare views: one row per node with its band, every metric's
// value, the facts that tell hardware classes apart, the operator's labels and when it was last
// seen; sorted by any column, filtered by text.

import type { ApiCompare, ApiNode } from './api';
import { bandOf, type Split } from './bandplot';
import { formatAgo, formatFigure as figure } from './format';
import { viewHref } from './views';
import { el } from './dom';

/** Node labels derived from facts (server/src/selector.rs `NODE_FACT_LABELS`, minus `node`). */
export const FACT_LABELS: readonly string[] = [
  'cpu_vendor',
  'cpu_model',
  'cpus',
  'sockets',
  'numa_nodes',
  'kernel',
  'numa_balancing',
  'thp',
  'pmu',
  'unwinding',
  'agent_version',
];

/**
 * The facts shown as columns: those that tell hardware and kernel classes apart, and how the
 * node's stacks are unwound (frame pointers beside whole chains: its stacks are not compared).
 */
const FACT_COLUMNS = ['cpu_model', 'cpus', 'numa_nodes', 'kernel', 'thp', 'numa_balancing', 'unwinding'];

/** The labels an operator gave a node (`--label`), without `node` and the facts' labels. */
export function operatorLabels(n: ApiNode | undefined): [string, string][] {
  return Object.entries(n?.labels ?? {}).filter(([k]) => k !== 'node' && !FACT_LABELS.includes(k));
}

export interface NodeTableOptions {
  /** Words that must all occur in a row's node, band, labels or facts (case-insensitive). */
  filter: string;
  /** A column key (`node`, `band`, a metric's name, a fact label, `labels`, `last_seen`); `-` first: descending. */
  sort: string;
  range: string;
  onSort: (sort: string) => void;
  /** A click on a fact or label value (`name`, `value`): the fleet view adds it to its selector. */
  onLabel?: (name: string, value: string) => void;
}

const BAND_ORDER = { slow: 0, high: 0, fast: 1, low: 1, '': 2 } as const;

/** Fills `table`; returns how many of the comparison's nodes the filter kept. */
export function renderNodeTable(
  table: HTMLTableElement,
  a: ApiCompare,
  split: Split | null,
  info: ReadonlyMap<string, ApiNode>,
  o: NodeTableOptions,
): number {
  const words = o.filter.toLowerCase().split(/\s+/).filter((w) => w !== '');
  const label = (node: string, name: string) => info.get(node)?.labels?.[name] ?? '';
  const rows = a.nodes
    .map((node, i) => ({ node, i, band: bandOf(split, node) }))
    .filter((r) => {
      if (words.length === 0) return true;
      const text = [r.node, r.band, ...Object.entries(info.get(r.node)?.labels ?? {}).map(([k, v]) => `${k}=${v}`)]
        .join(' ')
        .toLowerCase();
      return words.every((w) => text.includes(w));
    });
  const desc = o.sort.startsWith('-');
  const key = desc ? o.sort.slice(1) : o.sort;
  const metric = a.metrics.find((m) => m.name === key);
  const seen = (node: string) => Date.parse(info.get(node)?.last_seen ?? '') || 0;
  rows.sort((x, y) => {
    let c = 0;
    if (key === 'node') c = x.node.localeCompare(y.node, undefined, { numeric: true });
    else if (metric) c = (metric.values[x.i] ?? -Infinity) - (metric.values[y.i] ?? -Infinity);
    else if (key === 'last_seen') c = seen(x.node) - seen(y.node);
    else if (key === 'labels') c = operatorLabels(info.get(x.node)).join().localeCompare(operatorLabels(info.get(y.node)).join());
    else if (FACT_COLUMNS.includes(key)) c = label(x.node, key).localeCompare(label(y.node, key), undefined, { numeric: true });
    else c = BAND_ORDER[x.band] - BAND_ORDER[y.band];
    c ||= x.node.localeCompare(y.node, undefined, { numeric: true });
    return desc ? -c : c;
  });

  const head = el('tr');
  const sortable = (name: string, text: string, title?: string, cls?: string) => {
    const th = el('th', cls);
    const b = el('button', 'link', text + (key === name ? (desc ? ' ▾' : ' ▴') : ''));
    b.type = 'button';
    if (title) b.title = title;
    th.setAttribute('aria-sort', key === name ? (desc ? 'descending' : 'ascending') : 'none');
    b.addEventListener('click', () => { o.onSort(key === name && !desc ? `-${name}` : name); });
    th.append(b);
    head.append(th);
  };
  sortable('node', 'node');
  sortable('band', 'band');
  for (const m of a.metrics) sortable(m.name, m.name, m.unit, 'num');
  for (const f of FACT_COLUMNS) sortable(f, f.replace('_', ' '));
  sortable('labels', 'labels', 'Labels the operator gave the node (--label)');
  sortable('last_seen', 'last seen');

  const value = (name: string, v: string): Node => {
    if (!o.onLabel || v === '') return document.createTextNode(v);
    const b = el('button', 'link label-value', v);
    b.type = 'button';
    b.title = `Select the nodes with ${name}="${v}"`;
    b.addEventListener('click', () => o.onLabel?.(name, v));
    return b;
  };
  const body = rows.map((r) => {
    const tr = el('tr', `band-${r.band || 'none'}`);
    const td = (content: Node | string, cls?: string) => {
      const c = el('td', cls);
      c.append(content);
      tr.append(c);
    };
    const link = el('a', 'node-link', r.node);
    link.href = viewHref('node', { node: r.node, range: o.range });
    link.title = `${r.node}: NUMA topology, event sources, memory placement and counters`;
    td(link, 'mono');
    td(r.band || '—');
    for (const m of a.metrics) td(figure(m.values[r.i]), 'num');
    for (const f of FACT_COLUMNS) {
      if (f === 'unwinding') {
        td(unwinding(info.get(r.node), value(f, label(r.node, f))), 'small unwinding');
        continue;
      }
      td(value(f, label(r.node, f)), f === 'cpu_model' ? 'small' : undefined);
    }
    const labels = el('span');
    for (const [k, v] of operatorLabels(info.get(r.node))) {
      labels.append(el('span', 'muted', `${k}=`), value(k, v), ' ');
    }
    td(labels, 'small labels');
    td(formatAgo(info.get(r.node)?.last_seen), 'muted small');
    return tr;
  });
  table.replaceChildren();
  table.createTHead().append(head);
  table.createTBody().append(...body);
  return rows.length;
}

/** The unwinding cell: its value, marked reduced (with why, on hover) when less than asked for. */
function unwinding(n: ApiNode | undefined, shown: Node): Node {
  const reduced = Object.entries(n?.facts?.unwinding_reduced ?? {});
  if (reduced.length === 0) return shown;
  const span = el('span', 'reduced');
  span.title = reduced.map(([event, why]) => `${event}: ${why}`).join('\n');
  span.append(shown, ' ', el('span', 'badge', 'reduced'));
  return span;
}
