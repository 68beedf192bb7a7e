// What one client without credentials can make the server hold. A client that pipelines
// requests and never reads the answers: the server stops reading its requests while their
// answers wait (instead of queueing every answer), so its resident memory stays flat and other
// clients are served. A client sending megabytes of body to a route that takes none (GET
// /health): it is answered at once and the body discarded as it arrives, never buffered.
// Resident memory is read from /proc/PID/status; the flooding clients are a small Python program
// (for a small SO_RCVBUF) and Node sockets.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { assertResidentGrowthBelow, parseResponse, rawExchange, residentKiB, startServer } from './harness.mjs';

// Pipelines GET /health in batches without reading a byte of the answers, until `limit` bytes
// are sent or a batch has waited 2 s for the server to take it; prints how much it sent, then
// holds the connection open.
const pipelinesWithoutReading = `
import socket, sys, time
batch = b"GET /health HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" * 4096
limit = int(sys.argv[2])
client = socket.socket()
client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
client.connect(("127.0.0.1", int(sys.argv[1])))
client.settimeout(2)
sent = 0
try:
    while sent < limit:
        client.sendall(batch)
        sent += len(batch)
except socket.timeout:
    pass
print(sent, flush=True)
time.sleep(600)
`;

// Samples the server's resident memory every 20 ms; stop() returns the peak.
function residentPeak(pid) {
  let peak = residentKiB(pid);
  const timer = setInterval(() => { peak = Math.max(peak, residentKiB(pid)); }, 20);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(peak, residentKiB(pid));
    },
  };
}

async function warmUp(server) {
  for (let i = 0; i < 50; ++i) assert.equal((await fetch(`${server.url}/health`)).status, 200);
}

// A GET /health on a fresh connection, with how long its answer took.
async function timedHealth(server) {
  const started = Date.now();
  const response = parseResponse(await rawExchange(server.port,
    'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 10000));
  return { status: response.status, ms: Date.now() - started };
}

describe('a client that pipelines requests and never reads the answers', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', 'graphs/echo.yaml', '--access-log', 'off']);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('holds the server to a bounded memory while others are served', { timeout: 120000 }, async () => {
    await warmUp(server);
    const baseline = residentKiB(server.child.pid);
    const sampler = residentPeak(server.child.pid);
    // 32 MB of requests: ~900,000 answers of ~150 bytes had they all been queued.
    const limit = 32 << 20;
    const client = spawn('python3', ['-c', pipelinesWithoutReading, String(server.port), String(limit)],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const sent = Number(await new Promise((resolve) => client.stdout.once('data', resolve)));
      // The flooding connection is still open, its answers unread: others still get theirs.
      const health = await timedHealth(server);
      assert.equal(health.status, 200);
      await new Promise((resolve) => setTimeout(resolve, 500));
      const grownKiB = sampler.stop() - baseline;
      console.log(`the client got ${sent} bytes of requests in; resident memory grew by ${grownKiB} KiB at most`);
      assertResidentGrowthBelow(grownKiB, 16 * 1024, `resident memory grew by ${grownKiB} KiB for one connection`);
    } finally {
      sampler.stop();
      client.kill();
    }
  });

  test('a pipelining client that reads gets every answer, in order', async () => {
    const count = 2000;
    const requests = Array.from({ length: count }, (_, i) =>
      `GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: r${i}\r\n${i === count - 1 ? 'Connection: close\r\n' : ''}\r\n`).join('');
    const received = (await rawExchange(server.port, requests, 30000)).toString('latin1');
    const ids = [...received.matchAll(/X-Request-Id: (r\d+)\r\n/g)].map((match) => match[1]);
    assert.equal(ids.length, count);
    assert.deepEqual(ids, Array.from({ length: count }, (_, i) => `r${i}`));
    assert.equal((received.match(/HTTP\/1\.1 200 OK\r\n/g) || []).length, count);
  });
});

describe('bodies sent to routes that take none', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', 'graphs/echo.yaml', '--access-log', 'off']);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('are answered at once and never buffered', { timeout: 120000 }, async () => {
    await warmUp(server);
    const baseline = residentKiB(server.child.pid);
    const sampler = residentPeak(server.child.pid);
    // Just under max_body_bytes (4 MiB); all but the last KiB is sent, so a server reading the
    // body whole would hold it until body_timeout_s.
    const length = 4_000_000;
    const body = Buffer.alloc(length - 1024, 'x');
    const clients = 48;
    const sockets = [];
    try {
      const clientsSending = Array.from({ length: clients }, () => {
        const socket = net.connect(server.port, '127.0.0.1');
        sockets.push(socket);
        const parts = [];
        let wrote;
        const written = new Promise((resolve) => { wrote = resolve; });
        const answer = new Promise((resolve) => {
          socket.on('data', (data) => {
            parts.push(data);
            if (Buffer.concat(parts).includes('\r\n\r\n{"status":"ok"}')) resolve(Buffer.concat(parts));
          });
        });
        // The server closes the connection once it has answered; writes may then fail.
        socket.on('error', () => wrote());
        socket.on('connect', () => {
          socket.write(`GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\n\r\n`);
          socket.write(body, () => wrote());
        });
        return { written, answer };
      });
      await Promise.all(clientsSending.map((client) => client.written));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const grownKiB = sampler.stop() - baseline;
      console.log(`${clients} clients sent ${(clients * body.length) >> 20} MiB of body; resident memory grew by ${grownKiB} KiB at most`);
      assertResidentGrowthBelow(grownKiB, 32 * 1024, `resident memory grew by ${grownKiB} KiB`);
      const noAnswer = new Promise((resolve) => setTimeout(() => resolve(null), 5000));
      for (const client of clientsSending) {
        const answer = await Promise.race([client.answer, noAnswer]);
        assert.ok(answer, 'no answer before the body was complete');
        const response = parseResponse(answer);
        assert.equal(response.status, 200);
        assert.equal(response.body, '{"status":"ok"}');
        // The rest of the body is not read as a request: the connection ends.
        assert.equal(response.headers.connection, 'close');
      }
    } finally {
      sampler.stop();
      for (const socket of sockets) socket.destroy();
    }
  });

  test('a small body on GET /health is answered and the connection closed', async () => {
    const response = parseResponse(await rawExchange(server.port,
      'GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello', 5000));
    assert.equal(response.status, 200);
    assert.equal(response.body, '{"status":"ok"}');
    assert.equal(response.headers.connection, 'close');
  });
});
