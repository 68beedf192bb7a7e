// 64 concurrent streaming clients for 30 s (CHATFLOW_LOAD_SECONDS), twice, with an admission
// limit below 64: every request completes or gets a clean 503, and resident memory after the
// second run is where the first left it. The clients are `chatflow bench`, which checks each
// stream for a finish_reason and [DONE].
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';

import { chatflow, modelPipeline, residentKiB, startServer } from './harness.mjs';

const seconds = Number(process.env.CHATFLOW_LOAD_SECONDS ?? 30);

function bench(url) {
  return new Promise((resolve, reject) => {
    const child = spawn(chatflow, ['bench', '--url', url, '--concurrency', '64', '--duration', String(seconds),
      '--max-tokens', '64', '--json'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (data) => { out += data; });
    child.on('exit', (code) => {
      try {
        resolve({ code, result: JSON.parse(out) });
      } catch (error) {
        reject(new Error(`bench printed no JSON (exit ${code}): ${out}`));
      }
    });
  });
}

test(`64 streaming clients for ${seconds} s, twice`, { timeout: (4 * seconds + 60) * 1000 }, async () => {
  const server = await startServer(['--pipeline', modelPipeline('load', 'max_in_flight: 56'),
    '--access-log', 'off']);
  const resident = [];
  for (let run = 0; run < 2; run++) {
    const { code, result } = await bench(server.url);
    console.log(`run ${run + 1}: ${JSON.stringify(result)}`);
    assert.equal(result.failed_requests, 0, result.first_error);
    assert.equal(code, 0);
    assert.ok(result.successful_requests > 64, 'requests completed');
    assert.ok(result.successful_requests + result.rejected_requests > 0);
    resident.push(residentKiB(server.child.pid));
  }
  console.log(`resident memory after each run: ${resident.join(' KiB, ')} KiB`);
  assert.ok(resident[1] <= resident[0] * 1.1 + 8192,
    `resident memory grew from ${resident[0]} KiB to ${resident[1]} KiB`);
  const { code } = await server.stop();
  assert.equal(code, 0);
});
