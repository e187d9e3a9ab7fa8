#!/usr/bin/env node
// End-to-end check of the compare view in a real (headless) Chromium, against a real server.
//
//   node test/compare-browser.mjs --url http://127.0.0.1:PORT/ --slow NODE [--slow NODE …]
//        --function NAME --event EVENT --screenshot PATH [--range 15m] [--timeout 30]
//        [--chromium /usr/bin/chromium]
//
// Opens compare.html?selector={}&range=RANGE and checks: the verdict names two bands; the node
// table marks exactly the --slow nodes as the slow band; the strip plot is drawn; the first
// function difference of EVENT is NAME; a click on it focuses the differential flame graph of
// EVENT on NAME (URL `event=` and `q=`, frames matched); Back restores the URL without the
// focus; a reload of the focused URL restores the focus. Saves a screenshot, prints `ok: …` and
// exits 0; on failure it still saves the screenshot, prints `FAIL: reason` and exits 1.

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const USAGE =
  'usage: node test/compare-browser.mjs --url http://127.0.0.1:PORT/ --slow NODE [--slow NODE …] ' +
  '--function NAME --event EVENT --screenshot PATH [--range 15m] [--timeout 30] [--chromium PATH]';

const args = browserArgs(
  USAGE,
  {
    slow: { type: 'string', multiple: true, default: [] },
    function: { type: 'string' },
    event: { type: 'string' },
    range: { type: 'string', default: '15m' },
    timeout: { type: 'string', default: '30' },
  },
  ['slow', 'function', 'event'],
);

const timeoutMs = Number(args.timeout) * 1000;
const screenshotPath = resolve(args.screenshot);
const pageUrl = new URL('compare.html', args.url);
pageUrl.searchParams.set('selector', '{}');
pageUrl.searchParams.set('range', args.range);

let pageErrors = [];
let browser;
let page;

const waitFor = (what, check) => poll(what, check, timeoutMs);

async function run() {
  ({ browser, page, errors: pageErrors } = await launch(args.chromium));
  const resp = await page.goto(pageUrl.href, { waitUntil: 'load' });
  if (!resp?.ok()) fail(`GET ${pageUrl.href} answered ${resp ? resp.status() : 'nothing'}`);

  // 1. The verdict, the strip plot and the slow band in the node table.
  const verdict = await waitFor('the verdict', async () => {
    const text = await page.locator('#verdict').innerText().catch(() => '');
    return text.startsWith('two bands') || text.startsWith('no bands') ? text : null;
  });
  if (!verdict.startsWith('two bands')) fail(`the verdict is "${verdict}"`);
  if ((await page.locator('#strip canvas').count()) === 0) fail('no strip plot drawn');
  const slow = (await page.locator('#node-table tr.band-slow td:first-child').allInnerTexts()).sort();
  const want = [...args.slow].sort();
  if (JSON.stringify(slow) !== JSON.stringify(want)) fail(`slow band ${JSON.stringify(slow)}, expected ${JSON.stringify(want)}`);

  // 2. The first function difference of the event, and a click on it.
  const rows = page.locator('.explain-table tbody tr.clickable');
  const count = await rows.count();
  let first = null;
  for (let i = 0; i < count && first === null; i++) {
    const cells = await rows.nth(i).locator('td').allInnerTexts();
    if (cells[0] === args.event) first = i;
  }
  if (first === null) fail(`no function difference of ${args.event}`);
  const button = rows.nth(first).locator('button.link');
  const name = await button.innerText();
  if (name !== args.function) fail(`the first ${args.event} difference is ${name}, expected ${args.function}`);
  if ((await rows.nth(first).locator('svg.dots circle').count()) === 0) fail('the difference has no per-node dot plot');
  await button.click();
  await waitFor('the focus in the URL', async () => {
    const u = new URL(page.url());
    return u.searchParams.get('event') === args.event && (u.searchParams.get('q') ?? '').includes(args.function);
  });
  const status = await waitFor('frames matched in the differential flame graph', async () => {
    const text = await page.locator('#diff-status').innerText();
    return /[1-9]\d* frames? match/.test(text) ? text : null;
  });
  const note = await page.locator('#diff-note').innerText();
  if (!note.includes('per CPU-second')) fail(`the normalization is not stated: "${note}"`);
  mkdirSync(dirname(screenshotPath), { recursive: true });
  // A full-page capture stitches the page: the sticky header would land in its middle.
  await page.addStyleTag({ content: '.topbar { position: static; }' });
  await page.evaluate(() => globalThis.scrollTo(0, 0));
  await page.screenshot({ path: screenshotPath, fullPage: true });

  // 3. Back removes the focus; a reload of the focused link restores it.
  const focused = page.url();
  await page.goBack();
  await waitFor('the URL without the focus', async () => !new URL(page.url()).searchParams.has('q'));
  await page.goto(focused, { waitUntil: 'load' });
  await waitFor('the focus restored from the URL', async () => {
    const value = await page.locator('#diff-search').inputValue();
    const text = await page.locator('#diff-status').innerText();
    return value.includes(args.function) && /frames? match/.test(text);
  });
  if (pageErrors.length > 0) fail(pageErrors.join('; '));
  console.log(`ok: ${verdict}; slow band ${slow.join(' ')}; ${args.function} focused: ${status}`);
}

await finish(run, { page: () => page, browser: () => browser, screenshotPath });
