// chatflow bench as a client of servers that are not chatflow: one that closes each kept-alive
// connection after its answer without saying so (llama-server does after a few requests) gets
// every request answered, each sent again once on a new connection, not counted as failed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

const chatflow = process.env.CHATFLOW_BIN;

function runBench(args) {
  return new Promise((resolve) => {
    const child = spawn(chatflow, ['bench', ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (data) => { stdout += data; });
    child.stderr.on('data', (data) => { stderr += data; });
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

function completionEvents(text) {
  const chunk = (fields) => `data: ${JSON.stringify({ id: 'c1', object: 'text_completion', model: 'm', ...fields })}\n\n`;
  return chunk({ choices: [{ index: 0, text, finish_reason: null }] }) +
    chunk({ choices: [{ index: 0, text: '', finish_reason: 'length' }], usage: { prompt_tokens: 3, completion_tokens: 1 } }) +
    'data: [DONE]\n\n';
}

describe('chatflow bench against another server', () => {
  let server;
  let url;
  let connections = 0;
  let answered = 0;
  before(async () => {
    server = http.createServer((request, response) => {
      if (request.url === '/v1/models') {
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }));
        return;
      }
      request.resume();
      request.on('end', () => {
        response.writeHead(200, { 'content-type': 'text/event-stream', connection: 'keep-alive' });
        response.end(completionEvents('hi'), () => {
          answered += 1;
          // The answer said keep-alive; the connection goes anyway.
          request.socket.destroy();
        });
      });
    });
    server.on('connection', () => { connections += 1; });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${server.address().port}`;
  });
  after(() => new Promise((resolve) => server.close(resolve)));

  test('a connection closed between answers costs a new connection, not a failed request', async () => {
    const result = await runBench(['--url', url, '--endpoint', 'completions', '--model', 'm',
      '--requests', '12', '--concurrency', '2', '--max-tokens', '1', '--json']);
    assert.equal(result.status, 0, result.stderr);
    const report = JSON.parse(result.stdout);
    assert.equal(report.successful_requests, 12, result.stdout);
    assert.equal(report.failed_requests, 0, result.stdout);
    assert.equal(answered, 12);
    assert.equal(connections, 12, 'each answer on a connection of its own');
  });
});

// A chat answer stream of one token, with the headers `headers` (x-chatflow-cache, ...).
function chatAnswer(response, headers = {}) {
  const chunk = (fields) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'm', ...fields })}\n\n`;
  response.writeHead(200, { 'content-type': 'text/event-stream', ...headers });
  response.end(chunk({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] }) +
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'length' }], usage: { prompt_tokens: 3, completion_tokens: 1 } }) +
    'data: [DONE]\n\n');
}

// A server answering every request with `answer(request, body, response)`; it keeps what it was
// sent (request headers and bodies) and when.
async function recordingServer(answer) {
  const seen = [];
  const server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (data) => { body += data; });
    request.on('end', () => {
      seen.push({ at: Date.now(), url: request.url, authorization: request.headers.authorization, body });
      answer(request, body, response);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, seen, url: `http://127.0.0.1:${server.address().port}` };
}

function runBenchWithEnvironment(args, environment) {
  return new Promise((resolve) => {
    const child = spawn(chatflow, ['bench', ...args], { env: { ...process.env, ...environment } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (data) => { stdout += data; });
    child.stderr.on('data', (data) => { stderr += data; });
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

describe('chatflow bench as operators run it', () => {
  test('without a key, a server that wants one gets advice about the key, not about --model', async () => {
    const { server, url } = await recordingServer((request, body, response) => {
      response.writeHead(401, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: { message: 'missing API key', type: 'authentication_error' } }));
    });
    try {
      const result = await runBenchWithEnvironment(['--url', url, '--requests', '1'], { CHATFLOW_API_KEY: '' });
      assert.equal(result.status, 1);
      assert.match(result.stderr, /answered 401: the server wants an API key: pass --api-key KEY or set CHATFLOW_API_KEY/);
      assert.doesNotMatch(result.stderr, /pass --model/);
    } finally {
      server.close();
    }
  });

  test('reads the key from CHATFLOW_API_KEY, and sends none when there is none', async () => {
    const { server, seen, url } = await recordingServer((request, body, response) => {
      if (request.url === '/v1/models') {
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }));
        return;
      }
      chatAnswer(response);
    });
    try {
      const withKey = await runBenchWithEnvironment(['--url', url, '--requests', '2', '--json'], { CHATFLOW_API_KEY: 'sk-from-env' });
      assert.equal(withKey.status, 0, withKey.stderr);
      assert.deepEqual(seen.map((request) => request.authorization), Array(3).fill('Bearer sk-from-env'));
      seen.length = 0;
      const withoutKey = await runBenchWithEnvironment(['--url', url, '--model', 'm', '--requests', '1', '--json'], { CHATFLOW_API_KEY: '' });
      assert.equal(withoutKey.status, 0, withoutKey.stderr);
      assert.equal(seen[0].authorization, undefined);
    } finally {
      server.close();
    }
  });

  test('a 429 is counted as rate limited, and the next request waits its Retry-After', async () => {
    const { server, seen, url } = await recordingServer((request, body, response) => {
      if (seen.length === 1) {
        response.writeHead(429, { 'content-type': 'application/json', 'retry-after': '2' });
        response.end(JSON.stringify({ error: { message: 'rate limit', type: 'rate_limit_exceeded' } }));
        return;
      }
      chatAnswer(response);
    });
    try {
      const result = await runBenchWithEnvironment(['--url', url, '--model', 'm', '--requests', '3', '--concurrency', '1', '--json'], {});
      assert.equal(result.status, 0, result.stderr);
      const report = JSON.parse(result.stdout);
      assert.equal(report.rate_limited_requests, 1, result.stdout);
      assert.equal(report.successful_requests, 2, result.stdout);
      assert.equal(report.failed_requests, 0, result.stdout);
      assert.equal(seen.length, 3);
      const waited = seen[1].at - seen[0].at;
      assert.ok(waited >= 1900, `the request after the 429 came ${waited} ms later, not after Retry-After's 2 s`);
    } finally {
      server.close();
    }
  });

  test('sends a distinct prompt per request unless --repeat-prompts, and warns when caches answered', async () => {
    const { server, seen, url } = await recordingServer((request, body, response) => {
      chatAnswer(response, { 'x-chatflow-cache': seen.length > 1 ? 'semantic' : 'miss' });
    });
    const prompts = () => new Set(seen.map((request) => JSON.parse(request.body).messages[0].content));
    try {
      const distinct = await runBenchWithEnvironment(['--url', url, '--model', 'm', '--requests', '12', '--concurrency', '1', '--json'], {});
      assert.equal(distinct.status, 0, distinct.stderr);
      assert.equal(prompts().size, 12);
      assert.equal(JSON.parse(distinct.stdout).cached_answers, 11);
      assert.match(distinct.stderr, /warning: 11 of 12 answers came from a cache \(x-chatflow-cache\): these figures measure the cache, not the model/);

      seen.length = 0;
      const repeated = await runBenchWithEnvironment(['--url', url, '--model', 'm', '--requests', '12', '--concurrency', '1', '--repeat-prompts', '--json'], {});
      assert.equal(repeated.status, 0, repeated.stderr);
      assert.equal(prompts().size, 8, 'the eight story openings in turn');
    } finally {
      server.close();
    }
  });
});
