#!/usr/bin/env node
// End-to-end check of the bimodal web UI in a real (headless) Chromium.
//
//   node test/browser.mjs --url http://127.0.0.1:PORT/ --node NAME --event cpu \
//        --expect FRAME_NAME [--expect FRAME2 …] --screenshot PATH
//        [--range 1h] [--timeout 30] [--chromium /usr/bin/chromium]
//        [--sandwich FUNCTION [--caller NAME …] [--callee NAME …]]
//
// Opens the UI with ?node=NAME&event=EVENT&range=1h (retrying while the server does not answer),
// waits up to --timeout seconds in all (clicking Refresh every 2 s) until a frame named FRAME is
// drawn for every --expect, then with the first --expect: hovers it and checks the tooltip shows
// its name and a percent, clicks it and checks it now spans (nearly) the full width, types it into
// the search box and checks it is highlighted (on the canvas: the pixels there are the search's
// magenta). Saves a screenshot to PATH, prints one `ok: …` line and exits 0. On any failure it
// still saves the screenshot, prints `FAIL: reason` and exits 1 (2 for bad usage).
//
// With --sandwich (off by default), then: clears the search, zooms out, shift+clicks FUNCTION in
// the main graph and checks its sandwich view (URL sandwich=FUNCTION; the callers graph, in the
// flame orientation, is rooted at FUNCTION, drawn full width on its bottom row, with every
// --caller drawn above it; every --callee drawn below FUNCTION in the callees graph; the header
// gives a total and a percent; the main graph is hidden); closes it with Esc, reopens it with the
// browser's Back, closes it with its close button, opens it from the ⇅ button of FUNCTION's row in
// Top functions, and reloads the page to check the URL restores it. The screenshot then shows it.
//
// The flame graph is a canvas: frames are found through the page's test hook,
// window.__bimodalFlame.find(name, graph?) (the widest drawn frame's viewport rectangle, or null),
// .count(graph?) (frames drawn) and .graphs() (each graph's name, root and orientation), and
// hovered and clicked with the mouse at the rectangle's centre.

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { browserArgs } from './harness.mjs';

const USAGE =
  'usage: node test/browser.mjs --url http://127.0.0.1:PORT/ [--node NAME] [--event cpu] ' +
  '--expect FRAME [--expect FRAME2 …] --screenshot PATH [--range 1h] [--timeout 30] [--chromium PATH] ' +
  '[--sandwich FUNCTION [--caller NAME …] [--callee NAME …]]';

const args = browserArgs(
  USAGE,
  {
    node: { type: 'string' },
    event: { type: 'string', default: 'cpu' },
    expect: { type: 'string', multiple: true, default: [] },
    range: { type: 'string', default: '1h' },
    timeout: { type: 'string', default: '30' },
    sandwich: { type: 'string' },
    caller: { type: 'string', multiple: true, default: [] },
    callee: { type: 'string', multiple: true, default: [] },
  },
  ['expect'],
);

const timeoutMs = Number(args.timeout) * 1000;
const screenshotPath = resolve(args.screenshot);
const started = Date.now();

const pageUrl = new URL(args.url);
if (args.node) pageUrl.searchParams.set('node', args.node);
pageUrl.searchParams.set('event', args.event);
pageUrl.searchParams.set('range', args.range);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

const pageErrors = [];
let browser;
let page;

/**
 * The widest drawn frame named `name` (in any graph, or in the graph named `graph`): its viewport
 * rectangle, search match and the graph's width; or null.
 */
async function locate(name, graph) {
  return page.evaluate(([n, g]) => window.__bimodalFlame?.find(n, g ?? undefined) ?? null, [name, graph ?? null]);
}

/** Frames drawn by the flame graph (0 before the UI's code ran). */
async function drawnCount() {
  return page.evaluate(() => window.__bimodalFlame?.count() ?? 0);
}

/** Like locate(), after scrolling the frame's row into the viewport if it is not. */
async function reveal(name, graph) {
  const r = await locate(name, graph);
  if (!r) return r;
  const viewH = page.viewportSize()?.height ?? 900;
  if (r.y >= 0 && r.y + r.h <= viewH) return r;
  await page.evaluate((dy) => window.scrollBy(0, dy), r.y - viewH / 2);
  await sleep(50);
  return locate(name, graph);
}

/** Moves the mouse to the centre of the frame named `name` (its visible part) and answers that point. */
async function pointAt(name, graph) {
  const r = await reveal(name, graph);
  if (!r) fail(`frame "${name}" is no longer drawn`);
  const viewW = page.viewportSize()?.width ?? 1440;
  const left = Math.max(r.x, 0);
  const right = Math.min(r.x + r.w, viewW);
  const at = { x: (left + right) / 2, y: r.y + r.h / 2 };
  await page.mouse.move(at.x, at.y);
  return at;
}

/**
 * In the page: whether the frame named `name` is drawn in the search's magenta, read back from
 * the canvas along its top edge (labels never reach it).
 */
function paintedAsMatch(name) {
  const r = window.__bimodalFlame?.find(name);
  if (!r || !r.match) return false;
  const y = r.y + 1.5;
  let magenta = 0;
  let samples = 0;
  for (const f of [0.25, 0.5, 0.75]) {
    const x = Math.max(1, r.x + r.w * f);
    const canvas = document.elementFromPoint(x, y);
    if (!(canvas instanceof HTMLCanvasElement)) continue;
    const box = canvas.getBoundingClientRect();
    const sx = Math.floor(((x - box.left) * canvas.width) / box.width);
    const sy = Math.floor(((y - box.top) * canvas.height) / box.height);
    const [red, green, blue] = canvas.getContext('2d').getImageData(sx, sy, 1, 1).data;
    samples++;
    if (Math.abs(red - 0xd0) < 30 && Math.abs(green - 0x30) < 30 && Math.abs(blue - 0x7f) < 30) magenta++;
  }
  return samples > 0 && magenta === samples;
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
    const found = await Promise.all(args.expect.map((n) => locate(n)));
    missing = args.expect.filter((_, i) => found[i] === null);
    if (missing.length === 0) break;
    if (Date.now() > deadline) {
      const msg = await uiMessage();
      const drawn = await drawnCount();
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
  const framesDrawn = await drawnCount();

  // 2. Hover: the tooltip shows the name and a percent.
  const name = args.expect[0];
  const target = await reveal(name);
  if (!target) fail(`frame "${name}" disappeared`);
  if (target.w < 1) fail(`frame "${name}" is drawn but ${target.w.toFixed(2)} px wide: too narrow to hover`);
  const at = await pointAt(name);
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
  await page.mouse.click(at.x, at.y);
  let zoomed;
  try {
    await page.waitForFunction(
      (n) => {
        const r = window.__bimodalFlame?.find(n);
        return r !== null && r !== undefined && r.w >= 0.97 * r.graphWidth;
      },
      name,
      { timeout: 5000 },
    );
  } catch {
    zoomed = await locate(name);
    fail(
      `after clicking "${name}" (was ${target.w.toFixed(1)} px) its widest frame is ` +
        `${zoomed ? zoomed.w.toFixed(1) : 'not drawn:'} px of ${target.graphWidth.toFixed(1)} px: not zoomed`,
    );
  }
  zoomed = await locate(name);
  const zoomParam = new URL(page.url()).searchParams.get('zoom') ?? '';
  if (target.w < 0.97 * target.graphWidth && !zoomParam.split(';').includes(name)) {
    fail(`after zooming into "${name}" the URL does not keep the zoom path: ${page.url()}`);
  }

  // 4. Search: the frame is highlighted and a matched percent is shown.
  await page.fill('#search', name, { timeout: 5000 });
  try {
    await reveal(name);
    await page.waitForFunction(paintedAsMatch, name, { timeout: 5000 });
    await page.waitForFunction(() => /\d%/.test(document.getElementById('search-status')?.textContent ?? ''), null, {
      timeout: 5000,
    });
  } catch {
    const status = await page.locator('#search-status').innerText();
    const r = await locate(name);
    fail(
      `searching for "${name}" did not highlight it (${r ? (r.match ? 'matched but not painted magenta' : 'not matched') : 'not drawn'}; ` +
        `search status: "${status}")`,
    );
  }
  const searchStatus = (await page.locator('#search-status').innerText()).trim();
  if (new URL(page.url()).searchParams.get('q') !== name) fail(`the URL does not keep the search: ${page.url()}`);
  // Hover again so the screenshot shows highlight, zoom and tooltip together.
  await pointAt(name);
  await sleep(100);

  // 5. Optionally, the sandwich view of one function.
  const sandwich = args.sandwich ? `; ${await checkSandwich(args.sandwich)}` : '';

  await shoot();
  if (pageErrors.length > 0) fail(`the page logged errors:\n  ${pageErrors.join('\n  ')}`);
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `ok: ${pageUrl.searchParams.get('node') ?? 'all nodes'}/${args.event}: ${framesDrawn} frames drawn, ` +
      `found ${args.expect.map((e) => JSON.stringify(e)).join(', ')}; "${name}" tooltip ${pct ?? '?'} of total, ` +
      `zoomed to ${((100 * zoomed.w) / zoomed.graphWidth).toFixed(1)}% width, search ${searchStatus}${sandwich}; ` +
      `screenshot ${screenshotPath} (${secs} s)`,
  );
}

/**
 * In the page: the sandwich view of `fn` as the test sees it, with `ok` when it is as expected
 * (see checkSandwich); with `wait`, false until it is.
 */
function sandwichState({ fn, callers, callees, wait }) {
  const hook = window.__bimodalFlame;
  const graphs = hook?.graphs() ?? [];
  const info = (name) => graphs.find((g) => g.name === name) ?? null;
  const section = document.getElementById('sandwich');
  const root = hook?.find(fn, 'callers') ?? null;
  const top = hook?.find(fn, 'callees') ?? null;
  const above = (r) => r !== null && root !== null && r.y + r.h <= root.y;
  const below = (r) => r !== null && top !== null && r.y >= top.y + top.h;
  const s = {
    url: new URL(location.href).searchParams.get('sandwich'),
    shown: section !== null && !section.hidden && section.getBoundingClientRect().height > 0,
    stats: document.getElementById('sw-stats')?.textContent ?? '',
    message: document.getElementById('sw-message')?.hidden === false ? document.getElementById('sw-message')?.textContent : '',
    callers: info('callers'),
    callees: info('callees'),
    main: hook?.count('main') ?? 0,
    rootFull: root !== null && root.w >= 0.97 * root.graphWidth,
    // The function is the callers graph's bottom row (its box has a 1 px border).
    rootBottom: root !== null && Math.abs((document.getElementById('sw-callers')?.getBoundingClientRect().bottom ?? 0) - (root.y + root.h)) <= 3,
    missingCallers: callers.filter((c) => !above(hook?.find(c, 'callers') ?? null)),
    missingCallees: callees.filter((c) => !below(hook?.find(c, 'callees') ?? null)),
  };
  s.ok =
    s.url === fn &&
    s.shown &&
    s.callers?.root === fn &&
    s.callers.orientation === 'flame' &&
    s.callees?.root === fn &&
    s.callees.orientation === 'icicle' &&
    s.main === 0 &&
    s.rootFull &&
    s.rootBottom &&
    s.missingCallers.length === 0 &&
    s.missingCallees.length === 0 &&
    /total .*\d%/.test(s.stats);
  return wait && !s.ok ? false : s;
}

/** Waits until the sandwich view of `fn` is shown as it should be; `how` names the way it was opened. */
async function expectSandwich(fn, how) {
  const arg = { fn, callers: args.caller, callees: args.callee, wait: true };
  try {
    await page.waitForFunction(sandwichState, arg, { timeout: 8000 });
  } catch {
    const s = await page.evaluate(sandwichState, { ...arg, wait: false });
    fail(`after ${how}, the sandwich of "${fn}" is not shown as expected: ${JSON.stringify(s)}`);
  }
}

/** Waits until the full graph is back (no sandwich in the URL, `fn` drawn in the main graph). */
async function expectFullGraph(fn, how) {
  try {
    await page.waitForFunction(
      (n) => new URL(location.href).searchParams.get('sandwich') === null && document.getElementById('sandwich')?.hidden === true && window.__bimodalFlame?.find(n, 'main') != null,
      fn,
      { timeout: 5000 },
    );
  } catch {
    fail(`after ${how}, the full graph is not back (URL ${page.url()}; "${fn}" ${(await locate(fn, 'main')) ? 'drawn' : 'not drawn'} in the main graph)`);
  }
}

/** Step 5: opens, closes and restores the sandwich of `fn` every way the page offers. */
async function checkSandwich(fn) {
  // From the full, unzoomed graph without a search.
  await page.fill('#search', '', { timeout: 5000 });
  await page.waitForFunction(() => new URL(location.href).searchParams.get('q') === null, null, { timeout: 5000 });
  if (await page.locator('#reset-zoom').isEnabled()) await page.click('#reset-zoom', { timeout: 5000 });
  await page.waitForFunction(() => new URL(location.href).searchParams.get('zoom') === null, null, { timeout: 5000 });
  if (!(await locate(fn, 'main'))) fail(`"${fn}" is not drawn in the unzoomed main graph`);

  // Shift+click on the frame.
  const at = await pointAt(fn, 'main');
  await page.keyboard.down('Shift');
  await page.mouse.click(at.x, at.y);
  await page.keyboard.up('Shift');
  await expectSandwich(fn, 'shift+click');
  const stats = (await page.locator('#sw-stats').innerText()).replace(/\s+/g, ' ').trim();

  // Esc closes it, Back brings it back, the close button closes it.
  await page.keyboard.press('Escape');
  await expectFullGraph(fn, 'Esc');
  await page.goBack();
  await expectSandwich(fn, 'the browser\'s Back');
  await page.click('#sw-close', { timeout: 5000 });
  await expectFullGraph(fn, 'the close button');

  // The ⇅ button of the function's row in Top functions.
  const i = await page.evaluate((n) => {
    for (const row of document.querySelectorAll('.topfn-body [data-i]')) {
      if (row.querySelector('.topfn-fn')?.textContent === n) return row.querySelector('[data-sw]')?.getAttribute('data-sw') ?? null;
    }
    return null;
  }, fn);
  if (i === null) fail(`Top functions has no row with a sandwich button for "${fn}"`);
  await page.click(`.topfn-body [data-sw="${i}"]`, { timeout: 5000 });
  await expectSandwich(fn, 'the ⇅ button in Top functions');

  // A reload restores it from the URL.
  await page.reload({ waitUntil: 'load' });
  await expectSandwich(fn, 'a reload');

  // A zoom in the callees graph is in the URL and survives a reload; the search counts what it
  // matches in the sandwich.
  let zoomNote = '';
  const callee = args.callee[0];
  if (callee) {
    const c = await pointAt(callee, 'callees');
    await page.mouse.click(c.x, c.y);
    await page.waitForFunction((n) => (new URL(location.href).searchParams.get('callees_zoom') ?? '').split(';').includes(n), callee, { timeout: 5000 });
    await page.reload({ waitUntil: 'load' });
    await expectSandwich(fn, 'a reload with a zoomed callee');
    const zoomed = async () => (await page.evaluate(() => window.__bimodalFlame?.graphs() ?? [])).find((g) => g.name === 'callees')?.zoom ?? null;
    await page.waitForFunction((n) => window.__bimodalFlame?.graphs().find((g) => g.name === 'callees')?.zoom === n, callee, { timeout: 5000 }).catch(async () => {
      fail(`after a reload the callees graph is zoomed to ${JSON.stringify(await zoomed())}, expected "${callee}"`);
    });
    await page.fill('#search', callee, { timeout: 5000 });
    const status = await page
      .waitForFunction(() => {
        const t = document.getElementById('search-status')?.textContent ?? '';
        return t.startsWith('callees: ') ? t : false;
      }, null, { timeout: 5000 })
      .then((h) => h.jsonValue())
      .catch(async () => fail(`the search status in the sandwich is "${await page.locator('#search-status').innerText()}"`));
    zoomNote = `; callees zoomed to ${callee} kept over a reload; search there: ${status}`;
    await page.fill('#search', '', { timeout: 5000 });
  }
  await page.mouse.move(1, 1);
  return `sandwich "${fn}" (${stats}) opened by shift+click, Top functions, Back and a reload, closed by Esc and its button${zoomNote}`;
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
