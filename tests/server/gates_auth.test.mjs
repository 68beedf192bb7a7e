// Authentication over HTTP: API keys from `chatflow keys add` (hashes only in the file), JWTs,
// model access by role, routes outside the pipeline, and revocation while serving.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  addKey, jwtHs256, modelStages, post, runChatflow, scratchPath, startServer, testModel, waitFor, writeTemp,
} from './harness.mjs';

const secret = 'a-shared-secret-of-at-least-thirty-two-bytes';
const keysFile = scratchPath('auth-keys.yaml');

function pipeline() {
  return writeTemp('auth.yaml', `version: 1
name: auth
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - name: auth
    type: auth
    config:
      keys_file: ${keysFile}
      jwt: {algorithm: HS256, secret: "${secret}", issuer: https://login.example, audience: chatflow}
      model_access: {admin: "*", basic: "some-other-model"}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

const ask = { model: 'test-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 };

function assertAuthError(response, code) {
  assert.equal(response.status, 401, response.text);
  assert.equal(response.json.error.type, 'authentication_error');
  assert.equal(response.json.error.code, code);
  assert.equal(response.headers.get('www-authenticate'), 'Bearer');
}

describe('authentication', () => {
  let server;
  let alice;
  let bob;
  before(async () => {
    alice = addKey(keysFile, 'acme', { user: 'alice', roles: ['admin'] });
    bob = addKey(keysFile, 'globex', { user: 'bob', roles: ['basic'] });
    server = await startServer(['--pipeline', pipeline()]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the keys file holds hashes, never a key', () => {
    const text = fs.readFileSync(keysFile, 'utf8');
    assert.ok(!text.includes(alice) && !text.includes(bob));
    assert.match(text, /sha256: [0-9a-f]{64}/);
    assert.match(alice, /^cf-[0-9a-f]{48}$/);
  });

  test('the right key, as a Bearer token or x-api-key, gets 200', async () => {
    const bearer = await post(server.url, '/v1/chat/completions', ask, { Authorization: `Bearer ${alice}` });
    assert.equal(bearer.status, 200, bearer.text);
    const header = await post(server.url, '/v1/chat/completions', ask, { 'x-api-key': alice });
    assert.equal(header.status, 200, header.text);
  });

  test('missing, wrong and malformed credentials get 401', async () => {
    assertAuthError(await post(server.url, '/v1/chat/completions', ask), 'missing_api_key');
    assertAuthError(await post(server.url, '/v1/chat/completions', ask,
      { Authorization: `Bearer ${alice.slice(0, -1)}${alice.endsWith('0') ? '1' : '0'}` }),
    'invalid_api_key');
    assertAuthError(await post(server.url, '/v1/chat/completions', ask,
      { Authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }), 'invalid_api_key');
  });

  test('JWTs: valid passes; expired, badly signed, wrong audience or alg none do not', async () => {
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: 'https://login.example', aud: 'chatflow', sub: 'carol', tenant: 'initech',
      roles: ['admin'], exp: now + 300 };
    const bearer = (token) => ({ Authorization: `Bearer ${token}` });
    const good = await post(server.url, '/v1/chat/completions', ask, bearer(jwtHs256(claims, secret)));
    assert.equal(good.status, 200, good.text);
    const cases = [
      [jwtHs256({ ...claims, exp: now - 120 }, secret), /expired/],
      [jwtHs256(claims, 'not-the-secret-not-the-secret-not-the'), /signature/],
      [jwtHs256({ ...claims, aud: 'someone-else' }, secret), /audience/],
      [jwtHs256({ ...claims, iss: 'https://evil.example' }, secret), /issuer/],
      [`${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`, /HS256/],
    ];
    for (const [token, why] of cases) {
      const response = await post(server.url, '/v1/chat/completions', ask, bearer(token));
      assertAuthError(response, 'invalid_token');
      assert.match(response.json.error.message, why);
    }
  });

  test('a role without access to the model gets 403', async () => {
    const response = await post(server.url, '/v1/chat/completions', ask, { Authorization: `Bearer ${bob}` });
    assert.equal(response.status, 403, response.text);
    assert.equal(response.json.error.type, 'permission_error');
    assert.equal(response.json.error.code, 'model_not_allowed');
  });

  test('routes outside the pipeline: /health public, /metrics for admins, the rest need a key', async () => {
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    // /metrics names every tenant and its usage, which /v1/usage shows only to admins.
    assert.equal((await fetch(`${server.url}/metrics`)).status, 401);
    const notAdmin = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${bob}` } });
    assert.equal(notAdmin.status, 403);
    assert.equal((await notAdmin.json()).error.type, 'permission_error');
    const admin = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${alice}` } });
    assert.equal(admin.status, 200);
    assert.match(await admin.text(), /chatflow:http_requests_total/);
    const anonymous = await fetch(`${server.url}/v1/models`);
    assert.equal(anonymous.status, 401);
    const models = await fetch(`${server.url}/v1/models`, { headers: { Authorization: `Bearer ${bob}` } });
    assert.equal(models.status, 200);
    const tokenize = await post(server.url, '/tokenize', { prompt: 'hi' });
    assert.equal(tokenize.status, 401);
  });

  test('a key revoked while serving stops working within a few seconds', async () => {
    const carolKey = addKey(keysFile, 'acme', { user: 'dave', roles: ['admin'] });
    const headers = { Authorization: `Bearer ${carolKey}` };
    await waitFor(async () => (await post(server.url, '/v1/chat/completions', ask, headers)).status === 200,
      { what: 'the new key to be accepted', timeoutMs: 5000, intervalMs: 200 });
    const list = runChatflow(['keys', 'list', '--keys-file', keysFile]);
    const id = list.stdout.split('\n').find((line) => line.includes('dave')).split(/\s+/)[0];
    const revoke = runChatflow(['keys', 'revoke', id, '--keys-file', keysFile]);
    assert.equal(revoke.status, 0, revoke.stderr);
    assert.match(runChatflow(['keys', 'list', '--keys-file', keysFile]).stdout, new RegExp(`${id}.*revoked`));
    await waitFor(async () => (await post(server.url, '/v1/chat/completions', ask, headers)).status === 401,
      { what: 'the revoked key to be refused', timeoutMs: 5000, intervalMs: 200 });
    // The others still work.
    assert.equal((await post(server.url, '/v1/chat/completions', ask, { Authorization: `Bearer ${alice}` })).status, 200);
  });
});
