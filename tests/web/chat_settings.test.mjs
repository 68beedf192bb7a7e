// The chat settings in a real chromium against a real `chatflow serve`: a system prompt,
// temperature, top-p and max tokens saved as defaults (localStorage) or for one chat, sent with
// each /v1/chat/completions request (seen by a pass-through proxy in front of the server), the
// server's refusal said as any refusal is, and the model's context length from /v1/models.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { modelPipeline, startServer } from '../server/harness.mjs';
import { lastAnswerDone, launch, openPage, ready, send, skipReason } from './browser.mjs';
import { echoServerBehindProxy } from './scripted_echo.mjs';

const reason = skipReason();
if (reason) console.log(`# skipped: ${reason}`);

async function openSettings(page) {
  await page.click('#show-settings');
  await page.waitForSelector('#settings-dialog[open]');
}

async function fill(page, { system = '', temperature = '', topP = '', maxTokens = '' }) {
  await page.fill('#settings-system', system);
  await page.fill('#settings-temperature', temperature);
  await page.fill('#settings-top-p', topP);
  await page.fill('#settings-max-tokens', maxTokens);
}

const fields = (page) => page.evaluate(() => ['system', 'temperature', 'top-p', 'max-tokens']
  .map((name) => document.querySelector(`#settings-${name}`).value));

// The request body of the next chat completion `action` causes.
async function nextRequest(page, proxy, action) {
  const count = proxy.requests.length;
  await action();
  await lastAnswerDone(page);
  assert.equal(proxy.requests.length, count + 1);
  return proxy.requests[count].body;
}

const sample = JSON.stringify({
  format: 'chatflow-conversations',
  version: 1,
  conversations: [{ title: 'Kept', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }] }],
});

describe('chat settings', { skip: reason || false }, () => {
  const ctx = echoServerBehindProxy('web-settings-echo', { wordsPerChunk: 1 });

  test('defaults are sent with every request and kept over a reload; without them nothing extra is sent', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    const plain = await nextRequest(page, ctx.proxy, () => send(page, 'plain'));
    assert.deepEqual(plain.messages, [{ role: 'user', content: 'plain' }]);
    for (const field of ['temperature', 'top_p', 'max_tokens']) assert.equal(plain[field], undefined, field);

    await openSettings(page);
    assert.equal(await page.textContent('#settings-scope'), 'This chat uses the defaults (they apply to every chat without its own).');
    await fill(page, { system: 'Answer in French.', temperature: '0.3', topP: '0.9', maxTokens: '64' });
    await page.click('#settings-save-default');
    await page.waitForFunction(() => !document.querySelector('#settings-dialog').open);
    const asked = await nextRequest(page, ctx.proxy, () => send(page, 'bonjour'));
    // The system prompt goes first, before the whole history-less conversation.
    assert.deepEqual(asked.messages, [
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'plain' }, { role: 'assistant', content: 'plain' },
      { role: 'user', content: 'bonjour' },
    ]);
    assert.equal(asked.temperature, 0.3);
    assert.equal(asked.top_p, 0.9);
    assert.equal(asked.max_tokens, 64);

    await page.reload();
    await ready(page);
    await openSettings(page);
    assert.deepEqual(await fields(page), ['Answer in French.', '0.3', '0.9', '64']);
    await page.keyboard.press('Escape');
    const again = await nextRequest(page, ctx.proxy, () => send(page, 'encore'));
    assert.equal(again.max_tokens, 64);
    assert.equal(again.messages[0].content, 'Answer in French.');
    assert.deepEqual(page.problems.filter((p) => !p.includes('404')), []);
    await page.context().close();
  });

  test("a chat's own settings override the defaults for that chat only, and come back with it", async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await openSettings(page);
    await fill(page, { system: 'Default prompt.', temperature: '0.5' });
    await page.click('#settings-save-default');
    // An imported conversation (kept by id in this tab) gets its own settings.
    const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.click('#import')]);
    await chooser.setFiles({ name: 'kept.json', mimeType: 'application/json', buffer: Buffer.from(sample) });
    await page.click('#local-sessions li .open');
    await page.waitForFunction(() => document.querySelector('#conversation-title').textContent === 'Kept');
    await openSettings(page);
    assert.deepEqual(await fields(page), ['Default prompt.', '0.5', '', '']);
    await fill(page, { system: 'Be brief.', temperature: '1.2', maxTokens: '16' });
    await page.press('#settings-max-tokens', 'Enter'); // submits: Save for this chat
    await page.waitForFunction(() => !document.querySelector('#settings-dialog').open);
    assert.equal(await page.textContent('#notice'), 'Saved for this chat.');
    const own = await nextRequest(page, ctx.proxy, () => send(page, 'short?'));
    assert.deepEqual(own.messages[0], { role: 'system', content: 'Be brief.' });
    assert.equal(own.temperature, 1.2);
    assert.equal(own.max_tokens, 16);
    assert.equal(own.top_p, undefined);

    // A new chat uses the defaults.
    await page.keyboard.press('Control+Shift+O');
    const fresh = await nextRequest(page, ctx.proxy, () => send(page, 'new one'));
    assert.deepEqual(fresh.messages, [{ role: 'system', content: 'Default prompt.' }, { role: 'user', content: 'new one' }]);
    assert.equal(fresh.temperature, 0.5);
    assert.equal(fresh.max_tokens, undefined);

    // Back in the imported chat (after a reload too) its own settings are there; "Use the
    // defaults" drops them.
    await page.reload();
    await ready(page);
    await page.click('#local-sessions li .open >> text=Kept');
    await openSettings(page);
    assert.equal(await page.textContent('#settings-scope'), 'This chat has its own settings.');
    assert.deepEqual(await fields(page), ['Be brief.', '1.2', '', '16']);
    await page.click('#settings-use-defaults');
    assert.deepEqual(await fields(page), ['Default prompt.', '0.5', '', '']);
    assert.equal(await page.isHidden('#settings-use-defaults'), true);
    await page.keyboard.press('Escape');
    const dropped = await nextRequest(page, ctx.proxy, () => send(page, 'and now?'));
    assert.equal(dropped.temperature, 0.5);
    assert.equal(dropped.max_tokens, undefined);
    await page.context().close();
  });

  test('a field that does not read is said in the dialog; the server refusing max_tokens is said above the box', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await openSettings(page);
    for (const [values, message] of [
      [{ temperature: 'warm' }, 'Temperature must be a number from 0 to 2 (or empty for the server\'s default), not "warm".'],
      [{ topP: '1.5' }, 'Top-p must be a number above 0 and at most 1 (or empty for the server\'s default), not "1.5".'],
      [{ maxTokens: '2.5' }, 'Max tokens must be a whole number of at least 1 (or empty for the server\'s default), not "2.5".'],
    ]) {
      await fill(page, values);
      await page.click('#settings-save-chat');
      assert.equal(await page.textContent('#settings-error'), message);
      assert.equal(await page.isVisible('#settings-error'), true);
      assert.equal(await page.evaluate(() => document.querySelector('#settings-dialog').open), true);
    }
    await fill(page, { maxTokens: '2000000' });
    await page.click('#settings-save-chat');
    await page.waitForFunction(() => !document.querySelector('#settings-dialog').open);
    const count = ctx.proxy.requests.length;
    await send(page, 'a long answer please');
    await page.waitForFunction(() => document.querySelector('#notice').textContent.includes('max_tokens'));
    assert.equal(ctx.proxy.requests[count].body.max_tokens, 2000000);
    assert.equal(await page.textContent('#notice'),
      "'max_tokens' must be between 1 and 1048576, got 2000000. Your message was not sent; it is back in the box.");
    assert.equal(await page.getAttribute('#notice', 'class'), 'notice error');
    assert.equal(await page.inputValue('#prompt'), 'a long answer please');
    assert.equal(await page.$$eval('#messages .message', (nodes) => nodes.length), 0);
    await page.context().close();
  });

  test('Ctrl+, opens it; Escape closes it and the focus goes back; without a context length it says so', async () => {
    const page = await openPage(ctx.browser, ctx.proxy.url, { viewport: { width: 1280, height: 800 } });
    await ready(page);
    await page.focus('#prompt');
    await page.keyboard.press('Control+,');
    await page.waitForSelector('#settings-dialog[open]');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'settings-system');
    assert.equal(await page.textContent('#settings-context'), "The server does not give web-settings-echo's context length.");
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('#settings-dialog').open);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'prompt');
    // The help lists it.
    await page.keyboard.press('Control+/');
    const rows = await page.$$eval('#shortcuts-list tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
    assert.deepEqual(rows.find(([, what]) => what === 'Chat settings'), ['Ctrl+,', 'Chat settings']);
    await page.context().close();
  });

  for (const viewport of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    test(`at ${viewport.width}x${viewport.height} the dialog fits the window with every field and button`, async () => {
      const page = await openPage(ctx.browser, ctx.proxy.url, { viewport });
      await ready(page);
      if (viewport.width < 720) await page.click('#menu');
      await openSettings(page);
      const boxes = await page.evaluate(() => {
        const dialog = document.querySelector('#settings-dialog');
        return {
          dialog: dialog.getBoundingClientRect().toJSON(),
          parts: [...dialog.querySelectorAll('textarea, input, button')].map((el) => ({ id: el.id, ...el.getBoundingClientRect().toJSON() })),
          overflow: dialog.scrollWidth - dialog.clientWidth,
        };
      });
      assert.equal(boxes.overflow, 0, JSON.stringify(boxes));
      assert.ok(boxes.dialog.left >= 0 && boxes.dialog.right <= viewport.width, JSON.stringify(boxes.dialog));
      for (const part of boxes.parts.filter((p) => p.id !== 'settings-use-defaults')) {
        assert.ok(part.width > 0 && part.left >= boxes.dialog.left && part.right <= boxes.dialog.right
          && part.bottom <= viewport.height, JSON.stringify(part));
      }
      await page.context().close();
    });
  }
});

describe('chat settings with a model', { skip: reason || false }, () => {
  test("the dialog shows the model's context length from /v1/models", async () => {
    const browser = await launch();
    const server = await startServer(['--pipeline', modelPipeline('web-settings-model')]);
    try {
      const models = await (await fetch(`${server.url}/v1/models`)).json();
      const length = models.data[0].max_model_len;
      assert.ok(Number.isInteger(length) && length > 0, JSON.stringify(models));
      const page = await openPage(browser, server.url, { viewport: { width: 1280, height: 800 } });
      await ready(page);
      await openSettings(page);
      assert.equal(await page.textContent('#settings-context'),
        `test-model: a context of ${length.toLocaleString('en-US')} tokens (the conversation and the answer together).`);
      await page.context().close();
    } finally {
      await browser.close();
      assert.equal((await server.stop()).code, 0);
    }
  });
});
