// The languages highlight.js knows on the chat page. Nine common ones are in the page's bundle;
// the rest are separate files (esbuild chunks) fetched the first time an answer names them, so
// a page that never shows Haskell never downloads it. A fence's info string may name a language
// by an alias (rs, py, sh, golang, ...): the table below maps every alias to the file to fetch
// before highlight.js itself knows it.
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import cpp from 'highlight.js/lib/languages/cpp';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

for (const [name, language] of Object.entries({ bash, cpp, javascript, json, python, sql, typescript, xml, yaml })) {
  hljs.registerLanguage(name, language);
}

// Each loader names its module literally: esbuild makes one chunk per dynamic import it sees.
const loaders = {
  apache: () => import('highlight.js/lib/languages/apache'),
  c: () => import('highlight.js/lib/languages/c'),
  clojure: () => import('highlight.js/lib/languages/clojure'),
  cmake: () => import('highlight.js/lib/languages/cmake'),
  csharp: () => import('highlight.js/lib/languages/csharp'),
  css: () => import('highlight.js/lib/languages/css'),
  dart: () => import('highlight.js/lib/languages/dart'),
  diff: () => import('highlight.js/lib/languages/diff'),
  dockerfile: () => import('highlight.js/lib/languages/dockerfile'),
  elixir: () => import('highlight.js/lib/languages/elixir'),
  erlang: () => import('highlight.js/lib/languages/erlang'),
  fsharp: () => import('highlight.js/lib/languages/fsharp'),
  go: () => import('highlight.js/lib/languages/go'),
  graphql: () => import('highlight.js/lib/languages/graphql'),
  groovy: () => import('highlight.js/lib/languages/groovy'),
  haskell: () => import('highlight.js/lib/languages/haskell'),
  http: () => import('highlight.js/lib/languages/http'),
  ini: () => import('highlight.js/lib/languages/ini'),
  java: () => import('highlight.js/lib/languages/java'),
  julia: () => import('highlight.js/lib/languages/julia'),
  kotlin: () => import('highlight.js/lib/languages/kotlin'),
  latex: () => import('highlight.js/lib/languages/latex'),
  less: () => import('highlight.js/lib/languages/less'),
  lua: () => import('highlight.js/lib/languages/lua'),
  makefile: () => import('highlight.js/lib/languages/makefile'),
  markdown: () => import('highlight.js/lib/languages/markdown'),
  matlab: () => import('highlight.js/lib/languages/matlab'),
  nginx: () => import('highlight.js/lib/languages/nginx'),
  objectivec: () => import('highlight.js/lib/languages/objectivec'),
  ocaml: () => import('highlight.js/lib/languages/ocaml'),
  perl: () => import('highlight.js/lib/languages/perl'),
  php: () => import('highlight.js/lib/languages/php'),
  plaintext: () => import('highlight.js/lib/languages/plaintext'),
  powershell: () => import('highlight.js/lib/languages/powershell'),
  properties: () => import('highlight.js/lib/languages/properties'),
  protobuf: () => import('highlight.js/lib/languages/protobuf'),
  r: () => import('highlight.js/lib/languages/r'),
  ruby: () => import('highlight.js/lib/languages/ruby'),
  rust: () => import('highlight.js/lib/languages/rust'),
  scala: () => import('highlight.js/lib/languages/scala'),
  scss: () => import('highlight.js/lib/languages/scss'),
  shell: () => import('highlight.js/lib/languages/shell'),
  swift: () => import('highlight.js/lib/languages/swift'),
  vbnet: () => import('highlight.js/lib/languages/vbnet'),
  vim: () => import('highlight.js/lib/languages/vim'),
  wasm: () => import('highlight.js/lib/languages/wasm'),
  x86asm: () => import('highlight.js/lib/languages/x86asm'),
};

// Aliases of the lazily loaded languages (highlight.js's own, plus names models often write).
// The bundled languages' aliases highlight.js knows already.
const aliases = {
  apacheconf: 'apache', h: 'c', clj: 'clojure', edn: 'clojure', 'cmake.in': 'cmake', cs: 'csharp', 'c#': 'csharp',
  patch: 'diff', docker: 'dockerfile', ex: 'elixir', exs: 'elixir', erl: 'erlang', fs: 'fsharp', 'f#': 'fsharp',
  golang: 'go', gql: 'graphql', hs: 'haskell', https: 'http', toml: 'ini', cfg: 'ini', conf: 'ini', jsp: 'java',
  kt: 'kotlin', kts: 'kotlin', tex: 'latex', md: 'markdown', mkd: 'markdown', mk: 'makefile', mak: 'makefile',
  make: 'makefile', nginxconf: 'nginx', objc: 'objectivec', 'objective-c': 'objectivec', mm: 'objectivec',
  ml: 'ocaml', pl: 'perl', pm: 'perl', text: 'plaintext', txt: 'plaintext', plain: 'plaintext',
  ps1: 'powershell', ps: 'powershell', pwsh: 'powershell', proto: 'protobuf', rb: 'ruby', gemspec: 'ruby',
  rs: 'rust', sass: 'scss', console: 'shell', shellsession: 'shell', vb: 'vbnet', asm: 'x86asm', nasm: 'x86asm',
  wat: 'wasm', jl: 'julia',
};

const loading = new Map(); // language -> Promise of its registration

// Every language name the page can highlight, bundled or loaded on demand.
export function languageNames() {
  return [...new Set([...hljs.listLanguages(), ...Object.keys(loaders)])].sort();
}

// What a fence's language name means: { name, ready } where `ready` says highlight.js has it
// now, or null for a language the page does not know.
export function resolveLanguage(lang) {
  if (!lang) return null;
  const lower = lang.toLowerCase();
  if (hljs.getLanguage(lower)) return { name: lower, ready: true };
  const name = loaders[lower] ? lower : aliases[lower];
  if (!name) return null;
  return { name, ready: Boolean(hljs.getLanguage(name)) };
}

// Fetches and registers `name` (once); resolves when highlight.js knows it. A failed fetch
// (the server went away) is forgotten, so a later block asks again.
export function loadLanguage(name) {
  if (hljs.getLanguage(name)) return Promise.resolve(name);
  if (!loaders[name]) return Promise.reject(new Error(`no such language: ${name}`));
  if (!loading.has(name)) {
    const promise = loaders[name]().then((module) => {
      hljs.registerLanguage(name, module.default);
      return name;
    });
    promise.catch(() => loading.delete(name));
    loading.set(name, promise);
  }
  return loading.get(name);
}

export { hljs };
