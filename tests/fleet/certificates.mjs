// Certificates made by openssl for the TLS tests (the same set as tests/support/
// test_certificates.cpp): a CA, a server certificate it signed for localhost and 127.0.0.1, one
// it signed for elsewhere.invalid only, a client certificate it signed (mutual TLS), and a
// second CA that signed none of them.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const haveOpenssl = spawnSync('openssl', ['version']).status === 0;

function openssl(directory, args) {
  const run = spawnSync('openssl', args, { cwd: directory, encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`openssl ${args.join(' ')} failed: ${run.stderr}`);
}

// Makes them in `directory` (created); returns their paths.
export function makeCertificates(directory) {
  fs.mkdirSync(directory, { recursive: true });
  // EC keys: made in milliseconds, where RSA keys take a noticeable part of a second each.
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of ['ca', 'other_ca']) {
    openssl(directory, ['req', '-x509', ...key, '-days', '2', '-subj', `/CN=chatflow test ${ca}`,
      '-keyout', `${ca}.key`, '-out', `${ca}.pem`]);
  }
  const sign = (name, subject, extensions) => {
    openssl(directory, ['req', ...key, '-subj', `/CN=${subject}`, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
    fs.writeFileSync(path.join(directory, `${name}.ext`), extensions);
    openssl(directory, ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key',
      '-CAcreateserial', '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`]);
  };
  sign('server', 'localhost', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  sign('elsewhere', 'elsewhere.invalid', 'subjectAltName=DNS:elsewhere.invalid\nextendedKeyUsage=serverAuth\n');
  sign('client', 'chatflow-client', 'extendedKeyUsage=clientAuth\n');
  const file = (name) => path.join(directory, name);
  return {
    ca: file('ca.pem'),
    otherCa: file('other_ca.pem'),
    serverCertificate: file('server.pem'),
    serverKey: file('server.key'),
    elsewhereCertificate: file('elsewhere.pem'),
    elsewhereKey: file('elsewhere.key'),
    clientCertificate: file('client.pem'),
    clientKey: file('client.key'),
  };
}
