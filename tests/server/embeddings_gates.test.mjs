// POST /v1/embeddings and /v1/rerank pass the deployment's gates as a chat completion does: the
// auth stage's model access, rate limits with the input's tokens counted, the quota and its usage
// ledger, input moderation of every text, and the access log, through a real `chatflow serve`
// and the official openai client. The embedder is hashed n-grams, whose tokens are the input's
// whitespace-separated words, so every expected count here is a count of words.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelStages, post, scratchPath, startServer, testModel, waitFor, writeTemp,
} from './harness.mjs';

const OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');

const keysFile = scratchPath('embeddings-gates-keys.yaml');
const database = scratchPath('embeddings-gates-usage.db');
const blocklist = writeTemp('embeddings-gates-blocklist.txt', 'forbiddenword\n');

function pipeline() {
  return writeTemp('embeddings-gates.yaml', `version: 1
name: embeddings-gates
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  vectors: {type: embedder, kind: ngrams}
stages:
  - name: auth
    type: auth
    config: {keys_file: ${keysFile}, model_access: {reader: "vectors test-model", chat: test-model}}
  - {name: limits, type: rate_limit, config: {rpm: 600}}
  - {name: quota, type: quota, config: {database: ${database}, tenants: {tiny: "10"}}}
  - name: screen
    type: input_moderation
    config:
      lists: {${blocklist}: block}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

const words = (count, word = 'word') => Array.from({ length: count }, () => word).join(' ');

// The openai client's error for `promise`, which must fail.
async function refusal(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail('the call was admitted');
}

describe('the gates in front of /v1/embeddings and /v1/rerank', () => {
  let server;
  let keys;
  const clientOf = (key) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
  before(async () => {
    keys = {
      alice: addKey(keysFile, 'acme', { user: 'alice', roles: ['reader'] }),
      once: addKey(keysFile, 'acme', { user: 'once', roles: ['reader'], rpm: 1 }),
      few: addKey(keysFile, 'acme', { user: 'few', roles: ['reader'], tpm: 12 }),
      chat: addKey(keysFile, 'acme', { user: 'carol', roles: ['chat'] }),
      tiny: addKey(keysFile, 'tiny', { user: 'tom', roles: ['reader'] }),
      admin: addKey(keysFile, 'ops', { roles: ['admin'] }),
    };
    server = await startServer(['--pipeline', pipeline()]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const usageOf = async (tenant) => {
    const response = await fetch(`${server.url}/v1/usage?tenant=${tenant}`,
      { headers: { Authorization: `Bearer ${keys.admin}` } });
    assert.equal(response.status, 200);
    return (await response.json()).data[0];
  };

  test('an admitted call is written to the usage ledger and the access log with its tokens', async () => {
    const { data, usage } = await clientOf(keys.alice).embeddings.create(
      { model: 'vectors', input: ['one two three', 'four five'] });
    assert.equal(data.length, 2);
    assert.equal(usage.prompt_tokens, 5);
    const ranked = await post(server.url, '/v1/rerank',
      { model: 'vectors', query: 'cats purr', documents: ['stocks fell today', 'cats purr'] },
      { Authorization: `Bearer ${keys.alice}` });
    assert.equal(ranked.status, 200, ranked.text);
    assert.equal(ranked.json.usage.prompt_tokens, 7);
    // The ledger's entries, settled once each call is over.
    const row = await waitFor(async () => {
      const found = await usageOf('acme');
      return found?.requests === 2 ? found : undefined;
    }, { what: 'both calls in the ledger' });
    assert.equal(row.prompt_tokens, 12);
    assert.equal(row.completion_tokens, 0);
    const lines = readFileSync(server.accessLog, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    const embedded = lines.find((line) => line.path === '/v1/embeddings');
    assert.equal(embedded.status, 200);
    assert.equal(embedded.tenant, 'acme');
    assert.equal(embedded.user, 'alice');
    assert.equal(embedded.model, 'vectors');
    assert.equal(embedded.prompt_tokens, 5);
    assert.equal(lines.find((line) => line.path === '/v1/rerank').prompt_tokens, 7);
  });

  test('a key over its requests per minute gets 429 with Retry-After and x-ratelimit headers', async () => {
    const client = clientOf(keys.once);
    const first = await client.embeddings.create({ model: 'vectors', input: 'hello' }).withResponse();
    assert.equal(first.response.headers.get('x-ratelimit-limit-requests'), '1');
    const error = await refusal(client.embeddings.create({ model: 'vectors', input: 'hello' }));
    assert.equal(error.status, 429);
    assert.equal(error.code, 'rate_limit_exceeded');
    assert.match(error.message, /rate limit reached for requests per minute/);
    assert.ok(Number(error.headers['retry-after']) >= 1, JSON.stringify(error.headers));
    const ranked = await post(server.url, '/v1/rerank', { model: 'vectors', query: 'a', documents: ['b'] },
      { Authorization: `Bearer ${keys.once}` });
    assert.equal(ranked.status, 429, ranked.text);
    assert.equal(ranked.json.error.code, 'rate_limit_exceeded');
    assert.ok(ranked.headers.get('retry-after'));
  });

  test('the input\'s tokens count against tokens per minute', async () => {
    const client = clientOf(keys.few);
    // More than the key's whole limit: waiting cannot help.
    const whole = await refusal(client.embeddings.create({ model: 'vectors', input: words(13) }));
    assert.equal(whole.status, 429);
    assert.match(whole.message, /the input is 13 tokens, more than your whole tokens limit per minute/);
    await client.embeddings.create({ model: 'vectors', input: [words(4), words(4)] });
    const over = await refusal(client.embeddings.create({ model: 'vectors', input: words(8) }));
    assert.equal(over.status, 429);
    assert.match(over.message, /rate limit reached for tokens per minute/);
    assert.ok(Number(over.headers['retry-after']) >= 1);
  });

  test('a tenant past its quota gets 429 insufficient_quota', async () => {
    const client = clientOf(keys.tiny);
    await client.embeddings.create({ model: 'vectors', input: words(6) });
    await waitFor(async () => (await usageOf('tiny'))?.prompt_tokens === 6, { what: 'the ledger entry' });
    const error = await refusal(client.embeddings.create({ model: 'vectors', input: words(6) }));
    assert.equal(error.status, 429);
    assert.equal(error.code, 'insufficient_quota');
    assert.match(error.message, /quota of 10 tokens this month has 4 left/);
    // The refused call spent nothing.
    const row = await usageOf('tiny');
    assert.equal(row.prompt_tokens, 6);
  });

  test('input moderation screens every text: 400 content_filter naming the input', async () => {
    const client = clientOf(keys.alice);
    const error = await refusal(client.embeddings.create(
      { model: 'vectors', input: ['a fine text', 'a text with forbiddenword in it'] }));
    assert.equal(error.status, 400);
    assert.equal(error.code, 'content_filter');
    assert.equal(error.param, 'input');
    assert.match(error.message, /blocked by the content filter/);
    const ranked = await post(server.url, '/v1/rerank',
      { model: 'vectors', query: 'a question', documents: ['fine', 'FORBIDDENWORD'] },
      { Authorization: `Bearer ${keys.alice}` });
    assert.equal(ranked.status, 400, ranked.text);
    assert.equal(ranked.json.error.code, 'content_filter');
    const logged = readFileSync(server.accessLog, 'utf8').trim().split('\n').map((line) => JSON.parse(line))
      .filter((line) => line.error === 'content_filter');
    assert.equal(logged.length, 2);
    assert.equal(logged[0].tenant, 'acme');
  });

  test('a role without access to the embedder gets 403 model_not_allowed', async () => {
    const error = await refusal(clientOf(keys.chat).embeddings.create({ model: 'vectors', input: 'hi' }));
    assert.equal(error.status, 403);
    assert.equal(error.code, 'model_not_allowed');
    assert.equal(error.param, 'model');
    const ranked = await post(server.url, '/v1/rerank', { model: 'vectors', query: 'a', documents: ['b'] },
      { Authorization: `Bearer ${keys.chat}` });
    assert.equal(ranked.status, 403, ranked.text);
    assert.equal(ranked.json.error.type, 'permission_error');
  });
});
