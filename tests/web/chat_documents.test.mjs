// Document upload and citations in a real chromium against a real `chatflow serve` whose
// retrieval_index takes uploads: the Documents button beside Send lists the caller's uploads,
// uploads by the file picker and by a drop onto the composer, says a refused file as text,
// removes; an answer's citation is a button opening the cited passage, and "Show in document"
// marks it in the whole text. At 390x844 everything fits; keyboard only works. A pipeline
// without uploads shows no button.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, scratchPath, startServer, writeTemp } from '../server/harness.mjs';
import { lastAnswerDone, launch, openPage, ready, screenshot, send, signIn, skipReason } from './browser.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

const passage = 'The obsidian vault combination is 4417 and only the night porter knows it.';
const notes = `# Night porter notes\n\nThe lobby opens at seven.\n\n${passage}\n\nKeys are returned at the desk.`;

function uploadsPipeline(keys, uploads = ', uploads: {max_bytes: 4096}') {
  const shared = writeTemp('web-documents-shared.jsonl', JSON.stringify({
    id: 'handbook/leave', title: 'Annual leave', text: 'Every employee has 25 days of annual leave.',
  }));
  return writeTemp(`web-documents${uploads ? '' : '-none'}.yaml`, `version: 1
name: web-documents
resources:
  knowledge: {type: retrieval_index, path: "${scratchPath(`web-documents-index${uploads ? '' : '-none'}`)}", source: ["${shared}"]${uploads}}
stages:
${keys ? `  - {name: auth, type: auth, config: {keys_file: ${keys}}}\n` : ''}  - {name: retrieve, type: hybrid_retrieval, config: {index: knowledge}}
  - {name: rerank, type: rerank, config: {index: knowledge, top_n: 2}}
  - {name: assemble, type: prompt_assembly}
  - {name: echo, type: echo, config: {words_per_chunk: 1}}
`);
}

// Signed in, with the model list filled.
async function signInReady(page, key) {
  await signIn(page, key);
  await ready(page);
}

const listed = (page) => page.$$eval('#documents-dialog .document .document-name', (names) => names.map((name) => name.textContent));

async function serverDocuments(server, key) {
  const response = await fetch(`${server.url}/v1/documents`, { headers: { Authorization: `Bearer ${key}` } });
  return (await response.json()).data.map((document) => document.name);
}

describe('documents and citations in the chat page', { skip: reason || false }, () => {
  let browser;
  let server;
  let alice;
  before(async () => {
    browser = await launch();
    const keys = scratchPath('web-documents-keys.yaml');
    alice = addKey(keys, 'acme', { user: 'alice' });
    server = await startServer(['--pipeline', uploadsPipeline(keys)]);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal((await server.stop()).code, 0);
  });

  test('upload, list, a refused file said as text, citation opening the passage, remove', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
    await signInReady(page, alice);
    await page.waitForSelector('#composer .documents-button:not([hidden])');
    assert.equal(await page.textContent('.documents-button'), 'Documents');

    await page.click('.documents-button');
    await page.waitForSelector('#documents-dialog[open]');
    assert.deepEqual(await page.$$eval('#documents-dialog .documents-list li', (items) => items.map((item) => item.textContent)),
      ['No documents yet.']);
    await page.setInputFiles('#composer input[type=file]', [
      { name: 'porter.md', mimeType: 'text/markdown', buffer: Buffer.from(notes) },
      { name: 'scan.pdf', mimeType: 'application/pdf', buffer: Buffer.from('%PDF-1.7 binary') },
    ]);
    await page.waitForFunction(() => !document.querySelector('#documents-dialog .documents-error').hidden);
    const error = await page.textContent('#documents-dialog .documents-error');
    assert.match(error, /scan\.pdf: 'scan\.pdf' is application\/pdf; uploads must be text/);
    assert.deepEqual(await listed(page), ['porter.md']);
    assert.equal(await page.textContent('.documents-button'), 'Documents (1)');
    assert.deepEqual(await serverDocuments(server, alice), ['porter.md']);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#documents-dialog').open);
    assert.equal(await page.evaluate(() => document.activeElement.className), 'documents-button', 'focus back on the button');

    await send(page, 'What is the obsidian vault combination the night porter knows?');
    await lastAnswerDone(page);
    const link = page.locator('.message.assistant:last-of-type .citation-link', { hasText: 'porter.md' });
    await link.waitFor();
    await link.click();
    await page.waitForSelector('#passage-dialog[open]');
    assert.match(await page.textContent('#passage-dialog h2'), /^\[\d\] porter\.md$/);
    assert.equal(await page.textContent('#passage-dialog .passage-text'), notes);
    await page.click('#passage-dialog button:has-text("Show in document")');
    await page.waitForSelector('#passage-dialog mark.cited');
    assert.equal(await page.textContent('#passage-dialog mark.cited'), notes);
    await screenshot(page, 'chat-documents-passage.png');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#passage-dialog').open);

    await page.click('.documents-button');
    await page.click('#documents-dialog button[aria-label="Remove porter.md"]');
    await page.waitForFunction(() => /Removed porter\.md/.test(document.querySelector('#documents-dialog [role=status]').textContent));
    assert.deepEqual(await listed(page), []);
    assert.deepEqual(await serverDocuments(server, alice), []);
    assert.equal(await page.textContent('.documents-button'), 'Documents');
    assert.deepEqual(page.problems.filter((problem) => !/Failed to load resource/.test(problem)), []);
  });

  test('a file dropped onto the composer is uploaded; a refused one is said above the box', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
    await signInReady(page, alice);
    await page.waitForSelector('#composer .documents-button:not([hidden])');
    const drop = (name, type, text) => page.evaluate(([name, type, text]) => {
      const data = new DataTransfer();
      data.items.add(new File([text], name, { type }));
      document.querySelector('#composer').dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
    }, [name, type, text]);
    await drop('dropped.txt', 'text/plain', 'dropped text');
    await page.waitForFunction(() => /Uploaded dropped\.txt/.test(document.querySelector('#notice').textContent));
    assert.deepEqual(await serverDocuments(server, alice), ['dropped.txt']);
    await drop('huge.txt', 'text/plain', 'x'.repeat(5000));
    await page.waitForFunction(() => /Not uploaded: huge\.txt/.test(document.querySelector('#notice').textContent));
    assert.match(await page.textContent('#notice'), /5000 bytes; a document may have at most 4096/);
    assert.deepEqual(await serverDocuments(server, alice), ['dropped.txt']);
    const id = (await (await fetch(`${server.url}/v1/documents`, { headers: { Authorization: `Bearer ${alice}` } })).json()).data[0].id;
    await fetch(`${server.url}/v1/documents/${id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${alice}` } });
  });

  test('at 390x844 the button, the dialogs and the composer fit; the keyboard reaches everything', async () => {
    const page = await openPage(browser, server.url, { viewport: { width: 390, height: 844 } });
    await signInReady(page, alice);
    await page.waitForSelector('#composer .documents-button:not([hidden])');
    const fits = (selector) => page.$eval(selector, (node) => {
      const box = node.getBoundingClientRect();
      return box.left >= 0 && box.right <= innerWidth && box.top >= 0 && box.bottom <= innerHeight;
    });
    for (const selector of ['.documents-button', '#send', '#prompt']) assert.ok(await fits(selector), selector);
    // "Docs" instead of the word, so the message box keeps most of the width.
    const widths = await page.evaluate(() => ['.documents-button', '#prompt'].map((selector) => document.querySelector(selector).getBoundingClientRect().width));
    assert.ok(widths[0] < 80 && widths[1] > 200, `button ${widths[0]} px, message box ${widths[1]} px`);
    assert.equal(await page.getAttribute('.documents-button', 'aria-label'), 'Your documents for retrieval');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390));
    await page.focus('.documents-button');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#documents-dialog[open]');
    assert.ok(await fits('#documents-dialog'));
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Upload…');
    await page.keyboard.press('Escape');
    await screenshot(page, 'chat-documents-phone.png');
  });
});

describe('the chat page without uploads', { skip: reason || false }, () => {
  test('shows no Documents button', async () => {
    const browser = await launch();
    const server = await startServer(['--pipeline', uploadsPipeline('', '')]);
    try {
      const page = await openPage(browser, server.url);
      await ready(page);
      await page.waitForSelector('.documents-button[data-state="off"]', { state: 'attached' });
      assert.equal(await page.$eval('.documents-button', (node) => node.hidden), true);
    } finally {
      await browser.close();
      assert.equal((await server.stop()).code, 0);
    }
  });
});
