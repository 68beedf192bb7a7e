// What an operator watching /metrics and the access log sees after a few requests.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { getJson, metric, modelPipeline, openStream, postJson, scrape, sseData, startServer, waitFor } from './harness.mjs';

describe('metrics and access log', () => {
  let server;
  const usages = [];
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('watched')]);
    for (let i = 0; i < 3; i++) {
      const stream = openStream(server.port, '/v1/chat/completions', {
        model: 'test-model', messages: [{ role: 'user', content: `Story number ${i}` }],
        max_tokens: 5, ignore_eos: true, stream: true, stream_options: { include_usage: true },
      });
      const events = sseData((await stream.ended).body);
      usages.push(JSON.parse(events.at(-2)).usage);
    }
    await postJson(server.url, '/v1/chat/completions', { model: 'test-model', messages: [] }); // a 400
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('request histograms and counters', async () => {
    const samples = await scrape(server.url);
    const count = (name) => metric(samples, `chatflow:${name}_count`, 'pipeline="watched"');
    for (const name of ['time_to_first_token_seconds', 'e2e_request_latency_seconds',
      'request_time_per_output_token_seconds', 'request_queue_time_seconds',
      'request_prefill_time_seconds', 'request_decode_time_seconds']) {
      assert.equal(count(name), 3, name);
    }
    assert.ok(count('inter_token_latency_seconds') >= 3);
    for (const stage of ['tokenize', 'prefill', 'decode', 'detokenize', 'emit']) {
      assert.equal(metric(samples, 'chatflow:stage_duration_seconds_count', `stage="${stage}"`), 3, stage);
    }
    assert.equal(metric(samples, 'chatflow:request_success_total', 'finished_reason="length"'), 3);
    assert.equal(metric(samples, 'chatflow:request_success_total', 'finished_reason="stop"'), 0);
    assert.equal(metric(samples, 'chatflow:generation_tokens_total'), 15);
    assert.equal(metric(samples, 'chatflow:prompt_tokens_total'),
      usages.reduce((sum, usage) => sum + usage.prompt_tokens, 0));
    assert.equal(metric(samples, 'chatflow:http_requests_total', 'endpoint="/v1/chat/completions"', 'status="200"'), 3);
    assert.equal(metric(samples, 'chatflow:http_requests_total', 'endpoint="/v1/chat/completions"', 'status="400"'), 1);
    assert.equal(metric(samples, 'chatflow:engine_generated_tokens_total', 'model_name="test-model"'), 15);
    assert.equal(metric(samples, 'chatflow:num_requests_running'), 0);
    assert.ok(metric(samples, 'chatflow:kv_cache_blocks') > 0);
  });

  test('where the model computes: start-up line, /health and gauges', async () => {
    assert.match(server.stdout(), /^  engine: test-model on cpu \(.+\); weights \d+\.\d MiB, KV pool up to \d+\.\d MiB$/m);
    const health = await getJson(server.url, '/health');
    assert.equal(health.status, 200);
    const backend = health.body.backend['test-model'];
    assert.equal(backend.name, 'cpu');
    assert.ok(backend.device.length > 0);
    assert.ok(backend.memory_bytes.weights > 0);
    assert.ok(backend.memory_bytes.kv_pool > 0);
    assert.ok(backend.memory_bytes.workspace > 0, 'three requests ran, so the workspace is sized');
    const samples = await scrape(server.url);
    assert.equal(metric(samples, 'chatflow:engine_backend_info', 'model_name="test-model"', 'backend="cpu"'), 1);
    assert.equal(metric(samples, 'chatflow:engine_backend_memory_bytes', 'model_name="test-model"', 'kind="weights"'),
      backend.memory_bytes.weights);
    assert.equal(metric(samples, 'chatflow:engine_backend_memory_bytes', 'model_name="test-model"', 'kind="kv_pool"'),
      backend.memory_bytes.kv_pool);
  });

  test('histogram buckets are cumulative and end at the count', async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    assert.match(text, /# TYPE chatflow:time_to_first_token_seconds histogram/);
    const buckets = [...text.matchAll(/^chatflow:e2e_request_latency_seconds_bucket\{pipeline="watched",le="([^"]+)"\} (\d+)$/gm)];
    assert.ok(buckets.length > 5);
    for (let i = 1; i < buckets.length; i++) assert.ok(Number(buckets[i][2]) >= Number(buckets[i - 1][2]));
    assert.equal(buckets.at(-1)[1], '+Inf');
    assert.equal(Number(buckets.at(-1)[2]), 3);
  });

  test('one access-log line per API request', async () => {
    const lines = await waitFor(() => {
      const text = fs.existsSync(server.accessLog) ? fs.readFileSync(server.accessLog, 'utf8') : '';
      const all = text.trim().split('\n').filter(Boolean);
      return all.length >= 4 ? all : undefined;
    }, { what: 'four access-log lines' });
    const records = lines.map((line) => JSON.parse(line));
    const streams = records.filter((record) => record.status === 200);
    assert.equal(streams.length, 3);
    for (const record of streams) {
      assert.match(record.id, /^chatcmpl-/);
      assert.equal(record.path, '/v1/chat/completions');
      assert.equal(record.completion_tokens, 5);
      assert.equal(record.finish_reason, 'length');
      assert.equal(record.stream, true);
      assert.ok(record.ttft_ms > 0 && record.ttft_ms <= record.total_ms);
      assert.match(record.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
    const refused = records.find((record) => record.status === 400);
    assert.ok(refused);
    assert.equal(refused.finish_reason, null);
  });
});
