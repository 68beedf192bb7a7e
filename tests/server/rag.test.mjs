// Retrieval over HTTP: answers carry `chatflow.citations` (non-streamed, and on the first
// streamed chunk), and a caller without the document's label never gets it cited.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelStages, openStream, post, scratchPath, sseData, startServer, testModel, writeTemp,
} from './harness.mjs';

const as = (key) => ({ Authorization: `Bearer ${key}` });

describe('retrieval with citations', () => {
  let server;
  let staff;
  let hr;
  before(async () => {
    const keys = scratchPath('rag-keys.yaml');
    staff = addKey(keys, 'acme', { roles: ['staff'] });
    hr = addKey(keys, 'acme', { roles: ['hr'] });
    const documents = writeTemp('rag-docs.jsonl', [
      { id: 'handbook/leave', title: 'Annual leave', text: 'Every employee has 25 days of annual leave.' },
      { id: 'hr/allowance', title: 'HR-003 on-call allowance', text: 'Policy HR-003: the on-call allowance is 120 euros a week.', acl: ['hr'] },
      { id: 'ops/calendar', title: 'Release calendar', text: 'Releases ship on the first Monday of each month.' },
    ].map((line) => JSON.stringify(line)).join('\n'));
    const pipeline = writeTemp('rag.yaml', `version: 1
name: rag
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  knowledge: {type: retrieval_index, path: "${scratchPath('rag-index')}", source: ["${documents}"]}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: retrieve, type: hybrid_retrieval, config: {index: knowledge}}
  - {name: rerank, type: rerank, config: {index: knowledge, top_n: 2}}
  - {name: assemble, type: prompt_assembly}
  - {name: exact, type: exact_cache}
${modelStages}  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  const ask = (key, content, extra = {}) => post(server.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 4, messages: [{ role: 'user', content }], ...extra,
  }, as(key));

  test('the answer lists the documents it may cite', async () => {
    const response = await ask(staff, 'How many days of annual leave do employees have?');
    assert.equal(response.status, 200, response.text);
    const citations = response.json.chatflow.citations;
    assert.ok(citations.length >= 1 && citations.length <= 2);
    assert.deepEqual(citations[0], {
      index: 1, document: 'handbook/leave', title: 'Annual leave', chunk: 0, text: 'Every employee has 25 days of annual leave.',
    });
    assert.deepEqual(citations.map((citation) => citation.index), citations.map((_, i) => i + 1));
  });

  test('a restricted document is cited only for its readers', async () => {
    const denied = await ask(staff, 'What is the on-call allowance in policy HR-003?');
    assert.equal(denied.status, 200, denied.text);
    const deniedDocuments = (denied.json.chatflow?.citations ?? []).map((citation) => citation.document);
    assert.ok(!deniedDocuments.includes('hr/allowance'), `staff got ${deniedDocuments}`);

    const allowed = await ask(hr, 'What is the on-call allowance in policy HR-003?');
    assert.equal(allowed.json.chatflow.citations[0].document, 'hr/allowance');
  });

  test('a cached answer keeps its citations and never crosses readers', async () => {
    const question = 'What is the on-call allowance in policy HR-003?';
    const greedy = { temperature: 0 };
    const first = await ask(hr, question, greedy);
    assert.equal(first.headers.get('x-chatflow-cache'), 'miss');
    const again = await ask(hr, question, greedy);
    assert.equal(again.headers.get('x-chatflow-cache'), 'exact');
    assert.deepEqual(again.json.chatflow.citations, first.json.chatflow.citations);
    assert.equal(again.json.choices[0].message.content, first.json.choices[0].message.content);
    // The cache sits after prompt_assembly: staff's prompt holds other passages, so another key.
    const staffAsks = await ask(staff, question, greedy);
    assert.equal(staffAsks.headers.get('x-chatflow-cache'), 'miss');
    assert.ok(!(staffAsks.json.chatflow?.citations ?? []).some((citation) => citation.document === 'hr/allowance'));
  });

  test('a streamed answer carries the citations on its first chunk only', async () => {
    const stream = openStream(server.port, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 4, stream: true,
      messages: [{ role: 'user', content: 'When do releases ship?' }],
    }, as(staff));
    const response = await stream.ended;
    assert.equal(response.status, 200);
    const chunks = sseData(response.body).slice(0, -1).map((event) => JSON.parse(event));
    assert.equal(chunks[0].chatflow.citations[0].document, 'ops/calendar');
    assert.ok(chunks.slice(1).every((chunk) => chunk.chatflow === undefined));
  });
});
