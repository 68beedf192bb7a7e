// A streaming client that never reads: past server.max_stream_backlog_bytes waiting in the
// server its request is cancelled (503 slow_client, the engine stops), its connection closed,
// and the server's resident memory never grows by more than the backlog allows. The client is
// a small Python program with a small receive buffer (SO_RCVBUF); it asks for 20 logprobs per
// token, so each event is large and the stream soon outgrows what the kernel holds (a few MB)
// and builds up in the server.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { assertResidentGrowthBelow, metric, modelPipeline, residentKiB, scrape, startServer, waitFor, writeTemp } from './harness.mjs';

const backlogBytes = 1 << 20;

const neverReads = `
import json, socket, sys, time
body = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "a long story"}],
                   "max_tokens": 16000, "ignore_eos": True, "stream": True,
                   "logprobs": True, "top_logprobs": 20}).encode()
client = socket.socket()
client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
client.connect(("127.0.0.1", int(sys.argv[1])))
client.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
               b"X-Request-Id: never-reads\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
print("sent", flush=True)
time.sleep(600)
`;

describe('a client that never reads its stream', () => {
  let server;
  before(async () => {
    const config = writeTemp('slow-client-serve.yaml',
      `server:\n  max_stream_backlog_bytes: ${backlogBytes}\npipeline: ${modelPipeline('slow-client')}\n`);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('is cancelled past the backlog, and memory stays bounded', { timeout: 120000 }, async () => {
    // Warm up: the engine's buffers are allocated by the first request, not counted below.
    const warm = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 64, ignore_eos: true }),
    });
    assert.equal(warm.status, 200);
    const baseline = residentKiB(server.child.pid);
    let peak = baseline;
    const sampler = setInterval(() => { peak = Math.max(peak, residentKiB(server.child.pid)); }, 20);

    const client = spawn('python3', ['-c', neverReads, String(server.port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise((resolve) => client.stdout.once('data', resolve));
      const logged = await waitFor(() => fs.readFileSync(server.accessLog, 'utf8').split('\n').filter(Boolean)
        .map((line) => JSON.parse(line)).find((record) => record.request_id === 'never-reads'),
      { timeoutMs: 90000, what: 'the never-reading request to end' });
      clearInterval(sampler);
      assert.equal(logged.status, 503);
      assert.equal(logged.error, 'slow_client');
      // It was cut well before its 16,000 tokens: the backlog was reached, not the end.
      assert.ok(logged.completion_tokens < 12000, `${logged.completion_tokens} tokens generated`);
      const samples = await waitFor(async () => {
        const scraped = await scrape(server.url);
        return metric(scraped, 'chatflow:num_requests_running') === 0 &&
          metric(scraped, 'chatflow:http_open_connections') === 1 ? scraped : undefined;
      }, { what: 'the engine to stop and the connection to close' });
      assert.equal(metric(samples, 'chatflow:http_requests_total', 'status="503"'), 1);
      const grownKiB = peak - baseline;
      console.log(`resident memory grew by ${grownKiB} KiB at most (backlog ${backlogBytes / 1024} KiB)`);
      assertResidentGrowthBelow(grownKiB, 16 * 1024, `resident memory grew by ${grownKiB} KiB`);
    } finally {
      clearInterval(sampler);
      client.kill();
    }
  });
});
