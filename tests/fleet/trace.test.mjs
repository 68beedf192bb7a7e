// OpenTelemetry traces over OTLP/HTTP: an OTLP receiver in the test decodes what chatflow sends
// with the protobuf root of the official @opentelemetry/otlp-transformer package, and the span
// tree is checked: one server span continued from the client's traceparent, a child per stage
// with the port it took, the engine's queue/prefill/decode, the GenAI attributes; a ratio of 0
// exports nothing a parent did not ask for; a collector that is down or hangs fails no request
// and counts what it drops. Over https (openssl-made certificates), a collector the ca_file
// trusts gets the spans and an untrusted one gets nothing, never plain text; a collector
// answering with an oversized trailer is a failed export, and the server stays up.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, post, scratchPath, startServer, testModel, waitFor, writeTemp,
} from '../server/harness.mjs';
import { haveOpenssl, makeCertificates } from './certificates.mjs';

const modules = process.env.CHATFLOW_OTEL_NODE_MODULES;
if (!modules) throw new Error('run through ctest: CHATFLOW_OTEL_NODE_MODULES must be set');
const require = createRequire(import.meta.url);
const otlp = require(path.join(modules, '@opentelemetry/otlp-transformer/build/src/generated/root.js'));
const ExportTraceServiceRequest = otlp.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

// Prometheus text -> { 'name{labels}': value }; /metrics needs an admin key when the pipeline
// authenticates.
async function scrape(url, key) {
  const response = await fetch(`${url}/metrics`, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
  assert.equal(response.status, 200);
  const samples = {};
  for (const line of (await response.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    samples[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return samples;
}

const SERVER = 2;
const INTERNAL = 1;
// The generated root decodes with null defaults: an absent field (a root's parent) is null.
const hex = (bytes) => (bytes ? Buffer.from(bytes).toString('hex') : '');

function anyValue(value) {
  switch (value.value) {
    case 'stringValue': return value.stringValue;
    case 'boolValue': return value.boolValue;
    case 'doubleValue': return value.doubleValue;
    case 'intValue': return typeof value.intValue === 'object' ? value.intValue.toNumber() : value.intValue;
    case 'arrayValue': return value.arrayValue.values.map(anyValue);
    default: return undefined;
  }
}

const attributesOf = (list) => Object.fromEntries(list.map(({ key, value }) => [key, anyValue(value)]));

// An OTLP/HTTP receiver on a free loopback port. `hang`: read requests, never answer. `tls`:
// {certificate, key} files, served over https at localhost.
async function startReceiver({ hang = false, tls } = {}) {
  const spans = [];
  const problems = [];
  const handle = (request, response) => {
    const parts = [];
    request.on('data', (data) => parts.push(data));
    request.on('end', () => {
      if (hang) return;
      if (request.method !== 'POST' || request.url !== '/v1/traces' ||
          request.headers['content-type'] !== 'application/x-protobuf') {
        problems.push(`${request.method} ${request.url} ${request.headers['content-type']}`);
      }
      try {
        const decoded = ExportTraceServiceRequest.decode(Buffer.concat(parts));
        for (const resourceSpans of decoded.resourceSpans) {
          const resource = attributesOf(resourceSpans.resource.attributes);
          for (const scopeSpans of resourceSpans.scopeSpans) {
            for (const span of scopeSpans.spans) {
              spans.push({
                traceId: hex(span.traceId),
                spanId: hex(span.spanId),
                parentSpanId: hex(span.parentSpanId),
                traceState: span.traceState ?? '',
                name: span.name,
                kind: span.kind,
                start: BigInt(span.startTimeUnixNano.toString()),
                end: BigInt(span.endTimeUnixNano.toString()),
                attributes: attributesOf(span.attributes),
                status: span.status ? span.status.code : 0,
                resource,
                scope: scopeSpans.scope.name,
              });
            }
          }
        }
        response.setHeader('Content-Type', 'application/x-protobuf');
        response.end();
      } catch (error) {
        problems.push(`undecodable body: ${error.message}`);
        response.statusCode = 400;
        response.end();
      }
    });
  };
  const server = tls
    ? https.createServer({ cert: fs.readFileSync(tls.certificate), key: fs.readFileSync(tls.key) }, handle)
    : http.createServer(handle);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    spans,
    problems,
    url: tls ? `https://localhost:${server.address().port}/v1/traces`
      : `http://127.0.0.1:${server.address().port}/v1/traces`,
    of: (traceId) => spans.filter((span) => span.traceId === traceId),
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

// A loopback port nobody listens on.
async function closedPort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function serveFile(name, pipeline, tracing) {
  return writeTemp(`${name}-serve.yaml`, `server:
  port: 0
  tracing: {${Object.entries(tracing).map(([key, value]) => `${key}: ${value}`).join(', ')}}
pipeline: ${pipeline}
`);
}

const echoPipeline = (name) => writeTemp(`${name}.yaml`, `version: 1
name: ${name}
stages:
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);

// A chat request; an echo pipeline answers to its own name, the model one to test-model.
const ask = (url, headers = {}, extra = {}) => post(url, '/v1/chat/completions', {
  model: 'test-model', max_tokens: 6, temperature: 0.5, messages: [{ role: 'user', content: 'hello there' }], ...extra,
}, headers);

describe('traces of a model pipeline behind auth and an A/B split', () => {
  let receiver;
  let server;
  let key;
  let adminKey;
  const stageNames = ['auth', 'split', 'tokenize', 'prefill', 'decode', 'detokenize', 'emit'];
  before(async () => {
    receiver = await startReceiver();
    const keys = scratchPath(`trace-keys-${process.pid}.yaml`);
    key = addKey(keys, 'acme', { user: 'ada' });
    adminKey = addKey(keys, 'ops', { roles: ['admin'] });
    const pipeline = writeTemp('trace-model.yaml', `version: 1
name: traced
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: split, type: ab_split, config: {key: user, arms: {a: 50, b: 50}}}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - auth.out -> split
  - split.a -> tokenize
  - split.b -> tokenize
  - tokenize.out -> prefill
  - prefill.out -> decode
  - decode.out -> detokenize
  - detokenize.out -> emit
`);
    server = await startServer(['--config', serveFile('trace-model', pipeline, {
      endpoint: receiver.url, service_name: 'chatflow-under-test', export_interval_ms: 50,
    })]);
  });
  after(async () => {
    if (server) assert.equal((await server.stop()).code, 0);
    await receiver?.close();
  });

  test('a request continued from the client has the whole tree under one server span', async () => {
    const clientTrace = '0af7651916cd43dd8448eb211c80319c';
    const clientSpan = 'b7ad6b7169203331';
    const response = await ask(server.url, {
      Authorization: `Bearer ${key}`,
      traceparent: `00-${clientTrace}-${clientSpan}-01`,
      tracestate: 'vendor=abc',
    });
    assert.equal(response.status, 200, response.text);
    const arm = response.headers.get('x-chatflow-arm');
    assert.ok(arm === 'a' || arm === 'b', `arm ${arm}`);

    const expected = 1 + stageNames.length + 3;
    const spans = await waitFor(() => receiver.of(clientTrace).length >= expected && receiver.of(clientTrace),
      { what: `${expected} spans of the client's trace` });
    assert.deepEqual(receiver.problems, []);
    assert.equal(spans.length, expected, spans.map((span) => span.name).join(', '));

    const servers = spans.filter((span) => span.kind === SERVER);
    assert.equal(servers.length, 1);
    const root = servers[0];
    assert.equal(root.parentSpanId, clientSpan);
    assert.equal(root.traceState, 'vendor=abc');
    assert.equal(root.name, 'POST /v1/chat/completions');
    assert.equal(root.resource['service.name'], 'chatflow-under-test');
    assert.equal(root.scope, 'chatflow');
    const attributes = root.attributes;
    assert.equal(attributes['http.request.method'], 'POST');
    assert.equal(attributes['http.route'], '/v1/chat/completions');
    assert.equal(attributes['http.response.status_code'], 200);
    assert.equal(attributes['client.address'], '127.0.0.1');
    assert.ok(attributes['client.port'] > 0);
    assert.equal(attributes['chatflow.request_id'], response.json.id);
    assert.equal(attributes['chatflow.tenant'], 'acme');
    assert.equal(attributes['chatflow.user'], 'ada');
    assert.equal(attributes['chatflow.ab.arm'], arm);
    assert.equal(attributes['gen_ai.operation.name'], 'chat');
    assert.equal(attributes['gen_ai.request.model'], 'test-model');
    assert.equal(attributes['gen_ai.request.max_tokens'], 6);
    assert.equal(attributes['gen_ai.request.temperature'], 0.5);
    assert.equal(attributes['gen_ai.response.id'], response.json.id);
    assert.deepEqual(attributes['gen_ai.response.finish_reasons'], [response.json.choices[0].finish_reason]);
    assert.equal(attributes['gen_ai.usage.input_tokens'], response.json.usage.prompt_tokens);
    assert.equal(attributes['gen_ai.usage.output_tokens'], response.json.usage.completion_tokens);

    const children = spans.filter((span) => span !== root);
    for (const child of children) {
      assert.equal(child.parentSpanId, root.spanId, `${child.name}'s parent`);
      assert.equal(child.kind, INTERNAL, child.name);
      assert.ok(child.start >= root.start && child.end <= root.end, `${child.name} lies inside the request`);
      assert.ok(child.start <= child.end, child.name);
    }
    assert.equal(new Set(spans.map((span) => span.spanId)).size, spans.length, 'span ids are distinct');

    const byName = Object.fromEntries(children.map((span) => [span.name, span]));
    for (const name of stageNames) assert.ok(byName[name], `a span for stage ${name}`);
    assert.equal(byName.split.attributes['chatflow.stage.type'], 'ab_split');
    assert.equal(byName.split.attributes['chatflow.stage.port'], arm);
    assert.equal(byName.split.attributes['chatflow.annotation.arm'], arm);
    assert.equal(byName.auth.attributes['chatflow.stage.port'], 'out');
    assert.equal(byName.prefill.attributes['chatflow.stage.port'], 'out');
    assert.equal(byName.emit.attributes['chatflow.stage.kind'], 'stream');
    assert.ok(byName.detokenize.attributes['chatflow.stage.calls'] >= response.json.usage.completion_tokens);

    const queue = byName['engine.queue'];
    const prefill = byName['engine.prefill'];
    const decode = byName['engine.decode'];
    assert.ok(queue && prefill && decode, 'the engine spans');
    assert.ok(queue.end <= prefill.start && prefill.end <= decode.start, 'queue, prefill, decode in order');
    assert.equal(prefill.attributes['gen_ai.usage.input_tokens'], response.json.usage.prompt_tokens);
    assert.equal(decode.attributes['gen_ai.usage.output_tokens'], response.json.usage.completion_tokens);
  });

  test('without a traceparent, or with a broken one, a request starts a trace of its own', async () => {
    const before = new Set(receiver.spans.map((span) => span.traceId));
    const broken = 'ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    for (const headers of [{}, { traceparent: broken }, { traceparent: 'nonsense' }]) {
      const response = await ask(server.url, { Authorization: `Bearer ${key}`, ...headers });
      assert.equal(response.status, 200, response.text);
      const root = await waitFor(() => receiver.spans.find((span) =>
        span.kind === SERVER && span.attributes['chatflow.request_id'] === response.json.id), { what: 'its server span' });
      assert.equal(root.parentSpanId, '', 'a root span');
      assert.ok(!before.has(root.traceId), 'a new trace id');
      assert.notEqual(root.traceId, '0af7651916cd43dd8448eb211c80319c');
      before.add(root.traceId);
    }
  });

  test('the exporter counts what it sent', async () => {
    await waitFor(async () => {
      const samples = await scrape(server.url, adminKey);
      return metric(samples, 'chatflow:trace_spans_exported_total') === receiver.spans.length;
    }, { what: 'exported_total to match what the receiver got' });
    const samples = await scrape(server.url, adminKey);
    assert.equal(metric(samples, 'chatflow:trace_spans_dropped_total'), 0);
    assert.equal(metric(samples, 'chatflow:trace_exports_failed_total'), 0);
    assert.deepEqual(receiver.problems, []);
  });
});

// Embeddings and rerank run the pipeline's gates beside its graph (no stage spans): the server
// span still carries the caller, the embedder, the input's tokens and a refusal's code.
describe('traces of /v1/embeddings and /v1/rerank', () => {
  let receiver;
  let server;
  let key;
  before(async () => {
    receiver = await startReceiver();
    const keys = scratchPath(`trace-embeddings-keys-${process.pid}.yaml`);
    key = addKey(keys, 'acme', { user: 'ada' });
    const blocklist = writeTemp('trace-embeddings-blocklist.txt', 'forbiddenword\n');
    const pipeline = writeTemp('trace-embeddings.yaml', `version: 1
name: vectors
resources:
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: screen, type: input_moderation, config: {lists: {${blocklist}: block}}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
    server = await startServer(['--config', serveFile('trace-embeddings', pipeline, {
      endpoint: receiver.url, export_interval_ms: 50,
    })]);
  });
  after(async () => {
    if (server) assert.equal((await server.stop()).code, 0);
    await receiver?.close();
  });

  test('each call is a server span continued from the client, with its tokens or its refusal', async () => {
    const calls = [
      ['/v1/embeddings', { model: 'vectors', input: ['one two', 'three'] }, 200, 'embeddings', 3],
      ['/v1/rerank', { model: 'vectors', query: 'a b', documents: ['c'] }, 200, 'rerank', 3],
      ['/v1/embeddings', { model: 'vectors', input: 'a forbiddenword' }, 400, 'embeddings', 0],
    ];
    for (const [index, [route, body, status, operation, tokens]] of calls.entries()) {
      const trace = `0af7651916cd43dd8448eb211c8031a${index}`;
      const response = await post(server.url, route, body,
        { Authorization: `Bearer ${key}`, traceparent: `00-${trace}-b7ad6b7169203331-01` });
      assert.equal(response.status, status, response.text);
      const [span] = await waitFor(() => receiver.of(trace).length > 0 && receiver.of(trace),
        { what: `the span of ${route}` });
      assert.equal(receiver.of(trace).length, 1);
      assert.equal(span.kind, SERVER);
      assert.equal(span.parentSpanId, 'b7ad6b7169203331');
      assert.equal(span.name, `POST ${route}`);
      assert.equal(span.attributes['http.response.status_code'], status);
      assert.equal(span.attributes['chatflow.tenant'], 'acme');
      assert.equal(span.attributes['chatflow.user'], 'ada');
      assert.equal(span.attributes['gen_ai.operation.name'], operation);
      assert.equal(span.attributes['gen_ai.request.model'], 'vectors');
      assert.equal(span.attributes['gen_ai.usage.input_tokens'], tokens);
      if (status === 400) assert.equal(span.attributes['error.type'], 'content_filter');
    }
    assert.deepEqual(receiver.problems, []);
  });
});

describe('sampling', () => {
  test('a ratio of 0 exports only the traces a sampled parent asked for', async () => {
    const receiver = await startReceiver();
    const server = await startServer(['--config', serveFile('trace-ratio', echoPipeline('trace-ratio'), {
      endpoint: receiver.url, sampling_ratio: 0, export_interval_ms: 50,
    })]);
    try {
      const echo = { model: 'trace-ratio' };
      for (let i = 0; i < 5; i++) assert.equal((await ask(server.url, {}, echo)).status, 200);
      const unsampled = await ask(server.url, { traceparent: '00-11111111111111111111111111111111-2222222222222222-00' }, echo);
      assert.equal(unsampled.status, 200);
      const sampled = await ask(server.url, { traceparent: '00-33333333333333333333333333333333-4444444444444444-01' }, echo);
      assert.equal(sampled.status, 200);
    } finally {
      // Shutting down flushes whatever was queued: after it, nothing more can come.
      assert.equal((await server.stop()).code, 0);
    }
    await receiver.close();
    assert.ok(receiver.spans.length > 0, 'the sampled parent\'s trace arrived');
    for (const span of receiver.spans) assert.equal(span.traceId, '33333333333333333333333333333333');
    const root = receiver.spans.find((span) => span.kind === SERVER);
    assert.equal(root.parentSpanId, '4444444444444444');
    assert.deepEqual(receiver.spans.map((span) => span.name).sort(), ['POST /v1/chat/completions', 'echo', 'emit']);
  });
});

describe('a collector that is not there', () => {
  const concurrent = 24;
  const spansPerRequest = 3;  // the server span, echo, emit

  async function loadAndCount(name, endpoint, extra = {}) {
    const server = await startServer(['--config', serveFile(name, echoPipeline(name), {
      endpoint, export_interval_ms: 50, timeout_ms: 200, ...extra,
    })]);
    try {
      const responses = await Promise.all(Array.from({ length: concurrent }, (_, i) =>
        ask(server.url, {}, { model: name, messages: [{ role: 'user', content: `request ${i}` }] })));
      for (const response of responses) {
        assert.equal(response.status, 200, response.text);
        assert.match(response.json.choices[0].message.content, /^request \d+$/);
      }
      await waitFor(async () => metric(await scrape(server.url), 'chatflow:trace_spans_dropped_total') === concurrent * spansPerRequest,
        { what: 'every span counted as dropped', timeoutMs: 20000 });
      const samples = await scrape(server.url);
      assert.equal(metric(samples, 'chatflow:trace_spans_exported_total'), 0);
      assert.ok(metric(samples, 'chatflow:trace_exports_failed_total') >= 1);
      // Still serving after the drops.
      assert.equal((await ask(server.url, {}, { model: name })).status, 200);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  }

  test('refusing connections: every request succeeds, every span is counted dropped', async () => {
    await loadAndCount('trace-down', `http://127.0.0.1:${await closedPort()}/v1/traces`);
  });

  test('accepting but never answering: the queue fills, requests still succeed', async () => {
    const receiver = await startReceiver({ hang: true });
    try {
      await loadAndCount('trace-hang', receiver.url, { max_queue_spans: 9, max_batch_spans: 3 });
    } finally {
      await receiver.close();
    }
  });
});

describe('one trace from the client through a gateway into its upstream engine', () => {
  let receiver;
  let engine;
  let gateway;
  before(async () => {
    receiver = await startReceiver();
    const enginePipeline = writeTemp('trace-engine.yaml', `version: 1
name: engine
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
${modelStages}  - {name: emit, type: sse_emit}
`);
    engine = await startServer(['--config', serveFile('trace-engine', enginePipeline, {
      endpoint: receiver.url, service_name: 'engine', export_interval_ms: 50,
    })]);
    const gatewayPipeline = writeTemp('trace-gateway.yaml', `version: 1
name: gateway
resources:
  llm: {type: upstream, endpoints: "${engine.url}", model: test-model}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
`);
    gateway = await startServer(['--config', serveFile('trace-gateway', gatewayPipeline, {
      endpoint: receiver.url, service_name: 'gateway', export_interval_ms: 50,
    })]);
  });
  after(async () => {
    if (gateway) assert.equal((await gateway.stop()).code, 0);
    if (engine) assert.equal((await engine.stop()).code, 0);
    await receiver?.close();
  });

  test("the engine's server span is the child of the gateway's client span", async () => {
    const clientTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const clientSpan = '00f067aa0ba902b7';
    const response = await ask(gateway.url, {
      traceparent: `00-${clientTrace}-${clientSpan}-01`,
      'X-Request-Id': 'trace-through-1',
    });
    assert.equal(response.status, 200, response.text);
    assert.equal(response.headers.get('x-request-id'), 'trace-through-1');
    const spans = await waitFor(() => {
      const found = receiver.of(clientTrace);
      const servers = found.filter((span) => span.kind === SERVER);
      return servers.length === 2 && found.some((span) => span.kind === 3) && found;
    }, { what: 'the gateway and engine spans of the client trace' });
    assert.deepEqual(receiver.problems, []);
    const byService = (service) => spans.filter((span) => span.resource['service.name'] === service);
    const gatewayServer = byService('gateway').find((span) => span.kind === SERVER);
    const call = byService('gateway').find((span) => span.kind === 3);
    const engineServer = byService('engine').find((span) => span.kind === SERVER);
    assert.ok(gatewayServer && call && engineServer, spans.map((span) => `${span.resource['service.name']}:${span.name}`).join(', '));

    assert.equal(gatewayServer.parentSpanId, clientSpan);
    assert.equal(call.parentSpanId, gatewayServer.spanId);
    assert.equal(call.name, 'POST /v1/chat/completions');
    assert.equal(call.attributes['server.address'], engine.url);
    assert.equal(call.attributes['http.response.status_code'], 200);
    assert.equal(call.attributes['gen_ai.request.model'], 'test-model');
    assert.equal(engineServer.parentSpanId, call.spanId, 'the engine continues the call span');
    // Both ends name the request by the caller's id; the call lies within the gateway's span
    // (one process's clock: the engine's times are not compared with the gateway's).
    assert.equal(gatewayServer.attributes['chatflow.request_id'], 'trace-through-1');
    assert.equal(engineServer.attributes['chatflow.request_id'], 'trace-through-1');
    assert.ok(call.start >= gatewayServer.start && call.end <= gatewayServer.end);
    // The engine's own stages hang under its server span.
    const engineStages = byService('engine').filter((span) => span.kind === INTERNAL && span.parentSpanId === engineServer.spanId);
    assert.ok(engineStages.some((span) => span.name.includes('decode')), engineStages.map((span) => span.name).join(', '));
  });
});

describe('a collector over https', { skip: !haveOpenssl && 'openssl is not installed' }, () => {
  let certificates;
  let receiver;
  before(async () => {
    certificates = makeCertificates(scratchPath('trace-tls'));
    receiver = await startReceiver({ tls: { certificate: certificates.serverCertificate, key: certificates.serverKey } });
  });
  after(async () => { await receiver?.close(); });

  test('with a ca_file that trusts it, the spans arrive', async () => {
    const server = await startServer(['--config', serveFile('trace-https', echoPipeline('trace-https'), {
      endpoint: receiver.url, export_interval_ms: 50, ca_file: certificates.ca,
    })]);
    try {
      const response = await ask(server.url, {}, { model: 'trace-https' });
      assert.equal(response.status, 200, response.text);
      const root = await waitFor(() => receiver.spans.find((span) =>
        span.kind === SERVER && span.attributes['chatflow.request_id'] === response.json.id), { what: 'its server span' });
      assert.equal(root.name, 'POST /v1/chat/completions');
      const samples = await scrape(server.url);
      assert.equal(metric(samples, 'chatflow:trace_exports_failed_total'), 0);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('an untrusted certificate: nothing is sent, every export fails and is counted, requests succeed', async () => {
    const before = receiver.spans.length;
    for (const [name, ca] of [['trace-https-other', certificates.otherCa], ['trace-https-system', undefined]]) {
      const server = await startServer(['--config', serveFile(name, echoPipeline(name), {
        endpoint: receiver.url, export_interval_ms: 50, timeout_ms: 1000, ...(ca ? { ca_file: ca } : {}),
      })]);
      try {
        for (let i = 0; i < 3; i++) assert.equal((await ask(server.url, {}, { model: name })).status, 200);
        await waitFor(async () => metric(await scrape(server.url), 'chatflow:trace_spans_dropped_total') === 9,
          { what: 'the three requests\' spans counted as dropped' });
        assert.ok(metric(await scrape(server.url), 'chatflow:trace_exports_failed_total') >= 1);
        assert.equal(metric(await scrape(server.url), 'chatflow:trace_spans_exported_total'), 0);
        // spdlog's warnings go to standard output.
        await waitFor(() => /certificate verify failed/.test(server.stdout()), { what: `the reason logged (${server.stdout()})` });
      } finally {
        assert.equal((await server.stop()).code, 0);
      }
    }
    assert.equal(receiver.spans.length, before, 'the untrusted collector received nothing');
    assert.deepEqual(receiver.problems, [], 'and no plain-text request either');
  });

  test('a ca_file for an http:// endpoint, or one that cannot be read, is refused at its line', async () => {
    const plain = serveFile('trace-https-plain', echoPipeline('trace-https-plain'), {
      endpoint: 'http://127.0.0.1:4318/v1/traces', ca_file: certificates.ca,
    });
    await assert.rejects(startServer(['--config', plain]), /trace-https-plain-serve\.yaml:3:\d+: error: server\.tracing\.ca_file is set, but .* is not https:\/\//);
    const missing = serveFile('trace-https-missing', echoPipeline('trace-https-missing'), {
      endpoint: receiver.url, ca_file: '/nonexistent/ca.pem',
    });
    await assert.rejects(startServer(['--config', missing]), /server\.tracing\.ca_file '\/nonexistent\/ca\.pem' cannot be read/);
  });
});

describe('a collector answering with an oversized trailer', () => {
  test('each export fails and is counted; the server stays up and serves', async () => {
    let answered = 0;
    const collector = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        answered += 1;
        // Chunked, with one trailer field of 70 KiB: Beast's parser throws on it when nothing
        // bounds the read, which ended the exporter's thread and so the process.
        response.writeHead(200, { 'Content-Type': 'application/x-protobuf', Trailer: 'X-Big' });
        response.write('');
        response.addTrailers({ 'X-Big': 'a'.repeat(70 * 1024) });
        response.end();
      });
    });
    await new Promise((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const name = 'trace-trailer';
    const server = await startServer(['--config', serveFile(name, echoPipeline(name), {
      endpoint: `http://127.0.0.1:${collector.address().port}/v1/traces`, export_interval_ms: 50, timeout_ms: 2000,
    })]);
    try {
      for (let round = 0; round < 3; round++) {
        assert.equal((await ask(server.url, {}, { model: name })).status, 200);
        await waitFor(async () => metric(await scrape(server.url), 'chatflow:trace_exports_failed_total') === round + 1,
          { what: `export ${round + 1} counted as failed` });
      }
      assert.equal(answered, 3);
      assert.equal(metric(await scrape(server.url), 'chatflow:trace_spans_dropped_total'), 9);
      assert.match(server.stdout(), /header or trailer is longer than/);
    } finally {
      assert.equal((await server.stop()).code, 0, 'the server was still running and stopped cleanly');
      collector.closeAllConnections();
      collector.close();
    }
  });
});
