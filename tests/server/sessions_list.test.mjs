// The session list, rename and delete over HTTP against a real `chatflow serve` with API keys and
// SQLite history: each user sees only their own sessions, titled by their first message; a title
// survives a restart; a deleted session is gone (and its id starts afresh); bad limits, bad
// titles and wrong methods are refused; the dashboard routes are for admins. Then retention: an
// owner's sessions deleted at once (DELETE /v1/sessions), exported as JSON Lines, and kept to
// max_sessions_per_owner.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelStages, post, scratchPath, sessionPipeline, startServer, testModel, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

async function call(server, method, path, key, body) {
  const headers = { ...as(key) };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(server.url + path, {
    method, headers, body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, headers: response.headers, text, json };
}

describe('session list, rename and delete', () => {
  const database = scratchPath('sessions-list.db');
  let pipeline;
  let u1;
  let u2;
  let admin;
  let server;

  before(async () => {
    const keys = scratchPath('sessions-list-keys.yaml');
    u1 = addKey(keys, 'tenant-a', { user: 'u1' });
    u2 = addKey(keys, 'tenant-a', { user: 'u2' });
    admin = addKey(keys, 'tenant-a', { user: 'ops', roles: ['admin'] });
    pipeline = sessionPipeline('sessions_list', keys, database);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => { if (server) await server.stop(); });

  const ask = async (key, session, content) => {
    const answer = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 3, temperature: 0, session_id: session,
      messages: [{ role: 'user', content }],
    }, as(key));
    assert.equal(answer.status, 200, answer.text);
  };

  test('each user lists only their own sessions, latest first, titled by the first message', async () => {
    const long = `  Tell me\n\na story about   ${'dragons and '.repeat(8)}castles`;
    await ask(u1, 'u1-first', long);
    await ask(u1, 'u1-second', 'Ünïcödé 日本語 question');
    await ask(u2, 'u2-only', 'What is two plus two?');
    await ask(u1, 'u1-first', 'And then what happened?');  // u1-first is the latest again

    const mine = await call(server, 'GET', '/v1/sessions', u1);
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.json.object, 'list');
    assert.equal(mine.json.has_more, false);
    assert.deepEqual(mine.json.data.map((s) => s.id), ['u1-first', 'u1-second']);
    const [first, second] = mine.json.data;
    assert.equal(first.object, 'session');
    assert.equal(first.turns, 2);
    assert.ok(first.updated_at >= first.created_at && first.created_at > 1.7e9, JSON.stringify(first));
    const collapsed = long.trim().replace(/\s+/g, ' ');
    assert.equal([...first.title].length, 60, first.title);
    assert.equal(first.title, [...collapsed].slice(0, 59).join('').trimEnd() + '…');
    assert.equal(second.title, 'Ünïcödé 日本語 question');

    const theirs = await call(server, 'GET', '/v1/sessions', u2);
    assert.deepEqual(theirs.json.data.map((s) => [s.id, s.title]), [['u2-only', 'What is two plus two?']]);
    // Admins read a user's list by naming the user; others may not.
    const named = await call(server, 'GET', '/v1/sessions?user=u2', admin);
    assert.deepEqual(named.json.data.map((s) => s.id), ['u2-only']);
    assert.equal((await call(server, 'GET', '/v1/sessions?user=u1', u2)).status, 403);
    assert.equal((await fetch(`${server.url}/v1/sessions`)).status, 401);
  });

  test('limit pages through the list and anything outside 1..200 is a 400 naming it', async () => {
    for (let i = 0; i < 3; i++) await ask(u2, `page-${i}`, `page question ${i}`);
    const first = await call(server, 'GET', '/v1/sessions?limit=2', u2);
    assert.deepEqual(first.json.data.map((s) => s.id), ['page-2', 'page-1']);
    assert.equal(first.json.has_more, true);
    const next = await call(server, 'GET', '/v1/sessions?limit=2&after=page-1', u2);
    assert.deepEqual(next.json.data.map((s) => s.id), ['page-0', 'u2-only']);
    assert.equal(next.json.has_more, false);
    for (const limit of ['0', '201', '-3', 'abc', '', '2.5']) {
      const refused = await call(server, 'GET', `/v1/sessions?limit=${limit}`, u2);
      assert.equal(refused.status, 400, `limit=${limit}: ${refused.text}`);
      assert.equal(refused.json.error.param, 'limit');
    }
    assert.equal((await call(server, 'GET', '/v1/sessions?limit=200', u2)).status, 200);
    const unknown = await call(server, 'GET', '/v1/sessions?after=u1-first', u2);
    assert.equal(unknown.status, 400, 'a cursor of another user is no cursor');
    assert.equal(unknown.json.error.param, 'after');
  });

  test('a rename persists across a restart; bad titles are refused', async () => {
    await ask(u1, 'to-rename', 'Some question to rename');
    const renamed = await call(server, 'PATCH', '/v1/sessions/to-rename', u1, { title: '  My renamed chat  ' });
    assert.equal(renamed.status, 200, renamed.text);
    assert.deepEqual(Object.keys(renamed.json).sort(), ['created_at', 'id', 'object', 'title', 'turns', 'updated_at']);
    assert.equal(renamed.json.id, 'to-rename');
    assert.equal(renamed.json.title, 'My renamed chat');
    assert.equal(renamed.json.turns, 1);

    const bad = [
      [{ title: '' }, 'title'], [{ title: '   ' }, 'title'], [{ title: 'x'.repeat(201) }, 'title'],
      [{ title: 7 }, 'title'], [{}, 'title'], [{ title: 'ok', color: 'red' }, 'color'],
    ];
    for (const [body, param] of bad) {
      const refused = await call(server, 'PATCH', '/v1/sessions/to-rename', u1, body);
      assert.equal(refused.status, 400, `${JSON.stringify(body)}: ${refused.text}`);
      assert.equal(refused.json.error.param, param, JSON.stringify(body));
    }
    assert.equal((await call(server, 'PATCH', '/v1/sessions/to-rename', u1, { title: 'ok', color: 'red' })).json.error.code,
      'unsupported_parameter');
    assert.equal((await call(server, 'PATCH', '/v1/sessions/to-rename', u1, '{"title": ')).status, 400);
    assert.equal((await call(server, 'PATCH', '/v1/sessions/to-rename', u1, 'x'.repeat(10))).status, 400);
    const stranger = await call(server, 'PATCH', '/v1/sessions/to-rename', u2, { title: 'Mine now' });
    assert.equal(stranger.status, 404);
    assert.equal(stranger.json.error.code, 'session_not_found');
    assert.equal((await call(server, 'PATCH', '/v1/sessions/never-was', u1, { title: 'x' })).status, 404);

    assert.equal((await server.stop()).code, 0);
    server = await startServer(['--pipeline', pipeline]);
    const listed = await call(server, 'GET', '/v1/sessions', u1);
    const session = listed.json.data.find((s) => s.id === 'to-rename');
    assert.equal(session?.title, 'My renamed chat', listed.text);
    // A new turn keeps the title and makes the session the latest.
    await ask(u1, 'to-rename', 'One more question');
    const again = await call(server, 'GET', '/v1/sessions?limit=1', u1);
    assert.deepEqual(again.json.data.map((s) => [s.id, s.title, s.turns]), [['to-rename', 'My renamed chat', 2]]);
  });

  test('delete removes the session; its id then starts a new one', async () => {
    await ask(u1, 'to-delete', 'Forget this conversation');
    await ask(u1, 'to-delete', 'Really forget it');
    assert.equal((await call(server, 'DELETE', '/v1/sessions/to-delete', u2)).status, 404, "another user's");
    const deleted = await call(server, 'DELETE', '/v1/sessions/to-delete', u1);
    assert.equal(deleted.status, 200, deleted.text);
    assert.deepEqual(deleted.json, { id: 'to-delete', object: 'session.deleted', deleted: true });
    const gone = await call(server, 'GET', '/v1/sessions/to-delete', u1);
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'session_not_found');
    const again = await call(server, 'DELETE', '/v1/sessions/to-delete', u1);
    assert.equal(again.status, 404);
    assert.equal(again.json.error.code, 'session_not_found');
    const listed = await call(server, 'GET', '/v1/sessions', u1);
    assert.ok(!listed.json.data.some((s) => s.id === 'to-delete'), listed.text);

    await ask(u1, 'to-delete', 'A fresh start');
    const fresh = await call(server, 'GET', '/v1/sessions/to-delete', u1);
    assert.deepEqual(fresh.json.turns.map((t) => t.user), ['A fresh start']);
    const relisted = await call(server, 'GET', '/v1/sessions?limit=1', u1);
    assert.deepEqual(relisted.json.data.map((s) => [s.id, s.title, s.turns]), [['to-delete', 'A fresh start', 1]]);
  });

  test('any session id works in the path, URL-encoded', async () => {
    const id = 'notes/2024 #1 ü?&100%';
    await ask(u2, id, 'An odd id');
    const path = `/v1/sessions/${encodeURIComponent(id)}`;
    const read = await call(server, 'GET', path, u2);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.json.id, id);
    assert.equal((await call(server, 'PATCH', path, u2, { title: 'Odd' })).json.id, id);
    assert.equal((await call(server, 'GET', '/v1/sessions?limit=1', u2)).json.data[0].id, id);
    assert.equal((await call(server, 'DELETE', path, u2)).json.id, id);
    assert.equal((await call(server, 'GET', path, u2)).status, 404);
  });

  test('a method a path does not answer is a 405 naming the ones it does', async () => {
    const put = await call(server, 'PUT', '/v1/sessions/anything', u1, { title: 'x' });
    assert.equal(put.status, 405, put.text);
    assert.equal(put.json.error.code, 'method_not_allowed');
    assert.equal(put.headers.get('allow'), 'GET, PATCH, DELETE, OPTIONS');
    const putList = await call(server, 'PUT', '/v1/sessions', u1, {});
    assert.equal(putList.status, 405);
    assert.equal(putList.headers.get('allow'), 'GET, POST, DELETE, OPTIONS');
    const deleteSvg = await call(server, 'DELETE', '/v1/dashboard/graph.svg', admin);
    assert.equal(deleteSvg.status, 405);
    const patchNoType = await fetch(`${server.url}/v1/sessions/to-rename`, {
      method: 'PATCH', headers: as(u1), body: '{"title":"x"}',
    });
    assert.equal(patchNoType.status, 415, 'a PATCH body is JSON like a POST body');
  });

  test('the dashboard routes are for admins and draw every stage', async () => {
    for (const path of ['/v1/dashboard/graph.svg', '/v1/dashboard/summary']) {
      const refused = await call(server, 'GET', path, u1);
      assert.equal(refused.status, 403, path);
      assert.equal(refused.json.error.message, 'only admins may open the dashboard');
      assert.equal((await fetch(server.url + path)).status, 401, path);
    }
    const svg = await call(server, 'GET', '/v1/dashboard/graph.svg', admin);
    assert.equal(svg.status, 200);
    assert.match(svg.headers.get('content-type'), /^image\/svg\+xml/);
    assert.ok(svg.text.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'), svg.text.slice(0, 100));
    const stages = ['auth', 'trim', 'tokenize', 'prefill', 'decode', 'detokenize', 'emit'];
    for (const stage of stages) {
      assert.ok(svg.text.includes(`<g class="stage" data-stage="${stage}"`), stage);
      assert.ok(svg.text.includes(`<text class="stage-stats" data-stage="${stage}"`), stage);
    }
    assert.equal((svg.text.match(/<g class="stage"/g) || []).length, stages.length);

    const summary = await call(server, 'GET', '/v1/dashboard/summary', admin);
    assert.equal(summary.status, 200, summary.text);
    assert.equal(summary.json.pipeline, 'sessions_list');
    assert.equal(summary.json.model, 'test-model');
    assert.deepEqual(summary.json.stages.map((s) => s.name), stages);
    assert.deepEqual(summary.json.stages.map((s) => s.depth), [0, 1, 2, 3, 4, 5, 6]);
    assert.equal(summary.json.stages[1].type, 'history_trim');
    assert.deepEqual(summary.json.arms, []);
    assert.equal(summary.json.features.history, true);
    // Every metric the summary names for the dashboard is one /metrics serves.
    const metrics = await (await fetch(`${server.url}/metrics`, { headers: as(admin) })).text();
    for (const name of Object.values(summary.json.metrics)) {
      // Made on first use: by an A/B pipeline, by a stage's first note, by a cache's first hit
      // (labelled with the cache; this pipeline has none).
      if (name.startsWith('chatflow:arm_') || name === 'chatflow:request_annotations_total' ||
          name === 'chatflow:cache_served_tokens_total') continue;
      assert.ok(metrics.includes(`# TYPE ${name} `), name);
    }
    assert.match(metrics, /chatflow:stage_duration_seconds_count\{pipeline="sessions_list",stage="trim"\} [1-9]/);
  });
});

// A pipeline like sessionPipeline's, its history_store with `retention`.
function retentionPipeline(name, keys, database, retention) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  history: {type: history_store, backend: sqlite, path: "${database}", retention: ${retention}}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

describe('retention: purge, export and the per-owner limit', () => {
  let u1;
  let u2;
  let keyOnly;
  let admin;
  let otherAdmin;
  let server;

  before(async () => {
    const keys = scratchPath('sessions-retention-keys.yaml');
    u1 = addKey(keys, 'tenant-a', { user: 'u1' });
    u2 = addKey(keys, 'tenant-a', { user: 'u2' });
    keyOnly = addKey(keys, 'tenant-a');
    admin = addKey(keys, 'tenant-a', { user: 'ops', roles: ['admin'] });
    otherAdmin = addKey(keys, 'tenant-b', { user: 'ops', roles: ['admin'] });
    const pipeline = retentionPipeline('sessions_retention', keys, scratchPath('sessions-retention.db'),
      '{max_sessions_per_owner: 3, max_turns_loaded: 50}');
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => { if (server) await server.stop(); });

  const ask = async (key, session, content) => {
    const answer = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 3, temperature: 0, session_id: session,
      messages: [{ role: 'user', content }],
    }, as(key));
    assert.equal(answer.status, 200, answer.text);
    return answer.json.choices[0].message.content;
  };
  const ids = async (key, query = '') => (await call(server, 'GET', `/v1/sessions${query}`, key)).json.data.map((s) => s.id);

  test('starting a session past max_sessions_per_owner deletes the least recently active', async () => {
    await ask(u1, 'oldest', 'first');
    await ask(u1, 'middle', 'second');
    await ask(u1, 'newest', 'third');
    await ask(u1, 'oldest', 'first again');  // now `middle` is the least recently active
    await ask(u2, 'theirs', 'not counted with u1');
    assert.deepEqual(await ids(u1), ['oldest', 'newest', 'middle']);
    await ask(u1, 'fourth', 'one too many');
    assert.deepEqual(await ids(u1), ['fourth', 'oldest', 'newest']);
    assert.equal((await call(server, 'GET', '/v1/sessions/middle', u1)).status, 404);
    assert.deepEqual(await ids(u2), ['theirs']);
  });

  test('an owner exports every session with its turns as JSON Lines; admins name the owner', async () => {
    const answer = await ask(u2, 'exported', 'What is in the export?');
    const exported = await call(server, 'GET', '/v1/sessions:export', u2);
    assert.equal(exported.status, 200, exported.text);
    assert.match(exported.headers.get('content-type'), /^application\/x-ndjson/);
    assert.ok(exported.text.endsWith('\n'));
    const lines = exported.text.trimEnd().split('\n').map((line) => JSON.parse(line));
    assert.deepEqual(lines.map((s) => s.id), ['exported', 'theirs'], 'latest activity first');
    const [latest] = lines;
    assert.equal(latest.object, 'session');
    assert.equal(latest.title, 'What is in the export?');
    assert.ok(latest.created_at > 1.7e9 && latest.updated_at >= latest.created_at, JSON.stringify(latest));
    assert.deepEqual(latest.turns.map((t) => [t.user, t.assistant, t.status]),
      [['What is in the export?', answer, 'completed']]);
    assert.ok(latest.turns[0].completion_tokens > 0);

    const byAdmin = await call(server, 'GET', '/v1/sessions:export?user=u2', admin);
    assert.equal(byAdmin.text, exported.text);
    const refused = await call(server, 'GET', '/v1/sessions:export?user=u2', u1);
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.error.type, 'permission_error');
    const otherTenant = await call(server, 'GET', '/v1/sessions:export?user=u2', otherAdmin);
    assert.equal(otherTenant.status, 200);
    assert.equal(otherTenant.text, '', "another tenant's admin sees none of tenant-a's sessions");
    assert.equal((await fetch(`${server.url}/v1/sessions:export`)).status, 401);
    // "export" is still a session id like any other.
    await ask(u2, 'export', 'a session named export');
    assert.equal((await call(server, 'GET', '/v1/sessions/export', u2)).json.turns[0].user, 'a session named export');
  });

  test("DELETE /v1/sessions removes all of the caller's sessions and answers how many", async () => {
    await ask(keyOnly, 'k1', 'a key without a user');
    const refused = await call(server, 'DELETE', '/v1/sessions?user=u1', u2);
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.error.code, 'forbidden');
    for (const query of ['?user=', '?key=']) {
      const empty = await call(server, 'DELETE', `/v1/sessions${query}`, admin);
      assert.equal(empty.status, 400, `${query}: ${empty.text}`);
      assert.equal(empty.json.error.code, 'invalid_value');
      assert.equal(empty.json.error.param, query.slice(1, -1));
    }
    assert.equal((await ids(u1)).length, 3, 'nothing was deleted by a refused call');

    const purged = await call(server, 'DELETE', '/v1/sessions', u1);
    assert.equal(purged.status, 200, purged.text);
    assert.deepEqual(purged.json, { object: 'sessions.deleted', deleted: 3 });
    assert.deepEqual(await ids(u1), []);
    assert.equal((await call(server, 'GET', '/v1/sessions:export', u1)).text, '');
    assert.deepEqual(await ids(u2), ['export', 'exported', 'theirs'], "another user's stay");
    assert.deepEqual((await call(server, 'DELETE', '/v1/sessions', u1)).json.deleted, 0);

    // An admin purges a user of the tenant by name, or a key without a user by its id.
    assert.equal((await call(server, 'DELETE', '/v1/sessions?user=u2', otherAdmin)).json.deleted, 0,
      'another tenant');
    assert.equal((await call(server, 'DELETE', '/v1/sessions?user=u2', admin)).json.deleted, 3);
    assert.deepEqual(await ids(u2), []);
    assert.deepEqual(await ids(keyOnly), ['k1']);
    assert.equal((await call(server, 'DELETE', '/v1/sessions', keyOnly)).json.deleted, 1);
    // The ids start afresh.
    await ask(u1, 'oldest', 'a new beginning');
    assert.deepEqual((await call(server, 'GET', '/v1/sessions/oldest', u1)).json.turns.map((t) => t.user),
      ['a new beginning']);
  });

  test('a bad retention setting is refused at start, naming the key', async () => {
    const keys = scratchPath('sessions-retention-bad-keys.yaml');
    addKey(keys, 'tenant-a');
    const bad = retentionPipeline('sessions_retention_bad', keys, scratchPath('bad.db'), '{ttl_days: -1}');
    await assert.rejects(startServer(['--pipeline', bad]), (error) => {
      assert.match(error.message, /retention\.ttl_days/);
      return true;
    });
  });
});

describe('an admin names a user whose name must be URL-encoded', () => {
  const names = ['alice@example.com', 'Ann Lee+1/ops'];
  const keys = {};
  let admin;
  let server;

  before(async () => {
    const file = scratchPath('sessions-encoded-keys.yaml');
    for (const name of names) keys[name] = addKey(file, 'tenant-e', { user: name });
    admin = addKey(file, 'tenant-e', { user: 'ops', roles: ['admin'] });
    server = await startServer(['--pipeline', sessionPipeline('sessions_encoded', file, scratchPath('sessions-encoded.db'))]);
  });
  after(async () => { if (server) await server.stop(); });

  test('the query value is percent-decoded for listing, export and purge', async () => {
    for (const name of names) {
      const answer = await post(server.url, '/v1/chat/completions', {
        model: 'test-model', max_tokens: 3, temperature: 0, session_id: `of ${name}`,
        messages: [{ role: 'user', content: `hello from ${name}` }],
      }, as(keys[name]));
      assert.equal(answer.status, 200, answer.text);
    }
    for (const name of names) {
      const query = `?user=${encodeURIComponent(name)}`;
      const listed = await call(server, 'GET', `/v1/sessions${query}`, admin);
      assert.equal(listed.status, 200, listed.text);
      assert.deepEqual(listed.json.data.map((s) => s.id), [`of ${name}`], query);
      const exported = await call(server, 'GET', `/v1/sessions:export${query}`, admin);
      assert.deepEqual(exported.text.trimEnd().split('\n').map((line) => JSON.parse(line).id), [`of ${name}`], query);
      const purged = await call(server, 'DELETE', `/v1/sessions${query}`, admin);
      assert.deepEqual(purged.json, { object: 'sessions.deleted', deleted: 1 }, query);
      assert.deepEqual((await call(server, 'GET', '/v1/sessions', keys[name])).json.data, [], `${name}'s own list`);
    }
  });
});
