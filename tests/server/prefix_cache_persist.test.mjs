// The prefix cache across restarts (gguf_model kv_cache.persist): a server stopped with SIGTERM
// saves its cached blocks, and the next server on the same model answers the same prompt from
// them (usage.prompt_tokens_details.cached_tokens), with the same text, logging what it restored.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';

import { scratchPath, startServer, writeTemp } from './harness.mjs';

const testModel = process.env.CHATFLOW_TEST_MODEL;

function pipeline(file) {
  return writeTemp('prefix-cache-persist.yaml', `version: 1
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model,
        kv_cache: {persist: {path: "${file}"}}}
stages:
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
}

const prompt = 'You are the assistant of a large deployment whose system prompt is long enough ' +
  'to fill several blocks of the key and value cache, so a restart that forgets it costs every ' +
  'first request a prefill. Question: what is the weather like?';

async function ask(server) {
  const response = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'test-model', prompt, max_tokens: 8, temperature: 0 }),
  });
  assert.equal(response.status, 200);
  return response.json();
}

test('a restarted server answers from the prefix cache the stopped one saved', async () => {
  const file = scratchPath(`prefix-cache-${process.pid}.kv`);
  fs.rmSync(file, { force: true });
  const config = pipeline(file);
  const first = await startServer(['--pipeline', config]);
  const cold = await ask(first);
  assert.equal(cold.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  assert.equal((await first.stop()).code, 0);
  assert.ok(fs.existsSync(file), 'the stopped server saved its prefix cache');
  assert.match(first.stdout() + first.stderr(), /saved \d+ blocks of the prefix cache/);

  const second = await startServer(['--pipeline', config]);
  try {
    assert.match(second.stdout() + second.stderr(), /restored [1-9]\d* blocks \(\d+ positions\) of the prefix cache/);
    const warm = await ask(second);
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= 32,
      `cached_tokens ${JSON.stringify(warm.usage)}`);
    assert.equal(warm.choices[0].text, cold.choices[0].text);
  } finally {
    assert.equal((await second.stop()).code, 0);
  }
});
