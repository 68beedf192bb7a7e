// Many models behind one server: a serve file's `models:` entries, each a model file behind the
// same pipeline file, picked by the request's `model` (or an alias) with the official openai and
// @anthropic-ai/sdk clients; loaded on first use, the least recently used unloaded beyond
// models_max: 1; /v1/models showing each state; concurrent first requests answered after one
// load; unknown models in each protocol's error shape; a broken model file failing alone; the
// request metrics labelled per model; an entry behind an `upstream` engine with its own
// max_in_flight, never unloaded while a request runs in it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, runChatflow, scratchPath, startServer, writeTemp,
} from './harness.mjs';

const modules = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`);
const OpenAI = modules('openai');
const Anthropic = modules('@anthropic-ai/sdk');

const keysFile = scratchPath('multi-model-keys.yaml');

function makeModel(name, args) {
  const file = scratchPath(`${name}.gguf`);
  const made = runChatflow(['make-model', '--heads', '4', '--ffn', '128', ...args, '-o', file]);
  assert.equal(made.status, 0, made.stderr);
  return file;
}

// The front pipeline authenticates every request; each model's pipeline is one file read with
// the entry's ${CHATFLOW_MODEL}.
function serveFile() {
  const front = writeTemp('multi-model-front.yaml', `version: 1
name: front
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: echo, type: echo}
`);
  const perModel = writeTemp('multi-model-model.yaml', `version: 1
name: model
resources:
  llm: {type: gguf_model, path: "\${CHATFLOW_MODEL}", name: m}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
${modelStages}  - {name: emit, type: sse_emit}
`);
  const small = makeModel('small', ['--dim', '64', '--layers', '1', '--context', '512']);
  const large = makeModel('large', ['--dim', '64', '--layers', '2', '--context', '1024']);
  const vectors = writeTemp('multi-model-vectors.yaml', `version: 1
name: vectors
resources:
  words: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: echo, type: echo}
`);
  const broken = scratchPath('broken.gguf');
  fs.writeFileSync(broken, 'this is not a GGUF file\n');
  return writeTemp('multi-model-serve.yaml', `server: {port: 0}
pipeline: ${front}
models_max: 1
models_load_timeout_s: 60
models:
  - {name: small, aliases: [gpt-4o-mini, mini], pipeline: ${perModel}, model: ${small}}
  - {name: large, pipeline: ${perModel}, model: ${large}}
  - {name: broken, pipeline: ${perModel}, model: ${broken}}
  - {name: embed, aliases: [text-embedding-3-small], pipeline: ${vectors}}
`);
}

describe('many models behind one server', () => {
  let server;
  let key;
  let openai;
  const ask = (model, extra = {}) => openai.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Once upon a time' }],
    max_tokens: 4,
    temperature: 0,
    ...extra,
  });
  const listed = async () => {
    const response = await fetch(`${server.url}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
    assert.equal(response.status, 200);
    const body = await response.json();
    return Object.fromEntries(body.data.map((model) => [model.id, model]));
  };
  // /metrics with the admin key (the front pipeline authenticates), as { 'name{labels}': value }.
  const scrape = async () => {
    const response = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
    assert.equal(response.status, 200);
    const samples = {};
    for (const line of (await response.text()).split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const space = line.lastIndexOf(' ');
      samples[line.slice(0, space)] = Number(line.slice(space + 1));
    }
    return samples;
  };
  const states = async () => Object.fromEntries(
    Object.entries(await listed()).map(([id, model]) => [id, model.status?.value]));

  before(async () => {
    key = addKey(keysFile, 'acme', { user: 'alice', roles: ['admin'] });
    server = await startServer(['--config', serveFile()]);
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('/v1/models lists every entry with its aliases, none loaded before it is used', async () => {
    const models = await listed();
    assert.deepEqual(Object.keys(models), ['front', 'small', 'large', 'broken', 'embed']);
    assert.deepEqual(models.small.aliases, ['gpt-4o-mini', 'mini']);
    assert.equal(models.small.object, 'model');
    assert.deepEqual(await states(), { front: 'loaded', small: 'unloaded', large: 'unloaded', broken: 'unloaded', embed: 'unloaded' });
    // Listed by the openai client too.
    const ids = [];
    for await (const model of openai.models.list()) ids.push(model.id);
    assert.deepEqual(ids, ['front', 'small', 'large', 'broken', 'embed']);
  });

  test('the request\'s model picks the model, by alias too; models_max 1 unloads the other', async () => {
    const first = await ask('gpt-4o-mini');
    assert.equal(first.model, 'gpt-4o-mini');
    assert.equal(first.usage.completion_tokens, 4);
    assert.deepEqual(await states(), { front: 'loaded', small: 'loaded', large: 'unloaded', broken: 'unloaded', embed: 'unloaded' });
    const models = await listed();
    assert.equal(models.small.max_model_len, 512);
    assert.ok(models.small.memory_bytes > 0);

    const second = await ask('large');
    assert.equal(second.model, 'large');
    assert.deepEqual(await states(), { front: 'loaded', small: 'unloaded', large: 'loaded', broken: 'unloaded', embed: 'unloaded' });
    const large = await openai.models.retrieve('large');
    assert.equal(large.max_model_len, 1024);
    const alias = await openai.models.retrieve('mini');
    assert.equal(alias.id, 'small');

    // The front pipeline still answers to its own name, without loading anything.
    const front = await ask('front');
    assert.equal(front.choices[0].message.content, 'Once upon a time');
    assert.equal((await states()).large, 'loaded');
  });

  test('concurrent first requests to an unloaded model are all answered after one load', async () => {
    assert.equal((await states()).small, 'unloaded');
    const before = metric(await scrape(), 'chatflow:model_loads_total', 'model="small"', 'outcome="loaded"');
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => ask(i % 2 ? 'small' : 'mini')));
    for (const answer of answers) assert.equal(answer.usage.completion_tokens, 4);
    const afterLoads = metric(await scrape(), 'chatflow:model_loads_total', 'model="small"', 'outcome="loaded"');
    assert.equal(afterLoads - before, 1);
    assert.deepEqual(await states(), { front: 'loaded', small: 'loaded', large: 'unloaded', broken: 'unloaded', embed: 'unloaded' });
  });

  test('an unknown model is a 404 naming the models served, in OpenAI\'s and Anthropic\'s shapes, after authentication', async () => {
    await assert.rejects(ask('gpt-5'), (error) => {
      assert.equal(error.status, 404);
      assert.equal(error.code, 'model_not_found');
      assert.equal(error.param, 'model');
      assert.match(error.message, /The model 'gpt-5' does not exist; this server serves 'front', 'small', 'gpt-4o-mini', 'mini', 'large', 'broken', 'embed', 'text-embedding-3-small'/);
      return true;
    });
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: key, maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({
      model: 'claude-x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    }), (error) => {
      assert.equal(error.status, 404);
      assert.equal(error.error.type, 'error');
      assert.equal(error.error.error.type, 'not_found_error');
      assert.match(error.error.error.message, /'claude-x' does not exist; this server serves .*'large'/);
      return true;
    });
    // The Messages API reaches a model of the list like any other.
    const message = await anthropic.messages.create({
      model: 'mini', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(message.usage.output_tokens, 4);
    // Without credentials nothing about the models is told.
    const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.chat.completions.create({
      model: 'gpt-5', messages: [{ role: 'user', content: 'hi' }],
    }), (error) => error.status === 401);
  });

  test('a broken model file fails with its reason, shows failed, is tried again, and the others still serve', async () => {
    await assert.rejects(ask('broken'), (error) => {
      assert.equal(error.status, 503);
      assert.equal(error.code, 'model_load_failed');
      assert.match(error.message, /the model 'broken' failed to load: .*not a GGUF file/);
      assert.equal(error.headers['retry-after'], '1');
      return true;
    });
    const models = await listed();
    assert.equal(models.broken.status.value, 'failed');
    assert.equal(models.broken.status.failed, true);
    assert.match(models.broken.status.reason, /not a GGUF file/);
    const served = await ask('large');
    assert.equal(served.usage.completion_tokens, 4);
    await assert.rejects(ask('broken'), (error) => error.status === 503);
    const samples = await scrape();
    assert.equal(metric(samples, 'chatflow:model_loads_total', 'model="broken"', 'outcome="failed"'), 2);
    assert.equal(metric(samples, 'chatflow:model_state', 'model="broken"', 'state="failed"'), 1);
  });

  test('the request metrics carry each model\'s name; the model series say what is loaded', async () => {
    await ask('small');
    const samples = await scrape();
    // Each entry's pipeline is named after it.
    assert.ok(metric(samples, 'chatflow:request_success_total', 'pipeline="small"') >= 8);
    assert.ok(metric(samples, 'chatflow:request_success_total', 'pipeline="large"') >= 2);
    assert.equal(metric(samples, 'chatflow:request_success_total', 'pipeline="broken"'), undefined);
    assert.equal(metric(samples, 'chatflow:model_state', 'model="small"', 'state="loaded"'), 1);
    assert.equal(metric(samples, 'chatflow:model_state', 'model="large"', 'state="unloaded"'), 1);
    assert.ok(metric(samples, 'chatflow:model_unloads_total', 'model="large"') >= 1);
    // The engine series of the loaded entry, under its name; none for an unloaded one.
    assert.equal(metric(samples, 'chatflow:num_requests_running', 'model_name="small"'), 0);
    assert.ok(metric(samples, 'chatflow:engine_backend_memory_bytes', 'model_name="small"', 'kind="weights"') > 0);
    assert.ok(metric(samples, 'chatflow:engine_generated_tokens_total', 'model_name="small"') >= 4);
    assert.equal(metric(samples, 'chatflow:engine_backend_memory_bytes', 'model_name="large"'), undefined);
    assert.equal(metric(samples, 'chatflow:requests_in_flight', 'pipeline="small"'), 0);
    // Loaded in the second test, the third, and now (the broken model's loads made room twice).
    assert.equal(metric(samples, 'chatflow:model_load_duration_seconds_count', 'model="small"'), 3);
  });

  test('embeddings and tokenize go to the entry their model names', async () => {
    const embedded = await openai.embeddings.create({ model: 'text-embedding-3-small', input: ['red apple', 'green pear'] });
    assert.equal(embedded.data.length, 2);
    assert.ok(embedded.data[0].embedding.length > 0);
    assert.equal((await states()).embed, 'loaded');
    const tokenized = await fetch(`${server.url}/tokenize`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'mini', prompt: 'Once upon a time' }),
    });
    assert.equal(tokenized.status, 200);
    const counted = await tokenized.json();
    assert.equal(counted.max_model_len, 512);  // small's context
    assert.ok(counted.count > 0);
    assert.deepEqual(await states(), { front: 'loaded', small: 'loaded', large: 'unloaded', broken: 'failed', embed: 'unloaded' });
  });

  test('a reload unloads every entry; the next request loads it again from its files', async () => {
    const before = metric(await scrape(), 'chatflow:model_loads_total', 'model="small"', 'outcome="loaded"');
    const reloaded = await fetch(`${server.url}/admin/reload`, { method: 'POST', headers: { Authorization: `Bearer ${key}` } });
    assert.equal(reloaded.status, 200);
    assert.deepEqual(await states(), { front: 'loaded', small: 'unloaded', large: 'unloaded', broken: 'failed', embed: 'unloaded' });
    assert.equal((await ask('mini')).usage.completion_tokens, 4);
    assert.equal((await states()).small, 'loaded');
    assert.equal(metric(await scrape(), 'chatflow:model_loads_total', 'model="small"', 'outcome="loaded"'), before + 1);
  });
});

// An OpenAI-compatible engine on loopback that holds every chat request until released, then
// streams `text`.
async function heldEngine(text) {
  const held = [];
  const server = http.createServer((request, response) => {
    if (request.method !== 'POST') {
      response.writeHead(200, { 'Content-Type': 'application/json' });
      response.end('{"status":"ok"}');
      return;
    }
    request.resume();
    request.on('end', () => held.push(() => {
      response.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const event = (value) => response.write(`data: ${JSON.stringify(value)}\n\n`);
      event({ id: 'e', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: text }, finish_reason: null }] });
      event({ id: 'e', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
      response.end('data: [DONE]\n\n');
    }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    held: () => held.length,
    release: () => { while (held.length) held.shift()(); },
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

describe('a model behind an upstream engine, with its own limit', () => {
  let server;
  let engine;
  let openai;
  const ask = (model) => openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0,
  });
  const states = async () => {
    const body = await (await fetch(`${server.url}/v1/models`)).json();
    return Object.fromEntries(body.data.map((model) => [model.id, model.status.value]));
  };

  before(async () => {
    engine = await heldEngine('from the engine');
    const remote = writeTemp('multi-model-remote.yaml', `version: 1
name: remote
resources:
  llm: {type: upstream, endpoints: "${engine.url}", model: engine-model, health: {path: ""}}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
    const local = writeTemp('multi-model-local.yaml', `version: 1
name: local
resources:
  llm: {type: gguf_model, path: "\${CHATFLOW_MODEL}", name: m}
stages:
${modelStages}  - {name: emit, type: sse_emit}
`);
    const small = makeModel('small-2', ['--dim', '64', '--layers', '1', '--context', '512']);
    const serve = writeTemp('multi-model-upstream-serve.yaml', `server: {port: 0}
pipeline: ${local}
models_max: 1
models:
  - {name: remote, pipeline: ${remote}, max_in_flight: 1}
  - {name: small, pipeline: ${local}, model: ${small}}
`);
    // The front pipeline needs a model file too: the same small one.
    process.env.CHATFLOW_MODEL = small;
    server = await startServer(['--config', serve]);
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    engine.release();
    await engine.close();
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('max_in_flight of the entry refuses a second request while the first runs', async () => {
    const first = ask('remote');
    while (engine.held() < 1) await new Promise((resolve) => setTimeout(resolve, 10));
    await assert.rejects(ask('remote'), (error) => {
      assert.equal(error.status, 503);
      assert.equal(error.code, 'server_overloaded');
      assert.match(error.message, /limit of 1 requests in flight/);
      return true;
    });
    engine.release();
    const answer = await first;
    assert.equal(answer.choices[0].message.content, 'from the engine');
    assert.equal(answer.model, 'remote');
  });

  test('a model a request runs in is not unloaded: the next model waits for it to finish', async () => {
    assert.equal((await states()).remote, 'loaded');
    const running = ask('remote');
    while (engine.held() < 1) await new Promise((resolve) => setTimeout(resolve, 10));
    let answered = false;
    const waiting = ask('small').then((answer) => { answered = true; return answer; });
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(answered, false, 'small must wait while a request runs in remote (models_max 1)');
    assert.deepEqual(await states(), { m: 'loaded', remote: 'loaded', small: 'loading' });
    engine.release();
    assert.equal((await running).choices[0].message.content, 'from the engine');
    assert.equal((await waiting).usage.completion_tokens, 4);
    assert.deepEqual(await states(), { m: 'loaded', remote: 'unloaded', small: 'loaded' });
  });
});

// The front checks credentials only: the caller's identity, roles and model access are set by
// an auth stage in the pipeline that runs the request. An entry without one would run its
// requests as nobody's, so it does not load, and says why.
describe('an entry without auth behind a front that authenticates', () => {
  let server;
  let key;
  before(async () => {
    const keys = scratchPath('multi-model-open-keys.yaml');
    key = addKey(keys, 'acme', { user: 'alice', roles: ['admin'] });
    const front = writeTemp('multi-model-open-front.yaml', `version: 1
name: front
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: echo, type: echo}
`);
    const open = writeTemp('multi-model-open-entry.yaml', `version: 1
name: open
stages:
  - {name: echo, type: echo}
`);
    const guarded = writeTemp('multi-model-guarded-entry.yaml', `version: 1
name: guarded
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: echo, type: echo}
`);
    const serve = writeTemp('multi-model-open-serve.yaml', `server: {port: 0}
pipeline: ${front}
models:
  - {name: open, pipeline: ${open}}
  - {name: guarded, pipeline: ${guarded}}
`);
    server = await startServer(['--config', serve]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('is refused with the reason, shown failed, while an entry with auth answers', async () => {
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    const ask = (model) => openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi there' }] });
    await assert.rejects(ask('open'), (error) => {
      assert.equal(error.status, 503);
      assert.match(error.message, /the model 'open' failed to load: its pipeline has no auth stage, but the serve file's pipeline authenticates/);
      return true;
    });
    const answer = await ask('guarded');
    assert.match(answer.choices[0].message.content, /hi there/);
    const response = await fetch(`${server.url}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
    const models = Object.fromEntries((await response.json()).data.map((model) => [model.id, model]));
    assert.equal(models.open.status.value, 'failed');
    assert.match(models.open.status.reason, /no auth stage/);
    assert.equal(models.guarded.status.value, 'loaded');
  });
});

// Model access for /v1/embeddings and /v1/rerank to an entry is checked against the name the
// request gave (the entry's, or an alias), as for a chat request to it, never against the name
// of the embedder resource inside the entry's pipeline, which callers do not see.
describe('model access to an entry\'s embedder', () => {
  let server;
  let keys;
  before(async () => {
    const keysFile = scratchPath('multi-model-access-keys.yaml');
    keys = {
      reader: addKey(keysFile, 'acme', { user: 'alice', roles: ['reader'] }),
      raw: addKey(keysFile, 'acme', { user: 'bob', roles: ['raw'] }),
    };
    const front = writeTemp('multi-model-access-front.yaml', `version: 1
name: front
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: echo, type: echo}
`);
    const bge = writeTemp('multi-model-access-bge.yaml', `version: 1
name: bge
resources:
  embedder: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}, model_access: {reader: "bge bge-small", raw: embedder}}}
  - {name: echo, type: echo}
`);
    const serve = writeTemp('multi-model-access-serve.yaml', `server: {port: 0}
pipeline: ${front}
models:
  - {name: bge, aliases: [bge-small], pipeline: ${bge}}
`);
    server = await startServer(['--config', serve]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const clientOf = (key) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
  const rerank = (key, model) => fetch(`${server.url}/v1/rerank`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, query: 'red apple', documents: ['green pear', 'red apple'] }),
  });

  test('a role listing the entry\'s name or alias is admitted; one listing the resource\'s name is not', async () => {
    for (const model of ['bge', 'bge-small']) {
      const embedded = await clientOf(keys.reader).embeddings.create({ model, input: 'red apple' });
      assert.equal(embedded.data.length, 1);
      const ranked = await rerank(keys.reader, model);
      assert.equal(ranked.status, 200, await ranked.clone().text());
      assert.equal((await ranked.json()).results[0].index, 1);
    }
    await assert.rejects(clientOf(keys.raw).embeddings.create({ model: 'bge', input: 'red apple' }), (error) => {
      assert.equal(error.status, 403);
      assert.equal(error.code, 'model_not_allowed');
      assert.match(error.message, /access to the model 'bge'/);
      return true;
    });
    const ranked = await rerank(keys.raw, 'bge-small');
    assert.equal(ranked.status, 403);
    const { error } = await ranked.json();
    assert.equal(error.code, 'model_not_allowed');
    assert.match(error.message, /access to the model 'bge-small'/);
  });
});
