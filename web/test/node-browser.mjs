#!/usr/bin/env node
// End-to-end check of the node view in a real (headless) Chromium, against a real server.
//
//   node test/node-browser.mjs --url http://127.0.0.1:PORT/ --node NAME --screenshot PATH
//        [--counter NAME …] [--pid PID …] [--unwinding METHOD [--reduced]] [--range 15m]
//        [--timeout 30] [--chromium /usr/bin/chromium]
//
// Opens node.html?node=NAME&range=RANGE and checks: the topology draws at least one NUMA node box
// with its CPUs; the event sources list the `cpu` event's chosen source; the counters section draws
// at least one chart (a uPlot canvas) or states that the node has no counters; the placement shows
// at least one process or states that none was read; no page error. With --counter, that counter's
// chart must be drawn; with --pid, that process must be listed and show its mappings when opened
// (both wait, pressing Refresh every 3 s, until --timeout). When charts are drawn it switches them
// to per interval and checks that Back restores per second. With --unwinding, the `cpu` event's
// stacks must be unwound that way (kernel_tables, stack_copies, frame_pointers), and with
// --reduced the row must say that it is less than asked for, and why. Saves a screenshot (full page), prints
// `ok: …` and exits 0; on failure it still saves the screenshot, prints `FAIL: reason` and exits 1
// (2 for bad usage).

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const USAGE =
  'usage: node test/node-browser.mjs --url http://127.0.0.1:PORT/ --node NAME --screenshot PATH ' +
  '[--counter NAME …] [--pid PID …] [--unwinding METHOD [--reduced]] [--range 15m] [--timeout 30] [--chromium PATH]';

const args = browserArgs(
  USAGE,
  {
    node: { type: 'string' },
    counter: { type: 'string', multiple: true, default: [] },
    pid: { type: 'string', multiple: true, default: [] },
    range: { type: 'string', default: '15m' },
    timeout: { type: 'string', default: '30' },
    unwinding: { type: 'string' },
    reduced: { type: 'boolean', default: false },
  },
  ['node'],
);
if (args.pid.some((p) => !/^\d+$/.test(p))) {
  console.error(`--pid takes a process id\n${USAGE}`);
  process.exit(2);
}

const timeoutMs = Number(args.timeout) * 1000;
const screenshotPath = resolve(args.screenshot);
const pageUrl = new URL('node.html', args.url);
pageUrl.searchParams.set('node', args.node);
pageUrl.searchParams.set('range', args.range);

let pageErrors = [];
let browser;
let page;

/** `poll` with this run's timeout; with `refresh`, the page's Refresh is pressed every 3 s. */
function waitFor(what, check, { refresh = false } = {}) {
  let lastRefresh = Date.now();
  const between = async () => {
    if (refresh && Date.now() - lastRefresh > 3000) {
      lastRefresh = Date.now();
      await page.locator('#refresh').click();
    }
  };
  return poll(what, check, timeoutMs, between);
}

/** The text of a section's status line when it is shown, else ''. */
async function status(id) {
  const loc = page.locator(`#${id}`);
  if (!(await loc.isVisible())) return { kind: '', text: '' };
  const cls = (await loc.getAttribute('class')) ?? '';
  const kind = ['loading', 'empty', 'error', 'info'].find((k) => cls.split(' ').includes(k)) ?? '';
  return { kind, text: await loc.innerText() };
}

async function run() {
  ({ browser, page, errors: pageErrors } = await launch(args.chromium));
  const resp = await page.goto(pageUrl.href, { waitUntil: 'load' });
  if (!resp?.ok()) fail(`GET ${pageUrl.href} answered ${resp ? resp.status() : 'nothing'}`);

  // A message instead of the sections: the node list failed or is empty.
  const message = async () => ((await page.locator('#message').isVisible()) ? page.locator('#message').innerText() : '');

  // 1. The topology: NUMA node boxes with their CPUs.
  const boxes = await waitFor('the NUMA topology', async () => {
    const m = await message();
    if (m && !m.startsWith('Loading')) fail(`the page shows a message instead of the node: ${m.replace(/\s+/g, ' ')}`);
    const texts = await page.locator('#topology svg g.numa-node text.cpus').allTextContents();
    if (texts.length > 0) return texts;
    const facts = await page.locator('#facts-line').innerText().catch(() => '');
    if (facts.startsWith('No facts')) fail(facts);
    return null;
  });
  const count = await page.locator('#topology svg g.numa-node').count();
  if (!boxes.some((t) => /CPUs \d/.test(t))) fail(`no NUMA node box lists CPUs: ${JSON.stringify(boxes)}`);

  // 2. The event sources: the cpu event's chosen source.
  const cpuRow = page.locator('#sources tr[data-event="cpu"]');
  if ((await cpuRow.count()) === 0) fail('the event sources do not list the cpu event');
  const cpuSource = (await cpuRow.locator('td.source').innerText()).trim();
  if (!cpuSource || cpuSource === 'none works here') fail(`the cpu event has no chosen source: "${cpuSource}"`);
  if (args.unwinding) {
    const stacks = cpuRow.locator('td.stacks');
    const method = await stacks.getAttribute('data-unwinding');
    if (method !== args.unwinding) fail(`the cpu event's stacks are unwound by ${method}, not ${args.unwinding}`);
    const reduced = await stacks.evaluate((td) => td.classList.contains('reduced'));
    const why = (await stacks.innerText()).trim();
    if (reduced !== args.reduced) fail(`the cpu event's unwinding is${reduced ? '' : ' not'} shown as reduced: "${why}"`);
    if (args.reduced && !/Less than asked for: .+refused/.test(why)) fail(`the reduced unwinding does not say why: "${why}"`);
  }

  // 3. Counters: charts (the named ones if asked for), or the statement that there are none.
  const counters = await waitFor(
    args.counter.length > 0 ? `the charts of ${args.counter.join(', ')}` : 'the counters (charts or "no counters")',
    async () => {
      const s = await status('counters-status');
      if (s.kind === 'error') fail(`counters: ${s.text}`);
      if (s.kind === 'loading') return null;
      const drawn = await page.locator('#counters .counter-card').evaluateAll((cards) =>
        cards.filter((c) => c.querySelector('canvas')).map((c) => c.getAttribute('data-counter')),
      );
      if (args.counter.length > 0) return args.counter.every((c) => drawn.includes(c)) ? { drawn } : null;
      if (drawn.length > 0) return { drawn };
      if (s.kind === 'empty' && /no counters/.test(s.text)) return { drawn, none: s.text };
      return null;
    },
    { refresh: args.counter.length > 0 },
  );
  if (counters.drawn.length > 0) {
    const note = await page.locator('#counters-note').innerText();
    if (!note.startsWith('Per second')) fail(`the counters do not say they are per second: "${note}"`);
  }

  // 4. Placement: processes (the named ones if asked for), or the statement that none was read.
  const placement = await waitFor(
    args.pid.length > 0 ? `the placement of pid ${args.pid.join(', ')}` : 'the placement (processes or "none read")',
    async () => {
      const s = await status('placement-status');
      if (s.kind === 'error') fail(`placement: ${s.text}`);
      if (s.kind === 'loading') return null;
      const pids = await page.locator('#processes details.process').evaluateAll((d) => d.map((e) => e.getAttribute('data-pid')));
      if (args.pid.length > 0) return args.pid.every((p) => pids.includes(p)) ? { pids } : null;
      if (pids.length > 0) return { pids };
      if (s.kind === 'empty' && /No placement read/.test(s.text)) return { pids, none: s.text };
      return null;
    },
    { refresh: args.pid.length > 0 },
  );
  const findings = await page.locator('#findings .finding').count();
  let opened = '';
  const firstPid = args.pid[0] ?? placement.pids[0];
  if (firstPid) {
    const card = page.locator(`#processes details.process[data-pid="${firstPid}"]`);
    // Past the first ten processes, the rest are behind a button.
    if (!(await card.isVisible())) await page.locator('#processes > button').click();
    await card.locator('summary').click();
    const rows = await waitFor(`the mappings of pid ${firstPid}`, async () => {
      const n = await card.locator('.mapping-table tbody tr').count();
      const none = await card.locator('.mappings .note').allInnerTexts();
      return n > 0 || none.some((t) => t.startsWith('No mapping')) ? n : null;
    });
    if (args.pid.includes(firstPid) && rows === 0) fail(`pid ${firstPid} shows no mapping with resident pages`);
    if (rows > 0 && (await card.locator('.mapping-table .pages-bar .seg').count()) === 0) fail('no pages-per-node bar drawn');
    if (!new URL(page.url()).searchParams.get('open')?.split(',').includes(firstPid)) fail('the opened process is not in the URL');
    opened = `pid ${firstPid} opened: ${rows} mappings`;
  }

  mkdirSync(dirname(screenshotPath), { recursive: true });
  // A full-page capture stitches the page: the sticky header would land in its middle.
  await page.addStyleTag({ content: '.topbar { position: static; }' });
  await page.evaluate(() => globalThis.scrollTo(0, 0));
  await page.screenshot({ path: screenshotPath, fullPage: true });

  // 5. The per-interval switch goes into the URL; Back restores per second.
  if (counters.drawn.length > 0) {
    await page.locator('#rate').selectOption('interval');
    await waitFor('per interval in the URL and the note', async () => {
      const note = await page.locator('#counters-note').innerText();
      return new URL(page.url()).searchParams.get('rate') === 'interval' && note.startsWith('Per interval');
    });
    await page.goBack();
    await waitFor('per second restored by Back', async () => {
      const note = await page.locator('#counters-note').innerText();
      const value = await page.locator('#rate').inputValue();
      return !new URL(page.url()).searchParams.has('rate') && value === 'second' && note.startsWith('Per second');
    });
  }

  if (pageErrors.length > 0) fail(pageErrors.join('; '));
  const parts = [
    `${count} NUMA node box(es) (${boxes.join(' ')})`,
    `cpu source "${cpuSource}"`,
    counters.none ?? `${counters.drawn.length} counter charts (${counters.drawn.slice(0, 4).join(', ')}${counters.drawn.length > 4 ? ', …' : ''})`,
    placement.none ?? `${placement.pids.length} processes, ${findings} findings${opened ? `, ${opened}` : ''}`,
  ];
  console.log(`ok: ${parts.join('; ')}`);
}

await finish(run, { page: () => page, browser: () => browser, screenshotPath });
