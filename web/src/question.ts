// The question the fleet and compare views answer: which nodes (a selector), over which window
// (the last `range`, or a fixed one), banded by which metric. One definition of how it is read
// from and written to a URL and the header's controls, for both views.

import {
  DEFAULT_RANGE,
  FIXED_OPTION,
  isRange,
  readFixed,
  windowSeconds,
  writeWindow,
  type FixedWindow,
  type RangeKey,
} from './range';

export interface Question {
  selector: string;
  range: RangeKey;
  /** A fixed window (an alert's link) instead of the last `range`. */
  fixed: FixedWindow | null;
  /** The metric the bands are found in; '' tests every metric. */
  metric: string;
}

export function readQuestion(p: URLSearchParams): Question {
  const range = p.get('range');
  return {
    selector: p.get('selector') ?? '{}',
    range: isRange(range) ? range : DEFAULT_RANGE,
    fixed: readFixed(p),
    metric: p.get('metric') ?? '',
  };
}

export function writeQuestion(p: URLSearchParams, q: Question): void {
  p.set('selector', q.selector);
  writeWindow(p, q.range, q.fixed);
  if (q.metric) p.set('metric', q.metric);
}

/** Whether two questions ask the same (so the answer need not be loaded again). */
export function sameQuestion(a: Question, b: Question): boolean {
  return (
    a.selector === b.selector &&
    a.range === b.range &&
    a.fixed?.from === b.fixed?.from &&
    a.fixed?.to === b.fixed?.to &&
    a.metric === b.metric
  );
}

/** The question as the header's controls ask it; a fixed window stays while it is chosen. */
export function questionFromControls(
  before: Question,
  selector: HTMLInputElement,
  range: HTMLSelectElement,
  metric: HTMLSelectElement,
): Question {
  const fixed = range.value === FIXED_OPTION ? before.fixed : null;
  return {
    selector: selector.value.trim() || '{}',
    range: fixed ? before.range : isRange(range.value) ? range.value : DEFAULT_RANGE,
    fixed,
    metric: metric.value,
  };
}

/** The question's window in unix seconds. */
export function questionSeconds(q: Question): { from: number; to: number } {
  return windowSeconds(q.range, q.fixed);
}
