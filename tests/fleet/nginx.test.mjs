// nginx in front of two replicas, with the shipped configs/nginx/chatflow.conf: streams pass token
// by token (the first token reaches the client while the replica is still generating), a client
// that leaves cancels the replica's request, HTTP/2 over TLS reaches the client, the client's
// address (not nginx's) and one request id reach the replica's access log, and a replica that
// dies is routed around. nginx and openssl are Debian's; the test starts its own nginx in a
// temporary prefix on free ports.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { metric, modelPipeline, parseResponse, postBytes, scrape, sourceDir, startServer, waitFor } from '../server/harness.mjs';

const nginxBinary = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => fs.existsSync(file));
const haveOpenssl = spawnSync('openssl', ['version']).status === 0;
const skip = !nginxBinary ? 'nginx is not installed (apt-get install nginx)'
  : !haveOpenssl ? 'openssl is not installed' : false;

const long = {
  model: 'test-model',
  messages: [{ role: 'user', content: 'Tell me a very long story' }],
  max_tokens: 16000,
  ignore_eos: true,
  stream: true,
};

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// The shipped file with this test's addresses; every replaced line must exist, so the test
// notices when the file changes shape.
function adaptedConfig(prefix, replicas, httpPort, tlsPort) {
  let text = fs.readFileSync(path.join(sourceDir, 'configs/nginx/chatflow.conf'), 'utf8');
  const replace = (from, to) => {
    assert.ok(text.includes(from), `configs/nginx/chatflow.conf has '${from}'`);
    text = text.split(from).join(to);
  };
  replace('server 127.0.0.1:8001', `server 127.0.0.1:${replicas[0].port}`);
  replace('server 127.0.0.1:8002', `server 127.0.0.1:${replicas[1].port}`);
  replace('listen 8080;', `listen 127.0.0.1:${httpPort};`);
  replace('listen 8443 ssl http2;', `listen 127.0.0.1:${tlsPort} ssl http2;`);
  replace('/var/log/nginx/chatflow.access.log', path.join(prefix, 'chatflow.access.log'));
  replace('/etc/nginx/ssl/', `${prefix}/`);
  return text;
}

function mainConfig(prefix) {
  const temp = (name) => `${name}_temp_path ${path.join(prefix, 'temp', name)};`;
  return `${process.getuid() === 0 ? 'user root;\n' : ''}worker_processes 1;
pid ${path.join(prefix, 'nginx.pid')};
error_log ${path.join(prefix, 'error.log')} info;
events { worker_connections 256; }
http {
  ${['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(temp).join('\n  ')}
  access_log ${path.join(prefix, 'access.log')};
  include ${path.join(prefix, 'chatflow.conf')};
}
`;
}

// A streaming request from `localAddress` (any 127/8 address is this machine's), with its SSE
// events as they come.
function streamFrom(localAddress, port, body, headers) {
  const extraHeaders = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
  const socket = net.connect({ port, host: '127.0.0.1', localAddress });
  const parts = [];
  socket.on('connect', () => socket.write(postBytes('/v1/chat/completions', JSON.stringify(body), { extraHeaders, close: false })));
  socket.on('data', (data) => parts.push(data));
  socket.on('error', () => {});
  const received = () => Buffer.concat(parts).toString('utf8');
  return { socket, received, events: () => (received().match(/data: /g) || []).length };
}

async function accessLines(file) {
  if (!fs.existsSync(file)) return [];
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

async function running(replica) {
  return metric(await scrape(replica.url), 'chatflow:num_requests_running');
}

describe('nginx in front of two replicas', { skip }, () => {
  let prefix;
  let replicas = [];
  let nginx;
  let httpPort;
  let tlsPort;
  let certificate;

  before(async () => {
    prefix = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-nginx-'));
    fs.mkdirSync(path.join(prefix, 'temp'));
    const pipeline = modelPipeline('nginx-replica');
    for (let i = 0; i < 2; i++) {
      replicas.push(await startServer(['--pipeline', pipeline, '--trusted-proxies', '127.0.0.1/32']));
    }
    [httpPort, tlsPort] = [await freePort(), await freePort()];
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
      '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1',
      '-keyout', path.join(prefix, 'chatflow.key'), '-out', path.join(prefix, 'chatflow.crt')]);
    assert.equal(made.status, 0, `openssl made a certificate: ${made.stderr}`);
    certificate = fs.readFileSync(path.join(prefix, 'chatflow.crt'));
    fs.writeFileSync(path.join(prefix, 'chatflow.conf'), adaptedConfig(prefix, replicas, httpPort, tlsPort));
    fs.writeFileSync(path.join(prefix, 'nginx.conf'), mainConfig(prefix));
    const args = ['-p', prefix, '-c', path.join(prefix, 'nginx.conf')];
    const checked = spawnSync(nginxBinary, ['-t', ...args], { encoding: 'utf8' });
    assert.equal(checked.status, 0, `nginx -t accepts the shipped config:\n${checked.stderr}`);
    nginx = spawn(nginxBinary, [...args, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    nginx.stderr.on('data', (data) => { stderr += data; });
    await waitFor(() => new Promise((resolve) => {
      const probe = net.connect(httpPort, '127.0.0.1');
      probe.on('connect', () => { probe.destroy(); resolve(true); });
      probe.on('error', () => resolve(false));
    }), { what: `nginx to listen (${stderr})` });
  });

  after(async () => {
    if (nginx && nginx.exitCode === null) {
      const exited = new Promise((resolve) => nginx.on('exit', resolve));
      nginx.kill('SIGQUIT');
      await exited;
    }
    for (const replica of replicas) await replica.stop('SIGKILL');
    if (prefix) fs.rmSync(prefix, { recursive: true, force: true });
  });

  test('the first tokens arrive while the replica generates; leaving cancels it; the log sees the client', async () => {
    // The client sends a forged X-Forwarded-For: only what nginx saw (127.0.0.2) counts.
    const stream = streamFrom('127.0.0.2', httpPort, long, { 'X-Forwarded-For': '6.6.6.6', 'X-Request-Id': 'nginx-test-1' });
    await waitFor(() => stream.events() >= 3, { what: 'three events through nginx', timeoutMs: 20000 });
    const busy = (await running(replicas[0])) + (await running(replicas[1]));
    assert.equal(busy, 1, 'the replica is still generating when the client has its first tokens');
    const head = stream.received().split('\r\n\r\n')[0];
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.equal((head.match(/^x-request-id: nginx-test-1$/gim) || []).length, 1, head);
    assert.match(head, /content-type: text\/event-stream/i);

    stream.socket.destroy();
    await waitFor(async () => (await running(replicas[0])) + (await running(replicas[1])) === 0,
      { what: 'the replica to cancel the request nginx dropped' });
    const line = await waitFor(async () => {
      for (const replica of replicas) {
        const found = (await accessLines(replica.accessLog)).find((record) => record.request_id === 'nginx-test-1');
        if (found) return found;
      }
      return undefined;
    }, { what: 'the access log line of nginx-test-1' });
    assert.equal(line.remote, '127.0.0.2');
    assert.match(line.peer, /^127\.0\.0\.1:\d+$/);
    assert.equal(line.scheme, 'http');
    assert.equal(line.status, 499);
    assert.ok(line.completion_tokens < long.max_tokens, `stopped early (${line.completion_tokens} tokens)`);
  });

  test('a client straight to a replica cannot forge its address', async () => {
    const socket = net.connect({ port: replicas[0].port, host: '127.0.0.1', localAddress: '127.0.0.3' });
    const parts = [];
    await new Promise((resolve, reject) => {
      socket.on('connect', () => socket.write(postBytes('/v1/chat/completions',
        JSON.stringify({ ...long, stream: false, max_tokens: 2 }),
        { extraHeaders: 'X-Forwarded-For: 6.6.6.6\r\nX-Request-Id: direct-1\r\n' })));
      socket.on('data', (data) => parts.push(data));
      socket.on('end', resolve);
      socket.on('error', reject);
    });
    const response = parseResponse(Buffer.concat(parts));
    assert.equal(response.status, 200);
    assert.equal(response.headers['x-request-id'], 'direct-1');
    const line = await waitFor(async () => (await accessLines(replicas[0].accessLog)).find((record) => record.request_id === 'direct-1'),
      { what: 'the access log line of direct-1' });
    assert.match(line.remote, /^127\.0\.0\.3:\d+$/);
    assert.equal(line.peer, undefined);
  });

  test('HTTP/2 over TLS to the client, with an id nginx made', async () => {
    const session = http2.connect(`https://127.0.0.1:${tlsPort}`, { ca: certificate });
    try {
      const request = session.request({
        ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json',
      });
      request.end(JSON.stringify({ ...long, max_tokens: 8 }));
      const [headers, body] = await new Promise((resolve, reject) => {
        let responseHeaders;
        let text = '';
        request.on('response', (received) => { responseHeaders = received; });
        request.setEncoding('utf8');
        request.on('data', (chunk) => { text += chunk; });
        request.on('end', () => resolve([responseHeaders, text]));
        request.on('error', reject);
      });
      assert.equal(headers[':status'], 200);
      assert.match(headers['content-type'], /text\/event-stream/);
      assert.match(headers['x-request-id'], /^[0-9a-f]{32}$/);
      assert.match(body, /data: \[DONE\]/);
      assert.equal((body.match(/"content":/g) || []).length >= 1, true, body);
      const line = await waitFor(async () => {
        for (const replica of replicas) {
          const found = (await accessLines(replica.accessLog)).find((record) => record.request_id === headers['x-request-id']);
          if (found) return found;
        }
        return undefined;
      }, { what: 'the access log line of the HTTP/2 request' });
      assert.equal(line.scheme, 'https');
      assert.equal(line.remote, '127.0.0.1');
      assert.equal(line.status, 200);
    } finally {
      session.close();
    }
  });

  test('a replica killed: new requests go to the other one, none fails', async () => {
    await replicas[1].stop('SIGKILL');
    const statuses = [];
    for (let i = 0; i < 6; i++) {
      const response = await fetch(`http://127.0.0.1:${httpPort}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...long, stream: false, max_tokens: 3 }),
      });
      statuses.push(response.status);
      await response.arrayBuffer();
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 200]);
  });
});
