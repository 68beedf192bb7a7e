// Markdown that is still being written. Two jobs:
// - `closeOpen(text)`: what to render for text that stops mid-construct: an open ``` fence, an
//   open inline `code`, **strong** or _emphasis_ get their closing marks for this render only,
//   so a half-written answer never flashes raw markup or swallows what follows.
// - `BlockSplitter`: where the finished blocks end (a blank line outside any fence), so each
//   finished block is rendered once and only the last, open block is rendered again per frame.
//   A closed fence ends a block too. While a fence is open, `fence` and `fenceStart` say so and
//   every line before `scanned` is a finished line of its code (the page appends those once).
//   Its work per call is proportional to the new text, so the cost per token stays flat.

const fenceOpen = /^ {0,3}(`{3,}|~{3,})/;

// The fence that `line` opens or closes, if any.
function fenceOf(line) {
  const match = fenceOpen.exec(line);
  return match ? match[1] : null;
}

export function closeOpen(text) {
  const lines = text.split('\n');
  let fence = null;
  const prose = [];
  for (const line of lines) {
    const marker = fenceOf(line);
    if (fence) {
      if (marker && marker[0] === fence[0] && marker.length >= fence.length && line.trim() === marker) fence = null;
      continue;
    }
    if (marker) {
      fence = marker;
      continue;
    }
    prose.push(line);
  }
  if (fence) return `${text}${text.endsWith('\n') ? '' : '\n'}${fence}`;
  // Inline marks of the last paragraph only: earlier ones are finished blocks.
  const paragraph = prose.slice(prose.lastIndexOf('') + 1).join('\n');
  let closing = '';
  // Backticks first: inside an open code span, * and _ are literal.
  const ticks = (paragraph.match(/`/g) || []).length;
  let outsideCode = paragraph;
  if (ticks % 2 === 1) {
    closing += '`';
    outsideCode = paragraph.slice(0, paragraph.lastIndexOf('`'));
  }
  outsideCode = outsideCode.replace(/`[^`]*`/g, '');
  // Marks inside math are TeX (a_{n}, a**b), not emphasis: closed formulas are left out, and so
  // is everything after one still open (it shows as text until its end arrives).
  outsideCode = withoutMath(outsideCode);
  const underscores = (outsideCode.match(/(^|[^\p{L}\p{N}_])_(?=\S)|(?<=\S)_(?![\p{L}\p{N}_])/gu) || []).length;
  if (underscores % 2 === 1 && !/[\s_]$/.test(text)) closing += '_';
  const stars = (outsideCode.match(/\*\*/g) || []).length;
  if (stars % 2 === 1) {
    // "**" alone at the end renders as nothing once closed; drop it instead.
    if (text.endsWith('**')) return text.slice(0, -2) + closing;
    closing += '**';
  }
  if (closing && /\s$/.test(text)) return text.trimEnd() + closing;
  return text + closing;
}

// `text` less its closed formulas ($$…$$, \[…\], \(…\), $…$ as math.js reads them), cut
// at a formula still open. A `$` before a digit opens nothing here: "costs $5" is a price.
function withoutMath(text) {
  const closed = text
    .replace(/\$\$[\s\S]*?\$\$|\\\[[\s\S]*?\\\]|\\\([\s\S]*?\\\)/g, '')
    .replace(/(?<![\\$])\$(?=[^\s$])(?:\\.|[^$\\])+?(?<=\S)\$(?!\d)/g, '');
  const open = /\$\$|\\\[|\\\(|(?<!\\)\$(?=[^\s\d$])/.exec(closed);
  return open ? closed.slice(0, open.index) : closed;
}

export class BlockSplitter {
  constructor() {
    this.text = '';
    this.scanned = 0;    // complete lines up to here have been looked at
    this.fence = null;   // the open fence's marker at `scanned`
    this.fenceStart = 0; // where the open fence's opening line starts
    this.stable = 0;     // text before this index is finished blocks
    this.closed = null;  // the last fence closed: { start, closingLine, end }
  }

  // Appends text; returns the index before which the text is finished blocks.
  append(more) {
    this.text += more;
    for (;;) {
      const newline = this.text.indexOf('\n', this.scanned);
      if (newline < 0) break;
      const line = this.text.slice(this.scanned, newline);
      const marker = fenceOf(line);
      if (this.fence) {
        if (marker && marker[0] === this.fence[0] && marker.length >= this.fence.length && line.trim() === marker) {
          // A closed fence ends its block (and interrupts a paragraph before it): a long code
          // block is then rendered once, not again with every token until the next blank line.
          this.fence = null;
          this.stable = newline + 1;
          this.closed = { start: this.fenceStart, closingLine: this.scanned, end: newline + 1 };
        }
      } else if (marker) {
        this.fence = marker;
        this.fenceStart = this.scanned;
      } else if (line.trim() === '' && this.scanned > this.stable) {
        this.stable = newline + 1;
      }
      this.scanned = newline + 1;
    }
    return this.stable;
  }
}
