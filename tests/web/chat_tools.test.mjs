// The chat page's everyday tools in a real chromium against a real `chatflow serve`: a Copy
// button on every code block, keyboard shortcuts and their help dialog, conversation search
// (the server's with a history store, the page's own without). Where a test needs an exact answer (a code block, a pause in the
// middle of it) a scripting proxy in front of the server writes that one response; the page,
// its assets and every other call are the server's own.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, scratchPath, sessionPipeline, startServer } from '../server/harness.mjs';
import { lastAnswerDone, launch, openPage, ready, send, skipReason, sseEvents } from './browser.mjs';
import { echoPipeline, echoServerBehindProxy } from './scripted_echo.mjs';
import { signInWithShortAnswers } from './short_answers.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

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
  const ctx = echoServerBehindProxy('web-tools-echo', { wordsPerChunk: 1 });

  test('every finished code block has a Copy button, usable while the answer still streams', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { permissions: ['clipboard-read', 'clipboard-write'] });
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
    ctx.script = () => ({ pieces: answerIn(parts), pauseMs: 2000 });
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
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await page.evaluate(() => {
      Object.defineProperty(navigator, 'clipboard', { value: { writeText: () => Promise.reject(new Error('denied')) } });
    });
    ctx.script = () => ({ pieces: answerIn(['```\nplain text block\n```\n']), pauseMs: 1 });
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
      const page = await openPage(ctx.browser, ctx.proxy.url, { viewport });
      await ready(page);
      ctx.script = () => ({ pieces: answerIn([`\`\`\`cpp\n${'int very_long_name = 1; '.repeat(30)}\n\`\`\`\n`]), pauseMs: 1 });
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

const dialogOpen = (page) => page.evaluate(() => document.querySelector('#shortcuts-dialog').open);
const focused = (page) => page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName);

describe('keyboard shortcuts', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-tools-echo', { wordsPerChunk: 1 });

  test('? and Ctrl+/ open the help dialog listing the shortcuts; Escape and the backdrop close it', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    // From the conversation pane (no text field focused), "?" opens it.
    await page.focus('#messages');
    await page.keyboard.press('Shift+?');
    await page.waitForSelector('#shortcuts-dialog[open]');
    assert.equal(await focused(page), 'shortcuts-close', 'the dialog did not take the focus');
    const rows = await page.$$eval('#shortcuts-list tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
    const listed = Object.fromEntries(rows.map(([keys, what]) => [what, keys]));
    assert.equal(listed['New chat'], 'Ctrl+Shift+O');
    assert.equal(listed['Show these shortcuts'], 'Ctrl+/ or ?');
    assert.equal(listed['Go to the message box'], 'Shift+Esc');
    assert.equal(listed['Search conversations'], 'Ctrl+K or /');
    assert.match(listed['Stop generating; close a dialog or the conversation list'], /^Esc$/);
    assert.equal(listed['Send (in the message box)'], 'Enter');
    // A modal dialog: the page behind takes no clicks, and Escape closes it, focus going back.
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#shortcuts-dialog').open);
    assert.equal(await focused(page), 'messages');

    // Ctrl+/ works even from the message box; a click on the backdrop closes it.
    await page.focus('#prompt');
    await page.keyboard.press('Control+/');
    await page.waitForSelector('#shortcuts-dialog[open]');
    await page.mouse.click(3, 3);
    await page.waitForFunction(() => !document.querySelector('#shortcuts-dialog').open);
    assert.equal(await focused(page), 'prompt');
    // The button in the sidebar opens it too, from the keyboard.
    await page.focus('#show-shortcuts');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#shortcuts-dialog[open]');
    await page.keyboard.press('Enter'); // the focused ✕
    await page.waitForFunction(() => !document.querySelector('#shortcuts-dialog').open);
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test('typing "?" and "/" in the message box types them; nothing opens', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await page.focus('#prompt');
    await page.keyboard.type('why? a/b ? /');
    assert.equal(await page.inputValue('#prompt'), 'why? a/b ? /');
    assert.equal(await dialogOpen(page), false);
    assert.equal(await focused(page), 'prompt');
    await page.context().close();
  });

  test('Ctrl+Shift+O starts a new chat; Shift+Escape goes to the message box', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    await send(page, 'first conversation');
    await lastAnswerDone(page);
    assert.equal(await page.locator('.message').count(), 2);
    await page.focus('#messages');
    await page.keyboard.press('Control+Shift+O');
    await page.waitForFunction(() => document.querySelectorAll('.message').length === 0);
    assert.equal(await page.textContent('#conversation-title'), 'New conversation');
    assert.equal(await focused(page), 'prompt');
    await page.focus('#model');
    await page.keyboard.press('Shift+Escape');
    assert.equal(await focused(page), 'prompt');
    // The page's own chords only: Ctrl+O alone is left to the browser.
    const blocked = await page.evaluate(() => {
      const event = new KeyboardEvent('keydown', { key: 'o', ctrlKey: true, bubbles: true, cancelable: true });
      document.querySelector('#messages').dispatchEvent(event);
      return event.defaultPrevented;
    });
    assert.equal(blocked, false);
    await page.context().close();
  });

  test('Escape stops a generation; with the help dialog open it only closes the dialog', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url);
    await ready(page);
    const slow = () => ({ pieces: answerIn(Array.from({ length: 40 }, (_, i) => `word${i} `)), pauseMs: 150 });
    ctx.script = slow;
    await send(page, 'a slow answer');
    await page.waitForFunction(() => document.querySelector('.message.assistant .content')?.textContent.includes('word1'));
    // The dialog first: Escape closes it and the answer goes on.
    await page.keyboard.press('Control+/');
    await page.waitForSelector('#shortcuts-dialog[open]');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#shortcuts-dialog').open);
    assert.equal(await page.textContent('#send'), 'Stop', 'closing the dialog stopped the answer');
    const before = (await page.textContent('.message.assistant .content')).length;
    await page.waitForFunction((n) => document.querySelector('.message.assistant .content').textContent.length > n, before);
    // Then Escape in the message box stops it.
    await page.focus('#prompt');
    await page.keyboard.press('Escape');
    await lastAnswerDone(page);
    assert.match(await page.textContent('.message.assistant .answer-notices'), /Stopped/);
    assert.equal(await page.textContent('#send'), 'Send');
    assert.doesNotMatch(await page.textContent('.message.assistant .content'), /word39/);
    await page.context().close();
  });

  test('at 390x844 the dialog fits the screen and opens from the conversation list', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 390, height: 844 } });
    await ready(page);
    await page.click('#menu');
    await page.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'true');
    await page.click('#show-shortcuts');
    await page.waitForSelector('#shortcuts-dialog[open]');
    const box = await page.evaluate(() => {
      const dialog = document.querySelector('#shortcuts-dialog');
      const r = dialog.getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, scrollWidth: dialog.scrollWidth, clientWidth: dialog.clientWidth };
    });
    assert.ok(box.left >= 0 && box.right <= 390 && box.top >= 0 && box.bottom <= 844, JSON.stringify(box));
    assert.ok(box.scrollWidth <= box.clientWidth, `the table is wider than the dialog: ${JSON.stringify(box)}`);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#shortcuts-dialog').open);
    // Back in the drawer, on the button that opened it.
    assert.equal(await focused(page), 'show-shortcuts');
    assert.equal(await page.getAttribute('#menu', 'aria-expanded'), 'true');
    await page.context().close();
  });
});

// Signs in to a session pipeline's server and asks `questions`, each in a new conversation.
async function signedInWithConversations(browser, server, key, questions, viewport = { width: 1280, height: 800 }) {
  const page = await openPage(browser, server.url, { viewport });
  await signInWithShortAnswers(page, key, 8);
  for (const [n, question] of questions.entries()) {
    if (n) await page.keyboard.press('Control+Shift+O');
    await send(page, question);
    await lastAnswerDone(page);
    await page.waitForFunction((count) => document.querySelectorAll('#sessions li.session').length === count, n + 1);
  }
  return page;
}

const resultRows = (page) => page.$$eval('#search-results li', (items) => items.map((li) => ({
  id: li.dataset.id, title: li.querySelector('.result-title').textContent, mark: li.querySelector('mark')?.textContent,
  snippet: li.querySelector('.result-snippet').textContent,
})));

describe('conversation search', { skip: reason || false }, () => {
  let browser;
  before(async () => { browser = await launch(); });
  after(async () => { await browser?.close(); });

  test("with a history store the server searches the caller's conversations; a result opens at its match", async () => {
    const keys = scratchPath('web-search-keys.yaml');
    const key = addKey(keys, 'web-search', { user: 'dana' });
    const other = addKey(keys, 'web-search', { user: 'erin' });
    const server = await startServer(['--pipeline', sessionPipeline('web-search', keys, scratchPath('web-search-history.db'))]);
    try {
      // Another user's conversation with the same words is never found.
      const theirs = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST', headers: { Authorization: `Bearer ${other}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', max_tokens: 2, session_id: 'erin-1', messages: [{ role: 'user', content: 'The blue door is mine' }] }),
      });
      assert.equal(theirs.status, 200);
      const page = await signedInWithConversations(browser, server, key, ['Remember the blue door.', 'Paint the fence green.']);
      const ids = await page.$$eval('#sessions li.session', (items) => items.map((li) => li.dataset.id));
      // A second turn in the fence conversation, with the words in it (not in its title).
      await send(page, 'Then the BLÜE gate, please.');
      await lastAnswerDone(page);

      await page.keyboard.press('Control+K');
      assert.equal(await focused(page), 'search');
      await page.keyboard.type('blue');
      await page.waitForSelector('#search-results li');
      await page.waitForFunction(() => document.querySelectorAll('#search-results li').length === 2);
      assert.equal(await page.isVisible('#sessions'), false, 'the list shows beside the results');
      const rows = await resultRows(page);
      assert.deepEqual(rows.map((row) => row.id), [ids[0], ids[1]], 'latest activity first, only mine');
      assert.deepEqual(rows.map((row) => row.mark), ['BLÜE', 'blue']);
      assert.match(rows[0].snippet, /you wrote: Then the BLÜE gate, please\./);
      assert.match(rows[1].snippet, /in the title: Remember the blue door\./);

      // Down to the second result and open it: the conversation, its match marked and in view.
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('ArrowDown');
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => document.querySelector('.message.user .content')?.textContent === 'Remember the blue door.');
      const hit = await page.evaluate(() => {
        const message = document.querySelector('.message.search-hit');
        return message && { text: message.querySelector('.content').textContent, marks: [...message.querySelectorAll('mark.search-mark')].map((m) => m.textContent) };
      });
      assert.deepEqual(hit, { text: 'Remember the blue door.', marks: ['blue'] });
      // The first result: the second turn's question of the other conversation.
      await page.click('#search-results li:first-child button');
      await page.waitForFunction(() => document.querySelectorAll('.message.user').length === 2);
      const second = await page.evaluate(() => {
        const message = document.querySelector('.message.search-hit');
        const users = [...document.querySelectorAll('.message.user')];
        return { index: users.indexOf(message), marks: [...message.querySelectorAll('mark.search-mark')].map((m) => m.textContent) };
      });
      assert.deepEqual(second, { index: 1, marks: ['BLÜE'] });

      // Nothing found says so; Escape in the box clears it and the list is back.
      await page.fill('#search', 'zebra crossing');
      await page.waitForFunction(() => /No conversation matches “zebra crossing”/.test(document.querySelector('#search-note').textContent));
      assert.equal(await page.locator('#search-results li').count(), 0);
      await page.focus('#search');
      await page.keyboard.press('Escape');
      assert.equal(await page.inputValue('#search'), '');
      assert.equal(await page.isVisible('#sessions'), true);
      assert.equal(await page.isVisible('#search-note'), false);
      // (The page's first call, without a key, is the 401 that asks for one.)
      assert.deepEqual(page.problems.filter((p) => !/40[14]/.test(p)), []);
      await page.context().close();

      // At 390x844: "/" opens the drawer with the focus in the box; a result closes it.
      const phone = await openPage(browser, server.url, { viewport: { width: 390, height: 844 } });
      await phone.waitForSelector('#signin:not([hidden])');
      await phone.fill('#api-key', key);
      await phone.press('#api-key', 'Enter');
      await ready(phone);
      await phone.focus('#messages');
      await phone.keyboard.press('/');
      await phone.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'true');
      assert.equal(await focused(phone), 'search');
      await phone.keyboard.type('fence');
      await phone.waitForSelector('#search-results li');
      const box = await phone.evaluate(() => document.querySelector('#search-results li').getBoundingClientRect().toJSON());
      assert.ok(box.left >= 0 && box.right <= 390, JSON.stringify(box));
      await phone.click('#search-results li button');
      await phone.waitForFunction(() => document.querySelector('#menu').getAttribute('aria-expanded') === 'false');
      await phone.waitForSelector('.message.search-hit');
      assert.equal(await phone.textContent('.message.search-hit mark'), 'fence');
      await phone.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('without a history store the conversation on screen is searched, and says so', async () => {
    const server = await startServer(['--pipeline', echoPipeline('web-tools-echo', { wordsPerChunk: 1 })]);
    try {
      const page = await openPage(browser, server.url);
      await ready(page);
      await send(page, 'the first question about owls');
      await lastAnswerDone(page);
      await send(page, 'a second one about cats');
      await lastAnswerDone(page);
      await page.fill('#search', 'OWLS');
      await page.waitForSelector('#search-results li');
      const rows = await resultRows(page);
      // The echo answer repeats the question: the question and its answer both match.
      assert.deepEqual(rows.map((row) => row.mark), ['owls', 'owls']);
      assert.match(rows[0].snippet, /^you wrote: the first question about owls$/);
      assert.match(rows[1].snippet, /^in an answer: /);
      assert.match(await page.textContent('#search-note'), /only the one on screen is searched/);
      await page.click('#search-results li:nth-child(2) button');
      const hit = await page.evaluate(() => {
        const message = document.querySelector('.message.search-hit');
        return { assistant: message.classList.contains('assistant'), index: [...document.querySelectorAll('.message.assistant')].indexOf(message), mark: message.querySelector('mark')?.textContent };
      });
      assert.deepEqual(hit, { assistant: true, index: 0, mark: 'owls' });
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
