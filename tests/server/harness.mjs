// Runs `chatflow serve` as a user would and talks to it over loopback: spawn, wait for the
// ready line, raw HTTP over sockets, SSE and Prometheus parsing, signals.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const chatflow = process.env.CHATFLOW_BIN;
export const sourceDir = process.env.CHATFLOW_SOURCE_DIR;
// A random-weight model written by `chatflow make-model` in the test fixture.
export const testModel = process.env.CHATFLOW_TEST_MODEL;

if (!chatflow || !sourceDir || !testModel) {
  throw new Error('run through ctest: CHATFLOW_BIN, CHATFLOW_SOURCE_DIR and CHATFLOW_TEST_MODEL must be set');
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-server-test-'));
process.on('exit', () => fs.rmSync(scratch, { recursive: true, force: true }));

export function writeTemp(name, text) {
  const file = path.join(scratch, name);
  fs.writeFileSync(file, text);
  return file;
}

// The four model stages over the resource `llm`, as YAML list items.
export const modelStages = `  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
`;

// A pipeline with API keys from `keys`, session history in the SQLite file `database` trimmed to
// 2,000 tokens, and the model stages; `extra` is more top-level YAML.
export function sessionPipeline(name, keys, database, extra = '') {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
${extra}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: sqlite, path: "${database}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

// The test model behind the gates every protocol must pass (auth with the keys in `keysFile`, a
// rate limit of 600 per minute, input moderation blocking the words listed in `blocklist`), for
// the tests of each wire format through the same pipeline.
export function gatedModelPipeline(name, keysFile, blocklist) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: limits, type: rate_limit, config: {rpm: 600}}
  - name: screen
    type: input_moderation
    config:
      lists: {${blocklist}: block}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

// The JSON schema of the tool-call tests' weather tool's arguments: a short city and a unit.
export const weatherArguments = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 12 },
    unit: { enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};

// The model pipeline of graphs/minimal.yaml over the test model, with `extra` top-level YAML.
export function modelPipeline(name, extra = '') {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
${extra}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
${modelStages}  - {name: emit, type: sse_emit}
`);
}

// Starts the server; resolves once it printed its URL. `args` go after `serve`. With
// `fileLimit`, the server runs under `ulimit -n` of that many open files; with
// `fileSizeBlocks`, no file it writes may grow past that many 512-byte blocks (a full disk,
// with SIGXFSZ ignored so writes fail instead). Without `--access-log` in `args` the log goes to
// a scratch file (`accessLog`), unless `serveFileAccessLog` leaves it to the serve file.
export async function startServer(args, { fileLimit, fileSizeBlocks, serveFileAccessLog = false } = {}) {
  const accessLog = path.join(scratch, `access-${process.pid}-${Math.random().toString(16).slice(2)}.log`);
  const logArgs = args.includes('--access-log') || serveFileAccessLog ? [] : ['--access-log', accessLog];
  const serveArgs = ['serve', '--port', '0', ...logArgs, ...args];
  const limits = [];
  if (fileLimit) limits.push(`ulimit -n ${fileLimit}`);
  if (fileSizeBlocks) limits.push("trap '' XFSZ", `ulimit -f ${fileSizeBlocks}`);
  const [command, commandArgs] = limits.length
    ? ['/bin/sh', ['-c', `${limits.join(' && ')} && exec "$0" "$@"`, chatflow, ...serveArgs]]
    : [chatflow, serveArgs];
  const child = spawn(command, commandArgs, {
    cwd: sourceDir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (data) => { stderr += data; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    // A sanitizer report or a crash is only visible here.
    if (code !== 0) console.log(`chatflow serve exited with ${code ?? signal}; its standard error:\n${stderr}`);
    resolve({ code, signal });
  }));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start in 30 s:\n${stdout}\n${stderr}`)), 30000);
    child.stdout.on('data', (data) => {
      stdout += data;
      const match = /at (https?:\/\/[^ ]+)\/v1/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code}) before it was ready:\n${stdout}\n${stderr}`));
    });
  });
  const port = Number(new URL(url).port);
  return {
    url,
    port,
    child,
    accessLog,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

// Sends `bytes` on a fresh connection and resolves with everything received until the server
// closes it (send `Connection: close`).
export function rawExchange(port, bytes, timeoutMs = 20000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const parts = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within ${timeoutMs} ms; got:\n${Buffer.concat(parts).toString()}`));
    }, timeoutMs);
    socket.on('data', (data) => parts.push(data));
    socket.on('error', (error) => {
      // A reset after the response arrived is still an answer.
      clearTimeout(timer);
      if (parts.length) resolve(Buffer.concat(parts));
      else reject(error);
    });
    socket.on('end', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(parts));
    });
    socket.on('connect', () => socket.write(bytes));
  });
}

export function postBytes(path, body, { contentType = 'application/json', close = true, extraHeaders = '' } = {}) {
  const payload = Buffer.isBuffer(body) ? body : Buffer.from(body);
  const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
    (contentType ? `Content-Type: ${contentType}\r\n` : '') +
    `Content-Length: ${payload.length}\r\n${extraHeaders}${close ? 'Connection: close\r\n' : ''}\r\n`;
  return Buffer.concat([Buffer.from(head), payload]);
}

// Splits one HTTP/1.1 response; a chunked body is checked frame by frame and joined.
export function parseResponse(buffer) {
  const text = buffer.toString('latin1');
  const split = text.indexOf('\r\n\r\n');
  if (split < 0) throw new Error(`no header end in: ${text.slice(0, 200)}`);
  const lines = text.slice(0, split).split('\r\n');
  const [, status] = /^HTTP\/1\.1 (\d{3}) /.exec(lines[0]) || [];
  if (!status) throw new Error(`bad status line: ${lines[0]}`);
  const headers = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  let rest = buffer.subarray(Buffer.byteLength(text.slice(0, split + 4), 'latin1'));
  let body;
  if (headers['transfer-encoding'] === 'chunked') {
    const pieces = [];
    for (;;) {
      const end = rest.indexOf('\r\n');
      if (end < 0) throw new Error('truncated chunk size');
      const size = parseInt(rest.subarray(0, end).toString(), 16);
      if (Number.isNaN(size)) throw new Error(`bad chunk size line: ${rest.subarray(0, end)}`);
      const data = rest.subarray(end + 2, end + 2 + size);
      if (data.length !== size || rest.subarray(end + 2 + size, end + 4 + size).toString() !== '\r\n') {
        throw new Error('a chunk is shorter than its size or lacks its CRLF');
      }
      rest = rest.subarray(end + 4 + size);
      if (size === 0) break;
      pieces.push(data);
    }
    body = Buffer.concat(pieces);
  } else {
    body = rest.subarray(0, Number(headers['content-length'] ?? rest.length));
  }
  return { status: Number(status), headers, headerLines: lines, body: body.toString('utf8') };
}

// The data payloads of an SSE body, in order.
export function sseData(body) {
  if (!body.endsWith('\n\n')) throw new Error(`an SSE body must end with a blank line: ${JSON.stringify(body.slice(-80))}`);
  return body.slice(0, -2).split('\n\n').map((event) => {
    if (!event.startsWith('data: ') || event.includes('\n')) throw new Error(`not a one-line data event: ${JSON.stringify(event)}`);
    return event.slice(6);
  });
}

export async function getJson(url, pathname) {
  const response = await fetch(url + pathname);
  return { status: response.status, body: await response.json(), headers: response.headers };
}

export async function postJson(url, pathname, body) {
  const response = await fetch(url + pathname, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, headers: response.headers, text, json };
}

// Prometheus text → { 'name{labels}': value } (labels as written).
export async function scrape(url) {
  const response = await fetch(url + '/metrics');
  const text = await response.text();
  const samples = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    samples[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return samples;
}

// The sum of every sample of `name` whose labels contain all of `labels` ('k="v"' strings).
export function metric(samples, name, ...labels) {
  let total = 0;
  let found = false;
  for (const [key, value] of Object.entries(samples)) {
    const brace = key.indexOf('{');
    const base = brace < 0 ? key : key.slice(0, brace);
    if (base !== name) continue;
    if (labels.every((label) => key.includes(label))) {
      total += value;
      found = true;
    }
  }
  return found ? total : undefined;
}

export async function waitFor(check, { timeoutMs = 10000, intervalMs = 20, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last) return last;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

// Opens a streaming request and reads SSE events as they come. `events()` is everything so far;
// `waitEvents(n)` resolves once n data events arrived; `ended` resolves with the parsed
// response once the server finished it.
export function openStream(port, path, body, headers = {}) {
  const extraHeaders = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
  const socket = net.connect(port, '127.0.0.1');
  const parts = [];
  let listeners = [];
  const notify = () => { for (const listener of listeners) listener(); };
  socket.on('data', (data) => { parts.push(data); notify(); });
  const ended = new Promise((resolve, reject) => {
    socket.on('end', () => resolve(parseResponse(Buffer.concat(parts))));
    socket.on('error', reject);
  });
  socket.on('connect', () => socket.write(postBytes(path, JSON.stringify(body), { extraHeaders })));
  const received = () => Buffer.concat(parts).toString('utf8');
  const countEvents = () => (received().match(/data: /g) || []).length;
  return {
    socket,
    ended,
    received,
    waitEvents(n, timeoutMs = 20000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`fewer than ${n} events in ${timeoutMs} ms: ${received()}`)), timeoutMs);
        const check = () => {
          if (countEvents() >= n) {
            clearTimeout(timer);
            listeners = listeners.filter((listener) => listener !== check);
            resolve();
          }
        };
        listeners.push(check);
        check();
      });
    },
  };
}

export function residentKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]);
}

// Asserts a bound on how much the server's resident memory grew. Under a sanitizer
// (CHATFLOW_SANITIZER, set by the sanitizer builds) resident memory is no measure of what the
// server holds: AddressSanitizer keeps freed blocks in a quarantine of up to 256 MiB and both
// sanitizers add shadow memory, so there the bound is reported as not checked.
export function assertResidentGrowthBelow(grownKiB, boundKiB, message) {
  if (process.env.CHATFLOW_SANITIZER) {
    console.log(`not checked under ${process.env.CHATFLOW_SANITIZER}: ${message} (bound ${boundKiB} KiB)`);
    return;
  }
  assert.ok(grownKiB < boundKiB, message);
}

// A new API key from `chatflow keys add` (the key is printed once, on standard output).
export function addKey(keysFile, tenant, { user = '', roles = [], rpm, tpm } = {}) {
  const args = ['keys', 'add', '--tenant', tenant, '--keys-file', keysFile];
  if (user) args.push('--user', user);
  for (const role of roles) args.push('--role', role);
  if (rpm) args.push('--rpm', String(rpm));
  if (tpm) args.push('--tpm', String(tpm));
  const result = spawnSync(chatflow, args, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`keys add failed: ${result.stderr}`);
  return result.stdout.trim();
}

export function runChatflow(args) {
  return spawnSync(chatflow, args, { encoding: 'utf8', cwd: sourceDir });
}

// An HS256 JSON Web Token.
export function jwtHs256(claims, secret, header = { alg: 'HS256', typ: 'JWT' }) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const signed = `${encode(header)}.${encode(claims)}`;
  const signature = createHmac('sha256', secret).update(signed).digest('base64url');
  return `${signed}.${signature}`;
}

export function scratchPath(name) {
  return path.join(scratch, name);
}

// POST with headers; returns status, headers, parsed JSON (if any) and text.
export async function post(url, pathname, body, headers = {}) {
  const response = await fetch(url + pathname, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, headers: response.headers, text, json };
}
