// Editing a sent message and regenerating an answer, with every version kept and ‹ n/m › between
// them, in a real chromium against a real `chatflow serve`: without a history store (the page
// keeps the branches of the conversation on screen, and sends the path it shows) and with one
// (the server keeps them: parent_turn on the request, PATCH active_turn to switch, a reload
// shows the same branch and can still switch).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, scratchPath, sessionPipeline, startServer } from '../server/harness.mjs';
import { lastAnswerDone, launch, openPage, ready, send, skipReason } from './browser.mjs';
import { echoPipeline } from './scripted_echo.mjs';
import { signInWithShortAnswers } from './short_answers.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

const questions = (page) => page.$$eval('#messages .message.user > .content', (nodes) => nodes.map((n) => n.textContent.trim()));
const answers = (page) => page.$$eval('#messages .message.assistant .content', (nodes) => nodes.map((n) => n.textContent.trim()));
const user = (page, index) => page.locator('#messages .message.user').nth(index);
const position = (page, index) => user(page, index).locator('.branch-position').textContent();

// The chat completion requests the page sends, as parsed bodies.
function recordRequests(page) {
  const bodies = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && request.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(request.postData()));
  });
  return bodies;
}

async function editMessage(page, index, text) {
  await user(page, index).locator('button[aria-label="Edit this message"]').click();
  const field = user(page, index).locator('textarea[aria-label="Edit your message"]');
  await field.fill(text);
  await user(page, index).locator('button', { hasText: 'Save & submit' }).click();
  await page.waitForFunction((count) => document.querySelectorAll('.message.assistant[aria-busy="false"]').length === count
    && !document.querySelector('.message.assistant[aria-busy="true"]'), index + 1);
}

describe('branches without a history store', { skip: reason || false }, () => {
  let browser;
  let server;
  before(async () => {
    browser = await launch();
    server = await startServer(['--pipeline', echoPipeline('web-branches-echo', { wordsPerChunk: 1 })]);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  test('edit, cancel, regenerate and ‹ n/m › keep every version in the page', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    const bodies = recordRequests(page);
    await send(page, 'first question');
    await lastAnswerDone(page);
    await send(page, 'second question');
    await lastAnswerDone(page);
    assert.equal(await user(page, 1).locator('.branch-nav').count(), 0, 'one version: no navigation');

    // Escape cancels an edit: the message as it was, nothing sent.
    await user(page, 1).locator('button[aria-label="Edit this message"]').click();
    const field = user(page, 1).locator('textarea');
    assert.equal(await field.inputValue(), 'second question');
    assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Edit your message');
    await field.fill('never sent');
    await field.press('Escape');
    assert.equal(await user(page, 1).locator('textarea').count(), 0);
    assert.deepEqual(await questions(page), ['first question', 'second question']);
    assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Edit this message');
    assert.equal(bodies.length, 2);
    // Cancel does the same.
    await user(page, 1).locator('button[aria-label="Edit this message"]').click();
    await user(page, 1).locator('button', { hasText: 'Cancel' }).click();
    assert.deepEqual(await questions(page), ['first question', 'second question']);

    // Save & submit: the edited message replaces it on screen, the request carries the path
    // before it and the new text, and the old version is one ‹ away.
    await editMessage(page, 1, 'second, edited');
    assert.deepEqual(await questions(page), ['first question', 'second, edited']);
    assert.deepEqual(await answers(page), ['first question', 'second, edited']);
    assert.deepEqual(bodies.at(-1).messages.map((m) => [m.role, m.content]),
      [['user', 'first question'], ['assistant', 'first question'], ['user', 'second, edited']]);
    assert.equal(await position(page, 1), '2/2');
    await user(page, 1).locator('button[aria-label="Previous version"]').click();
    assert.deepEqual(await questions(page), ['first question', 'second question']);
    assert.equal(await position(page, 1), '1/2');
    assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Next version',
      'the focus stays on the arrows');
    // Keyboard: Enter on the focused arrow goes forward again.
    await page.keyboard.press('Enter');
    assert.deepEqual(await questions(page), ['first question', 'second, edited']);

    // Regenerating the first answer: a sibling of the first turn; its old branch (with both
    // versions of the second message) is one ‹ away.
    await page.locator('.message.assistant').first().locator('button[aria-label="Regenerate this answer"]').click();
    await lastAnswerDone(page);
    assert.deepEqual(await questions(page), ['first question']);
    assert.deepEqual(bodies.at(-1).messages.map((m) => m.content), ['first question']);
    assert.equal(await position(page, 0), '2/2');
    await user(page, 0).locator('button[aria-label="Previous version"]').click();
    assert.deepEqual(await questions(page), ['first question', 'second, edited']);
    assert.equal(await position(page, 1), '2/2');
    // A new message continues the branch shown.
    await send(page, 'third');
    await lastAnswerDone(page);
    assert.deepEqual(bodies.at(-1).messages.map((m) => m.content),
      ['first question', 'first question', 'second, edited', 'second, edited', 'third']);
    await page.context().close();
  });

  test('the editor fits a 390x844 phone and Ctrl+Enter submits it', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 390, height: 844 } });
    await ready(page);
    await send(page, 'A long first message that wraps over several lines on a narrow phone screen');
    await lastAnswerDone(page);
    await user(page, 0).locator('button[aria-label="Edit this message"]').click();
    const field = user(page, 0).locator('textarea');
    const box = await field.boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 390, `the editor at ${box.x}+${box.width}`);
    for (const name of ['Save & submit', 'Cancel']) {
      const button = await user(page, 0).locator('button', { hasText: name }).boundingBox();
      assert.ok(button.x >= 0 && button.x + button.width <= 390, `${name} at ${button.x}+${button.width}`);
    }
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'nothing overflows sideways');
    await field.fill('Short');
    await field.press('Control+Enter');
    await lastAnswerDone(page);
    assert.deepEqual(await questions(page), ['Short']);
    assert.equal(await position(page, 0), '2/2');
    const nav = await user(page, 0).locator('.branch-nav').boundingBox();
    assert.ok(nav.x + nav.width <= 390);
    await page.context().close();
  });
});

describe('branches with a history store', { skip: reason || false }, () => {
  let browser;
  let server;
  let key;
  before(async () => {
    browser = await launch();
    const keys = scratchPath(`web-branches-keys-${process.pid}.yaml`);
    key = addKey(keys, 'web-branches', { user: 'gil' });
    server = await startServer(['--pipeline', sessionPipeline('web-branches', keys, scratchPath(`web-branches-${process.pid}.db`))]);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  const session = async (id) => (await fetch(`${server.url}/v1/sessions/${encodeURIComponent(id)}`, { headers: { Authorization: `Bearer ${key}` } })).json();

  test('the server keeps the branches; a reload shows the same one and can switch', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
    await signInWithShortAnswers(page, key, 6);
    const bodies = recordRequests(page);
    await send(page, 'Alpha');
    await lastAnswerDone(page);
    await send(page, 'Beta');
    await lastAnswerDone(page);
    await page.waitForSelector('#sessions li.session');
    const id = await page.getAttribute('#sessions li.session', 'data-id');
    await user(page, 1).locator('button[aria-label="Edit this message"]').waitFor();

    await editMessage(page, 1, 'Beta, edited');
    assert.equal(bodies.at(-1).parent_turn, 1);
    assert.deepEqual(bodies.at(-1).messages, [{ role: 'user', content: 'Beta, edited' }], 'the server holds the path');
    await page.waitForFunction(() => document.querySelectorAll('.message.user')[1]?.querySelector('.branch-position')?.textContent === '2/2');

    // Regenerate is offered with sessions, and keeps the answer it replaces.
    await page.locator('.message.assistant').nth(1).locator('button[aria-label="Regenerate this answer"]').click();
    await lastAnswerDone(page);
    assert.equal(bodies.at(-1).parent_turn, 1);
    assert.deepEqual(bodies.at(-1).messages, [{ role: 'user', content: 'Beta, edited' }]);
    await page.waitForFunction(() => document.querySelectorAll('.message.user')[1]?.querySelector('.branch-position')?.textContent === '3/3');
    let stored = await session(id);
    assert.deepEqual(stored.turns.map((turn) => [turn.user, turn.siblings.length, turn.sibling_index]), [['Alpha', 1, 0], ['Beta, edited', 3, 2]]);

    // ‹ switches the server's branch: the first version of the edit.
    await user(page, 1).locator('button[aria-label="Previous version"]').click();
    await page.waitForFunction(() => document.querySelectorAll('.message.user')[1]?.querySelector('.branch-position')?.textContent === '2/3');
    assert.deepEqual(await questions(page), ['Alpha', 'Beta, edited']);
    stored = await session(id);
    assert.equal(stored.turns[1].sibling_index, 1, 'the server shows it too');
    const shownAnswer = stored.turns[1].assistant;
    assert.equal((await answers(page))[1], shownAnswer.trim());

    // A reload opens the same branch, and it still switches.
    await page.reload();
    await ready(page);
    await page.waitForSelector(`#sessions li.session[data-id="${id}"]`);
    await page.click(`#sessions li.session[data-id="${id}"] button.open`);
    await page.waitForFunction(() => document.querySelectorAll('.message.user')[1]?.querySelector('.branch-position')?.textContent === '2/3');
    assert.deepEqual(await questions(page), ['Alpha', 'Beta, edited']);
    await user(page, 1).locator('button[aria-label="Previous version"]').click();
    await page.waitForFunction(() => document.querySelectorAll('.message.user')[1]?.querySelector('.branch-position')?.textContent === '1/3');
    assert.deepEqual(await questions(page), ['Alpha', 'Beta']);

    // A new message continues the branch shown (no parent_turn: the server's shown path).
    await send(page, 'Gamma');
    await lastAnswerDone(page);
    assert.equal(bodies.at(-1).parent_turn, undefined);
    stored = await session(id);
    assert.deepEqual(stored.turns.map((turn) => turn.user), ['Alpha', 'Beta', 'Gamma']);
    await page.context().close();
  });
});
