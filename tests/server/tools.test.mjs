// Tool calling and structured outputs as a client sees them, with the official openai client,
// ajv as an independent JSON Schema validator and zod through the SDK's own helper. The model is
// the random-weight test model: only constrained decoding can make it write a valid call or a
// value of a schema, so every valid answer here is the grammar's doing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { modelPipeline, modelStages, runChatflow, scratchPath, sourceDir, startServer, writeTemp } from './harness.mjs';

const require = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`);
const OpenAI = require('openai');
const { zodResponseFormat } = require('openai/helpers/zod');
const { z } = require('zod');
// Draft 2020-12, the draft OpenAI's structured outputs (prefixItems, $defs) follow.
const Ajv = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

function assertValid(schema, value, what) {
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${JSON.stringify(value)} is not valid: ${ajv.errorsText(validate.errors)}`);
}

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 12 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
      },
      required: ['city', 'unit', 'days'],
      additionalProperties: false,
    },
    strict: true,
  },
};
const clock = {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: {
      type: 'object',
      properties: { zone: { type: 'string', pattern: '^[A-Z][a-z]{1,8}/[A-Z][a-z]{1,8}$' } },
      required: ['zone'],
      additionalProperties: false,
    },
  },
};
const toolsByName = { get_weather: weather, get_time: clock };

function assertCall(call, allowed) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.ok(allowed.includes(call.function.name), `unexpected function ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  assertValid(toolsByName[call.function.name].function.parameters, args, call.function.name);
  return args;
}

// Accumulates a streamed answer as the SDK's documentation does, checking OpenAI's shape: the
// first piece of each call has index, id, type and name; later ones only arguments.
async function collectStream(stream) {
  const calls = [];
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) finish = choice.finish_reason;
    content += choice.delta?.content ?? '';
    for (const piece of choice.delta?.tool_calls ?? []) {
      if (!calls[piece.index]) {
        assert.ok(piece.id && piece.type === 'function' && piece.function?.name,
          `the first piece of call ${piece.index} lacks id, type or name: ${JSON.stringify(piece)}`);
        calls[piece.index] = { id: piece.id, type: 'function', function: { name: piece.function.name, arguments: '' } };
      } else {
        assert.equal(piece.id, undefined, 'a later piece repeats the id');
      }
      calls[piece.index].function.arguments += piece.function?.arguments ?? '';
    }
  }
  return { calls, content, finish };
}

describe('tool calls and structured outputs (generic format: a model without a tools template)', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('tools')]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('tool_choice "required": the SDK parses a valid call of an offered function', async () => {
    for (const seed of [1, 2, 3]) {
      const answer = await client.chat.completions.create({
        model: 'test-model', seed, max_tokens: 400, parallel_tool_calls: false,
        messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
        tools: [weather, clock], tool_choice: 'required',
      });
      const choice = answer.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, null);
      assert.equal(choice.message.tool_calls.length, 1);
      assertCall(choice.message.tool_calls[0], ['get_weather', 'get_time']);
    }
  });

  test('a named function, streamed: a first delta with index, id, type and name, then arguments', async () => {
    const stream = await client.chat.completions.create({
      model: 'test-model', seed: 7, max_tokens: 400, stream: true,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [weather, clock], tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const { calls, content, finish } = await collectStream(stream);
    assert.equal(finish, 'tool_calls');
    assert.equal(content, '');
    assert.ok(calls.length >= 1);
    for (const call of calls) assert.equal(call.function.name, 'get_weather');
    for (const call of calls) assertCall(call, ['get_weather']);
  });

  test('parallel calls: each one valid, each its own id', async () => {
    const answer = await client.chat.completions.create({
      model: 'test-model', seed: 11, max_tokens: 800,
      messages: [{ role: 'user', content: 'Weather and time?' }],
      tools: [weather, clock], tool_choice: 'required',
    });
    const calls = answer.choices[0].message.tool_calls;
    assert.ok(calls.length >= 1);
    for (const call of calls) assertCall(call, ['get_weather', 'get_time']);
    assert.equal(new Set(calls.map((call) => call.id)).size, calls.length);
  });

  test('the follow-up with the tool result renders and answers', async () => {
    const first = await client.chat.completions.create({
      model: 'test-model', seed: 3, max_tokens: 400, parallel_tool_calls: false,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [weather], tool_choice: 'required',
    });
    const call = first.choices[0].message.tool_calls[0];
    const followUp = await client.chat.completions.create({
      model: 'test-model', seed: 3, max_tokens: 8,
      messages: [
        { role: 'user', content: 'What is the weather in Paris?' },
        first.choices[0].message,
        { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
      ],
      tools: [weather], tool_choice: 'none',
    });
    assert.equal(typeof followUp.choices[0].message.content, 'string');
    assert.equal(followUp.choices[0].message.tool_calls, undefined);
    // The result reached the prompt: the same conversation without it is shorter.
    const without = await client.chat.completions.create({
      model: 'test-model', seed: 3, max_tokens: 1,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }, first.choices[0].message],
    });
    assert.ok(followUp.usage.prompt_tokens > without.usage.prompt_tokens + 5);
  });

  test('a tool message needs tool_call_id; an unknown role and a malformed call are 400s', async () => {
    const bad = [
      [{ role: 'tool', content: 'x' }, /tool_call_id/],
      [{ role: 'function', content: 'x' }, /role/],
      [{ role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{}' } }] }, /\.id/],
    ];
    for (const [message, pattern] of bad) {
      await assert.rejects(
        client.chat.completions.create({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }, message] }),
        (error) => error.status === 400 && pattern.test(error.message));
    }
  });

  test('client.beta.chat.completions.parse with zodResponseFormat returns an object that validates', async () => {
    const Event = z.object({
      name: z.string().max(10),
      day: z.enum(['monday', 'tuesday', 'friday']),
      attendees: z.array(z.string().max(6)).max(3),
      confirmed: z.boolean(),
      priority: z.number().int().min(1).max(5),
      room: z.string().max(4).nullable(),
    });
    for (const seed of [1, 2]) {
      const completion = await client.beta.chat.completions.parse({
        model: 'test-model', seed, max_tokens: 600,
        messages: [{ role: 'user', content: 'Plan a meeting.' }],
        response_format: zodResponseFormat(Event, 'event'),
      });
      const parsed = completion.choices[0].message.parsed;
      assert.ok(parsed, `no parsed value: ${completion.choices[0].message.content}`);
      assert.deepEqual(Event.parse(parsed), parsed);
    }
  });

  test('response_format json_object: the answer is a JSON object', async () => {
    const answer = await client.chat.completions.create({
      model: 'test-model', seed: 5, max_tokens: 300, response_format: { type: 'json_object' },
      messages: [{ role: 'user', content: 'JSON please' }],
    });
    if (answer.choices[0].finish_reason === 'stop') {
      const value = JSON.parse(answer.choices[0].message.content);
      assert.equal(typeof value, 'object');
      assert.ok(!Array.isArray(value) && value !== null);
    } else {
      // An object with no bound on its keys may run to max_tokens: then it is cut, and says so.
      assert.equal(answer.choices[0].finish_reason, 'length');
    }
  });

  test('20 generated schemas x 5 seeds: every answer parses and validates (ajv)', async () => {
    const schemas = Array.from({ length: 20 }, (_, i) => generatedSchema(i + 1));
    for (const [index, schema] of schemas.entries()) {
      const answers = await Promise.all([1, 2, 3, 4, 5].map((seed) => client.chat.completions.create({
        model: 'test-model', seed, max_tokens: 1500,
        messages: [{ role: 'user', content: `Schema ${index}` }],
        response_format: { type: 'json_schema', json_schema: { name: `s${index}`, schema, strict: true } },
      })));
      for (const [seed, answer] of answers.entries()) {
        const text = answer.choices[0].message.content;
        assert.equal(answer.choices[0].finish_reason, 'stop', `schema ${index} seed ${seed + 1} was cut: ${text}`);
        let value;
        assert.doesNotThrow(() => { value = JSON.parse(text); }, `schema ${index} seed ${seed + 1}: ${text}`);
        assertValid(schema, value, `schema ${index} seed ${seed + 1} (${JSON.stringify(schema)})`);
      }
    }
  });

  test('a schema keyword that cannot be enforced is a 400 naming it', async () => {
    const cases = [
      [{ type: 'object', properties: { a: { type: 'string', not: { const: 'x' } } } }, 'not'],
      [{ type: 'array', items: { type: 'integer' }, uniqueItems: true }, 'uniqueItems'],
      [{ type: 'string', pattern: '(a)\\1' }, 'pattern'],
      [{ type: 'object', patternProperties: { '^x': { type: 'string' } } }, 'patternProperties'],
      [{ type: 'number', multipleOf: 3 }, 'multipleOf'],
    ];
    for (const [schema, keyword] of cases) {
      await assert.rejects(
        client.chat.completions.create({
          model: 'test-model', messages: [{ role: 'user', content: 'x' }],
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
        }),
        (error) => error.status === 400 && error.code === 'unsupported_schema' &&
          error.message.includes(`'${keyword}'`) && error.param === 'response_format.json_schema.schema',
        keyword);
    }
    await assert.rejects(
      client.chat.completions.create({
        model: 'test-model', messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } } } }],
      }),
      (error) => error.status === 400 && error.message.includes("'multipleOf'") &&
        error.param === 'tools[0].function.parameters');
  });

  test('fields chatflow does not act on are 400s naming them', async () => {
    const cases = [
      [{ functions: [{ name: 'f' }] }, 'functions'],
      [{ logit_bias: { 1: 5 } }, 'logit_bias'],
      [{ tool_choice: 'auto' }, 'tool_choice'],
      [{ tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
      [{ response_format: { type: 'xml' } }, 'response_format.type'],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: {}, colour: 'red' } }] }, 'tools[0].function.colour'],
      [{ messages: [{ role: 'user', content: 'x', tool_call_id: 'c' }] }, 'messages[0].tool_call_id'],
      [{ tools: [{ type: 'function', function: { name: 'f', strict: 'yes' } }] }, 'tools[0].function.strict'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.chat.completions.create({ model: 'test-model', messages: [{ role: 'user', content: 'x' }], ...extra }),
        (error) => error.status === 400 && error.param === param && error.message.includes(`'${param}'`),
        param);
    }
  });

  test('requests with different schemas batched together each follow their own', async () => {
    const schemas = [
      { type: 'object', properties: { n: { type: 'integer', minimum: -5, maximum: 5 } }, required: ['n'], additionalProperties: false },
      { type: 'array', items: { enum: ['x', 'y'] }, minItems: 2, maxItems: 2 },
      { type: 'string', pattern: '^[0-9]{3}-[0-9]{2}$' },
      { anyOf: [{ type: 'boolean' }, { type: 'null' }] },
    ];
    const answers = await Promise.all(schemas.flatMap((schema, i) => [1, 2].map((seed) => client.chat.completions.create({
      model: 'test-model', seed, max_tokens: 200,
      messages: [{ role: 'user', content: `batch ${i}` }],
      response_format: { type: 'json_schema', json_schema: { name: `b${i}`, schema } },
    }).then((answer) => [schema, answer]))));
    for (const [schema, answer] of answers) {
      assertValid(schema, JSON.parse(answer.choices[0].message.content), JSON.stringify(schema));
    }
  });
});

describe('tool calls parsed from text as each family writes them (echo stands in for the model)', () => {
  const formats = {
    hermes: 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "Europe/Oslo"}}\n</tool_call>',
    llama3: '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius", "days": 2}}; {"name": "get_time", "parameters": {"zone": "Europe/Oslo"}}',
    mistral: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius", "days": 2}}, {"name": "get_time", "arguments": {"zone": "Europe/Oslo"}}]',
    generic: '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius", "days": 2}}, {"name": "get_time", "arguments": {"zone": "Europe/Oslo"}}]}',
  };
  for (const [format, text] of Object.entries(formats)) {
    test(`${format}: whole and streamed a word at a time, the same two calls`, async () => {
      const file = writeTemp(`echo-${format}.yaml`, `version: 1
name: echo
stages:
  - {name: echo, type: echo, config: {words_per_chunk: 1, tool_format: ${format}}}
  - {name: emit, type: sse_emit}
`);
      const server = await startServer(['--pipeline', file]);
      try {
        const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
        const request = { model: 'echo', messages: [{ role: 'user', content: text }], tools: [weather, clock] };
        const answer = await client.chat.completions.create(request);
        const message = answer.choices[0].message;
        assert.equal(answer.choices[0].finish_reason, 'tool_calls');
        assert.equal(message.content, format === 'hermes' ? 'Checking.' : null);
        assert.deepEqual(message.tool_calls.map((call) => call.function.name), ['get_weather', 'get_time']);
        assert.deepEqual(message.tool_calls.map((call) => JSON.parse(call.function.arguments)),
          [{ city: 'Oslo', unit: 'celsius', days: 2 }, { zone: 'Europe/Oslo' }]);
        if (format === 'mistral') for (const call of message.tool_calls) assert.match(call.id, /^[A-Za-z0-9]{9}$/);
        const streamed = await collectStream(await client.chat.completions.create({ ...request, stream: true }));
        assert.equal(streamed.finish, 'tool_calls');
        assert.equal(streamed.content.trim(), format === 'hermes' ? 'Checking.' : '');
        assert.deepEqual(streamed.calls.map((call) => [call.function.name, call.function.arguments]),
          message.tool_calls.map((call) => [call.function.name, call.function.arguments]));
        // Text that only looks like the start of a call stays text.
        const plain = await client.chat.completions.create({ ...request, messages: [{ role: 'user', content: 'a <tool_ b {"x": 1}' }] });
        assert.equal(plain.choices[0].message.content, 'a <tool_ b {"x": 1}');
        assert.equal(plain.choices[0].finish_reason, 'stop');
      } finally {
        await server.stop();
      }
    });
  }
});

describe('structured outputs and the exact cache', () => {
  let server;
  before(async () => {
    const file = writeTemp('tools-cache.yaml', `version: 1
name: tools-cache
resources:
  llm: {type: gguf_model, path: "${process.env.CHATFLOW_TEST_MODEL}", name: test-model}
stages:
  - {name: cache, type: exact_cache}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - cache.hit -> emit
`);
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the schema is part of the key: another schema misses, the same one hits', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ask = (schema) => client.chat.completions.create({
      model: 'test-model', seed: 1, temperature: 0, max_tokens: 100,
      messages: [{ role: 'user', content: 'same question' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
    }).withResponse();
    const integer = { type: 'integer', minimum: 0, maximum: 99 };
    const word = { enum: ['alpha', 'beta'] };
    const first = await ask(integer);
    assert.equal(first.response.headers.get('x-chatflow-cache'), 'miss');
    const other = await ask(word);
    assert.equal(other.response.headers.get('x-chatflow-cache'), 'miss');
    assert.ok(['"alpha"', '"beta"'].includes(other.data.choices[0].message.content));
    const again = await ask(integer);
    assert.equal(again.response.headers.get('x-chatflow-cache'), 'exact');
    assert.equal(again.data.choices[0].message.content, first.data.choices[0].message.content);
  });

  test('a cached tool call comes back as a tool call', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const ask = () => client.chat.completions.create({
      model: 'test-model', seed: 2, temperature: 0, max_tokens: 300, parallel_tool_calls: false,
      messages: [{ role: 'user', content: 'weather, cached' }], tools: [weather], tool_choice: 'required',
    }).withResponse();
    const first = await ask();
    const again = await ask();
    assert.equal(again.response.headers.get('x-chatflow-cache'), 'exact');
    assert.equal(again.data.choices[0].finish_reason, 'tool_calls');
    assert.equal(again.data.choices[0].message.tool_calls[0].function.arguments,
      first.data.choices[0].message.tool_calls[0].function.arguments);
  });
});

// A model whose template writes Hermes/Qwen <tool_call> blocks: Qwen2.5's published template over
// the llama-spm vocabulary (both from ../shared).
const qwenTemplate = path.join(sourceDir, '../shared/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja');
const spmVocab = path.join(sourceDir, '../shared/models/vocab/ggml-vocab-llama-spm.gguf');
const shared = fs.existsSync(qwenTemplate) && fs.existsSync(spmVocab);

describe('tool calls through a template that shows tools (Qwen2.5, Hermes format)', { skip: shared ? false : 'needs ../shared/models (templates, vocab)' }, () => {
  let server;
  let client;
  before(async () => {
    const model = scratchPath('spm-tools.gguf');
    const made = runChatflow(['make-model', '--dim', '64', '--layers', '1', '--heads', '2', '--ffn', '128',
      '--context', '4096', '--vocab-from', spmVocab, '-o', model]);
    assert.equal(made.status, 0, made.stderr);
    const file = writeTemp('tools-qwen.yaml', `version: 1
name: tools-qwen
resources:
  llm: {type: gguf_model, path: "${model}", name: qwen-like, chat_template: "${qwenTemplate}"}
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

  test('required: a <tool_call> block parsed into tool_calls, whole and streamed', async () => {
    const request = {
      model: 'qwen-like', seed: 4, max_tokens: 400, parallel_tool_calls: false,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [weather, clock], tool_choice: 'required',
    };
    const answer = await client.chat.completions.create(request);
    assert.equal(answer.choices[0].finish_reason, 'tool_calls');
    const whole = answer.choices[0].message.tool_calls;
    assert.equal(whole.length, 1);
    assertCall(whole[0], ['get_weather', 'get_time']);
    const { calls, finish } = await collectStream(await client.chat.completions.create({ ...request, stream: true }));
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, whole[0].function.name);
    assert.equal(calls[0].function.arguments, whole[0].function.arguments);
  });

  test('the tool result goes back through the template', async () => {
    const first = await client.chat.completions.create({
      model: 'qwen-like', seed: 4, max_tokens: 400, parallel_tool_calls: false,
      messages: [{ role: 'user', content: 'Weather?' }], tools: [weather], tool_choice: 'required',
    });
    const call = first.choices[0].message.tool_calls[0];
    const followUp = await client.chat.completions.create({
      model: 'qwen-like', seed: 4, max_tokens: 4,
      messages: [{ role: 'user', content: 'Weather?' }, first.choices[0].message,
        { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 degrees' }],
      tools: [weather],
    });
    assert.equal(followUp.object, 'chat.completion');
    assert.ok(followUp.usage.prompt_tokens > first.usage.prompt_tokens);
  });
});

// Schemas of the kinds strict structured outputs use, bounded so a random model ends: strings
// have maxLength, arrays maxItems, objects no extra keys.
function generatedSchema(seed) {
  let state = seed * 2654435761 % 4294967296;
  const random = () => {
    state = (state * 1664525 + 1013904223) % 4294967296;
    return state / 4294967296;
  };
  const pick = (list) => list[Math.floor(random() * list.length)];
  const defs = {};
  const leaf = () => pick([
    () => ({ type: 'string', maxLength: 1 + Math.floor(random() * 8) }),
    () => ({ type: 'string', minLength: 2, maxLength: 5 }),
    () => ({ type: 'string', pattern: '^[a-f0-9]{2,6}$' }),
    () => ({ type: 'string', format: 'date' }),
    () => ({ type: 'string', format: 'uuid' }),
    () => ({ enum: ['red', 'green', 'blue', 3, null] }),
    () => ({ const: 'fixed' }),
    () => ({ type: 'integer', minimum: -20, maximum: 300 }),
    () => ({ type: 'integer', exclusiveMinimum: 0, maximum: 9 }),
    () => ({ type: 'number', minimum: 0, maximum: 1 }),
    () => ({ type: 'boolean' }),
    () => ({ type: ['integer', 'null'], minimum: 0, maximum: 50 }),
    () => ({ anyOf: [{ type: 'string', maxLength: 3 }, { type: 'integer', minimum: 0, maximum: 9 }] }),
  ])();
  const node = (depth) => {
    if (depth >= 2 || random() < 0.45) return leaf();
    return pick([
      () => {
        const count = 1 + Math.floor(random() * 4);
        const properties = {};
        for (let i = 0; i < count; i++) properties[`p${i}`] = node(depth + 1);
        const required = Object.keys(properties).filter(() => random() < 0.7);
        return { type: 'object', properties, required, additionalProperties: false };
      },
      () => ({ type: 'array', items: node(depth + 1), minItems: Math.floor(random() * 2), maxItems: 2 + Math.floor(random() * 2) }),
      () => ({ type: 'array', prefixItems: [leaf(), leaf()], items: false }),
      () => {
        const name = `d${Object.keys(defs).length}`;
        defs[name] = node(depth + 1);
        return { $ref: `#/$defs/${name}` };
      },
    ])();
  };
  const properties = { id: { type: 'integer', minimum: 1, maximum: 1000 }, body: node(0), extra: node(1) };
  const schema = { type: 'object', properties, required: ['id', 'body'], additionalProperties: false };
  if (Object.keys(defs).length) schema.$defs = defs;
  return schema;
}
