// The set-up the chat page's browser tests share: a pipeline of the `echo` stage alone (the
// server answers with the user's own words), and per `describe` a chromium, a real `chatflow
// serve` of that pipeline, and a scripting proxy in front of it that writes the answer a test
// chooses for one chat completion and passes everything else through.
import assert from 'node:assert/strict';
import { after, before } from 'node:test';

import { startServer, writeTemp } from '../server/harness.mjs';
import { launch, scriptingProxy } from './browser.mjs';

// A pipeline file named `name` (also its file name) with the echo stage; `wordsPerChunk` left
// out keeps the stage's default.
export function echoPipeline(name, { wordsPerChunk } = {}) {
  const config = wordsPerChunk === undefined ? '' : `, config: {words_per_chunk: ${wordsPerChunk}}`;
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
stages:
  - {name: echo, type: echo${config}}
`);
}

// Called inside a `describe`: starts chromium, the echo server and the proxy before its tests
// and stops them after (the server must exit with 0). `ctx.script`, when set, is what the proxy
// answers for the next chat completion (null: the server's own answer); it is used once.
export function echoServerBehindProxy(name, pipelineOptions) {
  const ctx = { browser: null, server: null, proxy: null, script: null };
  before(async () => {
    ctx.browser = await launch();
    ctx.server = await startServer(['--pipeline', echoPipeline(name, pipelineOptions)]);
    ctx.proxy = await scriptingProxy(ctx.server.url, async (body) => {
      const next = ctx.script;
      ctx.script = null;
      return next ? next(body) : null;
    });
  });
  after(async () => {
    await ctx.proxy?.close();
    await ctx.browser?.close();
    if (ctx.server) assert.equal((await ctx.server.stop()).code, 0);
  });
  return ctx;
}
