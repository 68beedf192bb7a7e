// Export and import of conversations in a real chromium against a real `chatflow serve`: the
// open conversation as JSON (the versioned format of docs/web.md) and Markdown, every
// conversation of the caller (the server's sessions with a history store), and a JSON file read
// back into the page's own list with its mistakes named, the open conversation kept.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { addKey, scratchPath, sessionPipeline, startServer } from '../server/harness.mjs';
import { lastAnswerDone, launch, openPage, ready, send, skipReason } from './browser.mjs';
import { echoServerBehindProxy } from './scripted_echo.mjs';
import { signInWithShortAnswers } from './short_answers.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

// What `action` downloads: its suggested name and its text.
async function downloaded(page, action) {
  const [file] = await Promise.all([page.waitForEvent('download'), action()]);
  return { name: file.suggestedFilename(), text: fs.readFileSync(await file.path(), 'utf8') };
}

// Picks a file named `name` holding `text` in the import's file chooser opened by `action`.
async function importText(page, name, text, action = () => page.click('#import')) {
  const [chooser] = await Promise.all([page.waitForEvent('filechooser'), action()]);
  await chooser.setFiles({ name, mimeType: 'application/json', buffer: Buffer.from(text) });
}

const noticeText = (page) => page.textContent('#notice');
const conversationTexts = (page) => page.$$eval('#messages .message', (nodes) => nodes.map((n) => n.querySelector('.content')?.textContent.trim()));
const localTitles = (page) => page.$$eval('#local-sessions li .open', (nodes) => nodes.map((n) => n.textContent));

const sample = {
  format: 'chatflow-conversations',
  version: 1,
  conversations: [
    {
      title: 'Rust lifetimes',
      created: '2026-03-01T10:00:00.000Z',
      messages: [
        { role: 'user', content: 'What is a lifetime?' },
        { role: 'assistant', content: 'A **region** of code where a reference is valid.' },
      ],
    },
    {
      title: 'Tea',
      created: '2026-03-02T08:30:00.000Z',
      messages: [{ role: 'user', content: 'Green or black?' }, { role: 'assistant', content: 'Green.' }],
    },
  ],
};

describe('export and import without a history store', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-exchange-echo', { wordsPerChunk: 1 });

  test('the open conversation exports as versioned JSON and as Markdown, from the buttons and Ctrl+Shift+E', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await send(page, 'hello there');
    await lastAnswerDone(page);
    await send(page, 'second question');
    await lastAnswerDone(page);

    const json = await downloaded(page, () => page.click('#export-json'));
    assert.equal(json.name, 'hello-there.json');
    const document = JSON.parse(json.text);
    assert.equal(document.format, 'chatflow-conversations');
    assert.equal(document.version, 1);
    assert.equal(document.conversations.length, 1);
    const [conversation] = document.conversations;
    assert.equal(conversation.title, 'hello there');
    assert.ok(Math.abs(Date.parse(conversation.created) - Date.now()) < 120000, conversation.created);
    // The echo stage answers with the question.
    assert.deepEqual(conversation.messages, [
      { role: 'user', content: 'hello there' }, { role: 'assistant', content: 'hello there' },
      { role: 'user', content: 'second question' }, { role: 'assistant', content: 'second question' },
    ]);

    const markdown = await downloaded(page, () => page.click('#export-markdown'));
    assert.equal(markdown.name, 'hello-there.md');
    assert.match(markdown.text, /^# hello there\n/);
    assert.ok(markdown.text.includes('## You\n\nhello there\n\n## Assistant\n\nhello there\n\n## You\n\nsecond question\n'), markdown.text);

    // The shortcut, from the conversation pane.
    await page.focus('#messages');
    const byKey = await downloaded(page, () => page.keyboard.press('Control+Shift+E'));
    assert.deepEqual(JSON.parse(byKey.text).conversations[0].messages, conversation.messages);
    // Without a history store "all" is the one on screen.
    const all = await downloaded(page, () => page.click('#export-all'));
    assert.deepEqual(JSON.parse(all.text).conversations.map((c) => c.title), ['hello there']);
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test('a bad file is refused with what is wrong and where, importing nothing and keeping the conversation', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await send(page, 'keep me');
    await lastAnswerDone(page);
    const before = await conversationTexts(page);

    const bad = [
      ['notes.json', JSON.stringify({ conversations: [] }), "Import of notes.json failed: not a chatflow export: missing 'format'. Nothing was imported."],
      ['text.json', 'hello', 'not a chatflow export: the file is not JSON'],
      ['other.json', JSON.stringify({ format: 'other', version: 1, conversations: [] }), `not a chatflow export: 'format' is "other", expected "chatflow-conversations"`],
      ['future.json', JSON.stringify({ ...sample, version: 2 }), 'unsupported version 2: this page reads version 1'],
      ['hole.json', JSON.stringify({
        ...sample,
        conversations: [sample.conversations[0], {
          title: 'five', messages: [
            { role: 'user', content: '1' }, { role: 'assistant', content: '2' }, { role: 'user', content: '3' },
            { role: 'assistant', content: '4' }, { role: 'user' },
          ],
        }],
      }), 'conversation 2: message 5 has no content'],
      ['role.json', JSON.stringify({ ...sample, conversations: [{ messages: [{ role: 'bot', content: 'x' }] }] }),
        'conversation 1: message 1 has role "bot"; expected one of system, user, assistant'],
    ];
    for (const [name, text, expected] of bad) {
      await importText(page, name, text);
      await page.waitForFunction((want) => document.querySelector('#notice').textContent.includes(want), expected);
      assert.equal(await page.getAttribute('#notice', 'class'), 'notice error');
      assert.deepEqual(await localTitles(page), [], `${name} imported something`);
      assert.equal(await page.isHidden('#local-section'), true);
      assert.deepEqual(await conversationTexts(page), before, `${name} changed the open conversation`);
    }
    await page.context().close();
  });

  test('a good file lands in the page\'s own list; an imported conversation continues with its whole history', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await send(page, 'on screen');
    await lastAnswerDone(page);
    await importText(page, 'two.json', JSON.stringify(sample));
    await page.waitForFunction(() => document.querySelector('#notice').textContent.startsWith('Imported 2 conversations from two.json'));
    assert.deepEqual(await localTitles(page), ['Rust lifetimes', 'Tea']);
    // The open conversation is untouched.
    assert.deepEqual(await conversationTexts(page), ['on screen', 'on screen']);

    await page.click('#local-sessions li:nth-child(1) .open');
    await page.waitForFunction(() => document.querySelector('#conversation-title').textContent === 'Rust lifetimes');
    assert.deepEqual(await conversationTexts(page), ['What is a lifetime?', 'A region of code where a reference is valid.']);
    assert.equal(await page.textContent('#messages .message.assistant strong'), 'region');
    // The one that was on screen (this pipeline keeps none) went into the list, not away.
    assert.deepEqual(await localTitles(page), ['on screen', 'Rust lifetimes', 'Tea']);

    const sent = ctx.proxy.requests.length;
    await send(page, 'and a borrow?');
    await lastAnswerDone(page);
    const request = ctx.proxy.requests[sent].body;
    assert.equal(request.session_id, undefined);
    assert.deepEqual(request.messages, [
      { role: 'user', content: 'What is a lifetime?' },
      { role: 'assistant', content: 'A **region** of code where a reference is valid.' },
      { role: 'user', content: 'and a borrow?' },
    ]);
    // A reload keeps the list (the tab's sessionStorage) with the new turn.
    await page.reload();
    await ready(page);
    assert.deepEqual(await localTitles(page), ['on screen', 'Rust lifetimes', 'Tea']);
    await page.click('#local-sessions li:nth-child(2) .open');
    await page.waitForFunction(() => document.querySelectorAll('#messages .message').length === 4);
    assert.deepEqual((await conversationTexts(page)).slice(2), ['and a borrow?', 'and a borrow?']);
    // Removing takes two presses.
    await page.click('#local-sessions li:nth-child(3) .danger');
    assert.equal(await page.textContent('#local-sessions li:nth-child(3) .danger'), 'Remove?');
    await page.click('#local-sessions li:nth-child(3) .danger');
    assert.deepEqual(await localTitles(page), ['on screen', 'Rust lifetimes']);
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test('at 390x844 the buttons are in the drawer, fit it, and Ctrl+Shift+L imports', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 390, height: 844 } });
    await ready(page);
    await page.click('#menu');
    const boxes = await page.evaluate(() => {
      const rect = (el) => el.getBoundingClientRect().toJSON();
      const sidebar = document.querySelector('#sidebar');
      return {
        sidebar: rect(sidebar), buttons: ['#export-json', '#export-markdown', '#export-all', '#import'].map((s) => rect(document.querySelector(s))),
        overflow: sidebar.scrollWidth - sidebar.clientWidth, pageWidth: document.scrollingElement.scrollWidth,
      };
    });
    assert.equal(boxes.overflow, 0, JSON.stringify(boxes));
    assert.ok(boxes.pageWidth <= 390, JSON.stringify(boxes));
    for (const button of boxes.buttons) {
      assert.ok(button.width > 0 && button.left >= boxes.sidebar.left && button.right <= boxes.sidebar.right
        && button.bottom <= 844, JSON.stringify(boxes));
    }
    await page.click('#menu', { force: true }).catch(() => {});
    await page.keyboard.press('Escape');
    await page.focus('#messages');
    await importText(page, 'one.json', JSON.stringify({ ...sample, conversations: [sample.conversations[1]] }),
      () => page.keyboard.press('Control+Shift+L'));
    await page.waitForFunction(() => document.querySelector('#notice').textContent.startsWith('Imported 1 conversation from one.json'));
    assert.equal(await page.isVisible('#notice'), true);
    await page.click('#menu');
    assert.deepEqual(await localTitles(page), ['Tea']);
    await page.context().close();
  });
});

describe('export and import with a history store', { skip: reason || false }, () => {
  let browser;
  before(async () => { browser = await launch(); });
  after(async () => { await browser?.close(); });

  test("an import becomes the caller's sessions where a session can hold it; Export all holds them and the page's own", async () => {
    const keys = scratchPath(`web-exchange-keys-${process.pid}.yaml`);
    const key = addKey(keys, 'web-exchange', { user: 'fay' });
    const server = await startServer(['--pipeline', sessionPipeline('web-exchange', keys, scratchPath(`web-exchange-${process.pid}.db`))]);
    try {
      const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
      await signInWithShortAnswers(page, key, 4);
      await send(page, 'Name a colour.');
      await lastAnswerDone(page);
      await page.waitForFunction(() => document.querySelectorAll('#sessions li.session').length === 1);
      const answer = await page.evaluate(() => document.querySelector('.message.assistant .content').textContent.trim());

      // The two of the sample become sessions (POST /v1/sessions); one with a system message
      // cannot be a session and stays in the page's list, saying why.
      const withSystem = { title: 'Pirate', messages: [{ role: 'system', content: 'Talk like a pirate.' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Arr.' }] };
      await importText(page, 'three.json', JSON.stringify({ ...sample, conversations: [...sample.conversations, withSystem] }));
      await page.waitForFunction(() => document.querySelector('#notice').textContent.startsWith('Imported 2 conversations from three.json into your saved conversations.'));
      assert.match(await page.textContent('#notice'), /1 conversation stays in the list “In this tab, not on the server” \(“Pirate”: it has a system message\)/);
      const listed = await (await fetch(`${server.url}/v1/sessions`, { headers: { Authorization: `Bearer ${key}` } })).json();
      assert.deepEqual(listed.data.map((s) => s.title), ['Rust lifetimes', 'Tea', 'Name a colour.'], 'the file\'s order, newest first');
      await page.waitForFunction(() => document.querySelectorAll('#sessions li.session').length === 3);
      assert.deepEqual(await localTitles(page), ['Pirate']);
      const rust = await (await fetch(`${server.url}/v1/sessions/${encodeURIComponent(listed.data[0].id)}`, { headers: { Authorization: `Bearer ${key}` } })).json();
      assert.deepEqual(rust.turns.map((turn) => [turn.user, turn.assistant]), [['What is a lifetime?', 'A **region** of code where a reference is valid.']]);
      // Opened, it is a session: a new message carries its session_id and only itself.
      const sent = [];
      page.on('request', (request) => { if (request.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(request.postData())); });
      await page.click(`#sessions li.session[data-id="${listed.data[0].id}"] button.open`);
      await page.waitForFunction(() => document.querySelector('#conversation-title').textContent === 'Rust lifetimes');
      await send(page, 'and a borrow?');
      await lastAnswerDone(page);
      assert.equal(sent.at(-1).session_id, listed.data[0].id);
      assert.deepEqual(sent.at(-1).messages, [{ role: 'user', content: 'and a borrow?' }]);

      const all = await downloaded(page, () => page.click('#export-all'));
      const document = JSON.parse(all.text);
      assert.equal(document.format, 'chatflow-conversations');
      assert.deepEqual(document.conversations.map((c) => c.title), ['Rust lifetimes', 'Tea', 'Name a colour.', 'Pirate']);
      const saved = document.conversations[2];
      assert.equal(saved.messages[0].content, 'Name a colour.');
      assert.equal(saved.messages[1].role, 'assistant');
      assert.equal(saved.messages[1].content.trim(), answer);
      assert.equal(saved.created, new Date(listed.data[2].created_at * 1000).toISOString());
      assert.deepEqual(document.conversations[1].messages, sample.conversations[1].messages);
      assert.deepEqual(document.conversations[3].messages, withSystem.messages);
      await page.context().close();
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
