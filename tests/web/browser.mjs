// What the browser tests share: why they would skip, chromium through playwright-core (from
// web/node_modules), screenshots under build/web-artifacts, a page-side sampler that records
// each distinct paint of the answer, and a scripting proxy: a tiny Node server in front of a
// real `chatflow serve` that passes every request through (the page, its assets, the API)
// except the ones a test scripts, whose bytes it writes with chosen boundaries and pauses.
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';

export const webRoot = process.env.CHATFLOW_WEB_ROOT;
export const chromiumPath = process.env.CHATFLOW_CHROMIUM || '/usr/bin/chromium';
export const artifacts = process.env.CHATFLOW_WEB_ARTIFACTS;
const nodeModules = process.env.CHATFLOW_WEB_NODE_MODULES;

// Why the browser tests cannot run here, or '' when they can.
export function skipReason({ browser = true } = {}) {
  if (!webRoot || !fs.existsSync(path.join(webRoot, 'index.html'))) {
    return `the web UI is not built (${webRoot}/index.html missing): install Node.js and npm, re-run cmake, rebuild`;
  }
  if (!browser) return '';
  if (!fs.existsSync(chromiumPath)) return `no chromium at ${chromiumPath} (apt-get install chromium)`;
  if (!nodeModules || !fs.existsSync(path.join(nodeModules, 'playwright-core'))) {
    return `playwright-core is not installed in ${nodeModules} (the web target runs npm ci)`;
  }
  return '';
}

export async function launch() {
  const require = createRequire(path.join(nodeModules, 'noop.js'));
  const { chromium } = require('playwright-core');
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

// A page whose console errors and page errors are collected (a test can assert there are none).
export async function openPage(browser, url, { viewport = { width: 1200, height: 800 }, colorScheme = 'light', permissions = [] } = {}) {
  const context = await browser.newContext({ viewport, colorScheme, permissions });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (error) => page.problems.push(`pageerror: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') page.problems.push(`console: ${message.text()}`);
  });
  if (url) await page.goto(url);
  return page;
}

export async function screenshot(page, name) {
  if (!artifacts) return undefined;
  fs.mkdirSync(artifacts, { recursive: true });
  const file = path.join(artifacts, name);
  await page.screenshot({ path: file, fullPage: false });
  return file;
}

// Records the last answer's text at every animation frame where it changed.
export async function startPaintSampler(page) {
  await page.evaluate(() => {
    window.__paints = [];
    let last = null;
    const sample = () => {
      const answers = document.querySelectorAll('.message.assistant .content');
      const answer = answers[answers.length - 1];
      const text = answer ? answer.textContent : null;
      if (text !== null && text !== last) {
        window.__paints.push({ t: performance.now(), text, html: answer.innerHTML });
        last = text;
      }
      window.__sampler = requestAnimationFrame(sample);
    };
    sample();
  });
}

export async function paints(page) {
  return page.evaluate(() => window.__paints);
}

// OpenAI-style stream events for `pieces` of an answer, then finish and usage and [DONE].
export function sseEvents(pieces, { finish = 'stop', extra = [] } = {}) {
  const base = { id: 'chatcmpl-test', object: 'chat.completion.chunk', created: 1, model: 'scripted' };
  const events = [{ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }];
  for (const piece of pieces) events.push({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
  events.push(...extra.map((e) => ({ ...base, ...e })));
  events.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: finish }] });
  events.push({ ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: pieces.length, total_tokens: pieces.length + 3 } });
  return `${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`;
}

// Splits `bytes` into pieces at the given byte offsets.
export function splitAt(bytes, offsets) {
  const pieces = [];
  let start = 0;
  for (const offset of [...offsets].sort((a, b) => a - b)) {
    pieces.push(bytes.subarray(start, offset));
    start = offset;
  }
  pieces.push(bytes.subarray(start));
  return pieces.filter((piece) => piece.length);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The proxy. `script` is called for each POST /v1/chat/completions with the parsed body and
// returns { status, headers, pieces: [Buffer], pauseMs } or null to pass it through.
export async function scriptingProxy(upstream, script) {
  const target = new URL(upstream);
  const requests = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    if (req.method === 'POST' && req.url.startsWith('/v1/chat/completions')) {
      let parsed;
      try { parsed = JSON.parse(body.toString()); } catch { parsed = null; }
      requests.push({ headers: req.headers, body: parsed });
      const scripted = await script(parsed, req);
      if (scripted) {
        res.writeHead(scripted.status ?? 200, {
          'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', ...(scripted.headers || {}),
        });
        res.flushHeaders();
        for (const piece of scripted.pieces || []) {
          if (res.destroyed) return;
          res.write(piece);
          await sleep(scripted.pauseMs ?? 20);
        }
        res.end();
        return;
      }
    }
    forwardTo(target, req, res).end(body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

// A pass-through proxy that can turn a key away: while `revoked` is set, every API call (not
// the page and its assets) answers 401, as the server does once a key is removed. `seen` counts

// The request `req` sent on to `target` with its headers, the answer piped back into `res`;
// the caller writes the request's body into what this returns.
function forwardTo(target, req, res) {
  const forward = http.request({
    host: target.hostname, port: target.port, path: req.url, method: req.method,
    headers: { ...req.headers, host: target.host },
  }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  forward.on('error', () => res.destroy());
  return forward;
}

// requests by path; a path put in `unavailable` answers 503 (a server still loading).
export async function revokingProxy(upstream) {
  const target = new URL(upstream);
  const state = { revoked: false, seen: {}, unavailable: new Set() };
  const server = http.createServer((req, res) => {
    const route = req.url.split('?')[0];
    state.seen[route] = (state.seen[route] ?? 0) + 1;
    const api = route === '/metrics' || route.startsWith('/v1/');
    if (state.unavailable.has(route)) {
      res.writeHead(503, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'the pipeline is loading', type: 'server_error' } }));
      return;
    }
    if (state.revoked && api) {
      res.writeHead(401, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'the API key was revoked', type: 'authentication_error', code: 'invalid_api_key' } }));
      return;
    }
    req.pipe(forwardTo(target, req, res));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(state, {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  });
}

// The signed-in page is ready: the app shown and the model list filled.
export async function ready(page) {
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
}

// Types `text` into the message box and sends it with Enter.
export async function send(page, text) {
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

// The last answer has finished streaming.
export const lastAnswerDone = (page, timeout = 20000) =>
  page.waitForSelector('.message.assistant:last-of-type[aria-busy="false"]', { timeout });

// Signs in on the form the page shows for a server that needs a key, and waits for the app.
export async function signIn(page, key) {
  await page.waitForSelector('#signin:not([hidden])');
  await page.fill('#api-key', key);
  await page.press('#api-key', 'Enter');
  await page.waitForSelector('#app:not([hidden])');
}
