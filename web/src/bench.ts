// Benchmark harness of the flame graph, for test/flame-bench.mjs; not part of the app's pages.
// flame-bench.mjs bundles it (with test/flame-bench.html) by Vite's production build, opens it in
// Chromium and calls window.__flameBench.run(tree, options) with a synthetic API tree, once per
// renderer:
// - 'canvas': src/flamegraph.ts;
// - 'dom': the reference, the previous renderer (git 7a48d37), which drew every frame as an
//   absolutely positioned <div>. flame-bench.mjs writes its sources and CSS rules from git into
//   its cache, bundles them as a second entry and loads it into this page, where it registers as
//   window.__flameBenchDom; it is neither in src/ nor in dist/.
// Both take the same steps through the API they share (buildTree, new FlameGraph, setData,
// setZoom, setMatcher, matchStats, render). Every step is timed with performance.now() and ends
// when its drawing is done:
// - canvas: a 1-pixel getImageData of the canvas it painted, which waits for the drawing itself,
//   not only for its commands to be recorded;
// - DOM: reading the geometry of the layer and of its last element, which forces style and
//   layout, plus the main-thread rendering of the next frame (paint and commit of the new
//   elements), timed from its requestAnimationFrame callback to a task posted there, so the wait
//   for the frame itself is not counted. Every DOM repetition starts after a rendered frame.

import './style.css';
import type { ApiFrame } from './api';
import { FlameGraph, buildTree, compileMatcher, type Frame } from './flamegraph';
import { TopFunctions } from './topfunctions';

export type Renderer = 'canvas' | 'dom';

export interface BenchOptions {
  renderer: Renderer;
  /** Timed repetitions per step (after one untimed warm-up). */
  reps: number;
  /** Graph width, CSS px. */
  width: number;
}

export interface BenchResult {
  frames: number;
  maxDepth: number;
  /** Frames drawn (at least 0.5 px wide) at the root zoom. */
  drawn: number;
  /** Milliseconds per repetition, by step; a step the renderer cannot take is absent. */
  times: Record<string, number[]>;
}

type Matcher = ((name: string) => boolean) | null;

/** What the harness reads of a frame; both renderers' frames have it. */
interface BenchFrame<F> {
  readonly name: string;
  readonly value: number;
  readonly depth: number;
  readonly children: readonly F[];
}

interface BenchTree<F> {
  root: F;
  count: number;
  maxDepth: number;
}

/** The part of the FlameGraph API both renderers share. */
interface Graph<F> {
  setData(tree: BenchTree<F>, unit: string, total: number): void;
  setZoom(frame: F): void;
  setMatcher(matcher: Matcher): void;
  matchStats(): unknown;
  render(): void;
}

interface FlameModule<F, G> {
  buildTree(api: ApiFrame): BenchTree<F>;
  FlameGraph: new (host: HTMLElement, tooltip: HTMLElement, onZoom: (frame: F) => void) => G;
  compileMatcher(query: string): Matcher;
}

/** A frame of the DOM reference renderer, as far as the harness reads it. */
interface DomFrame {
  readonly name: string;
  readonly value: number;
  readonly depth: number;
  readonly children: readonly DomFrame[];
}

declare global {
  interface Window {
    __flameBench?: { run(tree: ApiFrame, opts: BenchOptions): Promise<BenchResult> };
    /** The DOM reference renderer of git 7a48d37, registered by flame-bench.mjs's second entry. */
    __flameBenchDom?: FlameModule<DomFrame, Graph<DomFrame>>;
  }
}

/** A renderer under test and how the harness ends its steps. */
interface Subject<F extends BenchFrame<F>, G extends Graph<F>> {
  mod: FlameModule<F, G>;
  /** Frames drawn at the current zoom. */
  drawn(g: G, host: HTMLElement): number;
  /** Ends a step, synchronously and within its time: waits until the drawing is done. */
  finish(host: HTMLElement): void;
  /** Main-thread milliseconds of the next frame's rendering, added to a drawing step's time. */
  nextFrame?: () => Promise<number>;
  /** Throws if the first draw is not what it should be. */
  check?: (host: HTMLElement) => void;
  /** Retires a graph; answers the (possibly new) host for the next one. */
  dispose(g: G, host: HTMLElement): Promise<HTMLElement>;
  /** Hover, where it is measured: answers the timed action of repetition i. */
  hover?: (g: G, host: HTMLElement, root: F) => (i: number) => void;
  /** The top-functions table, where it exists: the timed action and a clean-up. */
  topFunctions?: (g: G, tree: BenchTree<F>) => { step: () => void; done: () => void };
}

function byId(id: string): HTMLElement {
  const el = document.getElementById(id);
  if (!el) throw new Error(`flame-bench.html lacks #${id}`);
  return el;
}

/** Waits until `canvas` is painted (a read back flushes pending drawing). */
function flush(canvas: HTMLCanvasElement | null): void {
  canvas?.getContext('2d')?.getImageData(0, 0, 1, 1);
}

/**
 * The main-thread rendering of the next frame (style, layout, paint, commit), in ms: from its
 * requestAnimationFrame callback to a task posted there, which runs once that frame is rendered.
 */
function nextFrame(): Promise<number> {
  return new Promise((resolve) => {
    requestAnimationFrame(() => {
      const t0 = performance.now();
      const channel = new MessageChannel();
      channel.port1.onmessage = () => {
        resolve(performance.now() - t0);
      };
      channel.port2.postMessage(null);
    });
  });
}

/** The frame at depth 3 to 6 whose value is closest to `share` of the root's. */
function pickFrame<F extends BenchFrame<F>>(root: F, share: number): F {
  let best = root;
  let bestDist = Infinity;
  const stack: F[] = [root];
  for (let f = stack.pop(); f; f = stack.pop()) {
    if (f.depth >= 3) {
      const dist = Math.abs(f.value / root.value - share);
      if (dist < bestDist) {
        best = f;
        bestDist = dist;
      }
    }
    if (f.depth < 6) for (const c of f.children) stack.push(c);
  }
  return best;
}

const canvasSubject: Subject<Frame, FlameGraph> = {
  mod: { buildTree: (api) => buildTree(api), FlameGraph, compileMatcher },
  drawn: (g) => g.drawnFrames,
  finish: (host) => {
    flush(host.querySelector<HTMLCanvasElement>('canvas.fg-canvas'));
  },
  dispose: (g, host) => {
    g.destroy();
    return Promise.resolve(host);
  },
  // Hit test, tooltip and outline, alternating between two frames so each move changes them.
  hover: (g, host, root) => {
    const canvas = host.querySelector<HTMLCanvasElement>('canvas.fg-canvas');
    const overlay = host.querySelector<HTMLCanvasElement>('canvas.fg-overlay');
    if (!canvas) throw new Error('no canvas');
    const spots = [pickFrame(root, 0.02), pickFrame(root, 0.05)].map((f) => {
      const r = g.locate(f.name);
      if (!r) throw new Error(`frame ${f.name} is not drawn`);
      return { x: r.x + r.w / 2, y: r.y + r.h / 2 };
    });
    return (i) => {
      const at = spots[Math.abs(i) % 2] ?? { x: 0, y: 0 };
      canvas.dispatchEvent(new MouseEvent('mousemove', { clientX: at.x, clientY: at.y, bubbles: true }));
      flush(overlay);
    };
  },
  // Per-name stats over all frames and the table's rows, following new data.
  topFunctions: (g, tree) => {
    const table = new TopFunctions(g, () => undefined);
    document.body.append(table.element);
    return {
      step: () => {
        g.setData(tree, 'nanoseconds', tree.root.value);
        table.element.getBoundingClientRect(); // forces style and layout of the rows
      },
      done: () => {
        table.element.remove();
      },
    };
  },
};

/**
 * The DOM reference. Its graphs have no destroy(): a retired one stays observed by its own
 * ResizeObserver, so it is left on a detached host and the next graph gets a new one. Hover is
 * not measured: a synthetic mousemove cannot trigger the :hover rule that outlines the frame.
 */
function domSubject(): Subject<DomFrame, Graph<DomFrame>> {
  const mod = window.__flameBenchDom;
  if (!mod) throw new Error('the DOM reference renderer is not loaded (test/flame-bench.mjs loads it)');
  const layerOf = (host: HTMLElement): HTMLElement | null => host.querySelector<HTMLElement>(':scope > .layer');
  return {
    mod,
    drawn: (_g, host) => host.querySelectorAll(':scope > .layer > .frame').length,
    finish: (host) => {
      const layer = layerOf(host);
      layer?.getBoundingClientRect();
      layer?.lastElementChild?.getBoundingClientRect();
    },
    check: (host) => {
      const frame = host.querySelector(':scope > .layer > .frame');
      if (!frame || getComputedStyle(frame).position !== 'absolute') throw new Error('the DOM reference drew no frame with its CSS rules');
    },
    nextFrame,
    dispose: async (_g, host) => {
      const fresh = document.createElement('div');
      fresh.id = host.id;
      fresh.className = 'graph';
      fresh.style.width = host.style.width;
      host.replaceWith(fresh);
      await nextFrame(); // the old graph's observer sees its host leave and empties its layer
      await nextFrame();
      return fresh;
    },
  };
}

async function measure<F extends BenchFrame<F>, G extends Graph<F>>(api: ApiFrame, opts: BenchOptions, s: Subject<F, G>): Promise<BenchResult> {
  let host = byId('graph');
  const tooltip = byId('tooltip');
  host.style.width = `${opts.width}px`;
  const times: Record<string, number[]> = {};
  /** Runs `fn` (the step, ending with s.finish) and records its time unless i < 0 (warm-up). */
  const step = async (name: string, i: number, fn: () => void, draws = true): Promise<void> => {
    if (draws && s.nextFrame) await s.nextFrame(); // start from a rendered page
    const t0 = performance.now();
    fn();
    let dt = performance.now() - t0;
    if (draws && s.nextFrame) dt += await s.nextFrame();
    if (i >= 0) (times[name] ??= []).push(dt);
  };
  const repeat = async (fn: (i: number) => Promise<void>): Promise<void> => {
    for (let i = -1; i < opts.reps; i++) await fn(i); // i = -1: the warm-up, not recorded
  };

  let tree = s.mod.buildTree(api);
  await repeat(async (i) => {
    await step(
      'build tree',
      i,
      () => {
        tree = s.mod.buildTree(api);
      },
      false,
    );
  });
  const root = tree.root;

  // First draw: a new graph, its data, layout and paint (what loading a profile costs).
  let graph: G | null = null;
  await repeat(async (i) => {
    if (graph) host = await s.dispose(graph, host);
    await step('first draw', i, () => {
      graph = new s.mod.FlameGraph(host, tooltip, () => undefined);
      graph.setData(tree, 'nanoseconds', root.value);
      graph.setMatcher(null);
      graph.render();
      s.finish(host);
    });
  });
  const g = graph as G | null;
  if (!g) throw new Error('no graph');
  s.check?.(host);
  const result = { frames: tree.count, maxDepth: tree.maxDepth, drawn: s.drawn(g, host), times };

  // Zoom into a frame of about a tenth of the profile, and back out.
  const target = pickFrame(root, 0.1);
  await repeat(async (i) => {
    await step('zoom in (a 10% frame)', i, () => {
      g.setZoom(target);
      s.finish(host);
    });
    await step('zoom out (to the root)', i, () => {
      g.setZoom(root);
      s.finish(host);
    });
  });

  if (s.hover) {
    const move = s.hover(g, host, root);
    await repeat(async (i) => {
      await step('hover (hit test + tooltip)', i, () => {
        move(i);
      });
    });
    if (tooltip.hidden) throw new Error('hovering showed no tooltip');
  }

  // Search over every frame: match, statistics, repaint with highlights.
  const queries = ['parse', '/::(Insert|Lookup)\\('];
  await repeat(async (i) => {
    const q = queries[Math.abs(i) % 2] ?? '';
    await step('search (all frames) + repaint', i, () => {
      g.setMatcher(s.mod.compileMatcher(q));
      g.matchStats();
      g.render();
      s.finish(host);
    });
  });
  g.setMatcher(null);
  g.render();

  // Resize: relayout and repaint at another width.
  await repeat(async (i) => {
    await step('resize (relayout + repaint)', i, () => {
      host.style.width = `${i % 2 === 0 ? opts.width - 300 : opts.width}px`;
      g.render();
      s.finish(host);
    });
  });
  host.style.width = `${opts.width}px`;
  g.render();

  if (s.topFunctions) {
    const table = s.topFunctions(g, tree);
    await repeat(async (i) => {
      await step('top-functions table (stats + rows)', i, table.step, false);
    });
    table.done();
  }
  await s.dispose(g, host);
  return result;
}

function run(api: ApiFrame, opts: BenchOptions): Promise<BenchResult> {
  return opts.renderer === 'dom' ? measure(api, opts, domSubject()) : measure(api, opts, canvasSubject);
}

window.__flameBench = { run };
