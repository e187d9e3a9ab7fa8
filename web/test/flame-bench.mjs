#!/usr/bin/env node
// Browser benchmark of the canvas flame graph (src/flamegraph.ts) against its reference, the
// previous DOM renderer (git 7a48d37: one absolutely positioned <div> per frame), in one run.
//
//   node test/flame-bench.mjs [--frames 50000] [--scale 5000,20000] [--reps 20] [--width 1400]
//                             [--dpr 1] [--chromium /usr/bin/chromium]
//
// Writes the reference's sources (`git show 7a48d37:web/src/…`: flamegraph.ts, format.ts,
// api.ts) and its CSS rules (.layer, .frame, .merged, .searching of the old style.css) into
// node_modules/.cache/flame-bench/dom-7a48d37/, with an entry that registers it on the page, so
// neither src/ nor dist/ holds it. Bundles src/bench.ts with test/flame-bench.html, and that
// entry, by Vite's production build (the same settings as dist/, into
// node_modules/.cache/flame-bench/dist/), serves them to Debian's Chromium through playwright-core
// request routing (no port, no download), builds synthetic profiles (depth up to ~40, skewed
// fan-out, long C++-like names, kernel tails) of each --scale size and --frames, and has the page
// time both renderers on the same tree, each step over --reps repetitions after a warm-up, with
// performance.now(): building the tree, the first draw, zooming into a frame and back, a hover, a
// search over all frames, a resize and the top-functions table (the last two canvas only: the
// DOM renderer's outline on hover is a CSS :hover rule, which a synthetic event cannot trigger,
// and it had no such table). Canvas steps end with a read back of the canvas; DOM steps with a
// forced layout plus the next frame's main-thread rendering (see src/bench.ts). Prints one
// Markdown table per size of p50 / p95 milliseconds, canvas and DOM side by side.

import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
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

// The reference: the DOM renderer as it was at REF, from git, into the cache (Vite's own cache lives
// in node_modules/ too: linters and git ignore it).
const REF = '7a48d37';
const cache = join(web, 'node_modules', '.cache', 'flame-bench');
const refDir = join(cache, `dom-${REF}`);
const outDir = join(cache, 'dist');
const repo = resolve(web, '..');
const gitShow = (path) => execFileSync('git', ['-C', repo, 'show', `${REF}:${path}`], { encoding: 'utf8', maxBuffer: 16 << 20 });
await mkdir(refDir, { recursive: true });
for (const file of ['flamegraph.ts', 'format.ts', 'api.ts']) await writeFile(join(refDir, file), gitShow(`web/src/${file}`));
// Its own rules only (from .layer to the tooltip's); the page's style.css has the rest (.graph,
// .tooltip, --row, --match), which the DOM renderer shared with the canvas one.
const oldCss = gitShow('web/src/style.css');
const cssFrom = oldCss.indexOf('\n.layer {');
const cssTo = oldCss.indexOf('\n/* Tooltip', cssFrom);
if (cssFrom < 0 || cssTo < 0) throw new Error(`no .layer … .frame.match rules in ${REF}:web/src/style.css`);
await writeFile(join(refDir, 'flamegraph-dom.css'), oldCss.slice(cssFrom + 1, cssTo));
await writeFile(
  join(refDir, 'entry.js'),
  `// Written by test/flame-bench.mjs: the DOM flame graph of git ${REF}, the benchmark's reference.
import css from './flamegraph-dom.css?inline';
import { FlameGraph, buildTree, compileMatcher } from './flamegraph.ts';

const style = document.createElement('style');
style.textContent = css;
document.head.append(style);
window.__flameBenchDom = { FlameGraph, buildTree, compileMatcher };
`,
);

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
    rollupOptions: {
      input: { bench: join(web, 'test', 'flame-bench.html'), 'dom-reference': join(refDir, 'entry.js') },
      output: { entryFileNames: 'assets/[name].js' },
    },
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
  await page.addScriptTag({ url: `${ORIGIN}/assets/dom-reference.js`, type: 'module' });
  await page.waitForFunction(() => globalThis.__flameBench !== undefined && globalThis.__flameBenchDom !== undefined, null, { timeout: 10000 });

  // Both renderers on the same tree, one after the other, size by size.
  const results = new Map();
  for (const n of sizes) {
    const tree = syntheticTree(n);
    const r = {};
    for (const renderer of ['canvas', 'dom']) {
      r[renderer] = await page.evaluate(({ tree, o }) => globalThis.__flameBench.run(tree, o), { tree, o: { renderer, reps, width } });
      if (r[renderer].frames !== n) throw new Error(`asked for ${n} frames, the ${renderer} run built ${r[renderer].frames}`);
    }
    results.set(n, r);
  }
  if (errors.length > 0) throw new Error(`the page failed: ${errors.join('; ')}`);

  const pct = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
  };
  const ms = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const count = (x) => x.toLocaleString('en-US');
  const cells = (xs) => (xs ? [ms(pct(xs, 50)), ms(pct(xs, 95))] : ['n/a', 'n/a']);
  const ratio = (a, b) => (a && b ? `${(pct(b, 50) / pct(a, 50)).toFixed(1)}×` : 'n/a');

  console.log(
    `Flame graph: canvas (src/flamegraph.ts) against the DOM reference (git ${REF}, one <div> per frame), ` +
      `Chromium ${browser.version()} headless, software rendering (--disable-gpu), graph ${width} px wide, ` +
      `devicePixelRatio ${dpr}, ${reps} repetitions after a warm-up. A canvas step ends with a 1-pixel read back ` +
      `of the canvas; a DOM step with a forced layout plus the next frame's main-thread rendering (paint, commit), ` +
      `not the wait for that frame. n/a: not measured the same way (hover: the DOM outline is a CSS :hover rule) ` +
      `or no such part (the top-functions table is newer).`,
  );
  for (const [n, { canvas, dom }] of results) {
    console.log(
      `\n${count(n)} frames, depth ${canvas.maxDepth}; drawn at the root zoom: canvas ${count(canvas.drawn)}, DOM ${count(dom.drawn)} elements of class frame.\n`,
    );
    console.log(`| Operation (${count(n)} frames) | canvas p50 ms | canvas p95 ms | DOM p50 ms | DOM p95 ms | DOM / canvas p50 |`);
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const step of new Set([...Object.keys(canvas.times), ...Object.keys(dom.times)])) {
      const a = canvas.times[step];
      const b = dom.times[step];
      console.log(`| ${step} | ${[...cells(a), ...cells(b)].join(' | ')} | ${ratio(a, b)} |`);
    }
  }
} catch (err) {
  code = 1;
  console.error(`FAIL: ${err?.stack ?? err}`);
} finally {
  await browser.close().catch(() => {});
}
process.exit(code);
