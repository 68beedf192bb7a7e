// Branches of a session (editing a sent message, regenerating an answer) against a real
// `chatflow serve` with API keys and SQLite history: `parent_turn` places a request beside the
// turn it replaces and gives the model the path to its parent only; GET /v1/sessions/{id} shows
// one path with each turn's siblings; PATCH {"active_turn": N} switches it; a regenerated
// question is stored once and answered by the model, not the caches; another owner's session is
// a 404; bad input is a 400 naming the field.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelStages, post, scratchPath, sessionPipeline, startServer, testModel, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

describe('session branches', () => {
  let server;
  let u1;
  let u2;
  const ask = async (key, session, content, extra = {}) => {
    const answer = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 8, temperature: 0, session_id: session,
      messages: [{ role: 'user', content }], ...extra,
    }, as(key));
    let json;
    try { json = JSON.parse(answer.text); } catch { json = undefined; }
    return { status: answer.status, json, text: answer.text };
  };
  const read = async (key, session) => {
    const response = await fetch(`${server.url}/v1/sessions/${encodeURIComponent(session)}`, { headers: as(key) });
    return { status: response.status, json: await response.json() };
  };
  const patch = async (key, session, body) => {
    const response = await fetch(`${server.url}/v1/sessions/${encodeURIComponent(session)}`, {
      method: 'PATCH', headers: { ...as(key), 'Content-Type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.status, json: await response.json() };
  };
  const path = (session) => session.turns.map((turn) => [turn.id, turn.parent, turn.user, turn.siblings, turn.sibling_index]);

  before(async () => {
    const keys = scratchPath('sessions-branches-keys.yaml');
    u1 = addKey(keys, 'tenant-a', { user: 'u1' });
    u2 = addKey(keys, 'tenant-a', { user: 'u2' });
    server = await startServer(['--pipeline', sessionPipeline('sessions_branches', keys, scratchPath(`sessions-branches-${process.pid}.db`))]);
  });
  after(async () => { if (server) await server.stop(); });

  test('an edit is a sibling, the model sees the path to its parent, and the newest is shown', async () => {
    assert.equal((await ask(u1, 'edit', 'The first question')).status, 200);
    const second = await ask(u1, 'edit', 'The second question');
    assert.equal(second.status, 200, second.text);
    // Editing the second message: a new turn under turn 1, with turn 1 in its prompt only (as a
    // session holding turn 1 alone gives it).
    const edited = await ask(u1, 'edit', 'The 2nd question', { parent_turn: 1 });
    assert.equal(edited.status, 200, edited.text);
    assert.equal((await ask(u1, 'reference', 'The first question')).status, 200);
    const reference = await ask(u1, 'reference', 'The 2nd question');
    assert.equal(edited.json.usage.prompt_tokens, reference.json.usage.prompt_tokens, 'the same path, the same prompt');
    const session = await read(u1, 'edit');
    assert.equal(session.status, 200);
    assert.equal(session.json.active_turn, 3);
    assert.deepEqual(path(session.json), [[1, 0, 'The first question', [1], 0], [3, 1, 'The 2nd question', [2, 3], 1]]);
    // Editing the first message: no history at all, as in a new session.
    const fresh = await ask(u1, 'other', 'Something else entirely');
    const root = await ask(u1, 'edit', 'Something else entirely', { parent_turn: 0 });
    assert.equal(root.status, 200, root.text);
    assert.equal(root.json.usage.prompt_tokens, fresh.json.usage.prompt_tokens);
    assert.deepEqual(path((await read(u1, 'edit')).json), [[4, 0, 'Something else entirely', [1, 4], 1]]);
    // The next message without parent_turn continues what is shown.
    const next = await ask(u1, 'edit', 'And then?');
    assert.equal(next.status, 200, next.text);
    assert.deepEqual(path((await read(u1, 'edit')).json).map(([id, parent]) => [id, parent]), [[4, 0], [5, 4]]);
  });

  test('switching the shown turn, and a regenerated answer kept beside the first', async () => {
    const shown = await patch(u1, 'edit', { active_turn: 2 });
    assert.equal(shown.status, 200);
    assert.deepEqual(path(shown.json).map(([id]) => id), [1, 2]);
    assert.deepEqual((await read(u1, 'edit')).json.turns.map((turn) => turn.id), [1, 2], 'kept for the next read');
    // Regenerating turn 2's answer: same question, same parent.
    const again = await ask(u1, 'edit', 'The second question', { parent_turn: 1 });
    assert.equal(again.status, 200, again.text);
    const session = (await read(u1, 'edit')).json;
    assert.deepEqual(path(session), [[1, 0, 'The first question', [1, 4], 0], [6, 1, 'The second question', [2, 3, 6], 2]]);
    // The export carries the shown path, its questions filled in.
    const exported = await fetch(`${server.url}/v1/sessions:export`, { headers: as(u1) });
    const lines = (await exported.text()).trim().split('\n').map((line) => JSON.parse(line));
    const edit = lines.find((line) => line.id === 'edit');
    assert.deepEqual(edit.turns.map((turn) => [turn.id, turn.user]), [[1, 'The first question'], [6, 'The second question']]);
    assert.equal(edit.title, 'The first question');
  });

  test('another owner cannot read, switch or continue the session', async () => {
    assert.equal((await read(u2, 'edit')).status, 404);
    const switched = await patch(u2, 'edit', { active_turn: 1 });
    assert.equal(switched.status, 404);
    assert.equal(switched.json.error.code, 'session_not_found');
    // Their own session of that id has no turn 1.
    const theirs = await ask(u2, 'edit', 'Mine', { parent_turn: 1 });
    assert.equal(theirs.status, 400, theirs.text);
    assert.equal(theirs.json.error.param, 'parent_turn');
    assert.deepEqual((await read(u1, 'edit')).json.turns.map((turn) => turn.id), [1, 6], 'unchanged');
  });

  test('bad parent_turn and active_turn are refused naming the field', async () => {
    const unknown = await ask(u1, 'edit', 'Where?', { parent_turn: 99 });
    assert.equal(unknown.status, 400);
    assert.equal(unknown.json.error.param, 'parent_turn');
    assert.match(unknown.json.error.message, /no turn of session 'edit': 99/);
    for (const bad of [-1, 'two', 1.5]) {
      const refused = await ask(u1, 'edit', 'Where?', { parent_turn: bad });
      assert.equal(refused.status, 400, `parent_turn ${bad}: ${refused.text}`);
      assert.equal(refused.json.error.param, 'parent_turn');
    }
    const noSession = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }], parent_turn: 1,
    }, as(u1));
    assert.equal(noSession.status, 400);
    assert.equal(JSON.parse(noSession.text).error.param, 'parent_turn');
    for (const [body, param] of [[{ active_turn: 0 }, 'active_turn'], [{ active_turn: 'x' }, 'active_turn'],
      [{ active_turn: 99 }, 'active_turn'], [{ active_turn: 1, title: 'T' }, 'title']]) {
      const refused = await patch(u1, 'edit', body);
      assert.equal(refused.status, 400, JSON.stringify(body));
      assert.equal(refused.json.error.param, param);
      assert.equal(refused.json.error.type, 'invalid_request_error');
    }
    assert.equal((await patch(u1, 'nothing-here', { active_turn: 1 })).status, 404);
    // Renaming still works beside it.
    const renamed = await patch(u1, 'edit', { title: 'Branches' });
    assert.equal(renamed.status, 200);
    assert.equal(renamed.json.title, 'Branches');
    const listed = await fetch(`${server.url}/v1/sessions`, { headers: as(u1) });
    assert.equal((await listed.json()).data.find((s) => s.id === 'edit').turns, 6, 'every turn of the tree is counted');
  });
});

describe('a regeneration behind the caches', () => {
  let server;
  let key;
  before(async () => {
    const keys = scratchPath('sessions-branches-cache-keys.yaml');
    key = addKey(keys, 'tenant-c', { user: 'u1' });
    const pipeline = writeTemp('sessions_branches_cache.yaml', `version: 1
name: sessions_branches_cache
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: sqlite, path: "${scratchPath(`sessions-branches-cache-${process.pid}.db`)}"}
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
  - {name: exact, type: exact_cache}
  - {name: semantic, type: semantic_cache, config: {embedder: vectors, threshold: 0.9}}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
  - semantic.hit -> emit
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => { if (server) await server.stop(); });

  const ask = (session, extra = {}) => post(server.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 6, temperature: 0, session_id: session,
    messages: [{ role: 'user', content: 'Tell me about the blue door' }], ...extra,
  }, { Authorization: `Bearer ${key}` });

  test('is answered by the model, not by the cache that holds the first answer', async () => {
    const first = await ask('cached');
    assert.equal(first.status, 200, first.text);
    const elsewhere = await ask('other');
    assert.equal(elsewhere.headers.get('x-chatflow-cache'), 'exact', 'the question is cached');
    const again = await ask('cached', { parent_turn: 0 });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.headers.get('x-chatflow-cache'), 'bypass');
    const response = await fetch(`${server.url}/v1/sessions/cached`, { headers: { Authorization: `Bearer ${key}` } });
    const session = await response.json();
    assert.deepEqual(session.turns.map((turn) => [turn.id, turn.siblings]), [[2, [1, 2]]]);
    // Continuing (no parent_turn) is no regeneration: the cache serves what it holds.
    const next = await ask('cached-2');
    assert.equal(next.headers.get('x-chatflow-cache'), 'exact');
  });
});
