#!/usr/bin/env node
// Browser benchmark of the canvas flame graph (src/flamegraph.ts) at 50,000 frames.
//
//   node test/flame-bench.mjs [--frames 50000] [--scale 5000,20000] [--reps 20] [--width 1400]
//                             [--dpr 1] [--chromium /usr/bin/chromium]
//
// Bundles src/bench.ts with test/flame-bench.html by Vite's production build (the same sources
// and build settings as dist/, into node_modules/.cache/flame-bench/, so dist/ ships no benchmark
// page), serves it to Debian's Chromium through playwright-core request routing (no port, no
// download), builds synthetic profiles (depth up to ~40, skewed fan-out, long C++-like names,
// kernel tails) and has the page time, with performance.now(): building the tree, the first draw,
// zooming into a frame and back, a hover, a search over all frames, a resize and the
// top-functions table, each over --reps repetitions after a warm-up; and the first draw at the
// --scale sizes. Prints Markdown tables of p50 / p95 milliseconds.

import { readFile } from 'node:fs/promises';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { build } from 'vite';

const here = dirname(fileURLToPath(import.meta.url));
const web = resolve(here, '..');
const { values: opts } = parseArgs({
  options: {
    frames: { type: 'string', default: '50000' },
    scale: { type: 'string', default: '5000,20000' },
    reps: { type: 'string', default: '20' },
    width: { type: 'string', default: '1400' },
    dpr: { type: 'string', default: '1' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
const frames = Number(opts.frames);
const sizes = [...opts.scale.split(',').map(Number).filter((n) => n > 0), frames];
const reps = Number(opts.reps);
const width = Number(opts.width);
const dpr = Number(opts.dpr);

// ---------------------------------------------------------------------------------------------
// Synthetic profiles

/** Deterministic pseudo-random numbers (mulberry32). */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function fnv(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

const NAMESPACES = ['std', 'absl::container_internal', 'folly', 'v8::internal', 'google::protobuf::internal', 'boost::asio::detail', 'app::storage', 'app::query::exec', 'app::net', 'tcmalloc', 'grpc_core', 'rocksdb'];
const CLASSES = [
  'BlockBasedTable',
  'Arena',
  'DBImpl',
  'HashTable<std::string, Entry*, std::hash<std::string>>',
  'vector<Row, std::allocator<Row>>',
  'Compiler',
  'Parser<Utf8Iterator>',
  'Executor',
  'Channel',
  'MemTable',
  'Reader',
  'CordRep',
  'raw_hash_set<FlatHashMapPolicy<unsigned long, Span*>>',
  'basic_string<char, std::char_traits<char>, std::allocator<char>>',
  'PipelineStage<Batch>',
  'ThreadPool::Worker',
];
const METHODS = ['operator()', 'Run', 'Get', 'Insert', 'Lookup', 'Flush', 'Compact', 'Parse', 'Visit', 'Encode', 'Decode', 'Dispatch', 'MaybeGrow', 'find_or_prepare_insert', 'emplace_back', 'ReadBlock', 'Seek', 'Next'];
const ARGS = ['', 'const Slice&', 'std::string_view, int', 'const ReadOptions&, const Slice&, std::string*', 'Node*', 'unsigned long', 'std::unique_ptr<Task, std::default_delete<Task>>&&', 'void*'];
const PROCS = ['api-server', 'query-engine', 'storage-node', 'envoy', 'java', 'postgres', 'node_exporter'];
const KERNEL = ['entry_SYSCALL_64', 'do_syscall_64', '__x64_sys_read', 'ksys_read', 'vfs_read', 'filemap_read', 'copy_page_to_iter', 'copyout'];

/** A C++-like name that depends on the parent and the branch, so stacks share prefixes and names repeat. */
function nameFor(parent, branch) {
  const h = fnv(`${parent}#${branch}`);
  const pick = (arr, k) => arr[Math.floor(h / k) % arr.length];
  return `${pick(NAMESPACES, 1)}::${pick(CLASSES, 13)}::${pick(METHODS, 211)}(${pick(ARGS, 4099)})`;
}

/** An API tree of exactly `target` frames (root included). */
function syntheticTree(target, seed = 7) {
  const rand = rng(seed);
  const root = { name: 'all', kind: 'root', value: 0, kids: new Map() };
  let count = 1;
  while (count < target) {
    const value = (1 + Math.floor(Math.pow(rand(), 5) * 4000)) * 1_000_000;
    const stack = [];
    const p = Math.floor(Math.pow(rand(), 1.6) * PROCS.length);
    const proc = PROCS[p];
    stack.push({ name: proc, kind: 'process' });
    const module = `/usr/bin/${proc}`;
    const depth = 2 + Math.floor(Math.pow(rand(), 1.3) * 36);
    let parent = proc;
    for (let d = 0; d < depth; d++) {
      // Skewed fan-out: low branches are far likelier, so a few callees dominate.
      const branch = Math.floor(Math.pow(rand(), 2.5) * (d < 3 ? 10 : 24));
      const name = nameFor(parent, branch);
      const jit = proc === 'java' && d > 2;
      stack.push({ name, kind: jit ? 'jit' : 'user', module: jit ? '[jit]' : module });
      parent = name;
    }
    if (rand() < 0.3) for (const k of KERNEL.slice(0, 2 + Math.floor(rand() * 6))) stack.push({ name: k, kind: 'kernel', module: '[kernel.kallsyms]' });
    root.value += value;
    let node = root;
    for (const f of stack) {
      const key = `${f.kind}\0${f.name}`;
      let child = node.kids.get(key);
      if (!child) {
        if (count >= target) break;
        child = { ...f, value: 0, kids: new Map() };
        node.kids.set(key, child);
        count++;
      }
      child.value += value;
      node = child;
    }
  }
  // Plain API frames, children sorted by name as the server answers them.
  const finish = (n) => {
    const out = { name: n.name, kind: n.kind, value: n.value };
    if (n.module) out.module = n.module;
    out.children = [...n.kids.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map(finish);
    return out;
  };
  return finish(root);
}

// ---------------------------------------------------------------------------------------------
// Build, serve, run

// Vite's own cache lives in node_modules/ too: linters and git ignore it.
const outDir = join(web, 'node_modules', '.cache', 'flame-bench');
await build({
  configFile: false,
  root: web,
  base: './',
  logLevel: 'warn',
  build: {
    outDir,
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    rollupOptions: { input: join(web, 'test', 'flame-bench.html') },
  },
});

const ORIGIN = 'http://flame-bench.invalid';
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
const browser = await chromium.launch({
  executablePath: opts.chromium,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', '--disable-component-update'],
});
let code = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: dpr });
  const errors = [];
  page.on('pageerror', (err) => errors.push(err.message));
  await page.route(`${ORIGIN}/**`, async (route) => {
    const path = normalize(join(outDir, decodeURIComponent(new URL(route.request().url()).pathname)));
    if (!path.startsWith(outDir + sep)) return route.fulfill({ status: 403 });
    try {
      await route.fulfill({ body: await readFile(path), contentType: TYPES[extname(path)] ?? 'application/octet-stream' });
    } catch {
      await route.fulfill({ status: 404 });
    }
  });
  await page.goto(`${ORIGIN}/test/flame-bench.html`);
  await page.waitForFunction(() => globalThis.__flameBench !== undefined, null, { timeout: 10000 });

  const results = new Map();
  for (const n of sizes) {
    const tree = syntheticTree(n);
    const r = await page.evaluate(({ tree, o }) => globalThis.__flameBench.run(tree, o), {
      tree,
      o: { reps, width, firstDrawOnly: n !== frames },
    });
    results.set(n, r);
  }
  if (errors.length > 0) throw new Error(`the page failed: ${errors.join('; ')}`);

  const pct = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
  };
  const ms = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const count = (x) => x.toLocaleString('en-US');
  const big = results.get(frames);

  console.log(
    `Flame graph (canvas), Chromium ${browser.version()} headless, software rendering (--disable-gpu), ` +
      `graph ${width} px wide, devicePixelRatio ${dpr}, ${reps} repetitions after a warm-up; ` +
      `${count(big.frames)} frames, depth ${big.maxDepth}, ${count(big.drawn)} drawn at the root zoom.\n`,
  );
  console.log(`| Operation (${count(big.frames)} frames) | p50 ms | p95 ms |`);
  console.log('|---|---:|---:|');
  for (const [step, xs] of Object.entries(big.times)) console.log(`| ${step} | ${ms(pct(xs, 50))} | ${ms(pct(xs, 95))} |`);
  console.log('\n| Frames | Drawn | Build tree p50 ms | First draw p50 ms | First draw p95 ms |');
  console.log('|---:|---:|---:|---:|---:|');
  for (const [n, r] of results) {
    const b = r.times['build tree'];
    const f = r.times['first draw'];
    console.log(`| ${count(r.frames)} | ${count(r.drawn)} | ${ms(pct(b, 50))} | ${ms(pct(f, 50))} | ${ms(pct(f, 95))} |`);
    if (n !== r.frames) throw new Error(`asked for ${n} frames, built ${r.frames}`);
  }
} catch (err) {
  code = 1;
  console.error(`FAIL: ${err?.stack ?? err}`);
} finally {
  await browser.close().catch(() => {});
}
process.exit(code);
