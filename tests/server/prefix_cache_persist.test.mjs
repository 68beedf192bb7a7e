// The prefix cache across restarts (gguf_model kv_cache.persist): a server stopped with SIGTERM
// saves its cached blocks, and the next server on the same model answers the same prompt from
// them (usage.prompt_tokens_details.cached_tokens), with the same text, logging what it restored.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';

import { addKey, post, scratchPath, startServer, writeTemp } from './harness.mjs';

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

async function ask(server, headers = {}) {
  const response = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
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

// POST /admin/prefix_cache/save and /clear, behind the pipeline's auth: a server killed without
// its drain (SIGKILL) still restores what an admin saved, and a cleared cache answers cold and
// leaves no file for the next start. A model that keeps no file can be cleared, not saved.
test('admins save the prefix cache on demand and clear it with its file', async () => {
  const file = scratchPath(`prefix-cache-admin-${process.pid}.kv`);
  fs.rmSync(file, { force: true });
  const keysFile = scratchPath('prefix-cache-admin-keys.yaml');
  const admin = { Authorization: `Bearer ${addKey(keysFile, 'ops', { roles: ['admin'] })}` };
  const user = { Authorization: `Bearer ${addKey(keysFile, 'acme', { user: 'alice' })}` };
  const config = writeTemp('prefix-cache-admin.yaml', `version: 1
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model,
        kv_cache: {persist: {path: "${file}"}}}
  plain: {type: gguf_model, path: "${testModel}", name: plain-model}
  off: {type: gguf_model, path: "${testModel}", name: off-model, kv_cache: {prefix_cache: false}}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
  const first = await startServer(['--pipeline', config]);
  let saved;
  let cold;
  try {
    const refused = await post(first.url, '/admin/prefix_cache/save', {}, user);
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.error.type, 'permission_error');
    assert.match(refused.json.error.message, /only admins may save the prefix cache/);

    cold = await ask(first, user);
    const response = await post(first.url, '/admin/prefix_cache/save', { model: 'test-model' }, admin);
    assert.equal(response.status, 200, response.text);
    assert.equal(response.json.saved.length, 1);
    saved = response.json.saved[0];
    assert.equal(saved.model, 'test-model');
    assert.equal(saved.path, file);
    assert.ok(saved.blocks >= 2, response.text);
    assert.equal(saved.bytes, fs.statSync(file).size);

    const unknown = await post(first.url, '/admin/prefix_cache/save', { model: 'nope' }, admin);
    assert.equal(unknown.status, 404, unknown.text);
    assert.equal(unknown.json.error.code, 'model_not_found');
    assert.match(unknown.json.error.message, /'test-model', 'plain-model'/);
    const noFile = await post(first.url, '/admin/prefix_cache/save', { model: 'plain-model' }, admin);
    assert.equal(noFile.status, 400, noFile.text);
    assert.equal(noFile.json.error.code, 'no_persist_path');
    // Without a name: every model that keeps a file saves it.
    const all = await post(first.url, '/admin/prefix_cache/save', {}, admin);
    assert.equal(all.status, 200, all.text);
    assert.deepEqual(all.json.saved.map((entry) => entry.model), ['test-model']);
    const off = await post(first.url, '/admin/prefix_cache/clear', { model: 'off-model' }, admin);
    assert.equal(off.status, 400, off.text);
    assert.equal(off.json.error.code, 'no_prefix_cache');
    const extra = await post(first.url, '/admin/prefix_cache/clear', { model: 'test-model', force: true }, admin);
    assert.equal(extra.status, 400, extra.text);
    assert.equal(extra.json.error.param, 'force');
  } finally {
    // No drain: only what the admin saved is on disk.
    assert.equal((await first.stop('SIGKILL')).signal, 'SIGKILL');
  }

  const second = await startServer(['--pipeline', config]);
  try {
    assert.match(second.stdout() + second.stderr(), new RegExp(`restored ${saved.blocks} blocks`));
    const warm = await ask(second, user);
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= 32, JSON.stringify(warm.usage));
    assert.equal(warm.choices[0].text, cold.choices[0].text);

    const cleared = await post(second.url, '/admin/prefix_cache/clear', {}, admin);
    assert.equal(cleared.status, 200, cleared.text);
    const byModel = Object.fromEntries(cleared.json.cleared.map((entry) => [entry.model, entry]));
    assert.ok(byModel['test-model'].blocks >= saved.blocks, cleared.text);
    assert.equal(byModel['test-model'].file_removed, true);
    assert.equal(byModel['plain-model'].file_removed, false);
    assert.equal(fs.existsSync(file), false);
    const again = await ask(second, user);
    assert.equal(again.usage.prompt_tokens_details?.cached_tokens ?? 0, 0, JSON.stringify(again.usage));
    assert.equal(again.choices[0].text, cold.choices[0].text);
  } finally {
    assert.equal((await second.stop('SIGKILL')).signal, 'SIGKILL');
  }
  const third = await startServer(['--pipeline', config]);
  try {
    assert.match(third.stdout() + third.stderr(), /no saved prefix cache at/);
  } finally {
    assert.equal((await third.stop()).code, 0);
  }
});
