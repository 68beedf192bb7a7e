// The chat page's and dashboard's own modules, in Node: the SSE parser on every way an event
// can be cut, Prometheus text and histogram quantiles, the streaming-markdown helpers, the
// typewriter's pace.
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const src = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'web', 'src');
const load = (name) => import(pathToFileURL(path.join(src, name)).href);
const { SseParser, interpretEvent } = await load('sse.js');
const prom = await load('prometheus.js');
const { closeOpen, BlockSplitter } = await load('markdown_stream.js');
const { Typewriter } = await load('typewriter.js');

function parseAll(pieces) {
  const events = [];
  const parser = new SseParser((event) => events.push(event));
  for (const piece of pieces) parser.push(piece);
  parser.end();
  return events.map((event) => event.data);
}

describe('SSE parser', () => {
  const stream = 'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n';
  test('one chunk, several events', () => {
    assert.deepEqual(parseAll([stream]), ['{"a":1}', '{"b":2}', '[DONE]']);
  });
  test('split at every byte boundary gives the same events', () => {
    for (let cut = 1; cut < stream.length; cut += 1) {
      assert.deepEqual(parseAll([stream.slice(0, cut), stream.slice(cut)]), ['{"a":1}', '{"b":2}', '[DONE]'], `cut at ${cut}`);
    }
    assert.deepEqual(parseAll([...stream]), ['{"a":1}', '{"b":2}', '[DONE]']);
  });
  test('data: without its space, CRLF and CR line ends, comments, event names', () => {
    const crlf = ': keep-alive\r\ndata:{"a":1}\r\n\r\n:comment\r\nevent: error\r\ndata: {"error":{"message":"x"}}\r\n\r\n';
    assert.deepEqual(parseAll([crlf]), ['{"a":1}', '{"error":{"message":"x"}}']);
    for (let cut = 1; cut < crlf.length; cut += 1) {
      assert.deepEqual(parseAll([crlf.slice(0, cut), crlf.slice(cut)]), ['{"a":1}', '{"error":{"message":"x"}}'], `cut at ${cut}`);
    }
    assert.deepEqual(parseAll(['data: a\rdata: b\r\r']), ['a\nb']);
  });
  test('multi-line data joins with newlines; an unterminated last event still counts', () => {
    assert.deepEqual(parseAll(['data: one\ndata: two\n\ndata: tail']), ['one\ntwo', 'tail']);
  });
  test('interpretEvent: chunks, [DONE], an error object mid-stream, junk', () => {
    assert.deepEqual(interpretEvent('[DONE]'), { done: true });
    assert.equal(interpretEvent('{"choices":[]}').chunk.choices.length, 0);
    assert.equal(interpretEvent('{"error":{"message":"boom","code":"x"}}').error.message, 'boom');
    assert.match(interpretEvent('not json').error.message, /not JSON/);
  });
});

describe('Prometheus text', () => {
  const text = `# HELP chatflow:stage_duration_seconds Time each stage spent.
# TYPE chatflow:stage_duration_seconds histogram
chatflow:stage_duration_seconds_bucket{pipeline="p",stage="echo",le="0.001"} 2
chatflow:stage_duration_seconds_bucket{pipeline="p",stage="echo",le="0.01"} 6
chatflow:stage_duration_seconds_bucket{pipeline="p",stage="echo",le="+Inf"} 10
chatflow:stage_duration_seconds_sum{pipeline="p",stage="echo"} 0.5
chatflow:stage_duration_seconds_count{pipeline="p",stage="echo"} 10
chatflow:http_requests_total{endpoint="/v1/chat/completions",status="200"} 7
chatflow:http_requests_total{endpoint="/v1/models",status="200"} 3
chatflow:odd{path="a\\"b\\\\c\\nd"} 1.5e3 1700000000000
chatflow:num_requests_running 1
garbage line here
`;
  const parsed = prom.parsePrometheus(text);
  test('samples, labels with escapes, types, timestamps; junk skipped', () => {
    assert.equal(parsed.types['chatflow:stage_duration_seconds'], 'histogram');
    assert.equal(prom.sum(parsed, 'chatflow:http_requests_total'), 10);
    assert.equal(prom.sum(parsed, 'chatflow:http_requests_total', { endpoint: '/v1/models' }), 3);
    const odd = parsed.samples.find((sample) => sample.name === 'chatflow:odd');
    assert.equal(odd.labels.path, 'a"b\\c\nd');
    assert.equal(odd.value, 1500);
    assert.equal(prom.sum(parsed, 'chatflow:num_requests_running'), 1);
    assert.equal(parsed.skipped, 1);
    assert.deepEqual(prom.labelValues(parsed, 'chatflow:stage_duration_seconds_count', 'stage'), ['echo']);
  });
  test('histogram quantiles interpolate within the bucket, as Prometheus does', () => {
    const cumulative = prom.buckets(parsed, 'chatflow:stage_duration_seconds', { stage: 'echo' });
    assert.deepEqual(cumulative.map((b) => b.le), [0.001, 0.01, Infinity]);
    assert.ok(Math.abs(prom.quantile(0.5, cumulative) - (0.001 + 0.009 * 0.75)) < 1e-12);
    assert.equal(prom.quantile(0.1, cumulative), 0.0005);
    assert.equal(prom.quantile(0.99, cumulative), 0.01); // in +Inf: its lower bound
    assert.equal(prom.quantile(0.5, [{ le: 1, count: 0 }, { le: Infinity, count: 0 }]), undefined);
  });
  test('rates and bucket deltas between scrapes, counter resets', () => {
    const later = prom.parsePrometheus(text.replace('status="200"} 7', 'status="200"} 17'));
    assert.equal(prom.rate(parsed, later, 'chatflow:http_requests_total', { endpoint: '/v1/chat/completions' }, 2), 5);
    assert.equal(prom.rate(later, parsed, 'chatflow:http_requests_total', { endpoint: '/v1/chat/completions' }, 1), 7);
    const delta = prom.bucketDelta([{ le: 1, count: 2 }, { le: Infinity, count: 4 }], [{ le: 1, count: 3 }, { le: Infinity, count: 9 }]);
    assert.deepEqual(delta, [{ le: 1, count: 1 }, { le: Infinity, count: 5 }]);
  });
});

describe('streaming markdown', () => {
  test('an open fence is closed for the render', () => {
    assert.equal(closeOpen('Code:\n```js\nlet a = 1;'), 'Code:\n```js\nlet a = 1;\n```');
    assert.equal(closeOpen('```\nx\n```\ndone'), '```\nx\n```\ndone');
    assert.equal(closeOpen('~~~~\nx\n~~~\n'), '~~~~\nx\n~~~\n~~~~');
  });
  test('open inline marks get their closing marks', () => {
    assert.equal(closeOpen('this is **bold'), 'this is **bold**');
    assert.equal(closeOpen('some `code'), 'some `code`');
    assert.equal(closeOpen('an _emph'), 'an _emph_');
    assert.equal(closeOpen('**a `b'), '**a `b`**');
    assert.equal(closeOpen('snake_case_name and **done**'), 'snake_case_name and **done**');
    assert.equal(closeOpen('ends with **'), 'ends with ');
    assert.equal(closeOpen('`a ** b'), '`a ** b`');
  });
  test('finished blocks end at blank lines outside fences, found incrementally', () => {
    const text = 'one\n\ntwo\n```\na\n\nb\n```\n\nthree';
    const whole = new BlockSplitter().append(text);
    const splitter = new BlockSplitter();
    let stable = 0;
    for (const c of text) stable = splitter.append(c);
    assert.equal(stable, whole);
    assert.equal(text.slice(0, stable), 'one\n\ntwo\n```\na\n\nb\n```\n\n');
  });
});

describe('typewriter', () => {
  function harness() {
    let time = 0;
    const frames = [];
    const shown = [];
    const writer = new Typewriter((text) => shown.push(text), { now: () => time, frame: (f) => frames.push(f) });
    const step = (ms) => {
      time += ms;
      const queued = frames.splice(0);
      for (const frame of queued) frame(time);
    };
    return { writer, shown, step };
  }
  test('a long backlog is caught up within about a second, at an even pace', () => {
    const { writer, shown, step } = harness();
    writer.push('x'.repeat(5000));
    let frames = 0;
    while (shown.join('').length < 5000 && frames < 200) {
      step(16);
      frames += 1;
    }
    assert.ok(frames * 16 <= 1500, `${frames} frames`);
    assert.ok(shown.length > 10, 'revealed over many frames, not at once');
  });
  test('after end() the rest drains quickly and end resolves', async () => {
    const { writer, shown, step } = harness();
    writer.push('y'.repeat(300));
    step(16);
    const ended = writer.end();
    for (let i = 0; i < 40; i += 1) step(16);
    await ended;
    assert.equal(shown.join(''), 'y'.repeat(300));
  });
  test('never splits a surrogate pair', () => {
    const { writer, shown, step } = harness();
    writer.push('😀'.repeat(50));
    for (let i = 0; i < 100; i += 1) step(16);
    for (const piece of shown) assert.equal([...piece].join(''), piece, 'whole code points');
    assert.ok(!shown.some((piece) => /[\ud800-\udbff]$/.test(piece)));
    assert.equal(shown.join(''), '😀'.repeat(50));
  });
});
