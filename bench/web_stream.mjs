// How the chat page keeps up with a fast, long answer: a 5,000-token markdown answer streamed
// at 250 tokens/s into the real page (built web UI served by a real `chatflow serve`, one
// response's bytes written by a scripting proxy in front of it) in headless chromium. Prints
// frame times from requestAnimationFrame (p50, p99, max), long tasks, and main-thread time per
// token (Chromium's TaskDuration over the stream, / tokens). Goal: <= 1 ms per token, no frame
// over 50 ms. Two answers: `mixed` (paragraphs, lists, short code blocks) and `fence` (one
// 3,000-token ``` block, the case where a block that never closes could be re-rendered whole
// each frame); for each, the per-token cost in the first and the second half of the answer
// says whether it grows with the answer's length. A third, `math`, is prose with inline and
// display TeX (formulas split over several tokens, as a model streams them) around a long Rust
// block (a language the page fetches on first use). Not a test: run it by hand after building.
//   node bench/web_stream.mjs [--case mixed|fence|math|both|all] [--tokens 5000] [--fence-tokens 3000]
//        [--rate 250] [--settle-ms 3000] [--chatflow build/chatflow] [--chromium /usr/bin/chromium]
//        [--trace DIR]   (a Chromium trace of each case's stream, DIR/trace-<case>.json, for
//                         DevTools' Performance panel; tracing itself adds to the figures)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.join(here, '..');
const option = (name, fallback) => {
  const index = process.argv.indexOf(`--${name}`);
  return index > 0 ? process.argv[index + 1] : fallback;
};
const mixedTokens = Number(option('tokens', 5000));
const fenceTokens = Number(option('fence-tokens', 3000));
const which = option('case', 'all');
const cases = { both: ['mixed', 'fence'], all: ['mixed', 'fence', 'math'] }[which] ?? [which];
const rate = Number(option('rate', 250));
const settleMs = Number(option('settle-ms', 3000));
const traceDir = option('trace', null);
const chatflow = path.resolve(option('chatflow', path.join(source, 'build', 'chatflow')));
process.env.CHATFLOW_WEB_NODE_MODULES ??= path.join(source, 'web', 'node_modules');
process.env.CHATFLOW_CHROMIUM ??= option('chromium', '/usr/bin/chromium');
const { launch, scriptingProxy, sseEvents } = await import('../tests/web/browser.mjs');

// A markdown answer of `tokens` pieces: paragraphs, a list now and then, a code block every
// 600 tokens, some bold and inline code.
function answerPieces(count) {
  const pieces = [];
  for (let i = 0; pieces.length < count; i += 1) {
    if (i % 600 === 599) {
      pieces.push('\n\n```js\n');
      for (let line = 0; line < 20 && pieces.length < count - 1; line += 1) pieces.push(`const v${line} = compute(${line});\n`);
      pieces.push('```\n\n');
    } else if (i % 45 === 44) {
      pieces.push('\n\n');
    } else if (i % 200 === 100) {
      pieces.push('\n\n- item one\n- item **two**\n- item `three`\n\n');
    } else {
      pieces.push(i % 17 === 0 ? ` **word${i}**` : i % 23 === 0 ? ` \`code${i}\`` : ` word${i}`);
    }
  }
  return pieces.slice(0, count);
}

// One fenced block of `count` pieces, four to a line of code; it closes at the very end.
function fencePieces(count) {
  const pieces = ['Here is the program:\n\n```js\n'];
  for (let line = 0; pieces.length < count - 1; line += 1) {
    pieces.push('const', ` v${line}`, ` = compute(${line}, "text")`, ';\n');
  }
  pieces.length = count - 1;
  pieces.push('\n```\n');
  return pieces;
}

// Prose with TeX every few words (inline formulas in pieces, a display formula now and then)
// and, a third of the way in, a Rust block of `count` / 3 pieces; `count` pieces in all.
function mathPieces(count) {
  const pieces = [];
  const codeAt = Math.floor(count / 3);
  const codePieces = Math.floor(count / 3);
  for (let i = 0; pieces.length < count - 1; i += 1) {
    if (pieces.length >= codeAt && pieces.length < codeAt + 5) {
      pieces.push('\n\n```rust\n');
      for (let line = 0; pieces.length < codeAt + codePieces; line += 1) {
        pieces.push('fn', ` step${line}(x: u64)`, ` -> u64 { x * ${line} + 1 }`, ' // note\n');
      }
      pieces.push('```\n\n');
    } else if (i % 150 === 149) {
      pieces.push('\n\n$$', '\\sum_{k=1}^{', `${i}`, '} k^2', ' = \\frac{n(n+1)(2n+1)}{6}', '$$\n\n');
    } else if (i % 45 === 44) {
      pieces.push('\n\n');
    } else if (i % 9 === 0) {
      pieces.push(' where $', `x_{${i}}`, '^2 +', ' \\alpha', '$ holds');
    } else {
      pieces.push(i % 13 === 0 ? ` costs $${i}` : ` word${i}`);
    }
  }
  pieces.length = count - 1;
  pieces.push(' end.');
  return pieces;
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-web-bench-'));
const pipeline = path.join(scratch, 'echo.yaml');
fs.writeFileSync(pipeline, 'version: 1\nname: bench\nstages:\n  - {name: echo, type: echo}\n');
const server = spawn(chatflow, ['serve', '--port', '0', '--access-log', 'off', '--pipeline', pipeline], { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve, reject) => {
  let out = '';
  server.stdout.on('data', (data) => {
    out += data;
    const match = /at (http:\/\/[^ ]+)\/v1/.exec(out);
    if (match) resolve(match[1]);
  });
  server.on('exit', (code) => reject(new Error(`chatflow serve exited (${code})`)));
});

let events = [];
const proxy = await scriptingProxy(url, () => {
  // Batches of the events due by now, every 8 ms: `rate` tokens per second on average.
  const batches = [];
  const perBatch = rate * 0.008;
  let due = 0;
  let next = 0;
  while (next < events.length) {
    due += perBatch;
    const take = Math.max(0, Math.floor(due) - next);
    batches.push(Buffer.from(events.slice(next, next + take).join('')));
    next += take;
  }
  return { pieces: batches, pauseMs: 8 };
});

async function runCase(browser, name, pieces) {
  const tokens = pieces.length;
  events = sseEvents(pieces).split('\n\n').filter(Boolean).map((event) => `${event}\n\n`);
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.goto(proxy.url);
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
  // The page warms its libraries up (and fetches KaTeX) while idle after loading: a one-off, not
  // a cost per token, and a person takes longer than this to type a first question.
  await page.waitForTimeout(settleMs);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  await page.evaluate(() => {
    window.__frames = [];
    window.__longTasks = [];
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) window.__longTasks.push(entry.duration);
    }).observe({ type: 'longtask', buffered: false });
    const frame = (time) => {
      window.__frames.push(time);
      if (!window.__stopFrames) requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  });
  const snapshot = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  if (traceDir) {
    await browser.startTracing(page, {
      path: path.join(traceDir, `trace-${name}.json`),
      categories: ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'blink', 'v8'],
    });
  }
  const before = await snapshot();
  const taskBefore = before.TaskDuration;
  const started = Date.now();
  await page.fill('#prompt', 'benchmark');
  await page.press('#prompt', 'Enter');
  // Main-thread time against characters shown, sampled every 500 ms: per-token cost in the
  // first and the second half of the answer shows whether it grows with the answer's length.
  const samples = [];
  // Polled every 250 ms, not every frame (Playwright's default): the bench's own queries would
  // count as the page's main-thread time.
  const finished = page.waitForFunction(() => document.querySelector('.message.assistant[aria-busy="false"]'), null, { polling: 250, timeout: 120000 });
  let done = false;
  finished.then(() => { done = true; }, () => { done = true; });
  while (!done) {
    const shownNow = await page.evaluate(() => document.querySelector('.message.assistant .content')?.textContent.length ?? 0);
    samples.push({ shown: shownNow, task: (await snapshot()).TaskDuration });
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await finished;
  if (traceDir) await browser.stopTracing();
  const wall = (Date.now() - started) / 1000;
  const afterAll = await snapshot();
  const taskAfter = afterAll.TaskDuration;
  const split = ['ScriptDuration', 'LayoutDuration', 'RecalcStyleDuration']
    .map((name) => `${name.replace('Duration', '').toLowerCase()} ${((afterAll[name] - before[name]) * 1000).toFixed(0)} ms`).join(', ');
  const { frames, longTasks, shown } = await page.evaluate(() => {
    window.__stopFrames = true;
    return { frames: window.__frames, longTasks: window.__longTasks, shown: document.querySelector('.message.assistant .content').textContent.length };
  });
  const deltas = frames.slice(1).map((t, i) => t - frames[i]).sort((a, b) => a - b);
  const at = (q) => deltas[Math.min(deltas.length - 1, Math.floor(q * deltas.length))];
  const perToken = ((taskAfter - taskBefore) * 1000) / tokens;
  console.log(`web_stream ${name}: ${tokens} tokens at ${rate} tokens/s into the chat page (${shown} characters shown), ${wall.toFixed(1)} s`);
  console.log(`  frames: ${deltas.length}, interval p50 ${at(0.5).toFixed(1)} ms, p99 ${at(0.99).toFixed(1)} ms, max ${deltas.at(-1).toFixed(1)} ms`);
  console.log(`  long tasks (> 50 ms): ${longTasks.length}${longTasks.length ? `, longest ${Math.max(...longTasks).toFixed(0)} ms` : ''}`);
  console.log(`  main-thread time: ${((taskAfter - taskBefore) * 1000).toFixed(0)} ms in all (${split}), ${perToken.toFixed(3)} ms per token`);
  // Tasks' wall time counts the time the renderer waited for a core; on a shared machine its CPU
  // time (ThreadTime) says what the page itself cost.
  const cpu = (afterAll.ThreadTime - before.ThreadTime) * 1000;
  console.log(`  main-thread CPU time: ${cpu.toFixed(0)} ms, ${(cpu / tokens).toFixed(3)} ms per token`);
  const total = shown;
  const half = samples.find((sample) => sample.shown >= total / 2) ?? samples.at(-1);
  const firstHalf = ((half.task - taskBefore) * 1000) / (tokens * (half.shown / total));
  const secondHalf = ((taskAfter - half.task) * 1000) / (tokens * (1 - half.shown / total));
  // The second half once more without the last sample's tail: the end renders the whole answer
  // once more (a one-off, not a per-token cost).
  const last = samples.at(-1);
  const streamingHalf = last.shown > half.shown
    ? ((last.task - half.task) * 1000) / (tokens * ((last.shown - half.shown) / total)) : NaN;
  console.log(`  per token, first half of the answer ${firstHalf.toFixed(3)} ms, second half ${secondHalf.toFixed(3)} ms`
    + ` (${streamingHalf.toFixed(3)} ms up to the last sample before the final render)`);
  const ok = perToken <= 1 && deltas.at(-1) <= 50;
  console.log(`  goal (<= 1 ms per token, no frame over 50 ms): ${ok ? 'met' : 'NOT met'}`);
  await page.close();
}

const browser = await launch();
try {
  const answers = { mixed: () => answerPieces(mixedTokens), fence: () => fencePieces(fenceTokens), math: () => mathPieces(mixedTokens) };
  for (const name of cases) {
    if (!answers[name]) throw new Error(`--case ${which}: one of mixed, fence, math, both, all`);
    await runCase(browser, name, answers[name]());
  }
} finally {
  await browser.close();
  await proxy.close();
  server.kill('SIGTERM');
  fs.rmSync(scratch, { recursive: true, force: true });
}
