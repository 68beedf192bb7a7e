// A PostgreSQL server of the test's own: initdb in a temporary directory, `postgres` on a free
// loopback port with its socket in that directory and fsync off (speed: the tests kill chatflow,
// never the machine), stopped and removed when the test process ends, also on failure.
// PostgreSQL refuses to run as root: as root (CI), initdb and postgres run as the `postgres`
// user that Debian's package creates, in a directory handed to it.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

// The newest /usr/lib/postgresql/*/bin with a postgres in it, or null.
export function postgresBinaries() {
  let versions;
  try {
    versions = fs.readdirSync('/usr/lib/postgresql');
  } catch {
    return null;
  }
  const found = versions
    .filter((version) => fs.existsSync(`/usr/lib/postgresql/${version}/bin/postgres`))
    .sort((a, b) => Number(a) - Number(b));
  return found.length ? `/usr/lib/postgresql/${found.at(-1)}/bin` : null;
}

// Why PostgreSQL cannot run here (a skip message), or null when it can.
export function postgresUnavailable() {
  if (!postgresBinaries()) return 'PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres)';
  if (process.getuid() === 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) {
    return 'running as root and there is no `postgres` user to run PostgreSQL as';
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export async function startPostgres() {
  const bin = postgresBinaries();
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-postgres-'));
  const asRoot = process.getuid() === 0;
  if (asRoot) spawnSync('chown', ['postgres:', directory]);
  const run = (program, args) => {
    const [command, commandArgs] = asRoot
      ? ['runuser', ['-u', 'postgres', '--', `${bin}/${program}`, ...args]]
      : [`${bin}/${program}`, args];
    return spawnSync(command, commandArgs, { cwd: directory, encoding: 'utf8' });
  };
  const data = path.join(directory, 'data');
  const log = path.join(directory, 'server.log');
  let port;
  let started = false;
  const stop = () => {
    if (started) run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    started = false;
    fs.rmSync(directory, { recursive: true, force: true });
  };
  // However the test process ends, the server goes with it.
  process.on('exit', stop);
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => {
      stop();
      process.exit(1);
    });
  }
  const init = run('initdb', ['-D', data, '-U', 'chatflow', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  if (init.status !== 0) {
    stop();
    throw new Error(`initdb failed:\n${init.stdout}${init.stderr}`);
  }
  // A port another process takes between our probe and the server's bind: try again.
  for (let attempt = 0; attempt < 3 && !started; attempt++) {
    port = await freePort();
    const options = `-p ${port} -k ${directory} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
    const start = run('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', '-o', options, 'start']);
    started = start.status === 0;
  }
  if (!started) {
    const serverLog = fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '';
    stop();
    throw new Error(`PostgreSQL did not start:\n${serverLog}`);
  }
  const url = (database) => `postgresql://chatflow@127.0.0.1:${port}/${database}`;
  const options = () => `-p ${port} -k ${directory} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
  return {
    port,
    url,
    // An outage: the server stops (its clients disconnected) and later starts again on the same
    // port with the same data.
    pause() {
      const stopped = run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
      if (stopped.status !== 0) throw new Error(`pg_ctl stop failed: ${stopped.stdout}${stopped.stderr}`);
      started = false;
    },
    resume() {
      const start = run('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', '-o', options(), 'start']);
      if (start.status !== 0) throw new Error(`pg_ctl start failed: ${start.stdout}${start.stderr}`);
      started = true;
    },
    // A new, empty database and its URL.
    createDatabase(name) {
      const made = spawnSync(`${bin}/createdb`, ['-h', '127.0.0.1', '-p', String(port), '-U', 'chatflow', name], { encoding: 'utf8' });
      if (made.status !== 0) throw new Error(`createdb ${name} failed: ${made.stderr}`);
      return url(name);
    },
    // Runs SQL with psql and returns its unaligned, tuples-only output.
    query(database, sql) {
      const result = spawnSync(`${bin}/psql`, ['-h', '127.0.0.1', '-p', String(port), '-U', 'chatflow', '-d', database, '-At', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8' });
      if (result.status !== 0) throw new Error(`psql failed: ${result.stderr}`);
      return result.stdout.trim();
    },
    stop,
  };
}
