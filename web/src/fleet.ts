// bimodal fleet view: the nodes a selector matches, the metric that splits them into a fast and a
// slow band (or "no bands", said as such), every metric tested with its confidence, and a node
// table with facts, labels and per-node metrics that sorts and filters. Reads /api/v1/compare
// (metrics and bands), /api/v1/nodes (labels, facts, last seen) and /api/v1/labels (selector
// completion). Every control's state is in the URL; back and forward restore it.

import './style.css';
import './compare.css';
import './fleet.css';
import type uPlot from 'uplot';
import { fetchCompare, fetchLabels, fetchNodesIn, type ApiCompare, type ApiMetric, type ApiNode } from './api';
import { chosenSplit, closestMetric, drawStrip, metricSplit } from './bandplot';
import { formatNull as nullNote, formatP as pValue, formatFigure as figure } from './format';
import { renderNodeTable } from './nodetable';
import { RANGE_LABELS, fillRangeSelect, writeWindow } from './range';
import { questionFromControls, questionSeconds, readQuestion, sameQuestion, writeQuestion, type Question } from './question';
import { SelectorCompletion, withMatcher } from './selector';
import { renderNav, viewHref } from './views';
import { byId as $, el } from './dom';
import { isCancelled, Page } from './page';

/** Everything a shared link restores. */
interface ViewState extends Question {
  /** The metric plotted; '' plots the band metric (or the closest to a split). */
  plot: string;
  filter: string;
  /** Node table sort column, '-' prefix descending. */
  sort: string;
}

function readState(p: URLSearchParams): ViewState {
  return {
    ...readQuestion(p),
    plot: p.get('plot') ?? '',
    filter: p.get('filter') ?? '',
    sort: p.get('sort') ?? 'band',
  };
}

function writeState(s: ViewState): URLSearchParams {
  const p = new URLSearchParams();
  writeQuestion(p, s);
  if (s.plot) p.set('plot', s.plot);
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
  toExplain: $('to-explain', HTMLAnchorElement),
  plotSection: $('plot-section', HTMLElement),
  plotTitle: $('plot-title', HTMLSpanElement),
  plot: $('plot', HTMLSelectElement),
  strip: $('strip', HTMLDivElement),
  stripNote: $('strip-note', HTMLParagraphElement),
  metricsSection: $('metrics-section', HTMLElement),
  metricsTable: $('metrics-table', HTMLTableElement),
  nodesSection: $('nodes-section', HTMLElement),
  nodeFilter: $('node-filter', HTMLInputElement),
  nodeCount: $('node-count', HTMLSpanElement),
  nodeTable: $('node-table', HTMLTableElement),
};

const page = new Page({ read: readState, write: writeState, message: ui.message });
let state = page.read();
let answer: ApiCompare | null = null;
let nodeInfo = new Map<string, ApiNode>();
let strip: uPlot | null = null;

function rangeSeconds(): { from: number; to: number } {
  return questionSeconds(state);
}

function applyStateToControls(): void {
  ui.selector.value = state.selector;
  fillRangeSelect(ui.range, state.range, state.fixed);
  ui.nodeFilter.value = state.filter;
  renderNav('fleet', { selector: state.selector, range: state.range, metric: state.metric });
  const explain = new URL(viewHref('compare', { selector: state.selector, range: state.range, metric: state.metric }), location.href);
  explain.searchParams.delete('range');
  writeWindow(explain.searchParams, state.range, state.fixed);
  ui.toExplain.href = explain.href;
}

async function load(): Promise<void> {
  const signal = page.request();
  const when = state.fixed ? (ui.range.selectedOptions[0]?.text ?? 'a fixed window') : RANGE_LABELS[state.range].toLowerCase();
  page.show('info', 'Loading the fleet…', `nodes ${state.selector}, ${when}`);
  const { from, to } = rangeSeconds();
  try {
    const [a, info] = await Promise.all([
      fetchCompare({ selector: state.selector, from, to, metric: state.metric }, signal),
      fetchNodesIn(state.selector, from, to, signal),
    ]);
    if (signal.aborted) return;
    answer = a;
    nodeInfo = new Map(info.nodes.map((n) => [n.node, n]));
    if (a.nodes.length === 0) {
      page.show(
        'info',
        'No node matches.',
        `No node matching ${a.selector} sent data in this range. Widen the range, or check the selector's labels (↓ in the Nodes field lists them).`,
      );
    } else if (info.total > info.nodes.length) {
      page.show(
        'info',
        `Labels and facts of ${info.nodes.length} of ${info.total} nodes.`,
        'The server lists nodes a page at a time; narrow the selector to see every node of the table with its labels and facts.',
      );
    } else {
      page.hideMessage();
    }
    render();
  } catch (err) {
    if (isCancelled(err)) return;
    answer = null;
    render();
    page.failed(err, 'Loading the fleet failed.', 'Press Show to try again.');
  }
}

function render(): void {
  renderMetricOptions();
  const a = answer;
  const empty = a === null || a.nodes.length === 0;
  for (const s of [ui.verdictSection, ui.plotSection, ui.metricsSection, ui.nodesSection]) s.hidden = empty;
  if (empty) return;
  renderVerdict(a);
  renderPlot(a);
  renderMetrics(a);
  renderNodes(a);
}

/** The nodes a metric set aside, said after its outcome. */
function setAsideNote(nodes: string[]): string {
  if (nodes.length === 0) return '';
  const named = nodes.length <= 3 ? nodes.join(', ') : `${nodes.slice(0, 3).join(', ')} and ${nodes.length - 3} more`;
  return `; set aside, too little evidence: ${named}`;
}

function renderMetricOptions(): void {
  const names = answer?.metrics.map((m) => m.name) ?? [];
  if (state.metric && !names.includes(state.metric)) names.push(state.metric);
  ui.metric.replaceChildren(new Option('every metric (strongest split)', ''), ...names.map((n) => new Option(n, n)));
  ui.metric.value = state.metric;
}

/** The nodes far out on their own in any metric, when no metric has bands. */
function outlierNote(a: ApiCompare): string {
  const named = a.metrics
    .filter((m) => (m.bands.outliers ?? []).length > 0)
    .map((m) => `${m.name}: ${(m.bands.outliers ?? []).join(', ')}`);
  return named.length === 0 ? '' : ` Outliers, far out on their own: ${named.join('; ')}.`;
}

function renderVerdict(a: ApiCompare): void {
  ui.verdict.textContent = a.verdict;
  ui.verdict.className = a.bands ? 'found' : 'none';
  const b = a.bands;
  ui.toExplain.hidden = b === null;
  if (!b) {
    ui.verdictDetail.textContent =
      `${a.nodes.length} nodes matching ${a.selector}; ${a.metrics.length} metrics tested at α = ${a.alpha} ` +
      `(${a.alpha_per_metric.toPrecision(2)} each), none splits the nodes into two bands: the fleet runs as one.` +
      outlierNote(a);
    return;
  }
  const sep = b.separation === null ? 'fully separated' : `${figure(b.separation)} robust SDs apart`;
  const slow = b.slow === null ? null : b.slow === 'high' ? b.high : b.low;
  const sizes = slow
    ? `${slow.length} slow and ${a.nodes.length - slow.length} fast of ${a.nodes.length} nodes`
    : `${b.high.length} high and ${b.low.length} low of ${a.nodes.length} nodes`;
  ui.verdictDetail.textContent =
    `${sizes} by ${b.metric}: medians ${figure(b.low_median)} and ${figure(b.high_median)} ${b.unit}, ${sep}; ` +
    `confidence: ${pValue(b.p_value)}${nullNote(b.null)} against ${a.alpha_per_metric.toPrecision(2)} per metric ` +
    `(α = ${a.alpha} over ${a.metrics.length} metrics).` +
    (b.levels.length > 2
      ? ` ${b.levels.length} levels, lowest first: ${b.levels.map((l) => `${l.nodes.length} at ${figure(l.median)}`).join(', ')} ${b.unit}.`
      : '') +
    (b.outliers.length > 0 ? ` Outliers, in no band: ${b.outliers.join(', ')}.` : '');
}

function plottedMetric(a: ApiCompare): ApiMetric | undefined {
  return (
    a.metrics.find((m) => m.name === state.plot) ??
    a.metrics.find((m) => m.name === (a.bands?.metric ?? state.metric)) ??
    closestMetric(a)
  );
}

function renderPlot(a: ApiCompare): void {
  const metric = plottedMetric(a);
  ui.plot.replaceChildren(...a.metrics.map((m) => new Option(m.name, m.name)));
  strip?.destroy();
  strip = null;
  if (!metric) {
    ui.plotTitle.textContent = 'Nodes';
    ui.strip.replaceChildren();
    ui.stripNote.textContent = 'No metric was measured on these nodes in this range.';
    return;
  }
  ui.plot.value = metric.name;
  ui.plotTitle.textContent = `Nodes by ${metric.name}`;
  // The comparison's bands when this is its metric, else the metric's own split (if any).
  const chosen = chosenSplit(a);
  const split = chosen?.metric === metric.name ? chosen : metricSplit(metric);
  const drawn = drawStrip(ui.strip, a, metric, split, 170);
  strip = drawn.plot;
  ui.stripNote.textContent = drawn.note;
}

/** A band's size, or a dash when the metric has none (or none of its nodes). */
function count(nodes: number | undefined): string {
  return nodes === undefined || nodes === 0 ? '—' : String(nodes);
}

function renderMetrics(a: ApiCompare): void {
  const head = el('tr');
  for (const h of ['metric', 'unit', 'slower when', 'nodes measured', 'median', 'bands', 'confidence', 'low band', 'high band']) {
    head.append(el('th', undefined, h));
  }
  const direction = { higher_is_slower: 'higher', lower_is_slower: 'lower', neither: '—' } as const;
  const rows = a.metrics.map((m) => {
    const tr = el('tr', m.name === a.bands?.metric ? 'chosen clickable' : 'clickable');
    const values = m.values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v)).sort((x, y) => x - y);
    const median = values.length > 0 ? values[Math.floor(values.length / 2)] : undefined;
    const best = m.bands.best;
    const name = el('button', 'link', m.name);
    name.type = 'button';
    name.addEventListener('click', () => {
      state.plot = m.name;
      page.write(state, true);
      renderPlot(a);
      ui.plotSection.scrollIntoView({ behavior: 'smooth', block: 'start' });
    });
    const cells: (string | Node)[] = [
      name,
      m.unit,
      direction[m.direction],
      `${values.length} of ${a.nodes.length}`,
      figure(median),
      (m.bands.found ? (m.name === a.bands?.metric ? 'two bands (chosen)' : 'two bands') : `none: ${m.bands.reason ?? 'not tested'}`) +
        setAsideNote(m.bands.set_aside ?? []),
      pValue(m.bands.p_value ?? best?.p_value),
      count(m.bands.low?.length ?? best?.low_nodes),
      count(m.bands.high?.length ?? best?.high_nodes),
    ];
    cells.forEach((c, i) => {
      const td = el('td', i === 0 ? 'mono' : i === 5 ? 'small' : i >= 3 ? 'num' : undefined);
      td.append(c);
      tr.append(td);
    });
    return tr;
  });
  ui.metricsTable.replaceChildren();
  ui.metricsTable.createTHead().append(head);
  ui.metricsTable.createTBody().append(...rows);
}

function renderNodes(a: ApiCompare): void {
  const shown = renderNodeTable(ui.nodeTable, a, chosenSplit(a), nodeInfo, {
    filter: state.filter,
    sort: state.sort,
    range: state.range,
    onSort: (sort) => {
      state.sort = sort;
      page.write(state, true);
      renderNodes(a);
    },
    onLabel: (name, value) => {
      state.selector = withMatcher(state.selector, { name, op: '=', value });
      state.filter = '';
      page.write(state, true);
      applyStateToControls();
      void load();
    },
  });
  ui.nodeCount.textContent = shown === a.nodes.length ? `${shown} nodes` : `${shown} of ${a.nodes.length} nodes`;
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
    state.plot = '';
    completion.reset();
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
  ui.plot.addEventListener('change', () => {
    state.plot = ui.plot.value;
    page.write(state, true);
    if (answer) renderPlot(answer);
  });
  ui.nodeFilter.addEventListener('input', () => {
    state.filter = ui.nodeFilter.value;
    page.write(state, false);
    if (answer) renderNodes(answer);
  });
  page.onNavigate((restored) => {
    const before = state;
    state = restored;
    applyStateToControls();
    if (!sameQuestion(before, state)) {
      void load();
    } else if (answer) {
      renderPlot(answer);
      renderNodes(answer);
    }
  });
  window.addEventListener('resize', () => {
    if (strip) strip.setSize({ width: Math.max(320, ui.strip.clientWidth), height: 170 });
  });
  void load();
}

init();
