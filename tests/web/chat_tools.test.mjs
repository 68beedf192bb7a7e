// The chat page's everyday tools in a real chromium against a real `chatflow serve`: a Copy
// button on every code block. Where a test needs an exact answer (a code block, a pause in the
// middle of it) a scripting proxy in front of the server writes that one response; the page,
// its assets and every other call are the server's own.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startServer, writeTemp } from '../server/harness.mjs';
import { launch, openPage, scriptingProxy, skipReason, sseEvents } from './browser.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

const echoPipeline = () => writeTemp('web-tools-echo.yaml', `version: 1
name: web-tools-echo
stages:
  - {name: echo, type: echo, config: {words_per_chunk: 1}}
`);

async function ready(page) {
  await page.waitForSelector('#app:not([hidden])');
  await page.waitForFunction(() => document.querySelector('#model').options.length > 0);
}

async function send(page, text) {
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

const lastAnswerDone = (page, timeout = 20000) =>
  page.waitForSelector('.message.assistant:last-of-type[aria-busy="false"]', { timeout });

const clipboard = (page) => page.evaluate(() => navigator.clipboard.readText());

// An answer's SSE bytes cut into the given pieces of text, one network write each.
const answerIn = (parts) => {
  const events = sseEvents(parts).split(/(?<=\n\n)/);
  // The role event goes with the first part; finish, usage and [DONE] with the last.
  const writes = [events.slice(0, 2).join('')];
  for (let i = 2; i < parts.length + 1; i += 1) writes.push(events[i]);
  writes[writes.length - 1] += events.slice(parts.length + 1).join('');
  return writes.map((text) => Buffer.from(text));
};

describe('code blocks', { skip: reason || false }, () => {
  let browser;
  let server;
  let proxy;
  let script = null; // what the proxy answers for the next chat completion
  before(async () => {
    browser = await launch();
    server = await startServer(['--pipeline', echoPipeline()]);
    proxy = await scriptingProxy(server.url, async (body) => {
      const next = script;
      script = null;
      return next ? next(body) : null;
    });
  });
  after(async () => {
    await proxy?.close();
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  test('every finished code block has a Copy button, usable while the answer still streams', async () => {
    const page = await openPage(browser, proxy.url, { permissions: ['clipboard-read', 'clipboard-write'] });
    await ready(page);
    const rust = 'fn main() {\n    println!("hi <there> & \\"you\\"");\n}';
    const long = Array.from({ length: 120 }, (_, i) => `let value_${i} = compute(${i}); // line ${i} of a long block`).join('\n');
    // A short block, then (2 s later) a long one streamed line by line, then 2 s more of nothing
    // while a third block is still open; then the end.
    const parts = [
      `Here it is:\n\n\`\`\`rust\n${rust}\n\`\`\`\n\nAnd a long one:\n\n`,
      `\`\`\`js\n${long}\n\`\`\`\n\n`,
      'Still open:\n\n```py\nprint(1)\n',
      '```\n\nDone.',
    ];
    script = () => ({ pieces: answerIn(parts), pauseMs: 2000 });
    await send(page, 'code please');

    // The first block closed: its button is there while the answer is busy.
    const first = page.locator('.message.assistant .code-head').first();
    await first.waitFor();
    assert.equal(await page.getAttribute('.message.assistant', 'aria-busy'), 'true', 'the answer had already ended');
    assert.equal(await first.locator('.code-language').textContent(), 'rust');
    const button = first.locator('button.code-copy');
    assert.equal(await button.getAttribute('aria-label'), 'Copy this rust code');
    // From the keyboard: focus it and press Enter.
    await button.focus();
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('.message.assistant button.code-copy').textContent === 'Copied');
    assert.equal(await clipboard(page), rust);
    // Two seconds later it reads Copy again.
    await page.waitForFunction(() => document.querySelector('.message.assistant button.code-copy').textContent === 'Copy', null, { timeout: 4000 });

    // The long block (kept as streamed, not rendered again) gets its button once it closes; the
    // open one has none until then.
    await page.waitForFunction(() => document.querySelector('.message.assistant .content').textContent.includes('print(1)'));
    const heads = await page.evaluate(() => [...document.querySelectorAll('.message.assistant pre')].map((pre) => ({
      head: pre.previousElementSibling?.classList.contains('code-head') ?? false, text: pre.textContent.slice(0, 12),
    })));
    assert.equal(await page.getAttribute('.message.assistant', 'aria-busy'), 'true');
    assert.deepEqual(heads.map((h) => h.head), [true, true, false], JSON.stringify(heads));
    await page.locator('.message.assistant button.code-copy').nth(1).press('Space');
    await page.waitForFunction(() => document.querySelectorAll('.message.assistant button.code-copy')[1].textContent === 'Copied');
    assert.equal(await clipboard(page), long);

    await lastAnswerDone(page);
    // After the end (the whole answer rendered once more) every block has exactly one head.
    const final = await page.evaluate(() => [...document.querySelectorAll('.message.assistant pre')].map((pre) => ({
      head: pre.previousElementSibling?.classList.contains('code-head') ?? false,
      heads: pre.parentElement.querySelectorAll(':scope > .code-head').length,
    })));
    assert.deepEqual(final.map((block) => block.head), [true, true, true]);
    await page.locator('.message.assistant button.code-copy').nth(2).click();
    await page.waitForFunction(() => document.querySelectorAll('.message.assistant button.code-copy')[2].textContent === 'Copied');
    assert.equal(await clipboard(page), 'print(1)');
    // The answer's own Copy still copies the whole markdown, fences included.
    await page.click('.message.assistant button[aria-label="Copy this answer"]');
    assert.equal(await clipboard(page), parts.join(''));
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test('without clipboard access the block is selected for Ctrl+C, and the button says so', async () => {
    const page = await openPage(browser, proxy.url);
    await ready(page);
    await page.evaluate(() => {
      Object.defineProperty(navigator, 'clipboard', { value: { writeText: () => Promise.reject(new Error('denied')) } });
    });
    script = () => ({ pieces: answerIn(['```\nplain text block\n```\n']), pauseMs: 1 });
    await send(page, 'plain');
    await lastAnswerDone(page);
    await page.click('.message.assistant button.code-copy');
    await page.waitForFunction(() => /Ctrl\+C/.test(document.querySelector('.message.assistant button.code-copy').textContent));
    assert.equal(await page.getAttribute('.message.assistant button.code-copy', 'aria-label'), 'Copy this code');
    assert.equal((await page.evaluate(() => getSelection().toString())).trim(), 'plain text block');
    await page.context().close();
  });

  for (const viewport of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    test(`at ${viewport.width}x${viewport.height} the head's button is inside the answer, above a wide block`, async () => {
      const page = await openPage(browser, proxy.url, { viewport });
      await ready(page);
      script = () => ({ pieces: answerIn([`\`\`\`cpp\n${'int very_long_name = 1; '.repeat(30)}\n\`\`\`\n`]), pauseMs: 1 });
      await send(page, 'wide code');
      await lastAnswerDone(page);
      const boxes = await page.evaluate(() => {
        const rect = (el) => el.getBoundingClientRect().toJSON();
        const answer = document.querySelector('.message.assistant .content');
        const head = answer.querySelector('.code-head');
        return {
          answer: rect(answer), head: rect(head), button: rect(head.querySelector('button')), pre: rect(answer.querySelector('pre')),
          pageWidth: document.scrollingElement.scrollWidth, width: innerWidth,
        };
      });
      assert.ok(boxes.pageWidth <= boxes.width, `the page scrolls sideways: ${JSON.stringify(boxes)}`);
      assert.ok(boxes.button.right <= boxes.answer.right + 0.5 && boxes.button.left >= boxes.answer.left, JSON.stringify(boxes));
      assert.ok(Math.abs(boxes.head.bottom - boxes.pre.top) < 1, `the head is not joined to its block: ${JSON.stringify(boxes)}`);
      assert.ok(Math.abs(boxes.head.width - boxes.pre.width) < 1, `the head is not as wide as its block: ${JSON.stringify(boxes)}`);
      await page.context().close();
    });
  }
});
