// chatflow against llama.cpp (b4748) on the same files: its perplexity on files llama-quantize
// wrote, llama.cpp's perplexity on files chatflow quantize wrote, and each tensor's
// quantisation error. Needs LLAMA_CPP_BIN (llama.cpp's bin folder: llama-quantize,
// llama-perplexity); skips without it. Models are chatflow make-model files with small random
// weights (--weight-scale 0.02: a calm model whose perplexity moves little with rounding, so a
// difference means different arithmetic, not chaos), in two shapes: rows that are multiples of
// 256, and a qwen2 one whose 896- and 2432-value rows force the recipes' fallbacks.
// Use a llama.cpp built without AMX (cmake -DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON
// -DGGML_AVX_VNNI=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON): its AMX kernels quantise the
// activations their own way, and on the qwen2 q4_1 file its two builds differ by 0.6%
// (38692.6 with AMX, 38930.1 without; chatflow 38921.8).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const bin = process.env.LLAMA_CPP_BIN;
const chatflow = process.env.CHATFLOW_BIN;
const sourceDir = process.env.CHATFLOW_SOURCE_DIR;
const skip = !bin ? 'LLAMA_CPP_BIN is not set (llama.cpp b4748 bin folder with llama-quantize and llama-perplexity)' : false;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-parity-'));
// Its models are gigabytes: removed when the tests end (CHATFLOW_KEEP_WORK=1 keeps them to look at).
after(() => {
  if (process.env.CHATFLOW_KEEP_WORK) console.log(`kept ${work}`);
  else fs.rmSync(work, { recursive: true, force: true });
});
const threads = String(Math.max(1, os.cpus().length));

function run(program, args) {
  const result = spawnSync(program, args, { encoding: 'utf8', maxBuffer: 1 << 28 });
  const output = `${result.stdout}\n${result.stderr}`;
  assert.equal(result.status, 0, `${path.basename(program)} ${args.join(' ')} failed:\n${output.slice(-4000)}`);
  return output;
}

function chatflowPerplexity(model, text, extra = []) {
  const out = run(chatflow, ['perplexity', '-m', model, '-f', text, '--ctx', '512', '--chunks', '6', '-t', threads, '--json', ...extra]);
  return JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)).perplexity;
}

function llamaPerplexity(model, text, extra = []) {
  const out = run(path.join(bin, 'llama-perplexity'), ['-m', model, '-f', text, '-c', '512', '--chunks', '6', '-t', threads, ...extra]);
  const match = /Final estimate: PPL = ([0-9.]+)/.exec(out);
  assert.ok(match, `no estimate in llama-perplexity's output:\n${out.slice(-2000)}`);
  return Number(match[1]);
}

// name -> [type, rms] from `chatflow quantize -v` or `chatflow inspect --against`.
function tensorErrors(output, pattern) {
  const errors = new Map();
  for (const line of output.split('\n')) {
    const match = pattern.exec(line);
    if (match) errors.set(match[1], [match[2], Number(match[3])]);
  }
  return errors;
}

const types = [
  ['F16', 'f16', 0.001], ['BF16', 'bf16', 0.001], ['Q8_0', 'q8_0', 0.001],
  ['Q4_0', 'q4_0', 0.005], ['Q4_1', 'q4_1', 0.005], ['Q5_0', 'q5_0', 0.005], ['Q5_1', 'q5_1', 0.005],
  ['Q2_K', 'q2_k', 0.005], ['Q3_K_S', 'q3_k_s', 0.005], ['Q3_K_M', 'q3_k_m', 0.005],
  ['Q3_K_L', 'q3_k_l', 0.005], ['Q4_K_S', 'q4_k_s', 0.005], ['Q4_K_M', 'q4_k_m', 0.005],
  ['Q5_K_S', 'q5_k_s', 0.005], ['Q5_K_M', 'q5_k_m', 0.005], ['Q6_K', 'q6_k', 0.005],
  ['IQ4_NL', 'iq4_nl', 0.005], ['IQ4_XS', 'iq4_xs', 0.005],
];

const shapes = [
  { name: 'llama-512', args: ['--arch', 'llama', '--dim', '512', '--layers', '8', '--heads', '8', '--kv-heads', '2', '--ffn', '1536'] },
  { name: 'qwen2-896', args: ['--arch', 'qwen2', '--dim', '896', '--layers', '4', '--heads', '14', '--kv-heads', '2', '--ffn', '2432'] },
];

for (const shape of shapes) {
  describe(`llama.cpp parity, ${shape.name}`, { skip }, () => {
    const f16 = path.join(work, `${shape.name}-f16.gguf`);
    const text = path.join(work, 'text.txt');
    before(() => {
      const vocabulary = path.join(sourceDir, '..', 'shared', 'models', 'vocab', 'ggml-vocab-llama-spm.gguf');
      const vocabArgs = fs.existsSync(vocabulary) ? ['--vocab-from', vocabulary] : [];
      run(chatflow, ['make-model', ...shape.args, '--context', '1024', '--type', 'f16', '--weight-scale', '0.02', ...vocabArgs, '-o', f16]);
      fs.writeFileSync(text, fs.readFileSync(path.join(sourceDir, 'README.md'), 'utf8').repeat(2));
    });

    // The KV cache stored as q8_0 (gguf_model kv_cache.type: q8_0) against f16 and against
    // llama.cpp's -ctk q8_0 -ctv q8_0 (which needs its flash attention for a quantised V cache).
    test('q8_0 KV cache: perplexity within 0.5% of the f16 KV cache and of llama-perplexity -ctk/-ctv q8_0', (t) => {
      const f16Kv = chatflowPerplexity(f16, text);
      const q8Kv = chatflowPerplexity(f16, text, ['--kv-type', 'q8_0']);
      const reference = llamaPerplexity(f16, text, ['-fa', '-ctk', 'q8_0', '-ctv', 'q8_0']);
      t.diagnostic(`${shape.name}: chatflow f16 KV ${f16Kv.toFixed(4)}, q8_0 KV ${q8Kv.toFixed(4)}; ` +
        `llama-perplexity -ctk/-ctv q8_0 ${reference.toFixed(4)}`);
      assert.ok(Math.abs(q8Kv - f16Kv) <= 0.005 * f16Kv, `q8_0 KV ${q8Kv} vs f16 KV ${f16Kv} (tolerance 0.5%)`);
      assert.ok(Math.abs(q8Kv - reference) <= 0.005 * reference,
        `chatflow q8_0 KV ${q8Kv} vs llama-perplexity -ctk/-ctv q8_0 ${reference} (tolerance 0.5%)`);
    });

    for (const [llamaName, name, tolerance] of types) {
      test(`${name}: perplexity and per-tensor error match llama.cpp`, (t) => {
        const theirs = path.join(work, `${shape.name}-${name}-llama.gguf`);
        const ours = path.join(work, `${shape.name}-${name}-chatflow.gguf`);
        run(path.join(bin, 'llama-quantize'), [f16, theirs, llamaName, threads]);
        const quantized = run(chatflow, ['quantize', f16, ours, name, '--threads', threads, '--verbose']);

        const onTheirs = chatflowPerplexity(theirs, text);
        const reference = llamaPerplexity(theirs, text);
        assert.ok(Math.abs(onTheirs - reference) <= tolerance * reference,
          `chatflow's perplexity ${onTheirs} on llama-quantize's file vs llama-perplexity's ${reference} (tolerance ${tolerance * 100}%)`);

        const llamaOnOurs = llamaPerplexity(ours, text);
        assert.ok(Math.abs(llamaOnOurs - reference) <= 0.01 * reference,
          `llama-perplexity on chatflow's file ${llamaOnOurs} vs on llama-quantize's ${reference} (tolerance 1%)`);

        const ourErrors = tensorErrors(quantized, /\] (\S+)\s+\[.*\]\s+\S+ -> (\S+)\s+rms error (\S+)/);
        const theirErrors = tensorErrors(run(chatflow, ['inspect', theirs, '--against', f16, '--all-tensors']),
          /^\s+(\S+)\s+(\S+)\s+\[.*rms difference (\S+)/);
        const percent = (value) => `${((value / reference - 1) * 100).toFixed(3)}%`;
        const ratios = [...ourErrors].map(([tensor, [, error]]) => {
          const theirError = theirErrors.get(tensor)?.[1] ?? error;
          return theirError > 0 ? error / theirError : (error > 0 ? Infinity : 1);
        });
        t.diagnostic(`${shape.name} ${name}: llama-perplexity ${reference.toFixed(4)} on llama-quantize's file, ` +
          `chatflow ${onTheirs.toFixed(4)} on it (${percent(onTheirs)}), llama-perplexity ${llamaOnOurs.toFixed(4)} on ` +
          `chatflow's file (${percent(llamaOnOurs)}); rms error chatflow/llama-quantize per tensor ` +
          (ratios.length ? `${Math.min(...ratios).toFixed(4)}-${Math.max(...ratios).toFixed(4)}` : 'n/a (nothing quantised)'));
        for (const [tensor, [type, error]] of ourErrors) {
          const [theirType, theirError] = theirErrors.get(tensor) ?? [];
          assert.equal(type, theirType, `${tensor}: chatflow chose ${type}, llama-quantize ${theirType}`);
          assert.ok(error <= theirError * (1 + 1e-6), `${tensor} (${type}): rms error ${error} > llama-quantize's ${theirError}`);
        }
      });
    }
  });
}

describe('bench-engine --compare-llama-cpp', { skip }, () => {
  test('runs llama-bench on the same file and prints each ratio', () => {
    const model = path.join(work, 'bench-f16.gguf');
    run(chatflow, ['make-model', '--dim', '256', '--layers', '2', '--heads', '4', '--ffn', '512', '--context', '1024', '--type', 'f16', '-o', model]);
    const out = run(chatflow, ['bench-engine', model, '--threads', '1', '--repetitions', '1', '--compare-llama-cpp', bin]);
    for (const name of ['pp128', 'pp512', 'tg128']) {
      const row = out.match(new RegExp(`\\|\\s+1 \\| ${name}\\s+\\|\\s+([0-9.]+) \\|\\s+([0-9.]+) \\|\\s+([0-9.]+)x \\|`));
      assert.ok(row, `no ${name} row in:\n${out}`);
      const [ours, theirs, ratio] = row.slice(1).map(Number);
      assert.ok(theirs > 0, `llama-bench's ${name} is ${theirs}`);
      assert.ok(Math.abs(ratio - ours / theirs) <= 0.01, `${name}: ratio ${ratio} is not ${ours} / ${theirs}`);
    }
  });
});
