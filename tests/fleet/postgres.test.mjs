// Two chatflow replicas sharing one PostgreSQL (a server the test starts): the quota ledger
// holds across both under concurrent load, a session begun on one continues on the other, and
// kill -9 of a replica right after a stream completed loses no completed turn, and usage rows
// written while the server is down wait for it (up to postgres.write_buffer_rows).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import {
  addKey, modelStages, post, postBytes, runChatflow, scratchPath, sseData, startServer, testModel, waitFor, writeTemp,
} from '../server/harness.mjs';
import { postgresBinaries, postgresUnavailable, startPostgres } from './postgres_server.mjs';

const unavailable = postgresUnavailable();
const as = (key) => ({ Authorization: `Bearer ${key}` });
// Enough for a few requests of `ask` below (each holds its prompt plus 10 tokens), far from 32.
const allowance = 120;

function fleetPipeline(keys) {
  return writeTemp('fleet-postgres.yaml', `version: 1
name: fleet-postgres
max_in_flight: 256
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  shared: {type: postgres, url: "\${CHATFLOW_POSTGRES_URL}", pool_size: 8}
  history: {type: history_store, backend: postgres, database: shared}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: quota, type: quota, config: {ledger: shared, model: llm, tenants: {capped: "${allowance}"}}}
  - {name: trim, type: history_trim, config: {store: history, model: llm, budget_tokens: 2000}}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

// The body of a chunked response cut off anywhere (its server was killed): its complete chunks.
function dechunk(response) {
  let rest = response.subarray(response.indexOf('\r\n\r\n') + 4);
  const chunks = [];
  for (;;) {
    const end = rest.indexOf('\r\n');
    const size = end < 0 ? NaN : parseInt(rest.subarray(0, end).toString(), 16);
    if (!(size > 0) || rest.length < end + 2 + size) return Buffer.concat(chunks).toString('utf8');
    chunks.push(rest.subarray(end + 2, end + 2 + size));
    rest = rest.subarray(end + 4 + size);
  }
}

describe('two replicas sharing PostgreSQL', { skip: unavailable ?? false }, () => {
  let postgres;
  let databaseUrl;
  let pipeline;
  let replicas = [];
  let capped;
  let chatty;
  let admin;
  const keys = scratchPath('fleet-postgres-keys.yaml');

  before(async () => {
    postgres = await startPostgres();
    databaseUrl = postgres.createDatabase('chatflow');
    process.env.CHATFLOW_POSTGRES_URL = databaseUrl;
    capped = addKey(keys, 'capped');
    chatty = addKey(keys, 'chatty', { user: 'u1' });
    admin = addKey(keys, 'ops', { roles: ['admin'] });
    pipeline = fleetPipeline(keys);
    // Started together: both apply the migrations at once.
    replicas = await Promise.all([startServer(['--pipeline', pipeline]), startServer(['--pipeline', pipeline])]);
  });
  after(async () => {
    for (const replica of replicas) await replica.stop();
    postgres?.stop();
  });

  const ask = (replica, key, content, extra = {}) => post(replica.url, '/v1/chat/completions', {
    model: 'test-model', max_tokens: 10, ignore_eos: true, temperature: 0,
    messages: [{ role: 'user', content }], ...extra,
  }, as(key));

  test('both replicas applied the migrations exactly once', () => {
    assert.equal(postgres.query('chatflow', 'SELECT component, version FROM schema_migrations ORDER BY 1, 2'),
      'history|1\nhistory|2\nhistory|3\nhistory|4\nusage|1');
  });

  test('32 concurrent requests across both replicas never push the ledger past the quota', async () => {
    const responses = await Promise.all(Array.from({ length: 32 }, (_, i) =>
      ask(replicas[i % 2], capped, `request number ${i}`)));
    const served = responses.filter((response) => response.status === 200);
    const refused = responses.filter((response) => response.status !== 200);
    assert.ok(served.length >= 1, 'nothing was served');
    assert.ok(refused.length >= 1, 'nothing was refused: the quota was not enforced');
    for (const response of refused) {
      assert.equal(response.status, 429, response.text);
      assert.equal(response.json.error.code, 'insufficient_quota');
      assert.match(response.json.error.message, new RegExp(`quota of ${allowance} tokens this month has \\d+ left`));
    }
    const spent = served.reduce((sum, response) => sum + response.json.usage.total_tokens, 0);
    assert.ok(spent <= allowance, `the served requests spent ${spent} of ${allowance}`);

    // Every replica reports the same ledger, which holds exactly what was served once each
    // replica's writer thread has settled (a response goes out before its settlement commits).
    for (const replica of replicas) {
      const data = await waitFor(async () => {
        const response = await fetch(`${replica.url}/v1/usage?tenant=capped`, { headers: as(admin) });
        const rows = (await response.json()).data;
        return rows.length === 1 && rows[0].requests >= served.length ? rows : undefined;
      }, { what: `the ledger of ${replica.url} to hold the ${served.length} served requests` });
      assert.equal(data.length, 1);
      assert.equal(data[0].requests, served.length);
      assert.equal(data[0].total_tokens, spent);
      assert.ok(data[0].total_tokens <= allowance);
    }
    assert.equal(postgres.query('chatflow', "SELECT count(*) FROM usage_reservations WHERE tenant = 'capped'"), '0',
      'every hold was let go');
    const cli = runChatflow(['usage', '--postgres', databaseUrl, '--tenant', 'capped']);
    assert.equal(cli.status, 0, cli.stderr);
    const row = cli.stdout.split('\n').find((line) => line.startsWith('capped'));
    assert.ok(row, cli.stdout);
    assert.deepEqual(row.trim().split(/\s+/).map(Number).slice(1), [
      served.length,
      served.reduce((sum, response) => sum + response.json.usage.prompt_tokens, 0),
      served.reduce((sum, response) => sum + response.json.usage.completion_tokens, 0),
      spent,
    ]);
  });

  test('a session begun on one replica continues on the other', async () => {
    const first = await ask(replicas[0], chatty, 'Once upon a time there was a dragon.', { session_id: 'story' });
    assert.equal(first.status, 200, first.text);
    const followUp = await ask(replicas[1], chatty, 'What was it called?', { session_id: 'story' });
    const alone = await ask(replicas[1], chatty, 'What was it called?', { session_id: 'another-story' });
    assert.equal(followUp.status, 200, followUp.text);
    assert.ok(followUp.json.usage.prompt_tokens > alone.json.usage.prompt_tokens + first.json.usage.completion_tokens,
      `the other replica did not see the first turn: ${followUp.json.usage.prompt_tokens} vs ${alone.json.usage.prompt_tokens}`);
    const response = await fetch(`${replicas[0].url}/v1/sessions/story`, { headers: as(chatty) });
    const { turns } = await response.json();
    assert.deepEqual(turns.map((turn) => turn.user), ['Once upon a time there was a dragon.', 'What was it called?']);
    assert.equal(turns[0].assistant, first.json.choices[0].message.content);
    assert.equal(turns[1].assistant, followUp.json.choices[0].message.content);
  });

  // A Responses request's previous_response_id is read from PostgreSQL before the pipeline runs.
  // While that read waits (here for a lock a psql session holds), the replica's only I/O thread
  // (io_threads: 1, the default) answers everyone else.
  test('a previous_response_id read that waits for PostgreSQL holds up nobody else', async () => {
    const replica = replicas[0];
    const respond = (extra) => post(replica.url, '/v1/responses', {
      model: 'test-model', input: 'Once upon a time', max_output_tokens: 6, ignore_eos: true, temperature: 0, ...extra,
    }, as(chatty));
    const first = await respond({});
    assert.equal(first.status, 200, first.text);
    // Kept once the answer went out.
    await waitFor(async () => (await fetch(`${replica.url}/v1/responses/${first.json.id}`, { headers: as(chatty) })).status === 200,
      { what: 'the first response to be kept' });
    const lockOn = (granted) => Number(postgres.query('chatflow', 'SELECT count(*) FROM pg_locks l JOIN pg_class c ' +
      `ON l.relation = c.oid WHERE c.relname = 'history_responses' AND l.granted = ${granted}`));
    const holder = spawn(`${postgresBinaries()}/psql`, ['-h', '127.0.0.1', '-p', String(postgres.port), '-U', 'chatflow',
      '-d', 'chatflow', '-v', 'ON_ERROR_STOP=1', '-c',
      'BEGIN; LOCK TABLE history_responses IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;'], { stdio: 'ignore' });
    let released = 0;
    const holderDone = new Promise((resolve) => holder.on('exit', (code) => { released = Date.now(); resolve(code); }));
    await waitFor(() => lockOn(true) > 0, { what: 'psql to hold the lock' });
    const waiting = respond({ previous_response_id: first.json.id, input: 'And then?' });
    await waitFor(() => lockOn(false) > 0, { what: 'the replica to wait for the lock' });
    // Each of these takes milliseconds unless the I/O thread waits for PostgreSQL.
    const timed = async (what, run) => {
      const begun = Date.now();
      const result = await run();
      assert.ok(Date.now() - begun < 1000, `${what} took ${Date.now() - begun} ms while a read waited`);
      return result;
    };
    assert.equal((await timed('GET /health', () => fetch(`${replica.url}/health`))).status, 200);
    const other = await timed('a chat completion', () => ask(replica, chatty, 'hi', { max_tokens: 2 }));
    assert.equal(other.status, 200, other.text);
    assert.equal(released, 0, 'the lock was released before the checks were through');
    const answered = await waiting;
    assert.equal(await holderDone, 0);
    assert.equal(answered.status, 200, answered.text);
    assert.equal(answered.json.previous_response_id, first.json.id);
    assert.ok(answered.json.usage.input_tokens > first.json.usage.input_tokens + first.json.usage.output_tokens,
      'the answer did not continue the first response\'s conversation');
  });

  test('kill -9 of a replica right after a stream completed loses no completed turn', async () => {
    const [victim, survivor] = replicas;
    // A raw socket: the kill cuts the response before its last chunk, which the harness's
    // parser would take for an error.
    const socket = net.connect(victim.port, '127.0.0.1');
    let received = Buffer.alloc(0);
    socket.on('error', () => {});
    socket.on('connect', () => socket.write(postBytes('/v1/chat/completions', JSON.stringify({
      model: 'test-model', max_tokens: 12, ignore_eos: true, stream: true, session_id: 'last-words',
      messages: [{ role: 'user', content: 'Say something before you go.' }],
    }), { extraHeaders: `Authorization: Bearer ${chatty}\r\n` })));
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no [DONE] in 20 s: ${received}`)), 20000);
      socket.on('data', (data) => {
        received = Buffer.concat([received, data]);
        if (received.includes('data: [DONE]')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    victim.child.kill('SIGKILL');
    assert.equal((await victim.exited).signal, 'SIGKILL');
    const text = sseData(dechunk(received)).filter((data) => data !== '[DONE]')
      .map((data) => JSON.parse(data).choices?.[0]?.delta?.content ?? '').join('');
    assert.ok(text.length > 0);

    const response = await fetch(`${survivor.url}/v1/sessions/last-words`, { headers: as(chatty) });
    assert.equal(response.status, 200, 'the other replica does not know the session');
    const { turns } = await response.json();
    assert.equal(turns.length, 1);
    assert.equal(turns[0].status, 'completed');
    assert.equal(turns[0].assistant, text);

    // And the killed replica, restarted, sees it too.
    replicas[0] = await startServer(['--pipeline', pipeline]);
    const again = await fetch(`${replicas[0].url}/v1/sessions/last-words`, { headers: as(chatty) });
    assert.equal((await again.json()).turns[0].assistant, text);
  });
});

describe('an unreachable PostgreSQL', { skip: unavailable ?? false }, () => {
  test('fails the start with an error naming the server but not its password', async () => {
    const file = writeTemp('fleet-postgres-down.yaml', `version: 1
name: fleet-postgres-down
resources:
  shared: {type: postgres, url: "postgresql://ops:hunter2@127.0.0.1:1/chatflow", connect_timeout_s: 2}
stages:
  - {name: quota, type: quota, config: {ledger: shared}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
    await assert.rejects(startServer(['--pipeline', file]), (error) => {
      assert.match(error.message, /cannot connect to PostgreSQL at postgresql:\/\/ops@127\.0\.0\.1:1\/chatflow/);
      assert.doesNotMatch(error.message, /hunter2/);
      return true;
    });
  });
});

describe('a ledger whose PostgreSQL goes away', { skip: unavailable ?? false }, () => {
  test('refuses requests of capped tenants with 503 rather than letting them pass unchecked', async () => {
    const postgres = await startPostgres();
    const keys = scratchPath('fleet-postgres-gone-keys.yaml');
    const capped = addKey(keys, 'capped');
    const file = writeTemp('fleet-postgres-gone.yaml', `version: 1
name: echo
resources:
  shared: {type: postgres, url: "${postgres.createDatabase('chatflow')}", connect_timeout_s: 2}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: quota, type: quota, config: {ledger: shared, tenants: {capped: "1000"}}}
  - {name: echo, type: echo}
  - {name: emit, type: sse_emit}
`);
    const server = await startServer(['--pipeline', file]);
    try {
      const request = () => post(server.url, '/v1/chat/completions', {
        model: 'echo', max_tokens: 10, messages: [{ role: 'user', content: 'hello' }],
      }, as(capped));
      assert.equal((await request()).status, 200);
      postgres.stop();
      const refused = await request();
      assert.equal(refused.status, 503, refused.text);
      assert.equal(refused.json.error.code, 'quota_unavailable');
    } finally {
      postgres.stop();
      await server.stop();
    }
  });
});

// The outside probe: "during a PostgreSQL outage 112 of 192 usage rows of unlimited tenants were
// lost". Requests of unlimited tenants need no round trip to be served; their usage rows now
// wait for the server, and only those past write_buffer_rows are dropped, counted and logged.
describe('usage rows while PostgreSQL is down', { skip: unavailable ?? false }, () => {
  test('wait for the server and arrive; past the buffer they are counted lost', async () => {
    const postgres = await startPostgres();
    const keys = scratchPath('fleet-postgres-outage-keys.yaml');
    const open = addKey(keys, 'open');
    const admin = addKey(keys, 'ops', { roles: ['admin'] });
    const file = writeTemp('fleet-postgres-outage.yaml', `version: 1
name: fleet-postgres-outage
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
  shared: {type: postgres, url: "${postgres.createDatabase('chatflow')}", connect_timeout_s: 2, write_buffer_rows: 8}
stages:
  - {name: auth, type: auth, config: {keys_file: ${keys}}}
  - {name: quota, type: quota, config: {ledger: shared}}
${modelStages}  - {name: emit, type: sse_emit}
`);
    const server = await startServer(['--pipeline', file]);
    const rows = () => Number(postgres.query('chatflow', "SELECT count(*) FROM usage_records WHERE tenant = 'open'"));
    // chatflow:storage_lost_writes_total{store="usage"} from /metrics (admins only).
    const lost = async () => {
      const text = await (await fetch(`${server.url}/metrics`, { headers: as(admin) })).text();
      const line = text.split('\n').find((sample) =>
        sample.startsWith('chatflow:storage_lost_writes_total{') && sample.includes('store="usage"'));
      assert.ok(line, text);
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    const serve = async (count) => {
      for (let i = 0; i < count; i++) {
        const answer = await post(server.url, '/v1/chat/completions', {
          model: 'test-model', max_tokens: 3, messages: [{ role: 'user', content: `hello ${i}` }],
        }, as(open));
        assert.equal(answer.status, 200, answer.text);
      }
    };
    try {
      await serve(2);
      await waitFor(() => rows() === 2, { what: 'the first rows' });
      postgres.pause();
      await serve(6);  // within the buffer of 8
      await new Promise((resolve) => setTimeout(resolve, 3000));  // longer than the old retries
      postgres.resume();
      await waitFor(() => rows() === 8, { timeoutMs: 30000, intervalMs: 200, what: 'the 6 rows served during the outage' });
      assert.equal(await lost(), 0);

      postgres.pause();
      await serve(12);  // 8 wait, 4 are dropped
      postgres.resume();
      await waitFor(() => rows() === 16, { timeoutMs: 30000, intervalMs: 200, what: 'the 8 buffered rows' });
      assert.equal(await lost(), 4);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.equal(rows(), 16, 'no dropped row arrived after all');
      const log = server.stderr();
      assert.match(log, /8 rows already wait to be written; new rows are dropped and counted lost/);
      assert.match(log, /rows are kept and written when it answers/);
    } finally {
      await server.stop();
      postgres.stop();
    }
  });
});
