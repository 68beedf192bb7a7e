// TeX math and lazily loaded highlight.js languages on the chat page, in a real chromium against
// a real `chatflow serve`: a scripting proxy in front of the server writes the answer a test
// chooses (its pieces and pauses); the page, its assets and every other call are the server's.
// Every page listens for CSP violations from its first script on: none may happen.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  lastAnswerDone, openPage, paints, ready, send, skipReason, splitAt, sseEvents, startPaintSampler,
} from './browser.mjs';
import { echoServerBehindProxy } from './scripted_echo.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

// One SSE write per piece, `pauseMs` apart.
const streamed = (pieces, pauseMs = 5) => () => {
  const bytes = Buffer.from(sseEvents(pieces));
  const cuts = [];
  let at = 0;
  // Cut after each piece's event so the page gets the pieces one by one.
  const events = sseEvents(pieces).split('\n\n');
  for (const event of events.slice(0, -1)) {
    at += Buffer.byteLength(`${event}\n\n`);
    cuts.push(at);
  }
  return { pieces: splitAt(bytes, cuts.filter((cut) => cut < bytes.length)), pauseMs };
};

// The MathML of every formula in the last answer: its TeX source (KaTeX's annotation), whether
// it is a display formula, and its tokens as `tag:text`.
const formulas = (page) => page.evaluate(() => [...document.querySelectorAll('.message.assistant:last-of-type .content math')]
  .map((math) => ({
    tex: math.querySelector('annotation')?.textContent,
    display: math.getAttribute('display') === 'block',
    tokens: [...math.querySelectorAll('mi, mn, mo')].map((node) => `${node.localName}:${node.textContent}`),
    structure: [...math.querySelectorAll('*')].map((node) => node.localName).filter((name) => ['mfrac', 'msup', 'msub', 'munderover', 'msubsup'].includes(name)),
  })));

// Waits until no formula in the page waits for KaTeX any more.
const mathSettled = (page) => page.waitForFunction(() => !document.querySelector('.math-pending'), null, { timeout: 15000 });

async function mathPage(browser, url) {
  const page = await openPage(browser, null);
  page.violations = [];
  await page.exposeFunction('__reportViolation', (text) => page.violations.push(text));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__reportViolation(`${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
    });
  });
  page.requested = [];
  page.on('request', (request) => page.requested.push(new URL(request.url()).pathname));
  await page.goto(url);
  await ready(page);
  return page;
}

function assertClean(page) {
  assert.deepEqual(page.violations, [], 'CSP violations');
  assert.deepEqual(page.problems.filter((problem) => !problem.includes('404')), []);
}

describe('math and code on the chat page', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-math-echo');

  test('each delimiter renders MathML; prices, escaped dollars and code stay text; no CSP violation', async () => {
    const page = await mathPage(ctx.browser, ctx.proxy.url);
    const answer = [
      'Inline $x^2$ and \\(y_1\\) here.\n\n',
      '$$\\frac{a}{b}$$\n\n',
      '\\[ z + 1 \\]\n\n',
      'Where\n$$\nc = 3\n$$\nholds.\n\n',
      'It costs $5 and $10, or US$7; a \\$ sign; $ spaced $ too.\n\n',
      'Code `$q$` and `\\(s\\)` stay.\n\n',
      '```\n$r$ \\(t\\) $$u$$\n```\n\n',
      'Bad: $\\frac{1$ is shown as typed.',
    ];
    ctx.script = streamed(answer, 20);
    await send(page, 'math please');
    await lastAnswerDone(page);
    await mathSettled(page);
    const found = await formulas(page);
    assert.deepEqual(found.map((f) => f.tex), ['x^2', 'y_1', '\\frac{a}{b}', ' z + 1 ', '\nc = 3\n']);
    assert.deepEqual(found.map((f) => f.display), [false, false, true, true, true]);
    assert.deepEqual(found[0].tokens, ['mi:x', 'mn:2']);
    assert.deepEqual(found[0].structure, ['msup']);
    assert.deepEqual(found[1].tokens, ['mi:y', 'mn:1']);
    assert.deepEqual(found[1].structure, ['msub']);
    assert.deepEqual(found[2].tokens, ['mi:a', 'mi:b']);
    assert.deepEqual(found[2].structure, ['mfrac']);
    assert.deepEqual(found[3].tokens, ['mi:z', 'mo:+', 'mn:1']);
    assert.deepEqual(found[4].tokens, ['mi:c', 'mo:=', 'mn:3']);
    const text = await page.evaluate(() => {
      const content = document.querySelector('.message.assistant:last-of-type .content');
      const paragraphs = [...content.querySelectorAll('p')];
      return {
        prices: paragraphs.find((p) => p.textContent.startsWith('It costs'))?.textContent,
        codeSpans: [...content.querySelectorAll('p code')].map((code) => code.textContent),
        fence: content.querySelector('pre code')?.textContent,
        mathInCode: content.querySelectorAll('code math').length,
        bad: paragraphs.find((p) => p.textContent.startsWith('Bad'))?.innerHTML,
      };
    });
    assert.equal(text.prices, 'It costs $5 and $10, or US$7; a $ sign; $ spaced $ too.');
    assert.deepEqual(text.codeSpans, ['$q$', '\\(s\\)']);
    assert.equal(text.fence, '$r$ \\(t\\) $$u$$\n');
    assert.equal(text.mathInCode, 0);
    // KaTeX's error: the source as typed, marked, never a half-drawn formula.
    assert.match(text.bad, /<span class="math-error" title="[^"]*">\$\\frac\{1\$<\/span>/);
    // Real layout: the fraction is drawn taller than a line of text (MathML, not raw TeX).
    const height = await page.evaluate(() => document.querySelector('.message.assistant:last-of-type math[display="block"]').getBoundingClientRect().height);
    const lineHeight = await page.evaluate(() => document.querySelector('.message.assistant:last-of-type p').getBoundingClientRect().height);
    assert.ok(height > lineHeight, `the fraction is ${height} px tall, a line ${lineHeight} px`);
    assertClean(page);
    await page.context().close();
  });

  test('a formula streamed in pieces is text until it closes, never drawn half-written', async () => {
    const page = await mathPage(ctx.browser, ctx.proxy.url);
    // KaTeX loaded first (the page fetches it when idle, or with the first formula).
    ctx.script = streamed(['Warm: $a$'], 5);
    await send(page, 'warm');
    await lastAnswerDone(page);
    await mathSettled(page);
    await startPaintSampler(page);
    const answer = 'Euler: $e^{i\\pi} + 1 = 0$ and $$\\sum_{k=1}^{n} k$$ and \\(a_{n}\\) end.';
    const whole = ['e^{i\\pi} + 1 = 0', '\\sum_{k=1}^{n} k', 'a_{n}'];
    ctx.script = streamed([...answer], 30);
    await send(page, 'stream math');
    await lastAnswerDone(page);
    const states = (await paints(page)).filter((state) => state.text.startsWith('Euler'));
    assert.ok(states.length >= 20, `only ${states.length} distinct paints`);
    let drawnWhileStreaming = 0;
    for (const state of states) {
      const sources = [...state.html.matchAll(/<annotation encoding="application\/x-tex">([^<]*)<\/annotation>/g)]
        .map((match) => match[1].replace(/&amp;/g, '&'));
      for (const source of sources) assert.ok(whole.includes(source), `a half-written formula was drawn: ${source}`);
      // Before its closing `$` arrives the first formula shows as its source.
      if (state.text.includes('e^{i') && !sources.includes(whole[0])) assert.match(state.text, /\$e\^\{i/);
      if (sources.length && !state.text.includes('end.')) drawnWhileStreaming += 1;
      // An open formula's text is shown as written: no closing _ or ** added for the marks
      // in its TeX (a_{n}, \sum_{k=1}).
      for (const [open, source] of [['$$', '$$\\sum_{k=1}^{n} k$$'], ['\\(', '\\(a_{n}\\) end.']]) {
        const at = state.text.lastIndexOf(open);
        if (at >= 0 && !sources.includes(source.slice(open.length, source.indexOf(open === '$$' ? '$$' : '\\)', open.length)))) {
          const shown = state.text.slice(at).trimEnd();
          assert.ok(source.startsWith(shown), `an open formula shown as ${shown}`);
        }
      }
    }
    assert.ok(drawnWhileStreaming > 0, 'no formula was drawn while the answer streamed');
    assert.deepEqual((await formulas(page)).map((f) => f.tex), whole);
    assertClean(page);
    await page.context().close();
  });

  test('Rust and Go fences are plain until their languages arrive, then highlighted; not in the first load', async () => {
    const page = await mathPage(ctx.browser, ctx.proxy.url);
    // The page has been idle a while (its warm-up has run): still no Rust or Go file fetched.
    await page.waitForTimeout(1500);
    const languageFile = (name) => new RegExp(`^/assets/${name}-[A-Z0-9]+\\.js$`);
    assert.deepEqual(page.requested.filter((p) => languageFile('(rust|go)').test(p)), []);
    assert.ok(page.requested.some((p) => /^\/assets\/chat-[A-Z0-9]+\.js$/.test(p)), `the page's own script: ${page.requested}`);
    // The Rust file is held back a while: the block must be shown plain meanwhile.
    let releaseRust;
    const rustHeld = new Promise((resolve) => { releaseRust = resolve; });
    await page.route(/\/assets\/rust-[A-Z0-9]+\.js$/, async (route) => {
      await rustHeld;
      await route.continue();
    });
    // Markup in code is text, whichever path turns highlight.js's output into nodes.
    const rust = Array.from({ length: 40 }, (_, i) => (i === 20
      ? 'let s = "<img src=x onerror=window.__pwned=1>"; // &amp; <b>\n'
      : `fn f${i}() -> u32 { let x = ${i}; x }\n`));
    const pieces = ['Rust:\n\n```rs\n', ...rust, '```\n\nGo:\n\n```golang\n', 'package main\n', 'func main() { return }\n', '```\n\nDone.'];
    ctx.script = streamed(pieces, 10);
    await send(page, 'rust and go');
    await lastAnswerDone(page);
    const waiting = await page.evaluate(() => {
      const code = document.querySelector('.message.assistant:last-of-type pre code.language-rs');
      return { text: code?.textContent, keywords: code?.querySelectorAll('.hljs-keyword').length, waiting: code?.dataset.highlight };
    });
    assert.equal(waiting.text, rust.join(''));
    assert.equal(waiting.keywords, 0, 'Rust highlighted before its language arrived');
    assert.equal(waiting.waiting, 'rust');
    releaseRust();
    await page.waitForSelector('.message.assistant:last-of-type pre code.language-rs .hljs-keyword');
    await page.waitForSelector('.message.assistant:last-of-type pre code.language-golang .hljs-keyword');
    const done = await page.evaluate(() => [...document.querySelectorAll('.message.assistant:last-of-type pre code')].map((code) => ({
      className: code.className,
      text: code.textContent,
      keywords: [...code.querySelectorAll('.hljs-keyword')].map((k) => k.textContent),
      waiting: code.querySelectorAll('[data-highlight]').length + (code.dataset.highlight ? 1 : 0),
    })));
    assert.equal(done[0].className, 'language-rs hljs');
    assert.equal(done[0].text, rust.join(''));
    assert.deepEqual([...new Set(done[0].keywords)].sort(), ['fn', 'let']);
    assert.equal(done[0].waiting, 0);
    assert.match(done[1].className, /language-golang/);
    assert.deepEqual(done[1].keywords, ['package', 'func', 'return']);
    assert.equal(await page.evaluate(() => document.querySelectorAll('.message.assistant img, .message.assistant b').length), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    // Each language file was fetched once.
    assert.equal(page.requested.filter((p) => languageFile('rust').test(p)).length, 1);
    assert.equal(page.requested.filter((p) => languageFile('go').test(p)).length, 1);
    assertClean(page);
    await page.context().close();
  });

  test('thirty-odd languages, by name or alias, are highlighted', async () => {
    const page = await mathPage(ctx.browser, ctx.proxy.url);
    const samples = {
      rust: 'fn main() { let x = 1; }', go: 'func main() { return }', java: 'public class A { }',
      kotlin: 'fun main() { val x = 1 }', swift: 'func f() { let x = 1 }', csharp: 'public class A { }',
      ruby: 'def f\n  return 1\nend', php: '<?php function f() { return 1; }', lua: 'local function f() return 1 end',
      haskell: 'module Main where\nimport Data.List', scala: 'object A { def f = 1 }', r: 'f <- function(x) { if (x) TRUE }',
      perl: 'sub f { my $x = 1; return $x; }', dockerfile: 'FROM debian\nRUN apt-get update', makefile: 'all:\n\tifeq ($(A),1)\nendif',
      nginx: 'server { listen 80; }', toml: '[server]\nport = 80', diff: '--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y',
      markdown: '# Title\n\n**bold**', css: 'a { color: red; }', scss: '@mixin m { color: red; }',
      sh: 'if [ -f x ]; then echo y; fi', powershell: 'function F { param($x) }', js: 'const x = 1;', py: 'def f(): return 1',
      ts: 'let x: number = 1;', json: '{"a": 1}', yaml: 'a: 1', cpp: 'int main() { return 0; }', c: 'int main(void) { return 0; }',
      sql: 'SELECT a FROM t;', html: '<p class="x">x</p>', dart: 'void main() { var x = 1; }', elixir: 'defmodule A do\nend',
    };
    const names = Object.keys(samples);
    assert.ok(names.length >= 30);
    const answer = names.map((name) => `\`\`\`${name}\n${samples[name]}\n\`\`\`\n\n`);
    ctx.script = streamed(answer, 5);
    await send(page, 'many languages');
    await lastAnswerDone(page);
    await page.waitForFunction((count) => document.querySelectorAll('.message.assistant:last-of-type pre code.hljs').length === count,
      names.length, { timeout: 15000 }).catch(() => {});
    const blocks = await page.evaluate(() => [...document.querySelectorAll('.message.assistant:last-of-type pre code')].map((code) => ({
      className: code.className, tokens: code.querySelectorAll('[class^="hljs-"]').length,
    })));
    const plain = blocks.map((block, i) => ({ name: names[i], ...block })).filter((block) => !/\bhljs\b/.test(block.className) || block.tokens === 0);
    assert.deepEqual(plain, []);
    assertClean(page);
    await page.context().close();
  });
});
