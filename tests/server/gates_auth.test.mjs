// Authentication over HTTP: API keys from `chatflow keys add` (hashes only in the file), JWTs,
// model access by role, routes outside the pipeline, revocation while serving, an emptied keys
// file, and JWTs checked against an identity provider's key set (JWKS) served by this test over
// http and https, rotated, and from a file.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  addKey, jwtHs256, modelStages, openStream, post, runChatflow, scratchPath, startServer, testModel, waitFor, writeTemp,
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

  test('an emptied keys file is refused and the keys read before keep working', async () => {
    const saved = fs.readFileSync(keysFile);
    fs.writeFileSync(keysFile, '');
    try {
      // The file is looked at again (once a second at most) when a key is checked.
      await waitFor(async () => {
        const still = await post(server.url, '/v1/chat/completions', ask, { Authorization: `Bearer ${alice}` });
        assert.equal(still.status, 200, `the emptied keys file locked alice out: ${still.text}`);
        return /keeping the previous \d+ keys; .* now holds no keys at all/.test(server.stderr());
      }, { what: 'the emptied keys file to be refused in the log', timeoutMs: 5000, intervalMs: 200 });
    } finally {
      fs.writeFileSync(keysFile, saved);
    }
  });
});

// An identity provider's signing keys, as JWKs, and the tokens they sign.
function signingKey(alg, kid) {
  const { privateKey, publicKey } = alg === 'RS256'
    ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
    : crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    kid,
    alg,
    publicKey,
    jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' },
    sign(claims, header = { alg, kid }) {
      const encode = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
      const signed = `${encode(header)}.${encode(claims)}`;
      const signature = crypto.sign('sha256', Buffer.from(signed),
        alg === 'ES256' ? { key: privateKey, dsaEncoding: 'ieee-p1363' } : privateKey);
      return `${signed}.${signature.toString('base64url')}`;
    },
  };
}

const claimsNow = () => ({ iss: 'https://login.example', aud: 'chatflow', sub: 'erin', tenant: 'umbrella',
  exp: Math.floor(Date.now() / 1000) + 300 });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A provider's JWKS endpoint: serves `keys` (or fails), counting every fetch.
function keySetServer(tls) {
  const provider = { keys: [], failing: false, fetches: 0, delayMs: 0 };
  const handler = (request, response) => {
    provider.fetches += 1;
    const answer = () => {
      if (provider.failing) {
        response.writeHead(503).end('down for maintenance');
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: provider.keys }));
    };
    if (provider.delayMs > 0) setTimeout(answer, provider.delayMs);
    else answer();
  };
  provider.server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  provider.listening = new Promise((resolve) => provider.server.listen(0, '127.0.0.1', resolve));
  provider.url = () => `${tls ? 'https' : 'http'}://127.0.0.1:${provider.server.address().port}/.well-known/jwks.json`;
  return provider;
}

function jwksPipeline(name, jwt) {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
stages:
  - name: auth
    type: auth
    config:
      jwt: {${jwt}, issuer: https://login.example, audience: chatflow}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
}

describe('JWTs checked against a provider\'s key set (jwks_url)', () => {
  let server;
  let provider;
  const first = signingKey('RS256', 'a-rsa');
  const second = signingKey('ES256', 'a-ec');
  const rotated = signingKey('RS256', 'b-rsa');
  const chat = { model: 'jwks', messages: [{ role: 'user', content: 'hello' }] };
  const as = (token) => ({ Authorization: `Bearer ${token}` });
  before(async () => {
    provider = keySetServer();
    provider.keys = [first.jwk, second.jwk];
    await provider.listening;
    // Unknown kids may fetch the set again once every 4 s (long enough for a loaded machine to
    // send the flood below within it); no periodic refresh during the test.
    server = await startServer(['--pipeline',
      jwksPipeline('jwks', `jwks_url: "${provider.url()}", jwks_min_refresh_s: 4, jwks_refresh_s: 3600`)]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
    provider.server.close();
  });

  test('keys are chosen by kid: RS256 and ES256 tokens pass; no kid among two keys does not', async () => {
    assert.equal(provider.fetches, 1, 'fetched once, at start');
    for (const key of [first, second]) {
      const response = await post(server.url, '/v1/chat/completions', chat, as(key.sign(claimsNow())));
      assert.equal(response.status, 200, `${key.kid}: ${response.text}`);
      assert.equal(response.json.choices[0].message.content, 'hello');
    }
    const noKid = await post(server.url, '/v1/chat/completions', chat, as(first.sign(claimsNow(), { alg: 'RS256' })));
    assertAuthError(noKid, 'invalid_token');
    assert.match(noKid.json.error.message, /names no key \('kid'\), and the key set holds 2 keys/);
  });

  test('the key pins the algorithm: none, HS256 over the public key, RS256 against the EC key', async () => {
    const encode = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const claims = claimsNow();
    const none = `${encode({ alg: 'none', kid: first.kid })}.${encode(claims)}.`;
    const pem = first.publicKey.export({ type: 'spki', format: 'pem' });
    const hs256 = jwtHs256(claims, pem, { alg: 'HS256', kid: first.kid });
    const hs256ByJwk = jwtHs256(claims, JSON.stringify(first.jwk), { alg: 'HS256', kid: first.kid });
    const rsaAsEc = first.sign(claims, { alg: 'RS256', kid: second.kid });
    for (const [token, why] of [[none, /RS256/], [hs256, /RS256/], [hs256ByJwk, /RS256/], [rsaAsEc, /ES256/]]) {
      const response = await post(server.url, '/v1/chat/completions', chat, as(token));
      assertAuthError(response, 'invalid_token');
      assert.match(response.json.error.message, new RegExp(`must be signed with ${why.source}`));
    }
    assert.equal(provider.fetches, 1, 'known kids never fetch');
  });

  test('rotation: a token of the new set passes through one fetch; unknown kids past the limit are 401 unfetched', async () => {
    provider.keys = [rotated.jwk];
    await sleep(4100);
    const fresh = await post(server.url, '/v1/chat/completions', chat, as(rotated.sign(claimsNow())));
    assert.equal(fresh.status, 200, fresh.text);
    assert.equal(provider.fetches, 2);
    // A flood of made-up kids right after: no fetch until the interval has passed.
    const flood = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      post(server.url, '/v1/chat/completions', chat, as(rotated.sign(claimsNow(), { alg: 'RS256', kid: `made-up-${i}` })))));
    for (const response of flood) {
      assertAuthError(response, 'invalid_token');
      assert.match(response.json.error.message, /is not in the key set/);
    }
    // The old set's keys left with it.
    const old = await post(server.url, '/v1/chat/completions', chat, as(first.sign(claimsNow())));
    assertAuthError(old, 'invalid_token');
    assert.equal(provider.fetches, 2, 'unknown kids within the interval fetched the set');
    assert.match(server.stderr(), /key set .* now holds: b-rsa/);
  });

  test('a failed refresh keeps the set in use, and says so', async () => {
    provider.failing = true;
    await sleep(4100);
    const unknown = await post(server.url, '/v1/chat/completions', chat, as(rotated.sign(claimsNow(), { alg: 'RS256', kid: 'c-rsa' })));
    assertAuthError(unknown, 'invalid_token');
    assert.equal(provider.fetches, 3);
    const known = await post(server.url, '/v1/chat/completions', chat, as(rotated.sign(claimsNow())));
    assert.equal(known.status, 200, known.text);
    await waitFor(() => /keeping the key set in use \(b-rsa\); fetching .* failed: it answered HTTP 503/.test(server.stderr()),
      { what: 'the failed fetch in the log' });
    provider.failing = false;
  });
});

describe('a key set from a file (jwks_file)', () => {
  test('tokens by its keys pass; a key rotated into the file is read for its unknown kid', async () => {
    const before = signingKey('ES256', 'file-1');
    const after = signingKey('RS256', 'file-2');
    const file = writeTemp('jwks.json', JSON.stringify({ keys: [before.jwk] }));
    const server = await startServer(['--pipeline', jwksPipeline('jwks-file', `jwks_file: "${file}", jwks_min_refresh_s: 1`)]);
    try {
      const chat = { model: 'jwks-file', messages: [{ role: 'user', content: 'hello' }] };
      const ok = await post(server.url, '/v1/chat/completions', chat, { Authorization: `Bearer ${before.sign(claimsNow())}` });
      assert.equal(ok.status, 200, ok.text);
      const unknown = await post(server.url, '/v1/chat/completions', chat, { Authorization: `Bearer ${after.sign(claimsNow())}` });
      assertAuthError(unknown, 'invalid_token');
      fs.writeFileSync(file, JSON.stringify({ keys: [after.jwk] }));
      await sleep(1100);  // the unknown kid above read the file; the next read may come a second later
      const rotated = await post(server.url, '/v1/chat/completions', chat, { Authorization: `Bearer ${after.sign(claimsNow())}` });
      assert.equal(rotated.status, 200, rotated.text);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});

// A CA and a certificate it signed for 127.0.0.1, made by openssl.
function certificates() {
  const directory = scratchPath('jwks-tls');
  fs.mkdirSync(directory, { recursive: true });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const run = (args) => execFileSync('openssl', args, { cwd: directory, stdio: 'pipe' });
  run(['req', '-x509', ...key, '-days', '2', '-subj', '/CN=chatflow test CA', '-keyout', 'ca.key', '-out', 'ca.pem']);
  run(['req', ...key, '-subj', '/CN=127.0.0.1', '-keyout', 'server.key', '-out', 'server.csr']);
  fs.writeFileSync(path.join(directory, 'server.ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  run(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
    '-extfile', 'server.ext', '-out', 'server.pem']);
  return {
    ca: path.join(directory, 'ca.pem'),
    key: fs.readFileSync(path.join(directory, 'server.key')),
    cert: fs.readFileSync(path.join(directory, 'server.pem')),
  };
}

describe('a key set over https (jwks_url with jwks_ca_file)', () => {
  test('verified against the CA file; without it the start fails naming the URL', async () => {
    const made = certificates();
    const provider = keySetServer({ key: made.key, cert: made.cert });
    const key = signingKey('RS256', 'tls-1');
    provider.keys = [key.jwk];
    await provider.listening;
    try {
      const server = await startServer(['--pipeline',
        jwksPipeline('jwks-tls', `jwks_url: "${provider.url()}", jwks_ca_file: "${made.ca}"`)]);
      try {
        const chat = { model: 'jwks-tls', messages: [{ role: 'user', content: 'hello' }] };
        const ok = await post(server.url, '/v1/chat/completions', chat, { Authorization: `Bearer ${key.sign(claimsNow())}` });
        assert.equal(ok.status, 200, ok.text);
      } finally {
        assert.equal((await server.stop()).code, 0);
      }
      await assert.rejects(startServer(['--pipeline', jwksPipeline('jwks-untrusted', `jwks_url: "${provider.url()}"`)]),
        (error) => {
          assert.match(error.message, new RegExp(`key set at ${provider.url().replace(/[.]/g, '\\.')} cannot be used`));
          assert.match(error.message, /certificate/);
          return true;
        });
    } finally {
      provider.server.close();
    }
  });
});

// The server's only I/O thread (io_threads: 1) must never wait for an identity provider: while a
// slow provider is asked for a rotated key, everyone else is answered as usual, and the request
// with the new key is answered once the set has come.
describe('a slow key set fetch holds up nobody else', () => {
  let server;
  let provider;
  const known = signingKey('RS256', 'known-1');
  const rotated = signingKey('ES256', 'rotated-1');
  const as = (token) => ({ Authorization: `Bearer ${token}` });
  before(async () => {
    provider = keySetServer();
    provider.keys = [known.jwk];
    await provider.listening;
    server = await startServer(['--pipeline', writeTemp('jwks-slow.yaml', `version: 1
name: jwks-slow
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - name: auth
    type: auth
    config:
      jwt: {jwks_url: "${provider.url()}", jwks_min_refresh_s: 1, jwks_refresh_s: 3600, jwks_timeout_ms: 10000,
            issuer: https://login.example, audience: chatflow}
${modelStages}  - {name: emit, type: sse_emit}
`)]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
    provider.server.close();
  });

  test('health checks and streams are answered while an unknown kid waits 3 s for the provider', async () => {
    await sleep(1100);  // past jwks_min_refresh_s since the fetch at start
    provider.keys = [known.jwk, rotated.jwk];
    provider.delayMs = 3000;
    const started = Date.now();
    const waiting = post(server.url, '/v1/chat/completions',
      { model: 'test-model', max_tokens: 2, messages: [{ role: 'user', content: 'hello' }] }, as(rotated.sign(claimsNow())));
    await waitFor(() => provider.fetches === 2, { what: 'the unknown kid to ask the provider' });
    // Generous bounds: each of these takes milliseconds unless something waits for the provider.
    const timed = async (what, run) => {
      const begun = Date.now();
      const result = await run();
      assert.ok(Date.now() - begun < 1000, `${what} took ${Date.now() - begun} ms while the key set was fetched`);
      return result;
    };
    const health = await timed('GET /health', () => fetch(`${server.url}/health`));
    assert.equal(health.status, 200);
    const stream = openStream(server.port, '/v1/chat/completions', {
      model: 'test-model', max_tokens: 4000, ignore_eos: true, stream: true,
      messages: [{ role: 'user', content: 'Once upon a time' }],
    }, as(known.sign(claimsNow())));
    try {
      await timed('another client\'s stream', () => stream.waitEvents(3, 5000));
    } finally {
      stream.socket.destroy();
    }
    const other = await timed('another client\'s request', () => post(server.url, '/v1/chat/completions',
      { model: 'test-model', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }, as(known.sign(claimsNow()))));
    assert.equal(other.status, 200, other.text);
    assert.ok(Date.now() - started < 2500, 'the provider answered before the checks were through');
    // The request with the rotated key passes once the set has come.
    const answered = await waiting;
    assert.equal(answered.status, 200, answered.text);
    assert.ok(Date.now() - started >= 2900, 'answered before the provider was');
    assert.equal(provider.fetches, 2, 'one fetch for the rotated key');
  });
});

describe('JWT callers and their sessions', () => {
  const sessionsPipeline = (name, jwtExtra) => writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model, tokenizer_only: true}
  history: {type: history_store, backend: sqlite, path: "${scratchPath(`${name}.db`)}"}
stages:
  - name: auth
    type: auth
    config:
      jwt: {algorithm: HS256, secret: "${secret}", issuer: https://login.example, audience: chatflow${jwtExtra}}
  - {name: trim, type: history_trim, config: {store: history, model: llm}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
  const token = (claims) => ({ Authorization: `Bearer ${jwtHs256({ iss: 'https://login.example', aud: 'chatflow',
    tenant: 'initech', exp: Math.floor(Date.now() / 1000) + 300, ...claims }, secret)}` });
  const chat = (name, session) => ({ model: 'test-model', messages: [{ role: 'user', content: 'hello' }], session_id: session });

  test('a token without its user claim is 401; a numeric one is the user', async () => {
    const server = await startServer(['--pipeline', sessionsPipeline('jwt-users', '')]);
    try {
      for (const claims of [{ jti: 'a' }, { sub: '' }, { sub: { id: 'x' } }]) {
        const refused = await post(server.url, '/v1/chat/completions', chat('jwt-users', 's-1'), token(claims));
        assertAuthError(refused, 'invalid_token');
        assert.match(refused.json.error.message, /'sub' claim/);
        const listed = await fetch(`${server.url}/v1/sessions`, { headers: token(claims) });
        assert.equal(listed.status, 401, `GET /v1/sessions with ${JSON.stringify(claims)}`);
      }
      const numeric = await post(server.url, '/v1/chat/completions', chat('jwt-users', 'n-1'), token({ sub: 4242 }));
      assert.equal(numeric.status, 200, numeric.text);
      const mine = await fetch(`${server.url}/v1/sessions`, { headers: token({ sub: 4242 }) });
      assert.equal(mine.status, 200);
      assert.deepEqual((await mine.json()).data.map((session) => session.id), ['n-1']);
      // The same number written as a string is the same user.
      const same = await fetch(`${server.url}/v1/sessions`, { headers: token({ sub: '4242' }) });
      assert.deepEqual((await same.json()).data.map((session) => session.id), ['n-1']);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('with user_claim "" callers own no sessions: session routes and session_id are 403', async () => {
    const server = await startServer(['--pipeline', sessionsPipeline('jwt-no-users', ', user_claim: ""')]);
    try {
      const first = token({ jti: 'first' });
      const second = token({ jti: 'second' });
      const plain = await post(server.url, '/v1/chat/completions', chat('jwt-no-users'), first);
      assert.equal(plain.status, 200, plain.text);
      const withSession = await post(server.url, '/v1/chat/completions', chat('jwt-no-users', 'mine'), first);
      assert.equal(withSession.status, 403, withSession.text);
      assert.equal(withSession.json.error.code, 'no_session_owner');
      assert.match(withSession.json.error.message, /names no user/);
      for (const [method, path] of [['GET', '/v1/sessions'], ['GET', '/v1/sessions/mine'], ['GET', '/v1/sessions:export'],
        ['DELETE', '/v1/sessions'], ['DELETE', '/v1/sessions/mine']]) {
        const response = await fetch(server.url + path, { method, headers: second });
        assert.equal(response.status, 403, `${method} ${path}`);
        assert.equal((await response.json()).error.code, 'no_session_owner', `${method} ${path}`);
      }
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});

describe('a key set needs an audience', () => {
  test('jwks_file without jwt.audience stops the start naming the key; allow_any_audience needs the issuer', async () => {
    const key = signingKey('RS256', 'aud-1');
    const file = writeTemp('jwks-audience.json', JSON.stringify({ keys: [key.jwk] }));
    const pipelineWith = (name, jwt) => writeTemp(`${name}.yaml`, `version: 1
name: ${name}
stages:
  - name: auth
    type: auth
    config:
      jwt: {jwks_file: "${file}"${jwt}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
    // Why the server would not start; a server that starts is stopped and fails the test.
    const refusal = async (pipeline) => {
      let started;
      try {
        started = await startServer(['--pipeline', pipeline]);
      } catch (error) {
        return error.message;
      }
      await started.stop();
      assert.fail(`${pipeline} started`);
    };
    const noAudience = await refusal(pipelineWith('jwks-no-audience', ', issuer: https://login.example'));
    assert.match(noAudience, /jwks-no-audience\.yaml:\d+:\d+: error: .*jwt\.audience/);
    assert.match(noAudience, /any other application/);
    assert.match(await refusal(pipelineWith('jwks-any-no-issuer', ', allow_any_audience: true')),
      /jwt\.allow_any_audience needs jwt\.issuer/);
    const server = await startServer(['--pipeline',
      pipelineWith('jwks-any-audience', ', issuer: https://login.example, allow_any_audience: true')]);
    try {
      const chat = { model: 'jwks-any-audience', messages: [{ role: 'user', content: 'hello' }] };
      const claims = { ...claimsNow(), aud: 'some-app' };
      const ok = await post(server.url, '/v1/chat/completions', chat, { Authorization: `Bearer ${key.sign(claims)}` });
      assert.equal(ok.status, 200, ok.text);
      const otherIssuer = await post(server.url, '/v1/chat/completions', chat,
        { Authorization: `Bearer ${key.sign({ ...claims, iss: 'https://elsewhere.example' })}` });
      assertAuthError(otherIssuer, 'invalid_token');
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
