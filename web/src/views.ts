// The views of the UI and the header's links between them, one definition for every page: each
// link carries what the other view can use of this one's state (nodes, range, event), so moving
// between views keeps the question asked.

export type View = 'fleet' | 'compare' | 'flame' | 'node' | 'alerts';

/** What a page knows that other views can start from; every field optional. */
export interface ViewContext {
  /** Nodes as a selector (fleet, compare). */
  selector?: string;
  /** One node (flame graph, node view). */
  node?: string;
  range?: string;
  event?: string;
  /** The metric the bands are found in (fleet, compare). */
  metric?: string;
}

const VIEWS: { view: View; label: string; path: string; title: string; keys: (keyof ViewContext)[] }[] = [
  { view: 'fleet', label: 'Fleet', path: './fleet.html', title: 'Nodes, their bands and their metrics', keys: ['selector', 'range', 'metric'] },
  { view: 'compare', label: 'Compare', path: './compare.html', title: 'What differs between the slow and the fast band', keys: ['selector', 'range', 'metric'] },
  { view: 'flame', label: 'Flame graph', path: './', title: 'The flame graph of a node or of all nodes', keys: ['node', 'range', 'event'] },
  { view: 'node', label: 'Node', path: './node.html', title: 'One node: NUMA topology, event sources, memory placement, counters', keys: ['node', 'range'] },
  { view: 'alerts', label: 'Alerts', path: './alerts.html', title: 'Alerts firing and resolved', keys: ['range'] },
];

/** `{node="x"}` names one node: the views of one node can use it. */
function singleNode(selector: string | undefined): string | undefined {
  const m = /^\{\s*node\s*=\s*"((?:[^"\\]|\\.)*)"\s*\}$/.exec(selector ?? '');
  return m?.[1]?.replace(/\\(.)/g, '$1');
}

/** The link to `view` from a page whose state is `ctx`. */
export function viewHref(view: View, ctx: ViewContext): string {
  const v = VIEWS.find((x) => x.view === view);
  if (!v) return './';
  const full: ViewContext = { ...ctx };
  const one = singleNode(ctx.selector);
  if (full.node === undefined && one !== undefined) full.node = one;
  const p = new URLSearchParams();
  for (const k of v.keys) {
    const value = full[k];
    if (value) p.set(k, value);
  }
  const q = p.toString();
  return q ? `${v.path}?${q}` : v.path;
}

/** Fills the header's `<nav class="views">` with links to every view, `current` marked. */
export function renderNav(current: View, ctx: ViewContext): void {
  const nav = document.querySelector('nav.views');
  if (!nav) throw new Error('the page has no <nav class="views">');
  const links = VIEWS.map((v) => {
    const a = document.createElement('a');
    a.textContent = v.label;
    a.title = v.title;
    a.id = `to-${v.view}`;
    a.href = viewHref(v.view, ctx);
    if (v.view === current) a.setAttribute('aria-current', 'page');
    return a;
  });
  nav.replaceChildren(...links);
}
