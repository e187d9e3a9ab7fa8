#!/usr/bin/env node
// End-to-end check of the fleet and alerts views in a real (headless) Chromium, against a real
// server.
//
//   node test/fleet-browser.mjs --url http://127.0.0.1:PORT/ --node NODE [--node NODE …]
//        --slow NODE [--slow NODE …] [--reduced NODE …] --screenshot PATH [--range 15m]
//        [--timeout 30] [--chromium /usr/bin/chromium]
//
// --node lists every node of the fleet, --slow those of the slow band. Opens
// fleet.html?selector={}&range=RANGE and checks: the verdict names two bands and states its
// confidence; the strip plot is drawn; the metrics table marks the chosen metric; the node table
// lists every node and marks exactly the slow ones, and its unwinding column marks exactly the
// --reduced nodes as reduced (their stacks unwound less well than asked for), saying why. Then, as a user would: sorts by node (URL
// `sort=`), filters by a slow node's name (one row, URL `filter=`), writes a selector with the
// completion list only (`{no` ↓ Enter picks the `node` label, then the slow node's value), submits
// it (URL `selector=`, one node in the table), goes Back (all nodes again), clicks a fact value in
// the table (the selector gains that matcher), and follows the link to the compare view (same
// selector). Last, alerts.html says that alerting is not configured when the server answers 404
// there. Saves screenshots of the fleet view (PATH) and of the alerts view (PATH with
// `-alerts` before its extension), prints `ok: …` and exits 0; on failure it still saves the
// screenshot, prints `FAIL: reason` and exits 1 (2 for bad usage).

import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const USAGE =
  'usage: node test/fleet-browser.mjs --url http://127.0.0.1:PORT/ --node NODE [--node NODE …] ' +
  '--slow NODE [--slow NODE …] [--reduced NODE …] --screenshot PATH [--range 15m] [--timeout 30] [--chromium PATH]';

const args = browserArgs(
  USAGE,
  {
    node: { type: 'string', multiple: true, default: [] },
    slow: { type: 'string', multiple: true, default: [] },
    reduced: { type: 'string', multiple: true, default: [] },
    range: { type: 'string', default: '15m' },
    timeout: { type: 'string', default: '30' },
  },
  ['node', 'slow'],
);

const timeoutMs = Number(args.timeout) * 1000;
const screenshotPath = resolve(args.screenshot);
const alertsScreenshot = screenshotPath.replace(/(\.[a-z]+)?$/, '-alerts$1');
const pageUrl = new URL('fleet.html', args.url);
pageUrl.searchParams.set('selector', '{}');
pageUrl.searchParams.set('range', args.range);
const sorted = (xs) => [...xs].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

let pageErrors = [];
let browser;
let page;

const waitFor = (what, check) => poll(what, check, timeoutMs);
const param = (name) => new URL(page.url()).searchParams.get(name);
const tableNodes = () => page.locator('#node-table tbody tr td:first-child').allInnerTexts();

async function run() {
  ({ browser, page, errors: pageErrors } = await launch(args.chromium));
  const resp = await page.goto(pageUrl.href, { waitUntil: 'load' });
  if (!resp?.ok()) fail(`GET ${pageUrl.href} answered ${resp ? resp.status() : 'nothing'}`);

  // 1. The verdict with its confidence, the strip plot, the metrics, the node table.
  const verdict = await waitFor('the verdict', async () => {
    const text = await page.locator('#verdict').innerText().catch(() => '');
    return text.startsWith('two bands') || text.startsWith('no bands') ? text : null;
  });
  if (!verdict.startsWith('two bands')) fail(`the verdict is "${verdict}"`);
  const detail = await page.locator('#verdict-detail').innerText();
  if (!/confidence: p [<=]/.test(detail)) fail(`the verdict states no confidence: "${detail}"`);
  if ((await page.locator('#strip canvas').count()) === 0) fail('no strip plot drawn');
  if ((await page.locator('#metrics-table tr.chosen').count()) !== 1) fail('the metrics table does not mark the chosen metric');
  // Every metric tested for a split (found or refused) shows the sizes of its two sides.
  const sized = await page.locator('#metrics-table tbody tr').evaluateAll((rows) =>
    rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent ?? '')),
  );
  for (const cells of sized) {
    const [confidence, low, high] = cells.slice(6, 9);
    if (confidence !== '—' && !(/^\d+$/.test(low) && /^\d+$/.test(high))) {
      fail(`metric ${cells[0]} was tested (${confidence}) but its sides are "${low}" and "${high}"`);
    }
  }
  const all = sorted(await tableNodes());
  if (!same(all, sorted(args.node))) fail(`the node table lists ${JSON.stringify(all)}, expected ${JSON.stringify(sorted(args.node))}`);
  const slow = sorted(await page.locator('#node-table tr.band-slow td:first-child').allInnerTexts());
  if (!same(slow, sorted(args.slow))) fail(`slow band ${JSON.stringify(slow)}, expected ${JSON.stringify(sorted(args.slow))}`);
  const reduced = await page.locator('#node-table tbody tr').evaluateAll((rows) =>
    rows
      .filter((r) => r.querySelector('td.unwinding .reduced'))
      .map((r) => ({ node: r.querySelector('td')?.innerText ?? '', why: r.querySelector('td.unwinding .reduced')?.getAttribute('title') ?? '' })),
  );
  if (!same(sorted(reduced.map((r) => r.node)), sorted(args.reduced))) {
    fail(`reduced unwinding on ${JSON.stringify(reduced.map((r) => r.node))}, expected ${JSON.stringify(sorted(args.reduced))}`);
  }
  if (reduced.some((r) => !/refused/.test(r.why))) fail(`a reduced unwinding without its reason: ${JSON.stringify(reduced)}`);
  mkdirSync(dirname(screenshotPath), { recursive: true });
  await page.addStyleTag({ content: '.topbar { position: static; }' });
  await page.screenshot({ path: screenshotPath, fullPage: true });

  // 2. Sort by node name, then filter by one slow node's name.
  await page.locator('#node-table th button', { hasText: /^node/ }).click();
  await waitFor('sort=node in the URL', async () => param('sort') === 'node');
  const byName = await tableNodes();
  if (!same(byName, sorted(args.node))) fail(`sorted by node: ${JSON.stringify(byName)}`);
  const target = sorted(args.slow)[0];
  await page.locator('#node-filter').fill(target);
  await waitFor('the filter in the URL and one row', async () => param('filter') === target && (await tableNodes()).length >= 1);
  const filtered = await tableNodes();
  if (!filtered.every((n) => n.includes(target))) fail(`filter ${target} kept ${JSON.stringify(filtered)}`);
  await page.locator('#node-filter').fill('');

  // 3. A selector written with the completion list: `{no`, ↓, Enter → {node="|"}; the value the same way.
  const input = page.locator('#selector');
  await input.click();
  await input.fill('');
  await input.pressSequentially('{no');
  await waitFor('the label `node` offered', async () =>
    (await page.locator('.completions li[role="option"] .completion-label').allInnerTexts()).includes('node'),
  );
  const first = await page.locator('.completions li[role="option"] .completion-label').first().innerText();
  if (first !== 'node') fail(`the first completion of "{no" is ${first}`);
  await input.press('ArrowDown');
  await input.press('Enter');
  const named = await input.inputValue();
  if (named !== '{node=""}') fail(`accepting "node" wrote ${named}`);
  await waitFor('every node offered as a value', async () => {
    const values = await page.locator('.completions li[role="option"] .completion-label').allInnerTexts();
    return args.node.every((n) => values.includes(n));
  });
  await input.pressSequentially(target);
  await waitFor(`${target} offered`, async () =>
    (await page.locator('.completions li[role="option"] .completion-label').allInnerTexts()).includes(target),
  );
  // The slow node's name may be a prefix of another's: choose it by its text.
  const options = await page.locator('.completions li[role="option"] .completion-label').allInnerTexts();
  for (let i = 0; i <= options.indexOf(target); i++) await input.press('ArrowDown');
  await input.press('Enter');
  const written = await input.inputValue();
  if (written !== `{node="${target}"}`) fail(`the completion wrote ${written}`);
  await input.press('Enter');
  await waitFor('the selector in the URL and one node in the table', async () =>
    param('selector') === written && same(await tableNodes(), [target]),
  );

  // 4. Back restores the whole fleet.
  await page.goBack();
  await waitFor('the whole fleet after Back', async () => param('selector') === '{}' && same(sorted(await tableNodes()), sorted(args.node)));

  // 5. A fact's value narrows the selector; the compare link carries it.
  const fact = page.locator('#node-table tbody tr:first-child button.label-value').first();
  const factValue = await fact.innerText();
  await fact.click();
  await waitFor('the fact in the selector', async () => (param('selector') ?? '').includes(`="${factValue}"`));
  const selector = param('selector');
  await waitFor('the answer for the narrowed selector', async () => (await tableNodes()).length > 0);
  const compareHref = await page.locator('#to-compare').getAttribute('href');
  const compareUrl = new URL(compareHref ?? '', page.url());
  if (compareUrl.pathname.endsWith('/compare.html') === false || compareUrl.searchParams.get('selector') !== selector) {
    fail(`the compare link ${compareHref} does not carry ${selector}`);
  }

  // 6. Alerts: a server without rules is "not configured", not an error.
  await page.goto(new URL('alerts.html', args.url).href, { waitUntil: 'load' });
  const alerts = await waitFor('the alerts page state', async () => {
    const text = await page.locator('#message').innerText().catch(() => '');
    return text.includes('not configured') || text.includes('No alert') || (await page.locator('#alerts-table tr').count()) > 0
      ? text
      : null;
  });
  if (!alerts.includes('not configured')) fail(`the alerts page says "${alerts}" on a server without rules`);
  await page.screenshot({ path: alertsScreenshot, fullPage: true });
  if (pageErrors.length > 0) fail(pageErrors.join('; '));
  console.log(`ok: ${verdict}; slow band ${slow.join(' ')}; completion wrote ${written}; fact ${selector}; alerts: not configured`);
}

await finish(run, { page: () => page, browser: () => browser, screenshotPath });
