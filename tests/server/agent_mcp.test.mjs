// The agent's MCP tool servers through `chatflow serve`, against the reference server the Model
// Context Protocol publishes (@modelcontextprotocol/server-everything, installed by npm into the
// build tree by the server_setup_mcp_npm fixture): started by chatflow over stdio, and started
// here in its Streamable HTTP mode. The random-weight test model calls whatever the grammar
// lets it, so each pipeline offers one tool with short arguments (the server's `tools` key)
// with `first_step: required`; the test checks the server's answer against the arguments the
// model wrote. Also:
// a server that dies at start is a step naming it and the request is still answered, and a
// stdio server killed between requests is started again.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { modelStages, post, scratchPath, startServer, testModel, waitFor, writeTemp } from './harness.mjs';

const modules = process.env.CHATFLOW_MCP_NODE_MODULES;
const everything = modules && path.join(modules, '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const skip = !everything || !fs.existsSync(everything)
  ? `@modelcontextprotocol/server-everything is not installed (${everything})` : false;

function mcpPipeline(name, servers, settings = '') {
  return writeTemp(`${name}.yaml`, `version: 1
name: ${name}
resources:
  llm: {type: gguf_model, path: "${testModel}", name: test-model}
stages:
  - name: agent
    type: agent
    config:
      model: llm
      first_step: required
      parallel_tool_calls: false
      max_steps: 1
      step_max_tokens: 120
${settings}      mcp_servers:
${servers}
${modelStages}  - {name: emit, type: sse_emit}
`);
}

const ask = (server) => post(server.url, '/v1/chat/completions', {
  model: 'test-model', max_tokens: 4, temperature: 0,
  messages: [{ role: 'user', content: 'Use the tool.' }],
});

const steps = (response) => response.json.chatflow.steps;

// What the reference server's get-structured-content answers for each city it knows.
const forecasts = {
  'New York': '{"temperature":33,"conditions":"Cloudy","humidity":82}',
  Chicago: '{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}',
  'Los Angeles': '{"temperature":73,"conditions":"Sunny / Clear","humidity":48}',
};

function freePort() {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

describe('agent: MCP servers', { skip }, () => {
  let web;
  let port;
  const pidFile = scratchPath(`mcp-everything-one-${process.pid}.pid`);
  let wrapper;
  before(async () => {
    wrapper = writeTemp('mcp-everything-one.mjs', `import fs from 'node:fs';
fs.writeFileSync(${JSON.stringify(pidFile)}, String(process.pid));
process.argv = [process.argv[0], ${JSON.stringify(everything)}, 'stdio'];
await import(${JSON.stringify(everything)});
`);
    port = await freePort();
    web = spawn(process.execPath, [everything, 'streamableHttp'], {
      env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    let said = '';
    web.stderr.on('data', (data) => { said += data; });
    await waitFor(() => said.includes('listening on port'), { timeoutMs: 20000, what: `the HTTP MCP server (${said})` });
  });
  after(() => web?.kill());

  test('stdio: the forecast of the city the model chose; a killed server is started again', async () => {
    const server = await startServer(['--pipeline', mcpPipeline('agent-mcp-stdio',
      `        - {name: everything, command: node, args: ["${wrapper}"], tools: [get-structured-content]}`)]);
    try {
      const first = await ask(server);
      assert.equal(first.status, 200, first.text);
      const [call] = steps(first);
      assert.equal(call.tool, 'everything_get-structured-content', JSON.stringify(steps(first)));
      assert.equal(call.status, 'ok', JSON.stringify(call));
      const { location } = JSON.parse(call.arguments);
      assert.ok(call.detail.includes(forecasts[location]), `${location}: ${call.detail}`);
      assert.ok(call.detail.startsWith('<<<TOOL RESULT: UNTRUSTED DATA>>>'), call.detail);

      const killed = Number(fs.readFileSync(pidFile, 'utf8'));
      process.kill(killed, 'SIGKILL');
      // Dead: gone, or a zombie (until chatflow next looks at it) with no thread left exiting.
      const dead = () => {
        try {
          const state = fs.readFileSync(`/proc/${killed}/stat`, 'utf8').replace(/^.*\)/, ')');
          return / Z /.test(state) && fs.readdirSync(`/proc/${killed}/task`).length <= 1;
        } catch { return true; }
      };
      await waitFor(dead, { what: 'the MCP server to die' });
      let second = await ask(server);
      assert.equal(second.status, 200, second.text);
      if (steps(second)[0].status !== 'ok') {
        // Found dead only as it was used (the kernel may still be ending it): that use fails
        // naming it and how it ended, and the next one starts it again.
        assert.match(steps(second)[0].detail, /^MCP server 'everything' was killed by signal 9/,
          JSON.stringify(steps(second)));
        second = await ask(server);
      }
      const [again] = steps(second);
      assert.equal(again.tool, 'everything_get-structured-content', JSON.stringify(steps(second)));
      assert.equal(again.status, 'ok', JSON.stringify(steps(second)));
      assert.notEqual(Number(fs.readFileSync(pidFile, 'utf8')), killed, 'a new process');
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('Streamable HTTP: get-sum adds the numbers the model wrote', async () => {
    const server = await startServer(['--pipeline', mcpPipeline('agent-mcp-http',
      `        - {name: web, url: "http://127.0.0.1:${port}/mcp", tools: [get-sum], headers: {X-Test: "1"}}`)]);
    try {
      const response = await ask(server);
      assert.equal(response.status, 200, response.text);
      const [call] = steps(response);
      assert.equal(call.tool, 'web_get-sum');
      assert.equal(call.status, 'ok', JSON.stringify(call));
      const { a, b } = JSON.parse(call.arguments);
      assert.ok(call.detail.includes(`The sum of ${a} and ${b} is ${a + b}.`), call.detail);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('a server that dies at start is a step naming it, and the request is answered', async () => {
    const server = await startServer(['--pipeline', mcpPipeline('agent-mcp-broken',
      `        - {name: broken, command: node, args: ["-e", "process.stderr.write('no config file'); process.exit(4)"]}`)]);
    try {
      const response = await ask(server);
      assert.equal(response.status, 200, response.text);
      const [failed, end] = steps(response);
      assert.equal(failed.tool, 'mcp:broken');
      assert.equal(failed.status, 'error');
      assert.match(failed.detail, /^MCP server 'broken' exited with status 4; its stderr ends: no config file/);
      assert.equal(end.status, 'no_tools');
      assert.equal(response.json.choices[0].finish_reason, 'length');
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
