// The model families against llama.cpp (b4748) on the same make-model files: llama with Llama 3's
// rope_freqs and with YaRN, qwen2 with and without YaRN, the mixtures of experts (llama with
// experts as Mixtral has them, qwen2moe with its shared expert), gemma2 (26 layers: b4748 only loads
// Gemma 2's published depths), phi3 with short and with long (LongRoPE) factors. For each, in
// f32, f16 and (llama-quantize) q4_k_m: chatflow's perplexity within 0.5% of llama-perplexity's
// (2% for gemma2's q4_k_m, see its entry),
// and, stricter, the KL divergence of chatflow's next-token distributions from the ones
// llama-perplexity saved (--kl-divergence-base) with the top token the same at every scored
// position; and chatflow quantize's q4_k_m mix gives every tensor llama-quantize's type, with
// llama-perplexity on it within 1% of on llama-quantize's file. Needs LLAMA_CPP_BIN (a build without AMX, see llama_cpp_parity.test.mjs); skips
// without it. phi3 needs ../shared's Phi-3 vocabulary (b4748 looks up Phi-3's special tokens).
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
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-architectures-'));
// Its models are gigabytes: removed when the tests end (CHATFLOW_KEEP_WORK=1 keeps them to look at).
after(() => {
  if (process.env.CHATFLOW_KEEP_WORK) console.log(`kept ${work}`);
  else fs.rmSync(work, { recursive: true, force: true });
});
const threads = String(Math.max(1, os.cpus().length));
const vocabDir = path.join(sourceDir ?? '.', '..', 'shared', 'models', 'vocab');
const spm = path.join(vocabDir, 'ggml-vocab-llama-spm.gguf');
const phi3Vocab = path.join(vocabDir, 'ggml-vocab-phi-3.gguf');

function run(program, args) {
  const result = spawnSync(program, args, { encoding: 'utf8', maxBuffer: 1 << 28 });
  const output = `${result.stdout}\n${result.stderr}`;
  assert.equal(result.status, 0, `${path.basename(program)} ${args.join(' ')} failed:\n${output.slice(-4000)}`);
  return output;
}

const context = '256';

function llamaPerplexity(model, text, base) {
  const out = run(path.join(bin, 'llama-perplexity'),
    ['-m', model, '-f', text, '-c', context, '--chunks', '4', '-t', threads, '--kl-divergence-base', base]);
  const match = /Final estimate: PPL = ([0-9.]+)/.exec(out);
  assert.ok(match, `no estimate in llama-perplexity's output:\n${out.slice(-2000)}`);
  return Number(match[1]);
}

function chatflowAgainst(model, text, base) {
  const out = run(chatflow, ['perplexity', '-m', model, '-f', text, '--ctx', context, '--chunks', '4', '-t', threads,
    '--kl-divergence-base', base, '--kl-divergence', '--json']);
  return JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1));
}

const shape = ['--dim', '256', '--heads', '4', '--kv-heads', '2', '--ffn', '512', '--context', '512'];
const families = [
  { name: 'llama-rope_freqs', args: ['--arch', 'llama', '--layers', '2', '--weight-scale', '0.05', '--rope-scaling', 'llama3'], vocab: spm },
  { name: 'llama-yarn', args: ['--arch', 'llama', '--layers', '2', '--weight-scale', '0.05', '--rope-scaling', 'yarn'], vocab: spm },
  { name: 'qwen2', args: ['--arch', 'qwen2', '--layers', '2', '--weight-scale', '0.05'], vocab: spm },
  { name: 'qwen2-yarn', args: ['--arch', 'qwen2', '--layers', '2', '--weight-scale', '0.05', '--rope-scaling', 'yarn'], vocab: spm },
  { name: 'mixtral', args: ['--arch', 'llama', '--layers', '2', '--weight-scale', '0.05', '--experts', '4', '--experts-used', '2'], vocab: spm },
  { name: 'qwen2moe', args: ['--arch', 'qwen2moe', '--layers', '2', '--weight-scale', '0.05', '--experts', '4', '--experts-used', '2'], vocab: spm },
  // 26 layers compound the 8-bit activation rounding: a last-bit difference in a product turns
  // into a whole quantisation step a few layers on. Summing the same exact integer products in
  // another float order (avx512_vnni's q4_k kernel before and after its lanes held sub-blocks)
  // moved chatflow's q4_k_m perplexity from -0.69% to -1.24% of llama.cpp's, and the avx2 and
  // avx512 kernel sets gave +0.38% and -0.93%, all with the same KL (6.1-6.2e-4) and top token.
  // So the quantised perplexity gets 2% here; the KL and top-token checks stay as strict.
  { name: 'gemma2', args: ['--arch', 'gemma2', '--layers', '26', '--sliding-window', '48', '--weight-scale', '0.02'], vocab: spm,
    quantisedPerplexityTolerance: 0.02 },
  { name: 'phi3', args: ['--arch', 'phi3', '--layers', '2', '--weight-scale', '0.05', '--sliding-window', '48'], vocab: phi3Vocab },
  { name: 'phi3-longrope', args: ['--arch', 'phi3', '--layers', '2', '--weight-scale', '0.05', '--sliding-window', '48', '--rope-scaling', 'longrope'], vocab: phi3Vocab },
];

for (const family of families) {
  const missing = !fs.existsSync(family.vocab) ? `${family.vocab} is absent (../shared not beside the checkout)` : false;
  describe(`llama.cpp parity, ${family.name}`, { skip: skip || missing }, () => {
    const text = path.join(work, 'text.txt');
    const f32 = path.join(work, `${family.name}-f32.gguf`);
    before(() => {
      fs.writeFileSync(text, fs.readFileSync(path.join(sourceDir, 'README.md'), 'utf8').repeat(2));
      run(chatflow, ['make-model', ...shape, ...family.args, '--type', 'f32', '--vocab-from', family.vocab, '-o', f32]);
    });
    for (const type of ['f32', 'f16', 'q4_k_m']) {
      const tolerance = (type === 'q4_k_m' && family.quantisedPerplexityTolerance) || 0.005;
      test(`${type}: perplexity within ${tolerance * 100}%, same next-token distributions`, (t) => {
        let model = f32;
        if (type !== 'f32') {
          model = path.join(work, `${family.name}-${type}.gguf`);
          run(path.join(bin, 'llama-quantize'), [f32, model, type.toUpperCase(), threads]);
        }
        const base = path.join(work, `${family.name}-${type}.kld`);
        const reference = llamaPerplexity(model, text, base);
        const ours = chatflowAgainst(model, text, base);
        t.diagnostic(`${family.name} ${type}: llama-perplexity ${reference.toFixed(4)}, chatflow ${ours.perplexity.toFixed(4)} ` +
          `(${((ours.perplexity / reference - 1) * 100).toFixed(4)}%), KL ${ours.kl_divergence.toExponential(2)}, ` +
          `top token ${(ours.top_token_agreement * 100).toFixed(2)}%`);
        assert.ok(Math.abs(ours.perplexity - reference) <= tolerance * reference,
          `chatflow's perplexity ${ours.perplexity} vs llama-perplexity's ${reference}`);
        // Quantised, the two engines round activations to 8 bits each its own way; on these calm
        // random models, whose next-token distributions are nearly flat, that flips near-ties.
        const klLimit = type === 'q4_k_m' ? 1e-3 : 1e-4;
        assert.ok(ours.kl_divergence <= klLimit, `KL divergence from llama.cpp's distributions ${ours.kl_divergence} > ${klLimit}`);
        assert.ok(ours.top_token_agreement >= (type === 'q4_k_m' ? 0.9 : 0.995),
          `the most likely token differs from llama.cpp's at ${((1 - ours.top_token_agreement) * 100).toFixed(2)}% of positions`);
      });
    }
    test('chatflow quantize q4_k_m chooses llama-quantize\'s type for every tensor', () => {
      const theirs = path.join(work, `${family.name}-q4_k_m.gguf`);
      if (!fs.existsSync(theirs)) run(path.join(bin, 'llama-quantize'), [f32, theirs, 'Q4_K_M', threads]);
      const ours = path.join(work, `${family.name}-q4_k_m-chatflow.gguf`);
      run(chatflow, ['quantize', f32, ours, 'q4_k_m', '--threads', threads]);
      const types = (file) => new Map(run(chatflow, ['inspect', file, '--all-tensors']).split('\n')
        .map((line) => /^\s+(\S+\.weight)\s+(\S+)\s+\[/.exec(line)).filter(Boolean).map((m) => [m[1], m[2]]));
      const expected = types(theirs);
      assert.ok(expected.size > 0);
      assert.deepEqual(types(ours), expected);
      const reference = llamaPerplexity(theirs, text, path.join(work, `${family.name}-theirs.kld`));
      const onOurs = llamaPerplexity(ours, text, path.join(work, `${family.name}-ours.kld`));
      assert.ok(Math.abs(onOurs - reference) <= 0.01 * reference,
        `llama-perplexity on chatflow's file ${onOurs} vs on llama-quantize's ${reference}`);
    });
  });
}
