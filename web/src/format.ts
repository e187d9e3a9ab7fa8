// Human-readable numbers for values, percents and times.

function sig3(x: number): string {
  if (x >= 100) return x.toFixed(0);
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

const DURATIONS: [number, string][] = [
  [86_400e9, 'd'],
  [3_600e9, 'h'],
  [60e9, 'min'],
  [1e9, 's'],
  [1e6, 'ms'],
  [1e3, 'µs'],
  [1, 'ns'],
];

/** Formats an event value in its unit, e.g. 1234567 nanoseconds → "1.23 ms". */
export function formatValue(value: number, unit: string): string {
  const u = unit.toLowerCase();
  if (u === 'nanoseconds' || u === 'ns') {
    if (value === 0) return '0 s';
    for (const [scale, suffix] of DURATIONS) {
      if (value >= scale) return `${sig3(value / scale)} ${suffix}`;
    }
    return `${sig3(value)} ns`;
  }
  if (u === 'bytes') {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = value;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return i === 0 ? `${v} B` : `${sig3(v)} ${units[i] ?? ''}`;
  }
  const n = formatCount(value);
  return u === 'count' || u === '' ? n : `${n} ${unit}`;
}

export function formatCount(value: number): string {
  if (value >= 1e9) return `${sig3(value / 1e9)}G`;
  if (value >= 1e6) return `${sig3(value / 1e6)}M`;
  if (value >= 1e4) return `${sig3(value / 1e3)}k`;
  return value.toLocaleString('en-US');
}

/** A figure as people read it: three significant digits, thousands grouped; '—' when absent. */
export function formatFigure(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1000) return formatCount(Math.round(v));
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toPrecision(3);
  return v.toPrecision(2);
}

/** Percent of `value` in `whole` with enough digits for small shares. */
export function formatPercent(value: number, whole: number): string {
  if (whole <= 0) return '0%';
  const p = (100 * value) / whole;
  if (p === 100 || p === 0) return `${p}%`;
  if (p >= 10) return `${p.toFixed(1)}%`;
  if (p >= 0.01) return `${p.toFixed(2)}%`;
  return '<0.01%';
}

export function formatAgo(iso: string | undefined, now: number = Date.now()): string {
  if (!iso) return 'never seen';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((now - t) / 1000);
  if (s < 5) return 'just now';
  if (s < 90) return `${s} s ago`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function formatTime(iso: string): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  return new Date(t).toLocaleString(undefined, {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  });
}

/** A p-value as read in the UI; "—" where there is none. */
export function formatP(p: number | undefined): string {
  if (p === undefined) return '—';
  return p < 0.0001 ? 'p < 0.0001' : `p = ${p.toPrecision(2)}`;
}

/** What a band's p-value was taken against: fleets drawn from the fleet's own shape smoothed to
 * one mode ("own_shape"), or, for small fleets, one-band fleets of log-normal noise or of
 * tails as heavy as the fleet's. */
export function formatNull(name: string | undefined): string {
  if (name === 'own_shape') {
    return ' (against fleets drawn from this fleet\'s own shape, smoothed to one mode)';
  }
  const df = /^student_t\((.+)\)$/.exec(name ?? '')?.[1];
  return df === undefined ? '' : ` (against one-band fleets with tails as heavy as this fleet's: Student's t, ${df} degrees of freedom)`;
}
