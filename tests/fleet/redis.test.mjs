// Two chatflow replicas sharing one real redis-server: a tenant's limit holds across both under
// concurrent load, an exact-cache and a semantic-cache entry written through one replica is
// found by the other, and with Redis stopped mid-run fail_open keeps serving while fail_closed
// answers 503, both limiting again once Redis is back on the same port. Over rediss:// (a Redis
// speaking only TLS and asking for client certificates, all made by openssl here), limits and
// the cache work the same, and a Redis whose certificate is not trusted is refused by name.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, post, scrape, scratchPath, startServer, testModel, waitFor, writeTemp,
} from '../server/harness.mjs';
import { haveOpenssl, makeCertificates } from './certificates.mjs';
import { freePort, redisServerBinary, startRedis } from './redis_server.mjs';

const skip = redisServerBinary() ? false : 'redis-server is not installed (apt-get install redis-server)';
const as = (key) => ({ Authorization: `Bearer ${key}` });
const ask = (content, extra = {}) => ({
  model: 'fleet', messages: [{ role: 'user', content }], temperature: 0, ...extra,
});

// The limits pipeline: API keys, the shared buckets (acme: 10 requests a minute unless
// `tenants` says otherwise), echo.
function limitsPipeline(name, keys, redisUrl, onError, tenants = '{acme: "rpm=10"}') {
  return writeTemp(`${name}.yaml`, `version: 1
name: fleet
resources:
  shared: {type: redis, url: "${redisUrl}", connect_timeout_ms: 200, command_timeout_ms: 500}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
  - {name: limits, type: rate_limit, config: {store: shared, on_error: ${onError}, tenants: ${tenants}}}
  - {name: echo, type: echo}
`);
}

describe('rate limits shared by two replicas', { skip }, () => {
  let redis;
  let replicas = [];
  let key;
  before(async () => {
    redis = await startRedis();
    const keys = scratchPath('fleet-limits-keys.yaml');
    key = addKey(keys, 'acme');
    // The URL as deployments pass it: through the environment.
    process.env.CHATFLOW_REDIS_URL = redis.url;
    const file = limitsPipeline('fleet-limits', keys, '${CHATFLOW_REDIS_URL}', 'fail_closed');
    replicas = await Promise.all([startServer(['--pipeline', file]), startServer(['--pipeline', file])]);
  });
  after(async () => {
    for (const replica of replicas) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
  });

  test('rpm: 10 gives exactly 10 successes across both under 30 concurrent requests', async () => {
    const responses = await Promise.all(Array.from({ length: 30 }, (_, i) =>
      post(replicas[i % 2].url, '/v1/chat/completions', ask(`request ${i}`), as(key))));
    const succeeded = responses.filter((response) => response.status === 200);
    const refused = responses.filter((response) => response.status === 429);
    assert.equal(succeeded.length, 10, responses.map((response) => response.status).join(' '));
    assert.equal(refused.length, 20);
    // Both replicas took part in admitting them: neither had a private bucket of its own.
    const servedBy = new Set(responses.map((response, i) => (response.status === 200 ? i % 2 : -1)));
    assert.ok(servedBy.has(0) || servedBy.has(1));
    for (const response of succeeded) assert.equal(response.headers.get('x-ratelimit-limit-requests'), '10');
    for (const response of refused) {
      assert.equal(response.json.error.code, 'rate_limit_exceeded');
      assert.equal(response.headers.get('x-ratelimit-remaining-requests'), '0');
      assert.ok(Number(response.headers.get('retry-after')) >= 1);
    }
    const remaining = succeeded.map((response) => Number(response.headers.get('x-ratelimit-remaining-requests')));
    assert.deepEqual(remaining.sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
      'each success saw the shared bucket one lower');
  });
});

describe('caches shared by two replicas', { skip }, () => {
  let redis;
  let first;
  let second;
  let key;
  let admin;
  before(async () => {
    redis = await startRedis();
    const keys = scratchPath('fleet-cache-keys.yaml');
    key = addKey(keys, 'acme');
    admin = addKey(keys, 'acme', { user: 'ops', roles: ['admin'] });
    // The replicas differ only in what echo prefixes: an answer says which replica made it.
    const pipeline = (replica) => writeTemp(`fleet-cache-${replica}.yaml`, `version: 1
name: fleet
resources:
  shared: {type: redis, url: "${redis.url}"}
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
  - {name: exact, type: exact_cache, config: {store: shared}}
  - {name: semantic, type: semantic_cache, config: {store: shared, embedder: vectors, threshold: 0.9}}
  - {name: echo, type: echo, config: {prefix: "${replica}: "}}
  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
  - semantic.hit -> emit
`);
    [first, second] = await Promise.all([startServer(['--pipeline', pipeline('first')]),
      startServer(['--pipeline', pipeline('second')])]);
  });
  after(async () => {
    for (const replica of [first, second]) if (replica) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
  });

  test('an exact-cache entry written through one replica is hit by the other', async () => {
    const request = ask('Tell me about the lighthouse keeper.');
    const original = await post(first.url, '/v1/chat/completions', request, as(key));
    assert.equal(original.status, 200, original.text);
    assert.equal(original.headers.get('x-chatflow-cache'), 'miss');
    assert.equal(original.json.choices[0].message.content, 'first: Tell me about the lighthouse keeper.');
    const hit = await post(second.url, '/v1/chat/completions', request, as(key));
    assert.equal(hit.headers.get('x-chatflow-cache'), 'exact');
    assert.equal(hit.json.choices[0].message.content, original.json.choices[0].message.content);
    assert.deepEqual(hit.json.usage, original.json.usage);

    // An admin's correction on the second replica removes it for the first one too.
    const removed = await fetch(`${second.url}/v1/cache`, {
      method: 'DELETE', headers: { 'Content-Type': 'application/json', ...as(admin) },
      body: JSON.stringify({ model: 'fleet', messages: request.messages }),
    });
    assert.equal(removed.status, 200);
    assert.equal((await removed.json()).deleted.exact, 1);
    // The semantic cache kept it too (it caches greedy answers as well); its correction reaches
    // the first replica's index through the stream.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const after = await post(first.url, '/v1/chat/completions', request, as(key));
    assert.equal(after.headers.get('x-chatflow-cache'), 'miss', 'the corrected entry was served');
  });

  test('a semantic-cache entry written through one replica is hit by the other within a second', async () => {
    const sampled = { temperature: 0.7 };  // not exact-cacheable: the semantic cache answers
    const original = await post(first.url, '/v1/chat/completions', ask('What is the router password?', sampled), as(key));
    assert.equal(original.status, 200, original.text);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const paraphrase = await post(second.url, '/v1/chat/completions', ask("what is the router's password", sampled), as(key));
    assert.equal(paraphrase.headers.get('x-chatflow-cache'), 'semantic');
    assert.equal(paraphrase.json.choices[0].message.content, 'first: What is the router password?',
      "the answer is the first replica's");
    const similarity = Number(paraphrase.headers.get('x-chatflow-cache-similarity'));
    assert.ok(similarity >= 0.9 && similarity < 1, `similarity ${similarity}`);
  });

  test('a replica started later builds its index from the entries in Redis', async () => {
    const sampled = { temperature: 0.7 };
    const original = await post(first.url, '/v1/chat/completions', ask('Which harbour has the blue boats?', sampled), as(key));
    assert.equal(original.status, 200, original.text);
    const late = await startServer(['--pipeline', writeTemp('fleet-cache-late.yaml', `version: 1
name: fleet
resources:
  shared: {type: redis, url: "${redis.url}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${scratchPath('fleet-cache-keys.yaml')}}}
  - {name: semantic, type: semantic_cache, config: {store: shared, threshold: 0.9}}
  - {name: echo, type: echo, config: {prefix: "late: "}}
  - {name: emit, type: sse_emit}
edges:
  - semantic.hit -> emit
`)]);
    try {
      const hit = await post(late.url, '/v1/chat/completions', ask('which harbour has the blue boats', sampled), as(key));
      assert.equal(hit.headers.get('x-chatflow-cache'), 'semantic', hit.text);
      assert.equal(hit.json.choices[0].message.content, 'first: Which harbour has the blue boats?');
    } finally {
      assert.equal((await late.stop()).code, 0);
    }
  });
});

describe('hot session turns shared by two replicas', { skip }, () => {
  let redis;
  let first;
  let second;
  let key;
  before(async () => {
    redis = await startRedis();
    const keys = scratchPath('fleet-session-keys.yaml');
    key = addKey(keys, 'acme', { user: 'ann' });
    // Each replica's durable store is its own memory: what one sees of the other's turns came
    // through Redis.
    const file = writeTemp('fleet-sessions.yaml', `version: 1
name: fleet-sessions
resources:
  shared: {type: redis, url: "${redis.url}"}
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: memory, cache: shared}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
${modelStages}  - {name: emit, type: sse_emit}
`);
    [first, second] = await Promise.all([startServer(['--pipeline', file]), startServer(['--pipeline', file])]);
  });
  after(async () => {
    for (const replica of [first, second]) if (replica) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
  });

  const say = (replica, content) => post(replica.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 5, temperature: 0, session_id: 'story', messages: [{ role: 'user', content }],
  }, as(key));
  const turnsOn = async (replica) => {
    const response = await fetch(`${replica.url}/v1/sessions/story`, { headers: as(key) });
    assert.equal(response.status, 200);
    return (await response.json()).turns;
  };

  test('a session continued on the other replica sees its turns', async () => {
    const opening = await say(first, 'Once upon a time there was a dragon.');
    assert.equal(opening.status, 200, opening.text);
    const seen = await turnsOn(second);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].user, 'Once upon a time there was a dragon.');
    assert.equal(seen[0].assistant, opening.json.choices[0].message.content);
    const alone = await post(second.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: 'What was it called?' }],
    }, as(key));
    const followUp = await say(second, 'What was it called?');
    assert.equal(followUp.status, 200, followUp.text);
    assert.ok(followUp.json.usage.prompt_tokens > alone.json.usage.prompt_tokens + opening.json.usage.completion_tokens,
      'the follow-up on the second replica was not given the first turn as context');
    const both = await turnsOn(first);
    assert.deepEqual(both.map((turn) => turn.user), ['Once upon a time there was a dragon.', 'What was it called?']);
  });
});

describe('Redis stopped mid-run', { skip }, () => {
  let redis;
  let open;
  let closed;
  let key;
  before(async () => {
    redis = await startRedis();
    const keys = scratchPath('fleet-outage-keys.yaml');
    key = addKey(keys, 'acme');
    const tenants = '{acme: "rpm=100000"}';
    [open, closed] = await Promise.all([
      startServer(['--pipeline', limitsPipeline('fleet-open', keys, redis.url, 'fail_open', tenants)]),
      startServer(['--pipeline', limitsPipeline('fleet-closed', keys, redis.url, 'fail_closed', tenants)]),
    ]);
  });
  after(async () => {
    for (const replica of [open, closed]) if (replica) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
  });

  test('fail_open keeps serving, fail_closed answers 503, both limit again when Redis returns', async () => {
    for (const replica of [open, closed]) {
      const response = await post(replica.url, '/v1/chat/completions', ask('before'), as(key));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.headers.get('x-ratelimit-limit-requests'), '100000');
    }
    await redis.stop();
    for (let i = 0; i < 20; i++) {
      const passed = await post(open.url, '/v1/chat/completions', ask(`during ${i}`), as(key));
      assert.equal(passed.status, 200, passed.text);
      assert.equal(passed.json.choices[0].message.content, `during ${i}`);
      assert.equal(passed.headers.get('x-ratelimit-limit-requests'), null, 'a request passed uncounted has no bucket');
      const refused = await post(closed.url, '/v1/chat/completions', ask(`during ${i}`), as(key));
      assert.equal(refused.status, 503, refused.text);
      assert.equal(refused.json.error.type, 'server_error');
      assert.equal(refused.json.error.code, 'rate_limiter_unavailable');
      assert.match(refused.json.error.message, /rate limiter is unavailable/);
    }
    await waitFor(async () => metric(await scrape(open.url), 'chatflow:request_annotations_total',
      'name="rate_limit"', 'value="fail_open"') === 20, { what: 'the requests passed uncounted, counted' });
    await waitFor(async () => metric(await scrape(closed.url), 'chatflow:request_annotations_total',
      'name="rate_limit"', 'value="fail_closed"') === 20, { what: 'the refused requests, counted' });
    // Logged, but not once per request.
    const lines = open.stderr().split('\n').filter((line) => line.includes('fail_open'));
    assert.ok(lines.length >= 1 && lines.length <= 2, `log lines:\n${lines.join('\n')}`);
    assert.match(lines[0], /127\.0\.0\.1:\d+/);

    await redis.start();
    const back = await waitFor(async () => {
      const response = await post(closed.url, '/v1/chat/completions', ask('after'), as(key));
      return response.status === 200 ? response : undefined;
    }, { timeoutMs: 10000, intervalMs: 100, what: 'fail_closed to admit again' });
    assert.equal(back.headers.get('x-ratelimit-limit-requests'), '100000');
    const limitedAgain = await waitFor(async () => {
      const response = await post(open.url, '/v1/chat/completions', ask('after'), as(key));
      assert.equal(response.status, 200, response.text);
      return response.headers.get('x-ratelimit-limit-requests') ? response : undefined;
    }, { timeoutMs: 10000, intervalMs: 100, what: 'fail_open to count again' });
    assert.equal(limitedAgain.headers.get('x-ratelimit-limit-requests'), '100000');
    assert.match(open.stderr(), /works again/);
  });
});

describe('starting while Redis is unreachable', { skip }, () => {
  test('fail_closed refuses to start, naming Redis; fail_open starts and serves', async () => {
    const keys = scratchPath('fleet-start-keys.yaml');
    const key = addKey(keys, 'acme');
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    await assert.rejects(startServer(['--pipeline', limitsPipeline('fleet-start-closed', keys, url, 'fail_closed')]),
      (error) => {
        assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
        assert.match(error.message, /unreachable/);
        assert.match(error.message, /fail_closed/);
        return true;
      });
    const degraded = await startServer(['--pipeline', limitsPipeline('fleet-start-open', keys, url, 'fail_open')]);
    try {
      // Standard error is a pipe of its own: the warning may arrive after the ready line.
      await waitFor(() => /starting without its store/.test(degraded.stderr()),
        { what: `the fail_open warning on standard error (${degraded.stderr()})` });
      assert.match(degraded.stderr(), /starting without its store/);
      const response = await post(degraded.url, '/v1/chat/completions', ask('hello'), as(key));
      assert.equal(response.status, 200, response.text);
    } finally {
      assert.equal((await degraded.stop()).code, 0);
    }
  });
});

describe('a Redis that speaks only TLS (rediss://, mutual TLS)', { skip: skip || (!haveOpenssl && 'openssl is not installed') }, () => {
  let certificates;
  let redis;
  let replica;
  let key;
  let keys;
  const tlsPipeline = (name, caFile) => writeTemp(`${name}.yaml`, `version: 1
name: fleet
resources:
  shared:
    type: redis
    url: "${redis.url}"
    connect_timeout_ms: 1000
    command_timeout_ms: 1000
    tls: {ca_file: "${caFile}", certificate_file: "${certificates.clientCertificate}", key_file: "${certificates.clientKey}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
  - {name: limits, type: rate_limit, config: {store: shared, on_error: fail_closed, tenants: {acme: "rpm=4"}}}
  - {name: exact, type: exact_cache, config: {store: shared}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
`);
  before(async () => {
    certificates = makeCertificates(scratchPath('fleet-redis-tls'));
    redis = await startRedis({ tls: {
      certificate: certificates.serverCertificate, key: certificates.serverKey, ca: certificates.ca,
      requireClientCertificates: true,
      clientCertificate: certificates.clientCertificate, clientKey: certificates.clientKey,
    } });
    keys = scratchPath('fleet-tls-keys.yaml');
    key = addKey(keys, 'acme');
    replica = await startServer(['--pipeline', tlsPipeline('fleet-tls', certificates.ca)]);
  });
  after(async () => {
    if (replica) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
  });

  test('the rate limit\'s Lua scripts and the exact cache work over verified TLS', async () => {
    const first = await post(replica.url, '/v1/chat/completions', ask('over TLS'), as(key));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-chatflow-cache'), 'miss');
    assert.equal(first.headers.get('x-ratelimit-limit-requests'), '4');
    assert.equal(first.headers.get('x-ratelimit-remaining-requests'), '3');
    const again = await post(replica.url, '/v1/chat/completions', ask('over TLS'), as(key));
    assert.equal(again.headers.get('x-chatflow-cache'), 'exact', 'the entry was written to and read from Redis');
    assert.equal(again.json.choices[0].message.content, 'over TLS');
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      statuses.push((await post(replica.url, '/v1/chat/completions', ask(`more ${i}`), as(key))).status);
    }
    assert.deepEqual(statuses, [200, 200, 429], 'rpm=4 across the five requests, counted in Redis');
  });

  test('a certificate from an unknown CA: fail_closed does not start, naming the endpoint and why', async () => {
    await assert.rejects(startServer(['--pipeline', tlsPipeline('fleet-tls-untrusted', certificates.otherCa)]),
      (error) => {
        assert.match(error.message, new RegExp(`localhost:${redis.port}`));
        assert.match(error.message, /TLS handshake failed: certificate verify failed/);
        return true;
      });
  });
});
