#!/usr/bin/env node
// Check in a real (headless) Chromium that the UI asks for a token when the server has tokens.
//
//   node test/auth-browser.mjs --url http://127.0.0.1:PORT/ --token TOKEN --screenshot PATH
//        [--chromium /usr/bin/chromium]
//
// Opens alerts.html on a server with tokens and no alert rules: its API answers 401, the page asks
// for a token once (a dialog, answered with --token), then shows that alerting is not configured
// (the API's 404 for a reader). The token is kept: after a reload no question is asked. In a
// fresh browser context whose dialog is dismissed, the page says the server needs a token.
// Prints `ok: …` and exits 0; on failure it saves a screenshot, prints `FAIL: reason`, exits 1.

import { resolve } from 'node:path';
import { browserArgs, fail, finish, launch, poll } from './harness.mjs';

const args = browserArgs(
  'usage: node test/auth-browser.mjs --url URL --token TOKEN --screenshot PATH [--chromium PATH]',
  { token: { type: 'string' } },
  ['token'],
);

let browser;
let page;
await finish(
  async () => {
    ({ browser, page } = await launch(args.chromium));
    const url = new URL('alerts.html', args.url).toString();
    const asked = [];
    page.on('dialog', (d) => {
      asked.push(d.message());
      void d.accept(args.token);
    });
    const message = () => page.locator('#message').textContent();
    await page.goto(url);
    await poll('the page past the token question', async () => (await message())?.includes('not configured'), 20000);
    if (asked.length !== 1) fail(`asked ${asked.length} times: ${JSON.stringify(asked)}`);
    if (!asked[0].includes('needs a token')) fail(`the question says ${asked[0]}`);
    const kept = await page.evaluate(() => localStorage.getItem('bimodal.token'));
    if (kept !== args.token) fail('the token was not kept');
    await page.reload();
    await poll('the reloaded page', async () => (await message())?.includes('not configured'), 20000);
    if (asked.length !== 1) fail(`asked again after a reload: ${JSON.stringify(asked)}`);

    const other = await browser.newContext();
    const declined = await other.newPage();
    declined.on('dialog', (d) => void d.dismiss());
    await declined.goto(url);
    await poll(
      'the refusal shown',
      async () => (await declined.locator('#message').textContent())?.includes('token'),
      20000,
    );
    await page.screenshot({ path: resolve(args.screenshot), fullPage: true });
    console.log('ok: the UI asked for a token once, kept it, and said so when none was given');
  },
  { page: () => page, browser: () => browser, screenshotPath: resolve(args.screenshot) },
);
