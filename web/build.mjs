// Bundles the chat page and the dashboard: src/chat.js and src/dashboard.js (with the CSS they
// import) become <out>/assets/<name>-<hash>.js|css, and the HTML templates get <script> and
// <link> tags naming them. No inline script or style anywhere: the server's CSP forbids both.
// A rebuild under a running server never leaves a page naming a missing file: the new assets
// are written first, each HTML file is replaced by a rename, and only hashed files older than
// the previous build are removed (a page loaded just before the rebuild still finds its own).
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
// The previous build is what the pages name now.
const previous = new Set(pages.flatMap((page) => {
  try {
    return namedIn(fs.readFileSync(path.join(out, page.output), 'utf8'));
  } catch {
    return [];
  }
}));

const result = await build({
  entryPoints: pages.map((page) => path.join(here, 'src', `${page.entry}.js`)),
  bundle: true,
  format: 'esm',
  splitting: false,
  minify: true,
  sourcemap: false,
  target: ['es2022'],
  outdir: assets,
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});

// The files each entry produced, by extension.
const produced = {};
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  if (!meta.entryPoint) continue;
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
const current = new Set(Object.keys(result.metafile.outputs).map((file) => path.basename(file)));
const hashed = /-[A-Za-z0-9]{8,}\.[a-z0-9]+$/;
for (const name of fs.readdirSync(assets)) {
  if (hashed.test(name) && !current.has(name) && !previous.has(name)) fs.rmSync(path.join(assets, name), { force: true });
}
const sizes = [...current].map((name) => `${name} ${(fs.statSync(path.join(assets, name)).size / 1024).toFixed(1)} KiB`);
console.log(`web UI written to ${out}: ${sizes.join(', ')}`);
