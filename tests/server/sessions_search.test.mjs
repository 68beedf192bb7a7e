// Searching sessions (GET /v1/sessions?q=) against a real `chatflow serve` with API keys and
// SQLite history: titles and the text of every turn, case, accents and width ignored; each
// caller finds only their own sessions (an admin names the owner); the hit comes back in its
// context with where it was; bad queries are refused naming `q` or `after`.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelPipeline, post, scratchPath, sessionPipeline, startServer, testModel, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

async function get(server, path, key) {
  const response = await fetch(server.url + path, { headers: key ? as(key) : {} });
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, text, json };
}

const search = (server, query, key, extra = '') => get(server, `/v1/sessions?q=${encodeURIComponent(query)}${extra}`, key);

describe('session search', () => {
  let server;
  let u1;
  let u2;
  let admin;
  const ask = async (key, session, content) => {
    const answer = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 12, temperature: 0, session_id: session,
      messages: [{ role: 'user', content }],
    }, as(key));
    assert.equal(answer.status, 200, answer.text);
    return JSON.parse(answer.text).choices[0].message.content;
  };

  before(async () => {
    const keys = scratchPath('sessions-search-keys.yaml');
    u1 = addKey(keys, 'tenant-a', { user: 'u1' });
    u2 = addKey(keys, 'tenant-a', { user: 'u2' });
    admin = addKey(keys, 'tenant-a', { user: 'ops', roles: ['admin'] });
    server = await startServer(['--pipeline', sessionPipeline('sessions_search', keys, scratchPath('sessions-search.db'))]);
    await ask(u1, 'trip', 'Plan a trip to Zürich in MAY, with trains please');
    await ask(u1, 'bread', 'How do I bake bread at home?');
    await ask(u1, 'bread', `Use rye flour,\n\nplease, ${'and more words '.repeat(12)}to end with`);
    await ask(u2, 'theirs', 'My own trip to ZURICH');
  });
  after(async () => { if (server) await server.stop(); });

  test('a title matches whatever the case and accents, with the hit in its context', async () => {
    const found = await search(server, 'zurich', u1);
    assert.equal(found.status, 200, found.text);
    assert.equal(found.json.object, 'list');
    assert.equal(found.json.has_more, false);
    assert.deepEqual(found.json.data.map((s) => s.id), ['trip']);
    const [trip] = found.json.data;
    assert.equal(trip.object, 'session');
    assert.equal(trip.turns, 1);
    assert.ok(trip.updated_at > 1.7e9);
    // The title is the first message cut to 60 characters; the hit is in it.
    assert.deepEqual(trip.match, { before: 'Plan a trip to ', text: 'Zürich', after: ' in MAY, with trains please', in: 'title' });
  });

  test('the text of any turn matches; runs of white space are one space', async () => {
    const renamed = await fetch(`${server.url}/v1/sessions/trip`, {
      method: 'PATCH', headers: { ...as(u1), 'Content-Type': 'application/json' }, body: JSON.stringify({ title: 'Holiday' }),
    });
    assert.equal(renamed.status, 200);
    const inUser = await search(server, 'ZÜRICH in may', u1);
    assert.deepEqual(inUser.json.data.map((s) => [s.id, s.title, s.match.in, s.match.turn, s.match.text]),
      [['trip', 'Holiday', 'user', 0, 'Zürich in MAY']]);
    const second = await search(server, 'FLOUR,  please', u1);
    assert.deepEqual(second.json.data.map((s) => [s.id, s.match.in, s.match.turn]), [['bread', 'user', 1]]);
    const { match } = second.json.data[0];
    assert.equal(match.before, 'Use rye ');
    assert.equal(match.text, 'flour, please');
    // The context after the hit is cut (on a character) and says so.
    assert.ok(match.after.endsWith('…') && match.after.length < 140, match.after);
    assert.equal((await search(server, 'nothing like this', u1)).json.data.length, 0);
  });

  test("an answer's text matches", async () => {
    // The test model's answers are random bytes: an echo with a prefix answers words of its own.
    const keys = scratchPath('sessions-search-echo-keys.yaml');
    const key = addKey(keys, 'tenant-e', { user: 'u1' });
    const pipeline = writeTemp('sessions_search_echo.yaml', `version: 1
name: sessions_search_echo
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: sqlite, path: "${scratchPath('sessions-search-echo.db')}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
  - {name: echo, type: echo, config: {prefix: "The kangaroo answers: "}}
`);
    const echo = await startServer(['--pipeline', pipeline]);
    try {
      for (const [session, content] of [['s1', 'first question'], ['s2', 'second question']]) {
        const answer = await post(echo.url, '/v1/chat/completions', { model: 'test-model', session_id: session, messages: [{ role: 'user', content }] }, as(key));
        assert.equal(answer.status, 200, answer.text);
      }
      const found = await search(echo, 'KANGAROO', key);
      assert.deepEqual(found.json.data.map((s) => [s.id, s.match.in, s.match.turn, s.match.before, s.match.text]),
        [['s2', 'assistant', 0, 'The ', 'kangaroo'], ['s1', 'assistant', 0, 'The ', 'kangaroo']]);
      assert.match(found.json.data[0].match.after, /^ answers: /);
    } finally {
      await echo.stop();
    }
  });

  test("each caller searches only their own sessions; an admin names the owner", async () => {
    assert.deepEqual((await search(server, 'zurich', u2)).json.data.map((s) => s.id), ['theirs']);
    assert.deepEqual((await search(server, 'bread', u2)).json.data, []);
    assert.deepEqual((await search(server, 'bread', admin, '&user=u1')).json.data.map((s) => s.id), ['bread']);
    const refused = await search(server, 'bread', u2, '&user=u1');
    assert.equal(refused.status, 403, refused.text);
    assert.equal((await search(server, 'bread')).status, 401);
  });

  test('limit keeps the first matches and says there are more', async () => {
    const all = await search(server, 'a', u1);
    assert.deepEqual(all.json.data.map((s) => s.id), ['bread', 'trip'], 'latest activity first');
    const one = await search(server, 'a', u1, '&limit=1');
    assert.deepEqual(one.json.data.map((s) => s.id), ['bread']);
    assert.equal(one.json.has_more, true);
  });

  test('bad queries are refused naming the parameter', async () => {
    for (const [query, param] of [['', 'q'], ['   ', 'q'], ['x'.repeat(300), 'q']]) {
      const refused = await search(server, query, u1);
      assert.equal(refused.status, 400, `${JSON.stringify(query.slice(0, 10))}: ${refused.text}`);
      assert.equal(refused.json.error.type, 'invalid_request_error');
      assert.equal(refused.json.error.param, param);
    }
    assert.match((await search(server, 'x'.repeat(300), u1)).json.error.message, /300 bytes/);
    const paged = await search(server, 'bread', u1, '&after=trip');
    assert.equal(paged.status, 400);
    assert.equal(paged.json.error.param, 'after');
    assert.equal((await search(server, 'bread', u1, '&limit=0')).json.error.param, 'limit');
  });
});

test('a pipeline without a history store has nothing to search: 404', async () => {
  const server = await startServer(['--pipeline', modelPipeline('sessions_search_none')]);
  try {
    const found = await search(server, 'anything');
    assert.equal(found.status, 404, found.text);
    assert.match(found.json.error.message, /no session history/);
  } finally {
    await server.stop();
  }
});
