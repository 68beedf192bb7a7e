// The dashboard in a real chromium: an admin key to get in (a plain key is told it needs one),
// the server's pipeline drawing with each stage's p50 and req/s filled in from /metrics after
// real requests, and charts that plot live numbers; a key revoked while the dashboard is open
// brings back the form, which then stays put until one submit signs in once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, post, scratchPath, startServer, writeTemp } from '../server/harness.mjs';
import { launch, openPage, revokingProxy, screenshot, skipReason } from './browser.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

describe('the dashboard', { skip: reason || false }, () => {
  let browser;
  let server;
  let admin;
  let user;
  before(async () => {
    browser = await launch();
    const keys = scratchPath('dashboard-keys.yaml');
    admin = addKey(keys, 'ops', { user: 'root', roles: ['admin'] });
    user = addKey(keys, 'ops', { user: 'alice' });
    const pipeline = writeTemp('web-dashboard.yaml', `version: 1
name: web-dashboard
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: echo, type: echo, config: {words_per_chunk: 2}}
  - {name: shout, type: uppercase}
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  test('a plain key is refused; an admin key shows the graph with live stage numbers and charts', async () => {
    const page = await openPage(browser, `${server.url}/dashboard`);
    await page.waitForSelector('#signin:not([hidden])');
    await page.fill('#api-key', user);
    await page.press('#api-key', 'Enter');
    await page.waitForFunction(() => /needs an admin key/.test(document.querySelector('#signin-message').textContent) &&
      !document.querySelector('#signin').hidden);
    await page.fill('#api-key', admin);
    await page.press('#api-key', 'Enter');
    await page.waitForSelector('#app:not([hidden])');

    // Traffic for the numbers.
    for (let i = 0; i < 6; i += 1) {
      const answer = await post(server.url, '/v1/chat/completions', {
        model: 'web-dashboard', stream: true, messages: [{ role: 'user', content: `hello number ${i} from the dashboard test` }],
      }, { Authorization: `Bearer ${user}` });
      assert.equal(answer.status, 200, answer.text);
    }
    const graph = await fetch(`${server.url}/v1/dashboard/graph.svg`, { headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(graph.status, 200, `GET /v1/dashboard/graph.svg: ${await graph.text()}`);
    await page.waitForSelector('#graph svg g.stage[data-stage="echo"]');
    const stats = await page.waitForFunction(() => {
      const text = document.querySelector('#graph text.stage-stats[data-stage="echo"]')?.textContent ?? '';
      return /p50 .* req\/s/.test(text) ? text : false;
    }, null, { timeout: 15000 });
    assert.match(await stats.jsonValue(), /^p50 (< )?[\d.]+ (µs|ms|s) · [\d.]+ req\/s$/);
    const fill = await page.evaluate(() => document.querySelector('#graph g.stage[data-stage="echo"] rect').style.fill);
    assert.ok(fill, 'the stage is coloured by its latency');
    assert.equal(await page.locator('#graph script').count(), 0);
    // Charts plot numbers: requests, latencies, tokens.
    await page.waitForFunction(() => document.querySelectorAll('#charts figure[data-has-data="yes"]').length >= 4, null, { timeout: 15000 });
    const charts = await page.evaluate(() => [...document.querySelectorAll('#charts figure')].map((f) => f.dataset.chart));
    for (const id of ['requests', 'ttft', 'itl', 'tokens', 'stages', 'cache', 'kv', 'rejections']) assert.ok(charts.includes(id), `${id} chart`);
    assert.match(await page.textContent('#charts figure[data-chart="ttft"] .latest'), /p50: [\d.]+ ms/);
    assert.equal(await page.locator('#charts canvas').count() >= charts.length, true);
    await screenshot(page, 'dashboard-auth.png');
    assert.deepEqual(page.problems.filter((p) => !/40[13]/.test(p)), []);
    await page.context().close();
  });

  test('a key revoked while open: the form stays as typed, and one submit signs in once', async () => {
    const proxy = await revokingProxy(server.url);
    try {
      const page = await openPage(browser, `${proxy.url}/dashboard`);
      await page.waitForSelector('#signin:not([hidden])');
      await page.fill('#api-key', admin);
      await page.press('#api-key', 'Enter');
      await page.waitForSelector('#app:not([hidden])');
      await page.waitForFunction(() => /updated/.test(document.querySelector('#updated').textContent));
      proxy.revoked = true;
      await page.waitForSelector('#signin:not([hidden])', { timeout: 5000 });
      assert.match(await page.textContent('#signin-message'), /not accepted/);
      await page.fill('#api-key', 'sk-half-typ');
      const refusedScrapes = proxy.seen['/metrics'];
      // Three scrape intervals: nothing polls behind the form, nothing clears it.
      await page.waitForTimeout(6500);
      assert.equal(await page.inputValue('#api-key'), 'sk-half-typ');
      assert.equal(await page.isVisible('#signin'), true);
      assert.equal(proxy.seen['/metrics'], refusedScrapes, 'no scrape while the form waits');
      proxy.revoked = false;
      const summaries = proxy.seen['/v1/dashboard/summary'] ?? 0;
      const scrapes = proxy.seen['/metrics'];
      await page.fill('#api-key', admin);
      await page.press('#api-key', 'Enter');
      await page.waitForSelector('#app:not([hidden])');
      await page.waitForTimeout(4500);
      // One start: the summary at start and one per scrape, a scrape every 2 s (0, 2, 4 s).
      const scraped = proxy.seen['/metrics'] - scrapes;
      assert.ok(scraped >= 2 && scraped <= 3, `${scraped} scrapes in 4.5 s after signing in`);
      assert.ok(proxy.seen['/v1/dashboard/summary'] - summaries <= scraped + 1);
      assert.equal(await page.isVisible('#signin'), false);
      await page.context().close();
    } finally {
      await proxy.close();
    }
  });

  test('a drawing that failed to load (503) is asked for again', async () => {
    const proxy = await revokingProxy(server.url);
    try {
      proxy.unavailable.add('/v1/dashboard/graph.svg');
      const page = await openPage(browser, `${proxy.url}/dashboard`);
      await page.waitForSelector('#signin:not([hidden])');
      await page.fill('#api-key', admin);
      await page.press('#api-key', 'Enter');
      await page.waitForFunction(() => /not available/.test(document.querySelector('#graph').textContent));
      proxy.unavailable.clear();
      await page.waitForSelector('#graph svg g.stage[data-stage="echo"]', { timeout: 6000 });
      const asked = proxy.seen['/v1/dashboard/graph.svg'];
      await page.waitForTimeout(4500);
      assert.equal(proxy.seen['/v1/dashboard/graph.svg'], asked, 'once it loaded, the drawing is not fetched again');
      await page.context().close();
    } finally {
      await proxy.close();
    }
  });

  test('an A/B pipeline gets the per-arm chart, with both arms plotted', async () => {
    const pipeline = writeTemp('web-ab.yaml', `version: 1
name: web-ab
stages:
  - {name: split, type: ab_split, config: {key: session, arms: {plain: 50, shouting: 50}}}
  - {name: plain, type: echo}
  - {name: shouting, type: echo, config: {prefix: "HEY "}}
  - {name: shout, type: uppercase}
  - {name: emit, type: sse_emit}
edges:
  - split.plain -> plain
  - split.shouting -> shouting
  - shouting.out -> shout
  - plain.out -> emit
  - shout.out -> emit
`);
    const ab = await startServer(['--pipeline', pipeline]);
    try {
      const page = await openPage(browser, `${ab.url}/dashboard`, { viewport: { width: 1280, height: 1000 } });
      await page.waitForSelector('#app:not([hidden])');
      for (let i = 0; i < 24; i += 1) {
        const answer = await post(ab.url, '/v1/chat/completions', {
          model: 'web-ab', stream: true, session_id: `visitor-${i}`, messages: [{ role: 'user', content: `hello from visitor ${i}` }],
        });
        assert.equal(answer.status, 200, answer.text);
      }
      await page.waitForFunction(() => {
        const text = document.querySelector('#charts figure[data-chart="arms"] .latest')?.textContent ?? '';
        return /plain req\/s: [\d.]+/.test(text) && /shouting req\/s: [\d.]+/.test(text) && !/plain TTFT p50: –/.test(text);
      }, null, { timeout: 15000 });
      await page.waitForFunction(() => /req\/s/.test(document.querySelector('#graph text.stage-stats[data-stage="plain"]')?.textContent ?? ''), null, { timeout: 15000 });
      await screenshot(page, 'dashboard.png');
      await page.context().close();
    } finally {
      assert.equal((await ab.stop()).code, 0);
    }
  });
});
