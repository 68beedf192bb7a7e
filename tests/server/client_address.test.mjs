// Who the client is behind a trusted proxy: every X-Forwarded-For line counts, read from the
// right through server.trusted_proxies, so a client's own line cannot choose its address when
// the proxy appends a line of its own instead of extending the client's; X-Forwarded-Proto
// likewise.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { parseResponse, rawExchange, startServer, waitFor } from './harness.mjs';

const chat = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'who am i' }] });

function completion(requestId, forwardedLines) {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `X-Request-Id: ${requestId}\r\n${forwardedLines}Content-Length: ${Buffer.byteLength(chat)}\r\n` +
    `Connection: close\r\n\r\n${chat}`;
}

describe('X-Forwarded-For from a trusted proxy', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', 'graphs/echo.yaml', '--trusted-proxies', '127.0.0.1/32']);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  async function logged(requestId) {
    return waitFor(() => fs.readFileSync(server.accessLog, 'utf8').split('\n').filter(Boolean)
      .map((line) => JSON.parse(line)).find((record) => record.request_id === requestId),
    { what: `the access log line of ${requestId}` });
  }

  test('a second line appended by the proxy names the client, not the client\'s own line', async () => {
    // The client sent "X-Forwarded-For: 203.0.113.66" itself; the proxy (127.0.0.1) appended a
    // line with the address it saw, as some proxies do instead of extending the first line.
    const response = parseResponse(await rawExchange(server.port, completion('two-lines',
      'X-Forwarded-For: 203.0.113.66\r\nX-Forwarded-Proto: http\r\n' +
      'X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-Proto: https\r\n')));
    assert.equal(response.status, 200, response.body);
    const record = await logged('two-lines');
    assert.equal(record.remote, '198.51.100.7');
    assert.equal(record.scheme, 'https');
    assert.match(record.peer, /^127\.0\.0\.1:\d+$/);
  });

  test('lines of trusted hops are walked through from the right', async () => {
    const response = parseResponse(await rawExchange(server.port, completion('three-lines',
      'X-Forwarded-For: 203.0.113.66, 192.0.2.10\r\nX-Forwarded-For: 127.0.0.1\r\n')));
    assert.equal(response.status, 200, response.body);
    // 127.0.0.1 is a trusted hop; the first untrusted address to its left is the client.
    assert.equal((await logged('three-lines')).remote, '192.0.2.10');
  });
});
