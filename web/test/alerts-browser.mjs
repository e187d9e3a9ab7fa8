#!/usr/bin/env node
// End-to-end check of the alerts view in a real (headless) Chromium, against a real server that
// evaluated alert rules.
//
//   node test/alerts-browser.mjs --url http://127.0.0.1:PORT/ --rule NAME --node NAME … --function NAME
//        --screenshot PATH [--range 1h] [--chromium /usr/bin/chromium]
//
// Opens alerts.html?range=RANGE and checks: one row per --node for rule --rule, each in state
// `resolved` with its node in the selector column, --function as its top differing function and a
// summary; its "Compare →" link opens compare.html for that node's selector over the window the
// rule judged, focused on the function; "firing and pending" hides resolved alerts. Saves a
// screenshot (full page), prints `ok: …` and exits 0; on failure it still saves the screenshot,
// prints `FAIL: reason` and exits 1 (2 for bad usage).

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const USAGE =
  'usage: node test/alerts-browser.mjs --url http://127.0.0.1:PORT/ --rule NAME --node NAME … --function NAME ' +
  '--screenshot PATH [--range 1h] [--chromium PATH]';

const args = browserArgs(
  USAGE,
  {
    rule: { type: 'string' },
    node: { type: 'string', multiple: true, default: [] },
    function: { type: 'string' },
    range: { type: 'string', default: '1h' },
  },
  ['rule', 'node', 'function'],
);

const screenshotPath = resolve(args.screenshot);
let browser;
let page;

await finish(
  async () => {
    ({ browser, page } = await launch(args.chromium));
    const errors = [];
    page.on('pageerror', (err) => errors.push(err.message));
    const url = new URL('alerts.html', args.url);
    url.searchParams.set('range', args.range);
    await page.goto(url.toString());
    const rows = await poll(
      'the alerts table',
      async () => {
        const got = await page.locator('#alerts-table tbody tr').evaluateAll((trs) =>
          trs.map((tr) => ({
            cells: [...tr.querySelectorAll('td')].map((td) => td.textContent.trim()),
            href: tr.querySelector('a')?.getAttribute('href') ?? '',
          })),
        );
        return got.length > 0 ? got : null;
      },
      30000,
    );
    for (const node of args.node) {
      const row = rows.find((r) => r.cells[1] === args.rule && r.cells[2].includes(`node="${node}"`));
      if (!row) fail(`no row of ${args.rule} for ${node}: ${JSON.stringify(rows)}`);
      if (row.cells[0] !== 'resolved') fail(`${node}'s alert is ${row.cells[0]}, not resolved`);
      if (row.cells[6] !== args.function) fail(`${node}'s top function is ${row.cells[6]}`);
      if (!row.cells[7]) fail(`${node}'s alert has no summary`);
      const link = new URL(row.href, url);
      if (!link.pathname.endsWith('/compare.html')) fail(`the link opens ${link.pathname}`);
      if (link.searchParams.get('selector') !== `{node="${node}"}`) fail(`the link selects ${link.searchParams.get('selector')}`);
      const from = Number(link.searchParams.get('from'));
      const to = Number(link.searchParams.get('to'));
      if (!(from > 0 && to > from)) fail(`the link's window is ${from}..${to}`);
      if (!link.searchParams.get('q')?.includes(args.function)) fail(`the link is not focused on ${args.function}`);
    }
    await page.selectOption('#show', 'active');
    await poll(
      'resolved alerts hidden',
      async () => (await page.locator('#alerts-table tbody tr').count()) === 0,
      // The page asks the server again: on a machine busy with other tests that may take a while.
      30000,
    );
    await page.selectOption('#show', 'all');
    await poll('resolved alerts shown again', async () => (await page.locator('#alerts-table tbody tr').count()) > 0, 30000);
    if (errors.length) fail(`page errors: ${errors.join('; ')}`);
    mkdirSync(dirname(screenshotPath), { recursive: true });
    await page.screenshot({ path: screenshotPath, fullPage: true });
    console.log(`ok: ${args.node.length} resolved alerts of ${args.rule} listed with links to compare (${screenshotPath})`);
  },
  { page: () => page, browser: () => browser, screenshotPath },
);
