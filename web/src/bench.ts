// Benchmark harness of the flame graph, for test/flame-bench.mjs; not part of the app's pages.
// flame-bench.mjs bundles it (with test/flame-bench.html) by Vite's production build, opens it in
// Chromium and calls window.__flameBench.run(tree, options) with a synthetic API tree. Every
// step is timed with performance.now() and ends with a 1-pixel getImageData of the canvas it
// painted, which waits for the drawing itself, not only for its commands to be recorded.

import './style.css';
import type { ApiFrame } from './api';
import { FlameGraph, buildTree, compileMatcher, type Frame } from './flamegraph';
import { TopFunctions } from './topfunctions';

export interface BenchOptions {
  /** Timed repetitions per step (after one untimed warm-up). */
  reps: number;
  /** Graph width, CSS px. */
  width: number;
  /** Only tree building and first draw (the scaling rows); else every step. */
  firstDrawOnly: boolean;
}

export interface BenchResult {
  frames: number;
  maxDepth: number;
  /** Frames drawn (at least 0.5 px wide) at the root zoom. */
  drawn: number;
  /** Milliseconds per repetition, by step. */
  times: Record<string, number[]>;
}

declare global {
  interface Window {
    __flameBench?: { run(tree: ApiFrame, opts: BenchOptions): BenchResult };
  }
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

/** The frame at depth 3 to 6 whose value is closest to `share` of the root's. */
function pickFrame(root: Frame, share: number): Frame {
  let best = root;
  let bestDist = Infinity;
  const stack: Frame[] = [root];
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

function run(api: ApiFrame, opts: BenchOptions): BenchResult {
  const host = byId('graph');
  const tooltip = byId('tooltip');
  host.style.width = `${opts.width}px`;
  const times: Record<string, number[]> = {};
  const time = (step: string, fn: () => void): void => {
    const t0 = performance.now();
    fn();
    const dt = performance.now() - t0;
    (times[step] ??= []).push(dt);
  };
  const repeat = (fn: (i: number) => void): void => {
    fn(-1); // warm-up, not recorded
    for (let i = 0; i < opts.reps; i++) fn(i);
  };
  const keep = (step: string, i: number, fn: () => void): void => {
    if (i >= 0) time(step, fn);
    else fn();
  };

  let tree = buildTree(api);
  repeat((i) => {
    keep('build tree', i, () => {
      tree = buildTree(api);
    });
  });

  // First draw: a new graph, its data, layout and paint (what loading a profile costs).
  let graph: FlameGraph | null = null;
  repeat((i) => {
    graph?.destroy();
    keep('first draw', i, () => {
      graph = new FlameGraph(host, tooltip, () => undefined);
      graph.setData(tree, 'nanoseconds', tree.root.value);
      graph.setMatcher(null);
      graph.render();
      flush(host.querySelector<HTMLCanvasElement>('canvas.fg-canvas'));
    });
  });
  const g = graph as FlameGraph | null;
  if (!g) throw new Error('no graph');
  const drawn = g.drawnFrames;
  const result = { frames: tree.count, maxDepth: tree.maxDepth, drawn, times };
  if (opts.firstDrawOnly) {
    g.destroy();
    return result;
  }
  const canvas = host.querySelector<HTMLCanvasElement>('canvas.fg-canvas');
  const overlay = host.querySelector<HTMLCanvasElement>('canvas.fg-overlay');
  const root = tree.root;

  // Zoom into a frame of about a tenth of the profile, and back out.
  const target = pickFrame(root, 0.1);
  repeat((i) => {
    keep('zoom in (a 10% frame)', i, () => {
      g.setZoom(target);
      flush(canvas);
    });
    keep('zoom out (to the root)', i, () => {
      g.setZoom(root);
      flush(canvas);
    });
  });

  // Hover: hit test, tooltip and outline, alternating between two frames so each move changes them.
  const spots = [pickFrame(root, 0.02), pickFrame(root, 0.05)].map((f) => {
    const r = g.locate(f.name);
    if (!r) throw new Error(`frame ${f.name} is not drawn`);
    return { x: r.x + r.w / 2, y: r.y + r.h / 2 };
  });
  const drawCanvas = canvas;
  if (!drawCanvas) throw new Error('no canvas');
  repeat((i) => {
    const at = spots[Math.abs(i) % 2] ?? { x: 0, y: 0 };
    keep('hover (hit test + tooltip)', i, () => {
      drawCanvas.dispatchEvent(new MouseEvent('mousemove', { clientX: at.x, clientY: at.y, bubbles: true }));
      flush(overlay);
    });
  });
  if (tooltip.hidden) throw new Error('hovering showed no tooltip');

  // Search over every frame: match, statistics, repaint with highlights.
  const queries = ['parse', '/::(Insert|Lookup)\\('];
  repeat((i) => {
    const q = queries[Math.abs(i) % 2] ?? '';
    keep('search (all frames) + repaint', i, () => {
      g.setMatcher(compileMatcher(q));
      g.matchStats();
      g.render();
      flush(canvas);
    });
  });
  g.setMatcher(null);
  g.render();

  // Resize: relayout and repaint at another width.
  repeat((i) => {
    keep('resize (relayout + repaint)', i, () => {
      host.style.width = `${i % 2 === 0 ? opts.width - 300 : opts.width}px`;
      g.render();
      flush(canvas);
    });
  });
  host.style.width = `${opts.width}px`;
  g.render();

  // The top-functions table following new data: per-name stats over all frames and its rows.
  const table = new TopFunctions(g, () => undefined);
  document.body.append(table.element);
  repeat((i) => {
    keep('top-functions table (stats + rows)', i, () => {
      g.setData(tree, 'nanoseconds', root.value);
      table.element.getBoundingClientRect(); // forces style and layout of the rows
    });
  });
  g.destroy();
  return result;
}

window.__flameBench = { run };
