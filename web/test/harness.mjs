// What the browser checks share (compare-, node-, fleet-, alerts-, auth-, rate-browser.mjs and
// browser.mjs): their command line, the Chromium they drive, failures with a reason, polling for a
// condition, and the way they end
// (`ok: …` and exit 0, or `FAIL: reason` and exit 1; a full-page screenshot either way). Also the
// mock server started for the checks that run on it (e2e-mock.mjs, api-shapes.mjs).

import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';

/**
 * The command line of a browser check: `options` (as node:util's parseArgs takes them) beside
 * those every check has (--url, --screenshot, --chromium, --help). Prints `usage` and exits 2 on
 * an unknown option or when --url, --screenshot or one of `required` is missing (an empty value or
 * list counts as missing); prints it and exits 0 on --help.
 */
export function browserArgs(usage, options, required = []) {
  let args;
  try {
    ({ values: args } = parseArgs({
      options: {
        url: { type: 'string' },
        screenshot: { type: 'string' },
        chromium: { type: 'string', default: '/usr/bin/chromium' },
        help: { type: 'boolean', short: 'h', default: false },
        ...options,
      },
    }));
  } catch (err) {
    console.error(`${err.message}\n${usage}`);
    process.exit(2);
  }
  if (args.help) {
    console.log(usage);
    process.exit(0);
  }
  const missing = ['url', 'screenshot', ...required].filter(
    (name) => !args[name] || (Array.isArray(args[name]) && args[name].length === 0),
  );
  if (missing.length > 0) {
    console.error(`missing ${missing.map((name) => `--${name}`).join(', ')}\n${usage}`);
    process.exit(2);
  }
  return args;
}

/** A check that did not hold: printed as `FAIL: message`. */
export class Failure extends Error {}

export function fail(message) {
  throw new Failure(message);
}

/**
 * Debian's Chromium, headless, with one 1440 × 1100 page; page errors and console errors
 * (other than failed resource loads, which the pages show and the checks read) are collected
 * in `errors`.
 */
export async function launch(executablePath) {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 1100 } });
  const errors = [];
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) {
      errors.push(`console: ${msg.text()}`);
    }
  });
  return { browser, page, errors };
}

/**
 * Calls `check` every 200 ms until it returns something truthy, and returns that; fails after
 * `timeoutMs`. `between` (optional) runs between two calls.
 */
export async function poll(what, check, timeoutMs, between) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    if (between) await between();
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Runs `run` (which prints its own `ok: …` line) and exits: 0 when it returned, 1 after printing
 * `FAIL: …` and saving a screenshot of `page()` to `screenshotPath` when it threw. `browser()`
 * is closed either way.
 */
export async function finish(run, { page, browser, screenshotPath }) {
  let code = 0;
  try {
    await run();
  } catch (err) {
    code = 1;
    console.log(`FAIL: ${err instanceof Failure ? err.message : `unexpected error: ${err?.stack ?? err}`}`);
    if (page()) {
      mkdirSync(dirname(screenshotPath), { recursive: true });
      await page()
        .screenshot({ path: screenshotPath, fullPage: true })
        .catch(() => {});
    }
  } finally {
    await browser()?.close();
  }
  process.exit(code);
}

/** Starts test/mock-server.mjs on a free port; resolves to its URL and process (kill it when done). */
export async function startMockServer() {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'mock-server.mjs');
  const mock = spawn(process.execPath, [script, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((ok, ko) => {
    let out = '';
    mock.stdout.on('data', (d) => {
      out += d;
      const m = /on (http:\/\/\S+\/)/.exec(out);
      if (m) ok(m[1]);
    });
    mock.on('exit', (code) => ko(new Error(`mock server exited with ${code}`)));
  });
  return { url, mock };
}
