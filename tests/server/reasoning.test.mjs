// Reasoning models as a client sees them, with the official openai client: text inside
// <think>...</think> arrives as reasoning_content (streamed and not), the rest as content,
// output moderation masks personal data in the reasoning too, and an exact-cache hit splits the
// same way. The echo stage stands in for a reasoning model (reasoning_format: deepseek).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { modelStages, startServer, testModel, writeTemp } from './harness.mjs';

const OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');

describe('reasoning_content', () => {
  let server;
  let client;
  before(async () => {
    const file = writeTemp('reasoning-echo.yaml', `version: 1
name: echo
stages:
  - {name: cache, type: exact_cache}
  - {name: echo, type: echo, config: {words_per_chunk: 1, reasoning_format: deepseek}}
  - {name: guard, type: output_moderation, config: {pii: [email]}}
  - {name: emit, type: sse_emit}
edges:
  - cache.hit -> emit
`);
    server = await startServer(['--pipeline', file]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const question = '<think>The user greets me. Write to bob@example.com?\n</think>\n\nHello there!';

  test('a whole answer has reasoning_content beside content', async () => {
    const answer = await client.chat.completions.create({
      model: 'echo', temperature: 0, messages: [{ role: 'user', content: question }],
    });
    const message = answer.choices[0].message;
    assert.equal(message.content, 'Hello there!');
    assert.equal(message.reasoning_content, 'The user greets me. Write to [redacted]?\n');
  });

  test('a stream sends reasoning_content deltas first, then content deltas', async () => {
    const stream = await client.chat.completions.create({
      model: 'echo', stream: true, messages: [{ role: 'user', content: `${question} Again.` }],
    });
    let reasoning = '';
    let content = '';
    let contentStarted = false;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta ?? {};
      if (delta.reasoning_content) {
        assert.ok(!contentStarted, 'reasoning after content');
        reasoning += delta.reasoning_content;
      }
      if (delta.content) {
        contentStarted = true;
        content += delta.content;
      }
      assert.ok(!(delta.content ?? '').includes('<think>') && !(delta.content ?? '').includes('</think>'));
    }
    assert.equal(reasoning, 'The user greets me. Write to [redacted]?\n');
    assert.equal(content, 'Hello there! Again.');
  });

  test('an answer without the markers is all content', async () => {
    const answer = await client.chat.completions.create({
      model: 'echo', messages: [{ role: 'user', content: 'no thinking here, 2 < 3' }],
    });
    assert.equal(answer.choices[0].message.content, 'no thinking here, 2 < 3');
    assert.equal(answer.choices[0].message.reasoning_content, null);
  });

  test('an exact-cache hit splits the same way', async () => {
    const ask = () => client.chat.completions.create({
      model: 'echo', temperature: 0, messages: [{ role: 'user', content: '<think>cached thought</think>cached answer' }],
    }).withResponse();
    const first = await ask();
    const second = await ask();
    assert.equal(second.response.headers.get('x-chatflow-cache'), 'exact');
    for (const { data } of [first, second]) {
      assert.equal(data.choices[0].message.content, 'cached answer');
      assert.equal(data.choices[0].message.reasoning_content, 'cached thought');
    }
  });
});

// The real engine behind DeepSeek-R1's published template: its generation prompt opens
// <think>, so with reasoning_format auto everything the model writes before a </think> is
// reasoning. (The random test model never writes </think>: all of its answer is reasoning.)
const r1Template = path.join(process.env.CHATFLOW_SOURCE_DIR, '..', 'shared', 'models', 'templates',
  'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja');
describe('a model behind a template that opens <think>', {
  skip: fs.existsSync(r1Template) ? false : `${r1Template} is absent (../shared not beside the checkout)`,
}, () => {
  let server;
  let client;
  before(async () => {
    const file = writeTemp('reasoning-r1.yaml', `version: 1
name: r1
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model, chat_template: "${r1Template}"}
stages:
${modelStages}  - {name: emit, type: sse_emit}
`);
    server = await startServer(['--pipeline', file]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the answer before any </think> is reasoning_content, and usage counts it once', async () => {
    const answer = await client.chat.completions.create({
      model: 'test-model', temperature: 0, max_tokens: 12, messages: [{ role: 'user', content: 'Hi' }],
    });
    const message = answer.choices[0].message;
    assert.ok(message.reasoning_content.length > 0, JSON.stringify(message));
    assert.equal(message.content, '');
    assert.equal(answer.usage.completion_tokens, 12);
  });
});
