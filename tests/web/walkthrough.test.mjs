// The README's walk-through ("The chat page and the dashboard"), step by step, in a real chromium
// against a real `chatflow serve` with a history store, at 1280x800 and at 390x844: each step
// asserts what the README says the user sees, so the README cannot drift from the page. A
// scripting proxy in front of the server writes the answer (a formula, a Rust block and a
// citation); it first sends each request on to the server (a few tokens), so the server keeps
// the conversation, its branches and its counters as it would for a real answer.
// Screenshots: build/web-artifacts/walkthrough-desktop.png, walkthrough-phone.png and
// walkthrough-phone-drawer.png (copied to web/screenshots/ for the README).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, post, scratchPath, sessionPipeline, startServer } from '../server/harness.mjs';
import {
  lastAnswerDone, launch, openPage, ready, screenshot, scriptingProxy, send, signIn, skipReason, sseEvents,
} from './browser.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

const rust = 'fn triangle(n: u64) -> u64 {\n    n * (n + 1) / 2\n}\n';
const citation = {
  index: 1, document: 'gauss.md', title: 'Gauss and the schoolroom sum', chunk: 0,
  text: 'Young Gauss added the numbers from 1 to 100 by pairing them: 50 pairs of 101.',
};
// The answer the proxy writes, in pieces, with its citation.
const answerPieces = [
  'Pair the numbers from both ends [1]: ',
  '$$\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}$$\n\n',
  'In Rust:\n\n```rust\n', ...rust.split(/(?<=\n)/), '```\n\n',
  'So $n = 100$ gives 5050.',
];
const answerEvents = sseEvents(answerPieces, {
  extra: [{ choices: [{ index: 0, delta: {}, finish_reason: null }], chatflow: { citations: [citation] } }],
});

const userMessage = (page, index) => page.locator('#messages .message.user').nth(index);
const branchPosition = (page, index) => userMessage(page, index).locator('.branch-position').textContent();
const lastAnswer = (page) => page.locator('.message.assistant').last();

// Within the window's width: nothing scrolls sideways, and `selector` is on screen.
async function assertOnScreen(page, selector, width) {
  const box = await page.locator(selector).first().boundingBox();
  assert.ok(box && box.x >= 0 && box.x + box.width <= width + 0.5, `${selector} at ${JSON.stringify(box)}`);
  assert.ok(await page.evaluate((w) => document.documentElement.scrollWidth <= w, width), 'the page scrolls sideways');
}

describe('the README walk-through', { skip: reason || false }, () => {
  let browser;
  let server;
  let proxy;
  let admin;
  const keys = {};
  const delivered = { tokens: 0, requests: 0 };
  before(async () => {
    browser = await launch();
    const keysFile = scratchPath(`web-walkthrough-keys-${process.pid}.yaml`);
    keys.desktop = addKey(keysFile, 'walkthrough', { user: 'ada' });
    keys.phone = addKey(keysFile, 'walkthrough', { user: 'bea' });
    admin = addKey(keysFile, 'walkthrough', { user: 'root', roles: ['admin'] });
    server = await startServer(['--pipeline', sessionPipeline('web-walkthrough', keysFile, scratchPath(`web-walkthrough-${process.pid}.db`))]);
    proxy = await scriptingProxy(server.url, async (body, req) => {
      const kept = await post(server.url, '/v1/chat/completions', { ...body, stream: false, stream_options: undefined, max_tokens: 4 },
        { Authorization: req.headers.authorization });
      assert.equal(kept.status, 200, kept.text);
      delivered.tokens += kept.json.usage.completion_tokens;
      delivered.requests += 1;
      // One write per event, so the answer streams in.
      return { pieces: answerEvents.split(/(?<=\n\n)/).map((event) => Buffer.from(event)), pauseMs: 15 };
    });
  });
  after(async () => {
    await proxy?.close();
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  for (const [name, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]]) {
    test(`at ${viewport.width}x${viewport.height}`, async () => {
      const phone = name === 'phone';
      const page = await openPage(browser, proxy.url, { viewport, permissions: ['clipboard-read', 'clipboard-write'] });

      // 1. Sign in: the form asks for the key; then the chat page, the model picked, the
      //    message box empty.
      assert.equal(await page.textContent('#signin-message'), 'This server needs an API key.');
      await signIn(page, keys[name]);
      await ready(page);
      assert.equal(await page.inputValue('#model'), 'test-model');
      assert.equal(await page.locator('#messages .message').count(), 0);
      await assertOnScreen(page, '#prompt', viewport.width);
      await assertOnScreen(page, '#signout', viewport.width);

      // 2. Ask: the answer streams in as rendered markdown with a formula drawn as MathML, a
      //    highlighted Rust block with its language and Copy, and a numbered citation; while it
      //    answers Send is Stop; the conversation is listed under its question.
      const question = 'What is the sum of the numbers from 1 to n?';
      await send(page, question);
      await page.waitForFunction(() => document.querySelector('#send').textContent === 'Stop');
      await lastAnswerDone(page);
      assert.equal(await page.textContent('#send'), 'Send');
      const answer = lastAnswer(page);
      await page.waitForFunction(() => !document.querySelector('.math-pending') && document.querySelector('.message.assistant math'));
      assert.deepEqual(await answer.locator('math annotation').allTextContents(), ['\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}', 'n = 100']);
      assert.equal(await answer.locator('math[display="block"] mfrac').count(), 1);
      await answer.locator('pre code.language-rust .hljs-keyword').first().waitFor();
      assert.deepEqual([...new Set(await answer.locator('pre code .hljs-keyword').allTextContents())].sort(), ['fn']);
      assert.equal(await answer.locator('pre code').textContent(), rust);
      assert.match(await answer.locator('.code-head').textContent(), /^rust\s*Copy$/);
      assert.deepEqual(await answer.locator('.citations li').evaluateAll((items) => items.map((li) => [li.value, li.textContent])),
        [[1, `${citation.title} (${citation.document})`]], 'one numbered citation');
      await page.waitForFunction((q) => [...document.querySelectorAll('#sessions li.session')].some((li) => li.textContent.includes(q)), question);
      assert.equal(await page.textContent('#conversation-title'), question);

      // 3. Copy on the block puts its code on the clipboard and reads "Copied".
      await answer.locator('button.code-copy').click();
      await page.waitForFunction(() => document.querySelector('.message.assistant:last-of-type button.code-copy').textContent === 'Copied');
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), rust.slice(0, -1));

      // 4. The citation opens its passage; Escape closes it.
      await answer.locator('.citations button').first().click();
      await page.waitForSelector('#passage-dialog[open]');
      assert.equal(await page.textContent('#passage-dialog h2'), `[1] ${citation.title}`);
      assert.equal(await page.textContent('#passage-dialog .passage-text'), citation.text);
      await page.keyboard.press('Escape');
      await page.waitForFunction(() => !document.querySelector('#passage-dialog').open);

      // 5. Edit the question: Save & submit asks it again, the answer streams in, and ‹ 2/2 ›
      //    under the question; ‹ shows the first version (1/2), › the edited one again.
      const edited = 'What is the sum of the numbers from 1 to n, with a proof?';
      await userMessage(page, 0).locator('button[aria-label="Edit this message"]').click();
      await userMessage(page, 0).locator('textarea[aria-label="Edit your message"]').fill(edited);
      await userMessage(page, 0).locator('button', { hasText: 'Save & submit' }).click();
      await page.waitForFunction(() => document.querySelector('.message.user .branch-position')?.textContent === '2/2');
      await lastAnswerDone(page);
      await page.waitForFunction(() => !document.querySelector('.math-pending'));
      assert.equal(await userMessage(page, 0).locator('> .content').textContent(), edited);
      assert.equal(await lastAnswer(page).locator('math[display="block"]').count(), 1);
      await lastAnswer(page).locator('pre code.language-rust .hljs-keyword').first().waitFor();
      await assertOnScreen(page, '#messages .message.user .branch-nav', viewport.width);
      await page.evaluate(() => document.querySelector('#messages').scrollTo(0, 0));
      await screenshot(page, `walkthrough-${name}.png`);
      await userMessage(page, 0).locator('button[aria-label="Previous version"]').click();
      await page.waitForFunction((q) => document.querySelector('.message.user .branch-position')?.textContent === '1/2'
        && document.querySelector('.message.user > .content')?.textContent === q, question);
      await userMessage(page, 0).locator('button[aria-label="Next version"]').click();
      await page.waitForFunction((q) => document.querySelector('.message.user .branch-position')?.textContent === '2/2'
        && document.querySelector('.message.user > .content')?.textContent === q, edited);

      // 6. Settings (at the foot of the list; Ctrl+,): system prompt, temperature, top-p, max
      //    tokens, for this chat or as the default, and the model's context.
      if (phone) await page.keyboard.press('Control+Comma');
      else await page.click('#show-settings');
      await page.waitForSelector('#settings-dialog[open]');
      for (const field of ['#settings-system', '#settings-temperature', '#settings-top-p', '#settings-max-tokens']) {
        await assertOnScreen(page, field, viewport.width);
      }
      assert.deepEqual(await page.locator('#settings-dialog button:visible', { hasText: /^Save/ }).allTextContents(),
        ['Save for this chat', 'Save as default']);
      assert.match(await page.textContent('#settings-context'), /^test-model: a context of [\d,]+ tokens \(the conversation and the answer together\)\.$/);
      await page.keyboard.press('Escape');
      await page.waitForFunction(() => !document.querySelector('#settings-dialog').open);

      // 7. Search (Ctrl+K; on a phone it opens the list): from a new chat (Ctrl+Shift+O), a word
      //    finds the conversation, the word marked; Enter opens it.
      await page.keyboard.press('Control+Shift+O');
      await page.waitForFunction(() => !document.querySelector('#messages .message'));
      await page.keyboard.press('Control+K');
      if (phone) await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'true');
      await page.keyboard.type('proof');
      await page.waitForSelector('#search-results li');
      assert.equal(await page.locator('#search-results li').count(), 1);
      assert.equal(await page.textContent('#search-results li mark'), 'proof');
      await page.keyboard.press('Enter');
      await page.waitForFunction((q) => document.querySelector('.message.user > .content')?.textContent === q, edited);
      assert.equal(await page.textContent('.message.search-hit mark'), 'proof');
      // Escape in the box clears it: the list is back (on a phone, in the drawer, below).
      const clearSearch = async () => {
        await page.focus('#search');
        await page.keyboard.press('Escape');
        assert.equal(await page.inputValue('#search'), '');
      };
      if (!phone) await clearSearch();

      // 8. On a phone the list is a drawer: ☰ opens it (New chat, the conversation, Settings,
      //    the Dashboard link), ✕ closes it. On the desktop the list is always there.
      if (phone) {
        await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
        assert.equal(await page.isVisible('#new-chat'), false);
        await page.click('#menu');
        await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'true'
          && document.querySelector('#sidebar').getBoundingClientRect().left >= 0);
        await clearSearch();
        assert.equal(await page.getAttribute('#menu', 'aria-expanded'), 'true', 'Escape in the box closed the list');
        await screenshot(page, 'walkthrough-phone-drawer.png');
        for (const selector of ['#new-chat', '#sessions li.session', '#show-settings', 'a[href="/dashboard"]']) await assertOnScreen(page, selector, viewport.width);
        await page.click('#close-sidebar');
        await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      } else {
        assert.equal(await page.isVisible('#menu'), false);
        await assertOnScreen(page, '#sessions li.session', viewport.width);
      }
      assert.deepEqual(page.problems.filter((problem) => !/40[14]/.test(problem)), []);
      await page.context().close();

      // 9. The dashboard, with an admin key: health, requests by status, the tokens delivered
      //    (every answer the server finished), the hit rate and preemptions, the pipeline
      //    drawn, the usage panel (no quota stage here: it says so), charts over 15 min, 1 h or
      //    6 h.
      const board = await openPage(browser, `${proxy.url}/dashboard`, { viewport });
      await signIn(board, admin);
      await board.waitForFunction(() => document.querySelector('#health').textContent === 'Health: ok', null, { timeout: 15000 });
      await board.waitForFunction((tokens) => document.querySelector('[data-counter="tokens"] .value')?.textContent === tokens.toLocaleString('en-US'),
        delivered.tokens, { timeout: 15000 });
      const statuses = await board.evaluate(() => Object.fromEntries([...document.querySelectorAll('[data-counter="requests"] .status')]
        .map((part) => [part.dataset.status, Number(part.dataset.count)])));
      assert.ok(statuses[200] >= delivered.requests, JSON.stringify(statuses));
      await assertOnScreen(board, '[data-counter="tokens"]', viewport.width);
      for (const counter of ['hit-rate', 'preemptions']) assert.equal(await board.isVisible(`[data-counter="${counter}"] .value`), true, counter);
      await board.waitForSelector('#graph svg');
      assert.equal(await board.textContent('#usage'), 'No quota configured: this pipeline has no quota stage, so no usage ledger.');
      assert.deepEqual(await board.$$eval('#ranges button[data-range]', (buttons) => buttons.map((b) => b.dataset.range)), ['15m', '1h', '6h']);
      await board.waitForSelector('#charts figure[data-chart="status"]');
      await board.context().close();
    });
  }
});
