// bimodal node view: what one node is and how its memory system behaves. The NUMA topology and
// the event sources come from the node's facts (/api/v1/nodes), the memory placement of its
// processes from /api/v1/placement, its counters over time from /api/v1/counters. Every control's
// state is in the URL; back and forward restore it.

import './style.css';
import './compare.css';
import './node.css';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import {
  ApiError,
  fetchCounters,
  fetchNodes,
  fetchPlacement,
  moreNodesOption,
  withNode,
  type ApiCounters,
  type ApiEventSource,
  type ApiFacts,
  type ApiMapping,
  type ApiNode,
  type ApiPlacement,
  type ApiProcessPlacement,
} from './api';
import { formatAgo, formatFigure as figure, formatValue } from './format';
import { DEFAULT_RANGE, RANGES, RANGE_LABELS, isRange, rangeOptions, type RangeKey } from './range';
import { renderNav } from './views';
import { byId as $, el } from './dom';
import { failure, isCancelled, Page } from './page';

type Rate = 'second' | 'interval';

/** Everything a shared link restores. */
interface ViewState {
  /** '' until the node list names one. */
  node: string;
  range: RangeKey;
  /** Counters per second (each interval's increase over its length) or per interval. */
  rate: Rate;
  /** The processes whose mappings are shown, by pid. */
  open: number[];
}

function readState(p: URLSearchParams): ViewState {
  const range = p.get('range');
  return {
    node: p.get('node') ?? '',
    range: isRange(range) ? range : DEFAULT_RANGE,
    rate: p.get('rate') === 'interval' ? 'interval' : 'second',
    open: (p.get('open') ?? '')
      .split(',')
      .map(Number)
      .filter((n) => Number.isInteger(n) && n > 0),
  };
}

/** The query of `s`, its lists' commas left readable. */
function writeState(s: ViewState): string {
  const p = new URLSearchParams();
  if (s.node) p.set('node', s.node);
  p.set('range', s.range);
  if (s.rate !== 'second') p.set('rate', s.rate);
  if (s.open.length > 0) p.set('open', s.open.join(','));
  return p.toString().replaceAll('%2C', ',');
}

const ui = {
  node: $('node', HTMLSelectElement),
  nodeMeta: $('node-meta', HTMLSpanElement),
  range: $('range', HTMLSelectElement),
  refresh: $('refresh', HTMLButtonElement),
  message: $('message', HTMLDivElement),
  topologySection: $('topology-section', HTMLElement),
  factsLine: $('facts-line', HTMLParagraphElement),
  topology: $('topology', HTMLDivElement),
  distances: $('distances', HTMLDivElement),
  topologyNote: $('topology-note', HTMLParagraphElement),
  sourcesSection: $('sources-section', HTMLElement),
  sources: $('sources', HTMLTableElement),
  placementSection: $('placement-section', HTMLElement),
  placementStatus: $('placement-status', HTMLParagraphElement),
  findings: $('findings', HTMLDivElement),
  nodeLegend: $('node-legend', HTMLDivElement),
  processes: $('processes', HTMLDivElement),
  countersSection: $('counters-section', HTMLElement),
  rate: $('rate', HTMLSelectElement),
  countersStatus: $('counters-status', HTMLParagraphElement),
  countersNote: $('counters-note', HTMLParagraphElement),
  counters: $('counters', HTMLDivElement),
};

const SVG_NS = 'http://www.w3.org/2000/svg';

const page = new Page({ read: readState, write: writeState, message: ui.message });
let state = page.read();
let nodes: ApiNode[] = [];
/** How many nodes the server knows: more than `nodes` when its list came a page short. */
let nodesTotal = 0;
let placement: ApiPlacement | null = null;
let counters: ApiCounters | null = null;
let charts: { chart: uPlot; box: HTMLElement }[] = [];
let seq = 0;

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function unreachable(err: unknown): boolean {
  return err instanceof ApiError && err.status === 0;
}

const RETRY = 'The page retries when you press Refresh.';

function showSections(show: boolean): void {
  for (const s of [ui.topologySection, ui.sourcesSection, ui.placementSection, ui.countersSection]) s.hidden = !show;
}

/** A section's own state line: loading, empty or failed. */
function setStatus(target: HTMLElement, kind: 'loading' | 'empty' | 'error' | 'info' | 'none', text = ''): void {
  target.className = `status ${kind}`;
  target.textContent = text;
  target.hidden = kind === 'none';
}

function rangeSeconds(): { from: number; to: number } {
  const to = Math.floor(Date.now() / 1000) + 1;
  return { from: to - RANGES[state.range], to };
}

/** CPU ids as compact ranges: [0..15, 32..47] → "0-15,32-47". */
function cpuRanges(cpus: readonly number[]): string {
  const sorted = [...new Set(cpus)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    const start = sorted[i] ?? 0;
    let end = start;
    while (i + 1 < sorted.length && sorted[i + 1] === end + 1) {
      end += 1;
      i += 1;
    }
    i += 1;
    parts.push(end === start ? String(start) : `${start}-${end}`);
  }
  return parts.join(',');
}

/** One colour per NUMA node id, the same in the topology, the legend and the placement bars. */
const NODE_COLOURS = ['#3b7dd8', '#e8833a', '#3fa34d', '#9467bd', '#d6408a', '#17a2b8', '#b8860b', '#6b7280'];
function nodeColour(id: number): string {
  return NODE_COLOURS[id % NODE_COLOURS.length] ?? '#6b7280';
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n.toLocaleString('en-US')} ${n === 1 ? one : many}`;
}

// ---------------------------------------------------------------------------------------------
// Header

function currentNode(): ApiNode | undefined {
  return nodes.find((n) => n.node === state.node);
}

function renderNodeOptions(): void {
  const opts = nodes.map((n) => {
    const o = new Option(`${n.node} · seen ${formatAgo(n.last_seen)}`, n.node);
    o.title = n.last_seen ?? '';
    return o;
  });
  // A node named in a shared link stays selectable even if it has not reported in the last day.
  if (state.node && !nodes.some((n) => n.node === state.node)) {
    opts.push(new Option(`${state.node} · not reporting`, state.node));
  }
  opts.push(...moreNodesOption(nodes.length, nodesTotal));
  ui.node.replaceChildren(...opts);
  ui.node.value = state.node;
  renderNodeMeta();
}

function renderNodeMeta(): void {
  const n = currentNode();
  ui.nodeMeta.replaceChildren();
  if (!state.node) return;
  if (!n) {
    ui.nodeMeta.append(el('span', 'dot stale'), 'not seen in the last day');
    return;
  }
  const fresh = n.last_seen !== undefined && Date.now() - Date.parse(n.last_seen) < 5 * 60_000;
  const seen = el('span', 'seen');
  seen.append(el('span', fresh ? 'dot fresh' : 'dot stale'), `seen ${formatAgo(n.last_seen)}`);
  ui.nodeMeta.append(seen);
  if (n.agent_version) ui.nodeMeta.append(el('span', 'chip', `agent ${n.agent_version}`));
  ui.nodeMeta.title = n.last_seen ? `last seen ${new Date(n.last_seen).toString()}` : '';
}

function applyStateToControls(): void {
  ui.range.value = state.range;
  ui.rate.value = state.rate;
  if (nodes.length > 0 || state.node) renderNodeOptions();
  renderNav('node', { node: state.node, range: state.range });
}

// ---------------------------------------------------------------------------------------------
// Loading

/** Reloads the node list, then the chosen node. */
async function loadAll(): Promise<void> {
  const mine = ++seq;
  const signal = page.request();
  page.show('info', 'Loading…', 'the node list');
  try {
    const list = await withNode(fetchNodes(signal), state.node, signal);
    if (mine !== seq) return;
    nodes = [...list.nodes].sort((a, b) => a.node.localeCompare(b.node));
    nodesTotal = list.total;
  } catch (err) {
    if (mine !== seq || isCancelled(err)) return;
    showSections(false);
    page.failed(err, 'Could not load the node list.', RETRY);
    return;
  }
  if (!state.node) {
    const first = nodes[0];
    if (!first) {
      showSections(false);
      renderNodeOptions();
      page.show(
        'info',
        'No nodes have reported yet.',
        'Start the bimodal agent on a host and point it at this server; nodes show up here after their first upload.',
      );
      return;
    }
    state.node = first.node;
    page.write(state, false);
  }
  applyStateToControls();
  await loadNode(mine, signal);
}

/** Reloads the chosen node's facts view, placement and counters (after a control changed). */
async function reloadNode(): Promise<void> {
  const mine = ++seq;
  await loadNode(mine, page.request());
}

async function loadNode(mine: number, signal: AbortSignal): Promise<void> {
  page.hideMessage();
  showSections(true);
  renderFacts(currentNode());
  placement = null;
  counters = null;
  const where = `${state.node}, ${RANGE_LABELS[state.range].toLowerCase()}`;
  setStatus(ui.placementStatus, 'loading', `Reading the memory placement of ${where}…`);
  setStatus(ui.countersStatus, 'loading', `Reading the counters of ${where}…`);
  ui.findings.replaceChildren();
  ui.nodeLegend.replaceChildren();
  ui.processes.replaceChildren();
  ui.countersNote.textContent = '';
  destroyCharts();
  const { from, to } = rangeSeconds();
  // Each section is drawn as soon as its answer is in (placement can be megabytes).
  const settle = <T>(promise: Promise<T>, done: (value: T) => void, what: string, target: HTMLElement) =>
    promise.then(
      (value) => {
        if (mine === seq) done(value);
      },
      (err: unknown) => {
        if (mine !== seq || isCancelled(err)) return;
        if (unreachable(err)) {
          showSections(false);
          page.failed(err, '', RETRY);
          return;
        }
        setStatus(target, 'error', `The ${what} could not be read: ${failure(err, '', RETRY).detail}`);
      },
    );
  await Promise.all([
    settle(
      fetchPlacement(state.node, from, to, signal),
      (value) => {
        placement = value;
        renderPlacement();
      },
      'placement',
      ui.placementStatus,
    ),
    settle(
      fetchCounters(state.node, from, to, [], signal),
      (value) => {
        counters = value;
        renderCounters();
      },
      'counters',
      ui.countersStatus,
    ),
  ]);
}

// ---------------------------------------------------------------------------------------------
// Topology, facts and event sources

function renderFacts(n: ApiNode | undefined): void {
  const facts = n?.facts ?? null;
  ui.topology.replaceChildren();
  ui.distances.replaceChildren();
  ui.factsLine.replaceChildren();
  ui.topologyNote.textContent = '';
  ui.sources.replaceChildren();
  if (!facts) {
    const why = n
      ? 'Its agent sent no facts (an agent older than the facts, or an imported batch).'
      : 'It has not reported in the last day.';
    ui.factsLine.append(el('span', 'status empty', `No facts for ${state.node}. ${why}`));
    ui.sources.append(el('caption', 'status empty', 'No event sources known for this node.'));
    return;
  }
  renderFactsLine(facts);
  drawTopology(facts);
  renderDistances(facts);
  renderSources(facts);
}

function renderFactsLine(f: ApiFacts): void {
  const items: [string, string, string?][] = [];
  items.push(['kernel', f.kernel_release || 'unknown']);
  const cpu = f.cpu.model_name || f.cpu.vendor || 'unknown CPU';
  items.push(['CPU', cpu, `${f.cpu.vendor}, family ${f.cpu.family}, model ${f.cpu.model}`]);
  items.push([
    'layout',
    `${plural(f.sockets, 'socket')} · ${plural(f.cores, 'core')} · ${plural(f.threads_per_core, 'thread')} per core · ${plural(f.online_cpus, 'online CPU')}`,
  ]);
  items.push(['THP', f.transparent_hugepages || 'unknown']);
  items.push(['NUMA balancing', f.numa_balancing || 'not in this kernel']);
  items.push(['PMU', f.hardware_pmu || 'no hardware PMU']);
  for (const [k, v, title] of items) {
    const item = el('span', k === 'PMU' && !f.hardware_pmu ? 'fact warn' : 'fact');
    item.append(el('span', 'fact-key', k), el('span', 'fact-value', v));
    if (title) item.title = title;
    ui.factsLine.append(item);
  }
}

interface BoxLine {
  cls: string;
  text: string;
}

/** One box per NUMA node: CPUs as ranges, memory, its L3 domains and NICs. */
function drawTopology(f: ApiFacts): void {
  const numa = [...f.numa_nodes].sort((a, b) => a.id - b.id);
  if (numa.length === 0) {
    ui.topologyNote.textContent = `The kernel reports no NUMA node: ${plural(f.online_cpus, 'online CPU')}, one memory.`;
    return;
  }
  // The boxes sit beside the distance table when there is room for both, else above it.
  const body = ui.topology.parentElement?.clientWidth ?? 0;
  const width = Math.max(240, body > 760 ? body - 320 : body || 640);
  const boxW = 230;
  const gap = 14;
  const cols = Math.max(1, Math.min(numa.length, Math.floor((width + gap) / (boxW + gap))));
  const nicsOn = (id: number) => f.nics.filter((x) => x.numa_node === id).map((x) => x.name);
  const l3Of = (cpus: number[]) => {
    const mine = new Set(cpus);
    return f.l3_domains.filter((d) => d.some((c) => mine.has(c)));
  };
  const wrap = (text: string, max = 30): string[] => {
    const out: string[] = [];
    let line = '';
    for (const part of text.split(',')) {
      const next = line ? `${line},${part}` : part;
      if (next.length > max && line) {
        out.push(`${line},`);
        line = part;
      } else {
        line = next;
      }
    }
    if (line) out.push(line);
    return out;
  };
  const boxes = numa.map((n) => {
    const lines: BoxLine[] = [];
    const cpus = cpuRanges(n.cpus);
    wrap(cpus ? `CPUs ${cpus}` : 'no CPUs (memory only)').forEach((t) => lines.push({ cls: 'cpus', text: t }));
    lines.push({ cls: 'detail', text: `${plural(n.cpus.length, 'CPU')} · ${n.memory_bytes > 0 ? formatValue(n.memory_bytes, 'bytes') : 'memory unknown'}` });
    const l3 = l3Of(n.cpus);
    const nics = nicsOn(n.id);
    return { n, lines, l3, nics };
  });
  const lineH = 16;
  const heightOf = (b: (typeof boxes)[number]) =>
    30 + b.lines.length * lineH + (b.l3.length > 0 ? 8 + b.l3.length * 22 : 0) + (b.nics.length > 0 ? 30 : 0) + 8;
  const rows: (typeof boxes)[] = [];
  for (let i = 0; i < boxes.length; i += cols) rows.push(boxes.slice(i, i + cols));
  const rowH = rows.map((r) => Math.max(...r.map(heightOf)));
  const totalW = cols * boxW + (cols - 1) * gap + 2;
  const totalH = rowH.reduce((a, b) => a + b + gap, 0) - gap + 2;
  const root = svg('svg', { viewBox: `0 0 ${totalW} ${totalH}`, width: totalW, height: totalH, role: 'img' });
  root.classList.add('topology-svg');
  root.setAttribute('aria-label', plural(numa.length, 'NUMA node'));
  let y = 1;
  rows.forEach((row, r) => {
    row.forEach((b, c) => {
      const x = 1 + c * (boxW + gap);
      const h = rowH[r] ?? heightOf(b);
      const g = svg('g', { transform: `translate(${x},${y})`, 'data-node': b.n.id });
      g.classList.add('numa-node');
      g.append(svg('rect', { class: 'box', width: boxW, height: h, rx: 6 }));
      g.append(svg('rect', { width: boxW, height: 6, rx: 3, fill: nodeColour(b.n.id) }));
      const title = svg('text', { x: 10, y: 24, class: 'title' });
      title.textContent = `NUMA node ${b.n.id}`;
      g.append(title);
      let ly = 24;
      for (const line of b.lines) {
        ly += lineH;
        const t = svg('text', { x: 10, y: ly, class: line.cls });
        t.textContent = line.text;
        g.append(t);
      }
      if (b.l3.length > 0) {
        ly += 8;
        for (const d of b.l3) {
          const inner = svg('g', { transform: `translate(10,${ly})` });
          inner.classList.add('l3');
          inner.append(svg('rect', { width: boxW - 20, height: 18, rx: 3 }));
          const t = svg('text', { x: 6, y: 13 });
          const shown = cpuRanges(d);
          t.textContent = `L3 · CPUs ${shown.length > 24 ? `${shown.slice(0, 23)}…` : shown}`;
          const tip = svg('title');
          tip.textContent = `L3 cache shared by CPUs ${shown}`;
          inner.append(t, tip);
          g.append(inner);
          ly += 22;
        }
      }
      if (b.nics.length > 0) {
        ly += 8;
        let nx = 10;
        for (const name of b.nics) {
          const w = Math.min(boxW - 20, 16 + name.length * 7);
          if (nx + w > boxW - 10) break;
          const nic = svg('g', { transform: `translate(${nx},${ly})` });
          nic.classList.add('nic');
          nic.append(svg('rect', { width: w, height: 18, rx: 9 }));
          const t = svg('text', { x: w / 2, y: 13, 'text-anchor': 'middle' });
          t.textContent = name;
          nic.append(t);
          g.append(nic);
          nx += w + 6;
        }
      }
      const tip = svg('title');
      tip.textContent = `NUMA node ${b.n.id}: CPUs ${cpuRanges(b.n.cpus) || 'none'}; ${formatValue(b.n.memory_bytes, 'bytes')}${
        b.nics.length > 0 ? `; NICs ${b.nics.join(', ')}` : ''
      }`;
      g.append(tip);
      root.append(g);
    });
    y += (rowH[r] ?? 0) + gap;
  });
  ui.topology.replaceChildren(root);
  const notes: string[] = [];
  const attached = new Set(numa.map((n) => n.id));
  const loose = f.nics.filter((x) => !attached.has(x.numa_node)).map((x) => x.name);
  if (loose.length > 0) notes.push(`NICs without NUMA affinity: ${loose.join(', ')}`);
  if (f.nics.length === 0) notes.push('No NIC reported.');
  if (f.l3_domains.length === 0) notes.push('No L3 domains reported.');
  else notes.push(plural(f.l3_domains.length, 'L3 domain'));
  ui.topologyNote.textContent = notes.join(' · ');
}

/** The distance matrix; remote distances shaded by how far they are. */
function renderDistances(f: ApiFacts): void {
  const numa = [...f.numa_nodes].sort((a, b) => a.id - b.id);
  if (numa.length === 0) return;
  const t = el('table', 'distance-table');
  t.append(el('caption', undefined, 'Distances'));
  const head = el('tr');
  head.append(el('th', undefined, 'from \\ to'));
  for (const n of numa) head.append(el('th', undefined, String(n.id)));
  t.createTHead().append(head);
  const all = numa.flatMap((n) => n.distances);
  const max = Math.max(...all, 1);
  const body = t.createTBody();
  for (const [i, n] of numa.entries()) {
    const tr = el('tr');
    tr.append(el('th', undefined, String(n.id)));
    const local = n.distances[i] ?? 10;
    for (const [j] of numa.entries()) {
      const d = n.distances[j];
      const td = el('td', 'num', d === undefined ? '—' : String(d));
      if (d !== undefined && i !== j && d > local) {
        td.classList.add('remote');
        const strength = max > local ? (d - local) / (max - local) : 1;
        td.style.background = `rgba(216, 69, 59, ${(0.12 + 0.38 * strength).toFixed(2)})`;
        td.title = `node ${n.id} → node ${numa[j]?.id ?? j}: ${(d / local).toFixed(1)}× the local distance`;
      } else if (i === j) {
        td.classList.add('local');
        td.title = 'local';
      }
      tr.append(td);
    }
    body.append(tr);
  }
  const note = el(
    'p',
    'note small',
    numa.length === 1 ? 'One NUMA node: every access is local.' : 'Shaded: remote, darker is farther (the kernel\'s SLIT; 10 is local).',
  );
  ui.distances.replaceChildren(t, note);
}

const EVENT_ORDER = ['cpu', 'page_fault', 'cache_miss', 'remote_access', 'numa_hint_fault', 'page_migration'];

function renderSources(f: ApiFacts): void {
  const events = Object.keys(f.event_sources).sort((a, b) => {
    const ia = EVENT_ORDER.indexOf(a);
    const ib = EVENT_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  const head = el('tr');
  for (const h of ['event', 'chosen source', 'attach · encoding', 'data address', 'stacks', 'rejected candidates']) {
    head.append(el('th', undefined, h));
  }
  const rows = events.map((event) => {
    const s: ApiEventSource | undefined = f.event_sources[event];
    const tr = el('tr', s?.source ? 'chosen' : 'none');
    tr.dataset.event = event;
    tr.append(el('td', 'mono', event));
    tr.append(s?.source ? el('td', 'source', s.source) : el('td', 'source missing', 'none works here'));
    tr.append(el('td', 'mono small', s?.source ? [s.attach, s.encoding].filter((x) => x !== '').join(' · ') : '—'));
    const data = el('td', 'small', s?.source ? (s.data_address ? 'yes' : 'no') : '—');
    data.dataset.label = 'data address';
    tr.append(data);
    tr.append(stacksCell(s));
    const rejected = el('td', 'rejected');
    const list = s?.rejected ?? [];
    if (list.length === 0) {
      rejected.append(el('span', 'muted small', s?.source ? 'none: the best candidate works' : 'no candidate'));
    } else {
      const ul = el('ul');
      for (const r of list) {
        const li = el('li');
        const at = r.indexOf(': ');
        if (at > 0) li.append(el('span', 'candidate', r.slice(0, at)), `: ${r.slice(at + 2)}`);
        else li.append(r);
        ul.append(li);
      }
      rejected.append(ul);
    }
    tr.append(rejected);
    return tr;
  });
  ui.sources.replaceChildren();
  ui.sources.createTHead().append(head);
  ui.sources.createTBody().append(...rows);
  if (rows.length === 0) ui.sources.append(el('caption', 'status empty', 'The agent reported no event sources.'));
}

/** How a source's stacks are unwound, in words; why, when it is less than asked for. */
const UNWINDING: Record<string, string> = {
  kernel_tables: 'unwound in the kernel from .eh_frame tables',
  stack_copies: 'unwound by the agent from stack copies',
  frame_pointers: 'frame pointers only: callers of code built without them are lost',
};

function stacksCell(s: ApiEventSource | undefined): HTMLElement {
  const td = el('td', 'stacks small');
  td.dataset.label = 'stacks';
  if (!s?.source || !s.unwinding) {
    td.append(el('span', 'muted', '—'));
    return td;
  }
  td.dataset.unwinding = s.unwinding;
  td.append(UNWINDING[s.unwinding] ?? s.unwinding);
  if (s.unwinding_reduced) {
    td.classList.add('reduced');
    td.append(el('div', 'reduced-why', `Less than asked for: ${s.unwinding_reduced}. This node's stacks of the event are left out of comparisons with nodes that unwind them whole.`));
  }
  return td;
}

// ---------------------------------------------------------------------------------------------
// Memory placement

function pagesOf(m: ApiMapping): number {
  return Object.values(m.pages_per_node).reduce((a, b) => a + b, 0);
}

function threadNodes(p: ApiProcessPlacement): Set<number> {
  return new Set(Object.keys(p.threads_per_node).map(Number));
}

/** Pages per NUMA node as a stacked bar (shares of the total); striped where no thread ran. */
function pagesBar(pages: Record<string, number>, pageSize: number, threads: Set<number>): HTMLElement {
  const bar = el('div', 'pages-bar');
  const entries = Object.entries(pages)
    .map(([k, v]) => [Number(k), v] as const)
    .filter(([, v]) => v > 0)
    .sort((a, b) => a[0] - b[0]);
  const total = entries.reduce((a, [, v]) => a + v, 0);
  if (total === 0) {
    bar.classList.add('empty');
    bar.title = 'no resident pages';
    return bar;
  }
  const tips: string[] = [];
  for (const [node, v] of entries) {
    const seg = el('span', 'seg');
    seg.style.flexGrow = String(v);
    seg.style.backgroundColor = nodeColour(node);
    const far = threads.size > 0 && !threads.has(node);
    if (far) seg.classList.add('far');
    const share = `${((100 * v) / total).toFixed(v === total ? 0 : 1)}%`;
    const line = `node ${node}: ${v.toLocaleString('en-US')} pages (${formatValue(v * pageSize, 'bytes')}, ${share})${far ? ', no thread ran there' : ''}`;
    seg.title = line;
    tips.push(line);
    bar.append(seg);
  }
  bar.title = tips.join('\n');
  bar.setAttribute('aria-label', tips.join('; '));
  return bar;
}

function renderPlacement(): void {
  const p = placement;
  ui.findings.replaceChildren();
  ui.nodeLegend.replaceChildren();
  ui.processes.replaceChildren();
  if (!p) return;
  if (p.processes.length === 0) {
    setStatus(
      ui.placementStatus,
      'empty',
      `No placement read in this range (${RANGE_LABELS[state.range].toLowerCase()}). The agent reads the numa_maps of its busiest processes every --placement-every intervals.`,
    );
    return;
  }
  const findingsOf = new Map<number, number>();
  for (const f of p.findings) findingsOf.set(f.pid, (findingsOf.get(f.pid) ?? 0) + 1);
  const resident = (x: ApiProcessPlacement) => x.mappings.reduce((a, m) => a + pagesOf(m) * m.page_size, 0);
  const procs = [...p.processes].sort(
    (a, b) => (findingsOf.get(b.pid) ?? 0) - (findingsOf.get(a.pid) ?? 0) || resident(b) - resident(a) || a.pid - b.pid,
  );
  const newest = Math.max(...procs.map((x) => x.time));
  setStatus(
    ui.placementStatus,
    'info',
    `${plural(procs.length, 'process', 'processes')}, the newest snapshot of each (latest ${new Date(newest * 1000).toLocaleTimeString()}). ${
    p.findings.length === 0
      ? 'No finding: no data, bss, heap or anonymous mapping is held mostly on a node none of its threads ran on.'
      : ''
  }`,
  );

  if (p.findings.length > 0) {
    const title = el('div', 'findings-title', `${plural(p.findings.length, 'finding')}: memory held on a NUMA node none of its threads ran on`);
    ui.findings.append(title);
    for (const f of p.findings) {
      const row = el('div', 'finding');
      const text = el('div', 'finding-text');
      text.append(
        el('strong', undefined, `${f.comm} (${f.pid})`),
        ` ${f.kind} ${f.path ? f.path : '[anonymous]'}: ${f.remote_pages.toLocaleString('en-US')} of ${f.total_pages.toLocaleString('en-US')} pages on node ${f.node}; its threads ran on node ${f.thread_nodes.join(', ')}`,
      );
      const show = el('button', 'link small', 'show the process');
      show.type = 'button';
      show.addEventListener('click', () => {
        openProcess(f.pid, true);
      });
      row.append(text, show);
      ui.findings.append(row);
    }
  }

  const ids = new Set<number>();
  for (const x of procs) {
    for (const k of Object.keys(x.threads_per_node)) ids.add(Number(k));
    for (const m of x.mappings) for (const k of Object.keys(m.pages_per_node)) ids.add(Number(k));
  }
  for (const id of [...ids].sort((a, b) => a - b)) {
    const sw = el('span', 'swatch');
    sw.style.backgroundColor = nodeColour(id);
    ui.nodeLegend.append(sw, `node ${id}`);
  }
  const far = el('span', 'swatch far');
  far.style.backgroundColor = '#8b93a5';
  ui.nodeLegend.append(far, 'on a node none of the process\'s threads ran on');

  // The processes with findings, the open ones and the largest first; the rest behind a button.
  const first = 10;
  const cards = procs.map((x, i) => {
    const card = processCard(x, p, findingsOf.get(x.pid) ?? 0);
    card.hidden = i >= first && !card.open && (findingsOf.get(x.pid) ?? 0) === 0;
    return card;
  });
  ui.processes.append(...cards);
  const hidden = cards.filter((c) => c.hidden).length;
  if (hidden > 0) {
    const more = el('button', 'btn btn-light', `Show ${plural(hidden, 'more process', 'more processes')}`);
    more.type = 'button';
    more.addEventListener('click', () => {
      for (const c of cards) c.hidden = false;
      more.remove();
    });
    ui.processes.append(more);
  }
}

function processCard(x: ApiProcessPlacement, p: ApiPlacement, findings: number): HTMLDetailsElement {
  const threads = threadNodes(x);
  const card = el('details', findings > 0 ? 'process has-finding' : 'process');
  card.dataset.pid = String(x.pid);
  card.open = state.open.includes(x.pid);
  const summary = el('summary');
  const name = el('div', 'proc-name');
  name.append(el('strong', undefined, x.comm || '?'), el('span', 'muted', ` pid ${x.pid}`));
  if (findings > 0) name.append(el('span', 'badge', plural(findings, 'finding')));
  if (x.executable) name.append(el('div', 'muted small mono exe', x.executable));
  const threadChips = el('div', 'threads');
  const tn = Object.entries(x.threads_per_node).sort((a, b) => Number(a[0]) - Number(b[0]));
  if (tn.length === 0) threadChips.append(el('span', 'muted small', 'threads: node unknown'));
  for (const [node, count] of tn) {
    const chip = el('span', 'thread-chip', `node ${node}: ${plural(count, 'thread')}`);
    chip.style.borderColor = nodeColour(Number(node));
    threadChips.append(chip);
  }
  const total: Record<string, number> = {};
  let bytes = 0;
  let pageSize = 4096;
  for (const m of x.mappings) {
    pageSize = m.page_size || pageSize;
    for (const [k, v] of Object.entries(m.pages_per_node)) total[k] = (total[k] ?? 0) + v;
    bytes += pagesOf(m) * m.page_size;
  }
  const size = el('div', 'proc-size');
  size.append(
    el('span', 'num', formatValue(bytes, 'bytes')),
    el('span', 'muted small', ` resident in ${plural(x.mappings.length, 'mapping')} · read ${new Date(x.time * 1000).toLocaleTimeString()}`),
  );
  summary.append(name, threadChips, size, pagesBar(total, pageSize, threads));
  card.append(summary);
  card.addEventListener('toggle', () => {
    const open = new Set(state.open);
    if (card.open) open.add(x.pid);
    else open.delete(x.pid);
    if (card.open && !card.querySelector('.mappings')) card.append(mappingsTable(x, p));
    const next = [...open].sort((a, b) => a - b);
    if (next.join(',') === state.open.join(',')) return;
    state.open = next;
    page.write(state, false);
  });
  if (card.open) card.append(mappingsTable(x, p));
  return card;
}

function mappingsTable(x: ApiProcessPlacement, p: ApiPlacement): HTMLElement {
  const threads = threadNodes(x);
  const flagged = new Set(p.findings.filter((f) => f.pid === x.pid).map((f) => `${f.kind}\u0000${f.path}`));
  const mappings = [...x.mappings].sort((a, b) => pagesOf(b) * b.page_size - pagesOf(a) * a.page_size);
  const resident = mappings.filter((m) => pagesOf(m) > 0);
  const box = el('div', 'mappings');
  const wrap = el('div', 'table-wrap');
  const t = el('table', 'node-table mapping-table');
  const head = el('tr');
  for (const h of ['kind', 'path', 'perm', 'size', 'resident', 'pages per NUMA node']) head.append(el('th', undefined, h));
  t.createTHead().append(head);
  const rows = resident.map((m) => {
    const tr = el('tr', flagged.has(`${m.kind}\u0000${m.path}`) ? 'finding-row' : undefined);
    tr.append(el('td', 'mono', m.kind));
    const path = el('td', 'mono path', m.path || '[anonymous]');
    path.title = `${m.path || '[anonymous]'}\n${m.start.toString(16)}-${m.end.toString(16)}`;
    tr.append(path);
    tr.append(el('td', 'mono small', m.permissions));
    tr.append(el('td', 'num', formatValue(Math.max(0, m.end - m.start), 'bytes')));
    tr.append(el('td', 'num', formatValue(pagesOf(m) * m.page_size, 'bytes')));
    const bar = el('td', 'bar-cell');
    bar.append(pagesBar(m.pages_per_node, m.page_size, threads));
    tr.append(bar);
    return tr;
  });
  t.createTBody().append(...rows);
  wrap.append(t);
  box.append(wrap);
  const first = 12;
  if (rows.length > first) {
    for (const r of rows.slice(first)) r.hidden = true;
    const more = el('button', 'btn btn-light', `Show all ${rows.length} mappings`);
    more.type = 'button';
    more.addEventListener('click', () => {
      for (const r of rows) r.hidden = false;
      more.remove();
    });
    box.append(more);
  }
  const idle = mappings.length - resident.length;
  if (idle > 0) box.append(el('p', 'note small', `${plural(idle, 'mapping')} with no resident page not listed.`));
  if (resident.length === 0) box.append(el('p', 'note', 'No mapping of this process had resident pages.'));
  return box;
}

function openProcess(pid: number, scroll: boolean): void {
  const card = ui.processes.querySelector<HTMLDetailsElement>(`details[data-pid="${pid}"]`);
  if (!card) return;
  card.hidden = false;
  card.open = true;
  if (scroll) card.scrollIntoView({ behavior: 'smooth', block: 'start' });
}

// ---------------------------------------------------------------------------------------------
// Counters

/** Counters the server writes for bookkeeping: the interval lengths the rates divide by. */
const INTERVAL_COUNTERS = new Set(['reported_ms', 'interval_ns']);

const COUNTER_GROUPS: { title: string; match: (name: string) => boolean; order?: string[] }[] = [
  {
    title: 'NUMA and memory',
    match: (n) => n.startsWith('numa_') || n.startsWith('pg') || n.endsWith('_node'),
    order: [
      'numa_hint_faults',
      'numa_hint_faults_local',
      'numa_pages_migrated',
      'pgmigrate_success',
      'pgmigrate_fail',
      'numa_pte_updates',
      'pgfault',
      'pgmajfault',
      'numa_hit',
      'numa_miss',
      'numa_foreign',
      'numa_local',
      'numa_other',
      'numa_interleave',
    ],
  },
  {
    title: 'CPU and scheduling',
    match: (n) =>
      n.startsWith('cpu_') || n.endsWith('_ns') || ['context_switches', 'forks', 'cycles', 'instructions', 'work'].includes(n),
    order: ['cpu_busy_ns', 'cpu_total_ns', 'process_cpu_ns', 'context_switches', 'cpu_migrations', 'forks', 'cycles', 'instructions', 'work'],
  },
  { title: 'Samples taken by the agent', match: (n) => n.startsWith('samples_') },
  { title: 'Other counters', match: () => true },
];

/** How a counter's values read: CPU time counters in CPU-seconds, the rest as counts. */
function counterUnit(name: string): { scale: number; perSecond: string; perInterval: (v: number) => string } {
  if (name.endsWith('_ns')) {
    return { scale: 1e-9, perSecond: 'CPU-s/s', perInterval: (v) => formatValue(v, 'nanoseconds') };
  }
  return { scale: 1, perSecond: '/s', perInterval: (v) => figure(v) };
}

interface Series {
  name: string;
  /** Aligned with the shared time axis; null where the node did not report (a gap). */
  values: (number | null)[];
  total: number;
}

/**
 * The counters on one time axis: every interval the node reported (the server's `reported_ms`
 * rows, or any counter's rows), a null inserted where reports stop for long, each interval's
 * increase (or the increase divided by the interval's seconds). The store keeps no zero rows once
 * merged, so an interval the node reported without a row of a counter it has is 0.
 */
function alignCounters(c: ApiCounters, rate: Rate): { times: number[]; series: Series[]; interval: number; measured: string } {
  const parse = (iso: string) => Math.round(Date.parse(iso) / 1000);
  const byTime = (name: string) => new Map((c.counters[name] ?? []).map((p) => [parse(p.time), p.value]));
  const reported = byTime('reported_ms');
  const intervalNs = byTime('interval_ns');
  const timeSet = new Set<number>(reported.keys());
  if (timeSet.size === 0) for (const pts of Object.values(c.counters)) for (const p of pts) timeSet.add(parse(p.time));
  const sorted = [...timeSet].sort((a, b) => a - b);
  const gaps = sorted.slice(1).map((t, i) => t - (sorted[i] ?? t));
  const median = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)] ?? 10;
  const seconds = (t: number) => {
    const ms = reported.get(t);
    if (ms !== undefined && ms > 0) return ms / 1000;
    const ns = intervalNs.get(t);
    if (ns !== undefined && ns > 0) return ns / 1e9;
    return median;
  };
  const measured = reported.size > 0 ? 'reported_ms' : intervalNs.size > 0 ? 'interval_ns' : 'the spacing of the rows';
  // A break in the line where the node did not report for more than 2.5 intervals.
  const times: number[] = [];
  const real: boolean[] = [];
  for (const [i, t] of sorted.entries()) {
    const prev = sorted[i - 1];
    if (prev !== undefined && t - prev > 2.5 * Math.max(median, 1)) {
      times.push(Math.round((prev + t) / 2));
      real.push(false);
    }
    times.push(t);
    real.push(true);
  }
  const series = Object.keys(c.counters)
    .filter((name) => !INTERVAL_COUNTERS.has(name))
    .map((name) => {
      const points = byTime(name);
      const unit = counterUnit(name);
      let total = 0;
      const values = times.map((t, i) => {
        if (!real[i]) return null;
        const v = points.get(t) ?? 0;
        total += v;
        return rate === 'second' ? (v / seconds(t)) * unit.scale : v;
      });
      return { name, values, total };
    });
  return { times, series, interval: median, measured };
}

function destroyCharts(): void {
  for (const c of charts) c.chart.destroy();
  charts = [];
  ui.counters.replaceChildren();
}

function renderCounters(): void {
  destroyCharts();
  const c = counters;
  if (!c) return;
  const names = Object.keys(c.counters).filter((n) => !INTERVAL_COUNTERS.has(n) && (c.counters[n]?.length ?? 0) > 0);
  if (names.length === 0) {
    setStatus(
      ui.countersStatus,
      'empty',
      Object.keys(c.counters).length === 0
        ? `This node has no counters in this range (${RANGE_LABELS[state.range].toLowerCase()}).`
        : 'This node has no counters in this range, only the lengths of its intervals.',
    );
    ui.countersNote.textContent = '';
    return;
  }
  setStatus(ui.countersStatus, 'none');
  const { times, series, interval, measured } = alignCounters(c, state.rate);
  const intervals = times.length;
  ui.countersNote.textContent =
    state.rate === 'second'
      ? `Per second: each interval's increase divided by the interval's length (from ${measured}; about ${figure(interval)} s each), drawn at the interval's start. CPU time counters in CPU-seconds per second. ${plural(intervals, 'interval')}; an interval without a row of a counter counts as 0.`
      : `Per interval: each agent interval's increase (about ${figure(interval)} s each, from ${measured}), drawn at the interval's start. ${plural(intervals, 'interval')}; an interval without a row of a counter counts as 0.`;
  // Counters that stayed at zero are named, not drawn (unless every counter did).
  const chartZeros = series.every((s) => s.total === 0);
  const placed = new Set<string>();
  for (const group of COUNTER_GROUPS) {
    const mine = series.filter((s) => !placed.has(s.name) && group.match(s.name));
    if (mine.length === 0) continue;
    const order = group.order ?? [];
    const rank = (n: string) => (order.includes(n) ? order.indexOf(n) : order.length);
    mine.sort((a, b) => rank(a.name) - rank(b.name) || a.name.localeCompare(b.name));
    for (const s of mine) placed.add(s.name);
    const section = el('div', 'counter-group');
    section.append(el('h3', undefined, group.title));
    const drawn = mine.filter((s) => chartZeros || s.total > 0);
    const zeros = mine.filter((s) => !chartZeros && s.total === 0);
    if (drawn.length > 0) {
      const grid = el('div', 'counter-grid');
      grid.append(...drawn.map((s) => counterCard(times, s)));
      section.append(grid);
    }
    if (zeros.length > 0) {
      const line = el('p', 'zero-counters small');
      line.append(el('span', 'muted', 'Zero throughout the range: '));
      zeros.forEach((s, i) => {
        if (i > 0) line.append(', ');
        line.append(el('span', 'mono', s.name));
      });
      section.append(line);
    }
    ui.counters.append(section);
  }
}

function counterCard(times: number[], s: Series): HTMLElement {
  const unit = counterUnit(s.name);
  const perSecond = state.rate === 'second';
  const fmt = (v: number | null | undefined) => {
    if (v === null || v === undefined) return '—';
    return perSecond ? `${figure(v)} ${unit.perSecond}` : unit.perInterval(v);
  };
  const card = el('div', 'counter-card');
  card.dataset.counter = s.name;
  const head = el('div', 'counter-head');
  const numbers = s.values.filter((v): v is number => v !== null);
  const mean = numbers.length > 0 ? numbers.reduce((a, b) => a + b, 0) / numbers.length : 0;
  const max = Math.max(0, ...numbers);
  const summary = s.total === 0 ? 'zero throughout' : `mean ${fmt(mean)} · max ${fmt(max)}`;
  const figures = el('span', 'muted small counter-figures', summary);
  head.append(el('span', 'counter-name mono', s.name), figures);
  const plot = el('div', 'counter-plot');
  card.append(head, plot);
  // The card is laid out once it is in the document: size the chart then.
  requestAnimationFrame(() => {
    if (!card.isConnected) return;
    const chart = new uPlot(
      {
        width: chartWidth(plot),
        height: 130,
        legend: { show: false },
        cursor: { drag: { x: false, y: false }, sync: { key: 'counters' } },
        scales: { x: { time: true }, y: { range: (_u, lo, hi) => [Math.min(0, lo), hi > 0 ? hi * 1.08 : 1] } },
        axes: [
          { size: 24, font: '11px system-ui', ticks: { size: 4 }, values: '{HH}:{mm}' },
          { size: 58, font: '11px system-ui', values: (_u, splits) => splits.map((v) => figure(v)) },
        ],
        series: [
          {},
          {
            label: perSecond ? `${s.name} ${unit.perSecond}` : `${s.name} per interval`,
            stroke: '#3b7dd8',
            fill: 'rgba(59,125,216,0.10)',
            width: 1.5,
            points: { show: numbers.length <= 2 },
            value: (_u, v) => fmt(v),
          },
        ],
        hooks: {
          // Hovering any chart shows every chart's value at that time (the cursors are synced).
          setCursor: [
            (u) => {
              const i = u.cursor.idx;
              const t = i === null || i === undefined ? undefined : times[i];
              figures.textContent = t === undefined ? summary : `${new Date(t * 1000).toLocaleTimeString()}: ${fmt(s.values[i ?? 0])}`;
              figures.classList.toggle('hovered', t !== undefined);
            },
          ],
        },
      },
      [times, s.values],
      plot,
    );
    charts.push({ chart, box: plot });
  });
  return card;
}

function chartWidth(box: HTMLElement): number {
  return Math.max(200, Math.floor(box.clientWidth || 320));
}

// ---------------------------------------------------------------------------------------------
// Wiring

function init(): void {
  ui.range.replaceChildren(...rangeOptions());
  applyStateToControls();
  ui.node.addEventListener('change', () => {
    state.node = ui.node.value;
    state.open = [];
    page.write(state, true);
    applyStateToControls();
    void reloadNode();
  });
  ui.range.addEventListener('change', () => {
    state.range = isRange(ui.range.value) ? ui.range.value : DEFAULT_RANGE;
    page.write(state, true);
    applyStateToControls();
    void reloadNode();
  });
  ui.rate.addEventListener('change', () => {
    state.rate = ui.rate.value === 'interval' ? 'interval' : 'second';
    page.write(state, true);
    renderCounters();
  });
  ui.refresh.addEventListener('click', () => {
    void loadAll();
  });
  page.onNavigate((restored) => {
    const before = state;
    state = restored;
    applyStateToControls();
    if (!state.node) {
      void loadAll();
    } else if (before.node !== state.node || before.range !== state.range) {
      void reloadNode();
    } else {
      if (before.rate !== state.rate) renderCounters();
      if (before.open.join(',') !== state.open.join(',')) {
        for (const card of ui.processes.querySelectorAll<HTMLDetailsElement>('details.process')) {
          card.open = state.open.includes(Number(card.dataset.pid));
          if (card.open) card.hidden = false;
        }
      }
    }
  });
  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(() => {
      const n = currentNode();
      if (n?.facts) {
        drawTopology(n.facts);
      }
      for (const c of charts) c.chart.setSize({ width: chartWidth(c.box), height: 130 });
    }, 100);
  });
  void loadAll();
}

init();
