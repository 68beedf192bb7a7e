// Bundles the chat page and the dashboard: src/chat.js and src/dashboard.js (with the CSS they
// import) become <out>/assets/<name>-<hash>.js|css, and the HTML templates get <script> and
// <link> tags naming them. No inline script or style anywhere: the server's CSP forbids both.
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
// Old hashed files would pile up with every rebuild.
fs.rmSync(assets, { recursive: true, force: true });
fs.mkdirSync(assets, { recursive: true });

const pages = [
  { entry: 'chat', template: 'chat.html', output: 'index.html' },
  { entry: 'dashboard', template: 'dashboard.html', output: 'dashboard.html' },
];

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
  fs.writeFileSync(path.join(out, page.output), template.replace('<!-- assets -->', tags));
}
const sizes = fs.readdirSync(assets).map((name) => `${name} ${(fs.statSync(path.join(assets, name)).size / 1024).toFixed(1)} KiB`);
console.log(`web UI written to ${out}: ${sizes.join(', ')}`);
