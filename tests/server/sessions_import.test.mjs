// POST /v1/sessions against a real `chatflow serve` with API keys and SQLite history: a
// conversation the model did not answer (an imported one) becomes a session of the caller that
// reads, lists, searches and continues like any other; bad bodies are refused naming the member;
// an id the caller already has is a 409; another owner's session of the same id is theirs.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, modelPipeline, post, scratchPath, sessionPipeline, startServer } from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

describe('session import', () => {
  let server;
  let u1;
  let u2;
  const create = (key, body) => post(server.url, '/v1/sessions', body, as(key));
  const read = async (key, id) => {
    const response = await fetch(`${server.url}/v1/sessions/${encodeURIComponent(id)}`, { headers: as(key) });
    return { status: response.status, json: await response.json() };
  };
  const messages = [
    { role: 'user', content: 'What is a lifetime?' },
    { role: 'assistant', content: 'A **region** of code where a reference is valid.' },
    { role: 'user', content: 'And a borrow?' },
    { role: 'assistant', content: 'A reference that does not own.' },
  ];

  before(async () => {
    const keys = scratchPath('sessions-import-keys.yaml');
    u1 = addKey(keys, 'tenant-a', { user: 'u1' });
    u2 = addKey(keys, 'tenant-a', { user: 'u2' });
    server = await startServer(['--pipeline', sessionPipeline('sessions_import', keys, scratchPath(`sessions-import-${process.pid}.db`))]);
  });
  after(async () => { if (server) await server.stop(); });

  test('an imported conversation is a session like any other', async () => {
    const created = await create(u1, { id: 'rust', title: '  Rust notes ', messages });
    assert.equal(created.status, 201, created.text);
    const summary = JSON.parse(created.text);
    assert.equal(summary.id, 'rust');
    assert.equal(summary.object, 'session');
    assert.equal(summary.title, 'Rust notes');
    assert.equal(summary.turns, 2);
    const session = await read(u1, 'rust');
    assert.deepEqual(session.json.turns.map((turn) => [turn.id, turn.parent, turn.user, turn.assistant, turn.status]), [
      [1, 0, 'What is a lifetime?', 'A **region** of code where a reference is valid.', 'completed'],
      [2, 1, 'And a borrow?', 'A reference that does not own.', 'completed'],
    ]);
    const listed = await (await fetch(`${server.url}/v1/sessions`, { headers: as(u1) })).json();
    assert.deepEqual(listed.data.map((s) => [s.id, s.title]), [['rust', 'Rust notes']]);
    const found = await (await fetch(`${server.url}/v1/sessions?q=${encodeURIComponent('does not own')}`, { headers: as(u1) })).json();
    assert.deepEqual(found.data.map((s) => [s.id, s.match.in, s.match.turn]), [['rust', 'assistant', 1]]);
    // It continues: the model gets both imported turns before the new message.
    const fresh = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 4, temperature: 0, messages: [...messages, { role: 'user', content: 'More?' }],
    }, as(u1));
    const continued = await post(server.url, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 4, temperature: 0, session_id: 'rust', messages: [{ role: 'user', content: 'More?' }],
    }, as(u1));
    assert.equal(continued.status, 200, continued.text);
    assert.equal(JSON.parse(continued.text).usage.prompt_tokens, JSON.parse(fresh.text).usage.prompt_tokens);
    assert.equal((await read(u1, 'rust')).json.turns.length, 3);
  });

  test('without an id the server names it; without a title the first question is', async () => {
    const created = await create(u1, { messages: messages.slice(0, 2) });
    assert.equal(created.status, 201, created.text);
    const summary = JSON.parse(created.text);
    assert.match(summary.id, /^import-[0-9a-f]{16}$/);
    assert.equal(summary.title, 'What is a lifetime?');
  });

  test('an id the caller has is a 409; another owner has sessions of their own', async () => {
    const again = await create(u1, { id: 'rust', messages });
    assert.equal(again.status, 409);
    assert.equal(JSON.parse(again.text).error.code, 'session_exists');
    assert.equal(JSON.parse(again.text).error.param, 'id');
    assert.equal((await read(u1, 'rust')).json.turns.length, 3, 'nothing written');
    assert.equal((await read(u2, 'rust')).status, 404);
    const theirs = await create(u2, { id: 'rust', messages: messages.slice(0, 2) });
    assert.equal(theirs.status, 201, theirs.text);
    assert.equal((await read(u2, 'rust')).json.turns.length, 1);
    assert.equal((await read(u1, 'rust')).json.turns.length, 3);
  });

  test('bad bodies are refused naming the member, writing nothing', async () => {
    const cases = [
      [{}, 'messages'],
      [{ messages: [] }, 'messages'],
      [{ messages: 'hi' }, 'messages'],
      [{ messages: [{ role: 'system', content: 'be nice' }, ...messages] }, 'messages[0].role'],
      [{ messages: [messages[0], messages[0]] }, 'messages[1].role'],
      [{ messages: [messages[0]] }, 'messages[0]'],
      [{ messages: [{ role: 'user', content: 5 }, messages[1]] }, 'messages[0].content'],
      [{ messages: [{ role: 'user' }, messages[1]] }, 'messages[0].content'],
      [{ messages: [{ ...messages[0], name: 'x' }, messages[1]] }, 'messages[0].name'],
      [{ messages: [7, messages[1]] }, 'messages[0]'],
      [{ messages, title: '' }, 'title'],
      [{ messages, id: 'x'.repeat(257) }, 'id'],
      [{ messages, created: 'today' }, 'created'],
    ];
    for (const [body, param] of cases) {
      const refused = await create(u1, { id: 'bad', ...body });
      assert.equal(refused.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${refused.text}`);
      const { error } = JSON.parse(refused.text);
      assert.equal(error.param, param, JSON.stringify(error));
      assert.equal(error.type, 'invalid_request_error');
    }
    const notJson = await fetch(`${server.url}/v1/sessions`, { method: 'POST', headers: { ...as(u1), 'Content-Type': 'application/json' }, body: '{oops' });
    assert.equal(notJson.status, 400);
    assert.equal((await read(u1, 'bad')).status, 404);
    const anonymous = await post(server.url, '/v1/sessions', { messages }, {});
    assert.equal(anonymous.status, 401);
  });
});

describe('session import without a history store', () => {
  let server;
  before(async () => { server = await startServer(['--pipeline', modelPipeline('sessions_import_none')]); });
  after(async () => { if (server) await server.stop(); });

  test('is a 404 saying the pipeline keeps no sessions', async () => {
    const refused = await post(server.url, '/v1/sessions', { messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }] });
    assert.equal(refused.status, 404);
    assert.match(JSON.parse(refused.text).error.message, /keeps no session history/);
  });
});
