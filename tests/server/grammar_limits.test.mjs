// Structured outputs whose grammar would cost too much: the outside probe's schema (an anyOf of
// 50 unanchored ".{0,1000}" patterns, which once held every stream for seconds) answers at once,
// and a schema whose readings multiply as the text goes is a prompt 400 naming response_format
// (or the tool), before any token is generated.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { modelPipeline, startServer } from './harness.mjs';

const anyOfPatterns = (count, pattern) => ({
  anyOf: Array.from({ length: count }, (_, i) => ({ type: 'string', pattern: pattern(i) })),
});

async function complete(url, body) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'x' }], ...body }),
  });
  return { status: response.status, body: await response.json() };
}

describe('grammar limits', () => {
  let server;
  before(async () => {
    server = await startServer(['--pipeline', modelPipeline('grammar_limits')]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("the outside probe's schema is enforced, and answers", async () => {
    const schema = anyOfPatterns(50, () => '.{0,1000}');
    for (const seed of [1, 2]) {
      const { status, body } = await complete(server.url, {
        seed, max_tokens: 300,
        response_format: { type: 'json_schema', json_schema: { name: 'probe', schema } },
      });
      assert.equal(status, 200, JSON.stringify(body));
      const choice = body.choices[0];
      if (choice.finish_reason === 'stop') {
        // Unanchored, ".{0,1000}" finds its empty match in any string: any JSON string is valid.
        assert.equal(typeof JSON.parse(choice.message.content), 'string');
      } else {
        assert.equal(choice.finish_reason, 'length');
        assert.ok(choice.message.content.startsWith('"'), choice.message.content);
      }
    }
  });

  test('a schema whose readings multiply is a 400 naming response_format', async () => {
    // Distinct members, each unanchored: every 'x' opens fifty more ways to read the text.
    const schema = anyOfPatterns(50, (i) => `x.{0,${900 + i}}`);
    const { status, body } = await complete(server.url, {
      max_tokens: 50,
      response_format: { type: 'json_schema', json_schema: { name: 'heavy', schema } },
    });
    assert.equal(status, 400, JSON.stringify(body));
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.code, 'schema_too_complex');
    assert.equal(body.error.param, 'response_format.json_schema.schema');
    assert.match(body.error.message, /is too complex to enforce: the grammar keeps more than 4096 readings/);
  });

  test('tool parameters that would be as ambiguous are a 400 naming tools', async () => {
    const parameters = {
      type: 'object',
      properties: { text: anyOfPatterns(50, (i) => `x.{0,${900 + i}}`) },
      required: ['text'],
    };
    const { status, body } = await complete(server.url, {
      max_tokens: 50, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'f', parameters } }],
    });
    assert.equal(status, 400, JSON.stringify(body));
    assert.equal(body.error.code, 'schema_too_complex');
    assert.equal(body.error.param, 'tools');
  });
});
