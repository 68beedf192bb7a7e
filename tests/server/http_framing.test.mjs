// HTTP framing as an attacker or an odd client sends it: request smuggling through
// Transfer-Encoding (RFC 9112 section 6.3), long chunk extensions and trailers, absolute-form targets,
// credentials checked before any body is read, and half-closed connections that still get
// their answer.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { addKey, parseResponse, rawExchange, scratchPath, startServer, writeTemp } from './harness.mjs';

const embedded = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n';
const chat = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hello framing' }] });

function withCoding(coding, body = embedded) {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Transfer-Encoding: ${coding}\r\n\r\n${body}`;
}

// Every status line the server wrote on one connection.
function statuses(raw) {
  return [...raw.toString('latin1').matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => Number(match[1]));
}

describe('HTTP framing', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', 'graphs/echo.yaml']);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a Transfer-Encoding that does not end in chunked is a 400 and the connection closes', async () => {
    for (const coding of ['identity', 'chunked, identity', 'xchunked', 'chunked, chunked']) {
      const raw = await rawExchange(server.port, withCoding(coding));
      // Only one answer: the bytes after the header were never taken for a second request.
      assert.deepEqual(statuses(raw), [400], `${coding}: ${raw}`);
      const response = parseResponse(raw);
      assert.equal(response.headers.connection, 'close', coding);
      assert.equal(JSON.parse(response.body).error.code, 'bad_request', coding);
    }
  });

  test('an unknown transfer coding under chunked is 501', async () => {
    const raw = await rawExchange(server.port, withCoding('gzip, chunked', '0\r\n\r\n'));
    assert.deepEqual(statuses(raw), [501], raw.toString());
    assert.equal(JSON.parse(parseResponse(raw).body).error.code, 'unsupported_transfer_coding');
  });

  test('Content-Length beside Transfer-Encoding is a 400', async () => {
    const raw = await rawExchange(server.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${embedded}`);
    assert.deepEqual(statuses(raw), [400], raw.toString());
  });

  test('a well-framed chunked body is still read', async () => {
    const body = Buffer.from(chat);
    const raw = await rawExchange(server.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body.length.toString(16)}\r\n${chat}\r\n0\r\n\r\n`);
    const response = parseResponse(raw);
    assert.equal(response.status, 200, response.body);
    assert.equal(JSON.parse(response.body).choices[0].message.content, 'HELLO FRAMING');
  });

  test('a chunk extension past 1 KiB is a 400', async () => {
    const raw = await rawExchange(server.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n2;${'x'.repeat(70000)}\r\n{}\r\n0\r\n\r\n`);
    assert.deepEqual(statuses(raw), [400], raw.toString().slice(0, 300));
    assert.match(JSON.parse(parseResponse(raw).body).error.message, /chunk extension/);
  });

  test('a trailer field of 64 KiB is a 431, not the end of the server', async () => {
    // Beast keeps a field's length in 16 bits and throws past it; a header is bounded before
    // that, a chunked body's trailer was not. Anonymous /health was enough on any pipeline:
    // now a body sent to /health is not parsed at all, the answer comes and the connection ends.
    const trailer = `0\r\nX-Padding: ${'t'.repeat(70000)}\r\n\r\n`;
    const health = await rawExchange(server.port,
      `GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${trailer}`);
    assert.deepEqual(statuses(health), [200], health.toString().slice(0, 300));
    assert.equal(parseResponse(health).headers.connection, 'close');
    const body = Buffer.from(chat);
    const completion = await rawExchange(server.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${chat}\r\n${trailer}`);
    assert.deepEqual(statuses(completion), [431], completion.toString().slice(0, 300));
    const refused = parseResponse(completion);
    assert.equal(refused.headers.connection, 'close');
    assert.equal(JSON.parse(refused.body).error.code, 'headers_too_large');
    assert.match(JSON.parse(refused.body).error.message, /trailer/);
    assert.equal(server.child.exitCode, null, 'the server is still running');
    // A trailer that fits is read, and the body answered.
    const small = await rawExchange(server.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body.length.toString(16)}\r\n${chat}\r\n` +
      `0\r\nX-Checksum: ${'c'.repeat(1000)}\r\n\r\n`);
    assert.equal(parseResponse(small).status, 200);
    assert.equal(JSON.parse(parseResponse(small).body).choices[0].message.content, 'HELLO FRAMING');
  });

  test('an absolute-form target is served like its path', async () => {
    const raw = await rawExchange(server.port,
      'GET http://127.0.0.1/health?probe=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    const response = parseResponse(raw);
    assert.equal(response.status, 200, response.body);
    assert.equal(response.body, '{"status":"ok"}');
  });

  test('a client that half-closes after its request gets the whole answer', async () => {
    for (const stream of [false, true]) {
      const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'half closed' }], stream });
      const raw = await new Promise((resolve, reject) => {
        const socket = net.connect(server.port, '127.0.0.1');
        const parts = [];
        socket.on('data', (data) => parts.push(data));
        socket.on('end', () => resolve(Buffer.concat(parts)));
        socket.on('error', reject);
        socket.on('connect', () => {
          socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
            `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
          socket.end();  // shutdown(SHUT_WR): nothing more to send, still listening
        });
      });
      const response = parseResponse(raw);
      assert.equal(response.status, 200, `stream ${stream}: ${response.body}`);
      if (stream) {
        assert.match(response.body, /"content":"HALF"/);
        assert.ok(response.body.endsWith('data: [DONE]\n\n'), response.body);
      } else {
        assert.equal(JSON.parse(response.body).choices[0].message.content, 'HALF CLOSED');
      }
    }
  });
});

describe('credentials before the body', () => {
  let server;
  let key;
  before(async () => {
    const keys = scratchPath('framing-keys.yaml');
    key = addKey(keys, 'acme');
    const pipeline = writeTemp('framing-auth.yaml', `version: 1
name: echo
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: echo, type: echo}
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('no key is a 401 before a byte of the body was sent, whatever the body and model', async () => {
    // The header promises 4 MB that never come: only an answer from the header can arrive.
    const raw = await rawExchange(server.port,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Content-Length: 4000000\r\n\r\n', 5000);
    const response = parseResponse(raw);
    assert.equal(response.status, 401, response.body);
    assert.equal(response.headers['www-authenticate'], 'Bearer');
    assert.equal(JSON.parse(response.body).error.type, 'authentication_error');
  });

  test('an unknown model or a bad body is only looked at with a good key', async () => {
    const bad = '{"model": "nonexistent", "messages": [';
    const head = (extra) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${bad.length}\r\nConnection: close\r\n${extra}\r\n${bad}`;
    assert.equal(parseResponse(await rawExchange(server.port, head(''))).status, 401);
    assert.equal(parseResponse(await rawExchange(server.port, head(`Authorization: Bearer ${key}\r\n`))).status, 400);
    const models = parseResponse(await rawExchange(server.port,
      'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    assert.equal(models.status, 401, 'model ids are not listed to anonymous callers');
  });
});
