// POST /v1/embeddings from GGUF embedding models run by the engine (the embedding_model resource),
// with the official openai client against a real `chatflow serve` behind its auth stage: a bert
// file and a llama decoder with mean pooling, both written by make-model. Vectors are checked
// against each other and the API's rules here; tests/parity/llama_cpp_embeddings.test.mjs checks
// them against llama.cpp.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import { addKey, post, runChatflow, scratchPath, startServer, writeTemp } from './harness.mjs';

const OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');
const keysFile = scratchPath('embedding-models-keys.yaml');

function makeModel(name, args) {
  const file = scratchPath(`${name}.gguf`);
  const result = runChatflow(['make-model', ...args, '--dim', '64', '--heads', '4', '--layers', '2',
    '--ffn', '128', '--context', '32', '-o', file]);
  assert.equal(result.status, 0, result.stderr);
  return file;
}

const norm = (vector) => Math.sqrt(vector.reduce((sum, value) => sum + value * value, 0));
const dot = (a, b) => a.reduce((sum, value, i) => sum + value * b[i], 0);

function floatsOfBase64(text) {
  const bytes = Buffer.from(text, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
}

function assertOpenAIError(response, status, param, code) {
  assert.equal(response.status, status, response.text);
  const { error } = response.json;
  assert.equal(typeof error.message, 'string');
  assert.equal(error.type, status === 401 ? 'authentication_error' : 'invalid_request_error', response.text);
  if (param !== undefined) assert.equal(error.param, param, response.text);
  if (code !== undefined) assert.equal(error.code, code, response.text);
  return error;
}

describe('POST /v1/embeddings from GGUF embedding models', () => {
  let server;
  let client;
  let bearer;
  before(async () => {
    const bert = makeModel('embedding-bert', ['--arch', 'bert']);
    const decoder = makeModel('embedding-llama-mean', ['--arch', 'llama', '--kv-heads', '2', '--pooling', 'mean']);
    const key = addKey(keysFile, 'acme', { user: 'alice' });
    const pipeline = writeTemp('embedding-models.yaml', `version: 1
name: embedding-models
resources:
  bert: {type: embedding_model, path: "${bert}", matryoshka_min_dimensions: 16}
  decoder: {type: embedding_model, path: "${decoder}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: echo, type: echo}
`);
    server = await startServer(['--pipeline', pipeline]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
    bearer = { Authorization: `Bearer ${key}` };
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a batch from bert and from a mean-pooled decoder: unit vectors in order, usage in tokens', async () => {
    const input = ['hello world', 'the weather in paris', 'hello world', 'a cat and a dog'];
    for (const model of ['bert', 'decoder']) {
      const response = await client.embeddings.create({ model, input, encoding_format: 'float' });
      assert.equal(response.model, model);
      assert.deepEqual(response.data.map((item) => item.index), [0, 1, 2, 3]);
      for (const item of response.data) {
        assert.equal(item.embedding.length, 64);
        assert.ok(Math.abs(norm(item.embedding) - 1) < 1e-5, `${model}: norm ${norm(item.embedding)}`);
      }
      assert.deepEqual(response.data[0].embedding, response.data[2].embedding);
      assert.ok(dot(response.data[0].embedding, response.data[1].embedding) < 0.9999);
      // bert: [CLS] and [SEP] around the pieces, as llama-tokenize counts them ('in' is ▁i n).
      if (model === 'bert') assert.equal(response.usage.prompt_tokens, 4 + 7 + 4 + 7);
      assert.equal(response.usage.total_tokens, response.usage.prompt_tokens);
    }
  });

  test('one input alone gets the vector it gets in a batch', async () => {
    const alone = await client.embeddings.create({ model: 'bert', input: 'the weather in paris', encoding_format: 'float' });
    const batch = await client.embeddings.create({ model: 'bert', input: ['hello world', 'the weather in paris'], encoding_format: 'float' });
    assert.deepEqual(alone.data[0].embedding, batch.data[1].embedding);
  });

  test('base64 (the client\'s default, decoded by it) is the float answer exactly', async () => {
    const input = ['hello world', 'a cat and a dog'];
    const floats = await client.embeddings.create({ model: 'bert', input, encoding_format: 'float' });
    const decoded = await client.embeddings.create({ model: 'bert', input });
    const raw = await post(server.url, '/v1/embeddings', { model: 'bert', input, encoding_format: 'base64' }, bearer);
    assert.equal(raw.status, 200, raw.text);
    for (let i = 0; i < input.length; ++i) {
      assert.deepEqual(Array.from(decoded.data[i].embedding), floats.data[i].embedding);
      assert.deepEqual(floatsOfBase64(raw.json.data[i].embedding), floats.data[i].embedding);
    }
  });

  test('token ids as input (one array, or an array of arrays) embed like their text', async () => {
    const text = await client.embeddings.create({ model: 'bert', input: 'hello world', encoding_format: 'float' });
    // [CLS] ▁hello ▁world [SEP] in make-model's bert vocabulary, as llama-tokenize gives them.
    const ids = [2, 143, 144, 3];
    const one = await client.embeddings.create({ model: 'bert', input: ids, encoding_format: 'float' });
    const many = await client.embeddings.create({ model: 'bert', input: [ids, ids.slice(0, 2)], encoding_format: 'float' });
    assert.deepEqual(one.data[0].embedding, text.data[0].embedding);
    assert.deepEqual(many.data[0].embedding, text.data[0].embedding);
    assert.equal(many.data.length, 2);
    assert.equal(many.usage.prompt_tokens, 6);
  });

  test('dimensions: a Matryoshka model\'s vector cut and renormalised; others refused by name', async () => {
    const full = await client.embeddings.create({ model: 'bert', input: 'hello world', encoding_format: 'float' });
    const short = await client.embeddings.create({ model: 'bert', input: 'hello world', dimensions: 16, encoding_format: 'float' });
    const vector = short.data[0].embedding;
    assert.equal(vector.length, 16);
    const head = full.data[0].embedding.slice(0, 16);
    const headNorm = norm(head);
    for (let i = 0; i < 16; ++i) assert.ok(Math.abs(vector[i] - head[i] / headNorm) < 1e-6, `dimension ${i}`);
    const same = await client.embeddings.create({ model: 'decoder', input: 'hi', dimensions: 64, encoding_format: 'float' });
    assert.equal(same.data[0].embedding.length, 64);
    let error = assertOpenAIError(await post(server.url, '/v1/embeddings', { model: 'decoder', input: 'hi', dimensions: 32 }, bearer),
      400, 'dimensions', 'unsupported_dimensions');
    assert.match(error.message, /cannot shorten/);
    error = assertOpenAIError(await post(server.url, '/v1/embeddings', { model: 'bert', input: 'hi', dimensions: 8 }, bearer),
      400, 'dimensions', 'unsupported_dimensions');
    assert.match(error.message, /between 16 and 64/);
  });

  test('bad input is 400 in OpenAI\'s shape naming the input; the SDK raises BadRequestError', async () => {
    const long = Array(40).fill('cat').join(' ');
    await assert.rejects(client.embeddings.create({ model: 'bert', input: ['ok', long] }), OpenAI.BadRequestError);
    const cases = [
      [{ model: 'bert', input: ['ok', long] }, 'input[1]', 'context_length_exceeded', /42 tokens.*context is 32/],
      [{ model: 'bert', input: Array(33).fill(5) }, 'input', 'context_length_exceeded', /33 tokens/],
      [{ model: 'bert', input: [[2, 100000, 3]] }, 'input[0]', 'invalid_token_id', /100000/],
      [{ model: 'bert', input: [[2, -1]] }, 'input[0]', undefined, /token id/],
      [{ model: 'bert', input: [[]] }, 'input[0]', undefined, /empty/],
      [{ model: 'bert', input: [[2, 'x']] }, 'input[0]', undefined, /token id/],
    ];
    for (const [body, param, code, message] of cases) {
      const response = await post(server.url, '/v1/embeddings', body, bearer);
      const error = assertOpenAIError(response, 400, param, code);
      assert.match(error.message, message, JSON.stringify(body).slice(0, 80));
    }
  });

  test('rerank from a model: scores are the cosines of its /v1/embeddings vectors, best first', async () => {
    const query = 'the weather in paris';
    const documents = ['a cat and a dog', 'weather in paris', 'hello world'];
    const vectors = await client.embeddings.create({ model: 'bert', input: [query, ...documents], encoding_format: 'float' });
    const expected = documents.map((_, i) => dot(vectors.data[0].embedding, vectors.data[i + 1].embedding));
    const response = await post(server.url, '/v1/rerank', { model: 'bert', query, documents }, bearer);
    assert.equal(response.status, 200, response.text);
    const { results } = response.json;
    assert.equal(results.length, 3);
    for (const result of results) assert.ok(Math.abs(result.relevance_score - expected[result.index]) < 1e-5, response.text);
    for (let i = 1; i < results.length; ++i) assert.ok(results[i - 1].relevance_score >= results[i].relevance_score);
  });

  test('rerank refuses a query or document longer than the model\'s context, naming it (never scores a cut text)', async () => {
    const long = Array(40).fill('cat').join(' ');
    let error = assertOpenAIError(await post(server.url, '/v1/rerank', { model: 'bert', query: 'cat', documents: ['dog', long] }, bearer),
      400, 'documents[1]', 'context_length_exceeded');
    assert.match(error.message, /42 tokens.*context is 32/);
    error = assertOpenAIError(await post(server.url, '/v1/rerank', { model: 'bert', query: long, documents: ['dog'] }, bearer),
      400, 'query', 'context_length_exceeded');
  });

  test('a bad key is 401 before the body is looked at', async () => {
    const stranger = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'cf-not-a-key', maxRetries: 0 });
    await assert.rejects(stranger.embeddings.create({ model: 'bert', input: 'hi' }), OpenAI.AuthenticationError);
    const bad = await post(server.url, '/v1/embeddings', { model: 'bert', input: [[2, 100000]] }, { Authorization: 'Bearer cf-not-a-key' });
    assertOpenAIError(bad, 401);
  });
});

// Input moderation reads an input sent as token ids as the text they stand for: ids are no way
// around a block list.
describe('POST /v1/embeddings token ids behind input moderation', () => {
  let server;
  let bearer;
  before(async () => {
    const bert = makeModel('embedding-bert-screened', ['--arch', 'bert']);
    const key = addKey(keysFile, 'acme', { user: 'alice' });
    const blocklist = writeTemp('embedding-models-blocklist.txt', 'hello world\n');
    const pipeline = writeTemp('embedding-models-screened.yaml', `version: 1
name: embedding-models-screened
resources:
  bert: {type: embedding_model, path: "${bert}"}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keysFile}}}
  - {name: screen, type: input_moderation, config: {lists: {${blocklist}: block}}}
  - {name: echo, type: echo}
`);
    server = await startServer(['--pipeline', pipeline]);
    bearer = { Authorization: `Bearer ${key}` };
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the ids of a blocked phrase get the 400 content_filter its text gets', async () => {
    // [CLS] ▁hello ▁world [SEP] in make-model's bert vocabulary.
    const ids = [2, 143, 144, 3];
    const text = assertOpenAIError(await post(server.url, '/v1/embeddings', { model: 'bert', input: 'hello world' }, bearer),
      400, 'input', 'content_filter');
    for (const input of [ids, [ids], ['a cat', ids]]) {
      const error = assertOpenAIError(await post(server.url, '/v1/embeddings', { model: 'bert', input }, bearer),
        400, 'input', 'content_filter');
      assert.equal(error.message, text.message);
    }
    // Ids of a text the list does not block are embedded.
    const fine = await post(server.url, '/v1/embeddings', { model: 'bert', input: [2, 143, 3] }, bearer);
    assert.equal(fine.status, 200, fine.text);
    assert.equal(fine.json.data[0].embedding.length, 64);
  });
});
