#!/usr/bin/env node
// Runs test/sandwich-test.mjs (sandwich.ts's merge rules, in Node), then test/browser.mjs (the
// flame graph, one case with its sandwich view) and test/node-browser.mjs (the node view) against
// test/mock-server.mjs (needs `npm run build` first):
//   node test/e2e-mock.mjs [--screenshots DIR]
// Prints one line per case and a closing "N passed, N failed" line; exits 1 if any failed.

import { spawn } from 'node:child_process';
import { startMockServer } from './harness.mjs';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values: opts } = parseArgs({ options: { screenshots: { type: 'string', default: resolve(here, '..', 'test-results') } } });
mkdirSync(opts.screenshots, { recursive: true });

const CASES = [
  { name: 'web-1-cpu', node: 'web-1', event: 'cpu', expect: ['sha256_block', 'vfs_write', 'com.example.Server.handle'] },
  { name: 'web-2-off-cpu', node: 'web-2', event: 'off_cpu', expect: ['compute_hash'] },
  { name: 'big-1-20k-frames', node: 'big-1', event: 'cpu', expect: ['api-server', 'app::tree::walk_recursive'] },
  // The syscall entry is reached from five libc calls in three processes: callers fan out above
  // it, its callees merge below it.
  {
    name: 'web-1-sandwich',
    node: 'web-1',
    event: 'cpu',
    expect: ['entry_SYSCALL_64'],
    sandwich: 'entry_SYSCALL_64',
    callers: ['__libc_write', 'epoll_wait', 'recv', 'nginx', 'fixture'],
    callees: ['do_syscall_64', 'vfs_write', 'tcp_sendmsg'],
  },
];

// The node view: web-1 with two NUMA nodes, counters and a placement finding; web-2 with none.
// web-2's kernel refused the unwinder: its stacks walk frame pointers, and the page says why.
const NODE_CASES = [
  { name: 'node-web-1', node: 'web-1', extra: ['--counter', 'pgfault', '--pid', '4242', '--unwinding', 'kernel_tables'] },
  { name: 'node-web-2-empty', node: 'web-2', extra: ['--unwinding', 'frame_pointers', '--reduced'] },
];

const { url: base, mock } = await startMockServer();

let passed = 0;
let failed = 0;
{
  const code = await new Promise((ok) => spawn(process.execPath, [join(here, 'sandwich-test.mjs')], { stdio: 'inherit' }).on('exit', ok));
  if (code === 0) passed++;
  else failed++;
  console.log(`${code === 0 ? 'PASS' : 'FAIL'} sandwich-unit`);
}
for (const c of CASES) {
  const args = [join(here, 'browser.mjs'), '--url', base, '--node', c.node, '--event', c.event, '--screenshot', join(opts.screenshots, `${c.name}.png`)];
  for (const e of c.expect) args.push('--expect', e);
  if (c.sandwich) args.push('--sandwich', c.sandwich);
  for (const n of c.callers ?? []) args.push('--caller', n);
  for (const n of c.callees ?? []) args.push('--callee', n);
  const code = await new Promise((ok) => spawn(process.execPath, args, { stdio: 'inherit' }).on('exit', ok));
  if (code === 0) passed++;
  else failed++;
  console.log(`${code === 0 ? 'PASS' : 'FAIL'} ${c.name}`);
}
for (const c of NODE_CASES) {
  const args = [join(here, 'node-browser.mjs'), '--url', base, '--node', c.node, '--range', '1h', '--screenshot', join(opts.screenshots, `${c.name}.png`), ...c.extra];
  const code = await new Promise((ok) => spawn(process.execPath, args, { stdio: 'inherit' }).on('exit', ok));
  if (code === 0) passed++;
  else failed++;
  console.log(`${code === 0 ? 'PASS' : 'FAIL'} ${c.name}`);
}
mock.kill();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
