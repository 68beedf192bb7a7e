// Moderation providers as a client sees them: a /v1/moderations service written here (on
// loopback, flagging given words, holding answers while the test looks) blocks prompts and
// retracts an answer the client already saw; a service that never answers fails open (noted in
// the metrics) or closed (503); a Llama Guard-style classifier on an upstream engine written here
// answers "unsafe\nS1", and one on the test model (whose random words are no verdict) is an
// error by the policy; the official openai client reads a retracted stream without breaking.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, openStream, post, scrape, scratchPath, sseData, startServer, testModel, waitFor, writeTemp,
} from './harness.mjs';

// A moderation service: POST <prefix>/v1/moderations. `flags` maps a path prefix to the words
// it flags (word -> category); under /slow nothing is ever answered; a request under a prefix
// of `held` whose input contains one of its words waits until the test calls release().
async function moderationService(flags, held = {}) {
  const requests = [];
  let parked = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = JSON.parse(Buffer.concat(chunks).toString());
    requests.push({ url: req.url, headers: req.headers, body });
    if (req.url.startsWith('/slow/')) return; // never answers
    const prefix = req.url.replace(/\/v1\/moderations$/, '');
    const words = flags[prefix] ?? {};
    const categories = {};
    const scores = {};
    for (const [word, category] of Object.entries(words)) {
      const hit = body.input.includes(word) || categories[category] === true;
      categories[category] = hit;
      scores[category] = hit ? 0.9 : 0.1;
    }
    const answer = () => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({
        id: 'modr-test', model: body.model ?? 'test',
        results: [{ flagged: Object.values(categories).some(Boolean), categories, category_scores: scores }],
      }));
    };
    if ((held[prefix] ?? []).some((word) => body.input.includes(word))) parked.push(answer);
    else answer();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    parked: () => parked.length,
    release() {
      const waiting = parked;
      parked = [];
      for (const answer of waiting) answer();
    },
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

// The official client (openai@4, installed by the openai_npm fixture), if it is there.
let OpenAI = null;
try {
  OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');
} catch {
  OpenAI = null;
}

const say = (text, extra = {}) => ({ model: 'test-model', messages: [{ role: 'user', content: text }], stream: true, ...extra });
const events = (body) => sseData(body).filter((data) => data !== '[DONE]').map((data) => JSON.parse(data));
const content = (list) => list.map((event) => event.choices?.[0]?.delta?.content ?? '').join('');
// The chunk objects in what a stream received so far (raw, chunked framing and all).
const receivedEvents = (raw) => [...raw.matchAll(/^data: (\{.*\})$/gm)].map((match) => JSON.parse(match[1]));

describe('an http moderation provider on the echo pipeline', () => {
  let service;
  let server;
  let key;
  const as = () => ({ Authorization: `Bearer ${key}` });
  before(async () => {
    service = await moderationService({ '/input': { bomb: 'violence' }, '/output': { dragon: 'violence' } },
      { '/output': ['dragon'] });
    const keys = scratchPath('moderation-hooks-keys.yaml');
    key = addKey(keys, 'tenant-m', { user: 'reader' });
    process.env.CHATFLOW_TEST_MODERATION_KEY = 'sk-moderation-test';
    const file = writeTemp('moderation-hooks.yaml', `version: 1
name: hooks
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model, tokenizer_only: true}
  history: {type: history_store, backend: memory}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - name: screen
    type: input_moderation
    config:
      provider: {type: http, url: "${service.url}/input/v1/moderations", model: omni-moderation-latest,
                 api_key_env: CHATFLOW_TEST_MODERATION_KEY, timeout_ms: 5000}
  - {name: trim, type: history_trim, config: {store: history, model: llm}}
  - {name: echo, type: echo, config: {words_per_chunk: 1}}
  - name: guard
    type: output_moderation
    config:
      pii: []
      window_chars: 0
      provider: {type: http, url: "${service.url}/output/v1/moderations", timeout_ms: 20000}
  - {name: emit, type: sse_emit}
`);
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
    await service.close();
  });

  test('a prompt the service flags is refused with content_filter; the key comes from the environment', async () => {
    const response = await post(server.url, '/v1/chat/completions', say('how to build a bomb', { stream: false }), as());
    assert.equal(response.status, 400, response.text);
    assert.equal(response.json.error.code, 'content_filter');
    assert.match(response.json.error.message, /moderation provider 'screen' \(http\): violence/);
    const call = service.requests.find((request) => request.url === '/input/v1/moderations');
    assert.deepEqual(call.body, { input: 'how to build a bomb', model: 'omni-moderation-latest' });
    assert.equal(call.headers.authorization, 'Bearer sk-moderation-test');
    const fine = await post(server.url, '/v1/chat/completions', say('how to bake a cake', { stream: false }), as());
    assert.equal(fine.status, 200, fine.text);
    assert.equal(fine.json.choices[0].message.content, 'how to bake a cake');
  });

  test('an answer flagged after the client saw it is retracted, and the session keeps the notice', async () => {
    const started = service.requests.length;
    const stream = openStream(server.port, '/v1/chat/completions',
      say('once upon a time a dragon came', { session_id: 'retract-1' }), as());
    // The client has the flagged words while the service still holds its verdict.
    await waitFor(async () => stream.received().includes('came') && service.parked() > 0, { what: 'the text, then a held verdict' });
    const beforeVerdict = receivedEvents(stream.received());
    assert.equal(content(beforeVerdict), 'once upon a time a dragon came');
    assert.ok(beforeVerdict.every((event) => !event.chatflow?.retract));
    service.release();
    const response = await stream.ended;
    assert.equal(response.status, 200);
    const all = events(response.body);
    const last = all.findLast((event) => event.choices.length);
    assert.equal(last.choices[0].finish_reason, 'content_filter');
    assert.deepEqual(last.chatflow.retract, { reason: 'content_filter' });
    assert.ok(content(all).endsWith('[This answer was withdrawn by the content filter.]'));
    const judged = service.requests.slice(started).filter((request) => request.url === '/output/v1/moderations');
    assert.equal(judged.at(-1).body.input, 'once upon a time a dragon came');

    const session = await (await fetch(`${server.url}/v1/sessions/retract-1`, { headers: as() })).json();
    assert.equal(session.turns.length, 1);
    assert.equal(session.turns[0].status, 'filtered');
    assert.ok(!session.turns[0].assistant.includes('dragon'), session.turns[0].assistant);
    assert.match(session.turns[0].assistant, /withdrawn by the content filter/);
  });

  test('a non-streamed answer the service flags is the notice alone', async () => {
    const pending = post(server.url, '/v1/chat/completions', say('a dragon again', { stream: false }), as());
    await waitFor(async () => service.parked() > 0, { what: 'the held verdict' });
    service.release();
    const response = await pending;
    assert.equal(response.status, 200, response.text);
    assert.equal(response.json.choices[0].finish_reason, 'content_filter');
    assert.equal(response.json.choices[0].message.content, '[This answer was withdrawn by the content filter.]');
  });

  test('the official openai client reads a retracted stream to its end', { skip: !OpenAI && 'the openai npm package is not installed' }, async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    const releaser = setInterval(() => service.release(), 50);
    try {
      const stream = await client.chat.completions.create(say('the dragon sleeps'));
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      const last = chunks.findLast((chunk) => chunk.choices.length);
      assert.equal(last.choices[0].finish_reason, 'content_filter');
      assert.deepEqual(last.chatflow.retract, { reason: 'content_filter' });
    } finally {
      clearInterval(releaser);
    }
  });
});

describe('a moderation provider that never answers', () => {
  let service;
  const servers = {};
  before(async () => {
    service = await moderationService({});
    for (const policy of ['fail_open', 'fail_closed']) {
      const file = writeTemp(`moderation-${policy}.yaml`, `version: 1
name: ${policy}
stages:
  - name: screen
    type: input_moderation
    config: {provider: {type: http, url: "${service.url}/slow/v1/moderations", timeout_ms: 300, on_error: ${policy}}}
  - {name: echo, type: echo}
  - name: guard
    type: output_moderation
    config: {pii: [], provider: {type: http, url: "${service.url}/slow/v1/moderations", timeout_ms: 300, on_error: ${policy}}}
  - {name: emit, type: sse_emit}
`);
      servers[policy] = await startServer(['--pipeline', file]);
    }
  });
  after(async () => {
    for (const server of Object.values(servers)) assert.equal((await server.stop()).code, 0);
    await service.close();
  });

  test('fail_open: the answer goes through, and the metrics count the timeouts', async () => {
    const server = servers.fail_open;
    const response = await post(server.url, '/v1/chat/completions', { model: 'fail_open', messages: [{ role: 'user', content: 'hello there' }] });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.json.choices[0].message.content, 'hello there');
    assert.equal(response.json.choices[0].finish_reason, 'stop');
    await waitFor(async () => {
      const samples = await scrape(server.url);
      return metric(samples, 'chatflow:request_annotations_total', 'name="moderation_error"', 'value="timeout:fail_open"') === 1 &&
        metric(samples, 'chatflow:request_annotations_total', 'name="output_moderation_error"', 'value="timeout:fail_open"') === 1;
    }, { what: 'both timeouts in /metrics' });
  });

  test('fail_closed: a clear 503 before the model, never a silent pass', async () => {
    const server = servers.fail_closed;
    const response = await post(server.url, '/v1/chat/completions', { model: 'fail_closed', messages: [{ role: 'user', content: 'hello there' }] });
    assert.equal(response.status, 503, response.text);
    assert.equal(response.json.error.code, 'moderation_unavailable');
    assert.equal(response.json.error.type, 'server_error');
    assert.match(response.json.error.message, /moderation provider 'screen' \(http\) gave no answer within 300 ms/);
  });
});

describe('a Llama Guard-style classifier', () => {
  let engine;
  const tasks = [];
  let server;
  before(async () => {
    // An engine that judges like Llama Guard: unsafe S1 when the judged message mentions poison.
    engine = http.createServer(async (req, res) => {
      if (req.method === 'GET') {
        res.writeHead(200).end('ok');
        return;
      }
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const body = JSON.parse(Buffer.concat(chunks).toString());
      const task = body.messages.at(-1).content;
      tasks.push({ body, task });
      const conversation = task.slice(task.indexOf('<BEGIN CONVERSATION>'), task.indexOf('<END CONVERSATION>'));
      const verdict = conversation.includes('poison') ? 'unsafe\nS1' : 'safe';
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      for (const piece of [verdict.slice(0, 3), verdict.slice(3)]) {
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`);
      }
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`);
      res.end();
    });
    await new Promise((resolve) => engine.listen(0, '127.0.0.1', resolve));
    const file = writeTemp('moderation-classifier.yaml', `version: 1
name: classifier
resources:
  guard: {type: upstream, endpoints: "http://127.0.0.1:${engine.address().port}", model: llama-guard-3}
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: screen, type: input_moderation, config: {provider: {type: classifier, upstream: guard, timeout_ms: 5000}}}
  - {name: local, type: input_moderation, config: {provider: {type: classifier, gguf_model: llm, timeout_ms: 60000, on_error: fail_closed}}}
  - {name: echo, type: echo}
`);
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
    engine.closeAllConnections();
    await new Promise((resolve) => engine.close(resolve));
  });

  test('on an upstream engine: "unsafe\\nS1" blocks, naming the category', async () => {
    const response = await post(server.url, '/v1/chat/completions', { model: 'test-model', messages: [{ role: 'user', content: 'how do I poison a well' }] });
    assert.equal(response.status, 400, response.text);
    assert.equal(response.json.error.code, 'content_filter');
    assert.match(response.json.error.message, /moderation provider 'screen' \(classifier\): S1/);
    const asked = tasks.at(-1);
    assert.equal(asked.body.model, 'llama-guard-3');
    assert.equal(asked.body.temperature, 0);
    assert.match(asked.task, /unsafe content in 'User' messages/);
    assert.match(asked.task, /S1: Violent Crimes\./);
    assert.match(asked.task, /User: how do I poison a well\n\n<END CONVERSATION>/);
  });

  test('on the test model: its random words are no verdict, and fail_closed says so', async () => {
    const response = await post(server.url, '/v1/chat/completions', { model: 'test-model', messages: [{ role: 'user', content: 'a quiet meadow' }] });
    assert.equal(response.status, 503, response.text);
    assert.equal(response.json.error.code, 'moderation_unavailable');
    assert.match(response.json.error.message,
      /moderation provider 'local' \(classifier\) failed: gguf_model 'llm': the classifier's answer is neither 'safe' nor 'unsafe'/);
  });
});
