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
