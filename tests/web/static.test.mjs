// The web UI as chatflow serves it, over loopback: the pages with their CSP and no inline
// script or style, assets gzipped and cached for a year under hashed names, 304 on a matching
// ETag, no credentials needed even when the API wants a key, nothing outside the web root.
import assert from 'node:assert/strict';
import { gunzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';

import { addKey, parseResponse, rawExchange, scratchPath, startServer, writeTemp } from '../server/harness.mjs';
import { skipReason } from './browser.mjs';

const reason = skipReason({ browser: false });
if (reason) console.log(`# skipped: ${reason}`);

const get = (port, target, headers = '') => rawExchange(port, Buffer.from(
  `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers}Connection: close\r\n\r\n`)).then((bytes) => {
  const text = bytes.toString('latin1');
  const split = text.indexOf('\r\n\r\n');
  return { ...parseResponse(bytes), raw: bytes.subarray(Buffer.byteLength(text.slice(0, split + 4), 'latin1')) };
});

describe('the web UI files', { skip: reason || false }, () => {
  let server;
  before(async () => {
    const keys = scratchPath('static-keys.yaml');
    addKey(keys, 'tenant');
    const pipeline = writeTemp('static.yaml', `version: 1
name: static
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: echo, type: echo}
`);
    server = await startServer(['--pipeline', pipeline]);
  });
  after(async () => {
    assert.equal((await server.stop()).code, 0);
  });

  test('the pages: CSP and the other headers, no inline script or style, no credentials asked', async () => {
    for (const page of ['/', '/dashboard']) {
      const response = await get(server.port, page);
      assert.equal(response.status, 200, `${page}: ${response.body}`);
      assert.equal(response.headers['content-type'], 'text/html; charset=utf-8');
      const policy = response.headers['content-security-policy'];
      assert.equal(policy, "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'");
      assert.equal(response.headers['x-content-type-options'], 'nosniff');
      assert.equal(response.headers['referrer-policy'], 'no-referrer');
      assert.equal(response.headers['cache-control'], 'no-cache');
      const html = response.body;
      const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
      assert.ok(scripts.length >= 1, 'the page loads its script');
      for (const [, attributes, body] of scripts) {
        assert.match(attributes, /src="\/assets\/[a-z]+-[A-Z0-9]{8}\.js"/);
        assert.equal(body.trim(), '', 'no inline script');
      }
      assert.doesNotMatch(html, /<style\b/, 'no inline <style>');
      assert.doesNotMatch(html, /\sstyle=/, 'no style attribute');
      assert.doesNotMatch(html, /\son[a-z]+=/, 'no inline event handler');
    }
  });

  test('assets: gzip when asked, immutable under hashed names; 304 on a matching ETag', async () => {
    const index = (await get(server.port, '/')).body;
    const assets = [...index.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]);
    assert.ok(assets.some((name) => name.endsWith('.js')) && assets.some((name) => name.endsWith('.css')), assets.join());
    for (const asset of assets) {
      const plain = await get(server.port, asset);
      assert.equal(plain.status, 200);
      assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
      assert.match(plain.headers['content-type'], asset.endsWith('.js') ? /^application\/javascript/ : /^text\/css/);
      assert.equal(plain.headers.vary, 'Accept-Encoding');
      assert.equal(plain.headers['content-encoding'], undefined);
      const packed = await get(server.port, asset, 'Accept-Encoding: gzip, deflate, br\r\n');
      assert.equal(packed.headers['content-encoding'], 'gzip');
      assert.ok(packed.raw.length < plain.raw.length / 2, `${asset}: ${packed.raw.length} of ${plain.raw.length} bytes`);
      assert.ok(gunzipSync(packed.raw).equals(plain.raw), 'gzip round trip');
      const again = await get(server.port, asset, `If-None-Match: ${plain.headers.etag}\r\n`);
      assert.equal(again.status, 304);
      assert.equal(again.raw.length, 0);
    }
    const page = await get(server.port, '/');
    assert.equal((await get(server.port, '/', `If-None-Match: ${page.headers.etag}\r\n`)).status, 304);
  });

  test('HEAD carries the GET length and no body; a 304 carries no Content-Length', async () => {
    // Read raw: a HEAD answer's Content-Length is not followed by that many bytes.
    const exchange = async (request) => {
      const text = (await rawExchange(server.port, Buffer.from(`${request}Host: 127.0.0.1\r\nConnection: close\r\n\r\n`))).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      const headers = Object.fromEntries(text.slice(0, split).split('\r\n').slice(1).map((line) => {
        const colon = line.indexOf(':');
        return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
      }));
      return { status: Number(text.split(' ')[1]), headers, rest: text.slice(split + 4) };
    };
    for (const [target, encoding] of [['/', ''], ['/dashboard', 'Accept-Encoding: gzip\r\n']]) {
      const full = await get(server.port, target, encoding);
      const head = await exchange(`HEAD ${target} HTTP/1.1\r\n${encoding}`);
      assert.equal(head.status, 200);
      assert.equal(head.headers['content-length'], String(full.raw.length), target);
      assert.equal(head.headers.etag, full.headers.etag);
      assert.equal(head.rest, '', 'no body after a HEAD answer');
      const cached = await exchange(`GET ${target} HTTP/1.1\r\n${encoding}If-None-Match: ${full.headers.etag}\r\n`);
      assert.equal(cached.status, 304);
      assert.equal(cached.headers['content-length'], undefined);
      assert.equal(cached.rest, '');
    }
  });

  test('nothing outside the web root, however the path is written', async () => {
    for (const target of ['/assets/../index.html', '/assets/%2e%2e/index.html', '/assets/%2E%2E%2Findex.html',
      '/assets/..%2f..%2fCMakeCache.txt', '/assets/%00', '/assets/x%00.js', '/assets//etc/passwd',
      '/assets/%2fetc%2fpasswd', '/assets/..\\index.html', '/assets/nothing-here.js']) {
      const response = await get(server.port, target);
      assert.equal(response.status, 404, `${target}: ${response.status}`);
      assert.equal(JSON.parse(response.body).error.code, 'not_found', target);
    }
    // The API behind the pages still wants its key.
    assert.equal((await get(server.port, '/v1/models')).status, 401);
  });
});

describe('without a built web UI', () => {
  test('GET / says how to build it; the API still serves', async () => {
    const serve = writeTemp('no-web.yaml', `server:\n  web_root: ${scratchPath('no-web-root')}\npipeline: ${writeTemp('no-web-pipeline.yaml', 'version: 1\nname: noweb\nstages:\n  - {name: echo, type: echo}\n')}\n`);
    const server = await startServer(['--config', serve]);
    try {
      const response = await get(server.port, '/');
      assert.equal(response.status, 404);
      const error = JSON.parse(response.body).error;
      assert.equal(error.code, 'web_ui_not_built');
      assert.match(error.message, /Node\.js/);
      assert.equal((await get(server.port, '/v1/models')).status, 200);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
