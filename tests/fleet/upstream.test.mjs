// A gateway chatflow generating through an `upstream` of two engine chatflows (each `chatflow
// serve` with the test model) on loopback: the streamed text is the engine's own, a killed
// engine's running streams end with an error event while new requests fail over without one, a
// client disconnect reaches the engine, upstream failures are OpenAI errors with fitting
// statuses (an answer with an oversized trailer among them, promptly), bad configuration fails
// validation, and llama.cpp's llama-server works as an endpoint when LLAMA_CPP_BIN names its
// directory.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelPipeline, openStream, parseResponse, postBytes, rawExchange, runChatflow, scrape,
  scratchPath, sourceDir, sseData, startServer, testModel, waitFor, writeTemp,
} from '../server/harness.mjs';

function gatewayPipeline(name, endpoints, {
  upstream = '', stages = '', after = '', health = '{interval_ms: 200, timeout_ms: 500}',
} = {}) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm:
    type: upstream
    endpoints: "${endpoints.join(', ')}"
    model: test-model
    health: ${health}
    circuit_breaker: {failures: 1, cooldown_ms: 60000}
${upstream}
stages:
${stages}  - {name: generate, type: upstream_generate, config: {model: llm}}
${after}  - {name: emit, type: sse_emit}
`);
}

// An engine on a raw socket that answers every request with a 200 event stream of `events`
// (objects, or strings sent as they are), in HTTP/1.1 chunks, and never ends the body: what
// comes after is the gateway's doing.
async function endlessEngine(events) {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
      for (const event of events) {
        const text = `data: ${typeof event === 'string' ? event : JSON.stringify(event)}\n\n`;
        socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`);
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, sockets, url: `http://127.0.0.1:${server.address().port}` };
}

const delta = (content, extra = {}) => ({ choices: [{ index: 0, delta: { content }, ...extra }] });

// A port nobody listens on.
async function closedPort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function post(port, pathname, body) {
  return parseResponse(await rawExchange(port, postBytes(pathname, JSON.stringify(body))));
}

// The data events of an SSE body, parsed (without [DONE]).
function events(body) {
  return sseData(body).filter((data) => data !== '[DONE]').map((data) => JSON.parse(data));
}

function contentOf(body) {
  return events(body).map((event) => event.choices?.[0]?.delta?.content ?? event.choices?.[0]?.text ?? '').join('');
}

function finishOf(body) {
  return events(body).map((event) => event.choices?.[0]?.finish_reason).filter(Boolean);
}

function usageOf(body) {
  const usage = events(body).map((event) => event.usage).filter(Boolean).at(-1);
  return usage && { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens };
}

const story = (extra = {}) => ({
  model: 'test-model',
  messages: [{ role: 'user', content: 'Tell me a story about a small robot' }],
  max_tokens: 24,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
  ...extra,
});

const long = story({ max_tokens: 16000, ignore_eos: true, stream_options: undefined });

async function engineSamples(engines) {
  const all = await Promise.all(engines.map((engine) => scrape(engine.url)));
  const sum = (name) => all.reduce((total, samples) => total + (metric(samples, name) ?? 0), 0);
  return {
    running: sum('chatflow:num_requests_running'),
    generated: sum('chatflow:engine_generated_tokens_total'),
    each: all.map((samples) => metric(samples, 'chatflow:num_requests_running')),
  };
}

describe('a gateway in front of two engine chatflows', () => {
  let engines = [];
  let gateway;
  before(async () => {
    engines = await Promise.all(['a', 'b'].map((name) => startServer(['--pipeline', modelPipeline(`engine-${name}`)])));
    gateway = await startServer(['--pipeline', gatewayPipeline('gateway', engines.map((engine) => engine.url))]);
  });
  after(async () => {
    await Promise.all([gateway, ...engines].filter(Boolean).map((server) => server.stop()));
  });

  test('streams exactly the text, finish reason and usage the engine streams directly', async () => {
    for (const body of [story(), story({ temperature: 0.9, seed: 7, max_tokens: 32 })]) {
      const direct = await post(engines[0].port, '/v1/chat/completions', body);
      const via = await post(gateway.port, '/v1/chat/completions', body);
      assert.equal(direct.status, 200);
      assert.equal(via.status, 200, via.body);
      assert.ok(contentOf(direct.body).length > 0);
      assert.equal(contentOf(via.body), contentOf(direct.body));
      assert.deepEqual(finishOf(via.body), finishOf(direct.body));
      assert.deepEqual(usageOf(via.body), usageOf(direct.body), 'usage is the engine\'s usage event');
      assert.equal(events(via.body)[0].model, 'test-model');
    }
  });

  test('a whole (non-streamed) answer and a completion are the engine\'s too', async () => {
    const body = story({ stream: false, stream_options: undefined });
    const direct = JSON.parse((await post(engines[1].port, '/v1/chat/completions', body)).body);
    const via = JSON.parse((await post(gateway.port, '/v1/chat/completions', body)).body);
    assert.equal(via.choices[0].message.content, direct.choices[0].message.content);
    assert.deepEqual(via.usage, direct.usage);
    const completion = { model: 'test-model', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true };
    const directText = contentOf((await post(engines[0].port, '/v1/completions', completion)).body);
    const viaText = contentOf((await post(gateway.port, '/v1/completions', completion)).body);
    assert.ok(directText.length > 0);
    assert.equal(viaText, directText);
  });

  test('an answer the engine refuses is the client\'s 400, with the engine\'s reason', async () => {
    const response = await post(gateway.port, '/v1/chat/completions', story({ max_tokens: 100000 }));
    assert.equal(response.status, 400, response.body);
    const error = JSON.parse(response.body).error;
    assert.equal(error.code, 'upstream_rejected');
    assert.match(error.message, /context/);
  });

  test('a client disconnect cancels the request in the engine', async () => {
    const before = await engineSamples(engines);
    const chargedBefore = metric(await scrape(gateway.url), 'chatflow:generation_tokens_total') ?? 0;
    const stream = openStream(gateway.port, '/v1/chat/completions', long);
    await stream.waitEvents(3);
    const busy = await engineSamples(engines);
    assert.equal(busy.running, 1, 'the engine runs the request');
    assert.equal(metric(await scrape(gateway.url), 'chatflow:num_requests_running'), 1);
    stream.socket.destroy();
    const idle = await waitFor(async () => {
      const samples = await engineSamples(engines);
      const gatewayRunning = metric(await scrape(gateway.url), 'chatflow:num_requests_running');
      return samples.running === 0 && gatewayRunning === 0 ? samples : undefined;
    }, { what: 'the engine to drop the cancelled request' });
    const generated = idle.generated - before.generated;
    assert.ok(generated < long.max_tokens / 4, `generation stopped early (${generated} tokens)`);
    // What the engine streamed before the cancel is charged at the gateway too.
    // (estimated at 4 bytes a token: this gateway has no tokenizer)
    const charged = await waitFor(async () => {
      const total = metric(await scrape(gateway.url), 'chatflow:generation_tokens_total') ?? 0;
      return total > chargedBefore ? total - chargedBefore : undefined;
    }, { what: 'the gateway to count the cancelled answer\'s tokens' });
    assert.ok(charged <= 8 * generated, `${charged} tokens charged, ${generated} generated`);
  });

  test('graphs/gateway.yaml serves: gates, exact cache and moderation in front of the engine', async () => {
    const keys = scratchPath('gateway-keys.yaml');
    const key = addKey(keys, 'acme', { user: 'ann' });
    const variables = {
      CHATFLOW_UPSTREAM_URLS: engines[0].url,
      CHATFLOW_UPSTREAM_MODEL: 'test-model',
      CHATFLOW_TOKENIZER_MODEL: testModel,
      CHATFLOW_KEYS_FILE: keys,
      CHATFLOW_HISTORY_DB: scratchPath('gateway-history.db'),
      CHATFLOW_USAGE_DB: scratchPath('gateway-usage.db'),
    };
    Object.assign(process.env, variables);
    let served;
    try {
      const validated = runChatflow(['validate', 'graphs/gateway.yaml']);
      assert.equal(validated.status, 0, validated.stderr);
      served = await startServer(['--pipeline', 'graphs/gateway.yaml']);
    } finally {
      for (const name of Object.keys(variables)) delete process.env[name];
    }
    try {
      const body = story();
      const direct = await post(engines[0].port, '/v1/chat/completions', body);
      const headers = `Authorization: Bearer ${key}\r\n`;
      const ask = async () => parseResponse(await rawExchange(served.port,
        postBytes('/v1/chat/completions', JSON.stringify(body), { extraHeaders: headers })));
      const first = await ask();
      assert.equal(first.status, 200, first.body);
      assert.equal(contentOf(first.body), contentOf(direct.body));
      assert.deepEqual(usageOf(first.body), usageOf(direct.body));
      const generated = (await engineSamples([engines[0]])).generated;
      const second = await ask();
      assert.equal(contentOf(second.body), contentOf(direct.body));
      assert.equal((await engineSamples([engines[0]])).generated, generated, 'the repeat is an exact-cache hit');
      const unauthorized = await post(served.port, '/v1/chat/completions', body);
      assert.equal(unauthorized.status, 401);
      // The engine's model is offered; the tokenizer the gates count with is not.
      const listed = await fetch(`${served.url}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
      assert.equal(listed.status, 200);
      assert.deepEqual((await listed.json()).data.map((model) => model.id), ['test-model']);
    } finally {
      await served.stop();
    }
  });

  test('one engine killed mid-run: its streams end with an error event, new requests fail over', async () => {
    const streams = [openStream(gateway.port, '/v1/chat/completions', long),
      openStream(gateway.port, '/v1/chat/completions', long)];
    await Promise.all(streams.map((stream) => stream.waitEvents(3)));
    assert.deepEqual((await engineSamples(engines)).each, [1, 1], 'one stream on each engine');
    engines[1].child.kill('SIGKILL');
    await engines[1].exited;

    const first = await Promise.race(streams.map((stream, index) => stream.ended.then((response) => ({ response, index }))));
    assert.equal(first.response.status, 200);
    const data = sseData(first.response.body);
    assert.equal(data.at(-1), '[DONE]');
    const error = JSON.parse(data.at(-2)).error;
    assert.equal(error.code, 'upstream_error', data.at(-2));
    assert.match(error.message, new RegExp(engines[1].url.replace(/[/.]/g, '\\$&')));

    // The other stream, on the engine still alive, goes on.
    const survivor = streams[1 - first.index];
    const seen = (survivor.received().match(/data: /g) || []).length;
    await survivor.waitEvents(seen + 5);
    assert.doesNotMatch(survivor.received(), /"error"/);
    survivor.socket.destroy();

    const answers = await Promise.all(Array.from({ length: 8 }, () => post(gateway.port, '/v1/chat/completions', story())));
    for (const answer of answers) {
      assert.equal(answer.status, 200, answer.body);
      assert.doesNotMatch(answer.body, /"error"/);
      assert.ok(contentOf(answer.body).length > 0);
    }
    engines[1] = undefined;
  });
});

describe('upstream failures as OpenAI errors', () => {
  const servers = [];
  const listeners = [];
  after(async () => {
    await Promise.all(servers.map((server) => server.stop()));
    for (const { server, sockets } of listeners) {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
  });

  test('every endpoint refusing connections: 502 upstream_error naming the endpoints', async () => {
    const ports = [await closedPort(), await closedPort()];
    const gateway = await startServer(['--pipeline', gatewayPipeline('refused', ports.map((port) => `http://127.0.0.1:${port}`),
      { upstream: '    retries: 1\n', health: '{path: ""}' })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story());
    assert.equal(response.status, 502, response.body);
    const error = JSON.parse(response.body).error;
    assert.equal(error.code, 'upstream_error');
    assert.match(error.message, /could not connect/);
  });

  test('unhealthy endpoints: 503 no_healthy_upstream once the health check saw them', async () => {
    const port = await closedPort();
    const gateway = await startServer(['--pipeline', gatewayPipeline('unhealthy', [`http://127.0.0.1:${port}`])]);
    servers.push(gateway);
    const response = await waitFor(async () => {
      const answer = await post(gateway.port, '/v1/chat/completions', story());
      return answer.status === 503 ? answer : undefined;
    }, { what: 'a 503 after the health check', intervalMs: 100 });
    assert.equal(JSON.parse(response.body).error.code, 'no_healthy_upstream');
  });

  test('a tokenizer_only gguf_model counts but refuses to generate', async () => {
    const file = writeTemp('tokenizer-only.yaml', `version: 1
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model, tokenizer_only: true}
stages:
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
`);
    const server = await startServer(['--pipeline', file]);
    servers.push(server);
    const response = await post(server.port, '/v1/chat/completions', story());
    assert.equal(response.status, 500, response.body);
    assert.equal(JSON.parse(response.body).error.code, 'tokenizer_only_model');
    const counted = await fetch(`${server.url}/tokenize`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: 'Once upon a time' }),
    });
    assert.equal(counted.status, 200);
    assert.ok((await counted.json()).count > 0);
  });

  test('output moderation stopping an engine\'s answer charges the tokens the engine streamed', async () => {
    // Three events, then silence: the answer ends only because moderation stops it.
    const engine = await endlessEngine([delta('one'), delta(' two'), delta(' forbidden')]);
    listeners.push(engine);
    const words = writeTemp('forbidden.patterns', 'forbidden\n');
    const gateway = await startServer(['--pipeline', gatewayPipeline('moderated', [engine.url], {
      health: '{path: ""}',
      after: `  - {name: guard, type: output_moderation, config: {lists: {${words}: abort}, pii: [], notice: "[stopped]"}}\n`,
    })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story());
    assert.equal(response.status, 200, response.body);
    assert.deepEqual(finishOf(response.body), ['content_filter']);
    assert.equal(contentOf(response.body), 'one two [stopped]');
    assert.equal(usageOf(response.body).completion_tokens, 3, response.body);
  });

  test('an engine that keeps its body open after [DONE]: the answer is whole and shutdown does not wait for it', async () => {
    const engine = await endlessEngine([delta('hello'), delta(' world'), delta('', { finish_reason: 'stop' }),
      { choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }, '[DONE]']);
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('draining', [engine.url], {
      health: '{path: ""}', upstream: '    idle_ms: 120000\n',
    })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story());
    assert.equal(response.status, 200, response.body);
    assert.equal(contentOf(response.body), 'hello world');
    assert.deepEqual(usageOf(response.body), { prompt_tokens: 5, completion_tokens: 2 });
    // The connection still waits for the body's end; stopping closes it instead of waiting out
    // idle_ms (two minutes), which this bound would catch.
    const stopping = Date.now();
    const { code } = await gateway.stop();
    assert.equal(code, 0);
    assert.ok(Date.now() - stopping < 30000, `stopped in ${Date.now() - stopping} ms`);
  });

  // A 200 event stream that ends at once with one trailer field of 70 KiB, the connection left
  // open: Beast's parser threw on it inside the client's thread, and the call hung until the
  // server's request timeout (600 s).
  async function trailerEngine() {
    const sockets = new Set();
    let requests = 0;
    const server = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => sockets.delete(socket));
      socket.once('data', () => {
        requests += 1;
        socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n' +
          `Trailer: X-Big\r\n\r\n0\r\nX-Big: ${'a'.repeat(70 * 1024)}\r\n\r\n`);
      });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, sockets, url: `http://127.0.0.1:${server.address().port}`, requests: () => requests };
  }

  test('an engine answering with an oversized trailer: a prompt 502, or failover to the next endpoint', async () => {
    const engine = await trailerEngine();
    listeners.push(engine);
    const alone = await startServer(['--pipeline', gatewayPipeline('trailer', [engine.url],
      { upstream: '    retries: 0\n', health: '{path: ""}' })]);
    servers.push(alone);
    const started = Date.now();
    const response = await post(alone.port, '/v1/chat/completions', story());
    assert.equal(response.status, 502, response.body);
    const error = JSON.parse(response.body).error;
    assert.equal(error.code, 'upstream_error');
    assert.match(error.message, /header or trailer is longer than \d+ bytes/);
    // A generous bound: the call fails when the trailer overflows, not at a timeout.
    assert.ok(Date.now() - started < 10000, `answered in ${Date.now() - started} ms`);

    const good = await endlessEngine([delta('hello'), delta(' world'), delta('', { finish_reason: 'stop' }), '[DONE]']);
    listeners.push(good);
    const before = engine.requests();
    const failover = await startServer(['--pipeline', gatewayPipeline('trailer-failover', [engine.url, good.url],
      { upstream: '    retries: 1\n', health: '{path: ""}' })]);
    servers.push(failover);
    const served = await post(failover.port, '/v1/chat/completions', story());
    assert.equal(served.status, 200, served.body);
    assert.equal(contentOf(served.body), 'hello world');
    assert.equal(engine.requests(), before + 1, 'the first endpoint was tried first, and failed over from');
    assert.equal((await fetch(`${alone.url}/health`)).status, 200, 'the first gateway is still up');
  });

  test('an engine that never answers: 504 upstream_timeout after first_byte_ms; what it was sent', async () => {
    const sockets = new Set();
    let received = '';
    const silent = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('data', (data) => { received += data; });
      socket.on('error', () => {});
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    listeners.push({ server: silent, sockets });
    const gateway = await startServer(['--pipeline', gatewayPipeline('silent', [`http://127.0.0.1:${silent.address().port}/engine`],
      { upstream: '    first_byte_ms: 300\n    retries: 0\n    api_key: sk-test\n', health: '{path: ""}' })]);
    servers.push(gateway);
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const body = story({ stream: false, stream_options: undefined, stop: ['END'], seed: 3 });
    const response = parseResponse(await rawExchange(gateway.port, postBytes('/v1/chat/completions', JSON.stringify(body),
      { extraHeaders: `traceparent: ${traceparent}\r\n` })));
    assert.equal(response.status, 504, response.body);
    const error = JSON.parse(response.body).error;
    assert.equal(error.code, 'upstream_timeout');
    assert.match(error.message, /first_byte_ms \(300 ms\)/);

    const [head, sent] = received.split('\r\n\r\n');
    const lines = head.split('\r\n');
    assert.equal(lines[0], 'POST /engine/v1/chat/completions HTTP/1.1');
    const headers = Object.fromEntries(lines.slice(1).map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    assert.equal(headers.traceparent, traceparent);
    assert.equal(headers.authorization, 'Bearer sk-test');
    assert.equal(headers.accept, 'text/event-stream');
    const json = JSON.parse(sent);
    assert.equal(json.model, 'test-model');
    assert.equal(json.stream, true, 'always streamed from the engine');
    assert.deepEqual(json.stream_options, { include_usage: true });
    assert.deepEqual(json.messages, body.messages);
    assert.equal(json.max_tokens, 24);
    assert.equal(json.temperature, 0);
    assert.equal(json.seed, 3);
    assert.deepEqual(json.stop, ['END']);
  });
});

// An engine on a raw socket that answers every request with a 200 event stream repeating
// `text` (SSE as it is) until the gateway closes the connection: an engine ignoring max_tokens.
// `state` has the bodies it was sent and how many connections the gateway closed.
async function foreverEngine(text) {
  const state = { bodies: [], closed: 0 };
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    let received = '';
    let timer;
    socket.on('close', () => { sockets.delete(socket); clearInterval(timer); state.closed += 1; });
    socket.on('data', (data) => {
      received += data;
      const head = received.indexOf('\r\n\r\n');
      const length = Number(/content-length: *(\d+)/i.exec(received)?.[1] ?? 0);
      if (timer || head < 0 || received.length < head + 4 + length) return;
      state.bodies.push(JSON.parse(received.slice(head + 4, head + 4 + length)));
      socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
      const chunk = `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`.repeat(20);
      timer = setInterval(() => socket.write(chunk), 2);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, sockets, state, url: `http://127.0.0.1:${server.address().port}` };
}

async function postAs(port, pathname, body, key) {
  return parseResponse(await rawExchange(port, postBytes(pathname, JSON.stringify(body),
    { extraHeaders: `authorization: Bearer ${key}\r\n` })));
}

const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};
const clockTool = { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } };
const callDelta = (name, args, extra = {}) => ({
  choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...(name ? { id: 'call_x', type: 'function' } : {}), function: { ...(name ? { name } : {}), arguments: args } }] }, ...extra }],
});

describe('what an engine sends is held to the request', () => {
  const servers = [];
  const listeners = [];
  after(async () => {
    await Promise.all(servers.map((server) => server.stop()));
    for (const { server, sockets } of listeners) {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
  });

  test('an engine that ignores max_tokens is cut at it: "length", the engine\'s connection closed, the ledger charged what was delivered', async () => {
    const engine = await foreverEngine(`data: ${JSON.stringify(delta(' word'))}\n\n`);
    listeners.push(engine);
    const keys = scratchPath('upstream-cut-keys.yaml');
    const tenant = addKey(keys, 'acme');
    const admin = addKey(keys, 'acme', { user: 'root', roles: ['admin'] });
    const gateway = await startServer(['--pipeline', gatewayPipeline('cut', [engine.url], {
      health: '{path: ""}',
      stages: `  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: quota, type: quota, config: {database: ${scratchPath('upstream-cut-usage.db')}, tenants: {acme: "100000"}}}\n`,
    })]);
    servers.push(gateway);
    const response = await postAs(gateway.port, '/v1/chat/completions', story({ max_tokens: 16 }), tenant);
    assert.equal(response.status, 200, response.body);
    assert.deepEqual(finishOf(response.body), ['length']);
    const words = contentOf(response.body).split(' ').filter(Boolean);
    assert.ok(words.length >= 1 && words.length <= 16, `${words.length} words`);
    const usage = usageOf(response.body);
    assert.ok(usage.completion_tokens >= words.length && usage.completion_tokens <= 16, JSON.stringify(usage));
    assert.equal(engine.state.bodies[0].max_tokens, 16);
    await waitFor(() => engine.state.closed >= 1, { what: 'the gateway closing the engine\'s connection' });
    const row = await waitFor(async () => {
      const report = await fetch(`${gateway.url}/v1/usage?tenant=acme`, { headers: { Authorization: `Bearer ${admin}` } });
      const found = (await report.json()).data[0];
      return found?.requests === 1 ? found : undefined;
    }, { what: 'the ledger row' });
    assert.equal(row.completion_tokens, usage.completion_tokens);
    assert.equal(row.prompt_tokens, usage.prompt_tokens);
  });

  test('without max_tokens, the upstream\'s max_tokens_default bounds the answer and is sent', async () => {
    const engine = await foreverEngine(`data: ${JSON.stringify(delta(' word'))}\n\n`);
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('default-cap', [engine.url], {
      health: '{path: ""}', upstream: '    max_tokens_default: 20\n',
    })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story({ max_tokens: undefined }));
    assert.equal(response.status, 200, response.body);
    assert.deepEqual(finishOf(response.body), ['length']);
    assert.ok(usageOf(response.body).completion_tokens <= 20);
    assert.equal(engine.state.bodies[0].max_tokens, 20);
  });

  // The gates and the relay bound an answer without max_tokens the same way: the quota names
  // the upstream as its model, reserves the prompt and what is left of the allowance (not 4096,
  // nor the 131,072-token context the relay would let the engine fill), and the relay holds the
  // engine to what was granted, so requests at once never pass the allowance together.
  test('without max_tokens, a quota naming the upstream holds concurrent answers within the allowance', async () => {
    const engine = await foreverEngine(`data: ${JSON.stringify(delta(' word'))}\n\n`);
    listeners.push(engine);
    const keys = scratchPath('upstream-granted-keys.yaml');
    const tenant = addKey(keys, 'acme');
    const admin = addKey(keys, 'acme', { user: 'root', roles: ['admin'] });
    const gateway = await startServer(['--pipeline', gatewayPipeline('granted', [engine.url], {
      health: '{path: ""}', upstream: '    context_length: 131072\n',
      stages: `  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: quota, type: quota, config: {database: ${scratchPath('upstream-granted-usage.db')}, model: llm, tenants: {acme: "3000"}}}\n`,
    })]);
    servers.push(gateway);
    const responses = await Promise.all([0, 1, 2].map(() =>
      postAs(gateway.port, '/v1/chat/completions', story({ max_tokens: undefined }), tenant)));
    const served = responses.filter((response) => response.status === 200);
    assert.ok(served.length >= 1, responses.map((response) => response.body).join('\n'));
    for (const response of responses.filter((each) => each.status !== 200)) {
      assert.equal(response.status, 429, response.body);
      assert.equal(JSON.parse(response.body).error.code, 'insufficient_quota');
    }
    let total = 0;
    for (const response of served) {
      assert.deepEqual(finishOf(response.body), ['length']);
      const usage = usageOf(response.body);
      total += usage.prompt_tokens + usage.completion_tokens;
    }
    assert.ok(total <= 3000, `the answers took ${total} of 3000`);
    // The engine was told the bound it was held to.
    for (const body of engine.state.bodies) assert.ok(body.max_tokens > 0 && body.max_tokens <= 3000, JSON.stringify(body));
    const row = await waitFor(async () => {
      const report = await fetch(`${gateway.url}/v1/usage?tenant=acme`, { headers: { Authorization: `Bearer ${admin}` } });
      const found = (await report.json()).data[0];
      return found?.requests === served.length ? found : undefined;
    }, { what: 'the ledger rows' });
    assert.ok(row.total_tokens <= 3000, `the ledger holds ${row.total_tokens} of 3000`);
  });

  // A SentencePiece tokenizer adds a space before a text's first word; counted event by event,
  // each " word" was two tokens ("▁", "▁word") and max_tokens 100 gave the client 50 words.
  const spmVocab = path.join(sourceDir, '../shared/models/vocab/ggml-vocab-llama-spm.gguf');
  test('with a SentencePiece tokenizer each " word" the engine sends counts as the one token it is', {
    skip: fs.existsSync(spmVocab) ? false : 'needs ../shared/models/vocab/ggml-vocab-llama-spm.gguf',
  }, async () => {
    const model = scratchPath('upstream-spm-tokenizer.gguf');
    const made = runChatflow(['make-model', '--dim', '64', '--layers', '1', '--heads', '2', '--ffn', '128',
      '--context', '4096', '--vocab-from', spmVocab, '-o', model]);
    assert.equal(made.status, 0, made.stderr);
    const engine = await foreverEngine(`data: ${JSON.stringify(delta(' word'))}\n\n`);
    listeners.push(engine);
    const file = writeTemp('upstream-spm.yaml', `version: 1
name: upstream-spm
resources:
  words: {type: gguf_model, path: "${model}", tokenizer_only: true}
  llm:
    type: upstream
    endpoints: "${engine.url}"
    model: test-model
    tokenizer: words
    health: {path: ""}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
    const gateway = await startServer(['--pipeline', file]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story({ max_tokens: 100 }));
    assert.equal(response.status, 200, response.body);
    assert.deepEqual(finishOf(response.body), ['length']);
    assert.equal(contentOf(response.body), ' word'.repeat(100));
    assert.equal(usageOf(response.body).completion_tokens, 100);
  });

  test('an engine\'s usage is believed only within max_tokens and the prompt\'s size', async () => {
    const engine = await endlessEngine([delta('one'), delta(' two'), delta('', { finish_reason: 'stop' }),
      { choices: [], usage: { prompt_tokens: 1e9, completion_tokens: 290201, total_tokens: 1e9 + 290201 } }, '[DONE]']);
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('lying-usage', [engine.url], { health: '{path: ""}' })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story({ max_tokens: 16 }));
    assert.equal(response.status, 200, response.body);
    assert.equal(contentOf(response.body), 'one two');
    const usage = usageOf(response.body);
    assert.equal(usage.completion_tokens, 16);
    assert.ok(usage.prompt_tokens < 1000, JSON.stringify(usage));
  });

  test('an engine that sends nothing but keep-alives is ended by max_answer_ms', async () => {
    const engine = await foreverEngine(': keep-alive\n\n');
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('keep-alive', [engine.url], {
      health: '{path: ""}', upstream: '    retries: 0\n    max_answer_ms: 500\n',
    })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions', story());
    assert.equal(response.status, 504, response.body);
    const error = JSON.parse(response.body).error;
    assert.equal(error.code, 'upstream_timeout');
    assert.match(error.message, /max_answer_ms \(500 ms\)/);
  });

  test('a tool call whose arguments are not a JSON object is no call: its text is content', async () => {
    const finish = delta('', { finish_reason: 'tool_calls' });
    const cases = [
      // Cut short, across two pieces.
      [callDelta('get_weather', '{"city": "Par'), callDelta(undefined, 'is'), finish, '[DONE]'],
      // Written to close the call and open another one.
      [callDelta('get_weather', '{}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}'), finish, '[DONE]'],
    ];
    for (const script of cases) {
      const engine = await endlessEngine(script);
      listeners.push(engine);
      const gateway = await startServer(['--pipeline', gatewayPipeline('bad-call', [engine.url], { health: '{path: ""}' })]);
      servers.push(gateway);
      const body = story({ stream: false, stream_options: undefined, tools: [weatherTool, clockTool] });
      const response = await post(gateway.port, '/v1/chat/completions', body);
      assert.equal(response.status, 200, response.body);
      const choice = JSON.parse(response.body).choices[0];
      assert.equal(choice.message.tool_calls, undefined, response.body);
      assert.equal(choice.finish_reason, 'stop');
      assert.match(choice.message.content, /get_weather/);
      const streamed = await post(gateway.port, '/v1/chat/completions', { ...body, stream: true });
      assert.ok(events(streamed.body).every((event) => !event.choices?.[0]?.delta?.tool_calls), streamed.body);
    }
    // The same engine writing valid arguments makes a call.
    const engine = await endlessEngine([callDelta('get_weather', '{"city": '), callDelta(undefined, '"Oslo"}'), finish, '[DONE]']);
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('good-call', [engine.url], { health: '{path: ""}' })]);
    servers.push(gateway);
    const response = await post(gateway.port, '/v1/chat/completions',
      story({ stream: false, stream_options: undefined, tools: [weatherTool, clockTool] }));
    const choice = JSON.parse(response.body).choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', response.body);
    assert.equal(choice.message.tool_calls.length, 1);
    assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Oslo' });
  });

  test('reasoning that holds "</think>" stays reasoning: the answer is only the content', async () => {
    const reasoning = (text) => ({ choices: [{ index: 0, delta: { reasoning_content: text } }] });
    const engine = await endlessEngine([reasoning('The tag </thi'), reasoning('nk> ends a block; '),
      reasoning('so do not </think> show this'), delta('Answer.'), delta('', { finish_reason: 'stop' }), '[DONE]']);
    listeners.push(engine);
    const gateway = await startServer(['--pipeline', gatewayPipeline('think-tag', [engine.url], { health: '{path: ""}' })]);
    servers.push(gateway);
    const whole = await post(gateway.port, '/v1/chat/completions', story({ stream: false, stream_options: undefined }));
    const message = JSON.parse(whole.body).choices[0].message;
    assert.equal(message.content, 'Answer.', whole.body);
    assert.equal(message.reasoning_content, 'The tag </think> ends a block; so do not </think> show this');
    const streamed = await post(gateway.port, '/v1/chat/completions', story());
    assert.equal(contentOf(streamed.body), 'Answer.');
  });
});

describe('upstream configuration', () => {
  const cases = [
    ['no endpoints', 'endpoints: ""', /endpoints: no endpoint given/],
    ['a bad scheme', 'endpoints: "ftp://10.0.0.5"', /'ftp:\/\/10\.0\.0\.5': expected an http:\/\/ or https:\/\/ base URL/],
    ['a bad port', 'endpoints: "http://a:1, http://b:99999"', /'http:\/\/b:99999': the port must be a number/],
    ['an endpoint twice', 'endpoints: [http://a:1, "http://a:1/"]', /listed twice/],
    ['a misspelt key', 'endpoints: "http://a:1"\n    retry: 3', /unknown key 'retry' \(known keys: .*retries/],
    ['no model', 'endpoints: "http://a:1"', /model/, { model: false }],
    ['a health path without /', 'endpoints: "http://a:1"\n    health: {path: health}', /health\.path: expected a path starting with '\/'/],
  ];
  for (const [what, yaml, expected, { model = true } = {}] of cases) {
    test(`${what} is a validation error at its place`, () => {
      const file = writeTemp(`bad-upstream-${what.replace(/[^a-z]+/g, '-')}.yaml`, `version: 1
resources:
  llm:
    type: upstream
    ${yaml}
${model ? '    model: test-model\n' : ''}stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
`);
      const result = runChatflow(['validate', file]);
      assert.equal(result.status, 1, result.stdout + result.stderr);
      assert.match(result.stderr, new RegExp(`${path.basename(file).replace(/\./g, '\\.')}:\\d+:\\d+: error:`));
      assert.match(result.stderr, expected);
    });
  }

  test('upstream_generate needs an upstream, not a gguf_model', () => {
    const file = writeTemp('upstream-wrong-resource.yaml', `version: 1
resources:
  llm: {type: gguf_model, path: "${testModel}"}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
`);
    const result = runChatflow(['validate', file]);
    assert.equal(result.status, 1);
    assert.match(result.stderr, /upstream/);
  });

  test('graphs/gateway.yaml validates with its variables set', () => {
    const result = runChatflow(['validate', 'graphs/gateway.yaml']);
    assert.equal(result.status, 1, 'without CHATFLOW_UPSTREAM_URLS it cannot be read');
    assert.match(result.stderr, /CHATFLOW_UPSTREAM_URLS/);
  });
});

// nginx terminating TLS in front of an engine chatflow, with a certificate made here for
// localhost: the gateway verifies it against tls.ca_file, and refuses it without.
describe('an https endpoint (nginx terminating TLS)', () => {
  const nginx = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => fs.existsSync(file));
  let engine;
  let proxy;
  const gateways = [];
  after(async () => {
    await Promise.all([...gateways, engine].filter(Boolean).map((server) => server.stop()));
    if (proxy && proxy.exitCode === null) {
      proxy.kill('SIGTERM');
      await new Promise((resolve) => proxy.on('exit', resolve));
    }
  });

  test('streams through a verified TLS connection; an unknown certificate is a 502', async (t) => {
    if (!nginx) {
      t.skip('nginx is not installed (apt-get install nginx)');
      return;
    }
    const dir = scratchPath('tls');
    fs.mkdirSync(dir, { recursive: true });
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost', '-keyout', `${dir}/key.pem`, '-out', `${dir}/cert.pem`], { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    engine = await startServer(['--pipeline', modelPipeline('tls-engine')]);
    const port = await closedPort();
    fs.writeFileSync(`${dir}/nginx.conf`, `daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log;
events {}
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server {
    listen 127.0.0.1:${port} ssl;
    ssl_certificate ${dir}/cert.pem;
    ssl_certificate_key ${dir}/key.pem;
    location / {
      proxy_pass http://127.0.0.1:${engine.port};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`);
    proxy = spawn(nginx, ['-p', dir, '-c', `${dir}/nginx.conf`], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proxy.stderr.on('data', (data) => { stderr += data; });
    await waitFor(async () => {
      if (proxy.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
      return new Promise((resolve) => {
        const socket = net.connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true); });
        socket.on('error', () => resolve(false));
      });
    }, { what: 'nginx to listen' });
    const url = `https://localhost:${port}`;
    const trusted = await startServer(['--pipeline', gatewayPipeline('tls-trusted', [url],
      { upstream: `    tls: {ca_file: "${dir}/cert.pem"}\n` })]);
    gateways.push(trusted);
    const body = story();
    const direct = await post(engine.port, '/v1/chat/completions', body);
    const via = await post(trusted.port, '/v1/chat/completions', body);
    assert.equal(via.status, 200, via.body);
    assert.equal(contentOf(via.body), contentOf(direct.body));

    const untrusted = await startServer(['--pipeline', gatewayPipeline('tls-untrusted', [url],
      { upstream: '    retries: 0\n', health: '{path: ""}' })]);
    gateways.push(untrusted);
    const refused = await post(untrusted.port, '/v1/chat/completions', body);
    assert.equal(refused.status, 502, refused.body);
    assert.match(JSON.parse(refused.body).error.message, /certificate verify failed/);
  });
});

describe('llama.cpp\'s llama-server as an endpoint', () => {
  const bin = process.env.LLAMA_CPP_BIN;
  let llama;
  let gateway;
  after(async () => {
    if (gateway) await gateway.stop();
    if (llama && llama.exitCode === null) {
      llama.kill('SIGTERM');
      await new Promise((resolve) => llama.on('exit', resolve));
    }
  });

  test('streams what llama-server streams directly', async (t) => {
    if (!bin || !fs.existsSync(path.join(bin, 'llama-server'))) {
      t.skip('LLAMA_CPP_BIN is not set to a directory with llama-server (e.g. llama.cpp/build/bin)');
      return;
    }
    const port = await closedPort();
    llama = spawn(path.join(bin, 'llama-server'), ['-m', testModel, '--host', '127.0.0.1', '--port', String(port),
      '-c', '2048', '-t', '1', '-np', '2'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    llama.stderr.on('data', (data) => { stderr += data; });
    const url = `http://127.0.0.1:${port}`;
    await waitFor(async () => {
      if (llama.exitCode !== null) throw new Error(`llama-server exited: ${stderr}`);
      try { return (await fetch(`${url}/health`)).status === 200; } catch { return false; }
    }, { timeoutMs: 30000, intervalMs: 100, what: 'llama-server to load the model' });
    gateway = await startServer(['--pipeline', gatewayPipeline('llama-gateway', [url])]);
    const body = story({ max_tokens: 16 });
    const direct = await post(port, '/v1/chat/completions', body);
    const via = await post(gateway.port, '/v1/chat/completions', body);
    assert.equal(direct.status, 200, direct.body);
    assert.equal(via.status, 200, via.body);
    assert.ok(contentOf(direct.body).length > 0);
    assert.equal(contentOf(via.body), contentOf(direct.body));
    const usage = usageOf(via.body);
    assert.ok(usage && usage.completion_tokens > 0, `usage reported: ${JSON.stringify(usage)}`);
  });
});
