// Markdown to safe HTML: markdown-it with raw HTML off, highlight.js for fenced code (a few
// common languages, to keep the bundle small), then DOMPurify, so nothing a model writes can run
// script, carry an event handler or link to javascript:.
import DOMPurify from 'dompurify';
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
import MarkdownIt from 'markdown-it';

for (const [name, language] of Object.entries({ bash, cpp, javascript, json, python, sql, typescript, xml, yaml })) {
  hljs.registerLanguage(name, language);
}

function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
}

const knownLanguage = (lang) => (lang && hljs.getLanguage(lang) ? lang : null);
// A fence's language that highlight.js does not know still names the block (its Copy head shows
// it): kept as a class when it is a plain name.
const plainLanguage = (lang) => (lang && /^[\w+#.-]{1,32}$/.test(lang) ? lang : null);
const plainCodeTag = (lang) => (plainLanguage(lang) ? `<code class="language-${plainLanguage(lang)}">` : '<code>');

const markdown = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  highlight(code, lang) {
    const language = knownLanguage(lang);
    if (!language) return `<pre>${plainCodeTag(lang)}${escapeHtml(code)}</code></pre>`;
    try {
      const html = hljs.highlight(code, { language, ignoreIllegals: true }).value;
      return `<pre><code class="hljs language-${escapeHtml(language)}">${html}</code></pre>`;
    } catch {
      return `<pre>${plainCodeTag(lang)}${escapeHtml(code)}</code></pre>`;
    }
  },
});

// Links open in a new tab without handing it this page (and never run script: DOMPurify drops
// javascript: URLs, markdown-it refuses to make them in the first place).
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const purifyOptions = {
  USE_PROFILES: { html: true },
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
const fragmentOptions = { ...purifyOptions, RETURN_DOM_FRAGMENT: true };
export function renderMarkdownFragment(text) {
  return DOMPurify.sanitize(markdown.render(text), fragmentOptions);
}

// A fence still being written, a few lines at a time: the class markdown-it's <code> would get
// for the fence's info string, and those lines highlighted alone (no state carried across
// pieces, so a comment spanning pieces may look plain until the end renders the whole answer).
export function codeClass(info) {
  const name = info.trim().split(/\s+/)[0];
  const language = knownLanguage(name);
  if (language) return `hljs language-${language}`;
  return plainLanguage(name) ? `language-${name}` : '';
}

export function highlightFragment(code, info) {
  const language = knownLanguage(info.trim().split(/\s+/)[0]);
  if (language) {
    try {
      return DOMPurify.sanitize(hljs.highlight(code, { language, ignoreIllegals: true }).value, fragmentOptions);
    } catch {
      // shown plain below
    }
  }
  const fragment = document.createDocumentFragment();
  fragment.append(code);
  return fragment;
}

// Each library's first use is slow: markdown-it and DOMPurify's first render ~20 ms (code not
// yet compiled by V8), highlight.js compiling a language's grammar on its first block ~20-40
// ms. Done while the page is idle, one piece per idle callback, so none of it lands in the
// middle of a streaming answer (the first code block would otherwise stall a frame).
export function warmUp() {
  const idle = globalThis.requestIdleCallback ?? ((callback) => setTimeout(callback, 50));
  const steps = [
    () => renderMarkdownFragment('Some **bold**, `code` and a [link](https://example.com).\n\n- one\n- two\n'),
    ...hljs.listLanguages().map((language) => () => highlightFragment('let a = 1; // x\n', language)),
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
