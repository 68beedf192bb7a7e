// The documentation against the code (rules: docs_check.mjs). Run by ctest as `docs`, or from the
// repository root: node --test tests/docs/docs.test.mjs (CHATFLOW_BIN picks the binary,
// build/chatflow by default).
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { checkCommands, checkGenerated, checkLinks, checkMetrics, checkYaml, readDocs } from './docs_check.mjs';

const root = process.env.CHATFLOW_SOURCE_DIR ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const chatflow = process.env.CHATFLOW_BIN ?? path.join(root, 'build/chatflow');
const docs = readDocs(root);

function expectNone(problems) {
  if (problems.length) assert.fail(`${problems.length} problem(s):\n${problems.join('\n')}`);
}

test('docs/reference/stages.md and metrics.md are what the commands print', () => {
  expectNone(checkGenerated(chatflow, root));
});

test('every command and option is in docs/cli.md, and every command the docs run exists', () => {
  expectNone(checkCommands(chatflow, docs));
});

test('every chatflow: metric the docs and the code name is exported', () => {
  expectNone(checkMetrics(chatflow, docs, root));
});

test('pipeline YAML in the docs names real types and keys', (t) => {
  const { problems, counts } = checkYaml(chatflow, docs, root);
  t.diagnostic(`YAML blocks: ${JSON.stringify(counts)}`);
  expectNone(problems);
});

test('relative links point to files and headings that exist', () => {
  expectNone(checkLinks(docs, root));
});
