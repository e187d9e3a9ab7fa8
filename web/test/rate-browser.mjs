#!/usr/bin/env node
// Check in a real (headless) Chromium that the UI waits what a 429 tells it and asks again.
//
//   node test/rate-browser.mjs --url http://127.0.0.1:PORT/ --token TOKEN --screenshot PATH
//        [--chromium /usr/bin/chromium]
//
// TOKEN is a reader's on a server with tokens, no alert rules and a low request rate. Right
// before the page opens, the script uses the reader's rate up (requests until one is answered
// 429). Opens alerts.html with the token kept in the browser: its first API call is answered 429 with
// Retry-After, the page waits that long and asks again, then shows that alerting is not
// configured (the API's 404), never the refusal.
// Prints `ok: …` and exits 0; on failure it saves a screenshot, prints `FAIL: reason`, exits 1.

import { resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const args = browserArgs(
  'usage: node test/rate-browser.mjs --url URL --token TOKEN --screenshot PATH [--chromium PATH]',
  { token: { type: 'string' } },
  ['token'],
);

let browser;
let page;
await finish(
  async () => {
    ({ browser, page } = await launch(args.chromium));
    await page.addInitScript((token) => localStorage.setItem('bimodal.token', token), args.token);
    const statuses = [];
    page.on('response', (r) => {
      if (r.url().includes('/api/v1/')) statuses.push(r.status());
    });
    const asked = [];
    page.on('dialog', (d) => {
      asked.push(d.message());
      void d.dismiss();
    });
    const message = () => page.locator('#message').textContent();
    // Used up here, not by the caller: launching the browser may take longer than the rate's
    // refill, and the page's first call must find the rate spent.
    const api = new URL('api/v1/events', args.url).toString();
    for (let i = 0; ; i++) {
      const r = await fetch(api, { headers: { Authorization: `Bearer ${args.token}` } });
      if (r.status === 429) break;
      if (i >= 1000) fail(`1000 requests were not refused (last ${r.status})`);
    }
    await page.goto(new URL('alerts.html', args.url).toString());
    const shown = await poll('the page past the refusal', async () => {
      const text = await message();
      return text?.includes('not configured') || text?.includes('more than') ? text : null;
    }, 60000);
    if (asked.length > 0) fail(`asked for a token: ${JSON.stringify(asked)}`);
    if (!shown.includes('not configured')) fail(`the page shows the refusal: ${shown}`);
    if (!statuses.includes(429)) fail(`no request was refused (statuses ${JSON.stringify(statuses)})`);
    if (statuses.at(-1) !== 404) fail(`the last answer was ${statuses.at(-1)}, not alerting's 404`);
    await page.screenshot({ path: resolve(args.screenshot), fullPage: true });
    console.log(`ok: answered ${JSON.stringify(statuses)}, the page waited and showed: ${shown.trim()}`);
  },
  { page: () => page, browser: () => browser, screenshotPath: resolve(args.screenshot) },
);
