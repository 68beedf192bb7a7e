// The docs checks themselves (docs_check.mjs), on small documentation trees written here: a
// tree that is right gives no problem, and each kind of mistake is reported where it is.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  checkCommands, checkGenerated, checkLinks, checkMetrics, checkYaml, commandTable, readDocs, runChatflow, slug,
} from './docs_check.mjs';

const root = process.env.CHATFLOW_SOURCE_DIR ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const chatflow = process.env.CHATFLOW_BIN ?? path.join(root, 'build/chatflow');

// A docs tree in a scratch folder: `files` maps paths to contents; docs/reference/*.md are the
// commands' output and docs/cli.md names every command and option, unless `files` says otherwise.
let scratch;
let table;
function tree(files) {
  const dir = fs.mkdtempSync(path.join(scratch, 'tree-'));
  const cliLines = ['# The command line', '', '```sh'];
  for (const [name, entry] of Object.entries(table)) {
    const subs = Object.keys(entry.subcommands);
    const options = [...entry.options, ...Object.values(entry.subcommands).flatMap((s) => s.options)].map((names) => names[0]);
    cliLines.push(`chatflow ${name}${subs.length ? ' ' + subs.join('|') : ''} ${options.map((o) => `[${o}]`).join(' ')}`);
  }
  cliLines.push('```', '');
  const defaults = {
    'README.md': '# Example\n\nSee [the command line](docs/cli.md) and [the reference](docs/reference/stages.md).\n',
    'docs/cli.md': cliLines.join('\n'),
    'docs/reference/stages.md': runChatflow(chatflow, ['stages', '--markdown']).stdout,
    'docs/reference/metrics.md': runChatflow(chatflow, ['stages', '--metrics-markdown']).stdout,
  };
  for (const [file, text] of Object.entries({ ...defaults, ...files })) {
    if (text === null) continue;
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), text);
  }
  return dir;
}

before(() => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-docs-check-'));
  table = commandTable(chatflow);
});
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

describe('a correct tree', () => {
  test('gives no problem in any check', () => {
    const dir = tree({
      'README.md': '# Example\n\n[cli](docs/cli.md), [metrics](docs/reference/metrics.md#engine), ' +
        '[stages](docs/reference/stages.md#gguf_model)\n\nWatch `chatflow:num_requests_running` and ' +
        '`rate(chatflow:e2e_request_latency_seconds_bucket[5m])`, the `chatflow:tenant_*` family; Redis keys ' +
        'start with `chatflow:ratelimit:`; postgresql://chatflow:secret@host/db.\n\n' +
        'Run `chatflow serve --port 8000`; chatflow turns a request into an answer.\n\n' +
        '```sh\nsudo -u postgres createdb --owner chatflow chatflow\nCHATFLOW_MODEL=m.gguf ./build/chatflow run graphs/minimal.yaml --prompt hi\n' +
        'echo hi | chatflow tokenize -m m.gguf\n```\n\n```\nlibx.so: refused: this chatflow has ABI 1.1\n```\n\n' +
        '```yaml\nversion: 1\nstages:\n  - {name: echo, type: echo, config: {words_per_chunk: 2}}\n```\n\n' +
        '```yaml\n- name: shout\n  type: uppercase\n```\n\n' +
        '```yaml\nresources:\n  llm:\n    type: gguf_model\n    path: ${CHATFLOW_MODEL}\n```\n\n' +
        '```yaml\ntype: object\nproperties:\n  city: {type: string}\n```\n\n' +
        '<!-- docs-test: invalid -->\n```yaml\nversion: 1\nstages:\n  - {name: echo, type: ecoh}\n```\n',
    });
    const docs = readDocs(dir);
    assert.deepEqual(checkGenerated(chatflow, dir), []);
    assert.deepEqual(checkCommands(chatflow, docs), []);
    assert.deepEqual(checkMetrics(chatflow, docs, dir), []);
    const yaml = checkYaml(chatflow, docs, dir);
    assert.deepEqual(yaml.problems, []);
    assert.deepEqual(yaml.counts, { pipeline: 2, 'stage list': 1, 'pipeline fragment': 1, other: 1 });
    assert.deepEqual(checkLinks(docs, dir), []);
  });
});

describe('each mistake is reported where it is', () => {
  test('a stale generated reference names the command that writes it', () => {
    const dir = tree({ 'docs/reference/stages.md': '# Stage and resource types\n\nold\n' });
    const problems = checkGenerated(chatflow, dir);
    assert.equal(problems.length, 1);
    assert.match(problems[0], /^docs\/reference\/stages\.md:3: differs from `chatflow stages --markdown`.*run: build\/chatflow stages --markdown > docs\/reference\/stages\.md$/);
  });

  test('a missing command or option, an unknown command and an unknown option', () => {
    const cli = tree({}).concat('/docs/cli.md');
    const text = fs.readFileSync(cli, 'utf8').replace(/^chatflow detokenize .*$/m, '').replace(/\[--answer-words\] /, '');
    const dir = tree({
      'docs/cli.md': text,
      'README.md': '# x\n\n[cli](docs/cli.md) [ref](docs/reference/stages.md)\n\n```sh\n$ chatflow frobnicate --fast\n' +
        'chatflow serve --port 8000 \\\n  --no-such-flag\n```\n\nOr `chatflow bench --url http://h --lenght 3`.\n',
    });
    const problems = checkCommands(chatflow, readDocs(dir));
    assert.deepEqual(problems.sort(), [
      'README.md:11: `chatflow bench` has no option --lenght',
      'README.md:6: `chatflow frobnicate` is not a command (`chatflow --help` lists them)',
      'README.md:7: `chatflow serve` has no option --no-such-flag',
      "docs/cli.md: `chatflow similarity`'s option --answer-words (in `chatflow similarity --help`) is not documented",
      'docs/cli.md: the command `chatflow detokenize` (in `chatflow --help`) is not documented',
    ]);
  });

  test('a metric the server does not export', () => {
    const dir = tree({ 'docs/operations.md': '# Ops\n\nAlert on\n\n```\nrate(chatflow:made_up_total[5m]) > 0\n```\n\nand `chatflow:kv_cache_usage_perc_bucket`.\n' });
    assert.deepEqual(checkMetrics(chatflow, readDocs(dir), dir), [
      'docs/operations.md:6: chatflow:made_up_total is not a metric the server exports (framework/server/exported_metrics.h; docs/reference/metrics.md lists them)',
      'docs/operations.md:9: chatflow:kv_cache_usage_perc_bucket is not a metric the server exports (framework/server/exported_metrics.h; docs/reference/metrics.md lists them)',
    ]);
  });

  test('an unknown type or key in YAML, at its line and column; what a fragment leaves out is not an error', () => {
    const dir = tree({
      'docs/pipelines.md': [
        '# Pipelines', '',
        '```yaml', 'version: 1', 'stages:', '  - {name: echo, type: echo, config: {word_per_chunk: 2}}', '```', '',
        '```yaml', '- name: gate', '  type: rate_limt', '```', '',
        '```yaml', 'resources:', '  llm:', '    type: gguf_model', '    scheduler: {max_seqs: 0}', '```', '',
        '```yaml', '- name: trim', '  type: history_trim', '  config: {store: history}', '```', '',
        '<!-- docs-test: invalid -->', '```yaml', 'version: 1', 'stages:', '  - {name: echo, type: echo}', '```', '',
        '<!-- docs-test: skip -->', '```yaml', 'version: 1', 'stages:', '  - {name: mine, type: my_plugin_stage}', '```', '',
        '```yaml', 'version: 1', 'plugins:', '  - build/plugins/libnot_built.so', 'stages:', '  - {name: mine, type: my_plugin_stage}', '```', '',
      ].join('\n'),
    });
    const { problems, counts } = checkYaml(chatflow, readDocs(dir), dir);
    assert.equal(problems.length, 4, problems.join('\n'));
    assert.match(problems[0], /^docs\/pipelines\.md:6:39: \(YAML pipeline\) stage 'echo' \(echo\): unknown key 'word_per_chunk'; did you mean 'words_per_chunk'\?/);
    assert.match(problems[1], /^docs\/pipelines\.md:11:9: \(YAML stage list\) stage 'gate': unknown stage type 'rate_limt'; did you mean 'rate_limit'\?/);
    assert.match(problems[2], /^docs\/pipelines\.md:18:\d+: \(YAML pipeline fragment\) resource 'llm' \(gguf_model\): key 'scheduler.max_seqs' must be between 1 and 4096, got 0$/);
    assert.match(problems[3], /^docs\/pipelines\.md:29: the block is marked <!-- docs-test: invalid --> but chatflow accepts it$/);
    assert.equal(counts.skipped, 1);
    assert.equal(counts['needs a plugin not built here'], 1);
  });

  test('a link to a missing file or heading, and a guide page README does not link', () => {
    const dir = tree({
      'README.md': '# Top\n\n[cli](docs/cli.md) and [gone](docs/gone.md), [bad anchor](docs/cli.md#no-such-heading), ' +
        '[good anchor](#top), [web](https://example.com/x.md), `[not a link](nowhere.md)`, [ref](docs/reference/stages.md#auth)\n',
      'docs/orphan.md': '# Orphan\n\n[back](../README.md#top) [up](../../outside.md)\n',
    });
    assert.deepEqual(checkLinks(readDocs(dir), dir), [
      'README.md:3: the link docs/gone.md points to docs/gone.md, which does not exist',
      'README.md:3: the link docs/cli.md#no-such-heading: docs/cli.md has no heading with the anchor #no-such-heading',
      'docs/orphan.md:3: the link ../../outside.md points outside the repository',
      'docs/orphan.md: not linked from README.md (every guide page is one click away from it)',
      'docs/reference/metrics.md: no docs file links to it',
    ]);
  });
});

test('heading anchors are GitHub\'s', () => {
  assert.equal(slug('Agents: tools the pipeline runs'), 'agents-tools-the-pipeline-runs');
  assert.equal(slug('Speed: `chatflow bench-retrieval`'), 'speed-chatflow-bench-retrieval');
  assert.equal(slug('ab_split'), 'ab_split');
  assert.equal(slug('A/B experiments — per arm'), 'ab-experiments--per-arm');
  assert.equal(slug('[Models](models.md) and *quantisation*'), 'models-and-quantisation');
});
