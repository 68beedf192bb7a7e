// /v1/documents over HTTP against a real `chatflow serve`: uploads (multipart and JSON) into a
// retrieval_index with `uploads:`, owner-scoped as sessions are (another owner's document is a
// 404; an admin may name ?user=), every bad input with its status and OpenAI error, and an
// uploaded passage retrieved into its owner's prompt and cited with its text, never another's.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, jwtHs256, modelStages, openStream, post, scratchPath, sseData, startServer, testModel, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });
const secret = 'documents-test-secret-of-32-bytes!!';

function pipeline(name, uploads) {
  const keys = scratchPath(`${name}-keys.yaml`);
  const shared = writeTemp(`${name}-shared.jsonl`, JSON.stringify({
    id: 'handbook/leave', title: 'Annual leave', text: 'Every employee has 25 days of annual leave.',
  }));
  const file = writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  knowledge: {type: retrieval_index, path: "${scratchPath(`${name}-index`)}", source: ["${shared}"]${uploads}}
stages:
  - name: auth
    type: auth
    config:
      keys_file: ${keys}
      jwt: {algorithm: HS256, secret: "${secret}", issuer: https://login.example, audience: chatflow, user_claim: ""}
  - {name: retrieve, type: hybrid_retrieval, config: {index: knowledge}}
  - {name: rerank, type: rerank, config: {index: knowledge, top_n: 3}}
  - {name: assemble, type: prompt_assembly}
${modelStages}  - {name: emit, type: sse_emit}
`);
  return { file, keys };
}

// A multipart/form-data body as a browser or `curl -F` sends it.
function form(parts) {
  const data = new FormData();
  for (const [field, value, filename, type] of parts) {
    if (filename === undefined) data.append(field, value);
    else data.append(field, new Blob([value], type ? { type } : {}), filename);
  }
  return data;
}

async function call(server, method, path, key, body) {
  const init = { method, headers: key ? as(key) : {} };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const response = await fetch(server.url + path, init);
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, json, text };
}

function assertError(response, status, code, pattern) {
  assert.equal(response.status, status, response.text);
  assert.equal(typeof response.json.error.message, 'string');
  assert.equal(response.json.error.type, status === 401 ? 'authentication_error'
    : status === 403 ? 'permission_error' : 'invalid_request_error', response.text);
  if (code) assert.equal(response.json.error.code, code, response.text);
  if (pattern) assert.match(response.json.error.message, pattern);
}

describe('documents API', () => {
  let server;
  let alice;
  let bob;
  let admin;
  before(async () => {
    const { file, keys } = pipeline('documents', ', uploads: {max_bytes: 2000, max_documents_per_owner: 3, max_bytes_per_owner: 3000}');
    alice = addKey(keys, 'acme', { user: 'alice' });
    bob = addKey(keys, 'acme', { user: 'bob' });
    admin = addKey(keys, 'acme', { user: 'ops', roles: ['admin'] });
    server = await startServer(['--pipeline', file]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  const ask = (key, content, extra = {}) => post(server.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 4, temperature: 0, messages: [{ role: 'user', content }], ...extra,
  }, as(key));

  test('a multipart upload is listed, read back with its chunks, and deleted', async () => {
    const text = '# Zephyr\nThe zephyr project ships in October with the quartz release.';
    const uploaded = await call(server, 'POST', '/v1/documents', alice,
      form([['file', text, 'zephyr.md', 'text/markdown']]));
    assert.equal(uploaded.status, 200, uploaded.text);
    const document = uploaded.json;
    assert.match(document.id, /^doc-[0-9a-f]{16}$/);
    assert.equal(document.object, 'document');
    assert.equal(document.name, 'zephyr.md');
    assert.equal(document.content_type, 'text/markdown');
    assert.equal(document.bytes, Buffer.byteLength(text));
    assert.equal(document.chunks, 1);
    assert.ok(Math.abs(document.created_at - Date.now() / 1000) < 60);

    const listed = await call(server, 'GET', '/v1/documents', alice);
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(listed.json.data, [document]);
    assert.equal(listed.json.bytes, document.bytes);
    assert.deepEqual(listed.json.limits, {
      max_bytes: 2000, max_documents_per_owner: 3, max_bytes_per_owner: 3000,
      accepted_types: ['text/plain', 'text/markdown', 'text/csv', 'text/html', 'application/json'],
    });

    const read = await call(server, 'GET', `/v1/documents/${document.id}`, alice);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.json.text, text);
    assert.deepEqual(read.json.chunk_offsets, [{ chunk: 0, start: 0, end: Buffer.byteLength(text) }]);

    const deleted = await call(server, 'DELETE', `/v1/documents/${document.id}`, alice);
    assert.deepEqual(deleted.json, { id: document.id, object: 'document.deleted', deleted: true });
    assert.deepEqual((await call(server, 'GET', '/v1/documents', alice)).json.data, []);
    assertError(await call(server, 'GET', `/v1/documents/${document.id}`, alice), 404, 'document_not_found');
    assertError(await call(server, 'DELETE', `/v1/documents/${document.id}`, alice), 404, 'document_not_found');
  });

  test('a JSON upload {name, text} works as well', async () => {
    const uploaded = await call(server, 'POST', '/v1/documents', alice, { name: 'notes.txt', text: 'plain notes' });
    assert.equal(uploaded.status, 200, uploaded.text);
    assert.equal(uploaded.json.content_type, 'text/plain');
    assert.equal(uploaded.json.name, 'notes.txt');
    await call(server, 'DELETE', `/v1/documents/${uploaded.json.id}`, alice);
  });

  test('an uploaded passage reaches its owner\'s prompt and is cited with its text; nobody else\'s', async () => {
    const passage = 'The obsidian vault combination is 4417 and only the night porter knows it.';
    const uploaded = await call(server, 'POST', '/v1/documents', alice, form([['file', passage, 'vault.txt', 'text/plain']]));
    assert.equal(uploaded.status, 200, uploaded.text);
    const id = uploaded.json.id;
    const question = 'What is the obsidian vault combination the night porter knows?';
    try {
      const mine = await ask(alice, question);
      assert.equal(mine.status, 200, mine.text);
      const cited = mine.json.chatflow.citations.find((citation) => citation.document === id);
      assert.ok(cited, JSON.stringify(mine.json.chatflow));
      assert.deepEqual(cited, { index: cited.index, document: id, title: 'vault.txt', chunk: 0, text: passage });

      const theirs = await ask(bob, question);
      assert.equal(theirs.status, 200, theirs.text);
      const bobsDocuments = (theirs.json.chatflow?.citations ?? []).map((citation) => citation.document);
      assert.ok(!bobsDocuments.includes(id), `bob was cited ${bobsDocuments}`);
      // The passage made alice's prompt longer than bob's for the same question.
      assert.ok(mine.json.usage.prompt_tokens > theirs.json.usage.prompt_tokens,
        `${mine.json.usage.prompt_tokens} vs ${theirs.json.usage.prompt_tokens}`);

      // Streamed: the citations with their text come on the first chunk.
      const stream = openStream(server.port, '/v1/chat/completions', {
        model: 'test-model', max_tokens: 4, temperature: 0, stream: true, messages: [{ role: 'user', content: question }],
      }, as(alice));
      const chunks = sseData((await stream.ended).body);
      const first = JSON.parse(chunks[0]);
      assert.ok(first.chatflow.citations.some((citation) => citation.document === id && citation.text === passage), chunks[0]);
    } finally {
      await call(server, 'DELETE', `/v1/documents/${id}`, alice);
    }
    const after = await ask(alice, question);
    const left = (after.json.chatflow?.citations ?? []).map((citation) => citation.document);
    assert.ok(!left.includes(id), 'a deleted document is no longer retrieved');
  });

  test('another owner\'s document is a 404; an admin may name the owner', async () => {
    const uploaded = await call(server, 'POST', '/v1/documents', alice, { name: 'private.md', text: 'alice only' });
    const id = uploaded.json.id;
    try {
      assertError(await call(server, 'GET', `/v1/documents/${id}`, bob), 404, 'document_not_found');
      assertError(await call(server, 'DELETE', `/v1/documents/${id}`, bob), 404, 'document_not_found');
      assert.deepEqual((await call(server, 'GET', '/v1/documents', bob)).json.data, []);
      assertError(await call(server, 'GET', '/v1/documents?user=alice', bob), 403, 'forbidden');
      const seen = await call(server, 'GET', '/v1/documents?user=alice', admin);
      assert.deepEqual(seen.json.data.map((document) => document.id), [id]);
      assert.equal((await call(server, 'GET', `/v1/documents/${id}?user=alice`, admin)).json.text, 'alice only');
      assert.deepEqual((await call(server, 'GET', '/v1/documents', admin)).json.data, []);
    } finally {
      await call(server, 'DELETE', `/v1/documents/${id}`, alice);
    }
  });

  test('every bad input has its status and error', async () => {
    const upload = (body, key = alice) => call(server, 'POST', '/v1/documents', key, body);
    assertError(await upload(form([['file', '%PDF-1.7 binary', 'paper.pdf', 'application/pdf']])), 415,
      'unsupported_media_type', /application\/pdf.*text\/plain, text\/markdown, text\/csv, text\/html, application\/json/);
    assertError(await upload(form([['file', '%PDF-1.7', 'paper.pdf']])), 415, 'unsupported_media_type', /paper\.pdf/);
    assertError(await upload(form([['file', Buffer.from([0x50, 0x4e, 0x47, 0x00, 0x01]), 'image.txt', 'text/plain']])), 415,
      'unsupported_media_type', /binary/);
    assertError(await upload(form([['file', Buffer.from([0x63, 0x61, 0x66, 0xe9]), 'latin1.txt', 'text/plain']])), 400,
      'invalid_encoding', /byte 3/);
    assertError(await upload(form([['file', 'x'.repeat(2001), 'big.txt', 'text/plain']])), 413, 'document_too_large', /2001 bytes.*2000/);
    assertError(await upload(form([['file', '  \n', 'blank.txt', 'text/plain']])), 400, 'empty_document');
    assertError(await upload(form([['name', 'only a name']])), 400, undefined, /no 'file' part/);
    assertError(await upload(form([['file', 'a', 'a.txt', 'text/plain'], ['file', 'b', 'b.txt', 'text/plain']])), 400,
      undefined, /more than one 'file'/);
    assertError(await upload(form([['file', 'a', 'a.txt', 'text/plain'], ['colour', 'red']])), 400, undefined, /'colour'/);
    assertError(await upload({ name: 'x.txt' }), 400, undefined, /'text' is required/);
    assertError(await upload({ name: 'x.txt', text: 5 }), 400, undefined, /'text' must be a string/);
    assertError(await upload({ text: 'no name' }), 400, 'missing_name');
    assertError(await upload({ name: 'x.txt', text: 'a', colour: 'red' }), 400, undefined, /colour/);
    assertError(await upload('{not json'), 400);
    const plain = await fetch(`${server.url}/v1/documents`, { method: 'POST', headers: { ...as(alice), 'Content-Type': 'text/plain' }, body: 'raw' });
    assert.equal(plain.status, 415);
    assert.match((await plain.json()).error.message, /multipart\/form-data/);
    // Authentication comes first.
    assertError(await upload(form([['file', 'a', 'a.txt', 'text/plain']]), 'sk-wrong'), 401);
    assert.equal((await call(server, 'GET', '/v1/documents')).status, 401);
    assert.deepEqual((await call(server, 'GET', '/v1/documents', alice)).json.data, [], 'nothing was kept');
  });

  test('the per-owner limits: documents and bytes', async () => {
    const ids = [];
    try {
      for (const name of ['one.txt', 'two.txt']) {
        const uploaded = await call(server, 'POST', '/v1/documents', alice, { name, text: 'y'.repeat(1400) });
        assert.equal(uploaded.status, 200, uploaded.text);
        ids.push(uploaded.json.id);
      }
      assertError(await call(server, 'POST', '/v1/documents', alice, { name: 'three.txt', text: 'z'.repeat(300) }), 413,
        'documents_storage_full', /2800 bytes.*3000/);
      const small = await call(server, 'POST', '/v1/documents', alice, { name: 'three.txt', text: 'small' });
      assert.equal(small.status, 200, small.text);
      ids.push(small.json.id);
      assertError(await call(server, 'POST', '/v1/documents', alice, { name: 'four.txt', text: 'small' }), 413,
        'too_many_documents', /3 documents/);
      // Bob's limits are his own.
      const bobs = await call(server, 'POST', '/v1/documents', bob, { name: 'bob.txt', text: 'bob' });
      assert.equal(bobs.status, 200, bobs.text);
      await call(server, 'DELETE', `/v1/documents/${bobs.json.id}`, bob);
    } finally {
      for (const id of ids) await call(server, 'DELETE', `/v1/documents/${id}`, alice);
    }
  });

  test('a token naming no user owns no documents: 403 as for sessions', async () => {
    const token = { Authorization: `Bearer ${jwtHs256({ iss: 'https://login.example', aud: 'chatflow', tenant: 'acme', jti: 'x',
      exp: Math.floor(Date.now() / 1000) + 300 }, secret)}` };
    for (const [method, path] of [['GET', '/v1/documents'], ['GET', '/v1/documents/doc-1'], ['DELETE', '/v1/documents/doc-1']]) {
      const response = await fetch(server.url + path, { method, headers: token });
      assert.equal(response.status, 403, `${method} ${path}`);
      assert.equal((await response.json()).error.code, 'no_document_owner');
    }
    const upload = await fetch(`${server.url}/v1/documents`, { method: 'POST', headers: token, body: form([['file', 'a', 'a.txt']]) });
    assert.equal(upload.status, 403);
  });
});

describe('documents API without uploads', () => {
  test('every route is a 404 naming the missing configuration', async () => {
    const { file, keys } = pipeline('no-uploads', '');
    const key = addKey(keys, 'acme', { user: 'alice' });
    const server = await startServer(['--pipeline', file]);
    try {
      for (const [method, path, body] of [['GET', '/v1/documents'], ['POST', '/v1/documents', { name: 'a.txt', text: 'a' }],
        ['GET', '/v1/documents/doc-1'], ['DELETE', '/v1/documents/doc-1']]) {
        assertError(await call(server, method, path, key, body), 404, 'not_found', /uploads: \{\}.*retrieval_index/);
      }
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});

describe('documents with the default pipeline (graphs/chat.yaml)', () => {
  test('an upload is cited for its owner only; a question sharing no word with it gets no passage', async () => {
    const keys = scratchPath('default-keys.yaml');
    const alice = addKey(keys, 'acme', { user: 'alice' });
    const bob = addKey(keys, 'acme', { user: 'bob' });
    Object.assign(process.env, {
      CHATFLOW_MODEL: testModel, CHATFLOW_KEYS_FILE: keys, CHATFLOW_HISTORY_DB: scratchPath('default-history.db'),
      CHATFLOW_USAGE_DB: scratchPath('default-usage.db'), CHATFLOW_DOCUMENTS_INDEX: scratchPath('default-documents'),
    });
    const server = await startServer(['--pipeline', 'graphs/chat.yaml']);
    try {
      const model = (await (await fetch(`${server.url}/v1/models`, { headers: as(alice) })).json()).data[0].id;
      const ask = (key, content) => post(server.url, '/v1/chat/completions', {
        model, max_tokens: 2, temperature: 0, messages: [{ role: 'user', content }],
      }, as(key));
      const passage = 'The obsidian vault combination is 4417.';
      const uploaded = await call(server, 'POST', '/v1/documents', alice, form([['file', passage, 'vault.txt', 'text/plain']]));
      assert.equal(uploaded.status, 200, uploaded.text);
      const mine = await ask(alice, 'What is the obsidian vault combination?');
      assert.equal(mine.status, 200, mine.text);
      assert.deepEqual(mine.json.chatflow.citations,
        [{ index: 1, document: uploaded.json.id, title: 'vault.txt', chunk: 0, text: passage }]);
      const theirs = await ask(bob, 'What is the obsidian vault combination?');
      assert.equal(theirs.status, 200, theirs.text);
      assert.equal(theirs.json.chatflow, undefined, 'bob gets no passage of alice\'s');
      const unrelated = await ask(alice, 'Tell me about dragons');
      assert.equal(unrelated.status, 200, unrelated.text);
      assert.equal(unrelated.json.chatflow, undefined, 'no word in common: no passage');
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
