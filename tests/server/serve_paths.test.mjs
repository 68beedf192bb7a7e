// Every path in a serve file is relative to the serve file, wherever `chatflow serve` runs (the
// test runs it from the source tree): the pipeline, server.tls's files, server.tracing.ca_file,
// an access_log file and web_root, here all beside a serve file in a folder of its own.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { post, scratchPath, startServer, waitFor } from './harness.mjs';

describe('a serve file in a folder of its own', () => {
  const folder = scratchPath('serve-paths/deploy');
  let server;
  before(async () => {
    fs.mkdirSync(path.join(folder, 'site'), { recursive: true });
    fs.mkdirSync(path.join(folder, 'logs'), { recursive: true });
    fs.writeFileSync(path.join(folder, 'site', 'index.html'), '<!doctype html><title>deploy</title><p>the page beside the serve file</p>\n');
    fs.writeFileSync(path.join(folder, 'pipeline.yaml'), 'version: 1\nname: deploy\nstages:\n  - {name: echo, type: echo}\n');
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
      '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=chatflow paths CA'], { cwd: folder, encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    fs.writeFileSync(path.join(folder, 'serve.yaml'), `server:
  access_log: logs/access.log
  web_root: site
  tracing: {endpoint: "https://127.0.0.1:9/v1/traces", ca_file: ca.pem, sampling_ratio: 0}
pipeline: pipeline.yaml
`);
    server = await startServer(['--config', path.join(folder, 'serve.yaml')], { serveFileAccessLog: true });
  });
  after(async () => {
    if (server) assert.equal((await server.stop()).code, 0);
  });

  test('serves the web root and writes the access log beside it', async () => {
    const page = await fetch(`${server.url}/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /the page beside the serve file/);
    const answer = await post(server.url, '/v1/chat/completions',
      { model: 'deploy', messages: [{ role: 'user', content: 'logged here' }] }, { 'X-Request-Id': 'serve-paths-1' });
    assert.equal(answer.status, 200, answer.text);
    const logged = await waitFor(() => {
      const file = path.join(folder, 'logs', 'access.log');
      return fs.existsSync(file) && fs.readFileSync(file, 'utf8').includes('"request_id":"serve-paths-1"');
    }, { what: 'the request in logs/access.log beside the serve file' });
    assert.ok(logged);
  });
});
