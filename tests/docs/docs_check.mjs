// The documentation (README.md and docs/**/*.md) checked against the code, by the built
// `chatflow` itself. Each check returns its problems as "FILE:LINE: what is wrong" strings;
// docs.test.mjs runs them on the tree, docs_check.test.mjs on small broken copies.
//
// What is checked, and the rules that keep false alarms out:
// - docs/reference/stages.md and metrics.md are exactly what `chatflow stages --markdown` and
//   `chatflow stages --metrics-markdown` print.
// - Commands: every command (and subcommand) `chatflow --help` lists, and every option its
//   `--help` lists, appears in docs/cli.md; every `chatflow WORD` written as a command in a code
//   block or an inline code span anywhere in the docs names a command, and the `--options` on
//   that command line are options it has. Only a chatflow where a shell would run it counts (first
//   on the line, after ; | & ( ` or VAR=value, sudo, env...), so `createdb --owner chatflow
//   chatflow` and output such as "this chatflow has ABI 1.1" are not commands; prose without
//   backticks is not read. Placeholders in capitals (`chatflow COMMAND`) are not commands.
// - Metrics: every `chatflow:NAME` anywhere in the docs (and in framework/, stages/, web/src/)
//   is a metric the server exports (`NAME_bucket`, `_sum`, `_count` of a histogram too;
//   `chatflow:tenant_*` must match one). A Redis key such as `chatflow:ratelimit:x` or a URL's
//   `chatflow:secret@` is not a metric name.
// - YAML: each ```yaml block shaped like a pipeline is checked by `chatflow graph` (the
//   pipeline reader and every type's schema, without building anything). A block with
//   `version:` and `stages:` is a whole pipeline: every error counts. Any other pipeline-shaped
//   block is a fragment (a list of stages, one stage, `resources:` alone, one resource, or a
//   mapping of resources), completed around itself; only errors about what it does write count
//   (an unknown type, key or top-level key, a value of the wrong type or out of range, bad
//   YAML), not about what it leaves out (required keys, the resources it names, edges).
//   Blocks of other shapes (serve files, keys files, JSON Schemas) are not checked. A block
//   whose `plugins:` names a library that is not built (paths from the repository's root) is
//   skipped. An HTML comment
//   `<!-- docs-test: skip -->` on a line just before the fence skips a block;
//   `<!-- docs-test: invalid -->` says the block is meant to be wrong, and then it must fail.
//   ${VAR} references are set to "1" for the check (${VAR:-default} keeps its default).
// - Links: every relative link of the docs points to a file or folder of the repository and,
//   for a Markdown file, to a heading (or <a id>) that exists in it; every docs/*.md file is
//   linked from README.md, and every docs/reference/*.md from some docs file.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// ---- running chatflow ----

export function runChatflow(chatflow, args, { env = {}, cwd, allowFailure = false } = {}) {
  const environment = { ...process.env, ...env };
  delete environment.CHATFLOW_PLUGIN_PATH;  // built-in types only
  const result = spawnSync(chatflow, args, { encoding: 'utf8', env: environment, cwd, maxBuffer: 64 << 20 });
  if (result.error) throw result.error;
  if (result.status !== 0 && !allowFailure) {
    throw new Error(`chatflow ${args.join(' ')} exited ${result.status}:\n${result.stderr}`);
  }
  return result;
}

// ---- reading the docs ----

// README.md and every .md file under docs/, as { file (relative to root), text }.
export function readDocs(root) {
  const files = [];
  if (fs.existsSync(path.join(root, 'README.md'))) files.push('README.md');
  const walk = (dir) => {
    const absolute = path.join(root, dir);
    if (!fs.existsSync(absolute)) return;
    for (const entry of fs.readdirSync(absolute, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const relative = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(relative);
      else if (entry.name.endsWith('.md')) files.push(relative);
    }
  };
  walk('docs');
  return files.map((file) => ({ file, text: fs.readFileSync(path.join(root, file), 'utf8') }));
}

// GitHub's heading anchor: the heading's text (markup removed), lower case, without punctuation
// other than '-' and '_', spaces as '-'.
export function slug(heading) {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')  // links: their text
    .replace(/<[^>]+>/g, '')                     // HTML tags
    .replace(/[`*]/g, '');
  return text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
}

// One pass over a Markdown file: fenced code blocks, headings (with their anchors), links and
// inline code spans outside code blocks, and where each is (1-based lines).
export function parseMarkdown(text) {
  const lines = text.split('\n');
  const blocks = [];
  const headings = [];
  const anchors = new Set();
  const links = [];
  const inlineCode = [];
  const seen = new Map();
  const addHeading = (title, line) => {
    let anchor = slug(title);
    const count = seen.get(anchor) ?? 0;
    seen.set(anchor, count + 1);
    if (count > 0) anchor = `${anchor}-${count}`;
    headings.push({ title, anchor, line });
    anchors.add(anchor);
  };
  let fence = null;
  let paragraph = false;  // the previous line is paragraph text (a setext heading's title)
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (fence) {
      const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(line);
      if (close && close[1][0] === fence.marker[0] && close[1].length >= fence.marker.length) {
        blocks.push(fence);
        fence = null;
      } else {
        fence.lines.push(line);
      }
      continue;
    }
    const open = /^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)(.*)$/.exec(line);
    if (open) {
      fence = { marker: open[2], info: open[3].toLowerCase(), startLine: i + 1, lines: [], indent: open[1].length,
                markers: precedingMarkers(lines, i) };
      paragraph = false;
      continue;
    }
    const atx = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (atx) {
      addHeading(atx[2], i + 1);
      paragraph = false;
    } else if (paragraph && /^ {0,3}(=+|-+)\s*$/.test(line)) {
      addHeading(lines[i - 1].trim(), i);
      paragraph = false;
      continue;
    } else {
      paragraph = line.trim() !== '' && !/^\s*([|>*+-]|\d+\.)\s/.test(line) && !line.trim().startsWith('|');
    }
    for (const match of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1]);
    // Inline code first, so a link inside a code span is not taken for a link.
    const codeless = line.replace(/(`+)(.+?)\1/g, (whole, ticks, content) => {
      inlineCode.push({ text: content.trim(), line: i + 1 });
      return ' '.repeat(whole.length);
    });
    for (const match of codeless.matchAll(/!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ target: match[1].replace(/^<|>$/g, ''), line: i + 1 });
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*(\S+)/.exec(codeless);
    if (definition) links.push({ target: definition[1].replace(/^<|>$/g, ''), line: i + 1 });
  }
  if (fence) blocks.push(fence);  // an unclosed fence runs to the end, as CommonMark reads it
  return { blocks, headings, anchors, links, inlineCode };
}

// The `<!-- docs-test: ... -->` markers on the lines just before line `index` (blank lines
// between them allowed).
function precedingMarkers(lines, index) {
  const markers = [];
  for (let j = index - 1; j >= 0 && j >= index - 4; j--) {
    const marker = /^\s*<!--\s*docs-test:\s*([a-z-]+)/.exec(lines[j]);
    if (marker) markers.push(marker[1]);
    else if (lines[j].trim() !== '') break;
  }
  return markers;
}

// ---- generated references ----

export function checkGenerated(chatflow, root) {
  const problems = [];
  for (const [file, flag] of [['docs/reference/stages.md', '--markdown'], ['docs/reference/metrics.md', '--metrics-markdown']]) {
    const expected = runChatflow(chatflow, ['stages', flag]).stdout;
    const fix = `run: build/chatflow stages ${flag} > ${file}`;
    const absolute = path.join(root, file);
    if (!fs.existsSync(absolute)) {
      problems.push(`${file}: missing; ${fix}`);
      continue;
    }
    const actual = fs.readFileSync(absolute, 'utf8');
    if (actual === expected) continue;
    const a = actual.split('\n');
    const b = expected.split('\n');
    let line = 0;
    while (line < a.length && line < b.length && a[line] === b[line]) line++;
    problems.push(`${file}:${line + 1}: differs from \`chatflow stages ${flag}\` (file: ${JSON.stringify(a[line] ?? '<end>')}, ` +
                  `command: ${JSON.stringify(b[line] ?? '<end>')}); ${fix}`);
  }
  return problems;
}

// ---- commands ----

// `chatflow [COMMAND] --help`'s subcommands and options (each option as the list of its names).
function parseHelp(text) {
  const subcommands = [];
  const options = [];
  let section = '';
  for (const line of text.split('\n')) {
    const heading = /^(\w[\w ]*):\s*$/.exec(line);
    if (heading) {
      section = heading[1];
      continue;
    }
    if (section === 'Subcommands') {
      const entry = /^ {2}([a-z][a-z0-9-]*)\s/.exec(line);
      if (entry) subcommands.push(entry[1]);
    } else if (section === 'Options') {
      // "  -o,--out TEXT", "  --ignore-eos,--no-ignore-eos{false}": the names of one option.
      const names = /^ {2}(-\S+)/.exec(line);
      if (names) {
        const group = [...names[1].matchAll(/--([a-z][a-z0-9-]*)/g)].map((name) => `--${name[1]}`);
        if (group.length && !group.includes('--help')) options.push(group);
      }
    }
  }
  return { subcommands, options };
}

// { name: { options: [...], subcommands: { name: { options } } } } from the help texts.
export function commandTable(chatflow) {
  const table = {};
  for (const name of parseHelp(runChatflow(chatflow, ['--help']).stdout).subcommands) {
    const help = parseHelp(runChatflow(chatflow, [name, '--help']).stdout);
    const entry = { options: help.options, subcommands: {} };
    for (const sub of help.subcommands) {
      entry.subcommands[sub] = { options: parseHelp(runChatflow(chatflow, [name, sub, '--help']).stdout).options };
    }
    table[name] = entry;
  }
  return table;
}

// Command lines that run chatflow in the docs: in code blocks (with continuation lines) and
// inline code spans. Each as { file, line, command, words (after the command), options }.
export function commandLines(docs) {
  const found = [];
  // chatflow where a shell runs a command: first on the line or after ; | & ( ` $(, past
  // variable assignments and sudo, exec, time, nohup or env (not `createdb --owner chatflow`).
  const invocation =
    /(?:^|[;|&(`])\s*(?:(?:sudo|exec|time|nohup|env)\s+|[A-Za-z_]\w*=\S*\s+)*(?:[\w./-]*\/)?chatflow\s+([a-z][a-z0-9-]*)(.*)$/;
  const add = (file, line, text) => {
    const match = invocation.exec(text);
    if (!match) return;
    const rest = match[2];
    found.push({
      file, line, command: match[1],
      words: rest.trim().split(/\s+/).filter(Boolean),
      options: [...rest.matchAll(/(?:^|[\s[(|])(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]),
    });
  };
  const stripComment = (text) => text.replace(/(^|\s)#(?!!).*$/, '');
  for (const { file, text } of docs) {
    const { blocks, inlineCode } = parseMarkdown(text);
    for (const block of blocks) {
      if (!['', 'sh', 'bash', 'shell', 'console', 'text', 'sh-session', 'shell-session'].includes(block.info)) continue;
      for (let i = 0; i < block.lines.length; i++) {
        let command = stripComment(block.lines[i].replace(/^\s*\$\s+/, ''));
        if (!invocation.test(command)) continue;
        const column = block.lines[i].search(/\S/);
        const startLine = block.startLine + 1 + i;
        // Continuation: a trailing backslash, or lines indented past the command's start that
        // go on with more options ("[--x N]", "--y", "(a | b)").
        while (i + 1 < block.lines.length) {
          const next = block.lines[i + 1];
          const continued = /\\\s*$/.test(command) ||
            (next.search(/\S/) > column && /^\s*[[(-]/.test(next));
          if (!continued) break;
          command = command.replace(/\\\s*$/, ' ') + ' ' + stripComment(next);
          i++;
        }
        add(file, startLine, command);
      }
    }
    for (const code of inlineCode) add(file, code.line, code.text);
  }
  return found;
}

export function checkCommands(chatflow, docs) {
  const problems = [];
  const table = commandTable(chatflow);
  const cli = docs.find((doc) => doc.file === 'docs/cli.md');
  const lines = commandLines(docs);
  if (!cli) {
    problems.push('docs/cli.md: missing (every command and its options are documented there)');
  } else {
    const mentioned = new Set(lines.filter((l) => l.file === 'docs/cli.md').map((l) => l.command));
    for (const [name, entry] of Object.entries(table)) {
      if (!mentioned.has(name)) {
        problems.push(`docs/cli.md: the command \`chatflow ${name}\` (in \`chatflow --help\`) is not documented`);
      }
      const options = [...entry.options, ...Object.values(entry.subcommands).flatMap((s) => s.options)];
      for (const sub of Object.keys(entry.subcommands)) {
        if (!new RegExp(`chatflow ${name} (\\S*\\|)?${sub}\\b`).test(cli.text)) {
          problems.push(`docs/cli.md: \`chatflow ${name} ${sub}\` (in \`chatflow ${name} --help\`) is not documented`);
        }
      }
      for (const names of options) {
        if (!names.some((option) => new RegExp(`(^|[^\\w-])${option}(?![\\w-])`, 'm').test(cli.text))) {
          problems.push(`docs/cli.md: \`chatflow ${name}\`'s option ${names.join(',')} (in \`chatflow ${name} --help\`) is not documented`);
        }
      }
    }
  }
  for (const line of lines) {
    const entry = table[line.command];
    if (!entry) {
      problems.push(`${line.file}:${line.line}: \`chatflow ${line.command}\` is not a command (\`chatflow --help\` lists them)`);
      continue;
    }
    const options = new Set(['--help', ...entry.options.flat(), ...Object.values(entry.subcommands).flatMap((s) => s.options.flat())]);
    for (const option of line.options) {
      if (!options.has(option)) {
        problems.push(`${line.file}:${line.line}: \`chatflow ${line.command}\` has no option ${option}`);
      }
    }
  }
  return problems;
}

// ---- metrics ----

// The names `chatflow stages --metrics-markdown` lists, with their types.
export function exportedMetrics(chatflow) {
  const metrics = new Map();
  const text = runChatflow(chatflow, ['stages', '--metrics-markdown']).stdout;
  for (const match of text.matchAll(/^\| `(chatflow:[a-z0-9_]+)` \| (\w+)/gm)) metrics.set(match[1], match[2]);
  return metrics;
}

const metricReference = /(?<![\w/@.:-])chatflow:([a-z][a-z0-9_]*)(\*)?(?![\w@:])/g;

function unknownMetric(name, wildcard, metrics) {
  const full = `chatflow:${name}`;
  if (wildcard) return ![...metrics.keys()].some((metric) => metric.startsWith(full));
  if (metrics.has(full)) return false;
  const series = /^(.*)_(bucket|sum|count)$/.exec(full);
  return !(series && metrics.get(series[1]) === 'histogram');
}

export function checkMetrics(chatflow, docs, root) {
  const problems = [];
  const metrics = exportedMetrics(chatflow);
  if (metrics.size === 0) return ['`chatflow stages --metrics-markdown` lists no metrics'];
  const sources = [];
  const walk = (dir) => {
    const absolute = path.join(root, dir);
    if (!fs.existsSync(absolute)) return;
    for (const entry of fs.readdirSync(absolute, { withFileTypes: true })) {
      const relative = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules') walk(relative);
      } else if (/\.(cpp|h|js|mjs|html)$/.test(entry.name)) {
        sources.push({ file: relative, text: fs.readFileSync(path.join(root, relative), 'utf8') });
      }
    }
  };
  for (const dir of ['framework', 'stages', 'web/src']) walk(dir);
  for (const { file, text } of [...docs, ...sources]) {
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      for (const match of line.matchAll(metricReference)) {
        if (unknownMetric(match[1], match[2], metrics)) {
          problems.push(`${file}:${i + 1}: chatflow:${match[1]}${match[2] ?? ''} is not a metric the server exports ` +
                        '(framework/server/exported_metrics.h; docs/reference/metrics.md lists them)');
        }
      }
    });
  }
  return problems;
}

// ---- YAML ----

const pipelineKeys = ['version', 'name', 'description', 'max_in_flight', 'plugins', 'resources', 'stages', 'edges'];
const jsonSchemaTypes = new Set(['string', 'number', 'integer', 'boolean', 'object', 'array', 'null']);
const reportedInFragments = /unknown (stage |resource )?type|unknown (top-level |stage )?key|expects |must be |is out of range|invalid YAML|duplicate key|malformed environment reference/;

export function registeredTypes(chatflow) {
  const text = runChatflow(chatflow, ['stages', '--markdown']).stdout;
  const section = (heading) => {
    const start = text.indexOf(`\n## ${heading}\n`);
    const end = text.indexOf('\n## ', start + 1);
    return new Set([...text.slice(start, end).matchAll(/^\| \[`([a-z0-9_]+)`\]/gm)].map((m) => m[1]));
  };
  return { stages: section('Stage types'), resources: section('Resource types') };
}

function dedent(lines) {
  const indents = lines.filter((l) => l.trim() !== '').map((l) => l.search(/\S/));
  const common = indents.length ? Math.min(...indents) : 0;
  return lines.map((l) => l.slice(Math.min(common, l.search(/\S/) < 0 ? l.length : common)));
}

const indentAll = (lines, n) => lines.map((l) => (l.trim() === '' ? l : ' '.repeat(n) + l));

// How to check a YAML block: { kind, text (what chatflow reads), prefix (lines added before
// the block), indent (columns added), whole (every error counts) }, or { kind: 'other' }.
export function shapeOf(blockLines, types) {
  const lines = dedent(blockLines);
  const content = lines.filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
  if (content.length === 0) return { kind: 'other' };
  const topKeys = content.map((l) => /^([A-Za-z_][\w-]*)\s*:/.exec(l)?.[1]).filter(Boolean);
  const typeValue = (line) => /^\s*type:\s*["']?([\w-]+)/.exec(line)?.[1];
  const echo = ['stages:', '  - {name: docs_test_echo, type: echo}'];
  if (topKeys.length && topKeys.every((k) => pipelineKeys.includes(k)) &&
      (topKeys.includes('stages') || topKeys.includes('resources'))) {
    const whole = topKeys.includes('version') && topKeys.includes('stages');
    const prefix = topKeys.includes('version') ? [] : ['version: 1'];
    const suffix = topKeys.includes('stages') ? [] : echo;
    return { kind: whole ? 'pipeline' : 'pipeline fragment', text: [...prefix, ...lines, ...suffix].join('\n'),
             prefix: prefix.length, indent: 0, whole };
  }
  if (/^- /.test(content[0])) {
    if (!/\b(name|type):/.test(content[0])) return { kind: 'other' };
    return { kind: 'stage list', text: ['version: 1', 'stages:', ...indentAll(lines, 2)].join('\n'), prefix: 2, indent: 2 };
  }
  if (topKeys.includes('type')) {
    const type = typeValue(content.find((l) => /^type:/.test(l)));
    const asStage = types.stages.has(type) || (!types.resources.has(type) && topKeys.includes('name') &&
      topKeys.every((k) => ['name', 'type', 'config', 'concurrency'].includes(k)));
    if (asStage) {
      return { kind: 'stage', text: ['version: 1', 'stages:', '  -', ...indentAll(lines, 4)].join('\n'), prefix: 3, indent: 4 };
    }
    if (types.resources.has(type)) {
      return { kind: 'resource', text: ['version: 1', 'resources:', '  docs_test_resource:', ...indentAll(lines, 4), ...echo].join('\n'),
               prefix: 3, indent: 4 };
    }
    return { kind: 'other' };
  }
  // A mapping of resources: every top-level key is a mapping with a `type:` that is no JSON
  // Schema type.
  const entries = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^[A-Za-z_][\w-]*\s*:/.test(lines[i])) continue;
    const inline = /\{\s*type:\s*["']?([\w-]+)/.exec(lines[i]);
    let type = inline?.[1];
    for (let j = i + 1; !type && j < lines.length && !/^\S/.test(lines[j]); j++) {
      if (/^ {2}type:/.test(lines[j])) type = typeValue(lines[j]);
    }
    entries.push(type);
  }
  if (entries.length && entries.every((t) => t && !jsonSchemaTypes.has(t))) {
    return { kind: 'resources', text: ['version: 1', 'resources:', ...indentAll(lines, 2), ...echo].join('\n'), prefix: 2, indent: 2 };
  }
  return { kind: 'other' };
}

// The libraries a pipeline's `plugins:` names, in flow (`[a, b]`) or block (`- a`) style.
function pluginsOf(text) {
  const lines = text.split('\n');
  const start = lines.findIndex((line) => /^plugins:/.test(line));
  if (start < 0) return [];
  const flow = /^plugins:\s*\[([^\]]*)\]/.exec(lines[start]);
  const items = flow ? flow[1].split(',') : [];
  for (let i = start + 1; !flow && i < lines.length && /^\s+-/.test(lines[i]); i++) items.push(lines[i].replace(/^\s+-/, ''));
  return items.map((item) => item.trim().replace(/^["']|["']$/g, '')).filter(Boolean);
}

export function checkYaml(chatflow, docs, root) {
  const problems = [];
  const types = registeredTypes(chatflow);
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'chatflow-docs-'));
  const counts = {};
  try {
    let n = 0;
    for (const { file, text } of docs) {
      if (file.startsWith('docs/reference/')) continue;
      for (const block of parseMarkdown(text).blocks) {
        if (!['yaml', 'yml'].includes(block.info)) continue;
        const where = `${file}:${block.startLine + 1}`;
        if (block.markers.includes('skip')) {
          counts.skipped = (counts.skipped ?? 0) + 1;
          continue;
        }
        const invalid = block.markers.includes('invalid');
        let shape = shapeOf(block.lines, types);
        if (invalid && shape.kind === 'other') {
          shape = { kind: 'pipeline', text: block.lines.join('\n'), prefix: 0, indent: 0, whole: true };
        }
        const missingPlugin = pluginsOf(shape.text ?? '').find((plugin) => !fs.existsSync(path.join(root, plugin)));
        if (missingPlugin) shape = { kind: 'needs a plugin not built here' };
        counts[shape.kind] = (counts[shape.kind] ?? 0) + 1;
        if (!shape.text) continue;
        const yamlFile = path.join(scratch, `block-${++n}.yaml`);
        fs.writeFileSync(yamlFile, shape.text + '\n');
        const env = {};
        for (const match of shape.text.matchAll(/\$\{([A-Za-z_]\w*)\}/g)) env[match[1]] = '1';
        // From the repository's root, where the docs' relative plugin paths start.
        const result = runChatflow(chatflow, ['graph', yamlFile, '--format', 'mermaid'], { env, cwd: root, allowFailure: true });
        const errors = [];
        for (const line of result.stderr.split('\n')) {
          const error = /^(.*?):(\d+):(\d+): error: (.*)$/.exec(line);
          if (!error || error[1] !== yamlFile) {
            if (line.trim() && !error) errors.push({ line: 0, column: 0, message: line.trim() });
            continue;
          }
          errors.push({ line: Number(error[2]), column: Number(error[3]), message: error[4] });
        }
        if (invalid) {
          if (result.status === 0) problems.push(`${where}: the block is marked <!-- docs-test: invalid --> but chatflow accepts it`);
          continue;
        }
        for (const error of errors) {
          if (!shape.whole && !reportedInFragments.test(error.message)) continue;
          const line = error.line > shape.prefix ? block.startLine + error.line - shape.prefix : block.startLine + 1;
          const column = Math.max(1, error.column - shape.indent + block.indent);
          problems.push(`${file}:${line}:${column}: (YAML ${shape.kind}) ${error.message}`);
        }
        if (shape.whole && result.status !== 0 && errors.length === 0) {
          problems.push(`${where}: chatflow graph refused the pipeline:\n${result.stderr}`);
        }
      }
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  return { problems, counts };
}

// ---- links ----

export function checkLinks(docs, root) {
  const problems = [];
  const parsed = new Map(docs.map(({ file, text }) => [file, parseMarkdown(text)]));
  const anchorsOf = (file) => {
    if (!parsed.has(file)) {
      const absolute = path.join(root, file);
      parsed.set(file, parseMarkdown(fs.readFileSync(absolute, 'utf8')));
    }
    return parsed.get(file).anchors;
  };
  const linkedFrom = new Map();
  for (const { file } of docs) {
    for (const { target, line } of parsed.get(file).links) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) continue;  // http:, mailto:
      const [pathPart, anchor] = target.split('#', 2);
      let decoded = pathPart;
      try {
        decoded = decodeURIComponent(pathPart);
      } catch {
        // kept as written: a '%' that is no escape
      }
      const resolved = decoded === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), decoded));
      const where = `${file}:${line}`;
      if (resolved.startsWith('../') || path.posix.isAbsolute(resolved)) {
        problems.push(`${where}: the link ${target} points outside the repository`);
        continue;
      }
      const absolute = path.join(root, resolved);
      if (!fs.existsSync(absolute)) {
        problems.push(`${where}: the link ${target} points to ${resolved}, which does not exist`);
        continue;
      }
      if (resolved !== file) {
        if (!linkedFrom.has(resolved)) linkedFrom.set(resolved, new Set());
        linkedFrom.get(resolved).add(file);
      }
      if (anchor !== undefined && resolved.endsWith('.md') && fs.statSync(absolute).isFile() &&
          !anchorsOf(resolved).has(anchor)) {
        problems.push(`${where}: the link ${target}: ${resolved} has no heading with the anchor #${anchor}`);
      }
    }
  }
  for (const { file } of docs) {
    if (/^docs\/[^/]+\.md$/.test(file) && !linkedFrom.get(file)?.has('README.md')) {
      problems.push(`${file}: not linked from README.md (every guide page is one click away from it)`);
    }
    if (file.startsWith('docs/reference/') && !linkedFrom.has(file)) {
      problems.push(`${file}: no docs file links to it`);
    }
  }
  return problems;
}
