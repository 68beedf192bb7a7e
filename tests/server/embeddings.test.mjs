// POST /v1/embeddings with the official openai client and POST /v1/rerank, both answered from the
// pipeline's embedder resources behind its auth stage. Expected values come from elsewhere: the
// cosine `chatflow similarity` prints for the same texts, and the Python model2vec package's
// vectors for the shared test model (../shared/models/embedding; those checks skip without it).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  addKey, metric, modelStages, post, runChatflow, scratchPath, sourceDir, startServer, testModel, writeTemp,
} from './harness.mjs';

const OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');

const sharedEmbedding = path.join(sourceDir, '..', 'shared', 'models', 'embedding');
const model2vecDir = path.join(sharedEmbedding, 'model2vec-test-vocab-quantized');
const haveModel2vec = existsSync(path.join(model2vecDir, 'model.safetensors'));
const keysFile = scratchPath('embeddings-keys.yaml');

function pipeline() {
  const model2vec = haveModel2vec ? `  m2v: {type: embedder, kind: model2vec, path: "${model2vecDir}"}\n` : '';
  return writeTemp('embeddings.yaml', `version: 1
name: embeddings
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  vectors: {type: embedder, kind: ngrams}
${model2vec}stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

// The cosine `chatflow similarity` prints for two texts (4 decimals).
function cliCosine(first, second, model = '') {
  const result = runChatflow(['similarity', first, second, ...(model ? ['--model', model] : [])]);
  assert.equal(result.status, 0, result.stderr);
  return Number(result.stdout.split(' ')[0]);
}

const norm = (vector) => Math.sqrt(vector.reduce((sum, value) => sum + value * value, 0));
const cosine = (a, b) => a.reduce((sum, value, i) => sum + value * b[i], 0) / (norm(a) * norm(b));

function floatsOfBase64(text) {
  const bytes = Buffer.from(text, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
}

// Asserts OpenAI's error shape with `status` and the param it names.
function assertOpenAIError(response, status, param) {
  assert.equal(response.status, status, response.text);
  const { error } = response.json;
  assert.equal(typeof error.message, 'string');
  assert.equal(error.type, status === 401 ? 'authentication_error' : 'invalid_request_error', response.text);
  if (param !== undefined) assert.equal(error.param, param, response.text);
  return error;
}

describe('POST /v1/embeddings and /v1/rerank behind auth', () => {
  let server;
  let key;
  let adminKey;
  let client;
  let bearer;
  before(async () => {
    key = addKey(keysFile, 'acme', { user: 'alice' });
    adminKey = addKey(keysFile, 'ops', { roles: ['admin'] });
    server = await startServer(['--pipeline', pipeline()]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    bearer = { Authorization: `Bearer ${key}` };
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('embeddings.create of one string: a unit vector of the embedder\'s size, its model and usage', async () => {
    // The client asks for base64 by default and decodes it itself.
    const response = await client.embeddings.create({ model: 'vectors', input: 'hello world' });
    assert.equal(response.object, 'list');
    assert.equal(response.model, 'vectors');
    assert.equal(response.data.length, 1);
    const [item] = response.data;
    assert.equal(item.object, 'embedding');
    assert.equal(item.index, 0);
    assert.equal(item.embedding.length, 256);
    assert.ok(Math.abs(norm(item.embedding) - 1) < 1e-5, `norm ${norm(item.embedding)}`);
    assert.deepEqual(response.usage, { prompt_tokens: 2, total_tokens: 2 });
  });

  test('a batch: one vector per input in order, equal inputs equal vectors, cosines as the CLI says', async () => {
    const input = ['hello world', 'hello there', 'hello world', 'the weather in Paris is rainy'];
    const response = await client.embeddings.create({ model: 'vectors', input, encoding_format: 'float' });
    assert.deepEqual(response.data.map((item) => item.index), [0, 1, 2, 3]);
    for (const item of response.data) assert.equal(item.embedding.length, 256);
    assert.deepEqual(response.data[0].embedding, response.data[2].embedding);
    assert.notDeepEqual(response.data[0].embedding, response.data[1].embedding);
    for (const [a, b] of [[0, 1], [0, 3], [1, 3]]) {
      const expected = cliCosine(input[a], input[b]);
      const actual = cosine(response.data[a].embedding, response.data[b].embedding);
      assert.ok(Math.abs(actual - expected) < 6e-5, `${input[a]} / ${input[b]}: ${actual} vs CLI ${expected}`);
    }
    assert.equal(response.usage.prompt_tokens, 2 + 2 + 2 + 6);
    assert.equal(response.usage.total_tokens, response.usage.prompt_tokens);
  });

  test('base64 decodes (little-endian float32) to the float answer exactly', async () => {
    const input = ['hello world', 'a second text'];
    const floats = await client.embeddings.create({ model: 'vectors', input, encoding_format: 'float' });
    const encoded = await client.embeddings.create({ model: 'vectors', input, encoding_format: 'base64' });
    for (let i = 0; i < input.length; ++i) {
      assert.equal(typeof encoded.data[i].embedding, 'string');
      assert.deepEqual(floatsOfBase64(encoded.data[i].embedding), floats.data[i].embedding);
    }
  });

  test('dimensions equal to the embedder\'s size is accepted; another is refused', async () => {
    const same = await client.embeddings.create({ model: 'vectors', input: 'hi', dimensions: 256, encoding_format: 'float' });
    assert.equal(same.data[0].embedding.length, 256);
    const shorter = await post(server.url, '/v1/embeddings', { model: 'vectors', input: 'hi', dimensions: 64 }, bearer);
    const error = assertOpenAIError(shorter, 400, 'dimensions');
    assert.match(error.message, /256/);
  });

  test('model2vec: the vector the Python model2vec package computes, and the CLI\'s cosine', { skip: !haveModel2vec && 'no ../shared model2vec test model' }, async () => {
    const reference = JSON.parse(readFileSync(path.join(sharedEmbedding, 'expected', 'embeddings_vocab_quantized.json'), 'utf8'))[0];
    const hellos = Array(1000).fill('hello').join(' ');
    const response = await client.embeddings.create({ model: 'm2v', input: [hellos, 'hello world', 'a cat on a mat'], encoding_format: 'float' });
    assert.equal(response.model, 'm2v');
    const vector = response.data[0].embedding;
    assert.equal(vector.length, reference.length);
    for (let i = 0; i < reference.length; ++i) assert.ok(Math.abs(vector[i] - reference[i]) < 1e-5, `dimension ${i}`);
    const expected = cliCosine('hello world', 'a cat on a mat', model2vecDir);
    const actual = cosine(response.data[1].embedding, response.data[2].embedding);
    assert.ok(Math.abs(actual - expected) < 6e-5, `${actual} vs CLI ${expected}`);
    // Its tokens: 'hello' and 'world' are words of its WordPiece vocabulary; the 1000 hellos are
    // pooled from their first 512 tokens, as model2vec does.
    const words = await client.embeddings.create({ model: 'm2v', input: 'hello world' });
    assert.equal(words.usage.prompt_tokens, 2);
    assert.equal(response.usage.prompt_tokens, 512 + 2 + 5);
  });

  test('a bad key is 401 before anything else, whatever the body', async () => {
    const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'cf-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.embeddings.create({ model: 'vectors', input: 'hi' }), OpenAI.AuthenticationError);
    for (const pathname of ['/v1/embeddings', '/v1/rerank']) {
      const bad = await post(server.url, pathname, { model: 'nope', input: [[1, 2]] }, { Authorization: 'Bearer cf-not-a-key' });
      assertOpenAIError(bad, 401);
      const none = await post(server.url, pathname, { model: 'vectors', input: 'hi', query: 'q', documents: ['d'] });
      assertOpenAIError(none, 401);
    }
  });

  test('an unknown model is 404 model_not_found, listing the embedders there are', async () => {
    await assert.rejects(client.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' }), (error) => {
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal(error.code, 'model_not_found');
      assert.match(error.message, /'vectors'/);
      return true;
    });
    const rerank = await post(server.url, '/v1/rerank', { model: 'text-embedding-3-small', query: 'q', documents: ['d'] }, bearer);
    assert.equal(assertOpenAIError(rerank, 404, 'model').code, 'model_not_found');
  });

  test('bad input is 400 in OpenAI\'s shape, naming what is wrong', async () => {
    await assert.rejects(client.embeddings.create({ model: 'vectors', input: [[1, 2, 3]] }), OpenAI.BadRequestError);
    const cases = [
      [{ model: 'vectors', input: [[1, 2, 3]] }, 'input[0]', /token ids/],
      [{ model: 'vectors', input: [1, 2, 3] }, 'input', /token ids/],
      [{ model: 'vectors', input: [] }, 'input', /empty/],
      [{ model: 'vectors', input: '' }, 'input', /empty/],
      [{ model: 'vectors', input: Array(2049).fill('x') }, 'input', /2048/],
      [{ model: 'vectors', input: ['ok', 'x'.repeat(40000)] }, 'input[1]', /32768/],
      [{ model: 'vectors' }, 'input', /required/],
      [{ input: 'hi' }, 'model', /required/],
      [{ model: 'vectors', input: 'hi', encoding_format: 'int8' }, 'encoding_format', /float.*base64/],
      [{ model: 'vectors', input: 'hi', truncate: true }, 'truncate', /truncate/],
    ];
    for (const [body, param, message] of cases) {
      const response = await post(server.url, '/v1/embeddings', body, bearer);
      const error = assertOpenAIError(response, 400, param);
      assert.match(error.message, message, JSON.stringify(body).slice(0, 80));
    }
  });

  const documents = [
    'the stock market fell sharply today',
    { text: 'cats purr when they are content and calm' },
    'a simple recipe for sourdough bread',
    'why do cats purr',
  ];
  const documentText = (i) => (typeof documents[i] === 'string' ? documents[i] : documents[i].text);

  test('rerank: the documents most alike the query first, indices mapping back, scores as the CLI says', async () => {
    const query = 'why do cats purr when content';
    const response = await post(server.url, '/v1/rerank', { model: 'vectors', query, documents }, bearer);
    assert.equal(response.status, 200, response.text);
    const { results, model, usage } = response.json;
    assert.equal(model, 'vectors');
    assert.equal(results.length, documents.length);
    assert.deepEqual(new Set(results.map((result) => result.index)), new Set([0, 1, 2, 3]));
    for (const result of results) {
      assert.equal(result.document.text, documentText(result.index));
      const expected = cliCosine(query, documentText(result.index));
      assert.ok(Math.abs(result.relevance_score - expected) < 6e-5, `${result.index}: ${result.relevance_score} vs CLI ${expected}`);
    }
    for (let i = 1; i < results.length; ++i) assert.ok(results[i - 1].relevance_score >= results[i].relevance_score);
    // The two documents about cats, then the others.
    assert.deepEqual(new Set(results.slice(0, 2).map((result) => result.index)), new Set([1, 3]));
    assert.equal(usage.prompt_tokens, 6 + 6 + 8 + 6 + 4);
  });

  test('rerank: top_n keeps the best n, return_documents false leaves the texts out', async () => {
    const all = (await post(server.url, '/v1/rerank', { model: 'vectors', query: 'sourdough bread recipe', documents }, bearer)).json.results;
    assert.equal(all[0].index, 2);
    const response = await post(server.url, '/v1/rerank', {
      model: 'vectors', query: 'sourdough bread recipe', documents, top_n: 2, return_documents: false,
    }, bearer);
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.json.results, all.slice(0, 2).map(({ index, relevance_score }) => ({ index, relevance_score })));
  });

  test('rerank: bad input is 400 naming the member', async () => {
    const cases = [
      [{ model: 'vectors', documents: ['d'] }, 'query'],
      [{ model: 'vectors', query: 'q', documents: [] }, 'documents'],
      [{ model: 'vectors', query: 'q', documents: 'd' }, 'documents'],
      [{ model: 'vectors', query: 'q', documents: [{ title: 'd' }] }, 'documents[0].text'],
      [{ model: 'vectors', query: 'q', documents: ['d'], top_n: 0 }, 'top_n'],
    ];
    for (const [body, param] of cases) assertOpenAIError(await post(server.url, '/v1/rerank', body, bearer), 400, param);
  });

  test('the routes are counted in /metrics as the others are', async () => {
    const response = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${adminKey}` } });
    const samples = {};
    for (const line of (await response.text()).split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const space = line.lastIndexOf(' ');
      samples[line.slice(0, space)] = Number(line.slice(space + 1));
    }
    assert.ok(metric(samples, 'chatflow:http_requests_total', '"/v1/embeddings"', '"200"') >= 5);
    assert.ok(metric(samples, 'chatflow:http_requests_total', '"/v1/rerank"', '"400"') >= 5);
  });
});

describe('a pipeline without an embedder', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', writeTemp('no-embedder.yaml', `version: 1
name: plain
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
${modelStages}  - {name: emit, type: sse_emit}
`)]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('embeddings answer 404 saying how to add one; rerank is the model\'s', async () => {
    const error = assertOpenAIError(await post(server.url, '/v1/embeddings', { model: 'test-model', input: 'hi' }), 404, 'model');
    assert.match(error.message, /no embedder.*type embedder/);
    // The model judges relevance (tests/server/rerank_llm.test.mjs checks its scores).
    const ranked = await post(server.url, '/v1/rerank', { model: 'test-model', query: 'q', documents: ['d'] });
    assert.equal(ranked.status, 200, ranked.text);
    assert.equal(ranked.json.model, 'test-model');
    assert.ok(ranked.json.results[0].relevance_score < 0, ranked.text);
  });
});
