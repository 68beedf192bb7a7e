// OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) with the official
// openai npm client, through a pipeline with authentication, a rate limit and input moderation in
// front of the model: the same gates chat completions pass, answers as response objects and typed
// stream events, errors in OpenAI's shape. The model is the random-weight test model: at
// temperature 0 it answers the same on either route, and only constrained decoding makes it write
// valid JSON or a valid call.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import {
  addKey, gatedModelPipeline, modelPipeline, post, scratchPath, sessionPipeline, startServer, weatherArguments,
  writeTemp,
} from './harness.mjs';

const require = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`);
const OpenAI = require('openai');

const keysFile = scratchPath('responses-keys.yaml');
const blocklist = writeTemp('responses-blocklist.txt', 'forbiddenword\n');

const pipeline = () => gatedModelPipeline('responses', keysFile, blocklist);

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: weatherArguments,
};

// A short answer that always runs to max_output_tokens (ignore_eos is chatflow's, as vLLM's).
const ask = {
  model: 'test-model',
  instructions: 'You are a storyteller.',
  input: 'Once upon a time',
  max_output_tokens: 8,
  temperature: 0,
  ignore_eos: true,
};

// The text of a response's message items.
function textOf(response) {
  return response.output.filter((item) => item.type === 'message')
    .flatMap((item) => item.content).map((part) => part.text).join('');
}

// The same conversation through /v1/chat/completions.
async function completion(server, key, messages, extra = {}) {
  const { status, json } = await post(server.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 8, temperature: 0, ignore_eos: true, messages, ...extra,
  }, { Authorization: `Bearer ${key}` });
  assert.equal(status, 200, JSON.stringify(json));
  return json;
}

// An error body exactly as OpenAI shapes it.
function assertOpenAIError(json, { type = 'invalid_request_error', param, code, message }) {
  assert.deepEqual(Object.keys(json), ['error']);
  assert.deepEqual(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(json.error.type, type);
  if (param !== undefined) assert.equal(json.error.param, param);
  if (code !== undefined) assert.equal(json.error.code, code);
  if (message) assert.match(json.error.message, message);
}

describe('the official openai client on the Responses API', () => {
  let server;
  let key;
  let otherKey;
  let limitedKey;
  let client;
  let other;
  before(async () => {
    key = addKey(keysFile, 'acme', { user: 'alice' });
    otherKey = addKey(keysFile, 'acme', { user: 'bob' });
    limitedKey = addKey(keysFile, 'acme', { user: 'carol', rpm: 1 });
    server = await startServer(['--pipeline', pipeline()]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    other = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: otherKey, maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('responses.create answers a response object, as chat completions would answer', async () => {
    const response = await client.responses.create(ask);
    assert.match(response.id, /^resp_[0-9a-f]{24}$/);
    assert.equal(response.object, 'response');
    assert.equal(response.model, 'test-model');
    // max_output_tokens ended it: incomplete, as OpenAI says.
    assert.equal(response.status, 'incomplete');
    assert.deepEqual(response.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(response.error, null);
    assert.equal(response.instructions, ask.instructions);
    assert.equal(response.max_output_tokens, 8);
    assert.equal(response.store, true);
    assert.equal(response.previous_response_id, null);
    assert.deepEqual(response.text, { format: { type: 'text' } });
    assert.equal(response.output.length, 1);
    const [message] = response.output;
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.match(message.id, /^msg_/);
    assert.equal(message.content.length, 1);
    assert.equal(message.content[0].type, 'output_text');
    assert.ok(message.content[0].text.length > 0);
    assert.equal(response.output_text, message.content[0].text);
    assert.equal(response.usage.output_tokens, 8);
    assert.ok(response.usage.input_tokens > 0);
    assert.equal(response.usage.total_tokens, response.usage.input_tokens + 8);

    const chat = await completion(server, key, [
      { role: 'system', content: ask.instructions }, { role: 'user', content: ask.input }]);
    assert.equal(chat.choices[0].message.content, response.output_text);
    assert.equal(chat.usage.prompt_tokens, response.usage.input_tokens);
  });

  test('input as items (a developer message, input_text parts) is the same conversation', async () => {
    const asString = await client.responses.create(ask);
    const { instructions: _, ...rest } = ask;
    const asItems = await client.responses.create({
      ...rest,
      input: [
        { role: 'developer', content: ask.instructions },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: ask.input }] },
      ],
    });
    assert.equal(asItems.output_text, asString.output_text);
    assert.equal(asItems.usage.input_tokens, asString.usage.input_tokens);
    assert.equal(asItems.instructions, null);
    // A different input is a different prompt: the items are read, not ignored.
    const longer = await client.responses.create({
      ...rest,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }, { type: 'input_text', text: 'a dragon' }] }],
    });
    assert.ok(longer.usage.input_tokens > 0);
    assert.notEqual(longer.usage.input_tokens, asString.usage.input_tokens);
  });

  test('text.format json_schema and json_object answer parseable JSON', async () => {
    const schema = {
      type: 'object',
      properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
      required: ['name', 'age'],
      additionalProperties: false,
    };
    const response = await client.responses.create({
      model: 'test-model', input: 'Describe a person', max_output_tokens: 200, temperature: 0,
      text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
    });
    assert.equal(response.status, 'completed', response.output_text);
    const value = JSON.parse(response.output_text);
    assert.deepEqual(Object.keys(value).sort(), ['age', 'name']);
    assert.equal(typeof value.name, 'string');
    assert.ok(value.name.length <= 10);
    assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 120);
    assert.deepEqual(response.text.format, { type: 'json_schema', name: 'person', schema, strict: true });

    const object = await client.responses.create({
      model: 'test-model', input: 'Any object', max_output_tokens: 300, temperature: 0,
      text: { format: { type: 'json_object' } },
    });
    assert.equal(object.status, 'completed', object.output_text);
    const parsed = JSON.parse(object.output_text);
    assert.equal(typeof parsed, 'object');
    assert.ok(parsed !== null && !Array.isArray(parsed));
  });

  test('a function_call item, and its function_call_output answered in the next turn', async () => {
    const question = { role: 'user', content: 'What is the weather in Paris?' };
    const calling = {
      model: 'test-model', max_output_tokens: 300, temperature: 0, tools: [weather],
      tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false,
    };
    const call = await client.responses.create({ ...calling, input: [question] });
    assert.equal(call.status, 'completed');
    const calls = call.output.filter((item) => item.type === 'function_call');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.match(calls[0].call_id, /^call_[A-Za-z0-9]{24}$/);
    assert.match(calls[0].id, /^fc_/);
    assert.equal(calls[0].status, 'completed');
    const args = JSON.parse(calls[0].arguments);
    assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
    assert.ok(args.city.length <= 12);
    assert.ok(['celsius', 'fahrenheit'].includes(args.unit));
    assert.deepEqual(call.tool_choice, { type: 'function', name: 'get_weather' });
    assert.equal(call.tools[0].name, 'get_weather');

    // The stream carries the same call as function_call_arguments events.
    const stream = client.responses.stream({ ...calling, input: [question] });
    const argumentEvents = [];
    stream.on('event', (event) => {
      if (event.type.startsWith('response.function_call_arguments.')) argumentEvents.push(event);
    });
    const streamed = await stream.finalResponse();
    assert.deepEqual(argumentEvents.map((event) => event.type),
      ['response.function_call_arguments.delta', 'response.function_call_arguments.done']);
    assert.equal(argumentEvents[1].arguments, calls[0].arguments);
    assert.equal(streamed.status, 'completed');
    assert.equal(streamed.output.find((item) => item.type === 'function_call').arguments, calls[0].arguments);

    // The output passed back as input, with the call's result.
    const result = { type: 'function_call_output', call_id: calls[0].call_id, output: '12 degrees' };
    const answer = await client.responses.create({
      model: 'test-model', max_output_tokens: 6, temperature: 0, ignore_eos: true, tools: [weather],
      input: [question, ...call.output, result],
    });
    assert.equal(answer.output[0].type, 'message');
    assert.ok(answer.usage.input_tokens > call.usage.input_tokens);
    // previous_response_id stands for the same items: the same prompt, the same answer.
    const continued = await client.responses.create({
      model: 'test-model', max_output_tokens: 6, temperature: 0, ignore_eos: true, tools: [weather],
      previous_response_id: call.id, input: [result],
    });
    assert.equal(continued.previous_response_id, call.id);
    assert.equal(continued.usage.input_tokens, answer.usage.input_tokens);
    assert.equal(continued.output_text, answer.output_text);
  });

  test('previous_response_id continues a conversation; GET returns a kept response, DELETE removes it', async () => {
    const first = await client.responses.create({ ...ask, instructions: undefined });
    const second = await client.responses.create({ ...ask, instructions: undefined, previous_response_id: first.id, input: 'And then?' });
    assert.equal(second.previous_response_id, first.id);
    const chat = await completion(server, key, [
      { role: 'user', content: ask.input },
      { role: 'assistant', content: first.output_text },
      { role: 'user', content: 'And then?' },
    ]);
    assert.equal(second.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(second.output_text, chat.choices[0].message.content);

    const kept = await client.responses.retrieve(first.id);
    assert.equal(kept.id, first.id);
    assert.equal(kept.status, 'incomplete');
    assert.deepEqual(kept.output, first.output);
    assert.deepEqual(kept.usage, first.usage);

    // Another user of the same tenant: as if it did not exist.
    await assert.rejects(other.responses.retrieve(first.id), (error) => {
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal(error.status, 404);
      assert.equal(error.error.type, 'invalid_request_error');
      assert.equal(error.error.code, 'response_not_found');
      return true;
    });
    await assert.rejects(other.responses.del(first.id), (error) => error.status === 404);
    await assert.rejects(
      other.responses.create({ ...ask, previous_response_id: first.id }),
      (error) => error.status === 400 && error.code === 'previous_response_not_found' &&
        error.param === 'previous_response_id');

    const deleted = await fetch(`${server.url}/v1/responses/${first.id}`, {
      method: 'DELETE', headers: { Authorization: `Bearer ${key}` },
    });
    assert.equal(deleted.status, 200);
    assert.deepEqual(await deleted.json(), { id: first.id, object: 'response', deleted: true });
    await assert.rejects(client.responses.retrieve(first.id), (error) => error.status === 404);
    await assert.rejects(client.responses.del(first.id), (error) => error.status === 404);
    await assert.rejects(
      client.responses.create({ ...ask, previous_response_id: first.id }),
      (error) => error.status === 400 && error.code === 'previous_response_not_found');
    // The second one is still there, with the client's SDK call too.
    await client.responses.del(second.id);
    await assert.rejects(client.responses.retrieve(second.id), (error) => error.status === 404);
  });

  test('store: false keeps nothing', async () => {
    const response = await client.responses.create({ ...ask, store: false });
    assert.equal(response.store, false);
    await assert.rejects(client.responses.retrieve(response.id), (error) => error.status === 404);
    await assert.rejects(
      client.responses.create({ ...ask, previous_response_id: response.id }),
      (error) => error.status === 400 && error.code === 'previous_response_not_found');
  });

  test('responses.stream: the typed events in order, then the final response', async () => {
    const whole = await client.responses.create(ask);
    const stream = client.responses.stream(ask);
    const events = [];
    let text = '';
    // A copy: the SDK builds its snapshot in the objects of the events it read.
    stream.on('event', (event) => events.push(structuredClone(event)));
    stream.on('response.output_text.delta', (event) => { text += event.delta; });
    const final = await stream.finalResponse();
    const types = events.map((event) => event.type);
    assert.deepEqual(types.slice(0, 4),
      ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-5), ['response.output_text.delta', 'response.output_text.done',
      'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    assert.ok(types.slice(4, -4).every((type) => type === 'response.output_text.delta'));
    assert.deepEqual(events.map((event) => event.sequence_number), events.map((_, index) => index));
    assert.equal(events[0].response.status, 'in_progress');
    assert.deepEqual(events[0].response.output, []);
    const id = events[0].response.id;
    assert.match(id, /^resp_/);
    // Every event names the one item, and the item keeps its id to the end.
    const itemId = events[2].item.id;
    for (const event of events.slice(3, -2)) assert.equal(event.item_id, itemId);
    assert.equal(events.at(-2).item.id, itemId);
    assert.equal(text, whole.output_text);
    assert.equal(events.at(-4).text, whole.output_text);
    const last = events.at(-1).response;
    assert.equal(last.id, id);
    assert.equal(last.status, 'incomplete');
    assert.deepEqual(last.output, [events.at(-2).item]);
    assert.deepEqual(last.usage, whole.usage);
    // The SDK's snapshot: the text the deltas built.
    assert.equal(final.id, id);
    assert.equal(textOf(final), whole.output_text);
    // A streamed response is kept as a whole one is.
    const kept = await client.responses.retrieve(id);
    assert.deepEqual(kept, last);
  });

  test('a stream that completes ends with response.completed, which the SDK returns', async () => {
    const stream = client.responses.stream({
      model: 'test-model', input: 'A number', max_output_tokens: 50, temperature: 0,
      text: { format: { type: 'json_schema', name: 'n', schema: { type: 'integer', minimum: 0, maximum: 999 } } },
    });
    const types = [];
    stream.on('event', (event) => types.push(event.type));
    const final = await stream.finalResponse();
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(final.status, 'completed');
    assert.equal(final.output[0].status, 'completed');
    const value = JSON.parse(textOf(final));
    assert.ok(Number.isInteger(value) && value >= 0 && value <= 999);
  });

  test('bad input is a 400 in OpenAI\'s error shape naming the field', async () => {
    const auth = { Authorization: `Bearer ${key}` };
    const cases = [
      [{ model: 'test-model' }, { param: 'input', message: /'input' is required/ }],
      [{ model: 'test-model', input: 42 }, { param: 'input', message: /'input' must be a string or an array/ }],
      [{ model: 'test-model', input: [] }, { param: 'input' }],
      [{ model: 'test-model', input: 'x', temperature: 'hot' }, { param: 'temperature', message: /must be a number/ }],
      [{ model: 'test-model', input: 'x', max_output_tokens: 0 }, { param: 'max_output_tokens' }],
      [{ model: 'test-model', input: 'x', tools: [{ type: 'web_search_preview' }] },
        { param: 'tools[0].type', code: 'unsupported_tool', message: /web_search_preview/ }],
      [{ model: 'test-model', input: 'x', tools: [weather], tool_choice: { type: 'file_search' } },
        { param: 'tool_choice.type', code: 'unsupported_tool' }],
      [{ model: 'test-model', input: 'x', background: true }, { param: 'background' }],
      [{ model: 'test-model', input: 'x', include: ['file_search_call.results'] },
        { param: 'include[0]', message: /file_search_call\.results/ }],
      [{ model: 'test-model', input: 'x', reasoning: { effort: 'high' } },
        { param: 'reasoning', code: 'unsupported_parameter' }],
      [{ model: 'test-model', input: 'x', truncation: 'auto' }, { param: 'truncation' }],
      [{ model: 'test-model', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] },
        { param: 'input[0].content[0].type', code: 'unsupported_content', message: /input_image/ }],
      [{ model: 'test-model', input: [{ type: 'web_search_call', id: 'ws_1' }] },
        { param: 'input[0].type', code: 'unsupported_content' }],
      [{ model: 'test-model', input: [{ type: 'function_call_output', output: 'x' }] },
        { param: 'input[0].call_id' }],
      [{ model: 'test-model', input: 'x', text: { format: { type: 'json_schema', schema: {} } } },
        { param: 'text.format.name' }],
      [{ model: 'test-model', input: 'x', previous_response_id: 'resp_nothing' },
        { param: 'previous_response_id', code: 'previous_response_not_found' }],
    ];
    for (const [body, expected] of cases) {
      const { status, json } = await post(server.url, '/v1/responses', body, auth);
      assert.equal(status, 400, JSON.stringify(body));
      assertOpenAIError(json, expected);
    }
    const unknown = await post(server.url, '/v1/responses', { model: 'gpt-none', input: 'x' }, auth);
    assert.equal(unknown.status, 404);
    assertOpenAIError(unknown.json, { param: 'model', code: 'model_not_found' });
    // Through the SDK: the classes its users catch.
    await assert.rejects(client.responses.create({ ...ask, model: 'gpt-none' }),
      (error) => error instanceof OpenAI.NotFoundError && error.code === 'model_not_found');
    await assert.rejects(client.responses.create({ ...ask, tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'tools[0].type');
    const unknownId = await fetch(`${server.url}/v1/responses/resp_nothing`, { headers: auth });
    assert.equal(unknownId.status, 404);
    assertOpenAIError(await unknownId.json(), { code: 'response_not_found' });
  });

  test('a bad key is a 401 before the body is read', async () => {
    const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.responses.create(ask), (error) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
      assert.equal(error.status, 401);
      return true;
    });
    // Not even a malformed body is read without credentials.
    const malformed = await fetch(`${server.url}/v1/responses`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{',
    });
    assert.equal(malformed.status, 401);
    assertOpenAIError(await malformed.json(), { type: 'authentication_error' });
    const invalid = await post(server.url, '/v1/responses', { model: 'test-model', input: 42 },
      { Authorization: 'Bearer sk-not-a-key' });
    assert.equal(invalid.status, 401);
    const get = await fetch(`${server.url}/v1/responses/resp_x`);
    assert.equal(get.status, 401);
    const wrongMethod = await fetch(`${server.url}/v1/responses/resp_x`, { method: 'PUT', headers: { Authorization: `Bearer ${key}` } });
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.get('allow'), 'GET, DELETE, OPTIONS');
  });

  test('the pipeline\'s gates apply: moderation and the rate limit', async () => {
    await assert.rejects(client.responses.create({ ...ask, input: 'say forbiddenword' }), (error) => {
      assert.equal(error.status, 400);
      assert.equal(error.error.type, 'invalid_request_error');
      return true;
    });
    const carol = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: limitedKey, maxRetries: 0 });
    const firstOne = await carol.responses.create(ask);
    assert.equal(firstOne.usage.output_tokens, 8);
    await assert.rejects(carol.responses.create(ask), (error) => {
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      assert.equal(error.status, 429);
      return true;
    });
  });
});

describe('a Responses stream that fails after it began', () => {
  let server;
  before(async () => {
    const serveFile = writeTemp('responses-timeout-serve.yaml',
      `server:\n  request_timeout_s: 1\npipeline: ${modelPipeline('responses-timeout')}\n`);
    server = await startServer(['--config', serveFile]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('ends with an error event the SDK raises as an API error', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = client.responses.stream({ ...ask, max_output_tokens: 16000 });
    let text = '';
    stream.on('response.output_text.delta', (event) => { text += event.delta; });
    await assert.rejects(stream.finalResponse(), (error) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.match(error.message, /deadline|request_timeout_s/);
      return true;
    });
    assert.ok(text.length > 0, 'the stream had begun');
  });
});

describe('kept responses in the pipeline\'s history store', () => {
  const database = scratchPath(`responses-history-${process.pid}.db`);
  const historyKeys = scratchPath('responses-history-keys.yaml');
  let server;
  let aliceKey;
  let bobKey;
  const start = async () => {
    server = await startServer(['--pipeline', sessionPipeline('responses-history', historyKeys, database)]);
  };
  const clientOf = (key) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
  before(async () => {
    aliceKey = addKey(historyKeys, 'acme', { user: 'alice' });
    bobKey = addKey(historyKeys, 'acme', { user: 'bob' });
    await start();
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a kept response survives a restart: GET, previous_response_id and DELETE after it', async () => {
    const first = await clientOf(aliceKey).responses.create({ ...ask, instructions: undefined });
    const streamed = clientOf(aliceKey).responses.stream({ ...ask, instructions: undefined, input: 'A dragon' });
    const second = await streamed.finalResponse();
    const { code } = await server.stop();
    assert.equal(code, 0);
    await start();

    const alice = clientOf(aliceKey);
    const kept = await alice.responses.retrieve(first.id);
    assert.equal(kept.id, first.id);
    assert.deepEqual(kept.output, first.output);
    assert.deepEqual(kept.usage, first.usage);
    assert.equal((await alice.responses.retrieve(second.id)).output_text, second.output_text);

    // The conversation it ended continues in the new process, as chat completions would answer it.
    const next = await alice.responses.create({
      ...ask, instructions: undefined, previous_response_id: first.id, input: 'And then?',
    });
    const chat = await completion(server, aliceKey, [
      { role: 'user', content: ask.input },
      { role: 'assistant', content: first.output_text },
      { role: 'user', content: 'And then?' },
    ]);
    assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(next.output_text, chat.choices[0].message.content);

    // Owned as sessions are: another user of the tenant sees none of it.
    const bob = clientOf(bobKey);
    await assert.rejects(bob.responses.retrieve(first.id), (error) => error.status === 404 &&
      error.code === 'response_not_found');
    await assert.rejects(bob.responses.del(first.id), (error) => error.status === 404);
    await assert.rejects(bob.responses.create({ ...ask, previous_response_id: first.id }),
      (error) => error.status === 400 && error.code === 'previous_response_not_found');

    await alice.responses.del(first.id);
    await assert.rejects(alice.responses.retrieve(first.id), (error) => error.status === 404);
    await assert.rejects(alice.responses.create({ ...ask, previous_response_id: first.id }),
      (error) => error.status === 400 && error.code === 'previous_response_not_found');
    assert.equal((await alice.responses.retrieve(next.id)).id, next.id);
  });
});
