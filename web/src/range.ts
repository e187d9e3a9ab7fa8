// The time ranges every page offers, one definition for all of them.

export const RANGES = { '5m': 300, '15m': 900, '1h': 3600, '6h': 21600, '24h': 86400 } as const;
export type RangeKey = keyof typeof RANGES;
export const RANGE_LABELS: Record<RangeKey, string> = {
  '5m': 'Last 5 minutes',
  '15m': 'Last 15 minutes',
  '1h': 'Last 1 hour',
  '6h': 'Last 6 hours',
  '24h': 'Last 24 hours',
};
export const DEFAULT_RANGE: RangeKey = '15m';

export function isRange(s: string | null): s is RangeKey {
  return s !== null && Object.hasOwn(RANGES, s);
}

/** The options of a range <select>, in order. */
export function rangeOptions(): HTMLOptionElement[] {
  return (Object.keys(RANGES) as RangeKey[]).map((k) => new Option(RANGE_LABELS[k], k));
}

/** A fixed window in unix seconds (an alert's link), instead of a range ending now. */
export interface FixedWindow {
  from: number;
  to: number;
}

/** The option of a range <select> that stands for a fixed window. */
export const FIXED_OPTION = 'fixed';

/** `from` and `to` of a URL (unix seconds), when both are there and make a window. */
export function readFixed(p: URLSearchParams): FixedWindow | null {
  const from = Number(p.get('from'));
  const to = Number(p.get('to'));
  return p.has('from') && p.has('to') && Number.isInteger(from) && Number.isInteger(to) && from > 0 && to > from
    ? { from, to }
    : null;
}

/** Writes a view's time into its URL: `from` and `to` for a fixed window, else `range`. */
export function writeWindow(p: URLSearchParams, range: RangeKey, fixed: FixedWindow | null): void {
  if (fixed) {
    p.set('from', String(fixed.from));
    p.set('to', String(fixed.to));
  } else {
    p.set('range', range);
  }
}

/** The window a view queries: the fixed one, or the last `range` up to now. */
export function windowSeconds(range: RangeKey, fixed: FixedWindow | null): { from: number; to: number } {
  if (fixed) return fixed;
  const to = Math.floor(Date.now() / 1000) + 1;
  return { from: to - RANGES[range], to };
}

/** Fills a range <select>: every range, and the fixed window first when there is one. */
export function fillRangeSelect(select: HTMLSelectElement, range: RangeKey, fixed: FixedWindow | null): void {
  const options = rangeOptions();
  if (fixed) {
    const at = (s: number) =>
      new Date(s * 1000).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
    options.unshift(new Option(`${at(fixed.from)} – ${at(fixed.to)}`, FIXED_OPTION));
  }
  select.replaceChildren(...options);
  select.value = fixed ? FIXED_OPTION : range;
}
