// bimodal compare view: the slow band of a fleet, found without being told the groups, and what
// differs on it. Reads /api/v1/compare (bands over every metric and the ranked explanation),
// /api/v1/nodes (labels and facts for the node table) and /api/v1/diff (the differential flame
// graph of the bands). Every control's state is in the URL; back and forward restore it.

import './style.css';
import './compare.css';
import type uPlot from 'uplot';
import {
  fetchCompare,
  fetchDiff,
  fetchLabels,
  fetchNodesIn,
  type ApiCompare,
  type ApiDiff,
  type ApiDiffFrame,
  type ApiFrame,
  type ApiNode,
} from './api';
import { chosenSplit, closestMetric, drawStrip } from './bandplot';
import { byId as $, el } from './dom';
import { failure, isCancelled, Page } from './page';
import { FlameGraph, buildTree, compileMatcher, type Frame } from './flamegraph';
import { formatNull as nullNote, formatP as pValue, formatFigure as figure, formatValue } from './format';
import { renderNodeTable as fillNodeTable } from './nodetable';
import { RANGE_LABELS, fillRangeSelect } from './range';
import { questionFromControls, questionSeconds, readQuestion, sameQuestion, writeQuestion, type Question } from './question';
import { SelectorCompletion, escapeRegex } from './selector';
import { renderNav } from './views';

type Mode = 'absolute' | 'relative';

/** Everything a shared link restores. */
interface ViewState extends Question {
  /** Event of the differential flame graph; '' picks the band metric's or the first difference's. */
  event: string;
  mode: Mode;
  /** The function the differential flame graph is focused on (its search). */
  q: string;
  /** Node table: filter and sort column ('node', 'band' or a metric name), '-' prefix descending. */
  filter: string;
  sort: string;
}

function readState(p: URLSearchParams): ViewState {
  return {
    ...readQuestion(p),
    event: p.get('event') ?? '',
    mode: p.get('mode') === 'relative' ? 'relative' : 'absolute',
    q: p.get('q') ?? '',
    filter: p.get('filter') ?? '',
    sort: p.get('sort') ?? 'band',
  };
}

function writeState(s: ViewState): URLSearchParams {
  const p = new URLSearchParams();
  writeQuestion(p, s);
  if (s.event) p.set('event', s.event);
  if (s.mode !== 'absolute') p.set('mode', s.mode);
  if (s.q) p.set('q', s.q);
  if (s.filter) p.set('filter', s.filter);
  if (s.sort !== 'band') p.set('sort', s.sort);
  return p;
}

const ui = {
  controls: $('controls', HTMLFormElement),
  selector: $('selector', HTMLInputElement),
  range: $('range', HTMLSelectElement),
  metric: $('metric', HTMLSelectElement),
  message: $('message', HTMLDivElement),
  verdictSection: $('verdict-section', HTMLElement),
  verdict: $('verdict', HTMLHeadingElement),
  verdictDetail: $('verdict-detail', HTMLParagraphElement),
  changed: $('changed', HTMLUListElement),
  fleetSection: $('fleet-section', HTMLElement),
  stripTitle: $('strip-title', HTMLHeadingElement),
  strip: $('strip', HTMLDivElement),
  stripNote: $('strip-note', HTMLParagraphElement),
  explainSection: $('explain-section', HTMLElement),
  explain: $('explain', HTMLDivElement),
  diffSection: $('diff-section', HTMLElement),
  diffEvent: $('diff-event', HTMLSelectElement),
  diffMode: $('diff-mode', HTMLSelectElement),
  diffSearch: $('diff-search', HTMLInputElement),
  diffStatus: $('diff-status', HTMLSpanElement),
  diffNote: $('diff-note', HTMLParagraphElement),
  diffGraph: $('diff-graph', HTMLDivElement),
  nodesSection: $('nodes-section', HTMLElement),
  nodeFilter: $('node-filter', HTMLInputElement),
  nodeTable: $('node-table', HTMLTableElement),
  tooltip: $('tooltip', HTMLDivElement),
};

const page = new Page({ read: readState, write: writeState, message: ui.message });
let state = page.read();
let answer: ApiCompare | null = null;
let nodeInfo = new Map<string, ApiNode>();
let diff: ApiDiff | null = null;
let strip: uPlot | null = null;
/** The fast band's value of each frame of the differential flame graph, by frame id. */
let fastValue = new Map<number, number>();

const graph = new FlameGraph(ui.diffGraph, ui.tooltip, (frame) => {
  graph.setZoom(frame.parent === null ? null : frame);
  graph.render();
});

function rangeSeconds(): { from: number; to: number } {
  return questionSeconds(state);
}

function applyStateToControls(): void {
  ui.selector.value = state.selector;
  fillRangeSelect(ui.range, state.range, state.fixed);
  ui.diffMode.value = state.mode;
  ui.diffSearch.value = state.q;
  ui.nodeFilter.value = state.filter;
  renderNav('compare', { selector: state.selector, range: state.range, metric: state.metric, event: state.event });
}

/** Loads the comparison, then the node table's labels and the differential flame graph. */
async function load(): Promise<void> {
  const signal = page.request();
  const when = state.fixed ? ui.range.selectedOptions[0]?.text ?? 'a fixed window' : RANGE_LABELS[state.range].toLowerCase();
  page.show('info', 'Comparing…', `nodes ${state.selector}, ${when}`);
  const { from, to } = rangeSeconds();
  try {
    const [a, info] = await Promise.all([
      fetchCompare({ selector: state.selector, from, to, metric: state.metric }, signal),
      fetchNodesIn(state.selector, from, to, signal).then((p) => p.nodes).catch(() => [] as ApiNode[]),
    ]);
    if (signal.aborted) return;
    answer = a;
    nodeInfo = new Map(info.map((n) => [n.node, n]));
    page.hideMessage();
    render();
    await loadDiff();
  } catch (err) {
    if (isCancelled(err)) return;
    answer = null;
    render();
    page.failed(err, 'The comparison failed.', 'The page retries when you press Compare.');
  }
}

function render(): void {
  renderMetricOptions();
  const a = answer;
  for (const s of [ui.verdictSection, ui.fleetSection, ui.explainSection, ui.diffSection, ui.nodesSection]) {
    s.hidden = a === null;
  }
  if (a === null) return;
  renderVerdict(a);
  renderStrip(a);
  renderExplanation(a);
  renderNodeTable(a);
  ui.diffSection.hidden = a.bands === null;
}

function renderMetricOptions(): void {
  const names = answer?.metrics.map((m) => m.name) ?? [];
  if (state.metric && !names.includes(state.metric)) names.push(state.metric);
  const options = [new Option('every metric (strongest split)', '')];
  for (const n of names) options.push(new Option(n, n));
  ui.metric.replaceChildren(...options);
  ui.metric.value = state.metric;
}

function renderVerdict(a: ApiCompare): void {
  ui.verdict.textContent = a.verdict;
  ui.verdict.className = a.bands ? 'found' : 'none';
  const b = a.bands;
  if (!b) {
    ui.verdictDetail.textContent =
      `${a.nodes.length} nodes matching ${a.selector}; every metric was tested at α = ${a.alpha} ` +
      `(${a.alpha_per_metric.toPrecision(2)} each). No bands is an answer: the fleet runs as one.`;
    ui.changed.replaceChildren();
    return;
  }
  const sep = b.separation === null ? 'fully separated' : `${figure(b.separation)} robust SDs apart`;
  ui.verdictDetail.textContent =
    `${pValue(b.p_value)}${nullNote(b.null)} against ${a.alpha_per_metric.toPrecision(2)} per metric (α = ${a.alpha} over ` +
    `${a.metrics.length} metrics); the bands are ${sep}; threshold ${figure(b.threshold)} ${b.unit}.`;
  const prev = b.previous_window;
  const items: HTMLLIElement[] = [];
  if (b.levels.length > 2) {
    const each = b.levels.map((l) => `${l.nodes.length} at ${figure(l.median)}`).join(', ');
    items.push(el('li', undefined, `${b.levels.length} levels of ${b.metric}, lowest first: ${each} ${b.unit}; the slowest is compared with the rest.`));
  }
  if (b.within) {
    const labels = Object.entries(b.within.labels).map(([k, v]) => `${k}=${v}`).join(', ');
    items.push(el('li', undefined, `Found within hardware class ${labels} (${b.within.nodes.length} nodes): the slow nodes are compared with their own class.`));
  } else if (b.classes === 'classes') {
    items.push(el('li', undefined, 'The bands are hardware classes (cpu_model, sockets, numa_nodes): within each class the nodes run as one.'));
  }
  if (b.outliers.length > 0) {
    items.push(el('li', undefined, `Outliers, far out on their own and in no band: ${b.outliers.join(', ')}.`));
  }
  if (!prev.found) {
    items.push(el('li', 'muted', `Previous window (${prev.from} – ${prev.to}): no bands (${prev.reason ?? 'no data'}).`));
  } else if (prev.changed.length === 0) {
    items.push(el('li', 'muted', 'No node changed band since the previous window.'));
  }
  for (const c of prev.changed) {
    items.push(el('li', undefined, `${c.node} moved to the ${c.now} band (was ${c.before ?? 'in none'}).`));
  }
  const within = b.within_window;
  for (const m of within.moved) {
    items.push(
      el(
        'li',
        'moved-within',
        `${m.node} changed band half-way through the window: ${m.first_band} in the first half (${figure(m.first)}), ` +
          `${m.second_band} in the second (${figure(m.second)} ${b.unit}).`,
      ),
    );
  }
  if (within.halves && within.moved.length === 0) {
    items.push(el('li', 'muted', 'No node changed band between the halves of this window.'));
  } else if (within.reason) {
    items.push(el('li', 'muted', `Within the window: ${within.reason}.`));
  }
  ui.changed.replaceChildren(...items);
}

/** The band metric (or the metric asked for, or the closest to a split) as a strip plot. */
function renderStrip(a: ApiCompare): void {
  const metric = a.metrics.find((m) => m.name === (a.bands?.metric ?? state.metric)) ?? closestMetric(a);
  strip?.destroy();
  strip = null;
  ui.strip.replaceChildren();
  if (!metric) {
    ui.stripTitle.textContent = 'Nodes';
    ui.stripNote.textContent = 'No metric was measured on these nodes in this range.';
    return;
  }
  ui.stripTitle.textContent = `Nodes by ${metric.name}`;
  const drawn = drawStrip(ui.strip, a, metric, chosenSplit(a));
  strip = drawn.plot;
  ui.stripNote.textContent = drawn.note;
}

/** Per-node values of both bands as dots on one scale: the evidence of a difference. */
function dotPlot(low: number[], high: number[], unit: string): SVGSVGElement {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const w = 140;
  const h = 30;
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('width', String(w));
  svg.setAttribute('height', String(h));
  svg.classList.add('dots');
  // Folded, not spread into Math.max: with `explained_nodes=all` a band holds every node.
  const all = [...low, ...high];
  const max = all.reduce((m, v) => Math.max(m, v), 0);
  const min = all.reduce((m, v) => Math.min(m, v), 0);
  const x = (v: number) => 4 + ((v - min) / (max - min || 1)) * (w - 8);
  const row = (values: number[], y: number, cls: string) => {
    for (const v of values) {
      const c = document.createElementNS(ns, 'circle');
      c.setAttribute('cx', x(v).toFixed(1));
      c.setAttribute('cy', String(y));
      c.setAttribute('r', '3.5');
      c.setAttribute('class', cls);
      svg.append(c);
    }
  };
  row(low, 9, 'dot-fast');
  row(high, 21, 'dot-slow');
  const title = document.createElementNS(ns, 'title');
  const list = (v: number[]) => v.map(figure).join(', ');
  title.textContent = `fast band: ${list(low)}\nslow band: ${list(high)}\n(${unit}, ${figure(min)} to ${figure(max)})`;
  svg.append(title);
  return svg;
}

function table(headers: string[], rows: HTMLTableRowElement[], caption: string): HTMLTableElement {
  const t = el('table', 'explain-table');
  t.append(el('caption', undefined, caption));
  const head = el('tr');
  for (const h of headers) head.append(el('th', undefined, h));
  t.createTHead().append(head);
  t.createTBody().append(...rows);
  return t;
}

/** How many nodes of each band the code and data differences were read over, when a sample:
 * ` over 100 of the 900 nodes of the fast band and all 100 of the slow band`. `lowName` and
 * `highName` are the bands' names as the explanation says them. */
function sampled(a: ApiCompare, lowName: string, highName: string): string {
  const read = a.explanation?.nodes;
  if (!read || !a.bands) return '';
  const bands = [
    { name: lowName, read: read.low.length, of: a.bands.low.length },
    { name: highName, read: read.high.length, of: a.bands.high.length },
  ];
  if (bands.every((b) => b.read >= b.of)) return '';
  const said = bands.map((b) => (b.read >= b.of ? `all ${b.of} of the ${b.name}` : `${b.read} of the ${b.of} nodes of the ${b.name}`));
  return ` over ${said.join(' and ')}`;
}

/** The first rows of a long ranked list, and a button that shows the rest. */
function collapsed(t: HTMLTableElement, rows: HTMLTableRowElement[], first = 12): HTMLElement {
  const box = el('div');
  box.append(t);
  if (rows.length <= first) return box;
  for (const r of rows.slice(first)) r.hidden = true;
  const more = el('button', 'btn btn-light', `Show all ${rows.length}`);
  more.type = 'button';
  more.addEventListener('click', () => {
    for (const r of rows) r.hidden = false;
    more.remove();
  });
  box.append(more);
  return box;
}

function cell(row: HTMLTableRowElement, content: string | Node, cls?: string): HTMLTableCellElement {
  const td = el('td', cls);
  td.append(content);
  row.append(td);
  return td;
}

function renderExplanation(a: ApiCompare): void {
  const x = a.explanation;
  ui.explain.replaceChildren();
  if (!x || !a.bands) return;
  // The bands in the explanation are "high" and "low"; say which is slow.
  const slowIsHigh = a.bands.slow !== 'low';
  // When the band metric does not say which way is slow (CPU load), the bands are high and low.
  const [slowName, fastName] = a.bands.slow === null ? ['high band', 'low band'] : ['slow band', 'fast band'];
  const parts: HTMLElement[] = [];
  const sample = slowIsHigh ? sampled(a, fastName, slowName) : sampled(a, slowName, fastName);
  const shares = (with_: number, of: number) => `${with_} of ${of}`;
  if (x.labels.length > 0) {
    const rows = x.labels.slice(0, 8).map((l) => {
      const r = el('tr');
      cell(r, `${l.label}="${l.value}"`, 'mono');
      cell(r, shares(slowIsHigh ? l.high_with : l.low_with, slowIsHigh ? l.high_nodes : l.low_nodes));
      cell(r, shares(slowIsHigh ? l.low_with : l.high_with, slowIsHigh ? l.low_nodes : l.high_nodes));
      cell(r, pValue(l.p_value));
      return r;
    });
    parts.push(table(['label or fact', slowName, fastName, "Fisher's exact"], rows, 'Labels and facts that split the bands'));
  }
  if (x.placement.length > 0) {
    const rows = x.placement.slice(0, 8).map((f) => {
      const r = el('tr');
      const what = el('div', undefined, f.finding);
      what.append(el('div', 'muted small', `e.g. ${f.example}`));
      cell(r, what);
      cell(r, shares(slowIsHigh ? f.high_with : f.low_with, slowIsHigh ? f.high_nodes : f.low_nodes));
      cell(r, shares(slowIsHigh ? f.low_with : f.high_with, slowIsHigh ? f.low_nodes : f.high_nodes));
      cell(r, pValue(f.p_value));
      return r;
    });
    parts.push(table(['memory placement', slowName, fastName, "Fisher's exact"], rows, 'Memory held far from its threads'));
  }
  const fastSlow = (d: { low: number[]; high: number[]; low_median: number; high_median: number }) =>
    slowIsHigh
      ? { fast: d.low, slow: d.high, fastMedian: d.low_median, slowMedian: d.high_median }
      : { fast: d.high, slow: d.low, fastMedian: d.high_median, slowMedian: d.low_median };
  for (const w of x.node_wide ?? []) {
    const [fastMedian, slowMedian] = slowIsHigh ? [w.low_median, w.high_median] : [w.high_median, w.low_median];
    parts.push(
      el(
        'p',
        'node-wide',
        `Node-wide: ${w.event} at ${figure(slowMedian)} ${w.unit} on the ${slowName} band against ${figure(fastMedian)} on the ` +
          `${fastName} (×${figure(slowMedian / fastMedian)}). ${w.functions} of the functions listed only follow it (their share of ` +
          'the event did not move; marked "node-wide"): look for a cause of the whole (memory placement, THP, the cache), not one function.',
      ),
    );
  }
  const heldOut = x.held_out;
  if (x.code.length > 0) {
    const rows = x.code.map((d) => {
      const r = el('tr', 'clickable');
      const v = fastSlow(d);
      cell(r, d.event, 'mono');
      const fn = el('button', 'link mono', d.function);
      fn.type = 'button';
      fn.title = `Focus the differential flame graph of ${d.event} on ${d.function}`;
      fn.addEventListener('click', () => {
        focusFunction(d.event, d.function);
      });
      const name = el('div');
      name.append(fn, el('span', 'muted small', ` ${d.measure === 'self_value' ? 'self' : 'total'} · ${d.module}`));
      if (d.with_whole) name.append(el('span', 'badge', 'node-wide'));
      if (heldOut?.event === d.event && heldOut.source === d.source && !d.held_out?.confirmed) {
        const badge = el('span', 'badge', 'not held out');
        badge.title = d.held_out
          ? `On the half of the window that did not cut the bands, p = ${d.held_out.p_value.toPrecision(2)}, ` +
            `q = ${d.held_out.q_value.toPrecision(2)}: this difference may be the cut's own noise`
          : 'Not tested on the half of the window that did not cut the bands: a half has no values of it';
        name.append(badge);
      }
      cell(r, name);
      cell(r, `${figure(v.fastMedian)} → ${figure(v.slowMedian)}`, 'num');
      cell(r, d.unit, 'muted small');
      cell(r, dotPlot(v.fast, v.slow, d.unit));
      cell(r, (slowIsHigh ? d.effect : -d.effect).toFixed(2), 'num');
      cell(
        r,
        `${pValue(d.p_value)}, q = ${d.q_value.toPrecision(2)}` +
          (d.held_out ? `; held out ${pValue(d.held_out.p_value)}, q = ${d.held_out.q_value.toPrecision(2)}` : ''),
        'small',
      );
      return r;
    });
    if (heldOut?.event && heldOut.summary) {
      parts.push(
        el(
          'p',
          'muted small',
          `${heldOut.event} made the values the bands were cut on, so its functions are tested again on the half of the window ` +
            `that did not cut them: ${heldOut.summary.confirmed} of ${heldOut.summary.tested} confirmed. Those not confirmed ` +
            '(marked "not held out") are listed after the others of their event.',
        ),
      );
    }
    parts.push(
      collapsed(
        table(
          ['event', 'function', `median ${fastName} → ${slowName}`, 'unit', 'per node', 'effect', 'rank test over nodes'],
          rows,
          `Functions that differ, per node${sample} (a click focuses the flame graph)`,
        ),
        rows,
      ),
    );
  } else if (x.code_note) {
    parts.push(el('p', 'muted', `No function is listed: ${x.code_note}.`));
  } else {
    parts.push(el('p', 'muted', `No function differs consistently between the bands${sample}.`));
  }
  if (x.data.length > 0) {
    const rows = x.data.map((d) => {
      const r = el('tr');
      const v = fastSlow(d);
      cell(r, d.event, 'mono');
      cell(r, d.object, 'mono');
      cell(r, `${figure(v.fastMedian)} → ${figure(v.slowMedian)}`, 'num');
      cell(r, d.unit, 'muted small');
      cell(r, dotPlot(v.fast, v.slow, d.unit));
      cell(r, (slowIsHigh ? d.effect : -d.effect).toFixed(2), 'num');
      cell(r, pValue(d.p_value), 'small');
      return r;
    });
    parts.push(
      table(
        ['event', 'data object', `median ${fastName} → ${slowName}`, 'unit', 'per node', 'effect', 'rank test'],
        rows,
        `Data objects that differ${sample}`,
      ),
    );
  }
  ui.explain.replaceChildren(...parts);
}

/** Nodes with their band, every metric's value, facts and labels; sortable and filterable. */
function renderNodeTable(a: ApiCompare): void {
  fillNodeTable(ui.nodeTable, a, chosenSplit(a), nodeInfo, {
    filter: state.filter,
    sort: state.sort,
    range: state.range,
    onSort: (sort) => {
      state.sort = sort;
      page.write(state, true);
      renderNodeTable(a);
    },
  });
}

/** The event the differential flame graph shows when none is asked for. */
function defaultEvent(a: ApiCompare): string {
  const m = a.metrics.find((x) => x.name === a.bands?.metric);
  if (m?.event) return m.event;
  return a.explanation?.code[0]?.event ?? 'cpu';
}

function renderDiffEventOptions(a: ApiCompare, chosen: string): void {
  const events = new Set<string>(['cpu']);
  for (const m of a.metrics) if (m.event) events.add(m.event);
  for (const d of a.explanation?.code ?? []) events.add(d.event);
  ui.diffEvent.replaceChildren(...[...events].map((e) => new Option(e, e)));
  ui.diffEvent.value = chosen;
}

async function loadDiff(): Promise<void> {
  const a = answer;
  if (!a?.bands) return;
  const event = state.event || defaultEvent(a);
  renderDiffEventOptions(a, event);
  const signal = page.request('diff');
  ui.diffStatus.textContent = 'Loading…';
  const { from, to } = rangeSeconds();
  try {
    diff = await fetchDiff(
      { selector: state.selector, from, to, metric: state.metric, event, mode: state.mode },
      signal,
    );
    if (signal.aborted) return;
    drawDiff(diff);
  } catch (err) {
    if (isCancelled(err)) return;
    diff = null;
    graph.setData(null, '', 0);
    graph.render();
    ui.diffStatus.textContent = '';
    ui.diffNote.textContent = `The differential flame graph failed: ${failure(err, '', 'Press Compare to try again.').detail}`;
  }
}

/**
 * Widths are the slow band's values (per node and CPU-second, or shares in relative mode);
 * colours the difference from the fast band: red more on the slow band, blue less.
 */
function drawDiff(d: ApiDiff): void {
  // The server puts the slow band (or the high one, when the metric does not say) in `b`.
  const slowSide = 'b';
  const fastSide = 'a';
  const fast = new Map<ApiFrame, number>();
  const convert = (f: ApiDiffFrame): ApiFrame => {
    const node: ApiFrame = {
      name: f.name,
      kind: f.kind,
      value: f[slowSide],
      children: (f.children ?? []).map(convert),
    };
    if (f.module !== undefined) node.module = f.module;
    fast.set(node, f[fastSide]);
    return node;
  };
  const apiRoot = convert(d.root);
  const tree = buildTree(apiRoot);
  // buildTree numbers frames as it creates them, parents before children in the same order as
  // the API's children: walk both trees together to key the fast values by frame id.
  fastValue = new Map();
  const walk: [ApiFrame, Frame][] = [[apiRoot, tree.root]];
  for (let top = walk.pop(); top; top = walk.pop()) {
    const [api, frame] = top;
    fastValue.set(frame.id, fast.get(api) ?? 0);
    (api.children ?? []).forEach((c, i) => {
      const child = frame.children[i];
      if (child) walk.push([c, child]);
    });
  }
  graph.setColourer(diffColour);
  graph.setData(tree, d.unit, d.root[slowSide]);
  graph.setMatcher(compileMatcher(state.q));
  graph.render();
  const slow = d.b;
  const fastGroup = d.a;
  ui.diffNote.textContent =
    `${d.event} (${d.source}), ${d.mode}: ${d.normalization}. Widths: the slow band ` +
    `(${slow.nodes.length} nodes, ${figure(slow.total)} ${d.unit}); colours: the difference from the fast band ` +
    `(${fastGroup.nodes.length} nodes, ${figure(fastGroup.total)}). Code only on the fast band has no width here.`;
  renderDiffStatus();
}

/** Red where the slow band has more, blue where less, grey where both are within 10%. */
function diffColour(frame: Frame): string {
  const slow = frame.value;
  const fast = fastValue.get(frame.id) ?? 0;
  const top = Math.max(slow, fast);
  const delta = top > 0 ? (slow - fast) / top : 0;
  if (Math.abs(delta) < 0.1) return 'hsl(220, 8%, 82%)';
  const strength = Math.min(1, Math.abs(delta));
  const light = 88 - 38 * strength;
  return delta > 0 ? `hsl(4, 75%, ${light}%)` : `hsl(214, 70%, ${light}%)`;
}

function renderDiffStatus(): void {
  const stats = graph.matchStats();
  if (!state.q || !stats || !diff) {
    ui.diffStatus.textContent = '';
    return;
  }
  const total = diff.root.b;
  ui.diffStatus.textContent =
    `${stats.count} frames match: ${formatValue(stats.value, diff.unit)} ` +
    `(${total > 0 ? ((100 * stats.value) / total).toFixed(1) : '0'}% of the slow band)`;
}

function focusFunction(event: string, fn: string): void {
  state.event = event;
  // An exact match of the name: regular expression anchored at both ends.
  state.q = `/^${escapeRegex(fn)}$`;
  ui.diffSearch.value = state.q;
  page.write(state, true);
  ui.diffSection.scrollIntoView({ behavior: 'smooth', block: 'start' });
  if (diff?.event === event) {
    graph.setMatcher(compileMatcher(state.q));
    graph.render();
    renderDiffStatus();
  } else {
    void loadDiff();
  }
}

function init(): void {
  applyStateToControls();
  const completion = new SelectorCompletion(ui.selector, (signal) => {
    const { from, to } = rangeSeconds();
    return fetchLabels('{}', from, to, signal);
  });
  ui.controls.addEventListener('submit', (e) => {
    e.preventDefault();
    Object.assign(state, questionFromControls(state, ui.selector, ui.range, ui.metric));
    completion.reset();
    state.event = '';
    page.write(state, true);
    applyStateToControls();
    void load();
  });
  ui.metric.addEventListener('change', () => {
    ui.controls.requestSubmit();
  });
  ui.range.addEventListener('change', () => {
    ui.controls.requestSubmit();
  });
  ui.diffEvent.addEventListener('change', () => {
    state.event = ui.diffEvent.value;
    page.write(state, true);
    void loadDiff();
  });
  ui.diffMode.addEventListener('change', () => {
    state.mode = ui.diffMode.value === 'relative' ? 'relative' : 'absolute';
    page.write(state, true);
    void loadDiff();
  });
  ui.diffSearch.addEventListener('input', () => {
    state.q = ui.diffSearch.value;
    page.write(state, false);
    graph.setMatcher(compileMatcher(state.q));
    graph.render();
    renderDiffStatus();
  });
  ui.nodeFilter.addEventListener('input', () => {
    state.filter = ui.nodeFilter.value;
    page.write(state, false);
    if (answer) renderNodeTable(answer);
  });
  page.onNavigate((restored) => {
    const before = state;
    state = restored;
    applyStateToControls();
    if (!sameQuestion(before, state)) {
      void load();
    } else if (before.event !== state.event || before.mode !== state.mode) {
      void loadDiff();
    } else if (answer) {
      renderNodeTable(answer);
      graph.setMatcher(compileMatcher(state.q));
      graph.render();
      renderDiffStatus();
    }
  });
  window.addEventListener('resize', () => {
    if (strip) strip.setSize({ width: Math.max(320, ui.strip.clientWidth), height: 150 });
  });
  void load();
}

init();
