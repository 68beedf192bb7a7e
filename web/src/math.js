// TeX math in answers: a markdown-it plugin for $…$, $$…$$, \(…\) and \[…\], rendered by KaTeX
// as MathML only. KaTeX's HTML output positions every glyph with inline style attributes and
// needs its own fonts, which the page's CSP (no inline style) and DOMPurify (no style
// attribute) rule out; MathML is plain markup that Chromium (MathML Core) and Firefox lay out
// themselves. KaTeX (~270 KiB) is a separate file, fetched while the page is idle or on the
// first formula: until it arrives a formula shows as its source and is replaced in place.
//
// Only a closed formula is math: while an answer streams, `$x^2 + ` stays text until its
// closing `$` arrives, so a formula is never drawn half-written. Prices stay text: an opening
// `$` must be followed by a non-space, a closing `$` preceded by a non-space and not followed by
// a digit ("costs $5 and $10" has no formula). Code spans and fences are never looked into
// (markdown-it hands them no inline parsing). `\$` is a dollar sign.

// Limits on what one formula may cost: KaTeX's own guards against huge sizes and macro bombs.
const katexOptions = {
  output: 'mathml', throwOnError: true, trust: false, strict: 'ignore', maxSize: 20, maxExpand: 500,
};
const maxSource = 4000; // characters: a longer "formula" is shown as text

let katex = null;
let katexLoading = null;
const rendered = new Map(); // `${display}${tex}` -> HTML; the open block is rendered every frame
const renderedLimit = 500;
let onReady = () => {};

function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
}

// Fetches KaTeX once; `ready` runs when it is there (render.js redraws waiting formulas then).
export function loadKatex() {
  katexLoading ??= import('katex').then((module) => {
    katex = module.default;
    onReady();
  }, () => {
    katexLoading = null; // the server went away: a later formula asks again
  });
  return katexLoading;
}

export function whenMathReady(callback) {
  onReady = callback;
}

// The HTML for one formula: KaTeX's MathML, or its source (with `open`/`close` delimiters)
// marked as waiting for KaTeX or as an error KaTeX reported.
export function mathHtml(tex, display, open, close) {
  const source = `${open}${tex}${close}`;
  if (tex.length > maxSource) return `<span class="math-error" title="formula too long">${escapeHtml(source)}</span>`;
  if (!katex) {
    loadKatex();
    return `<span class="math-pending" data-tex="${escapeHtml(tex)}" data-display="${display ? 1 : 0}" `
      + `data-open="${escapeHtml(open)}" data-close="${escapeHtml(close)}">${escapeHtml(source)}</span>`;
  }
  const key = `${display ? 1 : 0}${tex}`;
  let html = rendered.get(key);
  if (html === undefined) {
    try {
      html = katex.renderToString(tex, { ...katexOptions, displayMode: display });
    } catch (error) {
      html = `<span class="math-error" title="${escapeHtml(String(error.message || error))}">${escapeHtml(source)}</span>`;
    }
    if (rendered.size >= renderedLimit) rendered.delete(rendered.keys().next().value);
    rendered.set(key, html);
  }
  return html;
}

const isSpace = (c) => c === undefined || /\s/.test(c);
const isDigit = (c) => c !== undefined && c >= '0' && c <= '9';

// Where the single-$ formula opened at `start` closes, or -1: the first unescaped `$` after it
// that is preceded by a non-space and not followed by a digit.
function closingDollar(src, start, max) {
  for (let end = src.indexOf('$', start + 1); end >= 0 && end < max; end = src.indexOf('$', end + 1)) {
    if (src[end - 1] === '\\') continue;
    if (isSpace(src[end - 1]) || isDigit(src[end + 1])) return -1;
    return end;
  }
  return -1;
}

function pushMath(state, tex, display, open, close) {
  const token = state.push('math_inline', 'math', 0);
  token.content = tex;
  token.markup = open;
  token.meta = { display, open, close };
}

// Inline: $…$, $$…$$ (display, inside a paragraph), \(…\) and \[…\]. Runs before markdown-it's
// escape rule, so `\(` is seen here first, and `\$` there (an escaped dollar).
function mathInline(state, silent) {
  const src = state.src;
  const pos = state.pos;
  const max = state.posMax;
  if (src[pos] === '\\') {
    const kind = src[pos + 1];
    if (kind !== '(' && kind !== '[') return false;
    const close = kind === '(' ? '\\)' : '\\]';
    const end = src.indexOf(close, pos + 2);
    if (end < 0 || end + 2 > max || !src.slice(pos + 2, end).trim()) return false;
    if (!silent) pushMath(state, src.slice(pos + 2, end), kind === '[', `\\${kind}`, close);
    state.pos = end + 2;
    return true;
  }
  if (src[pos] !== '$') return false;
  if (src[pos + 1] === '$') {
    const end = src.indexOf('$$', pos + 2);
    // Unclosed `$$` is text, both dollars at once: the second must not open a $…$ formula.
    if (end < 0 || end + 2 > max || !src.slice(pos + 2, end).trim()) {
      if (!silent) state.pending += '$$';
      state.pos += 2;
      return true;
    }
    if (!silent) pushMath(state, src.slice(pos + 2, end), true, '$$', '$$');
    state.pos = end + 2;
    return true;
  }
  if (isSpace(src[pos + 1])) return false;
  const end = closingDollar(src, pos, max);
  if (end < 0) return false;
  if (!silent) pushMath(state, src.slice(pos + 1, end), false, '$', '$');
  state.pos = end + 1;
  return true;
}

// A display block: a line starting with $$ or \[ up to the line ending with $$ or \] (the
// same line or a later one, no blank line between). It may interrupt a paragraph, as models
// write "where\n$$\nE = mc^2\n$$".
function mathBlock(state, startLine, endLine, silent) {
  if (state.sCount[startLine] - state.blkIndent >= 4) return false;
  const first = state.src.slice(state.bMarks[startLine] + state.tShift[startLine], state.eMarks[startLine]);
  let open;
  let close;
  if (first.startsWith('$$')) [open, close] = ['$$', '$$'];
  else if (first.startsWith('\\[')) [open, close] = ['\\[', '\\]'];
  else return false;
  const rest = first.slice(open.length).trimEnd();
  let content;
  let last = startLine;
  if (rest.endsWith(close) && rest.length >= close.length && !rest.slice(0, -close.length).includes(close)) {
    content = rest.slice(0, -close.length);
  } else {
    if (rest.includes(close)) return false; // "$$a$$ and more": inline math in a paragraph
    const lines = [rest];
    let found = false;
    for (last = startLine + 1; last < endLine; last += 1) {
      const start = state.bMarks[last] + state.tShift[last];
      const end = state.eMarks[last];
      if (start >= end || state.sCount[last] < state.blkIndent) break;
      const line = state.src.slice(start, end).trimEnd();
      if (line.endsWith(close)) {
        lines.push(line.slice(0, -close.length));
        found = true;
        break;
      }
      lines.push(line);
    }
    if (!found) return false;
    content = lines.join('\n');
  }
  if (!content.trim()) return false;
  if (silent) return true;
  state.line = last + 1;
  const token = state.push('math_block', 'math', 0);
  token.block = true;
  token.content = content;
  token.markup = open;
  token.meta = { open, close };
  token.map = [startLine, state.line];
  return true;
}

// Where the formulas of the render in progress go instead of the HTML, if anywhere: render.js
// inserts each formula's nodes itself (sanitised once per formula, then cloned), so a
// paragraph streaming with formulas in it is not run through DOMPurify's MathML walk each frame.
let sink = null;
export function collectMath(collect) {
  sink = collect;
}
const emit = (html) => (sink ? sink(html) : html);

export function mathPlugin(markdown) {
  markdown.inline.ruler.before('escape', 'math_inline', mathInline);
  markdown.block.ruler.before('fence', 'math_block', mathBlock, { alt: ['paragraph', 'reference', 'blockquote', 'list'] });
  markdown.renderer.rules.math_inline = (tokens, index) => {
    const { display, open, close } = tokens[index].meta;
    return emit(mathHtml(tokens[index].content, display, open, close));
  };
  markdown.renderer.rules.math_block = (tokens, index) => {
    const { open, close } = tokens[index].meta;
    return `<div class="math-block">${emit(mathHtml(tokens[index].content, true, open, close))}</div>\n`;
  };
}
