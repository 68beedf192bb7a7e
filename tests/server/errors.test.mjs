// Every class of bad input gets its own status and an OpenAI error object, and the server keeps
// serving afterwards: malformed JSON, wrong types, out-of-range values, missing or empty
// messages, unknown roles and models, unknown routes, wrong methods, a 10 MB body, the wrong
// content type, invalid UTF-8, a nesting bomb, broken HTTP, and a full pipeline (503).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  getJson, modelPipeline, openStream, parseResponse, postBytes, postJson, rawExchange, startServer,
} from './harness.mjs';

function assertError(response, status, { param, code, message } = {}) {
  assert.equal(response.status, status, response.text);
  const error = response.json?.error;
  assert.ok(error, `an error object: ${response.text}`);
  assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof error.message, 'string');
  assert.ok(error.message.length > 10, error.message);
  assert.equal(typeof error.type, 'string');
  if (param !== undefined) assert.equal(error.param, param);
  if (code !== undefined) assert.equal(error.code, code);
  if (message) assert.match(error.message, message);
}

function rawError(raw, status, code) {
  const response = parseResponse(raw);
  const json = JSON.parse(response.body);
  assertError({ status: response.status, json, text: response.body }, status, { code });
  return response;
}

const user = [{ role: 'user', content: 'Once upon a time' }];

describe('error responses', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('errors', 'max_in_flight: 1')]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const chat = (body) => postJson(server.url, '/v1/chat/completions', body);

  test('malformed JSON is a 400', async () => {
    assertError(await chat('{"model": "test-model", "messages": ['), 400, { message: /not valid JSON/ });
    assertError(await chat('[1, 2]'), 400, { message: /must be a JSON object/ });
    assertError(await chat(''), 400);
  });

  test('wrong types are 400s naming the parameter', async () => {
    assertError(await chat({ model: 'test-model', messages: user, max_tokens: '5' }), 400, { param: 'max_tokens' });
    assertError(await chat({ model: 'test-model', messages: user, temperature: 'hot' }), 400, { param: 'temperature' });
    assertError(await chat({ model: 'test-model', messages: user, stream: 'yes' }), 400, { param: 'stream' });
    assertError(await chat({ model: 'test-model', messages: 'hi' }), 400, { param: 'messages' });
    assertError(await chat({ model: 'test-model', messages: [{ role: 'user', content: 7 }] }), 400,
      { param: 'messages[0].content' });
    assertError(await chat({ model: 'test-model', messages: user, stop: 5 }), 400, { param: 'stop' });
  });

  test('a session id longer than 256 characters is a 400, in the body or the x-session-id header', async () => {
    const long = 's'.repeat(257);
    assertError(await chat({ model: 'test-model', messages: user, max_tokens: 2, session_id: long }), 400,
      { param: 'session_id', message: /at most 256 characters/ });
    const headed = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'x-session-id': long },
      body: JSON.stringify({ model: 'test-model', messages: user, max_tokens: 2 }),
    });
    const text = await headed.text();
    assertError({ status: headed.status, json: JSON.parse(text), text }, 400,
      { param: 'x-session-id', message: /at most 256 characters/ });
    const fits = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'x-session-id': 's'.repeat(256) },
      body: JSON.stringify({ model: 'test-model', messages: user, max_tokens: 2 }),
    });
    assert.equal(fits.status, 200, await fits.text());
  });

  test('out-of-range values are refused, never clamped', async () => {
    assertError(await chat({ model: 'test-model', messages: user, max_tokens: -5 }), 400, { param: 'max_tokens', message: /-5/ });
    assertError(await chat({ model: 'test-model', messages: user, max_tokens: 0 }), 400, { param: 'max_tokens' });
    assertError(await chat({ model: 'test-model', messages: user, temperature: -1 }), 400, { param: 'temperature' });
    assertError(await chat({ model: 'test-model', messages: user, temperature: 2.5 }), 400, { param: 'temperature' });
    assertError(await chat({ model: 'test-model', messages: user, top_p: 1.5 }), 400, { param: 'top_p' });
    assertError(await chat({ model: 'test-model', messages: user, presence_penalty: 3 }), 400, { param: 'presence_penalty' });
    assertError(await chat({ model: 'test-model', messages: user, top_logprobs: 21, logprobs: true }), 400, { param: 'top_logprobs' });
    assertError(await chat({ model: 'test-model', messages: user, n: 2 }), 400, { param: 'n' });
  });

  test('messages missing, empty, or with an unknown role', async () => {
    assertError(await chat({ model: 'test-model' }), 400, { param: 'messages', message: /required/ });
    assertError(await chat({ model: 'test-model', messages: [] }), 400, { param: 'messages' });
    assertError(await chat({ model: 'test-model', messages: [{ role: 'wizard', content: 'hi' }] }), 400,
      { param: 'messages[0].role', message: /wizard/ });
    assertError(await chat({ model: 'test-model', messages: [{ content: 'hi' }] }), 400, { param: 'messages[0].role' });
    assertError(await postJson(server.url, '/v1/completions', { model: 'test-model' }), 400, { param: 'prompt' });
  });

  test('a prompt longer than the context is a 400 context_length_exceeded', async () => {
    const long = 'word '.repeat(40000);
    assertError(await chat({ model: 'test-model', messages: [{ role: 'user', content: long }] }), 400,
      { code: 'context_length_exceeded' });
  });

  test('unknown model and unknown route are 404s', async () => {
    assertError(await chat({ model: 'gpt-7', messages: user }), 404, { code: 'model_not_found', param: 'model' });
    const missing = await postJson(server.url, '/v1/embeddings', { model: 'test-model', input: 'x' });
    assertError(missing, 404);
    assertError(await postJson(server.url, '/nothing/here', {}), 404);
  });

  test('a wrong method is a 405 with Allow', async () => {
    const response = await fetch(`${server.url}/v1/chat/completions`);
    const json = await response.json();
    assertError({ status: response.status, json, text: JSON.stringify(json) }, 405);
    assert.match(response.headers.get('allow'), /POST/);
    const models = await fetch(`${server.url}/v1/models`, { method: 'DELETE' });
    assert.equal(models.status, 405);
  });

  test('the wrong content type is a 415', async () => {
    const raw = await rawExchange(server.port, postBytes('/v1/chat/completions',
      JSON.stringify({ model: 'test-model', messages: user }), { contentType: 'text/plain' }));
    rawError(raw, 415, 'unsupported_media_type');
    const none = await rawExchange(server.port, postBytes('/v1/chat/completions', '{}', { contentType: '' }));
    rawError(none, 415, 'unsupported_media_type');
  });

  test('10 MB of garbage is a 413 (with a length, and chunked without one)', async () => {
    const garbage = Buffer.alloc(10 * 1024 * 1024);
    for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 7919 + 13) & 0xff;
    rawError(await rawExchange(server.port, postBytes('/v1/chat/completions', garbage)), 413, 'request_too_large');
    const chunked = Buffer.concat([
      Buffer.from('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n'),
      ...Array.from({ length: 10 }, (_, i) => Buffer.concat([
        Buffer.from('100000\r\n'), garbage.subarray(i * 0x100000, (i + 1) * 0x100000), Buffer.from('\r\n')])),
      Buffer.from('0\r\n\r\n'),
    ]);
    rawError(await rawExchange(server.port, chunked), 413, 'request_too_large');
  });

  test('invalid UTF-8 in content is a 400', async () => {
    const body = Buffer.concat([
      Buffer.from('{"model": "test-model", "messages": [{"role": "user", "content": "caf'),
      Buffer.from([0xc3, 0x28, 0xff]),
      Buffer.from('"}]}'),
    ]);
    const response = rawError(await rawExchange(server.port, postBytes('/v1/chat/completions', body)), 400);
    assert.match(JSON.parse(response.body).error.message, /UTF-8/);
    const surrogate = '{"model": "test-model", "messages": [{"role": "user", "content": "\\udc00"}]}';
    rawError(await rawExchange(server.port, postBytes('/v1/chat/completions', surrogate)), 400);
  });

  test('a JSON nesting bomb is a 400, not a crash', async () => {
    const bomb = '{"model": "test-model", "messages": ' + '['.repeat(100000) + ']'.repeat(100000) + '}';
    const response = await chat(bomb);
    assertError(response, 400, { message: /JSON/ });
  });

  test('broken HTTP is a 400', async () => {
    const raw = await rawExchange(server.port, Buffer.from('THIS IS NOT HTTP\r\n\r\n'));
    rawError(raw, 400, 'bad_request');
  });

  test('a full pipeline answers 503 with Retry-After, then serves again', async () => {
    // max_in_flight is 1: a long stream holds the only place.
    const holder = openStream(server.port, '/v1/chat/completions',
      { model: 'test-model', messages: user, max_tokens: 16000, ignore_eos: true, stream: true });
    await holder.waitEvents(2);
    const refused = await chat({ model: 'test-model', messages: user, max_tokens: 4 });
    assertError(refused, 503, { code: 'server_overloaded' });
    assert.equal(refused.headers.get('retry-after'), '1');
    holder.socket.destroy();
    const served = await (async () => {
      for (let i = 0; i < 200; i++) {
        const response = await chat({ model: 'test-model', messages: user, max_tokens: 4 });
        if (response.status === 200) return response;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      return undefined;
    })();
    assert.ok(served, 'served again after the long stream went away');
    assert.equal(served.json.choices[0].finish_reason === 'length' || served.json.choices[0].finish_reason === 'stop', true);
  });

  test('after all of that the server is healthy and serving', async () => {
    const health = await getJson(server.url, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'ok');
    assert.equal(health.body.failing_stores, undefined);
    const response = await chat({ model: 'test-model', messages: user, max_tokens: 3, ignore_eos: true });
    assert.equal(response.status, 200);
    assert.equal(response.json.usage.completion_tokens, 3);
  });

  test('tokenize and detokenize round-trip; a bad id is a 400', async () => {
    const tokens = await postJson(server.url, '/tokenize', { prompt: 'hello world', add_special_tokens: false });
    assert.equal(tokens.status, 200);
    assert.ok(tokens.json.tokens.length > 0);
    assert.equal(tokens.json.count, tokens.json.tokens.length);
    assert.equal(tokens.json.max_model_len, 16384);
    const text = await postJson(server.url, '/detokenize', { tokens: tokens.json.tokens });
    assert.equal(text.status, 200);
    assert.equal(text.json.prompt, 'hello world');
    assertError(await postJson(server.url, '/detokenize', { tokens: [1, 99999999] }), 400, { param: 'tokens' });
    assertError(await postJson(server.url, '/tokenize', { prompt: 5 }), 400, { param: 'prompt' });
  });
});
