// Exact and semantic caches over HTTP: a repeat is answered byte for byte without the engine, a
// paraphrase is answered from the semantic cache, and the answers never cross tenants, numbers,
// negations or the bypass rules. Admins correct entries with DELETE /v1/cache.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, openStream, post, scrape, scratchPath, sseData, startServer, testModel, waitFor, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

function cachePipeline(name, keys, { semantic = true } = {}) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
  - {name: exact, type: exact_cache}
${semantic ? '  - {name: semantic, type: semantic_cache, config: {embedder: vectors, threshold: 0.9}}\n' : ''}${modelStages}  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
${semantic ? '  - semantic.hit -> emit\n' : ''}`);
}

describe('exact and semantic caches', () => {
  let server;
  let exactServer;
  let tenantA;
  let tenantB;
  let adminA;
  before(async () => {
    const keys = scratchPath('cache-keys.yaml');
    tenantA = addKey(keys, 'tenant-a');
    tenantB = addKey(keys, 'tenant-b');
    adminA = addKey(keys, 'tenant-a', { user: 'ops', roles: ['admin'] });
    server = await startServer(['--pipeline', cachePipeline('caches', keys)]);
    exactServer = await startServer(['--pipeline', cachePipeline('exact', keys, { semantic: false })]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
    assert.equal((await exactServer.stop()).code, 0);
  });

  const generatedOn = async (on) => metric(await scrape(on.url), 'chatflow:engine_generated_tokens_total');
  const generated = () => generatedOn(server);
  const chat = (content, extra = {}) => ({
    model: 'test-model', max_tokens: 12, temperature: 0, messages: [{ role: 'user', content }], ...extra,
  });

  test('an exact repeat is byte-identical and never reaches the engine', async () => {
    const request = chat('Tell me about the lighthouse keeper.');
    const first = await post(exactServer.url, '/v1/chat/completions', request, as(tenantA));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('x-chatflow-cache'), 'miss');
    const tokensAfterFirst = await generatedOn(exactServer);
    assert.ok(tokensAfterFirst >= first.json.usage.completion_tokens);

    const second = await post(exactServer.url, '/v1/chat/completions', request, as(tenantA));
    assert.equal(second.status, 200, second.text);
    assert.equal(second.headers.get('x-chatflow-cache'), 'exact');
    assert.equal(second.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(second.json.choices[0].finish_reason, first.json.choices[0].finish_reason);
    assert.deepEqual(second.json.usage, first.json.usage);
    assert.equal(await generatedOn(exactServer), tokensAfterFirst, 'the hit ran the engine');
    await waitFor(async () => metric(await scrape(exactServer.url), 'chatflow:request_annotations_total',
      'value="exact"') === 1, { what: 'the exact hit counted' });

    // A streamed hit has the same SSE shape and the same text as a streamed original.
    const streamed = async () => {
      const stream = openStream(exactServer.port, '/v1/chat/completions', { ...request, stream: true }, as(tenantA));
      const response = await stream.ended;
      assert.equal(response.status, 200);
      const events = sseData(response.body);
      assert.equal(events.at(-1), '[DONE]');
      const chunks = events.slice(0, -1).map((event) => JSON.parse(event));
      assert.equal(chunks[0].choices[0].delta.role, 'assistant');
      assert.equal(chunks.at(-1).choices[0].finish_reason, first.json.choices[0].finish_reason);
      return { header: response.headers['x-chatflow-cache'],
        text: chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('') };
    };
    const streamedHit = await streamed();
    assert.equal(streamedHit.header, 'exact', 'stream: true is not an output parameter');
    assert.equal(streamedHit.text, first.json.choices[0].message.content);
  });

  test('a changed parameter, message or tenant misses', async () => {
    const request = chat('What does the old clock tower chime at noon?');
    const first = await post(exactServer.url, '/v1/chat/completions', request, as(tenantA));
    assert.equal(first.headers.get('x-chatflow-cache'), 'miss');
    for (const [what, body, key] of [
      ['max_tokens', { ...request, max_tokens: 11 }, tenantA],
      ['seed', { ...request, seed: 7 }, tenantA],
      ['stop', { ...request, stop: ['zzz'] }, tenantA],
      ['chat_template_kwargs', { ...request, chat_template_kwargs: { enable_thinking: false } }, tenantA],
      ['message', chat('What does the old clock tower chime at noon!'), tenantA],
      ['tenant', request, tenantB],
    ]) {
      const before = await generatedOn(exactServer);
      const response = await post(exactServer.url, '/v1/chat/completions', body, as(key));
      assert.equal(response.status, 200, response.text);
      assert.equal(response.headers.get('x-chatflow-cache'), 'miss', `changed ${what} hit the cache`);
      assert.ok(await generatedOn(exactServer) > before, `changed ${what} did not run the engine`);
    }
    // The same chat_template_kwargs written in another key order and spacing are the same.
    const kwargs = chat('Which bell rings first on Sunday?', { chat_template_kwargs: { enable_thinking: true, style: 'brief' } });
    assert.equal((await post(exactServer.url, '/v1/chat/completions', kwargs, as(tenantA))).headers.get('x-chatflow-cache'), 'miss');
    const reordered = await fetch(`${exactServer.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', ...as(tenantA) },
      body: JSON.stringify(kwargs).replace('{"enable_thinking":true,"style":"brief"}', '{ "style": "brief",  "enable_thinking": true }'),
    });
    assert.equal(reordered.status, 200, await reordered.text());
    assert.equal(reordered.headers.get('x-chatflow-cache'), 'exact', 'the same kwargs in another order missed');
    const sampled = await post(exactServer.url, '/v1/chat/completions', { ...request, temperature: 0.8 }, as(tenantA));
    assert.equal(sampled.headers.get('x-chatflow-cache'), 'bypass', 'sampled answers are not exact-cached');
  });

  test('a paraphrase hits the semantic cache with its similarity', async () => {
    const sampled = { temperature: 0.7 };  // not exact-cacheable: the semantic cache answers
    const first = await post(server.url, '/v1/chat/completions', chat('What is the router password?', sampled), as(tenantA));
    assert.equal(first.status, 200, first.text);
    const before = await generated();
    const paraphrase = await post(server.url, '/v1/chat/completions', chat("what is the router's password", sampled), as(tenantA));
    assert.equal(paraphrase.status, 200, paraphrase.text);
    assert.equal(paraphrase.headers.get('x-chatflow-cache'), 'semantic');
    const similarity = Number(paraphrase.headers.get('x-chatflow-cache-similarity'));
    assert.ok(similarity >= 0.9 && similarity < 1, `similarity ${similarity}`);
    assert.equal(paraphrase.json.choices[0].message.content, first.json.choices[0].message.content);
    assert.equal(await generated(), before);

    // Tenant B asks A's exact words: its own partition is empty.
    const other = await post(server.url, '/v1/chat/completions', chat('What is the router password?', sampled), as(tenantB));
    assert.notEqual(other.headers.get('x-chatflow-cache'), 'semantic', "tenant B got tenant A's answer");
    assert.ok(await generated() > before);

    // The answer's shape is part of the partition: a smaller max_tokens is never served a longer answer.
    const shorter = await post(server.url, '/v1/chat/completions',
      chat("what is the router's password", { ...sampled, max_tokens: 3 }), as(tenantA));
    assert.notEqual(shorter.headers.get('x-chatflow-cache'), 'semantic');
    assert.ok(shorter.json.usage.completion_tokens <= 3);
  });

  test('negations and changed numbers are verified away; bypass rules hold', async () => {
    const sampled = { temperature: 0.7 };
    const pairs = [
      ['Is the old bridge on Main Street safe for trucks?', 'Is the old bridge on Main Street not safe for trucks?'],
      ['How many vacation days do employees get in their first 3 years?',
        'How many vacation days do employees get in their first 5 years?'],
    ];
    for (const [original, changed] of pairs) {
      await post(server.url, '/v1/chat/completions', chat(original, sampled), as(tenantA));
      const repeat = await post(server.url, '/v1/chat/completions', chat(original, sampled), as(tenantA));
      assert.equal(repeat.headers.get('x-chatflow-cache'), 'semantic', `the original '${original}' was not cached`);
      const response = await post(server.url, '/v1/chat/completions', chat(changed, sampled), as(tenantA));
      assert.notEqual(response.headers.get('x-chatflow-cache'), 'semantic', `'${changed}' got the answer to '${original}'`);
    }
    const bypassesBefore = metric(await scrape(server.url), 'chatflow:request_annotations_total', 'value="bypass"') ?? 0;
    for (let i = 0; i < 2; i++) {
      const weather = await post(server.url, '/v1/chat/completions', chat('What is the weather in Paris?', sampled), as(tenantA));
      assert.notEqual(weather.headers.get('x-chatflow-cache'), 'semantic');
    }
    // Annotations are counted as a request is released, just after its last byte.
    await waitFor(async () => metric(await scrape(server.url), 'chatflow:request_annotations_total',
      'value="bypass"') === bypassesBefore + 2, { what: 'two bypasses counted' });
  });

  test('DELETE /v1/cache: admins correct entries, others are refused', async () => {
    const request = chat('Which harbour has the blue boats?');
    await post(server.url, '/v1/chat/completions', request, as(tenantA));
    const cached = await post(server.url, '/v1/chat/completions', request, as(tenantA));
    assert.equal(cached.headers.get('x-chatflow-cache'), 'exact');

    const remove = (key, body) => fetch(`${server.url}/v1/cache`, {
      method: 'DELETE', headers: { 'Content-Type': 'application/json', ...as(key) }, body: JSON.stringify(body),
    });
    const refused = await remove(tenantA, { model: 'test-model', messages: request.messages });
    assert.equal(refused.status, 403);
    assert.equal((await refused.json()).error.type, 'permission_error');

    const removed = await remove(adminA, { model: 'test-model', messages: request.messages });
    assert.equal(removed.status, 200);
    const { deleted } = await removed.json();
    assert.equal(deleted.exact, 1);
    assert.equal(deleted.semantic, 1, 'the semantic cache kept the corrected answer');

    const after = await post(server.url, '/v1/chat/completions', request, as(tenantA));
    assert.equal(after.headers.get('x-chatflow-cache'), 'miss', 'the corrected entry was served');

    const malformed = await remove(adminA, { messages: 'not a list' });
    assert.equal(malformed.status, 400);
    assert.equal((await malformed.json()).error.type, 'invalid_request_error');
  });
});

// Issue 31: the quick-start server answered the fourth question of this session with the third
// one's answer. Sessions as the quick start keeps them (history_trim before the caches); echo's
// answers open with a story of a few hundred characters, as a model's long answers do.
describe('the semantic cache in a session', () => {
  let server;
  let key;
  const story = 'Once upon a time a dragon lived in the mountains above a quiet village, and every evening '
    + 'the dragon watched the lights of the village come on one by one while the wind carried the smell '
    + 'of bread and smoke up the valley to its cave. ';
  before(async () => {
    const keys = scratchPath('cache-session-keys.yaml');
    key = addKey(keys, 'tenant-a', { user: 'ann' });
    server = await startServer(['--pipeline', writeTemp('cache-session.yaml', `version: 1
name: cache-session
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: memory}
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 8000}}
  - {name: semantic, type: semantic_cache, config: {embedder: vectors, threshold: 0.95}}
  - {name: echo, type: echo, config: {prefix: "${story}"}}
  - {name: emit, type: sse_emit}
edges:
  - semantic.hit -> emit
`)]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  const say = (session, content) => post(server.url, '/v1/chat/completions', {
    model: 'test-model', temperature: 0.7, max_tokens: 64, session_id: session, messages: [{ role: 'user', content }],
  }, as(key));

  test('no question of the dialogue gets an earlier answer; a replay of it hits, another story does not', async () => {
    const dialogue = ['Hi there, please introduce yourself', 'Tell me a story about a dragon', 'And then what?',
      'Why was the dragon sad?'];
    for (const question of dialogue) {
      const response = await say('dragon', question);
      assert.equal(response.status, 200, response.text);
      assert.notEqual(response.headers.get('x-chatflow-cache'), 'semantic',
        `'${question}' was answered with '${response.json.choices[0].message.content}'`);
      assert.equal(response.json.choices[0].message.content, story + question);
    }
    // Another session asking the same in other case: each turn follows the same conversation so
    // far, so each is a true repeat.
    for (const question of dialogue) {
      const response = await say('replay', question.toLowerCase());
      assert.equal(response.headers.get('x-chatflow-cache'), 'semantic', `'${question}' replayed`);
      assert.equal(response.json.choices[0].message.content, story + question);
    }
    // After another story, "And then what?" asks for something else.
    await say('knight', 'Hi there, please introduce yourself');
    const knight = await say('knight', 'Tell me a story about a knight');
    assert.notEqual(knight.headers.get('x-chatflow-cache'), 'semantic');
    const then = await say('knight', 'And then what?');
    assert.notEqual(then.headers.get('x-chatflow-cache'), 'semantic', 'the dragon story continued');
    assert.equal(then.json.choices[0].message.content, `${story}And then what?`);
  });
});
