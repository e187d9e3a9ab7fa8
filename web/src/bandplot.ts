// The band metric as a strip plot (one dot per node, log scale, the two bands shaded on either
// side of their threshold) and which band a node is in: shared by the fleet and compare views.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { ApiCompare, ApiMetric } from './api';
import { formatFigure as figure } from './format';

export type Band = 'slow' | 'fast' | 'high' | 'low' | '';

/** A two-band split of the nodes by one metric: the comparison's, or a metric's own. */
export interface Split {
  metric: string;
  threshold: number;
  /** Which side is slow; null when the metric does not say (CPU load). */
  slow: 'high' | 'low' | null;
  p_value: number;
  /** Each node's side, looked up once per node drawn or listed (a fleet of 100,000 nodes
   * searched its sides' lists for every node: 10^10 comparisons); the sides' lists are not
   * kept beside it. */
  side: ReadonlyMap<string, 'low' | 'high'>;
}

function sides(low: readonly string[], high: readonly string[]): Map<string, 'low' | 'high'> {
  const side = new Map<string, 'low' | 'high'>();
  for (const n of low) side.set(n, 'low');
  for (const n of high) side.set(n, 'high');
  return side;
}

/** The split the comparison chose (its band metric), if it found bands. */
export function chosenSplit(a: ApiCompare): Split | null {
  const b = a.bands;
  if (!b) return null;
  return {
    metric: b.metric,
    threshold: b.threshold,
    slow: b.slow,
    p_value: b.p_value,
    side: sides(b.low, b.high),
  };
}

/** A metric's own split, when band detection found one in it. */
export function metricSplit(m: ApiMetric): Split | null {
  const b = m.bands;
  if (!b.found || !b.low || !b.high || b.threshold === undefined) return null;
  const slow = m.direction === 'higher_is_slower' ? 'high' : m.direction === 'lower_is_slower' ? 'low' : null;
  return {
    metric: m.name,
    threshold: b.threshold,
    slow,
    p_value: b.p_value ?? 1,
    side: sides(b.low, b.high),
  };
}

export function bandOf(split: Split | null, node: string): Band {
  if (!split) return '';
  const side = split.side.get(node) ?? '';
  if (side === '' || split.slow === null) return side;
  return side === split.slow ? 'slow' : 'fast';
}

/** The metric tested closest to a split when none was found (smallest p-value), else the first. */
export function closestMetric(a: ApiCompare): ApiMetric | undefined {
  const tested = a.metrics.filter((m) => m.bands.best);
  tested.sort((x, y) => (x.bands.best?.p_value ?? 1) - (y.bands.best?.p_value ?? 1));
  return tested[0] ?? a.metrics[0];
}

/** Why a metric has no bands, or null when it has. */
export function metricReason(m: ApiMetric): string | null {
  return m.bands.found ? null : `no bands in ${m.name}: ${m.bands.reason ?? 'not tested'}`;
}

/** Deterministic jitter: a node keeps its height from one load to the next. */
function jitter(name: string): number {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return 0.15 + 0.7 * ((h % 1000) / 1000);
}

export const FAST_COLOUR = '#3b7dd8';
export const SLOW_COLOUR = '#d8453b';

/**
 * Draws `metric` of the comparison's nodes into `box` (replacing what was there), the bands of
 * `split` shaded when it splits this metric. Returns the plot (to resize or destroy) and a note
 * saying what is drawn.
 */
export function drawStrip(
  box: HTMLElement,
  a: ApiCompare,
  metric: ApiMetric,
  split: Split | null,
  height = 150,
): { plot: uPlot; note: string } {
  box.replaceChildren();
  const points = a.nodes
    .map((node, i) => ({ node, v: metric.values[i] }))
    .filter((p): p is { node: string; v: number } => typeof p.v === 'number' && Number.isFinite(p.v));
  const positive = points.filter((p) => p.v > 0).map((p) => p.v);
  // Folded, not spread into Math.min: V8 refuses a call of some 120,000 arguments or more.
  const floor = positive.length > 0 ? positive.reduce((m, v) => Math.min(m, v), Infinity) / 2 : 1;
  points.sort((x, y) => x.v - y.v);
  const xs = points.map((p) => Math.max(p.v, floor));
  const bands = split?.metric === metric.name ? split : null;
  const ys = (want: Band) => points.map((p) => (bandOf(bands, p.node) === want ? jitter(p.node) : null));
  const slowName = bands?.slow ? 'slow' : 'high';
  const fastName = bands?.slow ? 'fast' : 'low';
  const data: uPlot.AlignedData = bands ? [xs, ys(fastName), ys(slowName)] : [xs, points.map((p) => jitter(p.node))];
  const dots = (colour: string): uPlot.Series => ({
    stroke: colour,
    fill: colour,
    paths: () => null,
    points: { show: true, size: 9, space: 0, fill: colour, stroke: colour },
  });
  const series: uPlot.Series[] = bands
    ? [{ label: metric.unit }, { label: `${fastName} band`, ...dots(FAST_COLOUR) }, { label: `${slowName} band`, ...dots(SLOW_COLOUR) }]
    : [{ label: metric.unit }, { label: 'nodes', ...dots('#6b7280') }];
  // The band below the threshold is "fast" unless high values are the fast ones.
  const lowIsFast = bands?.slow !== 'low';
  const threshold = bands?.threshold;
  const plot = new uPlot(
    {
      width: Math.max(320, box.clientWidth || 800),
      height,
      // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- Distr.Logarithmic is an ambient const enum, which verbatimModuleSyntax forbids reading
      scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      axes: [{ label: metric.unit }, { show: false }],
      // The bands are named in the note below the plot.
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      series,
      hooks: {
        draw: [
          (u) => {
            if (threshold === undefined) return;
            const x = u.valToPos(threshold, 'x', true);
            const { top, height: h, left, width: w } = u.bbox;
            const ctx = u.ctx;
            ctx.save();
            ctx.fillStyle = lowIsFast ? 'rgba(59,125,216,0.07)' : 'rgba(216,69,59,0.07)';
            ctx.fillRect(left, top, x - left, h);
            ctx.fillStyle = lowIsFast ? 'rgba(216,69,59,0.07)' : 'rgba(59,125,216,0.07)';
            ctx.fillRect(x, top, left + w - x, h);
            ctx.strokeStyle = '#9ca3af';
            ctx.setLineDash([4, 4]);
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, top + h);
            ctx.stroke();
            ctx.restore();
          },
        ],
      },
    },
    data,
    box,
  );
  const zeros = points.length - positive.length;
  const notes = [
    `${points.length} of ${a.nodes.length} nodes measured`,
    zeros > 0 ? `${zeros} at zero drawn at ${figure(floor)}` : '',
    bands
      ? `blue: the ${fastName} band, red: the ${slowName} band, dashed: the threshold between them (${figure(bands.threshold)})`
      : (metricReason(metric) ?? ''),
  ];
  return { plot, note: notes.filter((n) => n !== '').join(' · ') };
}
