#!/usr/bin/env node
// End-to-end check of the bimodal web UI in a real (headless) Chromium.
//
//   node test/browser.mjs --url http://127.0.0.1:PORT/ --node NAME --event cpu \
//        --expect FRAME_NAME [--expect FRAME2 …] --screenshot PATH
//        [--range 1h] [--timeout 30] [--chromium /usr/bin/chromium]
//
// Opens the UI with ?node=NAME&event=EVENT&range=1h (retrying while the server does not answer),
// waits up to --timeout seconds in all (clicking Refresh every 2 s) until a `.frame[data-name="FRAME"]` is drawn for every --expect, then with
// the first --expect: hovers it and checks the tooltip shows its name and a percent, clicks it
// and checks it now spans (nearly) the full width, types it into the search box and checks it is
// highlighted. Saves a screenshot to PATH, prints one `ok: …` line and exits 0. On any failure
// it still saves the screenshot, prints `FAIL: reason` and exits 1 (2 for bad usage).

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

const USAGE =
  'usage: node test/browser.mjs --url http://127.0.0.1:PORT/ [--node NAME] [--event cpu] ' +
  '--expect FRAME [--expect FRAME2 …] --screenshot PATH [--range 1h] [--timeout 30] [--chromium PATH]';

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      url: { type: 'string' },
      node: { type: 'string' },
      event: { type: 'string', default: 'cpu' },
      expect: { type: 'string', multiple: true, default: [] },
      screenshot: { type: 'string' },
      range: { type: 'string', default: '1h' },
      timeout: { type: 'string', default: '30' },
      chromium: { type: 'string', default: '/usr/bin/chromium' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }));
} catch (err) {
  console.error(`${err.message}\n${USAGE}`);
  process.exit(2);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
if (!args.url || args.expect.length === 0 || !args.screenshot) {
  console.error(`missing --url, --expect or --screenshot\n${USAGE}`);
  process.exit(2);
}

const timeoutMs = Number(args.timeout) * 1000;
const screenshotPath = resolve(args.screenshot);
const started = Date.now();

const pageUrl = new URL(args.url);
if (args.node) pageUrl.searchParams.set('node', args.node);
pageUrl.searchParams.set('event', args.event);
pageUrl.searchParams.set('range', args.range);

/** A CSS attribute selector for a frame named `name`. */
const frameSel = (name, extra = '') =>
  `.frame${extra}[data-name="${name.replace(/["\\]/g, '\\$&').replace(/\n/g, '\\a ')}"]`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

const pageErrors = [];
let browser;
let page;

/** The index and width of the widest element drawn for `name`, and the graph's width. */
async function widest(name, extra = '') {
  return page.evaluate(
    ({ sel }) => {
      const els = [...document.querySelectorAll(sel)];
      const layer = document.querySelector('#graph .layer');
      let best = -1;
      let width = 0;
      els.forEach((el, i) => {
        const w = el.getBoundingClientRect().width;
        if (w > width) {
          width = w;
          best = i;
        }
      });
      return { index: best, width, count: els.length, graphWidth: layer ? layer.getBoundingClientRect().width : 0 };
    },
    { sel: frameSel(name, extra) },
  );
}

/** Text of the UI's message box (no nodes, no samples, API error), if shown. */
async function uiMessage() {
  return page.evaluate(() => {
    const m = document.getElementById('message');
    return m && !m.hidden ? m.innerText.replace(/\s+/g, ' ').trim() : '';
  });
}

async function run() {
  browser = await chromium.launch({
    executablePath: args.chromium,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-quic',
      '--no-first-run',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.on('pageerror', (err) => pageErrors.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    // HTTP errors of the API are shown (and checked) in the page itself; a server that answers
    // 503 until storage is ready must not fail a run that later succeeds.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) {
      pageErrors.push(`console: ${msg.text()}`);
    }
  });

  // The server may still be starting: retry the page itself until the deadline.
  const deadline = started + timeoutMs;
  let resp;
  for (;;) {
    try {
      resp = await page.goto(pageUrl.href, { waitUntil: 'load', timeout: Math.max(1000, deadline - Date.now()) });
      if (resp?.ok() || Date.now() > deadline) break;
    } catch (err) {
      if (Date.now() > deadline) fail(`cannot open ${pageUrl.href}: ${String(err.message).split('\n')[0]}`);
    }
    await sleep(1000);
  }
  if (!resp || !resp.ok()) fail(`GET ${pageUrl.href} answered ${resp ? resp.status() : 'nothing'}`);
  if ((await page.locator('#graph').count()) === 0) fail(`${pageUrl.href} is not the bimodal UI (no #graph)`);

  // 1. Wait until every expected frame is drawn, clicking Refresh every 2 s.
  let lastRefresh = Date.now();
  let missing = args.expect;
  for (;;) {
    const counts = await Promise.all(args.expect.map((n) => page.locator(frameSel(n)).count()));
    missing = args.expect.filter((_, i) => counts[i] === 0);
    if (missing.length === 0) break;
    if (Date.now() > deadline) {
      const msg = await uiMessage();
      const drawn = await page.locator('.frame').count();
      fail(
        `after ${args.timeout} s no frame named ${missing.map((m) => JSON.stringify(m)).join(', ')} is drawn ` +
          `(${drawn} frames drawn${msg ? `; the page says: "${msg}"` : ''})`,
      );
    }
    if (Date.now() - lastRefresh >= 2000) {
      await page.click('#refresh', { timeout: 5000 }).catch(() => {});
      lastRefresh = Date.now();
    }
    await sleep(250);
  }
  const framesDrawn = await page.locator('.frame').count();

  // 2. Hover: the tooltip shows the name and a percent.
  const name = args.expect[0];
  const target = await widest(name);
  if (target.width < 1) fail(`frame "${name}" is drawn but ${target.width.toFixed(2)} px wide: too narrow to hover`);
  await page.locator(frameSel(name)).nth(target.index).hover({ timeout: 5000 });
  const tooltip = page.locator('#tooltip');
  try {
    await page.waitForFunction(
      ({ name }) => {
        const t = document.getElementById('tooltip');
        return t && !t.hidden && t.innerText.includes(name) && /\d%/.test(t.innerText);
      },
      { name },
      { timeout: 5000 },
    );
  } catch {
    const shown = (await tooltip.isVisible()) ? (await tooltip.innerText()).replace(/\s+/g, ' ') : '(hidden)';
    fail(`hovering "${name}" did not show a tooltip with its name and a percent; tooltip: ${shown}`);
  }
  const tooltipText = (await tooltip.innerText()).replace(/\s+/g, ' ');
  const pct = /(\d[\d.]*%) *of total/.exec(tooltipText)?.[1] ?? /\d[\d.]*%/.exec(tooltipText)?.[0];

  // 3. Click: the frame is zoomed to (nearly) the full width.
  await page.locator(frameSel(name)).nth(target.index).click({ timeout: 5000 });
  let zoomed;
  try {
    await page.waitForFunction(
      ({ sel }) => {
        const layer = document.querySelector('#graph .layer');
        if (!layer) return false;
        const full = layer.getBoundingClientRect().width;
        return [...document.querySelectorAll(sel)].some((el) => el.getBoundingClientRect().width >= 0.97 * full);
      },
      { sel: frameSel(name) },
      { timeout: 5000 },
    );
  } catch {
    zoomed = await widest(name);
    fail(
      `after clicking "${name}" (was ${target.width.toFixed(1)} px) its widest frame is ` +
        `${zoomed.width.toFixed(1)} px of ${zoomed.graphWidth.toFixed(1)} px: not zoomed`,
    );
  }
  zoomed = await widest(name);
  const zoomParam = new URL(page.url()).searchParams.get('zoom') ?? '';
  if (target.width < 0.97 * target.graphWidth && !zoomParam.split(';').includes(name)) {
    fail(`after zooming into "${name}" the URL does not keep the zoom path: ${page.url()}`);
  }

  // 4. Search: the frame is highlighted and a matched percent is shown.
  await page.fill('#search', name, { timeout: 5000 });
  try {
    await page.waitForFunction(
      ({ sel }) => {
        const status = document.getElementById('search-status');
        return document.querySelector(sel) !== null && status !== null && /\d%/.test(status.textContent ?? '');
      },
      { sel: frameSel(name, '.match') },
      { timeout: 5000 },
    );
  } catch {
    const status = await page.locator('#search-status').innerText();
    fail(`searching for "${name}" did not highlight it (search status: "${status}")`);
  }
  const searchStatus = (await page.locator('#search-status').innerText()).trim();
  if (new URL(page.url()).searchParams.get('q') !== name) fail(`the URL does not keep the search: ${page.url()}`);
  // Hover again so the screenshot shows highlight, zoom and tooltip together.
  const again = await widest(name, '.match');
  if (again.index >= 0) await page.locator(frameSel(name, '.match')).nth(again.index).hover({ timeout: 5000 });
  await sleep(100);

  await shoot();
  if (pageErrors.length > 0) fail(`the page logged errors:\n  ${pageErrors.join('\n  ')}`);
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `ok: ${pageUrl.searchParams.get('node') ?? 'all nodes'}/${args.event}: ${framesDrawn} frames drawn, ` +
      `found ${args.expect.map((e) => JSON.stringify(e)).join(', ')}; "${name}" tooltip ${pct ?? '?'} of total, ` +
      `zoomed to ${((100 * zoomed.width) / zoomed.graphWidth).toFixed(1)}% width, search ${searchStatus}; ` +
      `screenshot ${screenshotPath} (${secs} s)`,
  );
}

let shot = false;
async function shoot() {
  if (shot || !page) return;
  shot = true;
  mkdirSync(dirname(screenshotPath), { recursive: true });
  await page.screenshot({ path: screenshotPath, timeout: 10000 });
}

let code = 0;
try {
  await run();
} catch (err) {
  code = 1;
  const reason = err instanceof Failure ? err.message : `unexpected error: ${err?.stack ?? err}`;
  try {
    await shoot();
  } catch (e) {
    console.error(`(could not save the screenshot: ${e.message})`);
  }
  console.error(`FAIL: ${reason}`);
  if (!(err instanceof Failure && reason.includes('logged errors')) && pageErrors.length > 0) {
    console.error(`the page also logged:\n  ${pageErrors.join('\n  ')}`);
  }
  if (shot) console.error(`screenshot: ${screenshotPath}`);
} finally {
  await browser?.close().catch(() => {});
}
process.exit(code);
