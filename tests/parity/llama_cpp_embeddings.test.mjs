// chatflow's /v1/embeddings against llama.cpp b4748's llama-embedding on the same make-model
// files: bert (mean pooling from the file, and cls), nomic-bert (mean), and llama and qwen2 decoders with mean and
// last-token pooling. Every vector must be within 1e-3 cosine of llama.cpp's (cosine >= 0.999),
// for a batch of texts sent in one request. Needs LLAMA_CPP_BIN; skips without it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { sourceDir, startServer, writeTemp } from '../server/harness.mjs';

const bin = process.env.LLAMA_CPP_BIN;
const chatflow = process.env.CHATFLOW_BIN;
const skip = !bin ? 'LLAMA_CPP_BIN is not set (llama.cpp b4748 bin folder with llama-embedding)' : false;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-embeddings-parity-'));
after(() => fs.rmSync(work, { recursive: true, force: true }));

function run(program, args) {
  const result = spawnSync(program, args, { encoding: 'utf8', maxBuffer: 1 << 28 });
  assert.equal(result.status, 0, `${path.basename(program)} ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`.slice(-4000));
  return result.stdout;
}

// llama.cpp's own vocabulary-only file of bge's WordPiece tokenizer (30522 pieces), in ../shared.
const bgeVocab = path.join(sourceDir, '..', 'shared', 'models', 'vocab', 'ggml-vocab-bert-bge.gguf');

const texts = [
  'Hello, world!',
  'the weather in Paris is rainy',
  'embedding tokenizer model vector',
  'a cat and a dog',
  "Don't panic: naïve café-owners' résumés (2024) — 東京 unaffordable!",
];

const shape = ['--dim', '128', '--heads', '4', '--layers', '2', '--ffn', '256', '--context', '256'];
const models = [
  { name: 'bert_mean', args: ['--arch', 'bert', ...shape] },
  { name: 'bert_cls', args: ['--arch', 'bert', '--pooling', 'cls', ...shape], seed: '2' },
  { name: 'nomic_bert_mean', args: ['--arch', 'nomic-bert', ...shape], seed: '3' },
  // Quantised weights: llama.cpp also rounds the activations to 8 bits for q8_0 products.
  { name: 'bert_q8_0', args: ['--arch', 'bert', '--type', 'q8_0', ...shape], seed: '5' },
  { name: 'nomic_bert_f16', args: ['--arch', 'nomic-bert', '--type', 'f16', ...shape], seed: '6' },
  { name: 'llama_mean_q4_k_m', args: ['--arch', 'llama', '--kv-heads', '2', '--pooling', 'mean', '--type', 'q4_k_m', ...shape.slice(0, -2), '--context', '256'], pooling: 'mean', seed: '7' },
  ...(fs.existsSync(bgeVocab)
    ? [{ name: 'bert_bge_vocab', args: ['--arch', 'bert', '--vocab-from', bgeVocab, ...shape], seed: '4' }]
    : []),
  { name: 'llama_mean', args: ['--arch', 'llama', '--kv-heads', '2', '--pooling', 'mean', ...shape], pooling: 'mean' },
  { name: 'llama_last', args: ['--arch', 'llama', '--kv-heads', '2', '--pooling', 'last', ...shape], pooling: 'last' },
  { name: 'qwen2_mean', args: ['--arch', 'qwen2', '--kv-heads', '2', '--pooling', 'mean', ...shape], pooling: 'mean' },
];

function llamaEmbeddings(model, pooling) {
  const args = ['-m', model, '-c', '256', '-t', '1', '--embd-output-format', 'json', '-p', texts.join('\n')];
  if (pooling) args.push('--pooling', pooling);
  const out = run(path.join(bin, 'llama-embedding'), args);
  return JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)).data.map((item) => item.embedding);
}

const norm = (v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
const cosine = (a, b) => a.reduce((sum, x, i) => sum + x * b[i], 0) / (norm(a) * norm(b));

describe('/v1/embeddings against llama-embedding on make-model files', { skip }, () => {
  let server;
  before(async () => {
    let resources = '';
    for (const model of models) {
      model.file = path.join(work, `${model.name}.gguf`);
      run(chatflow, ['make-model', ...model.args, '--seed', model.seed ?? '1', '-o', model.file]);
      resources += `  ${model.name}: {type: embedding_model, path: "${model.file}"}\n`;
    }
    const pipeline = writeTemp('embeddings-parity.yaml',
      `version: 1\nname: embeddings-parity\nresources:\n${resources}stages:\n  - {name: echo, type: echo}\n`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => { if (server) await server.stop(); });

  for (const model of models) {
    test(`${model.name}: every vector of a batch within 1e-3 cosine of llama.cpp's`, async () => {
      const expected = llamaEmbeddings(model.file, model.pooling);
      const response = await fetch(`${server.url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: model.name, input: texts, encoding_format: 'float' }),
      });
      const body = await response.json();
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.equal(body.data.length, texts.length);
      const cosines = body.data.map((item, i) => cosine(item.embedding, expected[i]));
      console.log(`${model.name}: 1 - cosine ${cosines.map((c) => (1 - c).toExponential(1)).join(' ')}`);
      for (const [i, c] of cosines.entries()) assert.ok(c >= 0.999, `${model.name} text ${i}: cosine ${c}`);
    });
  }
});
