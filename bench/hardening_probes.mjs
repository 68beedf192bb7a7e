// The figures behind the hardening work, measured from outside as a client would:
//   node bench/hardening_probes.mjs [CHATFLOW_BIN]   (default build/chatflow)
// Run it once with an old build and once with a new one to compare. It prints:
//   - how many answers a smuggled request (Transfer-Encoding: identity + a request as its body)
//     gets on one connection (1 when the framing is refused, 2 when the body ran);
//   - seconds to stream echo answers of 40,000 and 160,000 chunks;
//   - /health latency p50/p99/max idle, beside two anonymous clients posting 4 MB bodies, and
//     beside an authenticated caller sending 3.5 MB /tokenize requests;
//     and beside 0.9 MB ones (under the cap); how many refusals/s one 4 MB poster gets;
//   - seconds for `chatflow validate` on a pipeline whose moderation list has 2,000 phrases.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const loadMode = process.argv[2] === '--load';  // a load generator this script starts
const port = loadMode ? Number(process.argv[4]) : 18800 + Math.floor(Math.random() * 100);

function exchange(bytes, timeoutMs = 300000) {
  return new Promise((resolve) => {
    const chunks = [];
    // No half-close after the request: it is the server's close that ends each exchange.
    const socket = net.connect(port, '127.0.0.1', () => socket.write(bytes));
    socket.setTimeout(timeoutMs, () => socket.destroy());
    socket.on('data', (data) => chunks.push(data));
    socket.on('error', () => {});
    socket.on('close', () => resolve(Buffer.concat(chunks)));
  });
}

function post(target, body, headers = '') {
  return Buffer.concat([Buffer.from(`POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Connection: close\r\n${headers}Content-Length: ${body.length}\r\n\r\n`), body]);
}

async function serve(pipeline) {
  const child = spawn(chatflow, ['serve', '--port', String(port), '--access-log', 'off', '--pipeline', pipeline],
    { stdio: 'ignore' });
  for (let i = 0; i < 400; i++) {
    const up = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true); });
      socket.on('error', () => resolve(false));
    });
    if (up) return child;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${chatflow} serve did not start`);
}

async function stop(child) {
  child.kill('SIGTERM');
  await new Promise((resolve) => child.on('exit', resolve));
}

async function healthLatency(seconds = 3) {
  const times = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const start = performance.now();
    await exchange(Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    times.push(performance.now() - start);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  times.sort((a, b) => a - b);
  const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))].toFixed(2);
  return `p50 ${at(0.5)} / p99 ${at(0.99)} / max ${times[times.length - 1].toFixed(2)} ms`;
}

const big = Buffer.from(JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'x'.repeat(4000000) }] }));
const text = Buffer.from(JSON.stringify({ prompt: 'the quick brown fox '.repeat(175000) }));
const smallText = Buffer.from(JSON.stringify({ prompt: 'the quick brown fox '.repeat(45000) }));
const loads = {
  anonymous: () => exchange(post('/v1/chat/completions', big), 10000),
  tokenize: (key) => exchange(post('/tokenize', text, `Authorization: Bearer ${key}\r\n`), 30000),
  // Under the 1 MiB cap: tokenized, off the I/O threads.
  tokenize_small: (key) => exchange(post('/tokenize', smallText, `Authorization: Bearer ${key}\r\n`), 30000),
};

if (loadMode) {
  const [kind, , key] = process.argv.slice(3);
  for (;;) await loads[kind](key);
}

// /health latency while `copies` processes run a load in a loop (processes of their own, so
// the load's client work does not delay this one's).
async function healthBeside(kind, copies, key = '') {
  const children = Array.from({ length: copies }, () =>
    spawn(process.execPath, [new URL(import.meta.url).pathname, '--load', kind, String(port), key], { stdio: 'ignore' }));
  await new Promise((resolve) => setTimeout(resolve, 500));
  const figure = await healthLatency();
  for (const child of children) child.kill('SIGKILL');
  return figure;
}

const chatflow = path.resolve(process.argv[2] ?? 'build/chatflow');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-probes-'));
const echo = path.join(work, 'echo.yaml');
fs.writeFileSync(echo, 'version: 1\nname: echo\nstages:\n  - {name: echo, type: echo}\n');
let server = await serve(echo);
const smuggled = await exchange(Buffer.from('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
  'Transfer-Encoding: identity\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n'), 5000);
console.log(`smuggling: answers on one connection = ${(smuggled.toString('latin1').match(/HTTP\/1\.1 \d{3}/g) ?? []).length}`);
for (const words of [40000, 160000]) {
  const body = Buffer.from(JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'w '.repeat(words) }] }));
  const start = performance.now();
  const answer = await exchange(post('/v1/chat/completions', body));
  console.log(`echo of ${words} chunks streamed in ${((performance.now() - start) / 1000).toFixed(2)} s (${answer.length} bytes)`);
}
await stop(server);

const keys = path.join(work, 'keys.yaml');
const added = spawnSync(chatflow, ['keys', 'add', '--tenant', 'acme', '--user', 'u1', '--keys-file', keys], { encoding: 'utf8' });
const key = added.stdout.match(/cf-[0-9a-f]+/)?.[0];
if (!key) throw new Error(`keys add printed no key: ${added.stdout}${added.stderr}`);
const authEcho = path.join(work, 'auth-echo.yaml');
// A model beside the echo stage gives /tokenize a tokenizer to run.
const model = path.join(work, 'model.gguf');
spawnSync(chatflow, ['make-model', '--dim', '64', '--layers', '1', '--heads', '2', '--ffn', '128', '-o', model]);
fs.writeFileSync(authEcho, `version: 1\nname: echo\nresources:\n  llm: {type: gguf_model, path: ${model}, name: echo}\n` +
  `stages:\n  - {name: auth, type: auth, config: {keys_file: ${keys}}}\n  - {name: echo, type: echo}\n`);
server = await serve(authEcho);
console.log(`/health idle: ${await healthLatency()}`);
console.log(`/health beside 2 anonymous 4 MB posters: ${await healthBeside('anonymous', 2)}`);
console.log(`/health beside 3.5 MB /tokenize calls: ${await healthBeside('tokenize', 1, key)}`);
const tokenized = await exchange(post('/tokenize', text, `Authorization: Bearer ${key}\r\n`), 60000);
console.log(`  (a 3.5 MB /tokenize answers ${tokenized.subarray(9, 12).toString()})`);
console.log(`/health beside 0.9 MB /tokenize calls: ${await healthBeside('tokenize_small', 1, key)}`);
// How often an anonymous 4 MB poster is answered: a server that refuses sooner is sent more.
const posted = performance.now();
let answered = 0;
while (performance.now() - posted < 3000) { await loads.anonymous(); answered += 1; }
console.log(`one anonymous 4 MB poster alone: ${(answered / 3).toFixed(1)} refusals/s`);
await stop(server);

const phrases = path.join(work, 'phrases.txt');
fs.writeFileSync(phrases, Array.from({ length: 2000 }, (_, i) => `forbidden phrase number ${i} of the list`).join('\n'));
const moderated = path.join(work, 'moderated.yaml');
fs.writeFileSync(moderated, `version: 1\nname: echo\nstages:\n  - {name: screen, type: input_moderation, config: {lists: {${phrases}: block}}}\n  - {name: echo, type: echo}\n`);
const start = performance.now();
const validated = spawnSync(chatflow, ['validate', moderated], { encoding: 'utf8' });
console.log(`validate with a 2,000-phrase list: ${((performance.now() - start) / 1000).toFixed(2)} s (exit ${validated.status})`);
fs.rmSync(work, { recursive: true, force: true });
