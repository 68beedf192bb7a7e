// SIGTERM during load: the server stops accepting, lets requests finish within
// shutdown_timeout_s, cancels the rest with a final error event, and exits 0.
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, test } from 'node:test';

import { modelPipeline, openStream, sseData, startServer, writeTemp } from './harness.mjs';

function serveFile(timeout) {
  const pipeline = modelPipeline(`shutdown-${String(timeout).replace('.', '_')}`);
  return writeTemp(`serve-${String(timeout).replace('.', '_')}.yaml`,
    `server:\n  shutdown_timeout_s: ${timeout}\npipeline: ${pipeline}\n`);
}

const request = (max_tokens) => ({
  model: 'test-model',
  messages: [{ role: 'user', content: 'Tell me a story' }],
  max_tokens,
  ignore_eos: true,
  stream: true,
});

function refused(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('connect', () => { socket.destroy(); resolve(false); });
    socket.on('error', () => resolve(true));
  });
}

describe('graceful shutdown', () => {
  test('streams past the timeout end with an error event and [DONE]; exit 0', async () => {
    const server = await startServer(['--config', serveFile(0.5)]);
    const streams = Array.from({ length: 4 }, () => openStream(server.port, '/v1/chat/completions', request(16000)));
    await Promise.all(streams.map((stream) => stream.waitEvents(2)));
    server.child.kill('SIGTERM');
    const responses = await Promise.all(streams.map((stream) => stream.ended));
    for (const response of responses) {
      assert.equal(response.status, 200);
      const events = sseData(response.body);
      assert.equal(events.at(-1), '[DONE]');
      const last = JSON.parse(events.at(-2));
      assert.equal(last.error?.code, 'server_shutting_down', events.at(-2));
      assert.equal(typeof last.error.message, 'string');
    }
    assert.ok(await refused(server.port), 'no new connections once draining');
    const { code, signal } = await server.exited;
    assert.equal(signal, null);
    assert.equal(code, 0);
  });

  test('streams within the timeout finish normally; exit 0', async () => {
    const server = await startServer(['--config', serveFile(30)]);
    const streams = Array.from({ length: 3 }, () => openStream(server.port, '/v1/chat/completions', request(600)));
    await Promise.all(streams.map((stream) => stream.waitEvents(2)));
    server.child.kill('SIGTERM');
    const responses = await Promise.all(streams.map((stream) => stream.ended));
    for (const response of responses) {
      const events = sseData(response.body);
      assert.equal(events.at(-1), '[DONE]');
      assert.equal(JSON.parse(events.at(-2)).choices[0].finish_reason, 'length');
      const text = events.slice(0, -2).map((event) => JSON.parse(event).choices[0].delta.content ?? '');
      assert.ok(text.join('').length > 0);
    }
    const { code } = await server.exited;
    assert.equal(code, 0);
  });

  test('a second signal cancels at once', async () => {
    const server = await startServer(['--config', serveFile(600)]);
    const stream = openStream(server.port, '/v1/chat/completions', request(16000));
    await stream.waitEvents(2);
    server.child.kill('SIGINT');
    await new Promise((resolve) => setTimeout(resolve, 100));
    server.child.kill('SIGINT');
    const response = await stream.ended;
    const events = sseData(response.body);
    assert.equal(events.at(-1), '[DONE]');
    assert.equal(JSON.parse(events.at(-2)).error?.code, 'server_shutting_down');
    const { code } = await server.exited;
    assert.equal(code, 0);
  });
});
