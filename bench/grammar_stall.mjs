// One structured-output request beside another user's stream, measured from outside:
//   node bench/grammar_stall.mjs [CHATFLOW_BIN] [VOCABULARY.gguf | builtin]
// (defaults: build/chatflow, ../shared/models/vocab/ggml-vocab-llama-spm.gguf, 32k tokens;
// builtin: make-model's own small vocabulary).
// A tiny random-weight model with that vocabulary serves a free stream (ignore_eos) while a
// second client sends each heavy response_format below; the free stream's chunks per second are
// counted before, during and after it, with the heavy request's status and time, and the
// server's resident memory. Run it with an old build and a new one to compare.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const chatflow = path.resolve(process.argv[2] ?? 'build/chatflow');
const vocabularyArgument = process.argv[3] ?? '../shared/models/vocab/ggml-vocab-llama-spm.gguf';
const vocabulary = vocabularyArgument === 'builtin' ? null : path.resolve(vocabularyArgument);
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'grammar-stall-'));
process.on('exit', () => fs.rmSync(scratch, { recursive: true, force: true }));

const model = path.join(scratch, 'model.gguf');
const made = spawnSync(chatflow, ['make-model', '--dim', '64', '--layers', '2', '--heads', '4', '--ffn', '128',
  '--context', '16384', ...(vocabulary ? ['--vocab-from', vocabulary] : []), '-o', model], { encoding: 'utf8' });
if (made.status !== 0) throw new Error(`make-model failed: ${made.stderr}`);
const pipeline = path.join(scratch, 'pipeline.yaml');
fs.writeFileSync(pipeline, `version: 1
name: grammar-stall
resources:
  llm: {type: gguf_model, path: "${model}", name: m, threads: 1}
stages:
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);

async function serve() {
  const child = spawn(chatflow, ['serve', '--port', '0', '--access-log', 'off', '--pipeline', pipeline],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const url = await new Promise((resolve, reject) => {
    child.stdout.on('data', (data) => {
      out += data;
      const match = /at (http:\/\/[^ ]+)\/v1/.exec(out);
      if (match) resolve(match[1]);
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  return { child, url };
}

function residentMiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) / 1024;
}

// The free stream: one answer after another (4,000 tokens each, so its context stays short), its
// chunks counted as they come.
function freeStream(url, signal) {
  const times = [];
  const done = (async () => {
    while (!signal.aborted) {
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, signal,
        body: JSON.stringify({ model: 'm', stream: true, ignore_eos: true, max_tokens: 4000, seed: 1,
          messages: [{ role: 'user', content: 'tell me everything' }] }),
      });
      const reader = response.body.getReader();
      for (;;) {
        const { value, done: finished } = await reader.read();
        if (finished) break;
        const text = Buffer.from(value).toString();
        for (const line of text.split('\n')) if (line.startsWith('data: {')) times.push(performance.now());
      }
    }
  })().catch(() => {});
  return { times, done };
}

function rate(times, from, to) {
  return times.filter((t) => t >= from && t < to).length / ((to - from) / 1000);
}

async function heavy(url, schema, { abortAfterMs } = {}) {
  const controller = new AbortController();
  const start = performance.now();
  // A client that gives up after a minute, if the test did not already leave.
  const timer = setTimeout(() => controller.abort(), abortAfterMs ?? 60000);
  let status = abortAfterMs ? 'left' : 'no answer in 60 s';
  let bytes = 0;
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify({ model: 'm', stream: true, max_tokens: 200, seed: 3, ignore_eos: !schema,
        messages: [{ role: 'user', content: 'x' }],
        ...(schema ? { response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } } : {}) }),
    });
    status = response.status;
    const text = await response.text();
    bytes = text.length;
    if (text.includes('"error"')) status += ` ${JSON.parse(text.split('\n').find((l) => l.includes('"error"')).replace(/^data: /, '')).error.message.slice(0, 90)}`;
  } catch { /* aborted by us */ }
  clearTimeout(timer);
  return { status, seconds: (performance.now() - start) / 1000, bytes };
}

const patterns = (count, pattern) => ({ anyOf: Array.from({ length: count }, (_, i) =>
  ({ type: 'string', pattern: typeof pattern === 'function' ? pattern(i) : pattern })) });
const cases = [
  ['no response_format (a control: what any second sequence costs)', null, {}],
  ['anyOf of 50 ".{0,1000}" (the probe\'s)', patterns(50, '.{0,1000}'), {}],
  ['anyOf of 50 "x.{0,9xx}", distinct', patterns(50, (i) => `x.{0,${900 + i}}`), {}],
  ['anyOf of 8 "[a-y]{0,300}z", distinct', patterns(8, (i) => `^[a-${String.fromCharCode(120 - i)}]{0,300}z$`), {}],
  ['anyOf of 50 ".{0,999}" (a new key), client leaves after 1 s', patterns(50, '.{0,999}'), { abortAfterMs: 1000 }],
];

const { child, url } = await serve();
const controller = new AbortController();
const stream = freeStream(url, controller.signal);
await new Promise((r) => setTimeout(r, 5000));
let now = performance.now();
console.log(`free stream alone: ${rate(stream.times, now - 3000, now).toFixed(0)} chunks/s, ` +
  `server ${residentMiB(child.pid).toFixed(0)} MiB`);
for (const [name, schema, options] of cases) {
  const start = performance.now();
  const result = await heavy(url, schema, options);
  const end = performance.now();
  await new Promise((r) => setTimeout(r, 2000));
  now = performance.now();
  console.log(`${name}: ${result.status} in ${result.seconds.toFixed(2)} s (${result.bytes} bytes); ` +
    `free stream ${rate(stream.times, start, Math.max(end, start + 1)).toFixed(0)} chunks/s during, ` +
    `${rate(stream.times, now - 2000, now).toFixed(0)} in the 2 s after; server ` +
    `${residentMiB(child.pid).toFixed(0)} MiB`);
}
controller.abort();
child.kill('SIGKILL');
process.exit(0);
