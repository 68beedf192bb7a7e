// Markdown to safe HTML: markdown-it with raw HTML off, TeX math through KaTeX's MathML
// (math.js), highlight.js for fenced code (nine common languages bundled, ~40 more fetched on
// first use: languages.js), then DOMPurify, so nothing a model writes can run script, carry an
// event handler or link to javascript:. A block whose language or formula is still being
// fetched shows as plain text, marked, and is redrawn in place once it arrives.
import DOMPurify from 'dompurify';
import MarkdownIt from 'markdown-it';

import { hljs, loadLanguage, resolveLanguage } from './languages.js';
import { collectMath, loadKatex, mathHtml, mathPlugin, whenMathReady } from './math.js';

function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
}

// A fence's language that highlight.js does not know still names the block (its Copy head shows
// it): kept as a class when it is a plain name.
const plainLanguage = (lang) => (lang && /^[\w+#.-]{1,32}$/.test(lang) ? lang : null);
const plainCodeTag = (lang, waiting) => {
  const marker = waiting ? ` data-highlight="${waiting}"` : '';
  return plainLanguage(lang) ? `<code class="language-${plainLanguage(lang)}"${marker}>` : `<code${marker}>`;
};

// Highlighted HTML for `code` in `lang`, or null: unknown language, or one still being fetched
// (then `waiting` gets its name, and the fetch is started).
function highlighted(code, lang) {
  const language = resolveLanguage(lang);
  if (!language) return { html: null, waiting: null };
  if (!language.ready) {
    requestLanguage(language.name);
    return { html: null, waiting: language.name };
  }
  try {
    return { html: hljs.highlight(code, { language: language.name, ignoreIllegals: true }).value, waiting: null };
  } catch {
    return { html: null, waiting: null };
  }
}

const markdown = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  highlight(code, lang) {
    const { html, waiting } = highlighted(code, lang);
    if (html === null) return `<pre>${plainCodeTag(lang, waiting)}${escapeHtml(code)}</code></pre>`;
    return `<pre><code class="hljs language-${escapeHtml(lang)}">${html}</code></pre>`;
  },
});
markdown.use(mathPlugin);

// Links open in a new tab without handing it this page (and never run script: DOMPurify drops
// javascript: URLs, markdown-it refuses to make them in the first place).
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

// MathML for KaTeX's output; <semantics> and <annotation> (the TeX source, not drawn) are
// outside DOMPurify's MathML profile but inert.
const purifyOptions = {
  USE_PROFILES: { html: true, mathMl: true },
  ADD_TAGS: ['semantics', 'annotation'],
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select'],
  FORBID_ATTR: ['style'],
};

// HTML as the page lets it in: what markdown-it wrote goes through this (exported for the tests,
// which feed it markup markdown-it itself would never produce).
export function sanitizeHtml(html) {
  return DOMPurify.sanitize(html, purifyOptions);
}

export function renderMarkdown(text) {
  return sanitizeHtml(markdown.render(text));
}

// The same as nodes ready to insert: no second HTML parse through innerHTML (this runs once per
// animation frame while an answer streams).
// Formulas go in as nodes sanitised once each (by the same DOMPurify configuration) and cloned:
// markdown-it writes an empty marked span where each goes. Model text cannot write that span
// (raw HTML is off), and an unused one is removed.
const fragmentOptions = { ...purifyOptions, RETURN_DOM_FRAGMENT: true };
const formulaNodes = new Map(); // KaTeX's HTML -> its sanitised nodes
const formulaNodesLimit = 300;
function formulaFragment(html) {
  let nodes = formulaNodes.get(html);
  if (!nodes) {
    nodes = DOMPurify.sanitize(html, fragmentOptions);
    if (formulaNodes.size >= formulaNodesLimit) formulaNodes.delete(formulaNodes.keys().next().value);
    formulaNodes.set(html, nodes);
  }
  return nodes.cloneNode(true);
}

export function renderMarkdownFragment(text) {
  const formulas = [];
  collectMath((html) => {
    formulas.push(html);
    return `<span data-formula="${formulas.length - 1}"></span>`;
  });
  let html;
  try {
    html = markdown.render(text);
  } finally {
    collectMath(null);
  }
  const fragment = DOMPurify.sanitize(html, fragmentOptions);
  for (const slot of fragment.querySelectorAll('span[data-formula]')) {
    const formula = formulas[Number(slot.dataset.formula)];
    if (formula === undefined) slot.remove();
    else slot.replaceWith(formulaFragment(formula));
  }
  return fragment;
}

// A fence still being written, a few lines at a time: the class markdown-it's <code> would get
// for the fence's info string, and those lines highlighted alone (no state carried across
// pieces, so a comment spanning pieces may look plain until the end renders the whole answer).
export function codeClass(info) {
  const name = info.trim().split(/\s+/)[0];
  const language = resolveLanguage(name);
  if (language?.ready) return `hljs language-${name}`;
  return plainLanguage(name) ? `language-${name}` : '';
}

// highlight.js's HTML as nodes, without an HTML parser: it writes only <span class="...">,
// </span> and text with &amp; &lt; &gt; &quot; &#x27;, so that is all this accepts; anything
// else (which highlight.js never writes) is handed to DOMPurify instead. A streaming code block
// turns a few lines into nodes every frame, and DOMPurify parses a new document per call.
const hljsToken = /<span class="([\w\- ]+)">|<\/span>|[^<]+/gy;
const entities = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#x27;': "'" };
function hljsFragment(html) {
  const fragment = document.createDocumentFragment();
  const open = [fragment];
  hljsToken.lastIndex = 0;
  while (hljsToken.lastIndex < html.length) {
    const match = hljsToken.exec(html);
    if (!match) return DOMPurify.sanitize(html, fragmentOptions);
    if (match[1] !== undefined) {
      const span = document.createElement('span');
      span.className = match[1];
      open.at(-1).append(span);
      open.push(span);
    } else if (match[0] === '</span>') {
      if (open.length === 1) return DOMPurify.sanitize(html, fragmentOptions);
      open.pop();
    } else {
      if (/&(?!(?:amp|lt|gt|quot|#x27);)/.test(match[0])) return DOMPurify.sanitize(html, fragmentOptions);
      open.at(-1).append(match[0].replace(/&(?:amp|lt|gt|quot|#x27);/g, (entity) => entities[entity]));
    }
  }
  return fragment;
}

export function highlightFragment(code, info) {
  const { html, waiting } = highlighted(code, info.trim().split(/\s+/)[0]);
  if (html !== null) return hljsFragment(html);
  const fragment = document.createDocumentFragment();
  if (waiting) {
    const span = document.createElement('span');
    span.dataset.highlight = waiting;
    span.textContent = code;
    fragment.append(span);
  } else {
    fragment.append(code);
  }
  return fragment;
}

// Work done on what was waiting, a slice at a time: a long block waiting for its language
// (an old answer shown on load) must not become one long task.
const sliceMs = 8;
function inSlices(nodes, redraw) {
  const started = performance.now();
  while (nodes.length && performance.now() - started < sliceMs) {
    const node = nodes.shift();
    if (node.isConnected) redraw(node);
  }
  if (nodes.length) setTimeout(() => inSlices(nodes, redraw), 0);
}

// A language arrived: every block and streamed piece of code waiting for it is highlighted.
function requestLanguage(name) {
  loadLanguage(name).then(() => {
    inSlices([...document.querySelectorAll(`[data-highlight="${name}"]`)], (node) => {
      node.removeAttribute('data-highlight');
      node.replaceChildren(hljsFragment(hljs.highlight(node.textContent, { language: name, ignoreIllegals: true }).value));
      (node.tagName === 'CODE' ? node : node.closest('code'))?.classList.add('hljs');
    });
  }, () => {
    // not fetched (server gone): the code stays plain
  });
}

// KaTeX arrived: every formula shown as its source is drawn.
whenMathReady(() => {
  inSlices([...document.querySelectorAll('span.math-pending')], (node) => {
    const { tex, display, open, close } = node.dataset;
    node.replaceWith(DOMPurify.sanitize(mathHtml(tex, display === '1', open, close), fragmentOptions));
  });
});

// Each library's first use is slow: markdown-it and DOMPurify's first render ~20 ms (code not
// yet compiled by V8), highlight.js compiling a language's grammar on its first block ~20-40
// ms. Done while the page is idle, one piece per idle callback, so none of it lands in the
// middle of a streaming answer (the first code block would otherwise stall a frame).
export function warmUp() {
  const idle = globalThis.requestIdleCallback ?? ((callback) => setTimeout(callback, 50));
  const steps = [
    () => renderMarkdownFragment('Some **bold**, `code` and a [link](https://example.com).\n\n- one\n- two\n'),
    ...hljs.listLanguages().map((language) => () => highlightFragment('let a = 1; // x\n', language)),
    // KaTeX is fetched now rather than with the first formula, and its first render (~30 ms of
    // compiling) happens here too.
    () => loadKatex().then(() => mathHtml('x^2', false, '$', '$')),
  ];
  const next = () => {
    const step = steps.shift();
    if (!step) return;
    try {
      step();
    } catch {
      // only a warm-up
    }
    idle(next, { timeout: 2000 });
  };
  idle(next, { timeout: 2000 });
}
