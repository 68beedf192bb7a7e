// The dashboard in a real chromium: an admin key to get in (a plain key is told it needs one),
// the server's pipeline drawing with each stage's p50 and req/s filled in from /metrics after
// real requests, and charts that plot live numbers; a key revoked while the dashboard is open
// brings back the form, which then stays put until one submit signs in once. Against a model
// pipeline with a tight rate limit, an exact cache and a quota: each counter equals what the
// test's own traffic makes it, tick labels differ and carry their chart's unit, the time range
// switches, and a reload keeps the history the server sampled.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { addKey, modelStages, post, scratchPath, startServer, testModel, writeTemp } from '../server/harness.mjs';
import { launch, openPage, revokingProxy, screenshot, skipReason } from './browser.mjs';

const src = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'web', 'src');
const { formatValue, palette, tickLabels } = await import(pathToFileURL(path.join(src, 'chart_format.js')).href);

describe('chart numbers', () => {
  test('tick labels differ, in the unit of the largest, with no more decimals than needed', () => {
    assert.deepEqual(tickLabels([0, 0.001, 0.002, 0.003], 's'), ['0 ms', '1 ms', '2 ms', '3 ms']);
    assert.deepEqual(tickLabels([0, 0.0005, 0.001, 0.0015], 's'), ['0.0 ms', '0.5 ms', '1.0 ms', '1.5 ms']);
    assert.deepEqual(tickLabels([0, 0.00002, 0.00004], 's'), ['0 µs', '20 µs', '40 µs']);
    assert.deepEqual(tickLabels([0, 0.5, 1, 1.5, 2], 's'), ['0.0 s', '0.5 s', '1.0 s', '1.5 s', '2.0 s']);
    assert.deepEqual(tickLabels([0, 0.002, 0.004], '/s'), ['0.000/s', '0.002/s', '0.004/s']);
    assert.deepEqual(tickLabels([0, 1500, 3000], '/s'), ['0.0 k/s', '1.5 k/s', '3.0 k/s']);
    assert.deepEqual(tickLabels([0, 0.25, 0.5], 'share'), ['0 %', '25 %', '50 %']);
    assert.deepEqual(tickLabels([0, 0.001, 0.002], 'share'), ['0.0 %', '0.1 %', '0.2 %']);
    for (const unit of ['s', '/s', 'share', '%', '']) {
      for (const step of [1e-6, 1e-4, 0.01, 0.3, 7, 250]) {
        const ticks = [0, 1, 2, 3, 4].map((i) => i * step);
        const labels = tickLabels(ticks, unit);
        assert.equal(new Set(labels).size, labels.length, `${unit} ${step}: ${labels}`);
      }
    }
  });
  test('a value alone in its own unit; sixteen distinct colours', () => {
    assert.equal(formatValue(0.0123, 's'), '12.3 ms');
    assert.equal(formatValue(0.00004, 's'), '40 µs');
    assert.equal(formatValue(2.5, 's'), '2.50 s');
    assert.equal(formatValue(350, '/s'), '350/s');
    assert.equal(formatValue(0.4, 'share'), '40 %');
    assert.equal(formatValue(undefined, 's'), '–');
    assert.equal(new Set(palette.map((colour) => colour.toLowerCase())).size, 16);
  });
});

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
    for (const id of ['status', 'errors', 'tokens', 'e2e', 'ttft', 'tpot', 'queue', 'itl', 'requests', 'stages', 'cache', 'kv', 'preemptions']) {
      assert.ok(charts.includes(id), `${id} chart`);
    }
    await page.waitForFunction(() => /p50: [\d.]+ (µs|ms|s)/.test(document.querySelector('#charts figure[data-chart="ttft"] .latest').textContent), null, { timeout: 15000 });
    // A pipeline without a model says so instead of an empty plot.
    assert.equal(await page.textContent('#charts figure[data-chart="kv"] .empty'), 'No model engine in this pipeline.');
    assert.equal(await page.textContent('#usage'), 'No quota configured: this pipeline has no quota stage, so no usage ledger.');
    await page.waitForFunction(() => document.querySelector('#health').textContent === 'Health: ok');
    assert.equal(await page.locator('#charts canvas').count() >= charts.length, true);
    await screenshot(page, 'dashboard-auth.png');
    assert.deepEqual(page.problems.filter((p) => !/40[13]/.test(p)), []);
    await page.context().close();
  });

  test('each counter equals the traffic sent: statuses, delivered tokens with cache hits, hit rate without 429s, usage and quota', async () => {
    const keys = scratchPath('dashboard-model-keys.yaml');
    const root = addKey(keys, 'ops', { user: 'root', roles: ['admin'] });
    const bob = addKey(keys, 'ops', { user: 'bob' });
    const carol = addKey(keys, 'limited', { user: 'carol' });
    const pipeline = writeTemp('web-dashboard-model.yaml', `version: 1
name: web-dashboard-model
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: limits, type: rate_limit, config: {rpm: 600, tenants: {limited: "rpm=2"}}}
  - {name: quota, type: quota, config: {database: ${scratchPath('dashboard-usage.db')}, model: llm, tenants: {ops: "200000"}}}
  - {name: exact, type: exact_cache}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
`);
    const modelServer = await startServer(['--pipeline', pipeline]);
    try {
      // Only admins read the history; a range it does not keep is named.
      const history = (query, key) => fetch(`${modelServer.url}/v1/dashboard/history${query}`, { headers: { Authorization: `Bearer ${key}` } });
      assert.equal((await history('', bob)).status, 403);
      const badRange = await history('?range=2h', root);
      assert.equal(badRange.status, 400);
      assert.match((await badRange.json()).error.message, /'range' must be 15m, 1h or 6h, got '2h'/);

      const sent = { total: 0, byStatus: {}, delivered: 0, fromCache: 0, hits: 0, tenants: {} };
      const ask = async (key, tenant, content) => {
        const answer = await post(modelServer.url, '/v1/chat/completions', {
          model: 'test-model', max_tokens: 6, temperature: 0, messages: [{ role: 'user', content }],
        }, { Authorization: `Bearer ${key}` });
        sent.total += 1;
        sent.byStatus[answer.status] = (sent.byStatus[answer.status] ?? 0) + 1;
        if (answer.status === 200) {
          sent.delivered += answer.json.usage.completion_tokens;
          const usage = (sent.tenants[tenant] ??= { requests: 0, tokens: 0 });
          usage.requests += 1;
          usage.tokens += answer.json.usage.total_tokens;
          if (answer.headers.get('x-chatflow-cache') === 'exact') {
            sent.hits += 1;
            sent.fromCache += answer.json.usage.completion_tokens;
          }
        } else {
          assert.equal(answer.status, 429, answer.text);
        }
      };
      for (const question of ['the first question', 'the second question', 'the third question']) await ask(bob, 'ops', question);
      await ask(bob, 'ops', 'the first question');
      await ask(bob, 'ops', 'the second question');
      for (let i = 0; i < 5; i += 1) await ask(carol, 'limited', `a limited question ${i}`);
      assert.equal(sent.hits, 2, 'two exact repeats');
      assert.ok(sent.byStatus[429] >= 2, `the tight limit refused some: ${JSON.stringify(sent.byStatus)}`);
      assert.ok(sent.fromCache > 0);

      const page = await openPage(browser, `${modelServer.url}/dashboard`, { viewport: { width: 1280, height: 1000 } });
      await page.waitForSelector('#signin:not([hidden])');
      await page.fill('#api-key', root);
      await page.press('#api-key', 'Enter');
      await page.waitForSelector('#app:not([hidden])');
      const text = (selector) => page.textContent(selector);
      await page.waitForFunction((total) => document.querySelector('[data-counter="requests"] .value')?.textContent === String(total), sent.total, { timeout: 15000 });
      await page.waitForFunction((delivered) => document.querySelector('[data-counter="tokens"] .value')?.textContent === delivered.toLocaleString('en-US'), sent.delivered, { timeout: 15000 });
      const statuses = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('[data-counter="requests"] .status')].map((part) => [part.dataset.status, Number(part.dataset.count)])));
      assert.deepEqual(statuses, sent.byStatus);
      assert.equal(await text('[data-counter="errors"] .value'), String(sent.byStatus[429]));
      assert.equal(await text('[data-counter="errors"] .detail'), `429: ${sent.byStatus[429]}`);
      assert.match(await text('[data-counter="tokens"] .detail'), new RegExp(`^${sent.fromCache} from caches · [\\d,]+ generated by the engine$`));
      // The hit rate's denominator is the answered requests, not the 429s.
      const answered = sent.byStatus[200];
      assert.equal(await text('[data-counter="hit-rate"] .value'), `${((100 * sent.hits) / answered).toFixed(1)} %`);
      assert.equal(await text('[data-counter="hit-rate"] .detail'), `${sent.hits} of ${answered} answered requests (refused ones not counted)`);
      assert.equal(await text('[data-counter="preemptions"] .value'), '0');
      await page.waitForFunction(() => document.querySelector('#health').textContent === 'Health: ok');
      // Per tenant: the ledger's requests and tokens, the quota and what is left of it.
      await page.waitForSelector('#usage tr[data-tenant="ops"]');
      const usage = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#usage tbody tr')].map((row) => [row.dataset.tenant, [...row.cells].map((cell) => cell.textContent)])));
      const fmt = (n) => n.toLocaleString('en-US');
      assert.deepEqual(usage.ops, ['ops', fmt(sent.tenants.ops.requests), fmt(sent.tenants.ops.tokens), fmt(200000), fmt(200000 - sent.tenants.ops.tokens)]);
      assert.deepEqual(usage.limited, ['limited', fmt(sent.tenants.limited.requests), fmt(sent.tenants.limited.tokens), 'no limit', '–']);

      // Charts from the server's samples: a series per status, tick labels that differ and
      // carry the unit their chart is in.
      await page.waitForFunction(() => /429/.test(document.querySelector('#charts figure[data-chart="status"] .u-legend')?.textContent ?? ''), null, { timeout: 15000 });
      await page.waitForFunction(() => document.querySelector('#charts figure[data-chart="e2e"]')?.dataset.hasData === 'yes', null, { timeout: 15000 });
      for (const id of ['status', 'errors', 'tokens', 'ttft', 'tpot', 'queue', 'cache']) {
        assert.equal(await page.getAttribute(`#charts figure[data-chart="${id}"]`, 'data-has-data'), 'yes', `the ${id} chart has points`);
      }
      const figures = await page.evaluate(() => [...document.querySelectorAll('#charts figure')].map((figure) => ({
        id: figure.dataset.chart, title: figure.querySelector('h3').textContent, ticks: JSON.parse(figure.dataset.ticks || '[]'),
      })));
      const units = { status: /\/s$/, errors: /\/s$/, tokens: /\/s$/, preemptions: /\/s$/, e2e: / (µs|ms|s)$/, ttft: / (µs|ms|s)$/, tpot: / (µs|ms|s)$/, queue: / (µs|ms|s)$/, cache: / %$/, kv: / %$/ };
      for (const figure of figures) {
        assert.ok(figure.ticks.length >= 2, `${figure.id} has tick labels`);
        assert.equal(new Set(figure.ticks).size, figure.ticks.length, `${figure.id}: ${figure.ticks.join(' / ')}`);
        assert.doesNotMatch(figure.title, /\((s|ms)\)/, 'a title names no unit its axis might not use');
        if (units[figure.id]) for (const tick of figure.ticks) assert.match(tick, units[figure.id], `${figure.id}: ${tick}`);
      }
      assert.match(figures.find((figure) => figure.id === 'tokens').title, /per second/);

      // The range switch asks the server for that range; a reload keeps the range and the
      // samples taken before it.
      const asked = [];
      page.on('request', (request) => { if (request.url().includes('/v1/dashboard/history')) asked.push(new URL(request.url()).searchParams.get('range')); });
      await page.click('#ranges button[data-range="1h"]');
      await page.waitForFunction(() => /one every 20 s/.test(document.querySelector('#range-note').textContent));
      assert.equal(await page.getAttribute('#ranges button[data-range="1h"]', 'aria-pressed'), 'true');
      assert.ok(asked.includes('1h'));
      await page.click('#ranges button[data-range="15m"]');
      await page.waitForFunction(() => /one every 5 s/.test(document.querySelector('#range-note').textContent));
      await page.waitForFunction(() => Number(document.querySelector('#charts').dataset.samples) >= 3, null, { timeout: 20000 });
      const before = await page.evaluate(() => ({ ...document.querySelector('#charts').dataset }));
      await page.reload();
      await page.waitForSelector('#app:not([hidden])');
      await page.waitForFunction(() => Number(document.querySelector('#charts').dataset.samples) > 0);
      const afterReload = await page.evaluate(() => ({ ...document.querySelector('#charts').dataset }));
      assert.equal(afterReload.first, before.first, 'the oldest sample is still there');
      assert.ok(Number(afterReload.samples) >= Number(before.samples), `${afterReload.samples} samples after the reload, ${before.samples} before`);
      assert.match(await text('#charts figure[data-chart="status"] .u-legend'), /429/);
      assert.equal(await page.getAttribute('#ranges button[data-range="15m"]', 'aria-pressed'), 'true');
      await screenshot(page, 'dashboard-counters.png');
      // A phone: everything within the screen's width, the range buttons and counters on it.
      await page.setViewportSize({ width: 390, height: 844 });
      await page.waitForFunction(() => document.documentElement.scrollWidth <= 390, null, { timeout: 5000 })
        .catch(async () => assert.fail(`the page is wider than 390 px: ${await page.evaluate(() => [...document.querySelectorAll('body *')]
          .filter((element) => element.getBoundingClientRect().right > 390).slice(0, 5)
          .map((element) => `${element.tagName}.${element.className} to ${element.getBoundingClientRect().right}`).join(', '))}`));
      for (const selector of ['#ranges button[data-range="6h"]', '#signout', '[data-counter="tokens"]', '#charts figure[data-chart="status"]']) {
        const box = await page.locator(selector).boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= 390, `${selector} within the screen: ${JSON.stringify(box)}`);
      }
      await screenshot(page, 'dashboard-phone.png');
      assert.deepEqual(page.problems.filter((p) => !/40[13]/.test(p)), []);
      await page.context().close();
    } finally {
      assert.equal((await modelServer.stop()).code, 0);
    }
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
