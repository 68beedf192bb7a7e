// Hot reload under load: 32 streams keep running while the pipeline file changes; POST
// /admin/reload and SIGHUP switch to the new pipeline with no failed request, a broken file is
// refused with its location while the old pipeline keeps serving, and an unchanged resource is
// kept rather than created again.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { addKey, openStream, post, scratchPath, sseData, startServer, waitFor } from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

function pipelineText(keys, prefix, { dimensions = 256, broken = false } = {}) {
  return `version: 1
name: reloadable
resources:
  vectors: {type: embedder, kind: ngrams, dimensions: ${dimensions}}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: semantic, type: semantic_cache, config: {embedder: vectors}}
  - {name: answer, type: ${broken ? 'ecko' : 'echo'}, config: {prefix: "${prefix} "}}
  - {name: emit, type: sse_emit}
edges:
  - semantic.hit -> emit
`;
}

describe('hot reload', () => {
  let server;
  let admin;
  let user;
  let keys;
  const file = scratchPath('reloadable.yaml');
  before(async () => {
    keys = scratchPath('reload-keys.yaml');
    admin = addKey(keys, 'ops', { roles: ['admin'] });
    user = addKey(keys, 'acme');
    fs.writeFileSync(file, pipelineText(keys, 'v1'));
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  const answer = async (content) => {
    const response = await post(server.url, '/v1/chat/completions',
      { model: 'reloadable', temperature: 0, messages: [{ role: 'user', content }] }, as(user));
    assert.equal(response.status, 200, response.text);
    return response.json.choices[0].message.content;
  };
  const reload = (key) => fetch(`${server.url}/admin/reload`, { method: 'POST', headers: as(key) });

  test('reloads under 32 streams with no failed request', async () => {
    let running = true;
    const failures = [];
    let completed = 0;
    const clients = Array.from({ length: 32 }, async (_, client) => {
      for (let round = 0; running; round++) {
        const stream = openStream(server.port, '/v1/chat/completions', {
          model: 'reloadable', stream: true, temperature: 0,
          messages: [{ role: 'user', content: `client ${client} round ${round} says hello there` }],
        }, as(user));
        try {
          const response = await stream.ended;
          const events = response.status === 200 ? sseData(response.body) : [];
          if (response.status !== 200 || events.at(-1) !== '[DONE]' || events.some((e) => e.includes('"error"'))) {
            failures.push(`${response.status}: ${response.body.slice(0, 200)}`);
          } else {
            completed++;
          }
        } catch (error) {
          failures.push(String(error));
        }
      }
    });
    await waitFor(() => completed >= 100, { timeoutMs: 30000, what: '100 streams before the reload' });

    fs.writeFileSync(file, pipelineText(keys, 'v2'));
    const refused = await reload(user);
    assert.equal(refused.status, 403);
    const applied = await reload(admin);
    assert.equal(applied.status, 200);
    const body = await applied.json();
    assert.equal(body.reloaded, true);
    assert.deepEqual(body.resources_kept, ['vectors'], 'the unchanged embedder was built again');
    assert.equal(await answer('right after the reload'), 'v2 right after the reload');

    // A broken file: refused with its location, v2 keeps serving.
    fs.writeFileSync(file, pipelineText(keys, 'v3', { broken: true }));
    const broken = await reload(admin);
    assert.equal(broken.status, 400);
    const error = (await broken.json()).error;
    assert.equal(error.code, 'invalid_config');
    assert.match(error.message, /reloadable\.yaml:8:\d+: .*unknown stage type 'ecko'; did you mean 'echo'/);
    assert.equal(await answer('after a broken reload'), 'v2 after a broken reload');

    // SIGHUP, with a changed embedder: it is built anew.
    fs.writeFileSync(file, pipelineText(keys, 'v4', { dimensions: 128 }));
    server.child.kill('SIGHUP');
    await waitFor(async () => (await answer('after the hangup')).startsWith('v4 '),
      { timeoutMs: 20000, what: 'the SIGHUP reload' });

    const before = completed;
    await waitFor(() => completed >= before + 100, { timeoutMs: 30000, what: '100 streams after' });
    running = false;
    await Promise.all(clients);
    assert.deepEqual(failures, []);
  });
});
