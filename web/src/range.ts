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
