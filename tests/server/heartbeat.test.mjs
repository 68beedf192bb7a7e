// SSE heartbeats: a stream that has sent nothing for server.sse_heartbeat_ms gets an SSE comment
// (": keep-alive"), before its first event (the request waits or prefills) and between events,
// so a proxy that cuts idle connections does not cut it; 0 turns them off. The slow part is an
// engine on loopback, written here, that takes its time before and between its tokens.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { openStream, startServer, writeTemp } from './harness.mjs';

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const delta = (content, finish = null) => ({
  id: 'slow-1', object: 'chat.completion.chunk', created: 1, model: 'slow',
  choices: [{ index: 0, delta: content === undefined ? {} : { content }, finish_reason: finish }],
});

// An OpenAI-compatible engine that thinks for `gapMs` before its first token and between tokens.
async function slowEngine(gapMs) {
  const server = http.createServer(async (request, response) => {
    if (request.method === 'GET') {
      response.writeHead(200, { 'Content-Type': 'application/json' });
      return response.end('{"status":"ok"}');
    }
    for await (const part of request) void part;
    await pause(gapMs);
    response.writeHead(200, { 'Content-Type': 'text/event-stream' });
    response.write(`data: ${JSON.stringify(delta('Once'))}\n\n`);
    await pause(gapMs);
    response.write(`data: ${JSON.stringify(delta(' upon'))}\n\n`);
    response.write(`data: ${JSON.stringify(delta(undefined, 'stop'))}\n\n`);
    response.end('data: [DONE]\n\n');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

function gateway(name, engineUrl, heartbeatMs) {
  const pipeline = writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: upstream, endpoints: "${engineUrl}", model: slow, health: {path: ""}}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
  return writeTemp(`${name}-serve.yaml`, `server:\n  sse_heartbeat_ms: ${heartbeatMs}\npipeline: ${pipeline}\n`);
}

const request = { model: 'slow', messages: [{ role: 'user', content: 'tell me' }], stream: true, max_tokens: 16 };

// The stream's SSE frames in order: comments and data events.
function frames(body) {
  assert.ok(body.endsWith('\n\n'), JSON.stringify(body.slice(-80)));
  return body.slice(0, -2).split('\n\n');
}

describe('SSE heartbeats', () => {
  let engine;
  let beating;
  let silent;
  before(async () => {
    engine = await slowEngine(1000);
    beating = await startServer(['--config', gateway('heartbeat-on', engine.url, 100)]);
    silent = await startServer(['--config', gateway('heartbeat-off', engine.url, 0)]);
  });
  after(async () => {
    const results = await Promise.all([beating.stop(), silent.stop()]);
    engine.server.close();
    for (const { code } of results) assert.equal(code, 0);
  });

  test('a silent stream gets comments before its first event and between events', async () => {
    const stream = openStream(beating.port, '/v1/chat/completions', request);
    const response = await stream.ended;
    assert.equal(response.status, 200, response.body);
    assert.equal(response.headers['content-type'], 'text/event-stream');
    const all = frames(response.body);
    const firstData = all.findIndex((frame) => frame.startsWith('data: '));
    const secondData = all.findIndex((frame, index) => index > firstData && frame.startsWith('data: {') &&
      frame.includes('" upon"'));
    assert.ok(firstData > 0 && secondData > firstData, all.join(' | '));
    const before = all.slice(0, firstData);
    const between = all.slice(firstData + 1, secondData).filter((frame) => !frame.startsWith('data: '));
    // One second of silence at a 100 ms period: several each time (at least 2, for a busy machine).
    assert.ok(before.length >= 2, `comments before the first event: ${before.length}`);
    assert.ok(between.length >= 2, `comments between events: ${between.length}`);
    for (const frame of [...before, ...between]) assert.equal(frame, ': keep-alive');
    // The events themselves are whole and in order.
    const data = all.filter((frame) => frame.startsWith('data: ')).map((frame) => frame.slice(6));
    assert.equal(data.at(-1), '[DONE]');
    const text = data.slice(0, -1).map((event) => JSON.parse(event).choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, 'Once upon');
  });

  test('sse_heartbeat_ms 0 sends none', async () => {
    const stream = openStream(silent.port, '/v1/chat/completions', request);
    const response = await stream.ended;
    assert.equal(response.status, 200, response.body);
    assert.deepEqual(frames(response.body).filter((frame) => !frame.startsWith('data: ')), []);
  });
});
