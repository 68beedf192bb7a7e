// Stores that cannot keep their promise say so: a damaged history file stops the server from
// starting (naming the file and why), and a turn that cannot be written turns the answer's end
// into an error, is counted in /metrics and degrades /health, instead of a stream that ends
// well while nothing was kept.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { describe, test } from 'node:test';

import {
  addKey, metric, modelStages, post, runChatflow, scrape, scratchPath, startServer, testModel, writeTemp,
} from './harness.mjs';

function historyPipeline(name, keys, database) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: sqlite, path: "${database}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 60000}}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

describe('storage failures', () => {
  test('a damaged history file is refused at start with its path and the reason', () => {
    const database = scratchPath('damaged-history.db');
    fs.writeFileSync(database, Buffer.concat([Buffer.from('SQLite format 3\0'), Buffer.alloc(8192, 0x5a)]));
    const keys = scratchPath('damaged-keys.yaml');
    addKey(keys, 'acme');
    const result = runChatflow(['validate', historyPipeline('damaged', keys, database)]);
    assert.equal(result.status, 1, result.stdout + result.stderr);
    assert.match(result.stderr, new RegExp(`history database ${database.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    assert.match(result.stderr, /damaged|not a database|malformed/);
  });

  test('a turn that cannot be written ends the answer with an error and degrades /health', async () => {
    const database = scratchPath('full-history.db');
    const keys = scratchPath('full-keys.yaml');
    const key = addKey(keys, 'acme', { user: 'u1' });
    const server = await startServer(['--pipeline', historyPipeline('full', keys, database)],
      { fileSizeBlocks: 64 });
    try {
      const ask = (content) => post(server.url, '/v1/chat/completions', {
        model: 'test-model', max_tokens: 2, temperature: 0, session_id: 'full',
        messages: [{ role: 'user', content }],
      }, { Authorization: `Bearer ${key}` });
      const small = await ask('a small turn fits');
      assert.equal(small.status, 200, small.text);
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      // 12 KB of question: the history file may not grow that far (32 KB).
      const big = await ask('x '.repeat(6000));
      assert.equal(big.status, 500, big.text);
      assert.equal(big.json.error.code, 'history_not_saved');
      const health = await fetch(`${server.url}/health`);
      assert.equal(health.status, 503);
      const body = await health.json();
      assert.equal(body.status, 'degraded');
      assert.equal(body.failing_stores[0].store, 'history');
      assert.equal(metric(await scrape(server.url), 'chatflow:storage_lost_writes_total', 'store="history"'), 1);
      // The session holds only what was kept.
      const stored = await fetch(`${server.url}/v1/sessions/full`, { headers: { Authorization: `Bearer ${key}` } });
      assert.deepEqual((await stored.json()).turns.map((turn) => turn.user), ['a small turn fits']);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
