// Bundles the chat page and the dashboard: src/chat.js and src/dashboard.js (with the CSS they
// import) become <out>/assets/<name>-<hash>.js|css, and the HTML templates get <script> and
// <link> tags naming them. No inline script or style anywhere: the server's CSP forbids both.
// A rebuild under a running server never leaves a page naming a missing file: the new assets
// are written first, each HTML file is replaced by a rename, and only hashed files older than
// the previous build are removed (a page loaded just before the rebuild still finds its own).
// Code split: what a page imports dynamically (highlight.js languages, KaTeX) becomes chunk
// files, fetched on first use, and so does esbuild's small runtime those chunks share with the
// page's entry; a page's HTML names its entry only (the browser follows its imports).
//   node web/build.mjs --out build/web
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const outFlag = process.argv.indexOf('--out');
if (outFlag < 0 || !process.argv[outFlag + 1]) {
  console.error('usage: node build.mjs --out <folder>');
  process.exit(2);
}
const out = path.resolve(process.argv[outFlag + 1]);
const assets = path.join(out, 'assets');
fs.mkdirSync(assets, { recursive: true });

const pages = [
  { entry: 'chat', template: 'chat.html', output: 'index.html' },
  { entry: 'dashboard', template: 'dashboard.html', output: 'dashboard.html' },
];

// The asset names an HTML file refers to.
const namedIn = (html) => [...html.matchAll(/\/assets\/([A-Za-z0-9._-]+)/g)].map((match) => match[1]);
// The previous build is what the pages name now, and every chunk those files import, however
// deep (esbuild writes a chunk's imports as "./name-HASH.js").
const previous = new Set();
const chunkImports = /["']\.\/([A-Za-z0-9._-]+\.js)["']/g;
const keepWithImports = (name) => {
  if (previous.has(name)) return;
  previous.add(name);
  if (!name.endsWith('.js')) return;
  let code = '';
  try {
    code = fs.readFileSync(path.join(assets, name), 'utf8');
  } catch {
    return;
  }
  for (const match of code.matchAll(chunkImports)) keepWithImports(match[1]);
};
for (const page of pages) {
  try {
    namedIn(fs.readFileSync(path.join(out, page.output), 'utf8')).forEach(keepWithImports);
  } catch {
    // no previous build of this page
  }
}

// One build per page: the pages then share no chunk (a chunk both import would be one more
// file on each page's first load), and a page's chunks are only its lazily loaded modules.
const outputs = {};
for (const page of pages) {
  const result = await build({
    entryPoints: [path.join(here, 'src', `${page.entry}.js`)],
    bundle: true,
    format: 'esm',
    splitting: true,
    minify: true,
    sourcemap: false,
    target: ['es2022'],
    outdir: assets,
    entryNames: '[name]-[hash]',
    chunkNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  Object.assign(outputs, result.metafile.outputs);
}

// The files each page's entry produced, by extension. A dynamically imported module is an
// entry point too, for esbuild, but not one of the pages'.
const produced = {};
const pageEntries = new Set(pages.map((page) => path.join(here, 'src', `${page.entry}.js`)));
for (const [file, meta] of Object.entries(outputs)) {
  if (!meta.entryPoint || !pageEntries.has(path.resolve(meta.entryPoint))) continue;
  const entry = path.basename(meta.entryPoint, '.js');
  produced[entry] = { js: path.basename(file), css: meta.cssBundle && path.basename(meta.cssBundle) };
}

for (const page of pages) {
  const files = produced[page.entry];
  if (!files) throw new Error(`esbuild produced nothing for ${page.entry}`);
  const tags = [
    files.css ? `<link rel="stylesheet" href="/assets/${files.css}">` : '',
    `<script type="module" src="/assets/${files.js}"></script>`,
  ].filter(Boolean).join('\n  ');
  const template = fs.readFileSync(path.join(here, 'src', page.template), 'utf8');
  if (!template.includes('<!-- assets -->')) throw new Error(`${page.template} lacks <!-- assets -->`);
  // A server reading the page mid-write would serve half of it: write aside, then rename.
  const target = path.join(out, page.output);
  const temporary = `${target}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, template.replace('<!-- assets -->', tags));
  fs.renameSync(temporary, target);
}

// Old hashed files would pile up with every rebuild: keep this build's and the previous one's.
// Only content-hashed names (what esbuild writes) are ours to remove.
const current = new Set(Object.keys(outputs).map((file) => path.basename(file)));
const hashed = /-[A-Za-z0-9]{8,}\.[a-z0-9]+$/;
for (const name of fs.readdirSync(assets)) {
  if (hashed.test(name) && !current.has(name) && !previous.has(name)) fs.rmSync(path.join(assets, name), { force: true });
}
const pageFiles = Object.values(produced).flatMap((files) => [files.js, files.css].filter(Boolean));
const sizes = pageFiles.map((name) => `${name} ${(fs.statSync(path.join(assets, name)).size / 1024).toFixed(1)} KiB`);
const lazy = [...current].filter((name) => !pageFiles.includes(name));
const lazyKiB = lazy.reduce((sum, name) => sum + fs.statSync(path.join(assets, name)).size, 0) / 1024;
console.log(`web UI written to ${out}: ${sizes.join(', ')}; ${lazy.length} chunks imported by them (${lazyKiB.toFixed(1)} KiB)`);
