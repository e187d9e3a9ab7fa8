#!/usr/bin/env node
// A tiny stand-in for the bimodal server, for developing and testing the web UI without Rust or
// ClickHouse. It serves web/dist at "/" and canned answers to the /api/v1 routes of
// docs/design/001-http-api.md.
//
//   node test/mock-server.mjs [--port 8089] [--host 127.0.0.1] [--dist DIR]
//                             [--frames 20000] [--no-nodes] [--fail] [--samples-after SECONDS]
//                             [--verbose]
//
// Nodes and what their flame graphs answer:
//   web-1   a small realistic profile (process, user, kernel and JIT frames)
//   web-2   the same for cpu; no samples for page_fault
//   big-1   a synthetic tree of about --frames frames (default 20,000), deep recursion included
//   flaky   503 {"error": "storage unavailable: …"} (not listed in /nodes; select it by URL)
// Without a selector the flame graph merges web-1 and web-2.
// The node view (/placement, /counters, `facts` in /nodes): web-1 has two NUMA nodes, NICs, L3
// domains, counters every 10 s and a process whose .bss sits on the node its threads do not run
// on (a finding); web-2 one NUMA node, no placement and no counters; big-1 no facts; flaky
// answers 503 to both.
// --no-nodes     /nodes answers an empty list and every flame graph is empty
// --fail         every flame graph answers 503 with an error
// --samples-after S   flame graphs are empty for the first S seconds after start

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values: opts } = parseArgs({
  options: {
    port: { type: 'string', default: '8089' },
    host: { type: 'string', default: '127.0.0.1' },
    dist: { type: 'string', default: resolve(here, '..', 'dist') },
    frames: { type: 'string', default: '20000' },
    'no-nodes': { type: 'boolean', default: false },
    fail: { type: 'boolean', default: false },
    'samples-after': { type: 'string', default: '0' },
    verbose: { type: 'boolean', default: false },
  },
});
const started = Date.now();
const dist = resolve(opts.dist);

const EVENTS = [
  { name: 'cpu', unit: 'nanoseconds' },
  { name: 'off_cpu', unit: 'nanoseconds' },
  { name: 'page_fault', unit: 'count' },
];

function nodesList() {
  if (opts['no-nodes']) return [];
  const ago = (s) => new Date(Date.now() - s * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  return [
    { node: 'big-1', labels: { dataset: 'synthetic' }, first_seen: ago(86_000), last_seen: ago(3), facts: null },
    { node: 'web-1', labels: { zone: 'a', role: 'frontend' }, first_seen: ago(7200), last_seen: ago(2), agent_version: '0.1.0', facts: factsOf('web-1') },
    { node: 'web-2', labels: { zone: 'b' }, first_seen: ago(3600), last_seen: ago(600), agent_version: '0.1.0', facts: factsOf('web-2') },
  ];
}

// ---------------------------------------------------------------------------------------------
// The node view: facts, placement, counters

const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

function factsOf(node) {
  const two = node === 'web-1';
  const numa = two
    ? [
        { id: 0, cpus: [...range(0, 15), ...range(32, 47)], memory_bytes: 128 * 2 ** 30, distances: [10, 21] },
        { id: 1, cpus: [...range(16, 31), ...range(48, 63)], memory_bytes: 128 * 2 ** 30, distances: [21, 10] },
      ]
    : [{ id: 0, cpus: range(0, 7), memory_bytes: 32 * 2 ** 30, distances: [10] }];
  // A node without a PMU whose kernel refused the unwinder: its stacks walk frame pointers.
  const source = (s, encoding, attach, rejected = [], data_address = false) => ({
    source: s,
    encoding,
    attach,
    data_address,
    rejected,
    unwinding: s === '' ? '' : two ? 'kernel_tables' : 'frame_pointers',
    unwinding_reduced: two || s === '' ? '' : 'the kernel refused the unwinder unwind_perf_event: refused by the verifier: BPF program is too large',
  });
  const facts = {
    kernel_release: two ? '6.8.0-45-generic' : '5.15.0-105-generic',
    cpu: { vendor: 'GenuineIntel', model_name: 'Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz', family: 6, model: 106 },
    online_cpus: two ? 64 : 8,
    sockets: two ? 2 : 1,
    cores: two ? 32 : 8,
    threads_per_core: two ? 2 : 1,
    numa_nodes: numa,
    l3_domains: two ? [numa[0].cpus, numa[1].cpus] : [range(0, 7)],
    nics: two
      ? [
          { name: 'eth0', numa_node: 0 },
          { name: 'eth1', numa_node: 1 },
          { name: 'docker0', numa_node: -1 },
        ]
      : [{ name: 'ens5', numa_node: -1 }],
    numa_balancing: two ? 'normal' : '',
    transparent_hugepages: two ? 'always' : 'madvise',
    hardware_pmu: two ? 'cpu' : '',
    event_sources: {
      cpu: two
        ? source('cycles, 99 Hz per CPU', 'cycles', 'perf_event')
        : source('software cpu-clock, 99 Hz per CPU', 'cpu-clock', 'perf_event', ['hardware PMU events: this machine exposes no hardware PMU']),
      page_fault: source('software page-faults, 1 in 100', 'page-faults', 'perf_event', [], true),
      cache_miss: two
        ? source('LLC-load-misses, 1 in 10000', 'LLC-load-misses', 'perf_event', [], true)
        : source('', '', '', ['hardware PMU events: this machine exposes no hardware PMU', 'software: cache misses can only be counted by hardware; there is no software source']),
      numa_hint_fault: source('fentry/task_numa_fault', 'task_numa_fault', 'fentry'),
      page_migration: source('page migrations (raw_tp/mm_migrate_pages), weighted by pages moved', 'raw_tp/mm_migrate_pages', 'raw_tracepoint'),
      remote_access: two
        ? source('node-load-misses, 1 in 1000', 'node-load-misses', 'perf_event', ['mem-loads (PEBS) [cpu/mem-loads/]: the kernel refused the event (Operation not supported)'])
        : source('', '', '', ['kprobe/task_numa_fault: the kernel has no kprobe support']),
    },
  };
  facts.unwinding = two ? 'kernel_tables' : 'frame_pointers';
  facts.unwinding_reduced = Object.fromEntries(
    Object.entries(facts.event_sources)
      .filter(([, v]) => v.unwinding_reduced !== '')
      .map(([k, v]) => [k, v.unwinding_reduced]),
  );
  return facts;
}

function timeRange(params) {
  const to = Number(params.get('to') ?? Math.floor(Date.now() / 1000));
  const from = Number(params.get('from') ?? to - 3600);
  return { from, to };
}

function placement(params) {
  const node = params.get('node') ?? '';
  const { from, to } = timeRange(params);
  const out = { node, from: rfc3339(from), to: rfc3339(to), processes: [], findings: [] };
  if (node === 'flaky') return [503, { error: 'storage unavailable: ClickHouse did not answer in 5 s' }];
  if (node !== 'web-1') return [200, out];
  const time = to - 20;
  const m = (kind, path, start, size, pages, permissions = 'rw-p') => ({
    kind, path, start, end: start + size, permissions, pages_per_node: pages, page_size: 4096,
  });
  out.processes = [
    {
      time, pid: 4242, comm: 'scylla', executable: '/usr/bin/scylla', threads_per_node: { 0: 16 },
      mappings: [
        m('text', '/usr/bin/scylla', 0x5600_0000_0000, 96 << 20, { 0: 9000, 1: 400 }, 'r-xp'),
        m('bss', '/usr/bin/scylla', 0x5600_1000_0000, 512 << 20, { 0: 1200, 1: 98000 }),
        m('heap', '', 0x5600_2000_0000, 2 * 2 ** 30, { 0: 310000, 1: 12000 }),
        m('anon', '', 0x7f00_0000_0000, 64 << 20, { 0: 12000 }),
        m('stack', '[stack]', 0x7ffc_0000_0000, 8 << 20, { 0: 40 }),
        m('file', '/usr/lib/x86_64-linux-gnu/libc.so.6', 0x7f10_0000_0000, 2 << 20, {}, 'r--p'),
      ],
    },
    {
      time: time - 10, pid: 1000, comm: 'nginx', executable: '/usr/sbin/nginx', threads_per_node: { 0: 4, 1: 4 },
      mappings: [
        m('text', '/usr/sbin/nginx', 0x5500_0000_0000, 4 << 20, { 0: 500, 1: 480 }, 'r-xp'),
        m('heap', '', 0x5500_1000_0000, 256 << 20, { 0: 20000, 1: 18000 }),
      ],
    },
  ];
  out.findings = [
    {
      pid: 4242, comm: 'scylla', kind: 'bss', path: '/usr/bin/scylla', node: 1, thread_nodes: [0],
      remote_pages: 98000, total_pages: 99200,
      text: 'bss of scylla (/usr/bin/scylla): 98000 of 99200 pages on node 1, its threads ran on node(s) [0]',
    },
  ];
  return [200, out];
}

function counters(params) {
  const node = params.get('node') ?? '';
  const { from, to } = timeRange(params);
  const out = { node, from: rfc3339(from), to: rfc3339(to), counters: {} };
  if (node === 'flaky') return [503, { error: 'storage unavailable: ClickHouse did not answer in 5 s' }];
  if (node !== 'web-1') return [200, out];
  const step = 10;
  const start = Math.max(from, to - 3600);
  const series = {
    reported_ms: () => step * 1000,
    numa_hint_faults: (i) => Math.round(4000 + 3000 * Math.sin(i / 8)),
    numa_hint_faults_local: (i) => Math.round(2500 + 2000 * Math.sin(i / 8)),
    numa_pages_migrated: (i) => (i % 6 === 0 ? 1800 : 0),
    pgfault: (i) => 120000 + (i % 13) * 4000,
    pgmajfault: () => 0,
    context_switches: (i) => 90000 + (i % 7) * 3000,
    cpu_busy_ns: (i) => (30 + (i % 10)) * step * 1e9,
    cpu_total_ns: () => 64 * step * 1e9,
    samples_cpu: (i) => 60000 + (i % 5) * 100,
  };
  for (const [name, f] of Object.entries(series)) {
    const points = [];
    for (let t = start - (start % step), i = 0; t < to; t += step, i++) {
      const value = f(i);
      // The store keeps no zero rows once merged.
      if (value !== 0) points.push({ time: rfc3339(t), value });
    }
    if (points.length > 0) out.counters[name] = points;
  }
  return [200, out];
}

// ---------------------------------------------------------------------------------------------
// Trees

/** Folded stacks; a frame suffixed [k] is kernel, [j] JIT; the first frame is the process. */
const WEB_STACKS = `
fixture;main;run_loop;compute_hash;sha256_block 4200
fixture;main;run_loop;compute_hash;sha256_block;memcpy 380
fixture;main;run_loop;compute_hash;finalize 240
fixture;main;run_loop;parse_input;serde_json::de::from_str 1300
fixture;main;run_loop;parse_input;alloc::raw_vec::RawVec<T,A>::grow_one;realloc 260
fixture;main;run_loop;write_output;__libc_write;entry_SYSCALL_64[k];do_syscall_64[k];__x64_sys_write[k];ksys_write[k];vfs_write[k];ext4_file_write_iter[k] 900
fixture;main;run_loop;write_output;__libc_write;entry_SYSCALL_64[k];do_syscall_64[k];__x64_sys_write[k];ksys_write[k];vfs_write[k];fsnotify[k] 120
fixture;main;run_loop;sleep_until;clock_nanosleep;entry_SYSCALL_64[k];do_syscall_64[k];__x64_sys_clock_nanosleep[k];hrtimer_nanosleep[k];schedule[k] 150
fixture;[unknown] 40
nginx;main;ngx_master_process_cycle;ngx_worker_process_cycle;ngx_process_events_and_timers;ngx_epoll_process_events;epoll_wait;entry_SYSCALL_64[k];do_syscall_64[k];do_epoll_wait[k] 700
nginx;main;ngx_master_process_cycle;ngx_worker_process_cycle;ngx_process_events_and_timers;ngx_http_process_request;ngx_http_core_run_phases;ngx_http_static_handler;ngx_output_chain;sendfile;entry_SYSCALL_64[k];do_syscall_64[k];do_sendfile[k];tcp_sendmsg[k] 650
nginx;main;ngx_master_process_cycle;ngx_worker_process_cycle;ngx_process_events_and_timers;ngx_http_process_request;ngx_http_core_run_phases;ngx_http_gzip_body_filter;deflate;deflate_slow;longest_match 1100
java;start_thread;thread_native_entry;JavaThread::run;JavaCalls::call_virtual;Interpreter[j];com.example.Server.handle[j];com.example.Json.encode[j];java.lang.StringBuilder.append[j] 820
java;start_thread;thread_native_entry;JavaThread::run;JavaCalls::call_virtual;Interpreter[j];com.example.Server.handle[j];com.example.Db.query[j];java.net.SocketInputStream.read[j];Java_java_net_SocketInputStream_socketRead0;recv;entry_SYSCALL_64[k];do_syscall_64[k];__sys_recvfrom[k];tcp_recvmsg[k] 560
java;start_thread;thread_native_entry;GCTaskThread::run;G1ParEvacuateFollowersClosure::do_void;G1ParScanThreadState::trim_queue 430
swapper;secondary_startup_64[k];start_secondary[k];cpu_startup_entry[k];do_idle[k];cpuidle_enter[k];intel_idle[k] 2100
`;

const MODULES = {
  fixture: '/usr/bin/fixture',
  nginx: '/usr/sbin/nginx',
  java: '/usr/lib/jvm/java-17/lib/server/libjvm.so',
  swapper: '',
};
const LIBC = new Set(['__libc_write', 'clock_nanosleep', 'epoll_wait', 'sendfile', 'recv', 'memcpy', 'realloc', 'start_thread']);

function newRoot() {
  return { name: 'all', kind: 'root', value: 0, children: [] };
}

/** A build id for a user-space module, as the server names an executable's (40 hex digits,
 * made up from the path). */
function buildIdOf(module) {
  let h = 2166136261;
  for (const c of module) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return h.toString(16).padStart(8, '0').repeat(5);
}

function addStack(root, frames, value) {
  root.value += value;
  let node = root;
  for (const f of frames) {
    let child = node.children.find((c) => c.name === f.name && c.kind === f.kind);
    if (!child) {
      child = f.module ? { name: f.name, kind: f.kind, module: f.module, value: 0, children: [] } : { name: f.name, kind: f.kind, value: 0, children: [] };
      if (f.kind === 'user' && f.module) child.build_id = buildIdOf(f.module);
      node.children.push(child);
    }
    child.value += value;
    node = child;
  }
}

function sortTree(root) {
  const stack = [root];
  let count = 0;
  while (stack.length) {
    const n = stack.pop();
    count++;
    n.children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    stack.push(...n.children);
  }
  return count;
}

function parseFolded(text, scale, filter = () => true) {
  const root = newRoot();
  for (const line of text.trim().split('\n')) {
    const at = line.lastIndexOf(' ');
    const names = line.slice(0, at).split(';');
    const proc = names[0];
    if (!filter(proc)) continue;
    const frames = names.map((raw, i) => {
      if (i === 0) return { name: raw, kind: 'process' };
      if (raw.endsWith('[k]')) return { name: raw.slice(0, -3), kind: 'kernel', module: '[kernel.kallsyms]' };
      if (raw.endsWith('[j]')) return { name: raw.slice(0, -3), kind: 'jit', module: '[jit]' };
      if (raw === '[unknown]') return { name: raw, kind: 'unknown' };
      return { name: raw, kind: 'user', module: LIBC.has(raw) ? '/usr/lib/x86_64-linux-gnu/libc.so.6' : MODULES[proc] };
    });
    addStack(root, frames, Number(line.slice(at + 1)) * scale);
  }
  sortTree(root);
  return root;
}

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

/** A synthetic profile with about `target` frames: wide and narrow branches and deep recursion. */
function bigTree(target) {
  const rand = rng(42);
  const ns = ['app', 'db', 'http', 'cache', 'codec', 'sched', 'io', 'auth', 'render', 'metrics'];
  const nouns = ['request', 'row', 'buffer', 'frame', 'token', 'page', 'entry', 'chunk', 'query', 'batch', 'node', 'key'];
  const verbs = ['handle', 'parse', 'encode', 'decode', 'visit', 'flush', 'lookup', 'insert', 'merge', 'split', 'poll', 'scan'];
  const kernel = ['entry_SYSCALL_64', 'do_syscall_64', '__x64_sys_read', 'ksys_read', 'vfs_read', 'filemap_read', 'copy_page_to_iter'];
  const root = newRoot();
  const procs = ['api-server', 'worker', 'indexer', 'postgres', 'envoy', 'node_exporter'];
  // A name depends on (parent name, branch), so siblings repeat and stacks share prefixes.
  const nameFor = (parent, branch) => {
    let h = 2166136261;
    for (const ch of `${parent}#${branch}`) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
    h >>>= 0;
    const pick = (arr, k) => arr[Math.floor(h / k) % arr.length];
    return `${pick(ns, 1)}::${pick(nouns, 7)}::${pick(verbs, 97)}_${pick(nouns, 1013)}`;
  };
  let frames = 1;
  let guard = 0;
  while (frames < target && guard++ < 200000) {
    const stack = [];
    const p = Math.floor(Math.pow(rand(), 1.5) * procs.length);
    stack.push({ name: procs[p], kind: 'process' });
    const module = `/usr/bin/${procs[p]}`;
    const depth = 3 + Math.floor(Math.pow(rand(), 2) * 40);
    let parent = procs[p];
    for (let d = 0; d < depth; d++) {
      const branch = Math.floor(Math.pow(rand(), 3) * 14);
      const name = nameFor(parent, branch);
      const jit = rand() < 0.04;
      stack.push({ name, kind: jit ? 'jit' : 'user', module: jit ? '[jit]' : module });
      parent = name;
    }
    if (rand() < 0.015) {
      // Deep recursion: a few hundred frames of one function.
      const n = 100 + Math.floor(rand() * 300);
      for (let i = 0; i < n; i++) stack.push({ name: 'app::tree::walk_recursive', kind: 'user', module });
    }
    if (rand() < 0.25) for (const k of kernel.slice(0, 2 + Math.floor(rand() * 5))) stack.push({ name: k, kind: 'kernel', module: '[kernel.kallsyms]' });
    const value = (1 + Math.floor(Math.pow(rand(), 6) * 2000)) * 10_000_000;
    addStack(root, stack, value);
    if (guard % 64 === 0) frames = countFrames(root);
  }
  sortTree(root);
  return root;
}

function countFrames(root) {
  let count = 0;
  const stack = [root];
  while (stack.length) {
    const n = stack.pop();
    count++;
    for (const c of n.children) stack.push(c);
  }
  return count;
}

const bigCache = new Map();
function bigFor(event) {
  if (!bigCache.has(event)) {
    const t0 = Date.now();
    const root = bigTree(Number(opts.frames));
    if (event === 'page_fault') scaleTree(root, 1e-7);
    bigCache.set(event, root);
    console.error(`mock: built big tree for ${event}: ${countFrames(root)} frames in ${Date.now() - t0} ms`);
  }
  return bigCache.get(event);
}

function scaleTree(root, k) {
  const stack = [root];
  while (stack.length) {
    const n = stack.pop();
    n.value = Math.max(1, Math.round(n.value * k));
    stack.push(...n.children);
  }
}

function webTree(event, node) {
  const only = node === 'web-2' ? (p) => p !== 'nginx' : () => true;
  if (event === 'page_fault') return node === 'web-2' ? newRoot() : parseFolded(WEB_STACKS, 1, only);
  if (event === 'off_cpu') return parseFolded(WEB_STACKS, 3_000_000, (p) => p !== 'swapper' && only(p));
  return parseFolded(WEB_STACKS, 10_000_000, only);
}

function mergeInto(dst, src) {
  dst.value += src.value;
  for (const c of src.children) {
    const mine = dst.children.find((x) => x.name === c.name && x.kind === c.kind);
    if (mine) mergeInto(mine, c);
    else dst.children.push(structuredClone(c));
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP

function parseTime(s, fallback) {
  if (s === null || s === '') return fallback;
  if (/^\d+$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return Number.isNaN(t) ? null : Math.floor(t / 1000);
}

const rfc3339 = (secs) => new Date(secs * 1000).toISOString().replace(/\.\d+Z$/, 'Z');

function flamegraph(params) {
  const event = params.get('event');
  if (!event) return [400, { error: 'missing parameter "event"' }];
  const ev = EVENTS.find((e) => e.name === event);
  if (!ev) return [400, { error: `unknown event "${event}"` }];
  const now = Math.floor(Date.now() / 1000);
  const to = parseTime(params.get('to'), now);
  const from = parseTime(params.get('from'), (to ?? now) - 900);
  if (to === null) return [400, { error: 'cannot parse "to" as RFC 3339 or Unix seconds' }];
  if (from === null) return [400, { error: 'cannot parse "from" as RFC 3339 or Unix seconds' }];
  if (from > to) return [400, { error: '"from" is after "to"' }];
  const format = params.get('format') ?? 'json';
  if (format !== 'json') return [400, { error: `the mock server only answers format=json, not "${format}"` }];
  // The UI selects nodes with a selector such as {node="web-1"}.
  const nodes = [...(params.get('selector') ?? '').matchAll(/node="([^"]*)"/g)].map((m) => m[1]);
  if (opts.fail || nodes.includes('flaky')) {
    return [503, { error: 'storage unavailable: ClickHouse did not answer within 5 s' }];
  }
  const known = new Set(nodesList().map((n) => n.node));
  const wanted = nodes.length > 0 ? nodes.filter((n) => known.has(n)) : ['web-1', 'web-2'].filter((n) => known.has(n));
  const empty = (Date.now() - started) / 1000 < Number(opts['samples-after']);
  const root = newRoot();
  if (!empty) {
    for (const n of wanted) mergeInto(root, n === 'big-1' ? bigFor(event) : webTree(event, n));
    sortTree(root);
  }
  return [
    200,
    {
      event,
      source: 'mock',
      sources: [{ source: 'mock', samples: root.value, value: root.value }],
      unit: ev.unit,
      selector: params.get('selector') ?? '{}',
      from: rfc3339(from),
      to: rfc3339(to),
      total: root.value,
      truncated_stacks: 0,
      truncated_samples: 0,
      truncated_value: 0,
      // How the server summed the nodes: per node for a selector, else from its fleet rollups.
      reach: nodes.length > 0 ? 'matching' : 'fleet',
      root,
    },
  ];
}

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.map': 'application/json',
};

async function serveStatic(path, res) {
  const rel = normalize(decodeURIComponent(path === '/' ? '/index.html' : path)).replace(/^([/\\])+/, '');
  const file = join(dist, rel);
  if (file !== dist && !file.startsWith(dist + sep)) return send(res, 404, 'text/plain', 'not found\n');
  try {
    if (!(await stat(file)).isFile()) throw new Error('not a file');
    const body = await readFile(file);
    send(res, 200, TYPES[extname(file)] ?? 'application/octet-stream', body);
  } catch {
    send(res, 404, 'text/plain', `not found (did you run "npm run build"? serving ${dist})\n`);
  }
}

function send(res, status, type, body) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

const sendJson = (res, status, obj) => send(res, status, 'application/json', JSON.stringify(obj));

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (opts.verbose) console.error(`mock: ${req.method} ${url.pathname}${url.search}`);
  if (req.method !== 'GET' && req.method !== 'HEAD') return sendJson(res, 405, { error: 'method not allowed' });
  switch (url.pathname) {
    case '/healthz':
      return send(res, 200, 'text/plain', 'ok\n');
    case '/api/v1/nodes':
      return sendJson(res, 200, { selector: url.searchParams.get('selector') ?? '{}', total: nodesList().length, next: null, nodes: nodesList() });
    case '/api/v1/events':
      return sendJson(res, 200, { events: EVENTS });
    case '/api/v1/flamegraph': {
      const [status, body] = flamegraph(url.searchParams);
      return sendJson(res, status, body);
    }
    case '/api/v1/placement': {
      const [status, body] = placement(url.searchParams);
      return sendJson(res, status, body);
    }
    case '/api/v1/counters': {
      const [status, body] = counters(url.searchParams);
      return sendJson(res, status, body);
    }
    default:
      if (url.pathname.startsWith('/api/')) return sendJson(res, 404, { error: `no route ${url.pathname}` });
      return void serveStatic(url.pathname, res);
  }
});

server.listen(Number(opts.port), opts.host, () => {
  const addr = server.address();
  console.log(`mock server on http://${addr.address}:${addr.port}/ serving ${dist}`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
