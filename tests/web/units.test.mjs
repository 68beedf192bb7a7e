// The chat page's and dashboard's own modules, in Node: the SSE parser on every way an event
// can be cut, Prometheus text and histogram quantiles, the streaming-markdown helpers, the
// typewriter's pace; and the sanitiser (DOMPurify as the page configures it, needing a DOM: the
// page's own render.js and svg_sanitize.js bundled into a blank chromium page).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const src = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'web', 'src');
const load = (name) => import(pathToFileURL(path.join(src, name)).href);
const { SseParser, interpretEvent } = await load('sse.js');
const prom = await load('prometheus.js');
const { closeOpen, BlockSplitter } = await load('markdown_stream.js');
const { Typewriter } = await load('typewriter.js');
const { readCompletion, retractMessage } = await load('completion_stream.js');

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
    // A closed fence ends its block (with the paragraph before it).
    assert.equal(text.slice(0, stable), 'one\n\ntwo\n```\na\n\nb\n```\n');
  });
  test('an open fence: where it starts, and its finished lines', () => {
    const splitter = new BlockSplitter();
    splitter.append('Intro\n\nsee:\n```js\nlet a = 1;\nlet b');
    assert.ok(splitter.fence);
    assert.equal(splitter.text.slice(splitter.fenceStart, splitter.scanned), '```js\nlet a = 1;\n');
    assert.equal(splitter.stable, 'Intro\n\n'.length);
    splitter.append(' = 2;\n```\nafter');
    assert.equal(splitter.fence, null);
    assert.equal(splitter.text.slice(splitter.stable), 'after');
    // Where the fence that closed starts, its closing line and its end (its block may keep the
    // lines streamed into it).
    const { start, closingLine, end } = splitter.closed;
    assert.equal(splitter.text.slice(start, closingLine), '```js\nlet a = 1;\nlet b = 2;\n');
    assert.equal(splitter.text.slice(closingLine, end), '```\n');
  });
});

describe('reading a completion stream', () => {
  const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm' };
  const chunk = (delta, finish = null, extra = {}) => ({ ...base, choices: [{ index: 0, delta, finish_reason: finish }], ...extra });
  // The bytes chatflow sends for an answer output moderation retracted after it was shown.
  const retracted = [
    chunk({ role: 'assistant', content: '' }),
    chunk({ content: 'Once a dragon ' }),
    chunk({ content: 'burned it all.' }),
    chunk({ content: '\n\n[This answer was withdrawn by the content filter.]' }),
    chunk({}, 'content_filter', { chatflow: { retract: { reason: 'content_filter' } } }),
    { ...base, choices: [], usage: { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 } },
  ].map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';

  function body(text, cuts) {
    const bytes = Buffer.from(text);
    const pieces = [];
    let start = 0;
    for (const cut of cuts) {
      pieces.push(bytes.subarray(start, cut));
      start = cut;
    }
    pieces.push(bytes.subarray(start));
    return new ReadableStream({
      start(controller) {
        for (const piece of pieces) if (piece.length) controller.enqueue(new Uint8Array(piece));
        controller.close();
      },
    });
  }
  async function read(text, cuts = []) {
    const calls = [];
    const failed = await readCompletion(body(text, cuts), {
      content: (t) => calls.push(['content', t]),
      reasoning: (t) => calls.push(['reasoning', t]),
      toolCalls: (c) => calls.push(['toolCalls', c]),
      citations: (c) => calls.push(['citations', c]),
      usage: (u) => calls.push(['usage', u.completion_tokens]),
      retract: (r) => calls.push(['retract', r.reason]),
      finish: (f) => calls.push(['finish', f]),
    });
    return { calls, failed };
  }

  test('a retract comes after the text it withdraws, then the finish reason', async () => {
    const { calls, failed } = await read(retracted);
    assert.equal(failed, null);
    assert.deepEqual(calls, [
      ['content', 'Once a dragon '],
      ['content', 'burned it all.'],
      ['content', '\n\n[This answer was withdrawn by the content filter.]'],
      ['retract', 'content_filter'],
      ['finish', 'content_filter'],
      ['usage', 6],
    ]);
  });
  test('however the bytes are cut, the same calls', async () => {
    const { calls: whole } = await read(retracted);
    for (let cut = 1; cut < retracted.length; cut += 7) {
      const { calls } = await read(retracted, [cut]);
      assert.deepEqual(calls, whole, `cut at ${cut}`);
    }
  });
  test('content after a retract is not shown', async () => {
    const late = retracted.replace('data: [DONE]', `data: ${JSON.stringify(chunk({ content: 'late' }))}\n\ndata: [DONE]`);
    const { calls } = await read(late);
    assert.ok(!calls.some(([kind, text]) => kind === 'content' && text === 'late'));
  });
  test('a content_filter finish without the marker is no retract', async () => {
    const stopped = [chunk({ content: 'Half' }), chunk({ content: ' [stopped]' }, 'content_filter')]
      .map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';
    const { calls } = await read(stopped);
    assert.deepEqual(calls, [['content', 'Half'], ['content', ' [stopped]'], ['finish', 'content_filter']]);
  });
  // A body that delivers `text` and then breaks off, as fetch's does when the connection drops.
  function breaking(text) {
    return new ReadableStream({
      start(controller) {
        controller.enqueue(new Uint8Array(Buffer.from(text)));
        setTimeout(() => controller.error(new TypeError('network error')), 10);
      },
    });
  }
  test('a connection cut after [DONE] is no failure: the answer was whole', async () => {
    const calls = [];
    const failed = await readCompletion(breaking(retracted), {
      content: (t) => calls.push(t), reasoning() {}, toolCalls() {}, citations() {}, usage() {}, retract() {}, finish() {},
    });
    assert.equal(failed, null);
    assert.equal(calls.length, 3);
  });
  test('a connection cut before [DONE] rejects with the body\'s TypeError', async () => {
    const half = retracted.slice(0, retracted.indexOf('data: [DONE]'));
    await assert.rejects(readCompletion(breaking(half), {
      content() {}, reasoning() {}, toolCalls() {}, citations() {}, usage() {}, retract() {}, finish() {},
    }), TypeError);
  });
  test('the notice says why', () => {
    assert.match(retractMessage({ reason: 'content_filter' }), /withdrawn by the content filter/);
    assert.match(retractMessage({ reason: 'moderation_unavailable' }), /could not check it/);
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
  test('discard() drops what was not shown, and end resolves at once', async () => {
    const { writer, shown, step } = harness();
    writer.push('w'.repeat(1000));
    step(16);
    const before = shown.join('').length;
    assert.ok(before > 0 && before < 1000);
    writer.discard();
    const ended = writer.end();
    for (let i = 0; i < 10; i += 1) step(16);
    await ended;
    assert.equal(shown.join('').length, before);
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
  test('a backlog is revealed evenly: every frame, pieces of about the same size', () => {
    const { writer, shown, step } = harness();
    writer.push('z'.repeat(2000));
    const times = [];
    let time = 0;
    while (shown.join('').length < 2000 && times.length < 200) {
      const before = shown.length;
      step(16);
      time += 16;
      if (shown.length > before) times.push(time);
    }
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    assert.ok(Math.max(...gaps) <= 16, `a frame revealed nothing: gaps ${gaps}`);
    const sizes = shown.map((piece) => piece.length).slice(0, -1); // the last is the remainder
    const median = [...sizes].sort((a, b) => a - b)[Math.floor(sizes.length / 2)];
    assert.ok(Math.max(...sizes) <= 1.5 * median && Math.min(...sizes) >= median / 1.5,
      `uneven pieces: median ${median}, ${Math.min(...sizes)}..${Math.max(...sizes)}`);
  });
  test('with everyMs, every other 60 Hz frame reveals, and the backlog is still caught up in time', () => {
    let time = 0;
    const frames = [];
    const revealed = [];
    const writer = new Typewriter((text) => revealed.push({ time, text }), { everyMs: 33, now: () => time, frame: (f) => frames.push(f) });
    writer.push('v'.repeat(1000));
    for (let i = 0; i < 120 && revealed.map((r) => r.text).join('').length < 1000; i += 1) {
      time += 16.7;
      for (const frame of frames.splice(0)) frame(time);
    }
    assert.equal(revealed.map((r) => r.text).join(''), 'v'.repeat(1000));
    assert.ok(revealed.at(-1).time <= 600, `caught up at ${revealed.at(-1).time} ms`);
    const gaps = revealed.slice(1).map((r, i) => r.time - revealed[i].time);
    assert.ok(gaps.every((gap) => gap > 30 && gap < 35), `gaps ${gaps.map((g) => g.toFixed(1))}`);
  });
  test('a steady stream with jittery frames keeps an even rate of characters per millisecond', () => {
    let time = 0;
    const frames = [];
    const revealed = [];
    const writer = new Typewriter((text) => revealed.push({ time, count: text.length }), { now: () => time, frame: (f) => frames.push(f) });
    const jitter = [16, 17, 15, 33, 8, 16, 25, 16];
    for (let i = 0; i < 120; i += 1) {
      if (i % 5 === 0) writer.push('w'.repeat(40)); // a network chunk every ~5 frames
      time += jitter[i % jitter.length];
      for (const frame of frames.splice(0)) frame(time);
    }
    const rates = revealed.slice(8, -8).map((r, i, all) => (i ? r.count / (r.time - all[i - 1].time) : null)).filter(Boolean);
    const sorted = [...rates].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    assert.ok(sorted.at(-1) <= 3 * median, `bursty: median ${median.toFixed(2)}, max ${sorted.at(-1).toFixed(2)} chars/ms`);
  });
  test('after end() a long queue drains within 150 ms of frames', async () => {
    const { writer, shown, step } = harness();
    writer.push('q'.repeat(20000));
    step(16);
    const ended = writer.end();
    let resolved = false;
    ended.then(() => { resolved = true; });
    let elapsed = 0;
    while (!resolved && elapsed < 1000) {
      step(16);
      elapsed += 16;
      await Promise.resolve();
    }
    assert.ok(resolved, 'end() resolved');
    assert.ok(elapsed <= 150 + 16, `drained after ${elapsed} ms`);
    assert.equal(shown.join(''), 'q'.repeat(20000));
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

// --- The sanitiser, with a real DOM. ---

const nodeModules = process.env.CHATFLOW_WEB_NODE_MODULES || path.join(src, '..', 'node_modules');
const chromium = process.env.CHATFLOW_CHROMIUM || '/usr/bin/chromium';
const noBrowser = !fs.existsSync(chromium) ? `no chromium at ${chromium}`
  : !fs.existsSync(path.join(nodeModules, 'playwright-core')) ? `playwright-core is not in ${nodeModules}` : '';
if (noBrowser) console.log(`# sanitiser tests skipped: ${noBrowser}`);

// Every event-handler attribute and script URL left in `html`, parsed as the page would.
function leftovers() {
  return (html) => {
    const box = document.createElement('template');
    box.innerHTML = html;
    const found = [];
    for (const node of box.content.querySelectorAll('*')) {
      if (/^(script|iframe|object|embed|foreignobject|style|form)$/i.test(node.localName)) found.push(`<${node.localName}>`);
      for (const attribute of node.attributes) {
        if (/^on/i.test(attribute.name)) found.push(`${node.localName} ${attribute.name}`);
        if (/^\s*(javascript|vbscript|data:text\/html)/i.test(attribute.value.replace(/[\u0000-\u0020]/g, ''))) found.push(`${node.localName} ${attribute.name}=${attribute.value}`);
        if (attribute.name === 'style') found.push(`${node.localName} style`);
      }
    }
    return found;
  };
}

describe('the sanitiser, in chromium', { skip: noBrowser || false }, () => {
  let browser;
  let page;
  // The page modules bundled into a blank page.
  before(async () => {
    const require = createRequire(path.join(nodeModules, 'noop.js'));
    const { build } = require('esbuild');
    const bundled = await build({
      stdin: {
        contents: "import { renderMarkdown, sanitizeHtml } from './render.js'; import { sanitizeSvg } from './svg_sanitize.js'; window.__web = { renderMarkdown, sanitizeHtml, sanitizeSvg };",
        resolveDir: src,
      },
      bundle: true, write: false, format: 'iife', logLevel: 'silent',
    });
    browser = await require('playwright-core').chromium.launch({
      executablePath: chromium, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    await page.setContent('<!doctype html><body></body>');
    await page.addScriptTag({ content: bundled.outputFiles[0].text });
    await page.evaluate(`window.__leftovers = (${leftovers.toString()})()`);
  });

  const check = (fn, input) => page.evaluate(([name, text]) => {
    const html = window.__web[name](text);
    return { html, found: window.__leftovers(html) };
  }, [fn, input]);

  test('markup handed to DOMPurify directly loses handlers and script URLs', async () => {
    for (const hostile of [
      '<img src=x onerror=alert(1)>',
      '<svg onload=alert(1)><circle r=1 /></svg>',
      '<a href="javascript:alert(1)">x</a>',
      '<a href="JaVaScRiPt:alert(1)">x</a>',
      '<a href="&#106;avascript:alert(1)">x</a>',
      '<a href=" \tjavascript:alert(1)">x</a>',
      '<iframe src="javascript:alert(1)"></iframe><object data="x"></object>',
      '<math><mi xlink:href="javascript:alert(1)">x</mi></math>',
      '<form action="javascript:alert(1)"><button formaction="javascript:alert(1)">b</button></form>',
      '<p style="background:url(javascript:alert(1))" onclick="alert(1)">p</p><style>*{}</style>',
      '<details open ontoggle=alert(1)>d</details><body onload=alert(1)>',
    ]) {
      const { html, found } = await check('sanitizeHtml', hostile);
      assert.deepEqual(found, [], `${hostile} -> ${html}`);
    }
    const { html } = await check('sanitizeHtml', '<a href="https://example.com">ok</a>');
    assert.match(html, /href="https:\/\/example.com"/);
    assert.match(html, /rel="noopener noreferrer"/);
  });

  test('the page render: hostile markdown comes out inert', async () => {
    for (const hostile of [
      '[x](javascript:alert(1))', '[x](JAVASCRIPT:alert(1))', '[x](vbscript:msgbox(1))',
      '![i](javascript:alert(1))', '[x](data:text/html;base64,PHNjcmlwdD4=)',
      '<img src=x onerror=alert(1)>', '<script>alert(1)</script>', '[x](<javascript:alert(1)>)',
      '```html\n<img src=x onerror=alert(1)>\n```', 'auto link javascript:alert(1) www.example.com',
    ]) {
      const { html, found } = await check('renderMarkdown', hostile);
      assert.deepEqual(found, [], `${hostile} -> ${html}`);
    }
  });

  test('sanitizeSvg keeps the drawing and drops script and handlers', async () => {
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script>'
      + '<style>rect{fill:red}</style><g class="stage" data-stage="echo" onclick="alert(3)"><rect width="10" height="10"/>'
      + '<text>echo</text></g><a href="javascript:alert(4)"><text>x</text></a>'
      + '<foreignObject><img src=x onerror=alert(5)></foreignObject>'
      + '<animate attributeName="href" to="javascript:alert(6)"/></svg>';
    const { html, found } = await check('sanitizeSvg', svg);
    assert.deepEqual(found, [], html);
    assert.match(html, /<g class="stage" data-stage="echo"><rect/);
    assert.match(html, /<text>echo<\/text>/);
    assert.doesNotMatch(html, /script|alert/);
  });

  after(async () => {
    await browser?.close();
  });
});
