// Identity isolation: the prefix cache is salted with the tenant, so tenant A's cached blocks are
// never reused for tenant B's identical prompt, while A's own repeat reuses them (counted).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, post, scrape, scratchPath, startServer, testModel, writeTemp,
} from './harness.mjs';

describe('tenant isolation in the prefix cache', () => {
  let server;
  let tenantA;
  let tenantB;
  before(async () => {
    const keys = scratchPath('isolation-keys.yaml');
    tenantA = addKey(keys, 'tenant-a');
    tenantB = addKey(keys, 'tenant-b');
    const file = writeTemp('isolation.yaml', `version: 1
name: isolation
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}, public_paths: [/health, /metrics]}}
${modelStages}  - {name: emit, type: sse_emit}
`);
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("tenant B never reuses tenant A's blocks; A reuses its own", async () => {
    const prompt = { model: 'test-model', max_tokens: 2,
      messages: [{ role: 'user', content: 'A long shared system of rules for the assistant. '.repeat(10) }] };
    const as = (key) => ({ Authorization: `Bearer ${key}` });
    const hits = async () => metric(await scrape(server.url), 'chatflow:prefix_cache_hits_total');

    const a1 = await post(server.url, '/v1/chat/completions', prompt, as(tenantA));
    assert.equal(a1.status, 200, a1.text);
    assert.equal(a1.json.usage.prompt_tokens_details.cached_tokens, 0);
    const hitsAfterA = await hits();

    const b1 = await post(server.url, '/v1/chat/completions', prompt, as(tenantB));
    assert.equal(b1.json.usage.prompt_tokens_details.cached_tokens, 0, 'B reused A\'s blocks');
    assert.equal(await hits(), hitsAfterA, 'the prefix cache counted a hit for B');

    const a2 = await post(server.url, '/v1/chat/completions', prompt, as(tenantA));
    const cached = a2.json.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= 16 && cached < a2.json.usage.prompt_tokens, `A's repeat cached ${cached}`);
    assert.equal(await hits(), hitsAfterA + cached);
  });
});
