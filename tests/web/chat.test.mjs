// The chat page in a real chromium against a real `chatflow serve`. Where a test needs exact
// bytes (chunk boundaries inside a UTF-8 sequence, markup a model might write), a scripting
// proxy in front of the server writes that one response; the page, its assets and every other
// call are the server's own.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelPipeline, scrape, scratchPath, sessionPipeline, startServer, waitFor, writeTemp,
} from '../server/harness.mjs';
import {
  lastAnswerDone, launch, openPage, paints, ready, screenshot, scriptingProxy, send, skipReason,
  splitAt, sseEvents, startPaintSampler,
} from './browser.mjs';
import { echoServerBehindProxy } from './scripted_echo.mjs';
import { signInWithShortAnswers } from './short_answers.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

describe('the chat page', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-echo', { wordsPerChunk: 1 });

  test('an echo answer streams in over several paints; no errors on the page', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await startPaintSampler(page);
    const words = Array.from({ length: 40 }, (_, i) => `word${i} `);
    ctx.script = () => ({ pieces: [Buffer.from(sseEvents(words))].flatMap((bytes) => splitAt(bytes, [...bytes.keys()].filter((i) => i % 120 === 0 && i))), pauseMs: 15 });
    await send(page, 'stream please');
    await lastAnswerDone(page);
    const states = await paints(page);
    assert.ok(states.length >= 5, `only ${states.length} distinct paints`);
    // Each paint extends the one before (text only grows).
    for (let i = 1; i < states.length; i += 1) {
      assert.ok(states[i].text.startsWith(states[i - 1].text.trimEnd().slice(0, -8)) || states[i].text.length >= states[i - 1].text.length);
    }
    assert.equal((await page.textContent('.message.assistant .content')).trim(), words.join('').trim());
    // The real server's echo as well: the user's words come back.
    await send(page, 'plain echo through chatflow');
    await lastAnswerDone(page);
    assert.equal((await page.textContent('.message.assistant:last-of-type .content')).trim(), 'plain echo through chatflow');
    assert.match(await page.textContent('.message.assistant:last-of-type .stats'), /first token .* s/);
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test('CJK and emoji split inside their UTF-8 bytes render exactly', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await startPaintSampler(page);
    const answer = '你好，世界！🙂🎉 こんにちは、😀👍🏽 한국어 テスト';
    const pieces = [...answer].map((c) => c);
    const bytes = Buffer.from(sseEvents(pieces));
    // Cut after the first byte of every multibyte character: no chunk ends on a boundary.
    const cuts = [];
    for (let i = 0; i < bytes.length; i += 1) if (bytes[i] >= 0xc0) cuts.push(i + 1);
    ctx.script = () => ({ pieces: splitAt(bytes, cuts), pauseMs: 3 });
    await send(page, 'unicode');
    await lastAnswerDone(page);
    assert.equal((await page.textContent('.message.assistant .content')).trim(), answer);
    for (const state of await paints(page)) assert.ok(!state.text.includes('\ufffd'), `U+FFFD in ${state.text}`);
    await page.context().close();
  });

  test('an unclosed fence is code while it streams; the final HTML is the whole document', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await startPaintSampler(page);
    const pieces = ['Here is **code**:\n\n', '```js\n', 'const a = 1;\n', 'const b = ', '2;\n', 'function f() {}\n', '```\n', '\nAnd `inline', '` and _emphasis_ done.'];
    ctx.script = () => ({ pieces: [Buffer.from(sseEvents(pieces))].flatMap((b) => splitAt(b, [...b.keys()].filter((i) => i % 60 === 0 && i))), pauseMs: 60 });
    await send(page, 'code please');
    await lastAnswerDone(page);
    const states = await paints(page);
    const streamingCode = states.filter((s) => s.text.includes('const a') && !s.text.includes('And'));
    assert.ok(streamingCode.length > 0, 'a paint while the fence was open');
    for (const state of streamingCode) {
      assert.match(state.html, /<pre><code[^>]*>/, 'open fence rendered as code');
      assert.ok(!state.text.includes('```'), 'no raw fence marks shown');
    }
    for (const state of states) assert.ok(!state.text.includes('**'), `raw ** shown: ${state.text}`);
    const html = await page.innerHTML('.message.assistant .content');
    assert.match(html, /<strong>code<\/strong>/);
    assert.match(html, /<pre><code class="hljs language-js">[\s\S]*const[\s\S]*function[\s\S]*<\/code><\/pre>/);
    assert.match(html, /<code>inline<\/code> and <em>emphasis<\/em> done\./);
    await page.context().close();
  });

  test('a long code block streamed in many pieces keeps every line, in order, none clipped', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const lines = Array.from({ length: 300 }, (_, i) => `const line${i} = ${i}; // ${i === 150 ? 'wide '.repeat(80) : 'note'}\n`);
    const pieces = ['Code:\n\n```js\n', ...lines, '```\n\nAfter the code.'];
    const bytes = Buffer.from(sseEvents(pieces));
    // About a hundred network writes over two seconds: the page reveals the block in many pieces.
    ctx.script = () => ({ pieces: splitAt(bytes, [...bytes.keys()].filter((i) => i % Math.ceil(bytes.length / 100) === 0 && i)), pauseMs: 20 });
    await send(page, 'long code');
    await lastAnswerDone(page);
    // Lines out of view are skipped by rendering (content-visibility): the wide one is looked at.
    await page.evaluate(() => [...document.querySelectorAll('.message.assistant pre code .code-lines')]
      .find((el) => el.textContent.includes('line150 ')).scrollIntoView({ block: 'center' }));
    await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
    const shown = await page.evaluate(() => {
      const code = document.querySelector('.message.assistant pre code');
      const wide = [...code.querySelectorAll('.code-lines')].find((el) => el.textContent.includes('line150 '));
      const pre = code.parentElement;
      return {
        text: code.textContent, groups: code.querySelectorAll('.code-group').length,
        wide: wide && { width: wide.getBoundingClientRect().width, textWidth: (() => {
          const range = document.createRange();
          range.selectNodeContents(wide);
          return range.getBoundingClientRect().width;
        })() },
        preScrolls: pre.scrollWidth > pre.clientWidth,
      };
    });
    assert.equal(shown.text.replace(/\n$/, ''), lines.join('').replace(/\n$/, ''));
    assert.ok(shown.wide && shown.wide.textWidth <= shown.wide.width + 1, `the wide line is clipped: ${JSON.stringify(shown.wide)}`);
    assert.ok(shown.preScrolls, 'the block does not scroll sideways to its wide line');
    assert.deepEqual(await horizontalOverflow(page), []);
    assert.match(await page.textContent('.message.assistant .content'), /After the code\./);
    assert.ok(shown.groups >= 2, `the block was not streamed in groups of pieces (${shown.groups})`);
    await page.context().close();
  });

  test('markup in an answer executes nothing', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const hostile = [
      'Look: <img src=x onerror="window.__pwned=1"> ',
      '<script>window.__pwned=2</script> ',
      '[click](javascript:window.__pwned=3) ',
      '<a href="javascript:window.__pwned=4">a</a> ',
      '![i](javascript:window.__pwned=5) ',
      '<svg onload="window.__pwned=6"></svg> ',
      '<iframe src="javascript:window.__pwned=7"></iframe>\n\n',
      '[ok](https://example.com) and <b onmouseover="window.__pwned=8">b</b>',
    ];
    ctx.script = () => ({ pieces: [Buffer.from(sseEvents(hostile))], pauseMs: 1 });
    await send(page, 'hostile');
    await lastAnswerDone(page);
    await page.hover('.message.assistant .content');
    await page.waitForTimeout(300);
    const found = await page.evaluate(() => {
      const root = document.querySelector('#messages');
      const handlers = [...root.querySelectorAll('*')].flatMap((el) => [...el.attributes].filter((a) => /^on/i.test(a.name)).map((a) => a.name));
      return {
        pwned: window.__pwned,
        javascriptLinks: [...root.querySelectorAll('[href],[src]')].filter((el) => /^\s*javascript:/i.test(el.getAttribute('href') || el.getAttribute('src') || '')).length,
        scripts: root.querySelectorAll('script, iframe, svg, img[onerror]').length,
        handlers,
        safeLink: root.querySelector('a[href="https://example.com"]')?.getAttribute('rel'),
      };
    });
    assert.equal(found.pwned, undefined);
    assert.equal(found.javascriptLinks, 0);
    assert.equal(found.scripts, 0);
    assert.deepEqual(found.handlers, []);
    assert.equal(found.safeLink, 'noopener noreferrer');
    await page.context().close();
  });

  test('keyboard only: every control has a name, Tab reaches the message box, the theme toggles', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { colorScheme: 'dark' });
    await ready(page);
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, select, textarea, input, a[href]')]
      .filter((el) => !el.closest('[hidden]'))
      .filter((el) => !(el.getAttribute('aria-label') || el.textContent.trim() || (el.id && document.querySelector(`label[for="${el.id}"]`))))
      .map((el) => el.outerHTML));
    assert.deepEqual(unnamed, []);
    let reached = false;
    for (let i = 0; i < 30 && !reached; i += 1) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.id === 'prompt');
    }
    assert.ok(reached, 'Tab reaches the message box');
    await page.keyboard.type('typed without a mouse');
    await page.keyboard.press('Enter');
    await lastAnswerDone(page);
    assert.equal((await page.textContent('.message.assistant .content')).trim(), 'typed without a mouse');
    await page.click('#theme');
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
    await page.context().close();
  });

  test('copy puts the answer on the clipboard; regenerate asks again and replaces the answer', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { permissions: ['clipboard-read', 'clipboard-write'] });
    await ready(page);
    ctx.script = () => ({ pieces: [Buffer.from(sseEvents(['first ', '**answer**']))], pauseMs: 5 });
    await send(page, 'question');
    await lastAnswerDone(page);
    await page.click('.message.assistant button[aria-label="Copy this answer"]');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'first **answer**');
    const before = ctx.proxy.requests.length;
    ctx.script = () => ({ pieces: [Buffer.from(sseEvents(['second ', 'answer']))], pauseMs: 5 });
    await page.click('.message.assistant button[aria-label="Regenerate this answer"]');
    await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.trim() === 'second answer');
    await lastAnswerDone(page);
    assert.equal(ctx.proxy.requests.length, before + 1);
    assert.equal(ctx.proxy.requests.at(-1).body.messages.at(-1).content, 'question');
    // Without sessions the page sends the conversation: the replaced answer is not in it.
    assert.deepEqual(ctx.proxy.requests.at(-1).body.messages.map((m) => m.role), ['user']);
    assert.equal(await page.locator('.message.assistant').count(), 1);
    assert.equal(await page.locator('.message.user').count(), 1);
    await page.context().close();
  });

  test('Enter during IME composition does not send; Shift+Enter is a new line; Enter sends', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const before = ctx.proxy.requests.length;
    await page.fill('#prompt', 'にほんご');
    await page.evaluate(() => {
      const prompt = document.querySelector('#prompt');
      prompt.dispatchEvent(new CompositionEvent('compositionstart', { bubbles: true }));
      prompt.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', code: 'Enter', isComposing: true, bubbles: true, cancelable: true }));
      const legacy = new KeyboardEvent('keydown', { key: 'Enter', code: 'Enter', bubbles: true, cancelable: true });
      Object.defineProperty(legacy, 'keyCode', { value: 229 });
      prompt.dispatchEvent(legacy);
      prompt.dispatchEvent(new CompositionEvent('compositionend', { bubbles: true, data: 'にほんご' }));
    });
    await page.waitForTimeout(300);
    assert.equal(ctx.proxy.requests.length, before, 'sent during composition');
    assert.equal(await page.inputValue('#prompt'), 'にほんご');
    await page.press('#prompt', 'Shift+Enter');
    await page.type('#prompt', 'second line');
    assert.equal(await page.inputValue('#prompt'), 'にほんご\nsecond line');
    assert.equal(await page.locator('.message').count(), 0);
    await page.press('#prompt', 'Enter');
    await lastAnswerDone(page);
    assert.equal(ctx.proxy.requests.length, before + 1);
    const sent = ctx.proxy.requests.at(-1).body;
    assert.equal(sent.stream, true);
    assert.deepEqual(sent.stream_options, { include_usage: true });
    assert.equal(sent.messages.at(-1).content, 'にほんご\nsecond line');
    await page.context().close();
  });

  test('a key refused while asking: back to the sign-in, and the message waits in the box', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const refusal = JSON.stringify({ error: { message: 'the API key was revoked', type: 'authentication_error', code: 'invalid_api_key' } });
    ctx.script = () => ({ status: 401, headers: { 'Content-Type': 'application/json' }, pieces: [Buffer.from(refusal)] });
    await send(page, 'A question worth keeping');
    await page.waitForSelector('#signin:not([hidden])');
    await page.fill('#api-key', 'sk-another');
    await page.press('#api-key', 'Enter');
    await ready(page);
    assert.equal(await page.inputValue('#prompt'), 'A question worth keeping');
    assert.equal(await page.locator('.message').count(), 0, 'the refused question was left in the conversation');
    await page.context().close();
  });

  test('a connection lost mid-answer: what came stays, the loss is said, the message is back in the box', async () => {
    // A proxy of its own, closed (every connection cut) while the answer streams.
    // The answer's first events only: no finish, no [DONE].
    const firstHalf = sseEvents(['The first half ']).split('data: ').slice(0, 3).join('data: ');
    const cut = await scriptingProxy(ctx.server.url, () => ({ pieces: [Buffer.from(firstHalf)], pauseMs: 60000 }));
    const page = await openPage(ctx.browser, cut.url);
    try {
      await ready(page);
      await send(page, 'Tell me everything');
      await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.includes('first half'));
      await cut.close();
      await lastAnswerDone(page);
      const answer = page.locator('.message.assistant').last();
      assert.match(await answer.locator('.content').textContent(), /The first half/);
      assert.match(await answer.locator('.answer-notices').textContent(), /connection to the server was lost/);
      assert.equal(await page.inputValue('#prompt'), 'Tell me everything');
    } finally {
      await page.context().close();
      await cut.close();
    }
  });

  test('badges, reasoning, citations, tool calls, a content filter and a mid-stream error', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const base = { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'scripted' };
    const events = [
      { ...base, choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: 'The user asks about dragons. ' }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { reasoning_content: 'Cite the bestiary.' }, finish_reason: null }],
        chatflow: { citations: [{ index: 1, document: 'bestiary.md', title: 'The Bestiary', chunk: 'Dragons hoard gold.' }] } },
      { ...base, choices: [{ index: 0, delta: { content: 'Dragons **hoard** gold [1].\n\n' }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":' } }] }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { content: 'More text that' }, finish_reason: 'content_filter' }] },
      { ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 } },
    ];
    const body = `${events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join(': comment\r\n')}data: [DONE]\r\n\r\n`;
    ctx.script = () => ({ headers: { 'x-chatflow-cache': 'exact', 'x-chatflow-arm': 'b' }, pieces: splitAt(Buffer.from(body), [50, 400, 700]), pauseMs: 30 });
    await send(page, 'Tell me about dragons');
    await lastAnswerDone(page);
    const answer = page.locator('.message.assistant').last();
    // Cache and A/B badges are for operators: shown only in the developer view.
    assert.equal(await answer.locator('.badge').first().isVisible(), false, 'an internal badge is shown to an end user');
    await screenshot(page, 'chat.png');
    await page.check('#developer-view');
    assert.equal(await answer.locator('.badge[data-kind="cache-exact"]').isVisible(), true);
    assert.match(await answer.locator('.badge[data-kind="arm"]').textContent(), /arm b/);
    assert.match(await answer.locator('details.reasoning').textContent(), /Cite the bestiary/);
    assert.equal(await answer.locator('details.reasoning').getAttribute('open'), null, 'reasoning starts collapsed');
    assert.match(await answer.locator('.citations li').first().textContent(), /The Bestiary/);
    assert.match(await answer.locator('.tool-call').textContent(), /get_weather[\s\S]*"city": "Paris"/);
    assert.match(await answer.locator('.answer-notices').textContent(), /content filter/);
    assert.match(await answer.locator('.stats').textContent(), /12 tokens/);

    const failing = `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: 'Half an ans' }, finish_reason: null }] })}\n\ndata: {"error":{"message":"the engine ran out of memory","type":"server_error"}}\n\n`;
    ctx.script = () => ({ pieces: [Buffer.from(failing)], pauseMs: 5 });
    await send(page, 'again');
    await lastAnswerDone(page);
    assert.match(await page.locator('.message.assistant').last().locator('.answer-notices').textContent(), /ran out of memory/);
    await page.context().close();
  });
});

describe('a retracted answer', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-echo', { wordsPerChunk: 1 });

  test('the shown text goes, the notice stands in its place, and it is not sent as context', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const base = { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'scripted' };
    const events = [
      { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'Once a dragon ' }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: { content: 'burned the village down.' }, finish_reason: null }] },
    ];
    const tail = [
      { ...base, choices: [{ index: 0, delta: { content: '\n\n[This answer was withdrawn by the content filter.]' }, finish_reason: null }] },
      { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'content_filter' }], chatflow: { retract: { reason: 'content_filter' } } },
    ];
    const text = (list) => Buffer.from(list.map((e) => `data: ${JSON.stringify(e)}\n\n`).join(''));
    // The retract comes well after the text, as a moderation verdict would.
    ctx.script = () => ({ pieces: [text(events), Buffer.alloc(0), text(tail), Buffer.from('data: [DONE]\n\n')], pauseMs: 600 });
    await send(page, 'Tell me a story');
    await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.includes('dragon'));
    await lastAnswerDone(page);
    const answer = page.locator('.message.assistant').last();
    const shown = await answer.locator('.content').textContent();
    assert.ok(!shown.includes('dragon'), `the retracted text is still shown: ${shown}`);
    assert.match(shown, /withdrawn by the content filter after it was shown/);
    assert.equal(await answer.getAttribute('class'), 'message assistant retracted');
    assert.equal(await answer.locator('.retracted-notice').count(), 1);
    assert.doesNotMatch(await answer.locator('.answer-notices').textContent(), /rest of this answer/);

    await send(page, 'And then?');
    await lastAnswerDone(page);
    const sent = ctx.proxy.requests.at(-1).body.messages;
    assert.ok(!JSON.stringify(sent).includes('dragon'), `the retracted answer went back as context: ${JSON.stringify(sent)}`);
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });
});

describe('Stop, rate limits and saved conversations', { skip: reason || false }, () => {
  let browser;
  before(async () => {
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
  });

  test('Stop cancels the generation on the server: the engine frees its sequence', async () => {
    const server = await startServer(['--pipeline', modelPipeline('web-stop')]);
    try {
      const page = await openPage(browser, server.url);
      await ready(page);
      // The page sends what a user would; the test asks for a long answer the random model
      // cannot end early.
      await page.route('**/v1/chat/completions', (route) => {
        const body = JSON.parse(route.request().postData());
        route.continue({ postData: JSON.stringify({ ...body, max_tokens: 16000, ignore_eos: true }) });
      });
      await send(page, 'Tell me a very long story');
      await page.waitForFunction(() => (document.querySelector('.message.assistant .content')?.textContent.length ?? 0) > 5);
      const busy = await scrape(server.url);
      assert.equal(metric(busy, 'chatflow:num_requests_running'), 1);
      assert.ok(metric(busy, 'chatflow:kv_cache_sequence_blocks') > 0);
      assert.equal(await page.textContent('#send'), 'Stop');
      assert.equal(await page.getAttribute('#prompt', 'readonly'), '');
      await page.click('#send');
      const idle = await waitFor(async () => {
        const samples = await scrape(server.url);
        return metric(samples, 'chatflow:num_requests_running') === 0 &&
          metric(samples, 'chatflow:kv_cache_sequence_blocks') === 0 &&
          metric(samples, 'chatflow:http_requests_total', 'status="499"') === 1 ? samples : undefined;
      }, { what: 'the engine to free the stopped sequence' });
      // Uncancelled, the request would run to its 16,000 tokens; how many came before the
      // cancel depends on the machine's speed, so the bound is only well below that.
      const generated = metric(idle, 'chatflow:engine_generated_tokens_total');
      assert.ok(generated < 12000, `generation went on: ${generated} tokens`);
      await lastAnswerDone(page);
      assert.match(await page.textContent('.message.assistant .answer-notices'), /Stopped/);
      assert.equal(await page.textContent('#send'), 'Send');
      assert.equal(await page.getAttribute('#prompt', 'readonly'), null);
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('a 429 shows a live Retry-After countdown and puts the typed message back', async () => {
    const pipeline = writeTemp('web-limits.yaml', `version: 1
name: web-limits
stages:
  - {name: limits, type: rate_limit, config: {rpm: 1, window_s: 6}}
  - {name: echo, type: echo}
`);
    const server = await startServer(['--pipeline', pipeline]);
    try {
      const page = await openPage(browser, server.url);
      await ready(page);
      await send(page, 'first');
      await lastAnswerDone(page);
      await send(page, 'second');
      await page.waitForSelector('#notice:not([hidden])');
      const first = Number(await page.getAttribute('#notice', 'data-retry-after'));
      assert.ok(first >= 2, `Retry-After ${first}`);
      assert.match(await page.textContent('#notice'), new RegExp(`again in ${first} s`));
      assert.equal(await page.isDisabled('#send'), true);
      // The refused message is back in the box, not left in the conversation as if asked.
      assert.equal(await page.inputValue('#prompt'), 'second');
      assert.deepEqual(await page.locator('.message.user .content').allTextContents(), ['first']);
      // It counts down by itself: two seconds less within a few seconds (not a fixed sleep).
      const later = await page.waitForFunction((start) => {
        const left = Number(document.querySelector('#notice').dataset.retryAfter);
        return left <= start - 2 ? left : false;
      }, first, { timeout: 5000 });
      assert.ok(await later.jsonValue() <= first - 2);
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('sign-in; a reload keeps the conversation list (sessions from the server)', async () => {
    const keys = scratchPath('web-session-keys.yaml');
    const key = addKey(keys, 'web-tenant', { user: 'alice' });
    const pipeline = sessionPipeline('web-sessions', keys, scratchPath('web-history.db'));
    const server = await startServer(['--pipeline', pipeline]);
    try {
      const page = await openPage(browser, server.url);
      await page.waitForSelector('#signin:not([hidden])');
      await page.fill('#api-key', 'sk-wrong');
      await page.press('#api-key', 'Enter');
      await page.waitForSelector('#signin:not([hidden])');
      await page.waitForFunction(() => /not accepted/.test(document.querySelector('#signin-message').textContent));
      await page.fill('#api-key', key);
      await page.press('#api-key', 'Enter');
      await ready(page);
      const listed = await fetch(`${server.url}/v1/sessions`, { headers: { Authorization: `Bearer ${key}` } });
      assert.equal(listed.status, 200, `GET /v1/sessions: ${await listed.text()}`);
      await page.route('**/v1/chat/completions', (route) => {
        const body = JSON.parse(route.request().postData());
        route.continue({ postData: JSON.stringify({ ...body, max_tokens: 8 }) });
      });
      await send(page, 'Remember the blue door.');
      await lastAnswerDone(page);
      await page.waitForSelector('#sessions li.session');
      const id = await page.getAttribute('#sessions li.session', 'data-id');
      assert.match(id, /^web-/);

      // With sessions Regenerate is offered (the server keeps the answer it replaces as a
      // branch: web_chat_branches), with no reason under it.
      const regenerate = page.locator('.message.assistant').last().locator('button[aria-label="Regenerate this answer"]');
      assert.equal(await regenerate.isDisabled(), false);
      assert.equal(await page.locator('.regenerate-reason').count(), 0);
      let posts = 0;
      page.on('request', (request) => { if (request.method() === 'POST') posts += 1; });
      await send(page, 'And the red window.');
      await lastAnswerDone(page);
      assert.equal(posts, 1, 'only the new message was sent');
      const stored = await (await fetch(`${server.url}/v1/sessions/${encodeURIComponent(id)}`, { headers: { Authorization: `Bearer ${key}` } })).json();
      assert.deepEqual(stored.turns.map((turn) => turn.user), ['Remember the blue door.', 'And the red window.']);
      await page.reload();
      await ready(page);
      await page.waitForSelector(`#sessions li.session[data-id="${id}"]`);
      await page.click(`#sessions li.session[data-id="${id}"] button.open`);
      await page.waitForSelector('.message.user');
      assert.equal((await page.textContent('.message.user .content')).trim(), 'Remember the blue door.');
      assert.equal(await page.locator('.message.assistant').count(), 2);

      // Rename with the keyboard: the title is the server's afterwards.
      await page.focus(`#sessions li.session[data-id="${id}"] button[aria-label^="Rename"]`);
      await page.keyboard.press('Enter');
      await page.keyboard.press('Control+A');
      await page.keyboard.type('The blue door');
      await page.keyboard.press('Enter');
      await page.waitForFunction((sid) => document.querySelector(`#sessions li.session[data-id="${sid}"] button.open`)?.textContent === 'The blue door', id);
      const renamed = await (await fetch(`${server.url}/v1/sessions`, { headers: { Authorization: `Bearer ${key}` } })).json();
      assert.equal(renamed.data.find((session) => session.id === id).title, 'The blue door');
      // Delete takes a second press.
      const remove = `#sessions li.session[data-id="${id}"] button.danger`;
      await page.click(remove);
      assert.match(await page.textContent(remove), /Delete\?/);
      await page.click(remove);
      await page.waitForSelector(`#sessions li.session[data-id="${id}"]`, { state: 'detached' });
      assert.equal((await fetch(`${server.url}/v1/sessions/${id}`, { headers: { Authorization: `Bearer ${key}` } })).status, 404);
      await screenshot(page, 'chat-sessions.png');
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});

// --- The shell: what stays on screen, what scrolls, what fits (issue 37's layout item). ---

// Where the fixed parts are and what scrolls, measured in the page.
function shellState(page) {
  return page.evaluate(() => {
    const box = (selector) => {
      const r = document.querySelector(selector).getBoundingClientRect();
      return { top: r.top, bottom: r.bottom, left: r.left, right: r.right };
    };
    const doc = document.scrollingElement;
    const pane = document.querySelector('#messages');
    return {
      width: innerWidth, height: innerHeight, topbar: box('.topbar'), composer: box('#composer'),
      documentScrollHeight: doc.scrollHeight, documentClientHeight: doc.clientHeight, documentScrollTop: doc.scrollTop,
      paneScrollHeight: pane.scrollHeight, paneClientHeight: pane.clientHeight, paneScrollTop: pane.scrollTop,
    };
  });
}

function assertOnScreen(box, state, what) {
  assert.ok(box.top >= 0 && box.bottom <= state.height + 0.5, `${what} is off screen: ${JSON.stringify(box)} in ${state.width}x${state.height}`);
  assert.ok(box.left >= -0.5 && box.right <= state.width + 0.5, `${what} sticks out sideways: ${JSON.stringify(box)} in ${state.width}x${state.height}`);
}

// Every shown element that sticks out of the viewport or overflows its own box sideways. Code
// blocks and tables scroll sideways by design (their own scrollbar): what is inside them is not
// counted, and they must be scroll containers. Ellipsis-clipped titles overflow on purpose.
// The skip link waits off screen until it is focused; visually hidden labels (for screen
// readers) are clipped to a pixel on purpose.
function horizontalOverflow(page) {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    const name = (el) => `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.className && typeof el.className === 'string' ? `.${el.className.trim().split(/\s+/).join('.')}` : ''}`;
    const found = [];
    const doc = document.scrollingElement;
    if (doc.scrollWidth > doc.clientWidth) found.push(`the document: scrollWidth ${doc.scrollWidth} > ${doc.clientWidth}`);
    for (const el of document.querySelectorAll('body *')) {
      if (!el.checkVisibility({ visibilityProperty: true, opacityProperty: false })) continue;
      if (el.matches('.skip:not(:focus), .visually-hidden')) continue;
      if (el.parentElement.closest('.markdown pre, .markdown table')) continue;
      const style = getComputedStyle(el);
      if (el.matches('.markdown pre, .markdown table')) {
        if (el.scrollWidth > el.clientWidth && !['auto', 'scroll'].includes(style.overflowX)) found.push(`${name(el)} is wider than its box and does not scroll`);
      } else if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && style.textOverflow !== 'ellipsis') {
        found.push(`${name(el)}: scrollWidth ${el.scrollWidth} > clientWidth ${el.clientWidth}`);
      }
      const r = el.getBoundingClientRect();
      if (r.width > 0 && (r.left < -1 || r.right > width + 1)) found.push(`${name(el)}: ${Math.round(r.left)}..${Math.round(r.right)} outside 0..${width}`);
    }
    return found;
  });
}

// Long answers, each well over a screen.
const longAnswer = (n) => Array.from({ length: 60 }, (_, i) => `Paragraph ${i} of long answer ${n}.\n\n`);

describe('the page shell at desktop and phone sizes', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-echo', { wordsPerChunk: 1 });

  for (const viewport of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    test(`at ${viewport.width}x${viewport.height} only the message pane scrolls; the top bar and composer stay`, async () => {
      const page = await openPage(ctx.browser, ctx.proxy.url, { viewport });
      await ready(page);
      for (let n = 0; n < 3; n += 1) {
        ctx.script = () => ({ pieces: [Buffer.from(sseEvents(longAnswer(n)))], pauseMs: 1 });
        await send(page, `question ${n}`);
        await lastAnswerDone(page);
      }
      let state = await shellState(page);
      assert.ok(state.paneScrollHeight > state.paneClientHeight + 1000, `the conversation does not overflow: ${JSON.stringify(state)}`);
      assert.ok(state.documentScrollHeight <= state.documentClientHeight, `the page itself scrolls: ${JSON.stringify(state)}`);
      assertOnScreen(state.topbar, state, 'the top bar');
      assertOnScreen(state.composer, state, 'the composer');
      assert.ok(state.paneScrollTop > 0, 'the pane followed the answers down');

      // A wheel over the conversation moves the pane, never the page.
      const bottom = state.paneScrollTop;
      const pane = await page.locator('#messages').boundingBox();
      await page.mouse.move(pane.x + pane.width / 2, pane.y + pane.height / 2);
      await page.mouse.wheel(0, -1500);
      await page.waitForFunction((was) => document.querySelector('#messages').scrollTop < was, bottom);
      await page.mouse.wheel(0, 5000);
      await page.evaluate(() => window.scrollTo(0, 100000));
      state = await shellState(page);
      assert.equal(state.documentScrollTop, 0, 'the page scrolled');
      assert.equal(await page.evaluate(() => window.scrollY), 0, 'the window scrolled');
      assertOnScreen(state.topbar, state, 'the top bar after scrolling');
      assertOnScreen(state.composer, state, 'the composer after scrolling');
      await screenshot(page, `chat-${viewport.width}x${viewport.height}.png`);
      await page.context().close();
    });
  }

  for (const width of [320, 390, 1920]) {
    test(`nothing is wider than a ${width} px viewport, long unbroken text included`, async () => {
      const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width, height: 800 } });
      await ready(page);
      const unbroken = `https://example.com/${'a'.repeat(300)}`;
      await send(page, unbroken);
      await lastAnswerDone(page);
      const wide = [
        `Here: ${'b'.repeat(200)}\n\n`,
        '```\n', `${'const veryLongName = 1; '.repeat(20)}\n`, '```\n\n',
        `| ${Array.from({ length: 12 }, (_, i) => `column ${i}`).join(' | ')} |\n`,
        `|${' --- |'.repeat(12)}\n`, `| ${Array.from({ length: 12 }, (_, i) => `value ${i}`).join(' | ')} |\n`,
      ];
      ctx.script = () => ({ pieces: [Buffer.from(sseEvents(wide))], pauseMs: 1 });
      await send(page, 'wide things');
      await lastAnswerDone(page);
      const bubble = await page.evaluate(() => {
        const content = document.querySelector('.message.user .content');
        const r = content.getBoundingClientRect();
        return { scrollWidth: content.scrollWidth, clientWidth: content.clientWidth, right: r.right };
      });
      assert.ok(bubble.scrollWidth <= bubble.clientWidth, `the user's text overflows its bubble: ${JSON.stringify(bubble)}`);
      assert.deepEqual(await horizontalOverflow(page), []);
      await page.context().close();
    });
  }
});

// Signs in to a session pipeline's server, asks one short question and waits for it in the list.
async function signedInWithOneConversation(browser, server, key, viewport) {
  const page = await openPage(browser, server.url, { viewport });
  await signInWithShortAnswers(page, key, 8);
  await send(page, 'Remember the blue door.');
  await lastAnswerDone(page);
  await page.waitForSelector('#sessions li.session', { state: 'attached' });
  return page;
}

const inViewport = (page, selector) => page.evaluate((sel) => {
  const el = document.querySelector(sel);
  if (!el || !el.checkVisibility({ visibilityProperty: true })) return false;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight;
}, selector);

describe('a phone, and a server that goes away', { skip: reason || false }, () => {
  let browser;
  before(async () => {
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
  });

  test('at 390x844 the menu button opens the conversation list as a drawer; New chat and the list work', async () => {
    const keys = scratchPath('web-phone-keys.yaml');
    const key = addKey(keys, 'web-phone', { user: 'bob' });
    const server = await startServer(['--pipeline', sessionPipeline('web-phone', keys, scratchPath('web-phone-history.db'))]);
    try {
      const page = await signedInWithOneConversation(browser, server, key, { width: 390, height: 844 });
      const id = await page.getAttribute('#sessions li.session', 'data-id');
      assert.equal(await inViewport(page, '#new-chat'), false, 'the list is closed until asked for');
      assert.equal(await inViewport(page, '#menu'), true, 'no menu button on screen');
      assert.equal(await inViewport(page, '#signout'), true, 'Sign out is not on screen');
      assert.equal(await inViewport(page, '#composer'), true, 'the composer is not on screen');
      await screenshot(page, 'chat-phone.png');

      await page.click('#menu');
      await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'true');
      await page.waitForFunction(() => {
        const r = document.querySelector('#sidebar').getBoundingClientRect();
        return r.left >= 0 && r.right <= innerWidth;
      });
      assert.equal(await inViewport(page, '#new-chat'), true);
      assert.equal(await inViewport(page, `#sessions li.session[data-id="${id}"] button.open`), true);
      assert.equal(await page.evaluate(() => document.querySelector('main').inert), true, 'the page behind the drawer takes focus');
      await screenshot(page, 'chat-phone-drawer.png');
      await page.click('#new-chat');
      assert.equal(await page.locator('.message').count(), 0, 'New chat left the old conversation');
      assert.equal(await page.textContent('#conversation-title'), 'New conversation');
      await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      assert.equal(await page.evaluate(() => document.activeElement?.id), 'prompt');

      // The list reopens the saved conversation; Escape closes the drawer without choosing.
      await page.click('#menu');
      await page.keyboard.press('Escape');
      await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      await page.click('#menu');
      await page.click(`#sessions li.session[data-id="${id}"] button.open`);
      await page.waitForSelector('.message.user');
      assert.equal((await page.textContent('.message.user .content')).trim(), 'Remember the blue door.');
      await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      assert.equal(await inViewport(page, '#new-chat'), false, 'the drawer stayed open over the conversation');

      // Widened past the phone layout with the drawer open: the sidebar is in place, the page usable.
      await page.click('#menu');
      await page.setViewportSize({ width: 1000, height: 700 });
      await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      assert.equal(await page.evaluate(() => document.querySelector('main').inert), false);
      // (The drawer may still be sliding back.)
      await page.waitForFunction(() => document.querySelector('#new-chat').getBoundingClientRect().left >= 0);
      assert.equal(await inViewport(page, '#new-chat'), true);
      assert.equal(await inViewport(page, '#menu'), false, 'the menu button shows beside the sidebar');

      // The narrowest phone: the signed-in top bar (Sign out included) still fits.
      await page.setViewportSize({ width: 320, height: 640 });
      assert.equal(await inViewport(page, '#signout'), true, 'Sign out is not on screen at 320 px');
      assert.equal(await inViewport(page, '#composer'), true, 'the composer is not on screen at 320 px');
      assert.deepEqual(await horizontalOverflow(page), []);
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('with the server stopped: a clear message, the list kept, the typed text back in the box', async () => {
    const keys = scratchPath('web-down-keys.yaml');
    const key = addKey(keys, 'web-down', { user: 'carol' });
    const server = await startServer(['--pipeline', sessionPipeline('web-down', keys, scratchPath('web-down-history.db'))]);
    let stopped = false;
    try {
      const page = await signedInWithOneConversation(browser, server, key, { width: 1280, height: 800 });
      const id = await page.getAttribute('#sessions li.session', 'data-id');
      assert.equal((await server.stop()).code, 0);
      stopped = true;
      await send(page, 'Is anyone there?');
      await page.waitForFunction(() => /cannot reach|failed to fetch|request failed/i.test(document.querySelector('#app').innerText));
      // The list is read again after a request; give that read its failure too.
      await page.waitForFunction(() => !document.querySelector('#sessions-note').hidden);
      const shown = await page.evaluate(() => document.querySelector('#app').innerText);
      assert.match(shown, /cannot reach the server/i);
      assert.doesNotMatch(shown, /failed to fetch/i);
      assert.doesNotMatch(shown, /keeps no conversations/i);
      assert.equal(await page.locator(`#sessions li.session[data-id="${id}"]`).count(), 1, 'the conversation list was emptied');
      assert.equal(await page.inputValue('#prompt'), 'Is anyone there?');
      assert.equal(await page.locator('.message.user').count(), 1, 'the unsent question is left in the conversation as well as in the box');
      assert.equal(await page.textContent('#send'), 'Send');
      await page.context().close();
    } finally {
      if (!stopped) await server.stop();
    }
  });
});
