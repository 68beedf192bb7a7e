// The server's own limits, as an operator configures them: connections past max_connections
// (idle ones shed first, then a 503; exact under a burst), the share anonymous requests may hold
// and the header and body timeouts, a process started under a low `ulimit -n`, the metrics
// address without credentials, CORS origins, and long endpoints off the I/O thread.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, parseResponse, rawExchange, scrape, scratchPath, startServer, waitFor, writeTemp,
} from './harness.mjs';

const health = 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';

function connect(port) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('connect', () => resolve(socket));
    socket.on('error', reject);
  });
}

function closed(socket) {
  return new Promise((resolve) => {
    if (socket.destroyed || socket.readableEnded) return resolve();
    socket.on('close', resolve);
  });
}

function serveFile(name, server, pipeline) {
  return writeTemp(`${name}-serve.yaml`, `server:\n${server}pipeline: ${pipeline}\n`);
}

describe('connection limits', () => {
  let server;
  before(async () => {
    const config = serveFile('limits', '  max_connections: 4\n  keep_alive_timeout_s: 60\n',
      `${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml`);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('past max_connections an idle connection is shed for the new client', async () => {
    const idle = await Promise.all([1, 2, 3, 4].map(() => connect(server.port)));
    const response = parseResponse(await rawExchange(server.port, health));
    assert.equal(response.status, 200, response.body);
    // One of the idle ones made room and was closed by the server.
    await Promise.race(idle.map(closed));
    for (const socket of idle) socket.destroy();
  });

  test('slow clients dripping their headers are shed before a new client is refused', async () => {
    const slow = await Promise.all([1, 2, 3, 4].map(() => connect(server.port)));
    const header = 'GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: ' + 'p'.repeat(200);
    let sent = 0;
    const drip = setInterval(() => {
      for (const socket of slow) if (!socket.destroyed) socket.write(header[sent % header.length]);
      sent += 1;
    }, 20);
    try {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const response = parseResponse(await rawExchange(server.port, health));
      assert.equal(response.status, 200, response.body);
      await Promise.race(slow.map(closed));
    } finally {
      clearInterval(drip);
      for (const socket of slow) socket.destroy();
    }
  });

  test('with every connection busy the new client gets a 503 with Retry-After', async () => {
    // The earlier tests' connections are gone (this scrape's own is the one left).
    await waitFor(async () => metric(await scrape(server.url), 'chatflow:http_open_connections') <= 1,
      { what: 'the earlier connections to close' });
    // Each sends a header that promises a body and never sends it: busy, not idle. The server's
    // "100 Continue" says it has read the header.
    const busy = await Promise.all([1, 2, 3, 4].map(async () => {
      const socket = await connect(server.port);
      const continued = new Promise((resolve) => socket.once('data', resolve));
      socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 100\r\nExpect: 100-continue\r\n\r\n');
      assert.match(String(await continued), /^HTTP\/1\.1 100 Continue/);
      return socket;
    }));
    const response = parseResponse(await rawExchange(server.port, health));
    assert.equal(response.status, 503, response.body);
    assert.equal(response.headers['retry-after'], '1');
    assert.equal(JSON.parse(response.body).error.code, 'too_many_connections');
    for (const socket of busy) socket.destroy();
  });
});

describe('a burst of connections', () => {
  let server;
  before(async () => {
    const config = serveFile('burst', '  max_connections: 4\n  keep_alive_timeout_s: 60\n',
      `${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml`);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('40 clients connecting at once leave exactly max_connections open', async () => {
    // Each asks for /health at once and keeps its connection: while the server sheds one to
    // make room, that one may be busy with its request already.
    const sockets = await Promise.all(Array.from({ length: 40 }, async () => {
      const socket = await connect(server.port);
      socket.on('data', () => {});
      socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
      return socket;
    }));
    const open = new Set(sockets);
    for (const socket of sockets) {
      socket.on('close', () => open.delete(socket));
      if (socket.destroyed) open.delete(socket);
    }
    // Each new client took the slot of an idle one (closed for it) or was refused: the server
    // holds four, whichever they are, once the closes have arrived.
    await waitFor(() => open.size <= 4, { timeoutMs: 5000, what: `at most 4 open (now ${open.size})` });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(open.size, 4);
    for (const socket of sockets) socket.destroy();
  });
});

describe('connections without credentials', () => {
  let server;
  let key;
  before(async () => {
    const keys = scratchPath('anonymous-keys.yaml');
    key = addKey(keys, 'acme');
    const pipeline = writeTemp('anonymous-auth.yaml', `version: 1
name: echo
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /tokenize]}}
  - {name: echo, type: echo}
`);
    const config = serveFile('anonymous', '  max_connections: 6\n  anonymous_connection_share: 0.5\n' +
      '  body_timeout_s: 2\n  header_timeout_s: 0.5\n', pipeline);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('half-sent bodies on a public path hold at most their share; keys still get in', async () => {
    // Six clients without credentials promise a body on /tokenize (public here; it reads its
    // body) and send part of it. (A body on /health is not read at all: client_memory.test.mjs.)
    const answers = [];
    const holders = await Promise.all([0, 1, 2, 3, 4, 5].map(async (index) => {
      const socket = await connect(server.port);
      answers[index] = '';
      socket.on('data', (data) => { answers[index] += data; });
      socket.write('POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 100\r\n\r\n{"prompt": "half');
      return socket;
    }));
    // Half of max_connections may be held that way; the rest are refused at once.
    await waitFor(() => answers.filter((answer) => answer.startsWith('HTTP/1.1 503')).length === 3,
      { what: 'three anonymous clients to be refused' });
    const refused = parseResponse(Buffer.from(answers.find((answer) => answer.startsWith('HTTP/1.1 503'))));
    assert.equal(JSON.parse(refused.body).error.code, 'too_many_anonymous_connections');
    assert.equal(refused.headers['retry-after'], '1');
    // An authenticated client is served while they hold their share, and /health answers.
    const served = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'let me in' }] }),
    });
    assert.equal(served.status, 200, await served.text());
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    // The held ones run out of body_timeout_s and are closed.
    await Promise.all(holders.map(closed));
  });

  test('a client sending its header slowly is closed after header_timeout_s', async () => {
    const socket = await connect(server.port);
    socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');
    const started = Date.now();
    await closed(socket);
    // Well before keep_alive_timeout_s (60 s): header_timeout_s is 0.5 s.
    assert.ok(Date.now() - started < 30000, `closed after ${Date.now() - started} ms`);
  });
});

describe('a low open-file limit', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', 'graphs/echo.yaml'], { fileLimit: 96 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('max_connections is kept below the limit and new clients are still answered', async () => {
    assert.match(server.stdout() + server.stderr(), /max_connections 1024 is above what 96 open files allow; serving at most 32/);
    const sockets = [];
    for (let i = 0; i < 120; i++) sockets.push(await connect(server.port));
    // More sockets than descriptors: the server sheds idle ones instead of running out.
    const response = parseResponse(await rawExchange(server.port, health, 5000));
    assert.equal(response.status, 200, response.body);
    for (const socket of sockets) socket.destroy();
  });
});

describe('metrics address, CORS and workers', () => {
  let server;
  let metricsUrl;
  let admin;
  let user;
  before(async () => {
    const keys = scratchPath('connections-keys.yaml');
    admin = addKey(keys, 'ops', { roles: ['admin'] });
    user = addKey(keys, 'acme');
    const yaml = writeTemp('connections-auth.yaml', `version: 1
name: connections
resources:
  llm: {type: gguf_model, path: "${process.env.CHATFLOW_TEST_MODEL}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
`);
    const config = serveFile('connections',
      '  metrics_listen: 127.0.0.1:0\n  cors_origins: [http://app.example]\n', yaml);
    server = await startServer(['--config', config]);
    const match = /metrics: (http:\/\/[^ ]+)\/metrics/.exec(server.stdout());
    assert.ok(match, server.stdout());
    metricsUrl = match[1];
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the metrics address serves /metrics without a key, and nothing else', async () => {
    const scraped = await fetch(`${metricsUrl}/metrics`);
    assert.equal(scraped.status, 200);
    assert.match(await scraped.text(), /chatflow:e2e_request_latency_seconds/);
    assert.equal((await fetch(`${metricsUrl}/health`)).status, 200);
    assert.equal((await fetch(`${metricsUrl}/v1/models`)).status, 404);
    // The main address still wants an admin for it.
    assert.equal((await fetch(`${server.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${admin}` } })).status, 200);
  });

  test('only a listed origin gets CORS headers', async () => {
    const listed = await fetch(`${server.url}/health`, { headers: { Origin: 'http://app.example' } });
    assert.equal(listed.headers.get('access-control-allow-origin'), 'http://app.example');
    assert.equal(listed.headers.get('vary'), 'Origin');
    const other = await fetch(`${server.url}/health`, { headers: { Origin: 'http://evil.example' } });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    const preflight = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'OPTIONS', headers: { Origin: 'http://app.example', 'Access-Control-Request-Method': 'POST' } });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get('access-control-allow-methods'), 'POST, OPTIONS');
  });

  test('a big /tokenize runs off the I/O thread: /health answers while it works', async () => {
    const text = 'the quick brown fox jumps over the lazy dog '.repeat(23000);  // about 1 MB
    const order = [];
    const tokenizing = fetch(`${server.url}/tokenize`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${user}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: text }),
    }).then(async (response) => { order.push(['tokenize', response.status, (await response.json()).count]); });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const healthy = fetch(`${server.url}/health`).then((response) => { order.push(['health', response.status]); });
    await Promise.all([tokenizing, healthy]);
    assert.equal(order[0][0], 'health', JSON.stringify(order));
    assert.equal(order[1][1], 200);
    assert.ok(order[1][2] > 100000, JSON.stringify(order));
    const tooBig = await fetch(`${server.url}/tokenize`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${user}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'x'.repeat(1100000) }),
    });
    assert.equal(tooBig.status, 400);
    assert.equal((await tooBig.json()).error.code, 'input_too_large');
  });
});
