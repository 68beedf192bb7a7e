// HTTPS on `chatflow serve` (server.tls) with certificates openssl makes here: a CA, server
// certificates for 127.0.0.1 and localhost, a client certificate. Node's https and tls clients
// and the official openai client (trusting the CA through an https agent) talk to it; TLS 1.1 is
// refused, ALPN settles on http/1.1; a certificate rotated on disk is served after SIGHUP or POST
// /admin/reload, and one that does not load leaves the old one serving; a bad file at start is
// an error naming it; with client_ca_file, only clients with a certificate from that CA get in.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import { createRequire } from 'node:module';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';

import {
  parseResponse, rawExchange, runChatflow, scratchPath, startServer, waitFor, writeTemp,
} from './harness.mjs';

const OpenAI = createRequire(`${process.env.CHATFLOW_NODE_MODULES}/`)('openai');

function openssl(args, cwd) {
  const result = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`openssl ${args.join(' ')} failed: ${result.stderr}`);
  return result.stdout;
}

// A CA, and certificates it signs: `leaf(name, serial, usage)` writes NAME.pem and NAME.key.
function certificateAuthority(folder) {
  fs.mkdirSync(folder, { recursive: true });
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=chatflow test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], folder);
  return {
    folder,
    ca: fs.readFileSync(path.join(folder, 'ca.pem')),
    leaf(name, serial, usage = 'serverAuth') {
      fs.writeFileSync(path.join(folder, `${name}.ext`),
        'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n' +
        `extendedKeyUsage=${usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n`);
      openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
        '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], folder);
      openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key',
        '-set_serial', `0x${serial}`, '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`], folder);
      return { certificate: path.join(folder, `${name}.pem`), key: path.join(folder, `${name}.key`) };
    },
  };
}

// The serial number of the certificate the server presents now, as Node prints it (hex).
function servedSerial(port, ca) {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.end();
      resolve(serial);
    });
    socket.on('error', reject);
  });
}

// Resolves with the TLS socket once the handshake completes, or rejects with its error.
function handshake(port, options) {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ...options }, () => resolve(socket));
    socket.on('error', reject);
  });
}

function httpsGet(url, options) {
  return new Promise((resolve, reject) => {
    https.get(url, options, (response) => {
      let body = '';
      response.on('data', (data) => { body += data; });
      response.on('end', () => resolve({ status: response.statusCode, body, socket: response.socket }));
    }).on('error', reject);
  });
}

describe('HTTPS with server.tls', () => {
  let authority;
  let server;
  let live;  // the files the serve file names; rotations overwrite them
  before(async () => {
    authority = certificateAuthority(scratchPath('tls-ca'));
    const first = authority.leaf('first', '1001');
    live = { certificate: scratchPath('tls-live.pem'), key: scratchPath('tls-live.key') };
    fs.copyFileSync(first.certificate, live.certificate);
    fs.copyFileSync(first.key, live.key);
    // Relative to the serve file, which sits beside them.
    const config = writeTemp('tls-serve.yaml', `server:
  tls: {certificate_file: tls-live.pem, key_file: tls-live.key}
pipeline: ${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml
`);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('the server prints an https URL and answers over TLS with the CA trusted', async () => {
    assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const health = await httpsGet(`${server.url}/health`, { ca: authority.ca });
    assert.equal(health.status, 200);
    assert.equal(health.body, '{"status":"ok"}');
    // Without the CA the client refuses the certificate: it is the one we made.
    await assert.rejects(httpsGet(`${server.url}/health`, {}), /self-signed|unable to verify|UNABLE_TO_GET_ISSUER/i);
  });

  test('a plain HTTP request to the HTTPS address is told so', async () => {
    const raw = await rawExchange(server.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    const response = parseResponse(raw);
    assert.equal(response.status, 400);
    assert.equal(JSON.parse(response.body).error.code, 'https_required');
  });

  test('ALPN settles on http/1.1; a client offering only h2 is refused', async () => {
    const socket = await handshake(server.port, { ca: authority.ca, ALPNProtocols: ['h2', 'http/1.1'] });
    assert.equal(socket.alpnProtocol, 'http/1.1');
    assert.ok(['TLSv1.2', 'TLSv1.3'].includes(socket.getProtocol()), socket.getProtocol());
    socket.destroy();
    await assert.rejects(handshake(server.port, { ca: authority.ca, ALPNProtocols: ['h2'] }),
      { code: 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL' });
  });

  test('TLS 1.1 is refused by the server; 1.2 and 1.3 are served', async () => {
    // The client offers 1.1 at most (and allows the old ciphers it needs): the server's
    // protocol_version alert comes back.
    await assert.rejects(
      handshake(server.port, { ca: authority.ca, minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' }),
      (error) => {
        // An alert received from the server, not the client declining to offer 1.1.
        assert.equal(error.code, 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION', error.message);
        return true;
      });
    for (const version of ['TLSv1.2', 'TLSv1.3']) {
      const socket = await handshake(server.port, { ca: authority.ca, minVersion: version, maxVersion: version });
      assert.equal(socket.getProtocol(), version);
      socket.destroy();
    }
  });

  test('the official openai client streams over HTTPS with the CA in its agent', async () => {
    const client = new OpenAI({
      baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0,
      httpAgent: new https.Agent({ ca: authority.ca }),
    });
    const stream = await client.chat.completions.create({
      model: 'echo', messages: [{ role: 'user', content: 'over tls' }], stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'OVER TLS');
    const whole = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'again' }] });
    assert.equal(whole.choices[0].message.content, 'AGAIN');
  });

  test('a rotated certificate is served after SIGHUP and after POST /admin/reload', async () => {
    assert.equal(await servedSerial(server.port, authority.ca), '1001');
    const second = authority.leaf('second', '2002');
    fs.copyFileSync(second.certificate, live.certificate);
    fs.copyFileSync(second.key, live.key);
    server.child.kill('SIGHUP');
    await waitFor(async () => (await servedSerial(server.port, authority.ca)) === '2002',
      { what: 'the SIGHUP-reloaded certificate to be served' });

    const third = authority.leaf('third', '3003');
    fs.copyFileSync(third.certificate, live.certificate);
    fs.copyFileSync(third.key, live.key);
    const reloaded = await new Promise((resolve, reject) => {
      const request = https.request(`${server.url}/admin/reload`, {
        method: 'POST', ca: authority.ca, headers: { 'Content-Type': 'application/json', 'Content-Length': 2 },
      }, (response) => {
        let body = '';
        response.on('data', (data) => { body += data; });
        response.on('end', () => resolve({ status: response.statusCode, body: JSON.parse(body) }));
      });
      request.on('error', reject);
      request.end('{}');
    });
    assert.equal(reloaded.status, 200, JSON.stringify(reloaded.body));
    assert.equal(reloaded.body.tls.reloaded, true);
    assert.match(reloaded.body.tls.certificate, /serial 3003/);
    assert.equal(await servedSerial(server.port, authority.ca), '3003');
  });

  test('a certificate that does not load at reload leaves the old one serving, and says why', async () => {
    const served = await servedSerial(server.port, authority.ca);
    fs.writeFileSync(live.certificate, 'not a certificate\n');
    server.child.kill('SIGHUP');
    const log = () => server.stdout() + server.stderr();
    await waitFor(() => /server\.tls: the certificate and key were not reloaded/.test(log()),
      { what: 'the failed reload to be logged' });
    assert.match(log(), new RegExp(`certificate_file: '${live.certificate.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}'`));
    assert.equal(await servedSerial(server.port, authority.ca), served);
    // A key that belongs to another certificate: refused as well, naming the key file.
    fs.copyFileSync(authority.leaf('fourth', '4004').certificate, live.certificate);
    fs.copyFileSync(authority.leaf('fifth', '5005').key, live.key);
    server.child.kill('SIGHUP');
    await waitFor(() => /is not the private key of the certificate/.test(log()),
      { what: 'the mismatched key to be logged' });
    assert.match(log(), /server\.tls\.key_file: '.*tls-live\.key' is not the private key/);
    assert.equal(await servedSerial(server.port, authority.ca), served);
    const health = await httpsGet(`${server.url}/health`, { ca: authority.ca });
    assert.equal(health.status, 200);
  });
});

describe('server.tls mistakes at start', () => {
  test('a missing or broken certificate file is an error naming it', () => {
    const authority = certificateAuthority(scratchPath('tls-start-ca'));
    const good = authority.leaf('start', '6006');
    const broken = writeTemp('tls-broken.pem', 'garbage\n');
    for (const [certificate, message] of [
      [scratchPath('tls-missing.pem'), /server\.tls\.certificate_file: cannot read '.*tls-missing\.pem': No such file/],
      [broken, /server\.tls\.certificate_file: '.*tls-broken\.pem' holds no usable PEM certificate/],
    ]) {
      const config = writeTemp('tls-bad-serve.yaml', `server:
  port: 0
  tls: {certificate_file: ${certificate}, key_file: ${good.key}}
pipeline: ${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml
`);
      const result = runChatflow(['serve', '--config', config, '--access-log', 'off']);
      assert.equal(result.status, 1, result.stderr);
      assert.match(result.stderr, message);
    }
    const noKey = writeTemp('tls-no-key-serve.yaml', `server:
  tls: {certificate_file: ${good.certificate}}
pipeline: ${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml
`);
    const result = runChatflow(['serve', '--config', noKey]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /tls-no-key-serve\.yaml:2:\d+: error: .*key_file/);
  });
});

describe('mutual TLS with server.tls.client_ca_file', () => {
  let authority;
  let server;
  let client;
  before(async () => {
    authority = certificateAuthority(scratchPath('tls-mutual-ca'));
    const serving = authority.leaf('mutual-server', '7007');
    client = authority.leaf('mutual-client', '8008', 'clientAuth');
    const config = writeTemp('tls-mutual-serve.yaml', `server:
  tls:
    certificate_file: ${serving.certificate}
    key_file: ${serving.key}
    client_ca_file: ${path.join(authority.folder, 'ca.pem')}
pipeline: ${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml
`);
    server = await startServer(['--config', config]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a client with a certificate from the CA gets in; one without does not', async () => {
    const health = await httpsGet(`${server.url}/health`, {
      ca: authority.ca, cert: fs.readFileSync(client.certificate), key: fs.readFileSync(client.key),
    });
    assert.equal(health.status, 200);
    await assert.rejects(httpsGet(`${server.url}/health`, { ca: authority.ca }),
      /certificate required|handshake failure|socket hang up|ECONNRESET/i);
  });
});

describe('a private key file that others may read', () => {
  let authority;
  let serving;
  before(() => {
    authority = certificateAuthority(scratchPath('tls-mode-ca'));
    serving = authority.leaf('mode-server', '9009');
  });

  // Starts the server on the key copied with `mode`, and returns what it logged (spdlog writes to
  // standard output) once serving.
  async function startedWithKeyMode(name, mode) {
    const key = scratchPath(`${name}.key`);
    fs.copyFileSync(serving.key, key);
    fs.chmodSync(key, mode);
    const config = writeTemp(`${name}-serve.yaml`, `server:
  tls: {certificate_file: ${serving.certificate}, key_file: ${key}}
pipeline: ${process.env.CHATFLOW_SOURCE_DIR}/graphs/echo.yaml
`);
    const server = await startServer(['--config', config]);
    const { code } = await server.stop();
    assert.equal(code, 0);
    return { key, log: server.stdout() + server.stderr() };
  }

  test('is served with a warning naming the file and its mode, never its bytes', async () => {
    const { key, log } = await startedWithKeyMode('tls-mode-shared', 0o644);
    const warning = log.split('\n').find((line) => line.includes('server.tls.key_file'));
    assert.ok(warning, log);
    assert.ok(warning.includes(`'${key}'`), warning);
    assert.match(warning, /\[warning\].*readable by its group and others \(mode 0644\).*chmod 600/);
    const secret = fs.readFileSync(key, 'utf8').split('\n').filter((line) => line && !line.startsWith('-----'));
    for (const line of ['PRIVATE KEY', ...secret]) assert.ok(!log.includes(line), `the log holds '${line}'`);

    const groupOnly = await startedWithKeyMode('tls-mode-group', 0o640);
    assert.match(groupOnly.log, /server\.tls\.key_file: '.*tls-mode-group\.key' is readable by its group \(mode 0640\)/);
  });

  test('readable by its owner alone, it is served without a warning', async () => {
    const { log } = await startedWithKeyMode('tls-mode-private', 0o600);
    assert.ok(!log.includes('server.tls.key_file'), log);
  });
});
