// Interactive flame graph drawn on a <canvas>.
//
// Layout. The zoomed frame spans the full width and every frame below it is as wide as its share
// of the zoomed frame's value; the zoomed frame's ancestors span the full width too, dimmed.
// Orientation: icicle (root on the top row, callees growing downwards; the default) or flame
// (root on the bottom row), see setOrientation(). layOut() walks the zoomed subtree one depth at
// a time and keeps, per row, the cells drawn on it from left to right: frames at least
// MIN_WIDTH px wide, and grey blocks for runs of narrower siblings, whose subtrees are skipped.
// Painting and hit testing only touch those cells, so their cost follows what is visible, not
// the tree size; hit testing is a binary search in one row, with no DOM per frame.
//
// Canvas. Two stacked canvases sized in device pixels (devicePixelRatio aware, resized with the
// container by a ResizeObserver): the graph, and an overlay for the hovered and the selected
// frame, so moving the mouse never repaints the graph. A graph taller than twice the viewport
// (deep recursion) is painted through a window that follows scrolling, which bounds canvas
// memory. render() and setZoom() paint at once; setMatcher(), setColourer() and
// setOrientation() repaint on the next animation frame.
//
// Interaction. Hover shows the tooltip and outlines the frame; a click zooms through the onZoom
// callback. On the focused canvas the arrow keys move a selection (towards the root, to the first
// drawn child, to the previous or next frame of the row: siblings, then cousins; up and down
// follow the screen, so in the flame orientation ArrowDown goes to the parent), Enter or Space
// zooms to it and Esc zooms out to the root (and lets the page see Esc when already there).
// setFrameAction() adds a second action on a frame, e.g. the page's sandwich view: shift+click a
// frame, or press its key on the focused graph for the selection (the zoomed frame without one);
// the tooltip's hint names both. It never applies to the 'root' frame.
//
// Extension. buildTree(source, extraOf) accepts any node type shaped like ApiFrame and keeps
// extraOf(node) in Frame.extra (undefined when extraOf is omitted), so another view can carry
// per-frame data, e.g. the second value of a differential graph; setColourer(fn) then decides
// every frame's fill (red more, blue less) and setTooltipRows(fn) adds lines to the tooltip.
// Frame ids are 0 … count-1, parents numbered before their children.
//
// Tests. window.__bimodalFlame.find(name, graph?) answers the viewport rectangle (CSS px) of the
// widest drawn frame of that name in any live FlameGraph (or only in the one constructed with the
// name `graph`, e.g. 'main', 'callers', 'callees' on the flame page), with whether the search
// matches it, or null; .count(graph?) the number of frames drawn; .graphs() every live graph's
// name, root and zoomed frame names, orientation and frames drawn. test/browser.mjs hovers and
// clicks at those rectangles.

import './flamegraph.css';
import type { ApiFrame, FrameKind } from './api';
import { formatPercent, formatValue } from './format';

export interface Frame {
  /** 0 … count-1 within its tree; parents are numbered before their children. */
  readonly id: number;
  readonly name: string;
  readonly kind: FrameKind;
  readonly module: string;
  /** Hex build id of the module, `several` when the frame merges builds, '' when unknown. */
  readonly buildId: string;
  readonly value: number;
  /** Value not attributed to any child. */
  readonly self: number;
  readonly depth: number;
  readonly parent: Frame | null;
  readonly children: Frame[];
  /** Data of the module that built the tree, from buildTree's extraOf; undefined otherwise. */
  readonly extra?: unknown;
}

export interface Tree {
  root: Frame;
  /** Number of frames; their ids are 0 … count-1. */
  count: number;
  maxDepth: number;
}

/** What buildTree reads from a node: an ApiFrame, or any type of that shape with more fields. */
export interface FrameSource<T> {
  readonly name: string;
  readonly kind: string;
  readonly module?: string | undefined;
  readonly build_id?: string | undefined;
  readonly value: number;
  readonly children?: readonly T[] | undefined;
}

export interface MatchStats {
  /** Frames whose name matches. */
  count: number;
  /** Value of the matching stacks, without counting nested matches twice. */
  value: number;
  /** Same, restricted to the zoomed frame's subtree. */
  zoomValue: number;
}

export type Orientation = 'icicle' | 'flame';
/** Decides a frame's fill (any CSS colour) in place of the colour of its kind. */
export type Colourer = (frame: Frame) => string;
/** Extra tooltip lines for a frame: [label, value] pairs, shown as text. */
export type TooltipRows = (frame: Frame) => readonly (readonly [string, string])[];
/** What changed, for listeners added with FlameGraph.onChange(). */
export type FlameChange = 'data' | 'zoom' | 'matcher';

/** A second action on a frame besides zooming (see FlameGraph.setFrameAction). */
export interface FrameAction {
  /** What it does, for the tooltip's hint, e.g. 'callers and callees'. */
  readonly label: string;
  /** One lower-case letter: pressed on the focused graph, it acts on the selected frame. */
  readonly key: string;
  run(frame: Frame): void;
}

/** A drawn frame's rectangle in CSS pixels relative to the viewport (see FlameGraph.locate). */
export interface FrameRect {
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
  /** The search matches this frame. */
  readonly match: boolean;
  /** Width of the whole graph, which a zoomed frame spans. */
  readonly graphWidth: number;
}

export const ROW_HEIGHT = 18;
/** Frames narrower than this (CSS px) are not drawn, nor is anything below them. */
const MIN_WIDTH = 0.5;
const LABEL_PAD = 4;
/** Below this much room (CSS px) no label is tried. */
const MIN_LABEL_ROOM = 14;
const KINDS: ReadonlySet<string> = new Set(['root', 'process', 'user', 'kernel', 'jit', 'unknown']);

const MATCH_FILL = '#d0307f';
const MERGED_FILL = '#d6dae1';
const INK = '#1a1a1a';
const MATCH_INK = '#ffffff';
const KERNEL_EDGE = 'rgba(18, 52, 96, 0.65)';
const KERNEL_STRIPE = 'rgba(255, 255, 255, 0.16)';
const ANCESTOR_VEIL = 'rgba(255, 255, 255, 0.4)';
const SEARCH_VEIL = 'rgba(255, 255, 255, 0.62)';
const HOVER_FILL = 'rgba(255, 255, 255, 0.14)';
const HOVER_EDGE = 'rgba(0, 0, 0, 0.62)';
const SELECT_EDGE = '#2563eb';
const MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace";
const SANS = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";
const FONTS = {
  plain: `11.5px ${MONO}`,
  kernel: `italic 11.5px ${MONO}`,
  process: `600 11.5px ${MONO}`,
  root: `600 12px ${SANS}`,
} as const;
type FontKey = keyof typeof FONTS;
const FONT_KEYS = Object.keys(FONTS) as FontKey[];

function isKind(kind: string): kind is FrameKind {
  return KINDS.has(kind);
}

/**
 * Converts an API tree into linked frames (iteratively: stacks can be thousands deep).
 * `extraOf`, when given, is called once per node and its answer kept in Frame.extra.
 */
export function buildTree<T extends FrameSource<T> = ApiFrame>(source: T, extraOf?: (node: T) => unknown): Tree {
  let count = 0;
  let maxDepth = 0;
  const make = (f: T, parent: Frame | null): Frame => {
    const depth = parent ? parent.depth + 1 : 0;
    if (depth > maxDepth) maxDepth = depth;
    return {
      id: count++,
      name: f.name,
      kind: isKind(f.kind) ? f.kind : 'unknown',
      module: f.module ?? '',
      buildId: f.build_id ?? '',
      value: Number.isFinite(f.value) ? Math.max(0, f.value) : 0,
      self: 0,
      depth,
      parent,
      children: [],
      extra: extraOf?.(f),
    };
  };
  const root = make(source, null);
  const stack: [T, Frame][] = [[source, root]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [node, frame] = top;
    let childSum = 0;
    for (const c of node.children ?? []) {
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
    case 'kernel': // cool blue, also striped with a dark left edge
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

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

// ---------------------------------------------------------------------------------------------
// Layout

/** One rectangle of the layout: a frame, or a run of adjacent siblings too narrow to draw. */
interface Cell {
  /** The frame; for a run, the parent of the frames it merges. */
  readonly frame: Frame;
  /** 0 for a frame; for a run, how many frames it merges. */
  readonly merged: number;
  readonly value: number;
  /** Left edge and width, CSS px. */
  readonly x: number;
  readonly w: number;
}

interface Layout {
  readonly zoom: Frame;
  readonly width: number;
  /** rows[d]: the cells at depth d, left to right. */
  readonly rows: readonly (readonly Cell[])[];
  /** Cells that are frames (runs not counted). */
  readonly frames: number;
}

interface Hit {
  readonly row: number;
  readonly cell: Cell;
}

function layOut(zoom: Frame, width: number): Layout {
  const rows: Cell[][] = [];
  // The zoomed frame and its ancestors span the full width.
  for (let a: Frame | null = zoom; a; a = a.parent) rows[a.depth] = [{ frame: a, merged: 0, value: a.value, x: 0, w: width }];
  let frames = zoom.depth + 1;
  const scale = width / zoom.value;
  let parents: readonly Cell[] = rows[zoom.depth] ?? [];
  for (;;) {
    const row: Cell[] = [];
    for (const p of parents) {
      if (p.merged > 0) continue;
      let x = p.x;
      let runX = 0;
      let runCount = 0;
      let runValue = 0;
      for (const c of p.frame.children) {
        const w = c.value * scale;
        if (w < MIN_WIDTH) {
          if (runCount === 0) runX = x;
          runCount++;
          runValue += c.value;
        } else {
          if (runCount > 0) pushRun(row, p.frame, runX, runCount, runValue, scale);
          runCount = 0;
          runValue = 0;
          row.push({ frame: c, merged: 0, value: c.value, x, w });
          frames++;
        }
        x += w;
      }
      if (runCount > 0) pushRun(row, p.frame, runX, runCount, runValue, scale);
    }
    if (row.length === 0) break;
    rows.push(row);
    parents = row;
  }
  return { zoom, width, rows, frames };
}

/** A run of narrow siblings is drawn as one grey block when together they are wide enough. */
function pushRun(row: Cell[], parent: Frame, x: number, count: number, value: number, scale: number): void {
  const w = value * scale;
  if (w >= MIN_WIDTH) row.push({ frame: parent, merged: count, value, x, w });
}

// ---------------------------------------------------------------------------------------------
// Labels

/** Labels to draw in one font: parallel arrays, reused from paint to paint. */
class LabelBatch {
  text: string[] = [];
  x: number[] = [];
  y: number[] = [];
  room: number[] = [];

  add(text: string, x: number, y: number, room: number): void {
    this.text.push(text);
    this.x.push(x);
    this.y.push(y);
    this.room.push(room);
  }

  clear(): void {
    this.text.length = 0;
    this.x.length = 0;
    this.y.length = 0;
    this.room.length = 0;
  }
}

/**
 * Truncates labels to the room they have, with an ellipsis. With a monospace font (the usual
 * case) the fit is arithmetic; otherwise by binary search over measureText.
 */
class TextFitter {
  /** Per font: the advance of one character if the font is monospace, else 0. */
  private readonly advance = new Map<string, number>();

  constructor(private readonly ctx: CanvasRenderingContext2D) {}

  /** The label for `text` in `room` px with the context's current font `font`; '' if none fits. */
  fit(font: string, text: string, room: number): string {
    let adv = this.advance.get(font);
    if (adv === undefined) {
      const narrow = this.ctx.measureText('iiiiiiiiii').width;
      const wide = this.ctx.measureText('MMMMMMMMMM').width;
      adv = Math.abs(narrow - wide) < 0.5 ? wide / 10 : 0;
      this.advance.set(font, adv);
    }
    if (adv > 0) {
      const chars = Math.floor(room / adv);
      if (text.length <= chars) return text;
      return chars >= 3 ? `${text.slice(0, chars - 1)}…` : '';
    }
    if (this.ctx.measureText(text).width <= room) return text;
    let lo = 0;
    let hi = text.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.ctx.measureText(`${text.slice(0, mid)}…`).width <= room) lo = mid;
      else hi = mid - 1;
    }
    return lo >= 2 ? `${text.slice(0, lo)}…` : '';
  }
}

// ---------------------------------------------------------------------------------------------
// Test hook

/** One live graph as the test hook describes it. */
interface GraphInfo {
  /** The name it was constructed with. */
  readonly name: string;
  /** Its root frame's name, or null without data. */
  readonly root: string | null;
  readonly zoom: string | null;
  readonly orientation: Orientation;
  /** Frames drawn (0 while hidden). */
  readonly drawn: number;
}

interface FlameTestHook {
  /** The widest drawn frame named `name` in any live graph (or in the graph named `graph`), or null. */
  find(name: string, graph?: string): FrameRect | null;
  /** Frames drawn, summed over live graphs (or in the graph named `graph`). */
  count(graph?: string): number;
  graphs(): GraphInfo[];
}

declare global {
  interface Window {
    __bimodalFlame?: FlameTestHook;
  }
}

const live = new Set<FlameGraph>();

function installTestHook(): void {
  if (window.__bimodalFlame) return;
  window.__bimodalFlame = {
    find(name, graph) {
      let best: FrameRect | null = null;
      for (const g of live) {
        if (graph !== undefined && g.name !== graph) continue;
        const r = g.locate(name);
        if (r && (!best || r.w > best.w)) best = r;
      }
      return best;
    },
    count(graph) {
      let n = 0;
      for (const g of live) if (graph === undefined || g.name === graph) n += g.drawnFrames;
      return n;
    },
    graphs() {
      return [...live].map((g) => ({
        name: g.name,
        root: g.root?.name ?? null,
        zoom: g.zoomed?.name ?? null,
        orientation: g.orientation,
        drawn: g.drawnFrames,
      }));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The graph

export class FlameGraph {
  private tree: Tree | null = null;
  private zoom: Frame | null = null;
  private unitName = '';
  private totalValue = 0;
  private matcher: ((name: string) => boolean) | null = null;
  /** Per frame id, 1 when the matcher matches its name; null without a search. */
  private matched: Uint8Array | null = null;
  private colourer: Colourer | null = null;
  private colours: (string | undefined)[] = [];
  private extraRows: TooltipRows | null = null;
  private action: FrameAction | null = null;
  private orient: Orientation = 'icicle';
  private layout: Layout | null = null;
  private hovered: Hit | null = null;
  private selected: Frame | null = null;
  /** The tooltip shows the keyboard selection, not the pointer's frame. */
  private tooltipForKeys = false;
  private readonly listeners = new Set<(change: FlameChange) => void>();

  // Geometry, CSS px: graph width, content height, and the painted window of the content.
  private width = 0;
  private contentH = 0;
  private winTop = 0;
  private winH = 0;
  private dpr = 1;

  private readonly layer: HTMLDivElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly overlay: HTMLCanvasElement;
  private readonly ctx: CanvasRenderingContext2D;
  private readonly octx: CanvasRenderingContext2D;
  private readonly fitter: TextFitter;
  private readonly labels: Record<FontKey, LabelBatch> = { plain: new LabelBatch(), kernel: new LabelBatch(), process: new LabelBatch(), root: new LabelBatch() };
  private stripes: CanvasPattern | null = null;
  private stripesDpr = 0;
  private paintRequest = 0;
  private scrollRequest = 0;
  private readonly resizeObserver: ResizeObserver;
  private dprQuery: MediaQueryList | null = null;

  /** `name` tells graphs apart in the test hook (window.__bimodalFlame). */
  constructor(
    host: HTMLElement,
    private readonly tooltip: HTMLElement,
    private readonly onZoom: (frame: Frame) => void,
    readonly name = 'graph',
  ) {
    this.layer = document.createElement('div');
    this.layer.className = 'fg-layer';
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'fg-canvas';
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'application');
    this.canvas.setAttribute('aria-roledescription', 'flame graph');
    this.canvas.setAttribute('aria-label', 'Flame graph');
    this.overlay = document.createElement('canvas');
    this.overlay.className = 'fg-overlay';
    this.overlay.setAttribute('aria-hidden', 'true');
    this.layer.append(this.canvas, this.overlay);
    host.replaceChildren(this.layer);
    this.ctx = context2d(this.canvas);
    this.octx = context2d(this.overlay);
    this.fitter = new TextFitter(this.ctx);

    this.canvas.addEventListener('mousemove', this.onMouseMove);
    this.canvas.addEventListener('mouseleave', this.onMouseLeave);
    this.canvas.addEventListener('click', this.onClick);
    this.canvas.addEventListener('keydown', this.onKeyDown);
    this.canvas.addEventListener('focus', this.onFocusChange);
    this.canvas.addEventListener('blur', this.onFocusChange);
    document.addEventListener('scroll', this.onScroll, { capture: true, passive: true });
    window.addEventListener('resize', this.onScroll, { passive: true });
    this.resizeObserver = new ResizeObserver(() => {
      if (this.layer.clientWidth !== this.width) this.render();
    });
    this.resizeObserver.observe(host);
    this.watchDpr();
    live.add(this);
    installTestHook();
  }

  /** Removes listeners and observers; the graph is not usable afterwards. */
  destroy(): void {
    live.delete(this);
    this.resizeObserver.disconnect();
    this.dprQuery?.removeEventListener('change', this.onDprChange);
    document.removeEventListener('scroll', this.onScroll, { capture: true });
    window.removeEventListener('resize', this.onScroll);
    cancelAnimationFrame(this.paintRequest);
    cancelAnimationFrame(this.scrollRequest);
    this.listeners.clear();
    this.layer.remove();
  }

  /** Calls `listener` after data, zoom or search changed; answers a function that unsubscribes. */
  onChange(listener: (change: FlameChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  setData(tree: Tree | null, unit: string, total: number): void {
    this.tree = tree;
    this.unitName = unit;
    this.totalValue = total > 0 ? total : (tree?.root.value ?? 0);
    this.zoom = tree?.root ?? null;
    this.layout = null;
    this.colours = [];
    this.hovered = null;
    this.selected = null;
    this.computeMatches();
    this.emit('data');
  }

  get root(): Frame | null {
    return this.tree?.root ?? null;
  }

  get zoomed(): Frame | null {
    return this.zoom;
  }

  get unit(): string {
    return this.unitName;
  }

  /** The value shares are taken of: the profile's total. */
  get total(): number {
    return this.totalValue;
  }

  get searchMatcher(): ((name: string) => boolean) | null {
    return this.matcher;
  }

  get orientation(): Orientation {
    return this.orient;
  }

  /** Frames drawn (at least MIN_WIDTH wide) at the current zoom and width. */
  get drawnFrames(): number {
    return this.layer.isConnected ? (this.layout?.frames ?? 0) : 0;
  }

  setZoom(frame: Frame | null): void {
    this.zoom = frame ?? this.tree?.root ?? null;
    this.render();
    if (this.selected && !this.cellOf(this.selected)) this.selected = null;
    this.emit('zoom');
  }

  /** Sets the search matcher; matches are painted magenta, the rest veiled. */
  setMatcher(matcher: ((name: string) => boolean) | null): void {
    this.matcher = matcher;
    this.computeMatches();
    this.requestPaint();
    this.emit('matcher');
  }

  /** Overrides every frame's fill (e.g. a differential graph's red and blue); null restores kinds. */
  setColourer(colourer: Colourer | null): void {
    this.colourer = colourer;
    this.colours = [];
    this.requestPaint();
  }

  /** Adds lines to the tooltip of every frame; null removes them. */
  setTooltipRows(rows: TooltipRows | null): void {
    this.extraRows = rows;
  }

  /**
   * Adds a second action on frames (not the 'root' frame): shift+click, or `action.key` on the
   * focused graph for the selected (else the zoomed) frame; null removes it.
   */
  setFrameAction(action: FrameAction | null): void {
    this.action = action;
  }

  /** Focuses the canvas (keyboard navigation), without scrolling. */
  focus(): void {
    this.canvas.focus({ preventScroll: true });
  }

  setOrientation(orientation: Orientation): void {
    if (orientation === this.orient) return;
    this.orient = orientation;
    this.hideTooltip();
    this.requestPaint();
  }

  matchStats(): MatchStats | null {
    const tree = this.tree;
    if (!this.matched || !tree) return null;
    let count = 0;
    let value = 0;
    let zoomValue = 0;
    const zoom = this.zoom ?? tree.root;
    let zoomCovered = false;
    for (let a: Frame | null = zoom.parent; a; a = a.parent) if (this.isMatch(a)) zoomCovered = true;
    // [frame, an ancestor already matched, inside the zoomed subtree]
    const stack: [Frame, boolean, boolean][] = [[tree.root, false, zoom === tree.root]];
    for (let top = stack.pop(); top; top = stack.pop()) {
      const [f, covered, inZoom] = top;
      const hit = this.isMatch(f);
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

  /** Lays out (if the zoom, data or width changed) and paints now. */
  render(): void {
    cancelAnimationFrame(this.paintRequest);
    this.paintRequest = 0;
    this.hideTooltip();
    this.hovered = null;
    const width = this.layer.clientWidth;
    const zoom = this.zoom;
    if (!this.tree || !zoom || width <= 0 || zoom.value <= 0) this.layout = null;
    else if (this.layout?.zoom !== zoom || this.layout.width !== width) this.layout = layOut(zoom, width);
    this.width = width;
    this.place();
    this.paint();
    this.paintOverlay();
  }

  /** The viewport rectangle of the widest drawn frame named `name`, or null (the test hook). */
  locate(name: string): FrameRect | null {
    const layout = this.layout;
    if (!layout || !this.layer.isConnected) return null;
    let best: Cell | null = null;
    let bestRow = 0;
    for (let r = 0; r < layout.rows.length; r++) {
      for (const c of layout.rows[r] ?? []) {
        if (c.merged === 0 && c.frame.name === name && (!best || c.w > best.w)) {
          best = c;
          bestRow = r;
        }
      }
    }
    if (!best) return null;
    const box = this.layer.getBoundingClientRect();
    return {
      x: box.left + best.x,
      y: box.top + this.rowTop(bestRow),
      w: best.w,
      h: ROW_HEIGHT - 1,
      match: this.isMatch(best.frame),
      graphWidth: this.width,
    };
  }

  // -------------------------------------------------------------------------------------------
  // State helpers

  private emit(change: FlameChange): void {
    for (const l of this.listeners) l(change);
  }

  private computeMatches(): void {
    const m = this.matcher;
    const tree = this.tree;
    if (!m || !tree) {
      this.matched = null;
      return;
    }
    const matched = new Uint8Array(tree.count);
    // Names repeat a lot (recursion, shared callees): test each name once.
    const byName = new Map<string, boolean>();
    const stack: Frame[] = [tree.root];
    for (let f = stack.pop(); f; f = stack.pop()) {
      let hit = byName.get(f.name);
      if (hit === undefined) {
        hit = m(f.name);
        byName.set(f.name, hit);
      }
      if (hit) matched[f.id] = 1;
      for (const c of f.children) stack.push(c);
    }
    this.matched = matched;
  }

  private isMatch(f: Frame): boolean {
    return this.matched?.[f.id] === 1;
  }

  private colourOf(f: Frame): string {
    let c = this.colours[f.id];
    if (c === undefined) {
      c = this.colourer ? this.colourer(f) : frameColour(f.kind, f.name);
      this.colours[f.id] = c;
    }
    return c;
  }

  private cellOf(frame: Frame): Hit | null {
    const row = this.layout?.rows[frame.depth];
    const cell = row?.find((c) => c.frame === frame && c.merged === 0);
    return cell ? { row: frame.depth, cell } : null;
  }

  // -------------------------------------------------------------------------------------------
  // Geometry

  private rowTop(row: number): number {
    return this.orient === 'icicle' ? row * ROW_HEIGHT : this.contentH - (row + 1) * ROW_HEIGHT;
  }

  private rowAt(y: number): number {
    return Math.floor((this.orient === 'icicle' ? y : this.contentH - 1 - y) / ROW_HEIGHT);
  }

  /** Snaps a cell to device pixels: [x, width], keeping a 1 px gap right of frames wide enough. */
  private snap(cell: Cell): [number, number] {
    const d = this.dpr;
    const x0 = Math.round(cell.x * d) / d;
    let w = Math.round((cell.x + cell.w) * d) / d - x0;
    if (w >= 4) w -= 1;
    else if (w < 1 / d) w = 1 / d;
    return [x0, w];
  }

  /**
   * Sizes the layer to the content and the canvases to the painted window: all of the content,
   * or, when it is taller than twice the viewport, a window of that height around what is
   * visible. Answers whether the canvases changed (and need painting).
   */
  private place(): boolean {
    const contentH = (this.layout?.rows.length ?? 0) * ROW_HEIGHT;
    if (contentH !== this.contentH) {
      this.contentH = contentH;
      this.layer.style.height = `${contentH}px`;
    }
    const viewH = window.innerHeight;
    const maxH = Math.max(2 * viewH, 1024);
    let top = 0;
    let h = contentH;
    if (contentH > maxH) {
      h = maxH;
      const box = this.layer.getBoundingClientRect();
      const visTop = clamp(-box.top, 0, contentH);
      const visBottom = clamp(viewH - box.top, 0, contentH);
      top = this.winTop;
      if (this.winH !== h || visTop < top || visBottom > top + h) top = Math.round(clamp((visTop + visBottom - h) / 2, 0, contentH - h));
    }
    const dpr = window.devicePixelRatio || 1;
    const w = Math.round(this.width * dpr);
    const hPx = Math.round(h * dpr);
    const changed = top !== this.winTop || h !== this.winH || dpr !== this.dpr || w !== this.canvas.width || hPx !== this.canvas.height;
    if (!changed) return false;
    this.winTop = top;
    this.winH = h;
    this.dpr = dpr;
    for (const c of [this.canvas, this.overlay]) {
      if (c.width !== w) c.width = w;
      if (c.height !== hPx) c.height = hPx;
      c.style.width = `${this.width}px`;
      c.style.height = `${h}px`;
      c.style.top = `${top}px`;
    }
    return true;
  }

  private watchDpr(): void {
    this.dprQuery?.removeEventListener('change', this.onDprChange);
    this.dprQuery = window.matchMedia(`(resolution: ${window.devicePixelRatio || 1}dppx)`);
    this.dprQuery.addEventListener('change', this.onDprChange);
  }

  private readonly onDprChange = (): void => {
    this.watchDpr();
    this.render();
  };

  /** Deep graphs are painted through a window: move it when scrolling leaves it. */
  private readonly onScroll = (): void => {
    if (this.scrollRequest !== 0 || this.contentH <= this.winH) return;
    this.scrollRequest = requestAnimationFrame(() => {
      this.scrollRequest = 0;
      if (this.place()) {
        this.paint();
        this.paintOverlay();
      }
    });
  };

  private requestPaint(): void {
    if (this.paintRequest !== 0) return;
    this.paintRequest = requestAnimationFrame(() => {
      this.paintRequest = 0;
      this.place();
      this.paint();
      this.paintOverlay();
    });
  }

  // -------------------------------------------------------------------------------------------
  // Painting

  private stripePattern(): CanvasPattern | null {
    if (this.stripes && this.stripesDpr === this.dpr) return this.stripes;
    const d = this.dpr;
    const n = Math.max(2, Math.round(8 * d));
    const tile = document.createElement('canvas');
    tile.width = n;
    tile.height = n;
    const g = tile.getContext('2d');
    if (!g) return null;
    g.strokeStyle = KERNEL_STRIPE;
    g.lineWidth = 2 * d;
    g.beginPath();
    for (const off of [-n, 0, n]) {
      g.moveTo(off, n);
      g.lineTo(off + n, 0);
    }
    g.stroke();
    const pattern = this.ctx.createPattern(tile, 'repeat');
    // Pattern pixels map to device pixels under the context's dpr scale.
    pattern?.setTransform(new DOMMatrix().scale(1 / d));
    this.stripes = pattern;
    this.stripesDpr = d;
    return pattern;
  }

  /** Rows intersecting the painted window: [first, last]. */
  private rowSpan(rows: number): [number, number] {
    const a = this.rowAt(this.winTop);
    const b = this.rowAt(this.winTop + this.winH - 1);
    return [Math.max(0, Math.min(a, b)), Math.min(rows - 1, Math.max(a, b))];
  }

  private paint(): void {
    const ctx = this.ctx;
    const d = this.dpr;
    // Content coordinates: the window's top is the canvas's top.
    ctx.setTransform(d, 0, 0, d, 0, -this.winTop * d);
    ctx.clearRect(0, this.winTop, this.width, this.winH);
    const layout = this.layout;
    if (!layout || this.winH <= 0) return;
    const [first, last] = this.rowSpan(layout.rows.length);
    const h = ROW_HEIGHT - 1;
    const searching = this.matched !== null;
    const matches: Cell[] = [];
    const matchY: number[] = [];
    // Rectangles as x, y, w triples: by fill, so each colour is set once per paint (a profile
    // has far fewer names than drawn frames), and the kernel frames' decorations.
    const byFill = new Map<string, number[]>();
    const kernels: number[] = [];
    for (const k of FONT_KEYS) this.labels[k].clear();

    for (let r = first; r <= last; r++) {
      const row = layout.rows[r];
      if (!row) continue;
      const y = this.rowTop(r);
      for (const cell of row) {
        if (searching && cell.merged === 0 && this.isMatch(cell.frame)) {
          matches.push(cell);
          matchY.push(y);
          continue;
        }
        const [x, w] = this.snap(cell);
        const fill = cell.merged > 0 ? MERGED_FILL : this.colourOf(cell.frame);
        let rects = byFill.get(fill);
        if (!rects) {
          rects = [];
          byFill.set(fill, rects);
        }
        rects.push(x, y, w);
        if (cell.merged > 0) continue;
        if (cell.frame.kind === 'kernel') kernels.push(x, y, w);
        this.addLabel(cell.frame, x, y, w);
      }
    }
    for (const [fill, rects] of byFill) {
      ctx.fillStyle = fill;
      fillRects(ctx, rects, h, 0, Infinity);
    }

    // Kernel frames: faint diagonal stripes and a dark left edge.
    const stripes = this.stripePattern();
    if (stripes) {
      ctx.fillStyle = stripes;
      fillRects(ctx, kernels, h, 4, Infinity);
    }
    ctx.fillStyle = KERNEL_EDGE;
    fillRects(ctx, kernels, h, 4, 2);
    this.paintLabels(INK);

    // Ancestors of the zoomed frame: dimmed.
    ctx.fillStyle = ANCESTOR_VEIL;
    for (let r = first; r <= Math.min(last, layout.zoom.depth - 1); r++) ctx.fillRect(0, this.rowTop(r), this.width, ROW_HEIGHT);

    if (!searching) return;
    ctx.fillStyle = SEARCH_VEIL;
    ctx.fillRect(0, this.winTop, this.width, this.winH);
    for (const k of FONT_KEYS) this.labels[k].clear();
    ctx.fillStyle = MATCH_FILL;
    matches.forEach((cell, i) => {
      const y = matchY[i] ?? 0;
      const [x, w] = this.snap(cell);
      ctx.fillRect(x, y, w, h);
      this.addLabel(cell.frame, x, y, w);
    });
    this.paintLabels(MATCH_INK);
  }

  private addLabel(f: Frame, x: number, y: number, w: number): void {
    const room = w - 2 * LABEL_PAD;
    if (room < MIN_LABEL_ROOM) return;
    const font: FontKey = f.kind === 'root' ? 'root' : f.kind === 'kernel' ? 'kernel' : f.kind === 'process' ? 'process' : 'plain';
    const text = f.kind === 'root' ? `all · ${formatValue(f.value, this.unitName)}` : f.name;
    this.labels[font].add(text, x + LABEL_PAD, y + ROW_HEIGHT / 2, room);
  }

  private paintLabels(ink: string): void {
    const ctx = this.ctx;
    ctx.fillStyle = ink;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'left';
    for (const key of FONT_KEYS) {
      const batch = this.labels[key];
      if (batch.text.length === 0) continue;
      const font = FONTS[key];
      ctx.font = font;
      for (let i = 0; i < batch.text.length; i++) {
        const label = this.fitter.fit(font, batch.text[i] ?? '', batch.room[i] ?? 0);
        if (label !== '') ctx.fillText(label, batch.x[i] ?? 0, batch.y[i] ?? 0);
      }
    }
  }

  /** The hovered frame's outline and the keyboard selection, on the overlay canvas. */
  private paintOverlay(): void {
    const ctx = this.octx;
    const d = this.dpr;
    ctx.setTransform(d, 0, 0, d, 0, -this.winTop * d);
    ctx.clearRect(0, this.winTop, this.width, this.winH);
    if (!this.layout) return;
    const hov = this.hovered;
    if (hov) {
      const [x, w] = this.snap(hov.cell);
      const y = this.rowTop(hov.row);
      ctx.fillStyle = HOVER_FILL;
      ctx.fillRect(x, y, w, ROW_HEIGHT - 1);
      if (w >= 3) {
        ctx.strokeStyle = HOVER_EDGE;
        ctx.lineWidth = 1;
        ctx.strokeRect(x + 0.5, y + 0.5, w - 1, ROW_HEIGHT - 2);
      }
    }
    const sel = this.selected ? this.cellOf(this.selected) : null;
    if (sel && document.activeElement === this.canvas) {
      const [x, w] = this.snap(sel.cell);
      const y = this.rowTop(sel.row);
      ctx.strokeStyle = SELECT_EDGE;
      ctx.lineWidth = 2;
      ctx.strokeRect(x + 1, y + 1, Math.max(0, w - 2), ROW_HEIGHT - 3);
    }
  }

  // -------------------------------------------------------------------------------------------
  // Pointer

  private hitTest(x: number, y: number): Hit | null {
    const layout = this.layout;
    if (!layout || y < 0 || y >= this.contentH) return null;
    const r = this.rowAt(y);
    const row = layout.rows[r];
    if (!row) return null;
    // The last cell starting at or left of x.
    let lo = 0;
    let hi = row.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if ((row[mid]?.x ?? Infinity) <= x) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    const cell = row[found];
    if (!cell || x >= cell.x + Math.max(cell.w, 1)) return null;
    return { row: r, cell };
  }

  /** The pointer in content coordinates. */
  private pointer(e: MouseEvent): [number, number] {
    const box = this.canvas.getBoundingClientRect();
    return [e.clientX - box.left, e.clientY - box.top + this.winTop];
  }

  private readonly onMouseMove = (e: MouseEvent): void => {
    const [x, y] = this.pointer(e);
    const hit = this.hitTest(x, y);
    if (!hit) {
      if (this.hovered || this.tooltipForKeys) {
        this.hideTooltip();
        this.hovered = null;
        this.canvas.style.cursor = '';
        this.paintOverlay();
      }
      return;
    }
    if (hit.cell !== this.hovered?.cell || this.tooltipForKeys) {
      this.hovered = hit;
      this.tooltipForKeys = false;
      this.canvas.style.cursor = hit.cell.merged === 0 ? 'pointer' : '';
      this.tooltip.innerHTML = this.tooltipHtml(hit.cell);
      this.tooltip.hidden = false;
      this.paintOverlay();
    }
    this.moveTooltip(e.clientX + 14, e.clientY + 14, e.clientX - 14, e.clientY - 14);
  };

  private readonly onMouseLeave = (): void => {
    this.hideTooltip();
    this.hovered = null;
    this.paintOverlay();
  };

  private readonly onClick = (e: MouseEvent): void => {
    const [x, y] = this.pointer(e);
    const hit = this.hitTest(x, y);
    if (!hit || hit.cell.merged > 0) return;
    const f = hit.cell.frame;
    if (e.shiftKey && this.action && f.kind !== 'root') {
      this.hideTooltip();
      this.action.run(f);
      return;
    }
    this.selected = f;
    if (f !== this.zoom) this.onZoom(f);
    else this.paintOverlay();
  };

  // -------------------------------------------------------------------------------------------
  // Keyboard

  private readonly onKeyDown = (e: KeyboardEvent): void => {
    const layout = this.layout;
    const zoom = this.zoom;
    const root = this.tree?.root;
    if (!layout || !zoom || !root || e.altKey || e.ctrlKey || e.metaKey) return;
    const sel = this.selected && this.cellOf(this.selected) ? this.selected : null;
    const toRoot = this.orient === 'icicle' ? 'ArrowUp' : 'ArrowDown';
    const toLeaves = this.orient === 'icicle' ? 'ArrowDown' : 'ArrowUp';
    let next: Frame | null = null;
    if (e.key === toRoot) next = sel ? (sel.parent ?? sel) : zoom;
    else if (e.key === toLeaves) next = sel ? (this.firstDrawnChild(sel) ?? sel) : zoom;
    else if (e.key === 'ArrowLeft' || e.key === 'ArrowRight') next = sel ? (this.neighbour(sel, e.key === 'ArrowLeft' ? -1 : 1) ?? sel) : zoom;
    else if (e.key === 'Enter' || e.key === ' ') {
      if (sel && sel !== zoom) this.onZoom(sel);
      next = sel ?? zoom;
    } else if (e.key === 'Escape') {
      this.selected = null;
      this.hideTooltip();
      if (zoom !== root) {
        // Handled here, so the page's own Esc handler does not zoom out a second time; at the
        // root it goes on to the page (e.g. to close a view).
        e.stopPropagation();
        this.onZoom(root);
      } else this.paintOverlay();
    } else if (e.key.toLowerCase() === this.action?.key) {
      const f = sel ?? zoom;
      e.preventDefault();
      if (f.kind !== 'root') {
        this.hideTooltip();
        this.action.run(f);
      }
      return;
    } else return;
    e.preventDefault();
    if (next) this.select(next);
  };

  private readonly onFocusChange = (): void => {
    if (document.activeElement !== this.canvas && this.tooltipForKeys) this.hideTooltip();
    this.paintOverlay();
  };

  private firstDrawnChild(f: Frame): Frame | null {
    const row = this.layout?.rows[f.depth + 1];
    return row?.find((c) => c.merged === 0 && c.frame.parent === f)?.frame ?? null;
  }

  /** The previous (-1) or next (+1) drawn frame on the row: a sibling, else a cousin. */
  private neighbour(f: Frame, dir: -1 | 1): Frame | null {
    const row = this.layout?.rows[f.depth];
    if (!row) return null;
    const at = row.findIndex((c) => c.frame === f && c.merged === 0);
    for (let i = at + dir; i >= 0 && i < row.length; i += dir) {
      const c = row[i];
      if (c?.merged === 0) return c.frame;
    }
    return null;
  }

  private select(f: Frame): void {
    this.selected = f;
    const hit = this.cellOf(f);
    this.paintOverlay();
    if (!hit) return;
    this.canvas.setAttribute('aria-label', `Flame graph, selected ${f.name}: ${formatValue(f.value, this.unitName)}, ${formatPercent(f.value, this.totalValue)} of total`);
    // Keep the selection on screen, then show its tooltip below (or above) it.
    const box = this.layer.getBoundingClientRect();
    let top = box.top + this.rowTop(hit.row);
    if (top < 0 || top + ROW_HEIGHT > window.innerHeight) {
      const dy = top - window.innerHeight / 2;
      window.scrollBy(0, dy);
      top -= dy;
    }
    const left = box.left + Math.max(0, hit.cell.x);
    this.hovered = null;
    this.tooltipForKeys = true;
    this.tooltip.innerHTML = this.tooltipHtml(hit.cell);
    this.tooltip.hidden = false;
    this.moveTooltip(left + 8, top + ROW_HEIGHT + 4, left + 8, top - 4);
  }

  // -------------------------------------------------------------------------------------------
  // Tooltip

  /** Places the tooltip at (x, y), or left of / above (altX, altY) where it would leave the viewport. */
  private moveTooltip(x: number, y: number, altX: number, altY: number): void {
    const r = this.tooltip.getBoundingClientRect();
    let left = x;
    let top = y;
    if (left + r.width > window.innerWidth - 4) left = Math.max(4, altX - r.width);
    if (top + r.height > window.innerHeight - 4) top = Math.max(4, altY - r.height);
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${top}px`;
  }

  private hideTooltip(): void {
    this.tooltipForKeys = false;
    this.tooltip.hidden = true;
  }

  private tooltipHtml(cell: Cell): string {
    const unit = this.unitName;
    const zoom = this.zoom;
    const zoomed = zoom?.parent ? zoom : null;
    const f = cell.frame;
    const th = (s: string): string => `<th>${s}</th>`;
    const td = (s: string): string => `<td class="tt-num">${s}</td>`;
    const ofTotal = (v: number): string => formatPercent(v, this.totalValue);
    const ofZoom = zoomed ? `of ${esc(zoomed.name)}` : '';
    if (cell.merged > 0) {
      return (
        `<div class="tt-name">${cell.merged.toLocaleString('en-US')} narrow frames</div>` +
        `<div class="tt-sub">each too narrow to draw, merged · under ${esc(f.name)}</div>` +
        '<table>' +
        `<tr>${th('total')}${td(formatValue(cell.value, unit))}</tr>` +
        `<tr>${th('of total')}${td(ofTotal(cell.value))}</tr>` +
        (zoomed ? `<tr>${th(ofZoom)}${td(formatPercent(cell.value, zoomed.value))}</tr>` : '') +
        '</table>'
      );
    }
    const isAncestor = zoomed !== null && f.depth < zoomed.depth;
    const sub = [f.kind === 'root' ? 'all stacks' : f.kind, f.module].filter((s) => s !== '').map(esc);
    if (f.buildId) sub.push(f.buildId === 'several' ? 'several builds' : `build id ${esc(f.buildId)}`);
    let rows =
      `<tr><th></th><th class="tt-num">total</th><th class="tt-num">self</th></tr>` +
      `<tr>${th('value')}${td(formatValue(f.value, unit))}${td(formatValue(f.self, unit))}</tr>` +
      `<tr>${th('of total')}${td(ofTotal(f.value))}${td(ofTotal(f.self))}</tr>`;
    if (zoomed) {
      rows += isAncestor
        ? `<tr>${th(ofZoom)}<td colspan="2" class="tt-num">contains it</td></tr>`
        : `<tr>${th(ofZoom)}${td(formatPercent(f.value, zoomed.value))}${td(formatPercent(f.self, zoomed.value))}</tr>`;
    }
    for (const [k, v] of this.extraRows?.(f) ?? []) rows += `<tr>${th(esc(k))}<td colspan="2" class="tt-num">${esc(v)}</td></tr>`;
    const hints = [f === zoom ? (f.parent ? 'zoomed · click an upper frame or press Esc to zoom out' : '') : 'click to zoom'];
    if (this.action && f.kind !== 'root') hints.push(`shift+click (or ${this.action.key.toUpperCase()}): ${this.action.label}`);
    const hint = hints.filter((h) => h !== '').join(' · ');
    return (
      `<div class="tt-name">${esc(f.name)}</div>` +
      `<div class="tt-sub">${sub.join(' · ')}</div>` +
      `<table>${rows}</table>` +
      (hint ? `<div class="tt-hint">${hint}</div>` : '')
    );
  }
}

/** Fills x, y, w triples `h` high: those at least `minW` wide, each at most `maxW` wide. */
function fillRects(ctx: CanvasRenderingContext2D, rects: readonly number[], h: number, minW: number, maxW: number): void {
  for (let i = 0; i + 2 < rects.length; i += 3) {
    const w = rects[i + 2] ?? 0;
    if (w >= minW) ctx.fillRect(rects[i] ?? 0, rects[i + 1] ?? 0, Math.min(w, maxW), h);
  }
}

function context2d(canvas: HTMLCanvasElement): CanvasRenderingContext2D {
  const ctx = canvas.getContext('2d');
  if (!ctx) throw new Error('this browser cannot draw on a canvas');
  return ctx;
}
