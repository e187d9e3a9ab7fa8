// Top functions: per function name, its self and total value within the flame graph's zoomed
// frame, in a table beside the graph (below it in a narrow window).
//
// Self sums the value of a name's frames not attributed to their children. Total sums its
// frames' values, except frames with the same name above them on the stack, so recursion is
// counted once. Headers sort (again: reverse); a click on a row calls onPick with a search query
// for exactly that function; given onSandwich, each row also has a ⇅ button that calls it with
// the function's name (the page opens its sandwich view). The table follows the graph through
// FlameGraph.onChange: new data or zoom recomputes it, a new search marks the rows it matches.

import type { FrameKind } from './api';
import { frameColour, type FlameChange, type FlameGraph, type Frame } from './flamegraph';
import { formatCount, formatPercent, formatValue } from './format';
import { el } from './dom';

export interface FunctionStat {
  readonly name: string;
  /** Kind of the first frame seen with this name. */
  readonly kind: FrameKind;
  self: number;
  /** Value of the stacks through this function, recursion counted once. */
  total: number;
  /** Frames with this name. */
  frames: number;
}

type SortKey = 'name' | 'self' | 'total';

/** Rows rendered at most; the rest are counted in the footer (search narrows them). */
const MAX_ROWS = 300;

/** Per-name self and total over the subtree of `scope` (iterative: stacks can be thousands deep). */
export function functionStats(scope: Frame): FunctionStat[] {
  const byName = new Map<string, FunctionStat>();
  // How many frames of each name are on the current path.
  const open = new Map<string, number>();
  // Frames to enter, and (leave === true) frames whose subtree is done.
  const stack: [Frame, boolean][] = [[scope, false]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [f, leave] = top;
    const depth = open.get(f.name) ?? 0;
    if (leave) {
      open.set(f.name, depth - 1);
      continue;
    }
    let s = byName.get(f.name);
    if (!s) {
      s = { name: f.name, kind: f.kind, self: 0, total: 0, frames: 0 };
      byName.set(f.name, s);
    }
    s.self += f.self;
    s.frames++;
    if (depth === 0) s.total += f.value;
    open.set(f.name, depth + 1);
    stack.push([f, true]);
    for (const c of f.children) stack.push([c, false]);
  }
  return [...byName.values()];
}

function allNames(root: Frame): string[] {
  const names = new Set<string>();
  const stack: Frame[] = [root];
  for (let f = stack.pop(); f; f = stack.pop()) {
    names.add(f.name);
    for (const c of f.children) stack.push(c);
  }
  return [...names];
}

function byName(a: FunctionStat, b: FunctionStat): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** The first `k` stats in the table's order, sorting only the candidates when a value decides. */
function firstRows(stats: readonly FunctionStat[], key: SortKey, descending: boolean, k: number): FunctionStat[] {
  let pool = stats;
  if (key !== 'name' && stats.length > k) {
    // The k-th value in this order bounds the rows shown: sort only those on its side.
    const values = Float64Array.from(stats, (s) => s[key]).sort();
    const cut = (descending ? values[values.length - k] : values[k - 1]) ?? 0;
    pool = stats.filter((s) => (descending ? s[key] >= cut : s[key] <= cut));
  }
  const sign = descending ? -1 : 1;
  return [...pool]
    .sort((a, b) => {
      const d = key === 'name' ? byName(a, b) : a[key] - b[key];
      return d !== 0 ? sign * d : byName(a, b);
    })
    .slice(0, k);
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

export class TopFunctions {
  /** The panel; mountBeside() places it next to the graph. */
  readonly element: HTMLElement;
  private stats: FunctionStat[] = [];
  /** Rows shown, in order: the index of a <tr> is its data-i. */
  private shown: FunctionStat[] = [];
  /** Every name in the tree, to make a row's search query exact. */
  private names: string[] = [];
  private scopeValue = 0;
  private sortKey: SortKey = 'self';
  private descending = true;
  private readonly scope: HTMLElement;
  private readonly head: HTMLElement;
  private readonly body: HTMLElement;
  private readonly foot: HTMLElement;

  constructor(
    private readonly graph: FlameGraph,
    private readonly onPick: (query: string, name: string) => void,
    private readonly onSandwich?: (name: string) => void,
  ) {
    this.element = el('section', onSandwich ? 'topfn topfn-with-sw' : 'topfn');
    this.element.setAttribute('aria-label', 'Top functions');
    this.element.hidden = true;
    const title = el('div', 'topfn-title');
    this.scope = el('span', 'topfn-scope');
    title.append(el('span', 'topfn-name', 'Top functions'), this.scope);
    // A grid of divs with ARIA table roles: rows off screen skip layout (content-visibility).
    const table = el('div', 'topfn-table');
    table.setAttribute('role', 'table');
    table.setAttribute('aria-label', 'Top functions');
    this.head = el('div', 'topfn-row topfn-head');
    this.head.setAttribute('role', 'row');
    const columns: [SortKey, string, string][] = [
      ['name', 'Function', 'Sort by name'],
      ['self', 'Self', 'Sort by self value: in the function itself'],
      ['total', 'Total', 'Sort by total value: in the function and what it calls'],
    ];
    for (const [key, label, hint] of columns) {
      const th = el('div', key === 'name' ? 'topfn-fn' : 'topfn-num');
      th.setAttribute('role', 'columnheader');
      th.dataset.key = key;
      const b = el('button', 'topfn-sort', label);
      b.type = 'button';
      b.title = hint;
      b.addEventListener('click', () => {
        this.sortBy(key);
      });
      th.append(b);
      this.head.append(th);
    }
    if (onSandwich) {
      const th = el('div', 'topfn-act');
      th.setAttribute('role', 'columnheader');
      th.setAttribute('aria-label', 'Sandwich');
      th.title = 'Sandwich: the callers and callees of a function';
      this.head.append(th);
    }
    this.body = el('div', 'topfn-body');
    this.body.setAttribute('role', 'rowgroup');
    this.body.addEventListener('click', (e) => {
      const target = e.target instanceof Element ? e.target : null;
      const sw = target?.closest<HTMLElement>('[data-sw]');
      if (sw) {
        const s = this.shown[Number(sw.dataset.sw)];
        if (s) this.onSandwich?.(s.name);
        return;
      }
      const row = target?.closest<HTMLElement>('[data-i]');
      const s = row ? this.shown[Number(row.dataset.i)] : undefined;
      if (s) this.onPick(this.queryFor(s.name), s.name);
    });
    table.append(this.head, this.body);
    this.foot = el('div', 'topfn-foot');
    this.element.append(title, table, this.foot);
    graph.onChange((change) => {
      this.update(change);
    });
  }

  /** Wraps `graphHost` and this panel in one container: side by side, stacked when narrow. */
  mountBeside(graphHost: HTMLElement): void {
    const split = el('div', 'fg-split');
    graphHost.replaceWith(split);
    split.append(graphHost, this.element);
  }

  private update(change: FlameChange): void {
    if (change === 'matcher') {
      this.markMatches();
      return;
    }
    const zoom = this.graph.zoomed;
    const root = this.graph.root;
    if (!zoom || !root || zoom.value <= 0) {
      this.stats = [];
      this.names = [];
      this.element.hidden = true;
      return;
    }
    if (change === 'data') this.names = allNames(root);
    this.stats = functionStats(zoom);
    this.scopeValue = zoom.value;
    this.scope.textContent = zoom.parent ? `in ${zoom.name}` : 'all stacks';
    this.scope.title = zoom.parent ? `Within the zoomed frame ${zoom.name}` : '';
    this.element.hidden = false;
    this.renderRows();
  }

  private sortBy(key: SortKey): void {
    if (key === this.sortKey) this.descending = !this.descending;
    else {
      this.sortKey = key;
      this.descending = key !== 'name';
    }
    this.renderRows();
  }

  private renderRows(): void {
    const key = this.sortKey;
    this.shown = firstRows(this.stats, key, this.descending, MAX_ROWS);
    for (const th of this.head.children) {
      const k = th instanceof HTMLElement ? th.dataset.key : undefined;
      th.setAttribute('aria-sort', k === key ? (this.descending ? 'descending' : 'ascending') : 'none');
    }
    const unit = this.graph.unit;
    const whole = this.scopeValue;
    const cell = (v: number): string => {
      const share = whole > 0 ? Math.min(100, (100 * v) / whole) : 0;
      return (
        `<div role="cell" class="topfn-num" style="--share:${share.toFixed(2)}%">` +
        `<span class="topfn-v">${esc(formatValue(v, unit))}</span><span class="topfn-p">${formatPercent(v, whole)}</span></div>`
      );
    };
    const sandwich = this.onSandwich
      ? (s: FunctionStat, i: number): string =>
          `<div role="cell" class="topfn-act"><button type="button" class="topfn-sw" data-sw="${i}" ` +
          `title="Sandwich: the callers and callees of ${esc(s.name)}" aria-label="Sandwich of ${esc(s.name)}">⇅</button></div>`
      : (): string => '';
    const hint = this.onSandwich ? 'click to search · ⇅ for its callers and callees' : 'click to search';
    this.body.innerHTML = this.shown
      .map(
        (s, i) =>
          `<div role="row" class="topfn-row" data-i="${i}" title="${esc(s.name)}\n${s.frames} frames · ${hint}">` +
          `<div role="cell" class="topfn-fn"><span class="topfn-swatch" style="--sw:${frameColour(s.kind, s.name)}"></span>${esc(s.name)}</div>` +
          `${cell(s.self)}${cell(s.total)}${sandwich(s, i)}</div>`,
      )
      .join('');
    const more = this.stats.length - this.shown.length;
    this.foot.textContent =
      more > 0
        ? `${formatCount(this.shown.length)} of ${formatCount(this.stats.length)} functions shown`
        : `${formatCount(this.stats.length)} functions`;
    this.markMatches();
  }

  private markMatches(): void {
    const m = this.graph.searchMatcher;
    const rows = this.body.children;
    for (let i = 0; i < rows.length; i++) {
      const s = this.shown[i];
      rows[i]?.classList.toggle('match', m !== null && s !== undefined && m(s.name));
    }
  }

  /** The name itself, or an anchored regular expression where the name alone would match more. */
  private queryFor(name: string): string {
    const lower = name.toLowerCase();
    const exact =
      !name.startsWith('/') && name.trim() === name && !this.names.some((n) => n !== name && n.toLowerCase().includes(lower));
    return exact ? name : `/^${name.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$/`;
  }
}
