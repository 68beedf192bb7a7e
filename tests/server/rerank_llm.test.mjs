// POST /v1/rerank scored by a gguf_model, as the rerank stage's `kind: llm` scores passages: each
// document's score is the log-probability that the model answers "yes" to "is the passage
// relevant to the question?". The expected scores come from the model's own answer to that
// question through /v1/chat/completions (its top-20 next-token logprobs), and the tokens counted
// from that answer's prompt_tokens, not from the rerank code.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { addKey, modelStages, post, scratchPath, startServer, testModel, writeTemp } from './harness.mjs';

const keysFile = scratchPath('rerank-llm-keys.yaml');
const system = 'You judge whether a passage helps answer a question. Reply yes or no.';
const yesSpellings = ['yes', ' yes', 'Yes', ' Yes', 'YES'];
const query = 'how long is the annual leave';
const documents = [
  'Every employee has 25 days of annual leave.',
  'The cafeteria opens at eight.',
  'Leave requests go to your manager.',
  'Parking permits are renewed each spring.',
];

function assertOpenAIError(response, status, param, code) {
  assert.equal(response.status, status, response.text);
  const { error } = response.json;
  assert.equal(error.type, 'invalid_request_error', response.text);
  if (param !== undefined) assert.equal(error.param, param, response.text);
  if (code !== undefined) assert.equal(error.code, code, response.text);
  return error;
}

// What the model itself says of `document`: the expected score (log P(yes) over the spellings'
// first tokens; without any among the top 20, half the 20th's probability) and the prompt's
// token count.
async function modelsOwnAnswer(url, headers, model, yesTexts, document) {
  const response = await post(url, '/v1/chat/completions', {
    model,
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: `Question: ${query}\n\nPassage: ${document}\n\nIs the passage relevant to the question?` },
    ],
    max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: 20,
  }, headers);
  assert.equal(response.status, 200, response.text);
  const alternatives = response.json.choices[0].logprobs.content[0].top_logprobs;
  assert.equal(alternatives.length, 20);
  const yes = alternatives.filter((entry) => yesTexts.has(entry.token))
    .reduce((sum, entry) => sum + Math.exp(entry.logprob), 0);
  const floor = Math.exp(alternatives[alternatives.length - 1].logprob);
  return { score: Math.log(yes > 0 ? yes : Math.max(floor, 1e-30) * 0.5), tokens: response.json.usage.prompt_tokens };
}

// The text of each "yes" spelling's first token, as the model's tokenizer makes it.
async function yesTokenTexts(url, headers) {
  const texts = new Set();
  for (const word of yesSpellings) {
    const tokens = await post(url, '/tokenize', { prompt: word, add_special_tokens: false }, headers);
    assert.equal(tokens.status, 200, tokens.text);
    const text = await post(url, '/detokenize', { tokens: tokens.json.tokens.slice(0, 1) }, headers);
    assert.equal(text.status, 200, text.text);
    texts.add(text.json.prompt);
  }
  return texts;
}

describe('POST /v1/rerank by a gguf_model', () => {
  let server;
  let bearer;
  let expected;
  before(async () => {
    const key = addKey(keysFile, 'acme', { user: 'alice' });
    bearer = { Authorization: `Bearer ${key}` };
    server = await startServer(['--pipeline', writeTemp('rerank-llm.yaml', `version: 1
name: rerank-llm
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
${modelStages}  - {name: emit, type: sse_emit}
`)]);
    const yesTexts = await yesTokenTexts(server.url, bearer);
    expected = [];
    for (const document of documents) expected.push(await modelsOwnAnswer(server.url, bearer, 'test-model', yesTexts, document));
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('scores are the model\'s log P(yes) for each document, best first, by its id or resource name', async () => {
    for (const model of ['test-model', 'llm']) {
      const response = await post(server.url, '/v1/rerank', { model, query, documents }, bearer);
      assert.equal(response.status, 200, response.text);
      assert.equal(response.json.model, 'test-model');
      const { results } = response.json;
      assert.equal(results.length, documents.length);
      assert.deepEqual(results.map((result) => result.index).sort(), [0, 1, 2, 3]);
      for (const result of results) {
        assert.ok(Math.abs(result.relevance_score - expected[result.index].score) < 1e-3,
          `documents[${result.index}]: ${result.relevance_score} vs the model's own ${expected[result.index].score}`);
        assert.equal(result.document.text, documents[result.index]);
      }
      for (let i = 1; i < results.length; ++i) assert.ok(results[i - 1].relevance_score >= results[i].relevance_score);
      assert.equal(response.json.usage.prompt_tokens, expected.reduce((sum, answer) => sum + answer.tokens, 0));
    }
  });

  test('the same documents by the embedder are cosines, not the model\'s scores', async () => {
    const response = await post(server.url, '/v1/rerank', { model: 'vectors', query, documents }, bearer);
    assert.equal(response.status, 200, response.text);
    assert.equal(response.json.model, 'vectors');
    for (const result of response.json.results) {
      assert.ok(result.relevance_score >= -1 && result.relevance_score <= 1, String(result.relevance_score));
      assert.ok(Math.abs(result.relevance_score - expected[result.index].score) > 1e-3);
    }
  });

  test('top_n and return_documents', async () => {
    const response = await post(server.url, '/v1/rerank', { model: 'test-model', query, documents, top_n: 2, return_documents: false }, bearer);
    assert.equal(response.status, 200, response.text);
    const best = [...expected.keys()].sort((a, b) => expected[b].score - expected[a].score).slice(0, 2);
    assert.deepEqual(response.json.results.map((result) => result.index), best);
    for (const result of response.json.results) assert.equal(result.document, undefined);
  });

  test('a document or query longer than the context is a 400 naming it, never a score of its cut beginning', async () => {
    // 16,384 tokens of context; a byte-level vocabulary makes each letter at least one token.
    const long = 'abcdefghij'.repeat(2000);
    assertOpenAIError(await post(server.url, '/v1/rerank', { model: 'test-model', query, documents: ['short', long] }, bearer),
      400, 'documents[1]', 'context_length_exceeded');
    assertOpenAIError(await post(server.url, '/v1/rerank', { model: 'test-model', query: long, documents: ['short'] }, bearer),
      400, 'query', 'context_length_exceeded');
  });

  test('a prompt the model\'s KV pool cannot hold is a 400 naming the document, as one past the context is', async () => {
    // kv_cache.blocks 16: 256 positions, far below the 16,384 of the context.
    const small = await startServer(['--pipeline', writeTemp('rerank-llm-small-pool.yaml', `version: 1
name: rerank-llm-small-pool
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model, kv_cache: {blocks: 16}}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
${modelStages}  - {name: emit, type: sse_emit}
`)]);
    try {
      const error = assertOpenAIError(await post(small.url, '/v1/rerank',
        { model: 'test-model', query, documents: ['short', 'abcdefghij'.repeat(30)] }, bearer),
      400, 'documents[1]', 'context_length_exceeded');
      assert.match(error.message, /at most 255 tokens/);
      const fits = await post(small.url, '/v1/rerank', { model: 'test-model', query, documents: ['short'] }, bearer);
      assert.equal(fits.status, 200, fits.text);
    } finally {
      assert.equal((await small.stop()).code, 0);
    }
  });

  test('an unknown model is 404 listing the models that rerank here', async () => {
    const error = assertOpenAIError(await post(server.url, '/v1/rerank', { model: 'bge-reranker', query, documents }, bearer),
      404, 'model', 'model_not_found');
    assert.match(error.message, /'test-model'.*'vectors'/);
  });
});

// A serve file's `models:` entry ranks as its pipeline's rerank stage does: with the model its
// `kind: llm` names, although the entry also has an embedder.
describe('POST /v1/rerank to a models: entry with a rerank stage', () => {
  let server;
  let bearer;
  before(async () => {
    const key = addKey(keysFile, 'acme', { user: 'bob' });
    bearer = { Authorization: `Bearer ${key}` };
    const front = writeTemp('rerank-llm-front.yaml', `version: 1
name: front
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
${modelStages}  - {name: emit, type: sse_emit}
`);
    const handbook = writeTemp('rerank-llm-handbook.jsonl', JSON.stringify({ id: 'leave', title: 'Leave', text: documents[0] }));
    const rag = writeTemp('rerank-llm-rag.yaml', `version: 1
name: rag
resources:
  judge: {type: gguf_model, path: "${testModel}", name: judge}
  vectors: {type: embedder, kind: ngrams}
  knowledge: {type: retrieval_index, path: "${scratchPath('rerank-llm-index')}", source: ["${handbook}"]}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: retrieve, type: hybrid_retrieval, config: {index: knowledge}}
  - {name: rerank, type: rerank, config: {index: knowledge, kind: llm, model: judge, top_n: 2}}
  - {name: assemble, type: prompt_assembly}
  - {name: tokenize, type: tokenize, config: {model: judge}}
  - {name: prefill, type: prefill, config: {model: judge}}
  - {name: decode, type: decode, config: {model: judge}}
  - {name: detokenize, type: detokenize, config: {model: judge}}
  - {name: emit, type: sse_emit}
`);
    server = await startServer(['--config', writeTemp('rerank-llm-serve.yaml', `server: {port: 0}
pipeline: ${front}
models:
  - {name: handbook, aliases: [handbook-rag], pipeline: ${rag}}
`)]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the entry\'s names rank by its rerank stage\'s model: the same file\'s scores as test-model gives', async () => {
    const direct = await post(server.url, '/v1/rerank', { model: 'test-model', query, documents }, bearer);
    assert.equal(direct.status, 200, direct.text);
    const byIndex = new Map(direct.json.results.map((result) => [result.index, result.relevance_score]));
    for (const model of ['handbook', 'handbook-rag']) {
      const response = await post(server.url, '/v1/rerank', { model, query, documents }, bearer);
      assert.equal(response.status, 200, response.text);
      assert.equal(response.json.model, 'judge');
      for (const result of response.json.results) {
        assert.ok(Math.abs(result.relevance_score - byIndex.get(result.index)) < 1e-4,
          `${model} documents[${result.index}]: ${result.relevance_score} vs ${byIndex.get(result.index)}`);
      }
      assert.equal(response.json.usage.prompt_tokens, direct.json.usage.prompt_tokens);
    }
  });
});
