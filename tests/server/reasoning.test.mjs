// Reasoning models as a client sees them, with the official openai client: text inside
// <think>...</think> arrives as reasoning_content (streamed and not), the rest as content,
// output moderation masks personal data in the reasoning too, and an exact-cache hit splits the
// same way. The echo stage stands in for a reasoning model (reasoning_format: deepseek).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { redisServerBinary, startRedis } from '../fleet/redis_server.mjs';
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

// An OpenAI-compatible engine behind an `upstream`: its reasoning_content and content reach the
// client as the engine wrote them, byte for byte, whatever they hold ("</think>", "<tool_call>",
// leading whitespace), whichever comes first, and only the engine's structured tool calls are
// calls. A cached answer (in the process and in Redis) replays the same.
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};
const clockTool = { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } };
const thought = (text) => ({ choices: [{ index: 0, delta: { reasoning_content: text } }] });
const said = (text) => ({ choices: [{ index: 0, delta: { content: text } }] });
const called = (name, args) => ({
  choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...(name ? { id: 'call_engine', type: 'function' } : {}), function: { ...(name ? { name } : {}), arguments: args } }] } }],
});
const finished = (reason) => ({ choices: [{ index: 0, delta: {}, finish_reason: reason }] });

// An engine on a raw socket answering every request with a 200 event stream of `events`,
// which it then ends.
async function scriptedEngine(events) {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.once('data', () => {
      let body = '';
      for (const event of [...events, '[DONE]']) {
        body += `data: ${typeof event === 'string' ? event : JSON.stringify(event)}\n\n`;
      }
      socket.end(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

function gateway(name, engine, { resources = '', stages = '', edges = '' } = {}) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: upstream, endpoints: "${engine.url}", model: test-model, health: {path: ""}}
${resources}stages:
${stages}  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
${edges}`);
}

// What a client gets, streamed and whole: reasoning_content, content, tool calls, finish reason.
async function answers(client, request) {
  const whole = await client.chat.completions.create({ ...request, stream: false }).withResponse();
  const message = whole.data.choices[0].message;
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const streamed = { reasoning: '', content: '', calls: [], finish: null };
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    streamed.reasoning += choice.delta.reasoning_content ?? '';
    streamed.content += choice.delta.content ?? '';
    for (const call of choice.delta.tool_calls ?? []) {
      if (call.id) streamed.calls[call.index] = { name: call.function.name, arguments: '' };
      streamed.calls[call.index].arguments += call.function.arguments ?? '';
    }
    if (choice.finish_reason) streamed.finish = choice.finish_reason;
  }
  return {
    cache: whole.response.headers.get('x-chatflow-cache'),
    whole: {
      reasoning: message.reasoning_content,
      content: message.content,
      calls: (message.tool_calls ?? []).map((call) => ({ name: call.function.name, arguments: call.function.arguments })),
      finish: whole.data.choices[0].finish_reason,
    },
    streamed,
  };
}

describe('reasoning_content from an upstream engine', () => {
  const engines = [];
  const servers = [];
  after(async () => {
    for (const server of servers) assert.equal((await server.stop()).code, 0);
    for (const engine of engines) engine.close();
  });
  async function start(script, options) {
    const engine = await scriptedEngine(script);
    engines.push(engine);
    const server = await startServer(['--pipeline', gateway(`reasoning-upstream-${engines.length}`, engine, options)]);
    servers.push(server);
    return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  }
  const ask = (extra = {}) => ({
    model: 'test-model', temperature: 0, messages: [{ role: 'user', content: 'Think aloud.' }], ...extra,
  });

  // Reasoning that would close a thinking block or open a call, leading whitespace, content
  // holding call markup, and reasoning again after the content began.
  const reasoningParts = ['\n\n  The tag </thi', 'nk> ends a block; <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', ' so</think>'];
  const contentParts = ['  Answer: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', ' then </think> done.\n'];
  const lateReasoning = ' A late thought.';
  const script = [thought(reasoningParts[0]), thought(reasoningParts[1]), thought(reasoningParts[2]),
    said(contentParts[0]), thought(lateReasoning), said(contentParts[1]), finished('stop')];

  test('the engine\'s reasoning and content arrive as it wrote them, streamed and whole', async () => {
    const client = await start(script);
    const expected = {
      reasoning: reasoningParts.join('') + lateReasoning,
      content: contentParts.join(''),
      calls: [],
      finish: 'stop',
    };
    for (const request of [ask(), ask({ tools: [weatherTool, clockTool] })]) {
      const { whole, streamed } = await answers(client, request);
      assert.deepEqual(whole, expected);
      assert.deepEqual(streamed, expected);
    }
  });

  test('reasoning that starts after the content is still reasoning_content', async () => {
    const client = await start([said('Hello.'), thought(' First </think> then.'), said(' Bye.'), finished('stop')]);
    const { whole, streamed } = await answers(client, ask());
    const expected = { reasoning: ' First </think> then.', content: 'Hello. Bye.', calls: [], finish: 'stop' };
    assert.deepEqual(whole, expected);
    assert.deepEqual(streamed, expected);
  });

  test('only the engine\'s own tool calls are calls, beside content that writes call markup', async () => {
    const client = await start([thought('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'),
      said('Checking <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'),
      called('get_weather', '{"city": '), called(undefined, '"Oslo"}'), finished('tool_calls')]);
    const { whole, streamed } = await answers(client, ask({ tools: [weatherTool, clockTool] }));
    const expected = {
      reasoning: '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
      content: 'Checking <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
      calls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }],
      finish: 'tool_calls',
    };
    assert.deepEqual(whole, expected);
    assert.deepEqual(streamed, expected);
  });

  test('an exact-cache hit replays the reasoning, content and calls', async () => {
    const client = await start([...script.slice(0, -1), called('get_weather', '{"city": "Oslo"}'), finished('tool_calls')], {
      stages: '  - {name: cache, type: exact_cache}\n', edges: 'edges:\n  - cache.hit -> emit\n',
    });
    const request = ask({ tools: [weatherTool, clockTool] });
    const first = await answers(client, request);
    const second = await answers(client, request);
    assert.equal(first.cache, 'miss');
    assert.equal(second.cache, 'exact');
    const expected = {
      reasoning: reasoningParts.join('') + lateReasoning,
      content: contentParts.join(''),
      calls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }],
      finish: 'tool_calls',
    };
    for (const { whole, streamed } of [first, second]) {
      assert.deepEqual(whole, expected);
      assert.deepEqual(streamed, expected);
    }
  });

  test('an answer kept in Redis replays the same', { skip: redisServerBinary() ? false : 'no redis-server' }, async () => {
    const redis = await startRedis();
    try {
      const client = await start([...script.slice(0, -1), called('get_weather', '{"city": "Oslo"}'), finished('tool_calls')], {
        resources: `  shared: {type: redis, url: "${redis.url}"}\n`,
        stages: '  - {name: cache, type: exact_cache, config: {store: shared}}\n',
        edges: 'edges:\n  - cache.hit -> emit\n',
      });
      const request = ask({ tools: [weatherTool, clockTool] });
      const first = await answers(client, request);
      const second = await answers(client, request);
      assert.equal(second.cache, 'exact');
      assert.deepEqual(second.whole, first.whole);
      assert.deepEqual(second.streamed, first.streamed);
      assert.equal(second.whole.reasoning, reasoningParts.join('') + lateReasoning);
      assert.equal(second.whole.content, contentParts.join(''));
      assert.deepEqual(second.whole.calls, [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }]);
    } finally {
      await redis.close();
    }
  });
});
