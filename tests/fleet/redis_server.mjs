// A real redis-server for the fleet tests: on a free loopback port, in a temporary directory,
// saving nothing (`--save '' --appendonly no`), stopped at the end. `stop()` and `start()` take
// it away and bring it back, empty, on the same port. With `tls` it speaks only TLS on its port
// (rediss://localhost:port).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';

// The redis-server to run (REDIS_SERVER, else the one on PATH), or undefined when there is none.
export function redisServerBinary() {
  if (process.env.REDIS_SERVER) return process.env.REDIS_SERVER;
  const found = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : undefined;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// Resolves true once something on `port` answers PING with PONG (over TLS with `certificates`,
// when given).
function pong(port, certificates) {
  return new Promise((resolve) => {
    const socket = certificates
      ? tls.connect({
        port, host: '127.0.0.1', servername: 'localhost', ca: fs.readFileSync(certificates.ca),
        ...(certificates.clientCertificate
          ? { cert: fs.readFileSync(certificates.clientCertificate), key: fs.readFileSync(certificates.clientKey) } : {}),
      })
      : net.connect(port, '127.0.0.1');
    let reply = '';
    socket.setTimeout(500, () => { socket.destroy(); resolve(false); });
    socket.on('error', () => resolve(false));
    socket.on(certificates ? 'secureConnect' : 'connect', () => socket.write('PING\r\n'));
    socket.on('data', (data) => {
      reply += data;
      if (reply.includes('\r\n')) {
        socket.destroy();
        resolve(reply.startsWith('+PONG'));
      }
    });
  });
}

// `tls`: {certificate, key, ca} (the server's, and the CA it trusts for clients), with
// `requireClientCertificates` and the client certificate the readiness check then presents
// (`clientCertificate`, `clientKey`).
export async function startRedis({ tls: certificates } = {}) {
  const binary = redisServerBinary();
  if (!binary) throw new Error('redis-server is not installed');
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-fleet-redis-'));
  const port = await freePort();
  let child;
  let exited;
  process.on('exit', () => { if (child && child.exitCode === null) child.kill('SIGKILL'); });
  const redis = {
    port,
    url: certificates ? `rediss://localhost:${port}` : `redis://127.0.0.1:${port}`,
    async start() {
      const listen = certificates
        ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', certificates.certificate,
          '--tls-key-file', certificates.key, '--tls-ca-cert-file', certificates.ca,
          '--tls-auth-clients', certificates.requireClientCertificates ? 'yes' : 'no']
        : ['--port', String(port)];
      child = spawn(binary, [...listen, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
        '--dir', directory, '--logfile', path.join(directory, 'redis.log')], { stdio: 'ignore' });
      exited = new Promise((resolve) => child.on('exit', resolve));
      const deadline = Date.now() + 10000;
      while (Date.now() < deadline) {
        if (await pong(port, certificates)) return;
        if (child.exitCode !== null) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      throw new Error(`redis-server did not start on port ${port}: ${fs.existsSync(path.join(directory, 'redis.log'))
        ? fs.readFileSync(path.join(directory, 'redis.log'), 'utf8') : ''}`);
    },
    async stop() {
      if (child && child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
    },
    async close() {
      await redis.stop();
      fs.rmSync(directory, { recursive: true, force: true });
    },
  };
  await redis.start();
  return redis;
}
