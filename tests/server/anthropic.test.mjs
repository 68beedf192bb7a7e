// Anthropic's Messages API (POST /v1/messages) with the official @anthropic-ai/sdk client, through
// a pipeline with authentication, a rate limit and input moderation in front of the model: the
// same gates chat completions pass, answers and errors in Anthropic's shapes. The model is the
// random-weight test model: at temperature 0 it answers the same on either protocol, and only
// constrained decoding makes it write a valid call.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import {
  addKey, gatedModelPipeline, modelPipeline, modelStages, scratchPath, startServer, testModel,
  weatherArguments, writeTemp,
} from './harness.mjs';

const require = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`);
const Anthropic = require('@anthropic-ai/sdk');

const keysFile = scratchPath('anthropic-keys.yaml');
const blocklist = writeTemp('anthropic-blocklist.txt', 'forbiddenword\n');

const pipeline = () => gatedModelPipeline('anthropic', keysFile, blocklist);

const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: weatherArguments,
};

const ask = {
  model: 'test-model',
  system: 'You are a storyteller.',
  messages: [{ role: 'user', content: 'Once upon a time' }],
  max_tokens: 8,
  temperature: 0,
  ignore_eos: true,
};

describe('the official @anthropic-ai/sdk client', () => {
  let server;
  let key;
  let limitedKey;
  let client;
  before(async () => {
    key = addKey(keysFile, 'acme', { user: 'alice' });
    limitedKey = addKey(keysFile, 'acme', { user: 'bob', rpm: 1 });
    server = await startServer(['--pipeline', pipeline()]);
    client = new Anthropic({ baseURL: server.url, apiKey: key, maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('messages.create answers a message of content blocks, as chat completions would', async () => {
    const message = await client.messages.create(ask);
    assert.match(message.id, /^msg_[0-9a-f]{24}$/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'test-model');
    assert.equal(message.stop_reason, 'max_tokens');
    assert.equal(message.stop_sequence, null);
    assert.equal(message.usage.output_tokens, 8);
    assert.ok(message.usage.input_tokens > 0);
    assert.equal(message.content.length, 1);
    assert.equal(message.content[0].type, 'text');
    assert.ok(message.content[0].text.length > 0);

    // The same conversation through /v1/chat/completions: the same pipeline, the same answer.
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
      body: JSON.stringify({
        model: 'test-model', max_tokens: 8, temperature: 0, ignore_eos: true,
        messages: [{ role: 'system', content: ask.system }, ...ask.messages],
      }),
    });
    const completion = await response.json();
    assert.equal(completion.choices[0].message.content, message.content[0].text);
    assert.equal(completion.usage.prompt_tokens, message.usage.input_tokens);
  });

  test('messages.stream: text events, then the final message', async () => {
    const whole = await client.messages.create(ask);
    const stream = client.messages.stream(ask);
    const types = [];
    let text = '';
    stream.on('streamEvent', (event) => types.push(event.type));
    stream.on('text', (delta) => { text += delta; });
    const final = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.equal(types.at(-2), 'message_delta');
    assert.ok(types.includes('content_block_delta'));
    assert.equal(types.filter((type) => type === 'content_block_start').length,
      types.filter((type) => type === 'content_block_stop').length);
    assert.equal(text, whole.content[0].text);
    assert.match(final.id, /^msg_/);
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 8);
    assert.equal(final.usage.input_tokens, whole.usage.input_tokens);
    assert.deepEqual(final.content, [{ type: 'text', text: whole.content[0].text }]);
  });

  test('stop_sequences end the answer where one appears', async () => {
    const whole = (await client.messages.create({ ...ask, max_tokens: 16 })).content[0].text;
    const stop = whole.slice(4, 6);
    assert.equal(stop.length, 2, `the answer is long enough: ${JSON.stringify(whole)}`);
    // A stop string that never appears listed first: the answer names the one that matched.
    const stopSequences = ['never-in-the-answer', stop];
    const cut = await client.messages.create({ ...ask, max_tokens: 16, stop_sequences: stopSequences });
    assert.equal(cut.content[0].text, whole.slice(0, whole.indexOf(stop)));
    assert.ok(cut.usage.output_tokens < 16);
    assert.equal(cut.stop_reason, 'stop_sequence');
    assert.equal(cut.stop_sequence, stop);

    const stream = client.messages.stream({ ...ask, max_tokens: 16, stop_sequences: stopSequences });
    const deltas = [];
    stream.on('streamEvent', (event) => { if (event.type === 'message_delta') deltas.push(event.delta); });
    const final = await stream.finalMessage();
    assert.deepEqual(deltas, [{ stop_reason: 'stop_sequence', stop_sequence: stop }]);
    assert.equal(final.stop_reason, 'stop_sequence');
    assert.equal(final.stop_sequence, stop);
    assert.deepEqual(final.content, cut.content);

    // An answer that ends otherwise names none.
    const long = await client.messages.create({ ...ask, stop_sequences: ['never-in-the-answer'] });
    assert.equal(long.stop_reason, 'max_tokens');
    assert.equal(long.stop_sequence, null);
  });

  test('messages.countTokens counts the prompt the message would have', async () => {
    const { max_tokens: _, temperature: __, ignore_eos: ___, ...conversation } = ask;
    const counted = await client.messages.countTokens(conversation);
    const message = await client.messages.create(ask);
    assert.equal(counted.input_tokens, message.usage.input_tokens);
    // Tools are part of the prompt (the template, or the system prompt, shows them).
    const withTools = await client.messages.countTokens({ ...conversation, tools: [weather] });
    assert.ok(withTools.input_tokens > counted.input_tokens);
    const stranger = new Anthropic({ baseURL: server.url, apiKey: 'sk-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.messages.countTokens(conversation), (error) => {
      assert.equal(error.status, 401);
      assert.equal(error.error.error.type, 'authentication_error');
      return true;
    });
    await assert.rejects(client.messages.countTokens({ ...conversation, max_tokens: 5 }), (error) => {
      assert.equal(error.status, 400);
      assert.equal(error.error.error.type, 'invalid_request_error');
      assert.match(error.error.error.message, /'max_tokens' is not supported/);
      return true;
    });
  });

  test('a Bearer token is a credential too (authToken)', async () => {
    const bearer = new Anthropic({ baseURL: server.url, authToken: key, apiKey: null, maxRetries: 0 });
    const message = await bearer.messages.create(ask);
    assert.equal(message.usage.output_tokens, 8);
  });

  test('a tool_use block, and its tool_result answered in the next turn', async () => {
    const question = { role: 'user', content: 'What is the weather in Paris?' };
    const call = await client.messages.create({
      model: 'test-model', max_tokens: 300, temperature: 0, tools: [weather],
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: [question],
    });
    assert.equal(call.stop_reason, 'tool_use');
    const uses = call.content.filter((block) => block.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.equal(uses[0].name, 'get_weather');
    assert.match(uses[0].id, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(typeof uses[0].input.city, 'string');
    assert.ok(uses[0].input.city.length <= 12);
    assert.ok(['celsius', 'fahrenheit'].includes(uses[0].input.unit));
    assert.deepEqual(Object.keys(uses[0].input).sort(), ['city', 'unit']);

    // The stream carries the same call as input_json_delta.
    const stream = client.messages.stream({
      model: 'test-model', max_tokens: 300, temperature: 0, tools: [weather],
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: [question],
    });
    const deltas = [];
    stream.on('streamEvent', (event) => { if (event.delta?.type === 'input_json_delta') deltas.push(event.delta); });
    const streamed = await stream.finalMessage();
    assert.equal(streamed.stop_reason, 'tool_use');
    assert.ok(deltas.length >= 1);
    assert.deepEqual(streamed.content.filter((block) => block.type === 'tool_use')[0].input, uses[0].input);

    const answer = await client.messages.create({
      model: 'test-model', max_tokens: 6, temperature: 0, ignore_eos: true, tools: [weather],
      messages: [
        question,
        { role: 'assistant', content: call.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '12 degrees' }] },
      ],
    });
    assert.equal(answer.type, 'message');
    // The conversation with the call and its result is longer than the question alone.
    assert.ok(answer.usage.input_tokens > call.usage.input_tokens);
  });

  test('a request without max_tokens is a 400 invalid_request_error', async () => {
    const { max_tokens: _, ...without } = ask;
    await assert.rejects(client.messages.create(without), (error) => {
      assert.ok(error instanceof Anthropic.BadRequestError, String(error));
      assert.equal(error.status, 400);
      assert.equal(error.error.type, 'error');
      assert.equal(error.error.error.type, 'invalid_request_error');
      assert.match(error.error.error.message, /'max_tokens' is required/);
      return true;
    });
  });

  test('what this server does not support is refused by name', async () => {
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } };
    await assert.rejects(
      client.messages.create({ ...ask, messages: [{ role: 'user', content: [image] }] }),
      (error) => {
        assert.equal(error.status, 400);
        assert.equal(error.error.error.type, 'invalid_request_error');
        assert.match(error.error.error.message, /messages\[0\]\.content\[0\]\.type' is 'image'/);
        return true;
      });
    await assert.rejects(client.messages.create({ ...ask, thinking: { type: 'enabled', budget_tokens: 1024 } }),
      (error) => {
        assert.equal(error.status, 400);
        assert.match(error.error.error.message, /'thinking' is not supported/);
        return true;
      });
  });

  test('an unknown model is a 404 not_found_error', async () => {
    await assert.rejects(client.messages.create({ ...ask, model: 'claude-none' }), (error) => {
      assert.ok(error instanceof Anthropic.NotFoundError, String(error));
      assert.equal(error.error.error.type, 'not_found_error');
      return true;
    });
  });

  test('a bad key is a 401 authentication_error, before the body is read', async () => {
    const stranger = new Anthropic({ baseURL: server.url, apiKey: 'sk-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.messages.create(ask), (error) => {
      assert.ok(error instanceof Anthropic.AuthenticationError, String(error));
      assert.equal(error.status, 401);
      assert.equal(error.error.type, 'error');
      assert.equal(error.error.error.type, 'authentication_error');
      return true;
    });
    // Not even a malformed body is read without credentials.
    const response = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{',
    });
    assert.equal(response.status, 401);
    assert.equal((await response.json()).error.type, 'authentication_error');
  });

  test('refusals before the body is read come in Anthropic\'s shape too', async () => {
    const plain = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', headers: { 'Content-Type': 'text/plain', 'x-api-key': key }, body: '{}',
    });
    assert.equal(plain.status, 415);
    assert.deepEqual(Object.keys(await plain.json()), ['type', 'error']);
    const get = await fetch(`${server.url}/v1/messages`, { headers: { 'x-api-key': key } });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST, OPTIONS');
    assert.equal((await get.json()).error.type, 'invalid_request_error');
  });

  test('the moderation gate refuses in Anthropic\'s shape', async () => {
    await assert.rejects(
      client.messages.create({ ...ask, messages: [{ role: 'user', content: 'say forbiddenword' }] }),
      (error) => {
        assert.equal(error.status, 400);
        assert.equal(error.error.type, 'error');
        assert.equal(error.error.error.type, 'invalid_request_error');
        return true;
      });
  });

  test('the rate limit answers 429 rate_limit_error', async () => {
    const bob = new Anthropic({ baseURL: server.url, apiKey: limitedKey, maxRetries: 0 });
    const first = await bob.messages.create(ask);
    assert.equal(first.usage.output_tokens, 8);
    await assert.rejects(bob.messages.create(ask), (error) => {
      assert.ok(error instanceof Anthropic.RateLimitError, String(error));
      assert.equal(error.status, 429);
      assert.equal(error.error.error.type, 'rate_limit_error');
      return true;
    });
  });
});

describe('Anthropic requests and the exact cache', () => {
  let server;
  let client;
  before(async () => {
    const cached = writeTemp('anthropic-cache.yaml', `version: 1
name: anthropic-cache
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: exact, type: exact_cache, config: {ttl_s: 600, max_entries: 100}}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
`);
    server = await startServer(['--pipeline', cached]);
    client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a repeated request is answered from the cache, whole or streamed, in Anthropic\'s shape', async () => {
    const request = { ...ask, messages: [{ role: 'user', content: 'The lighthouse keeper' }] };
    const first = await client.messages.create(request).withResponse();
    assert.equal(first.response.headers.get('x-chatflow-cache'), 'miss');
    const second = await client.messages.create(request).withResponse();
    assert.equal(second.response.headers.get('x-chatflow-cache'), 'exact');
    assert.notEqual(second.data.id, first.data.id);
    assert.deepEqual(second.data.content, first.data.content);
    assert.equal(second.data.stop_reason, 'max_tokens');
    assert.deepEqual(second.data.usage, first.data.usage);
    let text = '';
    const stream = client.messages.stream(request);
    stream.on('text', (delta) => { text += delta; });
    const final = await stream.finalMessage();
    assert.equal(text, first.data.content[0].text);
    assert.equal(final.stop_reason, 'max_tokens');
  });
});

describe('an Anthropic stream that fails after it began', () => {
  let server;
  before(async () => {
    const serveFile = writeTemp('anthropic-timeout-serve.yaml',
      `server:\n  request_timeout_s: 1\npipeline: ${modelPipeline('anthropic-timeout')}\n`);
    server = await startServer(['--config', serveFile]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('ends with an error event the SDK raises as the API error it is', async () => {
    const client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
    const stream = client.messages.stream({ ...ask, max_tokens: 16000 });
    let text = '';
    stream.on('text', (delta) => { text += delta; });
    await assert.rejects(stream.finalMessage(), (error) => {
      assert.ok(error instanceof Anthropic.APIError, String(error));
      assert.equal(error.error.type, 'error');
      assert.equal(error.error.error.type, 'timeout_error');
      assert.match(error.error.error.message, /deadline|request_timeout_s/);
      return true;
    });
    assert.ok(text.length > 0, 'the stream had begun');
  });
});
