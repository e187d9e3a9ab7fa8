#!/usr/bin/env node
// Checks that test/mock-server.mjs answers as the real server does: the same routes asked of both,
// every answer's shape compared (each field's name and JSON type, in objects and arrays at any
// depth). The UI is developed and tested on the mock; a field the mock has and the server never
// sends, or a field the server sends that the mock lacks, or another type, is reported. `null`
// matches any type (a field may be null on one side and present on the other). Array elements are
// merged before comparing (a field any element has counts), so one node with facts and one
// without describe one shape. Fields that src/api.ts types as `Record<string, …>` are maps whose
// keys are data (labels, counters by name): their values are compared, not their keys.
//
//   node test/api-shapes.mjs --url REAL_SERVER_URL --node NODE [--event page_fault]
//
// NODE is a node of the real server with samples of --event, placement and counters (the
// end-to-end test's node). The mock is started here. Prints `ok: N routes, N fields agree` or one
// `FAIL:` line per difference, and exits 1 on any.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startMockServer } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    node: { type: 'string' },
    event: { type: 'string', default: 'page_fault' },
  },
});
if (!args.url || !args.node) {
  console.error('usage: api-shapes.mjs --url REAL_SERVER_URL --node NODE [--event EVENT]');
  process.exit(2);
}

/** The fields src/api.ts types as maps (`name: Record<string, …>`), the UI's types being the third
 * description of the API. */
const MAPS = new Set(
  [...readFileSync(join(here, '..', 'src', 'api.ts'), 'utf8').matchAll(/^\s+(\w+)\??: Record<string, /gm)].map((m) => m[1]),
);

/** The shape of a JSON value: a type name, or for objects their fields' shapes, for arrays and
 * maps their elements' shapes merged. `field` is the name the value is under. */
function shapeOf(v, field = '') {
  if (v === null) return 'null';
  if (Array.isArray(v)) return { array: v.map((x) => shapeOf(x)).reduce(merge, 'null') };
  if (typeof v === 'object' && MAPS.has(field)) return { map: Object.values(v).map((x) => shapeOf(x)).reduce(merge, 'null') };
  if (typeof v === 'object') return { object: Object.fromEntries(Object.entries(v).map(([k, x]) => [k, shapeOf(x, k)])) };
  return typeof v;
}

/** Two shapes as one: fields of either object, elements of either array; null gives way. */
function merge(a, b) {
  if (a === 'null') return b;
  if (b === 'null') return a;
  if (a.object && b.object) {
    const out = { ...a.object };
    for (const [k, s] of Object.entries(b.object)) out[k] = k in out ? merge(out[k], s) : s;
    return { object: out };
  }
  if (a.array && b.array) return { array: merge(a.array, b.array) };
  if (a.map && b.map) return { map: merge(a.map, b.map) };
  return a;
}

const kind = (s) => (typeof s === 'string' ? s : s.object ? 'object' : s.map ? 'map' : 'array');

/** Differences between the real answer's shape and the mock's, with their paths. */
function compare(real, mock, path, out) {
  if (real === 'null' || mock === 'null') return out;
  if (kind(real) !== kind(mock)) {
    out.push(`${path}: the server sends ${kind(real)}, the mock ${kind(mock)}`);
  } else if (real.object) {
    for (const k of Object.keys(real.object)) {
      if (!(k in mock.object)) out.push(`${path}.${k}: the server sends it, the mock does not`);
      else compare(real.object[k], mock.object[k], `${path}.${k}`, out);
    }
    for (const k of Object.keys(mock.object)) {
      if (!(k in real.object)) out.push(`${path}.${k}: the mock sends it, the server does not`);
    }
  } else if (real.array) {
    compare(real.array, mock.array, `${path}[]`, out);
  } else if (real.map) {
    compare(real.map, mock.map, `${path}{}`, out);
  }
  return out;
}

function fields(s) {
  if (typeof s === 'string') return 1;
  if (s.array) return fields(s.array);
  if (s.map) return fields(s.map);
  return Object.values(s.object).reduce((n, x) => n + fields(x), 0);
}

async function get(base, route) {
  const resp = await fetch(new URL(route, base));
  const body = await resp.text();
  if (!resp.ok) throw new Error(`GET ${new URL(route, base)}: ${resp.status} ${body.slice(0, 300)}`);
  return JSON.parse(body);
}

const { url: mockUrl, mock } = await startMockServer();
try {
  const to = Math.floor(Date.now() / 1000) + 1;
  const from = to - 3600;
  const window = `from=${from}&to=${to}`;
  const selector = encodeURIComponent(`{node="${args.node}"}`);
  // [route, the real server's question, the mock's (its nodes: web-1 has everything)]
  const routes = [
    ['nodes', '/api/v1/nodes', '/api/v1/nodes'],
    ['events', '/api/v1/events', '/api/v1/events'],
    [
      'flamegraph',
      `/api/v1/flamegraph?event=${args.event}&${window}&format=json&selector=${selector}`,
      `/api/v1/flamegraph?event=cpu&${window}&format=json&selector=${encodeURIComponent('{node="web-1"}')}`,
    ],
    ['placement', `/api/v1/placement?node=${encodeURIComponent(args.node)}&${window}`, `/api/v1/placement?node=web-1&${window}`],
    ['counters', `/api/v1/counters?node=${encodeURIComponent(args.node)}&${window}`, `/api/v1/counters?node=web-1&${window}`],
  ];
  const problems = [];
  let compared = 0;
  for (const [name, realRoute, mockRoute] of routes) {
    const real = shapeOf(await get(args.url, realRoute));
    const fake = shapeOf(await get(mockUrl, mockRoute));
    compared += fields(real);
    for (const p of compare(real, fake, name, [])) problems.push(p);
  }
  for (const p of problems) console.log(`FAIL: ${p}`);
  if (problems.length > 0) process.exitCode = 1;
  else console.log(`ok: ${routes.length} routes, ${compared} fields of the server's answers agree with the mock's`);
} finally {
  mock.kill();
}
