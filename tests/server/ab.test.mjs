// A/B over HTTP: the arm comes back as x-chatflow-arm and stays with its caller, /metrics has
// per-arm series that add up, the access log notes the arm, and `chatflow bench --sessions`
// reports each arm; with `key: end_user`, one app key's end users (the body's `user`) split.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, post, runChatflow, scrape, scratchPath, startServer, waitFor, writeTemp,
} from './harness.mjs';

describe('A/B experiments', () => {
  let server;
  before(async () => {
    const pipeline = writeTemp('ab.yaml', `version: 1
name: ab
stages:
  - {name: split, type: ab_split, config: {key: session, arms: {plain: 50, shouting: 50}}}
  - {name: plain, type: echo}
  - {name: shouting, type: echo, config: {prefix: "HEY "}}
  - {name: emit, type: sse_emit}
edges:
  - split.plain -> plain
  - split.shouting -> shouting
  - plain.out -> emit
  - shouting.out -> emit
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  test('each caller keeps one arm, and the arm answers', async () => {
    const seen = {};
    for (let round = 0; round < 3; round++) {
      for (let caller = 0; caller < 40; caller++) {
        const response = await post(server.url, '/v1/chat/completions', {
          model: 'ab', session_id: `caller-${caller}`, messages: [{ role: 'user', content: 'hello' }],
        });
        assert.equal(response.status, 200, response.text);
        const arm = response.headers.get('x-chatflow-arm');
        assert.ok(arm === 'plain' || arm === 'shouting', `arm ${arm}`);
        seen[caller] ??= arm;
        assert.equal(arm, seen[caller], `caller-${caller} changed arms`);
        assert.equal(response.json.choices[0].message.content, arm === 'shouting' ? 'HEY hello' : 'hello');
      }
    }
    const arms = Object.values(seen);
    assert.ok(arms.includes('plain') && arms.includes('shouting'), '40 callers all in one arm');

    await waitFor(async () => {
      const samples = await scrape(server.url);
      return metric(samples, 'chatflow:arm_requests_total') === 120;
    }, { what: '120 requests counted per arm' });
    const samples = await scrape(server.url);
    for (const arm of ['plain', 'shouting']) {
      const expected = 3 * arms.filter((value) => value === arm).length;
      assert.equal(metric(samples, 'chatflow:arm_requests_total', `arm="${arm}"`), expected);
      assert.equal(metric(samples, 'chatflow:arm_e2e_request_latency_seconds_count', `arm="${arm}"`), expected);
    }
    const logged = fs.readFileSync(server.accessLog, 'utf8').trim().split('\n')
      .map((line) => JSON.parse(line)).filter((entry) => entry.path === '/v1/chat/completions');
    assert.ok(logged.length >= 120);
    assert.ok(logged.every((entry) => entry.notes?.arm === 'plain' || entry.notes?.arm === 'shouting'));
  });

  test('chatflow bench reports each arm', () => {
    const result = runChatflow(['bench', '--url', server.url, '--model', 'ab', '--requests', '200',
      '--concurrency', '4', '--sessions', '50', '--json']);
    assert.equal(result.status, 0, result.stderr);
    const report = JSON.parse(result.stdout);
    assert.equal(report.successful_requests, 200);
    const arms = report.arms;
    assert.deepEqual(Object.keys(arms).sort(), ['plain', 'shouting']);
    assert.equal(arms.plain.successful_requests + arms.shouting.successful_requests, 200);
    assert.ok(arms.plain.e2e.p50_ms > 0 && arms.shouting.e2e.p50_ms > 0);
  });
});

describe('A/B by the client\'s end-user label', () => {
  let server;
  let appKey;
  before(async () => {
    const keysFile = scratchPath('ab-end-user-keys.yaml');
    appKey = addKey(keysFile, 'app', { user: 'backend' });
    const pipeline = writeTemp('ab-end-user.yaml', `version: 1
name: ab
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: split, type: ab_split, config: {key: end_user, arms: {plain: 70, shouting: 30}}}
  - {name: plain, type: echo}
  - {name: shouting, type: echo, config: {prefix: "HEY "}}
  - {name: emit, type: sse_emit}
edges:
  - split.plain -> plain
  - split.shouting -> shouting
  - plain.out -> emit
  - shouting.out -> emit
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  const ask = async (user) => {
    const body = { model: 'ab', messages: [{ role: 'user', content: 'hello' }] };
    if (user !== undefined) body.user = user;
    const response = await post(server.url, '/v1/chat/completions', body, { Authorization: `Bearer ${appKey}` });
    assert.equal(response.status, 200, response.text);
    const arm = response.headers.get('x-chatflow-arm');
    assert.equal(response.json.choices[0].message.content, arm === 'shouting' ? 'HEY hello' : 'hello');
    return arm;
  };

  test('one key, many labels: split by the weights, each label sticky', async () => {
    const labels = 300;
    const seen = {};
    for (let i = 0; i < labels; i++) seen[`customer-${i}`] = await ask(`customer-${i}`);
    const shouting = Object.values(seen).filter((arm) => arm === 'shouting').length;
    // 30% of 300 is 90; the labels are fixed, so this is not a matter of luck from run to run.
    assert.ok(shouting >= 60 && shouting <= 120, `${shouting} of ${labels} labels in the 30% arm`);
    for (let i = 0; i < labels; i += 10) {
      assert.equal(await ask(`customer-${i}`), seen[`customer-${i}`], `customer-${i} changed arms`);
    }
    // Without a label the key's own user decides: always the same arm.
    const unlabelled = await ask();
    for (let i = 0; i < 5; i++) assert.equal(await ask(), unlabelled);
  });
});
