// A client that goes away cancels its request through the pipeline, and the engine frees the
// request's KV blocks: read from /metrics, which reports the engine's own counters.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { metric, modelPipeline, openStream, scrape, startServer, waitFor } from './harness.mjs';

const long = {
  model: 'test-model',
  messages: [{ role: 'user', content: 'Tell me a very long story' }],
  max_tokens: 16000,
  ignore_eos: true,
  stream: true,
};

describe('client disconnects', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('disconnect')]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  async function engineIdle() {
    const samples = await scrape(server.url);
    const running = metric(samples, 'chatflow:num_requests_running');
    const blocks = metric(samples, 'chatflow:kv_cache_sequence_blocks');
    const inFlight = metric(samples, 'chatflow:requests_in_flight');
    return running === 0 && blocks === 0 && inFlight === 0 ? samples : undefined;
  }

  test('after 2 tokens: the request is cancelled and its blocks freed', async () => {
    const stream = openStream(server.port, '/v1/chat/completions', long);
    await stream.waitEvents(3); // the role event, then two tokens
    const busy = await scrape(server.url);
    assert.equal(metric(busy, 'chatflow:num_requests_running'), 1);
    assert.ok(metric(busy, 'chatflow:kv_cache_sequence_blocks') > 0, 'the sequence holds blocks');
    stream.socket.destroy();
    const closed = Date.now();

    // The 499 and the failure are counted as the exchange closes, just after the pipeline's end.
    const idle = await waitFor(async () => {
      const samples = await engineIdle();
      const counted = samples && metric(samples, 'chatflow:http_requests_total', 'status="499"') === 1 &&
        metric(samples, 'chatflow:request_failure_total') === 1;
      return counted ? samples : undefined;
    }, { what: 'the engine to free the blocks and the failure to be counted' });
    const generated = metric(idle, 'chatflow:engine_generated_tokens_total');
    const afterClose = generated - metric(busy, 'chatflow:engine_generated_tokens_total');
    console.log(`blocks freed ${Date.now() - closed} ms after the close (20 ms polling); ` +
      `${afterClose} tokens generated after the last scrape, ${generated} in all`);
    assert.ok(generated < long.max_tokens / 4, `generation stopped early (${generated} tokens)`);
    assert.equal(metric(idle, 'chatflow:http_requests_total', 'status="499"'), 1);
    assert.equal(metric(idle, 'chatflow:request_failure_total'), 1);
    // The engine generates nothing more once idle.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(metric(await scrape(server.url), 'chatflow:engine_generated_tokens_total'), generated);
  });

  test('before the first token: cancelled as well', async () => {
    const before = metric(await scrape(server.url), 'chatflow:engine_generated_tokens_total');
    const stream = openStream(server.port, '/v1/chat/completions', long);
    await new Promise((resolve) => stream.socket.on('connect', resolve));
    await new Promise((resolve) => setTimeout(resolve, 1));
    stream.socket.destroy();
    const idle = await waitFor(async () => {
      const samples = await engineIdle();
      return samples && metric(samples, 'chatflow:http_requests_total', 'status="499"') === 2 ? samples : undefined;
    }, { what: 'the second cancellation' });
    const generated = metric(idle, 'chatflow:engine_generated_tokens_total') - before;
    assert.ok(generated < long.max_tokens / 4, `generation stopped early (${generated} tokens)`);
  });

  test('the server still serves after disconnects', async () => {
    const stream = openStream(server.port, '/v1/chat/completions', { ...long, max_tokens: 5 });
    const response = await stream.ended;
    assert.equal(response.status, 200);
    assert.match(response.body, /"finish_reason":"length"/);
    assert.ok(response.body.endsWith('data: [DONE]\n\n'));
  });
});
