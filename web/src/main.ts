// bimodal web UI: selectors in the header, a flame graph below, all state in the URL.
// The sandwich view of one function (sandwich.ts) takes the graph's place: its callers drawn as
// a flame (the function at the bottom), its callees as an icicle, both merged over all its stacks
// from the tree already loaded. Opened by shift+click on a frame, S on the selected frame, the
// toolbar's Sandwich button (the zoomed frame) or a row's ⇅ in Top functions; closed by Esc, its
// close button or Back; kept in the URL as sandwich=NAME.

import './style.css';
import { fetchEvents, fetchFlamegraph, fetchNodes, moreNodesOption, withNode, type ApiEvent, type ApiFlamegraph, type ApiNode } from './api';
import { FlameGraph, buildTree, compileMatcher, pathOf, resolvePath, type Frame, type FrameAction } from './flamegraph';
import { DEFAULT_RANGE, RANGES, RANGE_LABELS, isRange, type RangeKey } from './range';
import { renderNav } from './views';
import { formatAgo, formatCount, formatPercent, formatTime, formatValue } from './format';
import { TopFunctions } from './topfunctions';
import { sandwichOf, type Sandwich } from './sandwich';
import { byId as $, el } from './dom';
import { isCancelled, Page } from './page';

const DEFAULT_EVENT = 'cpu';

/** Everything a shared link restores. */
interface ViewState {
  /** '' means every node. */
  node: string;
  /** '' until the events list says which one to default to. */
  event: string;
  range: RangeKey;
  q: string;
  /** Frame names from below the root to the zoomed frame. */
  zoom: string[];
  /** Root on top (icicle) or at the bottom (flame). */
  orient: 'icicle' | 'flame';
  /** The function whose sandwich view is open; '' for the full graph. */
  sandwich: string;
  /** Zoom paths in the sandwich's callers and callees graphs, below the function. */
  callersZoom: string[];
  calleesZoom: string[];
}

function splitPath(path: string | null): string[] {
  return path ? path.split(';').filter((s) => s !== '') : [];
}

function readState(p: URLSearchParams): ViewState {
  const range = p.get('range');
  const zoom = p.get('zoom');
  return {
    node: p.get('node') ?? '',
    event: p.get('event') ?? '',
    range: isRange(range) ? range : DEFAULT_RANGE,
    q: p.get('q') ?? '',
    // Same separator as the API's folded format.
    zoom: zoom ? zoom.split(';').filter((s) => s !== '') : [],
    orient: p.get('orient') === 'flame' ? 'flame' : 'icicle',
    sandwich: p.get('sandwich') ?? '',
    callersZoom: splitPath(p.get('callers_zoom')),
    calleesZoom: splitPath(p.get('callees_zoom')),
  };
}

/** The query of `s`, its zoom paths left readable. */
function writeState(s: ViewState): string {
  const p = new URLSearchParams();
  if (s.node) p.set('node', s.node);
  if (s.event) p.set('event', s.event);
  p.set('range', s.range);
  if (s.q) p.set('q', s.q);
  if (s.zoom.length > 0) p.set('zoom', s.zoom.join(';'));
  if (s.orient === 'flame') p.set('orient', 'flame');
  if (s.sandwich) p.set('sandwich', s.sandwich);
  if (s.sandwich && s.callersZoom.length > 0) p.set('callers_zoom', s.callersZoom.join(';'));
  if (s.sandwich && s.calleesZoom.length > 0) p.set('callees_zoom', s.calleesZoom.join(';'));
  // ';' is legal in a query string; leaving it unescaped keeps zoom paths readable.
  return p.toString().replaceAll('%3B', ';');
}

/** Puts the state in the address bar and in the header's links. */
function saveState(s: ViewState, push: boolean): void {
  renderNodeLink(s);
  page.write(s, push);
}

/** The header's links carry the chosen node (if one is), the event and the range. */
function renderNodeLink(s: ViewState): void {
  renderNav('flame', { node: s.node, range: s.range, event: s.event });
}

const ui = {
  node: $('node', HTMLSelectElement),
  nodeMeta: $('node-meta', HTMLSpanElement),
  event: $('event', HTMLSelectElement),
  range: $('range', HTMLSelectElement),
  refresh: $('refresh', HTMLButtonElement),
  search: $('search', HTMLInputElement),
  searchStatus: $('search-status', HTMLSpanElement),
  breadcrumb: $('breadcrumb', HTMLElement),
  resetZoom: $('reset-zoom', HTMLButtonElement),
  orient: $('orient', HTMLButtonElement),
  sandwichOpen: $('sandwich-open', HTMLButtonElement),
  summary: $('summary', HTMLSpanElement),
  loading: $('loading', HTMLSpanElement),
  message: $('message', HTMLDivElement),
  graphColumn: $('graph-column', HTMLDivElement),
  graph: $('graph', HTMLDivElement),
  sandwich: $('sandwich', HTMLElement),
  swName: $('sw-name', HTMLSpanElement),
  swStats: $('sw-stats', HTMLDivElement),
  swClose: $('sw-close', HTMLButtonElement),
  swMessage: $('sw-message', HTMLDivElement),
  swBody: $('sw-body', HTMLDivElement),
  swCallers: $('sw-callers', HTMLDivElement),
  swCallees: $('sw-callees', HTMLDivElement),
  tooltip: $('tooltip', HTMLDivElement),
};

const page = new Page({
  read: readState,
  write: writeState,
  message: ui.message,
  // The graph's column makes way for a message.
  messageShown: (shown) => {
    ui.graphColumn.hidden = shown;
  },
});
let state = page.read();
let nodes: ApiNode[] = [];
/** How many nodes the server knows: more than `nodes` when its list came a page short. */
let nodesTotal = 0;
let events: ApiEvent[] = [];
let profile: ApiFlamegraph | null = null;
let loadSeq = 0;

const graph = new FlameGraph(
  ui.graph,
  ui.tooltip,
  (frame) => {
    zoomTo(frame, true);
  },
  'main',
);

// The sandwich view's graphs: their zooms are in the URL too (callers_zoom, callees_zoom).
const callersGraph: FlameGraph = new FlameGraph(
  ui.swCallers,
  ui.tooltip,
  (frame) => {
    zoomSandwich('callers', frame);
  },
  'callers',
);
callersGraph.setOrientation('flame');
const calleesGraph: FlameGraph = new FlameGraph(
  ui.swCallees,
  ui.tooltip,
  (frame) => {
    zoomSandwich('callees', frame);
  },
  'callees',
);

function zoomSandwich(which: 'callers' | 'callees', frame: Frame): void {
  const path = frame.parent ? pathOf(frame) : [];
  if (which === 'callers') {
    state.callersZoom = path;
    callersGraph.setZoom(frame);
  } else {
    state.calleesZoom = path;
    calleesGraph.setZoom(frame);
  }
  saveState(state, true);
  renderSearchStatus();
}

/** The sandwich graphs zoomed as the state says (as far as the paths exist). */
function applySandwichZoom(): void {
  for (const [g, path] of [
    [callersGraph, state.callersZoom],
    [calleesGraph, state.calleesZoom],
  ] as const) {
    const root = g.root;
    if (root) g.setZoom(path.length > 0 ? resolvePath(root, path) : null);
  }
}
const sandwichAction: FrameAction = {
  label: 'its callers and callees (sandwich)',
  key: 's',
  run: (frame) => {
    openSandwich(frame.name);
  },
};
for (const g of [graph, callersGraph, calleesGraph]) g.setFrameAction(sandwichAction);

// ---------------------------------------------------------------------------------------------
// Messages

function showError(what: string, err: unknown): void {
  page.failed(err, `Could not load ${what}`, 'Press Refresh to try again.');
}

// ---------------------------------------------------------------------------------------------
// Header controls

function renderRangeOptions(): void {
  ui.range.replaceChildren(
    ...(Object.keys(RANGES) as RangeKey[]).map((k) => {
      const o = new Option(RANGE_LABELS[k], k);
      return o;
    }),
  );
  ui.range.value = state.range;
}

function nodeLabels(n: ApiNode): string {
  return Object.entries(n.labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}

function renderNodeOptions(): void {
  const opts: HTMLOptionElement[] = [new Option(nodesTotal > 0 ? `All nodes (${nodesTotal})` : 'All nodes', '')];
  for (const n of nodes) {
    const labels = nodeLabels(n);
    const text = [n.node, labels, `seen ${formatAgo(n.last_seen)}`].filter((s) => s !== '').join(' · ');
    const o = new Option(text, n.node);
    o.title = n.last_seen ?? '';
    opts.push(o);
  }
  // A node named in a shared link stays selectable even if it has not reported (yet).
  if (state.node && !nodes.some((n) => n.node === state.node)) {
    opts.push(new Option(`${state.node} · not reporting`, state.node));
  }
  opts.push(...moreNodesOption(nodes.length, nodesTotal));
  ui.node.replaceChildren(...opts);
  ui.node.value = state.node;
  renderNodeMeta();
}

function renderNodeMeta(): void {
  const n = nodes.find((x) => x.node === state.node);
  ui.nodeMeta.replaceChildren();
  ui.nodeMeta.title = '';
  if (!state.node) {
    ui.nodeMeta.textContent = nodes.length === 1 ? '1 node reporting' : `${nodes.length} nodes reporting`;
    return;
  }
  if (!n) {
    ui.nodeMeta.append(el('span', 'dot stale'), 'never seen');
    return;
  }
  const fresh = n.last_seen !== undefined && Date.now() - Date.parse(n.last_seen) < 5 * 60_000;
  const seen = el('span', 'seen');
  seen.append(el('span', fresh ? 'dot fresh' : 'dot stale'), `seen ${formatAgo(n.last_seen)}`);
  seen.title = n.last_seen ? `last seen ${new Date(n.last_seen).toString()}` : '';
  ui.nodeMeta.append(seen);
  for (const [k, v] of Object.entries(n.labels ?? {})) ui.nodeMeta.append(el('span', 'chip', `${k}=${v}`));
  ui.nodeMeta.title = [nodeLabels(n), seen.title].filter((s) => s !== '').join('\n');
}

function renderEventOptions(): void {
  const opts = events.map((e) => new Option(e.name, e.name));
  if (state.event && !events.some((e) => e.name === state.event)) opts.push(new Option(state.event, state.event));
  ui.event.replaceChildren(...opts);
  ui.event.value = state.event;
}

// ---------------------------------------------------------------------------------------------
// Loading

/** Reloads the node and event lists, then the flame graph. */
async function loadAll(): Promise<void> {
  const seq = ++loadSeq;
  const signal = page.request();
  ui.loading.hidden = false;
  try {
    const [n, e] = await Promise.all([withNode(fetchNodes(signal), state.node, signal), fetchEvents(signal)]);
    if (seq !== loadSeq) return;
    nodes = [...n.nodes].sort((a, b) => a.node.localeCompare(b.node));
    nodesTotal = n.total;
    events = e;
    if (!state.event) {
      state.event = events.some((x) => x.name === DEFAULT_EVENT) ? DEFAULT_EVENT : (events[0]?.name ?? DEFAULT_EVENT);
      saveState(state, false);
    }
    renderNodeOptions();
    renderEventOptions();
    if (nodes.length === 0) {
      setProfile(null);
      page.show(
        'info',
        'No nodes have reported yet',
        'Start the bimodal agent on a host and point it at this server; nodes show up here after their first upload.',
      );
      return;
    }
    await loadGraph(seq, signal);
  } catch (err) {
    if (seq !== loadSeq || isCancelled(err)) return;
    setProfile(null);
    showError('nodes and events', err);
  } finally {
    if (seq === loadSeq) ui.loading.hidden = true;
  }
}

/** Reloads only the flame graph (after a selector changed). */
async function reloadGraph(): Promise<void> {
  const seq = ++loadSeq;
  const signal = page.request();
  ui.loading.hidden = false;
  try {
    await loadGraph(seq, signal);
  } catch (err) {
    if (seq !== loadSeq || isCancelled(err)) return;
    throw err;
  } finally {
    if (seq === loadSeq) ui.loading.hidden = true;
  }
}

async function loadGraph(seq: number, signal: AbortSignal): Promise<void> {
  const to = Math.floor(Date.now() / 1000);
  const from = to - RANGES[state.range];
  let fg: ApiFlamegraph;
  try {
    fg = await fetchFlamegraph({ event: state.event, from, to, nodes: state.node ? [state.node] : [] }, signal);
  } catch (err) {
    if (seq !== loadSeq || isCancelled(err)) return;
    setProfile(null);
    showError('the flame graph', err);
    return;
  }
  if (seq !== loadSeq) return;
  setProfile(fg);
}

function setProfile(fg: ApiFlamegraph | null): void {
  profile = fg;
  if (!fg || fg.root.value <= 0 || (fg.root.children ?? []).length === 0) {
    graph.setData(null, '', 0);
    graph.render();
    renderToolbar(null);
    renderSandwich();
    if (fg) {
      const where = state.node ? `on ${state.node}` : 'on any node';
      page.show(
        'info',
        'No samples in this time range',
        `No ${fg.event} samples ${where} in the ${RANGE_LABELS[state.range].toLowerCase()}. Try a longer range, another node or another event.`,
      );
    }
    return;
  }
  page.hideMessage();
  const tree = buildTree(fg.root);
  graph.setData(tree, fg.unit, fg.total);
  graph.setMatcher(currentMatcher());
  const zoom = resolvePath(tree.root, state.zoom);
  graph.setZoom(zoom);
  renderToolbar(zoom, tree.count);
  renderSearchStatus();
  renderSandwich();
}

// ---------------------------------------------------------------------------------------------
// Zoom, search, toolbar

function zoomTo(frame: Frame | null, push: boolean): void {
  const root = graph.root;
  if (!root) return;
  const target = frame ?? root;
  state.zoom = pathOf(target);
  saveState(state, push);
  graph.setZoom(target);
  renderToolbar(target);
  renderSearchStatus();
}

let frameCount = 0;
function renderToolbar(zoom: Frame | null, count?: number): void {
  if (count !== undefined) frameCount = count;
  ui.breadcrumb.replaceChildren();
  ui.resetZoom.disabled = !zoom?.parent;
  ui.sandwichOpen.disabled = !zoom?.parent;
  ui.sandwichOpen.dataset.name = zoom?.parent ? zoom.name : '';
  if (!zoom || !profile) {
    ui.summary.textContent = '';
    return;
  }
  const chain: Frame[] = [];
  for (let f: Frame | null = zoom; f; f = f.parent) chain.unshift(f);
  chain.forEach((f, i) => {
    if (i > 0) ui.breadcrumb.append(el('span', 'crumb-sep', '›'));
    const b = el('button', `crumb k-${f.kind}`, f.parent ? f.name : 'all');
    b.type = 'button';
    b.title = f.name;
    if (f === zoom) b.disabled = true;
    else
      b.addEventListener('click', () => {
        zoomTo(f, true);
      });
    ui.breadcrumb.append(b);
  });
  const p = profile;
  const where = p.selector === '{}' ? 'all nodes' : p.selector;
  const source = p.source ? ` (${p.source})` : '';
  const total = p.total || p.root.value;
  const left = p.truncated_stacks
    ? ` · ${formatCount(p.truncated_stacks)} smallest stacks left out (${formatValue(p.truncated_value ?? 0, p.unit)}, ${formatPercent(p.truncated_value ?? 0, total)})`
    : '';
  ui.summary.textContent = `${p.event}${source} · total ${formatValue(total, p.unit)}${left} · ${formatCount(frameCount)} frames · ${where} · ${formatTime(p.from)} – ${formatTime(p.to)}`;
}

function currentMatcher(): ((name: string) => boolean) | null {
  try {
    ui.search.classList.remove('invalid');
    return compileMatcher(state.q);
  } catch {
    ui.search.classList.add('invalid');
    return null;
  }
}

function renderSearchStatus(): void {
  ui.searchStatus.className = 'search-status';
  if (ui.search.classList.contains('invalid')) {
    ui.searchStatus.textContent = 'invalid regular expression';
    ui.searchStatus.classList.add('bad');
    return;
  }
  if (state.sandwich) {
    renderSandwichSearchStatus();
    return;
  }
  const stats = graph.matchStats();
  const root = graph.root;
  const zoom = graph.zoomed;
  if (!stats || !root || !profile) {
    ui.searchStatus.textContent = '';
    return;
  }
  if (stats.count === 0) {
    ui.searchStatus.textContent = 'no match';
    ui.searchStatus.classList.add('bad');
    return;
  }
  const total = profile.total || root.value;
  const frames = stats.count === 1 ? '1 frame' : `${formatCount(stats.count)} frames`;
  let text = `matched ${formatPercent(stats.value, total)} of total (${formatValue(stats.value, profile.unit)}, ${frames})`;
  if (zoom?.parent) text += ` · ${formatPercent(stats.zoomValue, zoom.value)} of zoom`;
  ui.searchStatus.textContent = text;
  ui.searchStatus.classList.add('good');
}

/** While a sandwich is open the search counts what it matches there: callees, then callers. */
function renderSandwichSearchStatus(): void {
  const sw = built?.name === state.sandwich ? built.sandwich : null;
  const callees = calleesGraph.matchStats();
  const callers = callersGraph.matchStats();
  if (!sw || !callees || !callers || !profile) {
    ui.searchStatus.textContent = '';
    return;
  }
  if (callees.count + callers.count === 0) {
    ui.searchStatus.textContent = `no match in the sandwich of ${sw.name}`;
    ui.searchStatus.classList.add('bad');
    return;
  }
  const frames = (n: number) => (n === 1 ? '1 frame' : `${formatCount(n)} frames`);
  ui.searchStatus.textContent =
    `callees: ${formatPercent(callees.value, sw.total)} of ${sw.name} (${formatValue(callees.value, profile.unit)}, ${frames(callees.count)})` +
    ` · callers: ${formatPercent(callers.value, sw.total)} (${frames(callers.count)})`;
  ui.searchStatus.classList.add('good');
}

let searchTimer = 0;
function onSearchInput(): void {
  window.clearTimeout(searchTimer);
  searchTimer = window.setTimeout(() => {
    state.q = ui.search.value;
    saveState(state, false);
    applyMatcher();
    renderSearchStatus();
  }, 120);
}

/** The search marks frames in the main graph and in the sandwich's graphs alike. */
function applyMatcher(): void {
  const m = currentMatcher();
  for (const g of [graph, callersGraph, calleesGraph]) g.setMatcher(m);
}

// ---------------------------------------------------------------------------------------------
// Sandwich view

/** What the sandwich graphs show: built from this root for this name (null: it does not occur). */
let built: { root: Frame; name: string; sandwich: Sandwich | null } | null = null;

function openSandwich(name: string): void {
  if (name === '') return;
  if (state.sandwich !== name) {
    state.sandwich = name;
    state.callersZoom = [];
    state.calleesZoom = [];
    saveState(state, true);
  }
  renderSandwich();
  if (ui.graphColumn.getBoundingClientRect().top < 0) window.scrollTo(0, 0);
  ui.swClose.focus({ preventScroll: true });
}

function closeSandwich(): void {
  if (state.sandwich === '') return;
  const hadFocus = ui.sandwich.contains(document.activeElement);
  state.sandwich = '';
  state.callersZoom = [];
  state.calleesZoom = [];
  saveState(state, true);
  renderSandwich();
  if (hadFocus) graph.focus();
}

/** Shows the sandwich of state.sandwich in the graph's place, or the graph (building on demand). */
function renderSandwich(): void {
  const name = state.sandwich;
  document.body.classList.toggle('sandwiching', name !== '');
  ui.sandwich.hidden = name === '';
  ui.graph.hidden = name !== '';
  if (name === '') {
    if (document.title.includes(' · sandwich ')) document.title = 'bimodal · flame graph';
    return;
  }
  document.title = `bimodal · sandwich ${name}`;
  ui.swName.textContent = name;
  const root = graph.root;
  if (!root || !profile) {
    built = null;
    ui.swStats.textContent = '';
    ui.swBody.hidden = true;
    ui.swMessage.hidden = true;
    return;
  }
  if (built?.root !== root || built.name !== name) {
    built = { root, name, sandwich: sandwichOf(root, name) };
    showSandwich(built.sandwich, profile);
  }
}

function showSandwich(sw: Sandwich | null, p: ApiFlamegraph): void {
  const total = p.total || p.root.value;
  if (!sw) {
    ui.swStats.textContent = '';
    ui.swBody.hidden = true;
    ui.swMessage.hidden = false;
    ui.swMessage.textContent = `${state.sandwich} does not occur in this flame graph (${p.event}, ${state.node || 'all nodes'}, ${RANGE_LABELS[state.range].toLowerCase()}).`;
    for (const g of [callersGraph, calleesGraph]) g.setData(null, p.unit, total);
    return;
  }
  ui.swMessage.hidden = true;
  ui.swBody.hidden = false;
  const figure = (label: string, v: number): HTMLElement => {
    const span = el('span', 'sw-figure');
    span.append(`${label} `, el('b', '', formatValue(v, p.unit)), ` (${formatPercent(v, total)} of total)`);
    return span;
  };
  const where = [sw.kind, sw.module].filter((s) => s !== '').join(' · ');
  const nested = sw.frames - sw.outermost;
  const frames = `${formatCount(sw.frames)} ${sw.frames === 1 ? 'frame' : 'frames'}${nested > 0 ? `, ${formatCount(nested)} of them recursive (counted once)` : ''}`;
  ui.swStats.replaceChildren(figure('self', sw.self), ' · ', figure('total', sw.total), ` · ${frames} · ${where}`);
  const share = (f: Frame): readonly (readonly [string, string])[] => [[`of ${sw.name}`, formatPercent(f.value, sw.total)]];
  callersGraph.setData(sw.callers, p.unit, total);
  calleesGraph.setData(sw.callees, p.unit, total);
  for (const g of [callersGraph, calleesGraph]) {
    g.setTooltipRows(share);
    g.setMatcher(currentMatcher());
  }
  applySandwichZoom();
  renderSearchStatus();
}

// ---------------------------------------------------------------------------------------------
// Wiring

// Top functions beside the graph: a row click searches for that function, its ⇅ opens its
// sandwich.
new TopFunctions(
  graph,
  (query) => {
    ui.search.value = query;
    onSearchInput();
  },
  openSandwich,
).mountBeside(ui.graphColumn);

function applyStateToControls(): void {
  renderNodeLink(state);
  ui.range.value = state.range;
  ui.search.value = state.q;
  graph.setOrientation(state.orient);
  ui.orient.textContent = state.orient === 'flame' ? 'Icicle' : 'Flame';
  ui.orient.setAttribute('aria-pressed', String(state.orient === 'flame'));
  if (nodes.length > 0 || state.node) renderNodeOptions();
  if (events.length > 0) renderEventOptions();
}

ui.orient.addEventListener('click', () => {
  state.orient = state.orient === 'flame' ? 'icicle' : 'flame';
  saveState(state, true);
  applyStateToControls();
});

ui.node.addEventListener('change', () => {
  state.node = ui.node.value;
  saveState(state, true);
  renderNodeMeta();
  void reloadGraph();
});
ui.event.addEventListener('change', () => {
  state.event = ui.event.value;
  saveState(state, true);
  void reloadGraph();
});
ui.range.addEventListener('change', () => {
  state.range = isRange(ui.range.value) ? ui.range.value : DEFAULT_RANGE;
  saveState(state, true);
  void reloadGraph();
});
ui.refresh.addEventListener('click', () => {
  void loadAll();
});
ui.resetZoom.addEventListener('click', () => {
  zoomTo(null, true);
});
ui.sandwichOpen.addEventListener('click', () => {
  openSandwich(ui.sandwichOpen.dataset.name ?? '');
});
ui.swClose.addEventListener('click', closeSandwich);
ui.search.addEventListener('input', onSearchInput);
ui.search.addEventListener('keydown', (e) => {
  if (e.key === 'Escape') {
    ui.search.value = '';
    onSearchInput();
  }
});
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.key === 'Escape' && !(t instanceof HTMLInputElement || t instanceof HTMLSelectElement)) {
    if (state.sandwich) closeSandwich();
    else zoomTo(null, true);
  }
  if (e.key === '/' && !(t instanceof HTMLInputElement)) {
    e.preventDefault();
    ui.search.focus();
  }
});
page.onNavigate((restored) => {
  const prev = state;
  state = restored;
  applyStateToControls();
  if (prev.node !== state.node || prev.event !== state.event || prev.range !== state.range) {
    renderSandwich();
    void reloadGraph();
    return;
  }
  applyMatcher();
  renderSandwich();
  applySandwichZoom();
  const root = graph.root;
  if (root) {
    const zoom = resolvePath(root, state.zoom);
    graph.setZoom(zoom);
    renderToolbar(zoom);
  }
  renderSearchStatus();
});

renderRangeOptions();
applyStateToControls();
renderSandwich();
void loadAll();
