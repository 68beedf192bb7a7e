// Rate limits and quotas over HTTP: two tenants with different limits, 429 with the headers and
// Retry-After, recovery after the wait, settlement of reserved tokens to the real count, the
// SQLite quota ledger, /v1/usage and `chatflow usage`.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, openStream, post, runChatflow, scrape, scratchPath, startServer, testModel, waitFor, writeTemp,
} from './harness.mjs';

function pipeline(name, gates) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${scratchPath(`${name}-keys.yaml`)}, public_paths: [/health, /metrics]}}
${gates}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

const ask = (max_tokens = 2) => ({
  model: 'test-model', messages: [{ role: 'user', content: 'hello there' }], max_tokens, ignore_eos: true,
});

describe('rate limits per tenant', () => {
  let server;
  let acme;
  let globex;
  before(async () => {
    const file = pipeline('limits', `  - name: limits
    type: rate_limit
    config: {model: llm, window_s: 4, tenants: {acme: "rpm=2", globex: "rpm=100"}}`);
    acme = addKey(scratchPath('limits-keys.yaml'), 'acme');
    globex = addKey(scratchPath('limits-keys.yaml'), 'globex');
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('one tenant hits 429 with headers; the other is unaffected; after the wait it passes', async () => {
    const as = (key) => ({ Authorization: `Bearer ${key}` });
    const first = await post(server.url, '/v1/chat/completions', ask(), as(acme));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-ratelimit-limit-requests'), '2');
    assert.equal(first.headers.get('x-ratelimit-remaining-requests'), '1');
    assert.match(first.headers.get('x-ratelimit-reset-requests'), /^\d+(ms|s)$/);
    const second = await post(server.url, '/v1/chat/completions', ask(), as(acme));
    assert.equal(second.status, 200);
    assert.equal(second.headers.get('x-ratelimit-remaining-requests'), '0');
    const refused = await post(server.url, '/v1/chat/completions', ask(), as(acme));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.equal(refused.json.error.type, 'requests');
    const retryAfter = Number(refused.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 2, `Retry-After ${retryAfter}`);
    assert.equal(refused.headers.get('x-ratelimit-limit-requests'), '2');
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    // The other tenant is not touched by acme's limit.
    for (let i = 0; i < 5; i++) {
      const other = await post(server.url, '/v1/chat/completions', ask(), as(globex));
      assert.equal(other.status, 200);
      assert.equal(other.headers.get('x-ratelimit-limit-requests'), '100');
    }
    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 100));
    const again = await post(server.url, '/v1/chat/completions', ask(), as(acme));
    assert.equal(again.status, 200, again.text);
    // The tenant is in the metrics: requests by status, tokens by kind.
    const samples = await waitFor(async () => {
      const all = await scrape(server.url);
      return metric(all, 'chatflow:tenant_requests_total', 'tenant="acme"', 'status="200"') === 3 ? all : undefined;
    }, { what: 'per-tenant request counts' });
    assert.equal(metric(samples, 'chatflow:tenant_requests_total', 'tenant="acme"', 'status="429"'), 1);
    assert.equal(metric(samples, 'chatflow:tenant_requests_total', 'tenant="globex"', 'status="200"'), 5);
    assert.equal(metric(samples, 'chatflow:tenant_tokens_total', 'tenant="globex"', 'kind="completion"'), 10);
  });
});

describe('token reservation and quota', () => {
  let server;
  let acme;
  let globex;
  let admin;
  const database = scratchPath('usage.db');
  before(async () => {
    const file = pipeline('tokens', `  - name: limits
    type: rate_limit
    config: {model: llm, tpm: 5000, window_s: 3600}
  - name: quota
    type: quota
    config: {database: ${database}, model: llm, tenants: {globex: "60"}}`);
    const keys = scratchPath('tokens-keys.yaml');
    acme = addKey(keys, 'acme');
    globex = addKey(keys, 'globex');
    admin = addKey(keys, 'ops', { roles: ['admin'] });
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const usageOf = async (key, query = '') => {
    const response = await fetch(`${server.url}/v1/usage${query}`, { headers: { Authorization: `Bearer ${key}` } });
    return { status: response.status, body: await response.json() };
  };

  test('reserved max_tokens are settled to the real count', async () => {
    const as = { Authorization: `Bearer ${acme}` };
    // Reserve prompt + 3000 tokens, but leave after two tokens: most of it must come back.
    const stream = openStream(server.port, '/v1/chat/completions', { ...ask(3000), stream: true }, as);
    await stream.waitEvents(3);
    stream.socket.destroy();
    await waitFor(async () => metric(await scrape(server.url), 'chatflow:num_requests_running') === 0,
      { what: 'the cancelled request to leave the engine' });
    const used = await waitFor(async () => {
      const { body } = await usageOf(admin, '?tenant=acme');
      return body.data.length === 1 ? body.data[0] : undefined;
    }, { what: 'the ledger row of the cancelled request' });
    assert.ok(used.completion_tokens >= 2 && used.completion_tokens < 3000, JSON.stringify(used));
    const next = await post(server.url, '/v1/chat/completions', ask(10), as);
    assert.equal(next.status, 200, next.text);
    const remaining = Number(next.headers.get('x-ratelimit-remaining-tokens'));
    // 5000 - what the first request really used - what the second reserved (the bucket refills
    // 1.4 tokens a second meanwhile).
    const expected = 5000 - used.total_tokens - (next.json.usage.prompt_tokens + 10);
    assert.ok(remaining >= expected && remaining <= expected + 10,
      `remaining ${remaining}, expected ${expected} (without settlement it would be about ${expected - 3000})`);
  });

  test('a tenant past its quota gets 429 insufficient_quota; others carry on', async () => {
    const as = { Authorization: `Bearer ${globex}` };
    let refused;
    let served = 0;
    for (let i = 0; i < 10 && !refused; i++) {
      const response = await post(server.url, '/v1/chat/completions', ask(20), as);
      if (response.status === 429) {
        refused = response;
      } else {
        assert.equal(response.status, 200, response.text);
        served += 1;
      }
      // Rows reach the ledger when each request is released.
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(refused, 'the quota was never enforced');
    assert.equal(refused.json.error.code, 'insufficient_quota');
    assert.equal(refused.json.error.type, 'insufficient_quota');
    // Refused as soon as what a request may use no longer fits: the allowance is never passed.
    assert.match(refused.json.error.message, /quota of 60 tokens this month has \d+ left, and this request may use \d+/);
    // A response leaves before the ledger's writer commits its row.
    const body = await waitFor(async () => {
      const { body: usage } = await usageOf(admin, '?tenant=globex');
      return usage.data[0]?.requests === served ? usage : undefined;
    }, { what: `globex's ledger to hold its ${served} served requests` });
    assert.ok(body.data[0].total_tokens > 0 && body.data[0].total_tokens <= 60, JSON.stringify(body));
    assert.equal(body.data[0].quota_tokens, 60);
    assert.equal(body.data[0].remaining_tokens, 60 - body.data[0].total_tokens);
    assert.equal((await post(server.url, '/v1/chat/completions', ask(), { Authorization: `Bearer ${acme}` })).status, 200);
  });

  test('/v1/usage: admins see every tenant, others only their own', async () => {
    const all = await waitFor(async () => {
      const usage = await usageOf(admin);
      return usage.status !== 200 || usage.body.data.length >= 2 ? usage : undefined;
    }, { what: 'the ledger rows of both tenants' });
    assert.equal(all.status, 200);
    assert.deepEqual(all.body.data.map((row) => row.tenant).sort(), ['acme', 'globex']);
    assert.equal(all.body.period, 'month');
    const own = await usageOf(acme);
    assert.deepEqual(own.body.data.map((row) => row.tenant), ['acme']);
    assert.equal((await usageOf(acme, '?tenant=globex')).status, 403);
    // The query is URL-encoded as clients send it: %61cme is acme (for its own key too).
    assert.deepEqual((await usageOf(admin, '?tenant=%61cme')).body.data.map((row) => row.tenant), ['acme']);
    assert.equal((await usageOf(acme, '?tenant=%61cme')).status, 200);
    assert.equal((await fetch(`${server.url}/v1/usage`)).status, 401);
  });

  test('`chatflow usage` reads the same ledger', async () => {
    const { body } = await usageOf(admin, '?tenant=globex');
    const cli = runChatflow(['usage', '--database', database, '--tenant', 'globex']);
    assert.equal(cli.status, 0, cli.stderr);
    const row = cli.stdout.split('\n').find((line) => line.startsWith('globex'));
    assert.ok(row, cli.stdout);
    const columns = row.trim().split(/\s+/);
    assert.equal(Number(columns[1]), body.data[0].requests);
    assert.equal(Number(columns[4]), body.data[0].total_tokens);
  });
});

describe('limits per client address, and keys above their tenant', () => {
  let server;
  let big;
  let plain;
  before(async () => {
    const file = pipeline('address-limits', `  - name: limits
    type: rate_limit
    config: {window_s: 60, rpm: 3, address_rpm: 4}`);
    const keys = scratchPath('address-limits-keys.yaml');
    big = addKey(keys, 'acme', { user: 'backend', rpm: 1000000 });
    plain = addKey(keys, 'acme', { user: 'alice' });
    // The test client is the proxy: its X-Forwarded-For names the real client.
    server = await startServer(['--pipeline', file, '--trusted-proxies', '127.0.0.1/32']);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const from = (key, forwardedFor) => ({ Authorization: `Bearer ${key}`, 'X-Forwarded-For': forwardedFor });

  test('`keys add --rpm 1000000` is not capped by the tenant\'s rpm: 3', async () => {
    // Each from an address of its own, so only the key and tenant buckets count.
    for (let i = 0; i < 8; i++) {
      const response = await post(server.url, '/v1/chat/completions', ask(), from(big, `192.0.2.${i + 1}`));
      assert.equal(response.status, 200, `request ${i}: ${response.text}`);
    }
    for (let i = 0; i < 3; i++) {
      const response = await post(server.url, '/v1/chat/completions', ask(), from(plain, `192.0.2.${i + 101}`));
      assert.equal(response.status, 200, `alice's request ${i}: ${response.text}`);
    }
    const refused = await post(server.url, '/v1/chat/completions', ask(), from(plain, '192.0.2.200'));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.equal(refused.headers.get('x-ratelimit-limit-requests'), '3');
  });

  test('the forwarded client is limited, not the proxy, and cannot pick its bucket', async () => {
    for (let i = 0; i < 4; i++) {
      const response = await post(server.url, '/v1/chat/completions', ask(), from(big, '198.51.100.7'));
      assert.equal(response.status, 200, `request ${i}: ${response.text}`);
    }
    const refused = await post(server.url, '/v1/chat/completions', ask(), from(big, '198.51.100.7'));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.equal(refused.json.error.type, 'requests');
    assert.match(refused.json.error.message, /from your address/);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal(refused.headers.get('x-ratelimit-limit-requests'), '4');
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    // A client that sends its own X-Forwarded-For gets the proxy's line appended: read from the
    // right, the address the proxy saw is still the client.
    const spoofed = await post(server.url, '/v1/chat/completions', ask(), from(big, '10.1.2.3, 198.51.100.7'));
    assert.equal(spoofed.status, 429, spoofed.text);
    // Another client behind the same proxy has its own bucket.
    const other = await post(server.url, '/v1/chat/completions', ask(), from(big, '198.51.100.8'));
    assert.equal(other.status, 200, other.text);
    // The access log names the client, the proxy as the peer.
    const logged = await waitFor(() => fs.readFileSync(server.accessLog, 'utf8').split('\n')
      .filter((line) => line.endsWith('}')).map((line) => JSON.parse(line))
      .find((entry) => entry.status === 429 && entry.remote === '198.51.100.7'),
    { what: 'the refused request in the access log' });
    assert.match(logged.peer, /^127\.0\.0\.1:\d+$/);
  });

  test('an IPv6 client is its /64', async () => {
    for (let i = 0; i < 4; i++) {
      const response = await post(server.url, '/v1/chat/completions', ask(), from(big, `2001:db8:aa:bb::${i + 1}`));
      assert.equal(response.status, 200, `request ${i}: ${response.text}`);
    }
    const sameHost = await post(server.url, '/v1/chat/completions', ask(), from(big, '2001:db8:aa:bb:ffff::9'));
    assert.equal(sameHost.status, 429, sameHost.text);
    const otherNetwork = await post(server.url, '/v1/chat/completions', ask(), from(big, '2001:db8:aa:bc::1'));
    assert.equal(otherNetwork.status, 200, otherNetwork.text);
  });
});

// The test model's context is 16,384 tokens: a request without max_tokens may fill it, more
// than these limits hold. It used to be refused for ever (rate_limit: "lower max_tokens", which
// the client never sent; quota: always insufficient). It now gets what the bucket or the
// allowance holds and ends with "length" there; only when that is nothing is it refused, told
// to wait or to send max_tokens.
describe('a request without max_tokens under limits smaller than the context', () => {
  let server;
  let acme;
  let globex;
  let initech;
  let admin;
  before(async () => {
    const file = pipeline('no-max-tokens', `  - name: limits
    type: rate_limit
    config: {model: llm, window_s: 3600, tenants: {acme: "tpm=300"}}
  - name: quota
    type: quota
    config: {database: ${scratchPath('no-max-tokens-usage.db')}, model: llm, tenants: {globex: "250"}}`);
    const keys = scratchPath('no-max-tokens-keys.yaml');
    acme = addKey(keys, 'acme');
    globex = addKey(keys, 'globex');
    initech = addKey(keys, 'initech');
    admin = addKey(keys, 'ops', { roles: ['admin'] });
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const unbounded = { model: 'test-model', messages: [{ role: 'user', content: 'hello there' }], ignore_eos: true, temperature: 0 };
  const as = (key) => ({ Authorization: `Bearer ${key}` });

  test('tokens per minute: the answer takes what the bucket holds; an empty bucket means wait', async () => {
    const first = await post(server.url, '/v1/chat/completions', unbounded, as(acme));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.choices[0].finish_reason, 'length');
    assert.equal(first.json.usage.total_tokens, 300);
    assert.equal(first.headers.get('x-ratelimit-remaining-tokens'), '0');
    const refused = await post(server.url, '/v1/chat/completions', unbounded, as(acme));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.doesNotMatch(refused.json.error.message, /lower max_tokens/);
    assert.match(refused.json.error.message, /retry in .*max_tokens/);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
  });

  test('a quota: the answer takes what is left of the allowance, and the ledger holds exactly it', async () => {
    const first = await post(server.url, '/v1/chat/completions', unbounded, as(globex));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.choices[0].finish_reason, 'length');
    assert.equal(first.json.usage.total_tokens, 250);
    const row = await waitFor(async () => {
      const report = await fetch(`${server.url}/v1/usage?tenant=globex`, { headers: as(admin) });
      return (await report.json()).data[0];
    }, { what: 'globex\'s ledger row' });
    assert.equal(row.total_tokens, 250);
    const refused = await post(server.url, '/v1/chat/completions', unbounded, as(globex));
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'insufficient_quota');
    assert.match(refused.json.error.message, /without max_tokens/);
  });

  test('a legacy completion without max_tokens gets 16 tokens, as OpenAI\'s and vLLM\'s do', async () => {
    const response = await post(server.url, '/v1/completions',
      { model: 'test-model', prompt: 'Once upon a time', ignore_eos: true, temperature: 0 }, as(initech));
    assert.equal(response.status, 200, response.text);
    assert.equal(response.json.usage.completion_tokens, 16);
    assert.equal(response.json.choices[0].finish_reason, 'length');
  });
});
