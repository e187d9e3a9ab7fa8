// Interactive flame graph drawn as absolutely positioned DOM elements.
//
// Orientation: icicle. The root ("all") is the top row and callees grow downwards, so the
// root and the zoom breadcrumb stay visible without scrolling however deep the stacks are.
//
// Every drawn frame is a <div class="frame k-KIND" data-name="FULL NAME" data-i="INDEX">.
// Frames narrower than MIN_WIDTH pixels are not drawn: consecutive narrow siblings are merged
// into one grey <div class="merged"> block when together they are wide enough, and their
// descendants (never wider than they are) are skipped. The whole layer is rebuilt with one
// innerHTML assignment, which keeps 20,000-frame trees responsive.

import type { ApiFrame, FrameKind } from './api';
import { formatPercent, formatValue } from './format';

export interface Frame {
  readonly id: number;
  readonly name: string;
  readonly kind: FrameKind;
  readonly module: string;
  readonly value: number;
  /** Value not attributed to any child. */
  readonly self: number;
  readonly depth: number;
  readonly parent: Frame | null;
  readonly children: Frame[];
}

export interface Tree {
  root: Frame;
  count: number;
  maxDepth: number;
}

interface MergedRun {
  readonly merged: number;
  readonly value: number;
  readonly parent: Frame;
}

type Drawn = Frame | MergedRun;

export interface MatchStats {
  /** Frames whose name matches. */
  count: number;
  /** Value of the matching stacks, without counting nested matches twice. */
  value: number;
  /** Same, restricted to the zoomed frame's subtree. */
  zoomValue: number;
}

export const ROW_HEIGHT = 18;
const MIN_WIDTH = 0.5;
const MIN_LABEL_WIDTH = 28;
const KINDS: ReadonlySet<string> = new Set(['root', 'process', 'user', 'kernel', 'jit', 'unknown']);

/** Converts the API tree into linked frames (iteratively: stacks can be thousands deep). */
export function buildTree(apiRoot: ApiFrame): Tree {
  let count = 0;
  let maxDepth = 0;
  const make = (f: ApiFrame, parent: Frame | null): Frame => {
    const kind = KINDS.has(f.kind) ? f.kind : 'unknown';
    const depth = parent ? parent.depth + 1 : 0;
    if (depth > maxDepth) maxDepth = depth;
    const frame: Frame = {
      id: count++,
      name: f.name,
      kind,
      module: f.module ?? '',
      value: Number.isFinite(f.value) ? Math.max(0, f.value) : 0,
      self: 0,
      depth,
      parent,
      children: [],
    };
    return frame;
  };
  const root = make(apiRoot, null);
  const stack: [ApiFrame, Frame][] = [[apiRoot, root]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [api, frame] = top;
    let childSum = 0;
    for (const c of api.children ?? []) {
      const child = make(c, frame);
      frame.children.push(child);
      childSum += child.value;
      stack.push([c, child]);
    }
    (frame as { self: number }).self = Math.max(0, frame.value - childSum);
  }
  return { root, count, maxDepth };
}

/** Names from below the root down to `frame`: the zoom path kept in the URL. */
export function pathOf(frame: Frame): string[] {
  const names: string[] = [];
  for (let f = frame; f.parent; f = f.parent) names.push(f.name);
  return names.reverse();
}

/** Follows `path` from the root as far as it exists in this tree. */
export function resolvePath(root: Frame, path: readonly string[]): Frame {
  let f = root;
  for (const name of path) {
    const next = f.children.find((c) => c.name === name);
    if (!next) break;
    f = next;
  }
  return f;
}

/**
 * Compiles a search box query: a case-insensitive substring, or a case-insensitive regular
 * expression when it starts with '/' (an optional closing '/' is dropped). Throws on a bad regex.
 */
export function compileMatcher(query: string): ((name: string) => boolean) | null {
  const q = query.trim();
  if (q === '') return null;
  if (q.startsWith('/') && q.length > 1) {
    let body = q.slice(1);
    if (body.length > 1 && body.endsWith('/')) body = body.slice(0, -1);
    const re = new RegExp(body, 'i');
    return (name) => re.test(name);
  }
  const needle = q.toLowerCase();
  return (name) => name.toLowerCase().includes(needle);
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return (h >>> 0) / 4294967296;
}

/** Stable colour per (kind, name): one hue family per kind, varied by the name's hash. */
export function frameColour(kind: FrameKind, name: string): string {
  const h = hash(name);
  const h2 = (h * 7919) % 1;
  switch (kind) {
    case 'user': // warm: orange to amber
      return `hsl(${(14 + h * 30).toFixed(0)} ${(78 + h2 * 12).toFixed(0)}% ${(58 + h2 * 10).toFixed(0)}%)`;
    case 'kernel': // cool blue, also striped by CSS
      return `hsl(${(198 + h * 22).toFixed(0)} ${(58 + h2 * 14).toFixed(0)}% ${(62 + h2 * 10).toFixed(0)}%)`;
    case 'jit': // green
      return `hsl(${(92 + h * 38).toFixed(0)} ${(45 + h2 * 15).toFixed(0)}% ${(55 + h2 * 10).toFixed(0)}%)`;
    case 'process': // violet
      return `hsl(${(258 + h * 24).toFixed(0)} ${(42 + h2 * 14).toFixed(0)}% ${(72 + h2 * 8).toFixed(0)}%)`;
    case 'root':
      return 'hsl(220 12% 78%)';
    default:
      return `hsl(40 6% ${(68 + h2 * 10).toFixed(0)}%)`;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

function isFrame(d: Drawn): d is Frame {
  return 'id' in d;
}

export class FlameGraph {
  private tree: Tree | null = null;
  private zoom: Frame | null = null;
  private unit = '';
  private total = 0;
  private matcher: ((name: string) => boolean) | null = null;
  private drawn: Drawn[] = [];
  private hovered = -1;
  private lastWidth = 0;
  private readonly layer: HTMLDivElement;

  constructor(
    private readonly host: HTMLElement,
    private readonly tooltip: HTMLElement,
    private readonly onZoom: (frame: Frame) => void,
  ) {
    this.layer = document.createElement('div');
    this.layer.className = 'layer';
    host.replaceChildren(this.layer);
    this.layer.addEventListener('mousemove', (e) => {
      this.hover(e);
    });
    this.layer.addEventListener('mouseleave', () => {
      this.hideTooltip();
    });
    this.layer.addEventListener('click', (e) => {
      const d = this.drawnAt(e.target);
      if (d && isFrame(d) && d !== this.zoom) this.onZoom(d);
    });
    new ResizeObserver(() => {
      if (this.host.clientWidth !== this.lastWidth) this.render();
    }).observe(host);
  }

  setData(tree: Tree | null, unit: string, total: number): void {
    this.tree = tree;
    this.unit = unit;
    this.total = total > 0 ? total : (tree?.root.value ?? 0);
    this.zoom = tree?.root ?? null;
  }

  get root(): Frame | null {
    return this.tree?.root ?? null;
  }

  get zoomed(): Frame | null {
    return this.zoom;
  }

  setZoom(frame: Frame | null): void {
    this.zoom = frame ?? this.tree?.root ?? null;
    this.render();
  }

  /** Sets the search matcher and updates highlighting without a relayout. */
  setMatcher(matcher: ((name: string) => boolean) | null): void {
    this.matcher = matcher;
    this.host.classList.toggle('searching', matcher !== null);
    const els = this.layer.children;
    for (let i = 0; i < this.drawn.length; i++) {
      const d = this.drawn[i];
      const el = els[i];
      if (d && el && isFrame(d)) el.classList.toggle('match', matcher?.(d.name) ?? false);
    }
  }

  matchStats(): MatchStats | null {
    const m = this.matcher;
    const tree = this.tree;
    if (!m || !tree) return null;
    let count = 0;
    let value = 0;
    let zoomValue = 0;
    const zoom = this.zoom ?? tree.root;
    let zoomCovered = false;
    for (let a: Frame | null = zoom.parent; a; a = a.parent) if (m(a.name)) zoomCovered = true;
    // [frame, an ancestor already matched, inside the zoomed subtree]
    const stack: [Frame, boolean, boolean][] = [[tree.root, false, zoom === tree.root]];
    for (let top = stack.pop(); top; top = stack.pop()) {
      const [f, covered, inZoom] = top;
      const hit = m(f.name);
      if (hit) count++;
      if (hit && !covered) {
        value += f.value;
        if (inZoom && !zoomCovered) zoomValue += f.value;
      }
      for (const c of f.children) stack.push([c, covered || hit, inZoom || c === zoom]);
    }
    if (zoomCovered) zoomValue = zoom.value;
    return { count, value, zoomValue };
  }

  render(): void {
    this.hideTooltip();
    const width = this.host.clientWidth;
    this.lastWidth = width;
    const zoom = this.zoom;
    if (!this.tree || !zoom || width <= 0 || zoom.value <= 0) {
      this.drawn = [];
      this.layer.innerHTML = '';
      this.layer.style.height = '0px';
      return;
    }
    const matcher = this.matcher;
    const drawn: Drawn[] = [];
    const html: string[] = [];
    let maxDepth = 0;

    const emitFrame = (f: Frame, x: number, w: number, extra: string): void => {
      const i = drawn.length;
      drawn.push(f);
      if (f.depth > maxDepth) maxDepth = f.depth;
      let cls = `frame k-${f.kind}${extra}`;
      if (matcher?.(f.name)) cls += ' match';
      const label = w >= MIN_LABEL_WIDTH ? esc(f.kind === 'root' ? `all · ${formatValue(f.value, this.unit)}` : f.name) : '';
      html.push(
        `<div class="${cls}" data-i="${i}" data-name="${esc(f.name)}" style="left:${x.toFixed(2)}px;width:${w.toFixed(2)}px;top:${f.depth * ROW_HEIGHT}px;--c:${frameColour(f.kind, f.name)}">${label}</div>`,
      );
    };
    const emitMerged = (parent: Frame, x: number, w: number, count: number, value: number): void => {
      const i = drawn.length;
      drawn.push({ merged: count, value, parent });
      html.push(
        `<div class="merged" data-i="${i}" style="left:${x.toFixed(2)}px;width:${w.toFixed(2)}px;top:${(parent.depth + 1) * ROW_HEIGHT}px"></div>`,
      );
    };

    // Ancestors of the zoomed frame span the full width above it, dimmed.
    for (let a = zoom.parent; a; a = a.parent) emitFrame(a, 0, width, ' ancestor');

    const scale = width / zoom.value;
    const stack: [Frame, number][] = [[zoom, 0]];
    for (let top = stack.pop(); top; top = stack.pop()) {
      const [f, x] = top;
      emitFrame(f, x, f.value * scale, f === zoom && f.parent ? ' zoomed' : '');
      let cx = x;
      let runX = 0;
      let runCount = 0;
      let runValue = 0;
      const flush = (): void => {
        if (runCount > 0 && runValue * scale >= MIN_WIDTH) emitMerged(f, runX, runValue * scale, runCount, runValue);
        if (runCount > 0 && f.depth + 1 > maxDepth) maxDepth = f.depth + 1;
        runCount = 0;
        runValue = 0;
      };
      for (const c of f.children) {
        const cw = c.value * scale;
        if (cw < MIN_WIDTH) {
          if (runCount === 0) runX = cx;
          runCount++;
          runValue += c.value;
        } else {
          flush();
          stack.push([c, cx]);
        }
        cx += cw;
      }
      flush();
    }

    this.drawn = drawn;
    this.layer.style.height = `${(maxDepth + 1) * ROW_HEIGHT}px`;
    this.layer.innerHTML = html.join('');
  }

  private drawnAt(target: EventTarget | null): Drawn | undefined {
    if (!(target instanceof Element)) return undefined;
    const el = target.closest<HTMLElement>('[data-i]');
    if (!el) return undefined;
    return this.drawn[Number(el.dataset.i)];
  }

  private hover(e: MouseEvent): void {
    const target = e.target instanceof Element ? e.target.closest<HTMLElement>('[data-i]') : null;
    const i = target ? Number(target.dataset.i) : -1;
    const d = this.drawn[i];
    if (!d) {
      this.hideTooltip();
      return;
    }
    if (i !== this.hovered) {
      this.hovered = i;
      this.tooltip.innerHTML = this.tooltipHtml(d);
      this.tooltip.hidden = false;
    }
    // Keep the tooltip inside the viewport.
    const pad = 14;
    const r = this.tooltip.getBoundingClientRect();
    let left = e.clientX + pad;
    let top = e.clientY + pad;
    if (left + r.width > window.innerWidth - 4) left = Math.max(4, e.clientX - pad - r.width);
    if (top + r.height > window.innerHeight - 4) top = Math.max(4, e.clientY - pad - r.height);
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${top}px`;
  }

  private hideTooltip(): void {
    this.hovered = -1;
    this.tooltip.hidden = true;
  }

  private tooltipHtml(d: Drawn): string {
    const zoom = this.zoom;
    const unit = this.unit;
    const row = (k: string, v: string): string => `<tr><th>${k}</th><td>${v}</td></tr>`;
    const pctRows = (value: number, isAncestor: boolean): string => {
      let rows = row('of total', formatPercent(value, this.total));
      if (zoom) {
        const zoomName = zoom.parent ? `of ${esc(zoom.name)}` : 'of zoomed frame';
        rows += row(zoomName, isAncestor ? 'contains the zoomed frame' : formatPercent(value, zoom.value));
      }
      return rows;
    };
    if (!isFrame(d)) {
      return (
        `<div class="tt-name">${d.merged.toLocaleString('en-US')} narrow frames</div>` +
        `<div class="tt-sub">too narrow to draw, merged · under ${esc(d.parent.name)}</div>` +
        `<table>${row('value', formatValue(d.value, unit))}${pctRows(d.value, false)}</table>`
      );
    }
    const isAncestor = zoom !== null && d !== zoom && d.depth < zoom.depth;
    const sub = [d.kind === 'root' ? 'all stacks' : d.kind, d.module].filter((s) => s !== '').map(esc);
    const hint = d === zoom ? (d.parent ? 'zoomed · click an upper frame to zoom out' : '') : 'click to zoom';
    return (
      `<div class="tt-name">${esc(d.name)}</div>` +
      `<div class="tt-sub">${sub.join(' · ')}</div>` +
      '<table>' +
      row('inclusive', formatValue(d.value, unit)) +
      pctRows(d.value, isAncestor) +
      (d.children.length > 0 ? row('self', formatValue(d.self, unit)) : '') +
      '</table>' +
      (hint ? `<div class="tt-hint">${hint}</div>` : '')
    );
  }
}
