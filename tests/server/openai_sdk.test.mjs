// The official openai npm client against the server: streaming chat and completions,
// non-streaming calls, usage, logprobs, seeds, model listing and error classes.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import { modelPipeline, startServer } from './harness.mjs';

const modules = process.env.CHATFLOW_NODE_MODULES;
const OpenAI = createRequire(`${modules}/`)('openai');

describe('the official openai client', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('sdk')]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  const messages = [{ role: 'user', content: 'Once upon a time' }];

  test('models.list', async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model);
    assert.equal(models.length, 1);
    assert.equal(models[0].id, 'test-model');
    assert.equal(models[0].object, 'model');
    assert.equal(models[0].owned_by, 'chatflow');
  });

  test('streaming chat completion with usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'test-model', messages, max_tokens: 8, stream: true, stream_options: { include_usage: true },
      // @ts-ignore: a vLLM extension, passed through in the body
      ignore_eos: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length >= 3);
    const { id, created, model } = chunks[0];
    for (const chunk of chunks) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.id, id);
      assert.equal(chunk.created, created);
      assert.equal(chunk.model, model);
    }
    assert.equal(model, 'test-model');
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, []);
    assert.equal(usageChunk.usage.completion_tokens, 8);
    assert.ok(usageChunk.usage.prompt_tokens > 0);
    assert.equal(usageChunk.usage.total_tokens, usageChunk.usage.prompt_tokens + 8);
    assert.equal(typeof usageChunk.usage.prompt_tokens_details.cached_tokens, 'number');
    const last = chunks.at(-2);
    assert.equal(last.choices[0].finish_reason, 'length');
    assert.deepEqual(last.choices[0].delta, {});
    for (const chunk of chunks.slice(0, -2)) {
      assert.equal(chunk.choices[0].finish_reason, null);
      assert.equal(chunk.usage, null);
    }
    assert.equal(last.usage, null);
    const text = chunks.slice(1, -2).map((chunk) => chunk.choices[0].delta.content).join('');
    assert.ok(text.length > 0, 'some content');
  });

  test('streaming completion', async () => {
    const stream = await client.completions.create({
      model: 'test-model', prompt: 'Once upon a time', max_tokens: 6, stream: true, ignore_eos: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks) {
      assert.equal(chunk.object, 'text_completion');
      assert.match(chunk.id, /^cmpl-/);
    }
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
    assert.ok(chunks.slice(0, -1).every((chunk) => chunk.choices[0].finish_reason === null));
    assert.ok(chunks.map((chunk) => chunk.choices[0].text).join('').length > 0);
  });

  test('non-streaming chat completion', async () => {
    const completion = await client.chat.completions.create({
      model: 'test-model', messages, max_tokens: 5, ignore_eos: true,
    });
    assert.equal(completion.object, 'chat.completion');
    assert.match(completion.id, /^chatcmpl-/);
    assert.equal(completion.choices.length, 1);
    assert.equal(completion.choices[0].message.role, 'assistant');
    assert.equal(typeof completion.choices[0].message.content, 'string');
    assert.equal(completion.choices[0].finish_reason, 'length');
    assert.equal(completion.usage.completion_tokens, 5);
    assert.equal(completion.usage.total_tokens, completion.usage.prompt_tokens + 5);
    assert.equal(typeof completion.usage.prompt_tokens_details.cached_tokens, 'number');
  });

  test('non-streaming completion', async () => {
    const completion = await client.completions.create({
      model: 'test-model', prompt: 'The cat', max_tokens: 4, ignore_eos: true,
    });
    assert.equal(completion.object, 'text_completion');
    assert.equal(completion.choices[0].finish_reason, 'length');
    assert.equal(completion.usage.completion_tokens, 4);
  });

  test('a repeated long prompt reuses the prefix cache (cached_tokens)', async () => {
    const long = [{ role: 'user', content: 'The quick brown fox jumps over the lazy dog. '.repeat(12) }];
    const first = await client.chat.completions.create({ model: 'test-model', messages: long, max_tokens: 2 });
    const second = await client.chat.completions.create({ model: 'test-model', messages: long, max_tokens: 2 });
    assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(second.usage));
    assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
  });

  test('the same seed gives the same text; max_completion_tokens is honoured', async () => {
    const ask = () => client.chat.completions.create({
      model: 'test-model', messages, max_completion_tokens: 12, temperature: 1, seed: 42, ignore_eos: true,
    });
    const [a, b] = await Promise.all([ask(), ask()]);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.equal(a.usage.completion_tokens, 12);
  });

  test('logprobs with top_logprobs', async () => {
    const completion = await client.chat.completions.create({
      model: 'test-model', messages, max_tokens: 4, logprobs: true, top_logprobs: 2, ignore_eos: true,
    });
    const content = completion.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const token of content) {
      assert.ok(token.logprob <= 0);
      assert.equal(token.top_logprobs.length, 2);
      assert.ok(token.top_logprobs[0].logprob >= token.top_logprobs[1].logprob);
      assert.ok(Array.isArray(token.bytes));
    }
  });

  test('errors arrive as the SDK error classes', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'test-model', messages, temperature: -1 }),
      (error) => error instanceof OpenAI.BadRequestError && error.status === 400 && error.param === 'temperature');
    await assert.rejects(
      client.chat.completions.create({ model: 'no-such-model', messages }),
      (error) => error instanceof OpenAI.NotFoundError && error.code === 'model_not_found');
    await assert.rejects(
      client.chat.completions.create({ model: 'test-model', messages: [] }),
      (error) => error instanceof OpenAI.BadRequestError && /messages/.test(error.message));
  });
});
