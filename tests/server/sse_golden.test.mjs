// The exact bytes of a response against hand-written golden files (OpenAI's streaming format),
// with the per-request id and timestamp normalised. The echo pipeline makes the text
// deterministic; it runs once with the sse_emit stage and once without (the server then renders
// the events itself): both must give the same bytes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { parseResponse, postBytes, rawExchange, sourceDir, startServer, writeTemp } from './harness.mjs';

const golden = (name) => fs.readFileSync(path.join(sourceDir, 'tests/server/golden', name), 'utf8');

function normalise(raw) {
  const response = parseResponse(raw);
  // Framing first: a Date header, and a Content-Length that is the real body length.
  assert.ok(response.headers.date && !Number.isNaN(Date.parse(response.headers.date)), 'Date header');
  if (response.headers['content-length'] !== undefined) {
    assert.equal(Number(response.headers['content-length']), Buffer.byteLength(response.body));
  }
  const head = response.headerLines
    .filter((line) => !line.startsWith('Date: '))
    .map((line) => line.replace(/^Content-Length: \d+$/, 'Content-Length: N'))
    .join('\r\n');
  const text = `${head}\r\n\r\n${response.body}`;
  return text
    .replace(/(chatcmpl|cmpl)-[0-9a-f]{24}/g, '$1-ID')
    .replace(/"created":\d{10}/g, '"created":0');
}

const chatStream = JSON.stringify({
  model: 'echo',
  messages: [{ role: 'user', content: 'hello pipeline' }],
  stream: true,
  stream_options: { include_usage: true },
});
const completionStream = JSON.stringify({ model: 'echo', prompt: 'Once upon', stream: true });
const chat = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hello pipeline' }] });

for (const variant of ['with sse_emit', 'without sse_emit']) {
  describe(`golden bytes, echo pipeline ${variant}`, () => {
    let server;
    before(async () => {
      const emit = variant === 'with sse_emit' ? '  - {name: emit, type: sse_emit}\n' : '';
      const pipeline = writeTemp(`echo-${emit ? 'emit' : 'plain'}.yaml`,
        `version: 1\nname: echo\nstages:\n  - {name: echo, type: echo, config: {words_per_chunk: 1}}\n${emit}`);
      server = await startServer(['--pipeline', pipeline]);
    });
    after(async () => {
      const { code } = await server.stop();
      assert.equal(code, 0);
    });

    test('chat stream with usage', async () => {
      const raw = await rawExchange(server.port, postBytes('/v1/chat/completions', chatStream));
      assert.equal(normalise(raw), golden('chat_stream.http'));
    });
    test('completion stream', async () => {
      const raw = await rawExchange(server.port, postBytes('/v1/completions', completionStream));
      assert.equal(normalise(raw), golden('completion_stream.http'));
    });
    test('non-streaming chat', async () => {
      const raw = await rawExchange(server.port, postBytes('/v1/chat/completions', chat));
      assert.equal(normalise(raw), golden('chat.http'));
    });
    test('every chunk of one stream has the same id and created', async () => {
      const raw = await rawExchange(server.port, postBytes('/v1/chat/completions', chatStream));
      const body = parseResponse(raw).body;
      const ids = new Set([...body.matchAll(/"id":"([^"]+)"/g)].map((m) => m[1]));
      const created = new Set([...body.matchAll(/"created":(\d+)/g)].map((m) => m[1]));
      assert.equal(ids.size, 1);
      assert.equal(created.size, 1);
      assert.match([...ids][0], /^chatcmpl-[0-9a-f]{24}$/);
    });
  });
}
