// graphs/fleet.yaml as a user runs it: two replicas of the shipped file on one redis-server and
// one PostgreSQL the test starts, configured only through CHATFLOW_REDIS_URL,
// CHATFLOW_POSTGRES_URL, CHATFLOW_KEYS_FILE and CHATFLOW_MODEL. A key made with
// `chatflow keys add --rpm 10` gets 10 requests a minute across both replicas together; an answer
// cached through one is served by the other; a session goes on on the other replica with its
// turns.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { addKey, post, scratchPath, sourceDir, startServer, testModel } from '../server/harness.mjs';
import { postgresUnavailable, startPostgres } from './postgres_server.mjs';
import { redisServerBinary, startRedis } from './redis_server.mjs';

const skip = !redisServerBinary() ? 'redis-server is not installed (apt-get install redis-server)'
  : postgresUnavailable() || false;

const as = (key) => ({ Authorization: `Bearer ${key}` });

describe('graphs/fleet.yaml: two replicas sharing Redis and PostgreSQL', { skip }, () => {
  let redis;
  let postgres;
  let replicas = [];
  let model;
  const keys = scratchPath('fleet-yaml-keys.yaml');
  let limited;
  let writer;

  before(async () => {
    redis = await startRedis();
    postgres = await startPostgres();
    Object.assign(process.env, {
      CHATFLOW_REDIS_URL: redis.url,
      CHATFLOW_POSTGRES_URL: postgres.createDatabase('fleet'),
      CHATFLOW_KEYS_FILE: keys,
      CHATFLOW_MODEL: testModel,
    });
    limited = addKey(keys, 'acme', { user: 'bot', rpm: 10 });
    writer = addKey(keys, 'acme', { user: 'ann' });
    const pipeline = path.join(sourceDir, 'graphs/fleet.yaml');
    replicas = await Promise.all([startServer(['--pipeline', pipeline]), startServer(['--pipeline', pipeline])]);
    const models = await (await fetch(`${replicas[0].url}/v1/models`, { headers: as(writer) })).json();
    model = models.data[0].id;
  });
  after(async () => {
    for (const replica of replicas) assert.equal((await replica.stop()).code, 0);
    await redis?.close();
    postgres?.stop();
  });

  const ask = (content, extra = {}) => ({
    model, max_tokens: 3, temperature: 0, messages: [{ role: 'user', content }], stream: false, ...extra,
  });

  test('a key with --rpm 10 gets exactly 10 requests across both replicas', async () => {
    const responses = await Promise.all(Array.from({ length: 24 }, (_, i) =>
      post(replicas[i % 2].url, '/v1/chat/completions', ask(`question number ${i}`), as(limited))));
    const statuses = responses.map((response) => response.status);
    assert.equal(statuses.filter((status) => status === 200).length, 10, statuses.join(' '));
    assert.equal(statuses.filter((status) => status === 429).length, 14, statuses.join(' '));
    const refused = responses.find((response) => response.status === 429);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    // Both replicas answered and refused: the limit is not per replica.
    for (const index of [0, 1]) {
      const mine = responses.filter((_, i) => i % 2 === index).map((response) => response.status);
      assert.ok(mine.includes(429), `replica ${index} refused some: ${mine.join(' ')}`);
    }
  });

  test('an answer cached through one replica is served by the other', async () => {
    const request = ask('Where does the lighthouse keeper live?');
    const original = await post(replicas[0].url, '/v1/chat/completions', request, as(writer));
    assert.equal(original.status, 200, original.text);
    assert.equal(original.headers.get('x-chatflow-cache'), 'miss');
    const hit = await post(replicas[1].url, '/v1/chat/completions', request, as(writer));
    assert.equal(hit.status, 200, hit.text);
    assert.equal(hit.headers.get('x-chatflow-cache'), 'exact');
    assert.equal(hit.json.choices[0].message.content, original.json.choices[0].message.content);
  });

  test('a session started on one replica goes on on the other', async () => {
    const first = await post(replicas[0].url, '/v1/chat/completions',
      ask('My name is Ada.', { session_id: 'fleet-yaml' }), as(writer));
    assert.equal(first.status, 200, first.text);
    const second = await post(replicas[1].url, '/v1/chat/completions',
      ask('What is my name?', { session_id: 'fleet-yaml' }), as(writer));
    assert.equal(second.status, 200, second.text);
    // The second prompt held the first turn: more prompt tokens than the question alone.
    const alone = await post(replicas[1].url, '/v1/chat/completions',
      ask('What is my name?', { session_id: 'fleet-yaml-alone' }), as(writer));
    assert.ok(second.json.usage.prompt_tokens > alone.json.usage.prompt_tokens,
      `${second.json.usage.prompt_tokens} > ${alone.json.usage.prompt_tokens}`);
    for (const replica of replicas) {
      const session = await (await fetch(`${replica.url}/v1/sessions/fleet-yaml`, { headers: as(writer) })).json();
      assert.deepEqual(session.turns.map((turn) => turn.user), ['My name is Ada.', 'What is my name?']);
    }
  });
});
