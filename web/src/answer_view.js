// One assistant answer on the page: its markdown (rendered as it streams), reasoning, tool
// calls, citations, the numbers under it and its buttons. While streaming, finished blocks are
// rendered once and appended; only the open last block is rendered again per frame, so the cost
// of a token does not grow with the answer. Two open blocks could still grow without bound: an
// open ``` fence keeps its finished lines (highlighted once, appended) and redraws only its
// last, unfinished line; a long paragraph without blank lines is redrawn at most every 100 ms.
// Once closed, a long fence keeps those streamed lines as its block (no second highlight.js
// pass over all of it, which would be one long task). The end renders the whole text once
// more, so the final HTML is exactly markdown-it's for the whole answer, unless the answer is
// long (then its blocks stay, and only the last is rendered again).
import './answer_view.css';
import './math.css';
import { addCodeCopyButtons } from './code_blocks.js';
import { citationItem } from './documents.js';
import { BlockSplitter, closeOpen } from './markdown_stream.js';
import { codeClass, highlightFragment, renderMarkdown, renderMarkdownFragment } from './render.js';

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const wholeRenderLimit = 8000; // characters
const keepFenceLength = 4000; // characters: a closed fence this long keeps its streamed code
const longOpenBlock = 2000;    // characters: an open paragraph this long is redrawn less often
const longBlockEveryMs = 100;
const linesPerGroup = 32;      // pieces of a streaming fence's lines in one box (growFence)
const blocksPerGroup = 16;     // finished blocks in one box (appendBlock)
// A partial last line that may be becoming the closing fence: not shown as code for a frame.
const closingSoon = /^ {0,3}(`+|~+)\s*$/;

export class AnswerView {
  constructor(parent, { onCopy, onRegenerate } = {}) {
    this.text = '';
    this.reasoning = '';
    this.splitter = new BlockSplitter();
    this.renderedStable = 0;
    this.root = element('article', 'message assistant');
    this.root.setAttribute('aria-label', 'Answer');
    this.root.setAttribute('aria-busy', 'true');
    this.badges = element('div', 'badges');
    this.reasoningBox = element('details', 'reasoning');
    this.reasoningBox.hidden = true;
    this.reasoningBox.append(element('summary', '', 'Reasoning'));
    this.reasoningText = element('div', 'reasoning-text');
    this.reasoningBox.append(this.reasoningText);
    this.tools = element('div', 'tool-calls');
    this.tools.hidden = true;
    this.content = element('div', 'content markdown');
    this.stable = element('div', 'stable');
    this.tail = element('div', 'tail');
    this.content.append(this.stable, this.tail);
    this.openFence = null;  // { start, code, done, partial, info } while a fence streams
    this.tailDrawnAt = -Infinity;
    this.redraw = null;     // a pending redraw of a long open paragraph
    this.finished = false;
    this.notices = element('div', 'answer-notices');
    this.citations = element('ol', 'citations');
    this.citations.hidden = true;
    this.citations.setAttribute('aria-label', 'References');
    this.footer = element('div', 'answer-footer');
    this.stats = element('span', 'stats');
    this.actions = element('span', 'actions');
    this.copyButton = element('button', 'small', 'Copy');
    this.copyButton.type = 'button';
    this.copyButton.setAttribute('aria-label', 'Copy this answer');
    this.copyButton.addEventListener('click', () => onCopy && onCopy(this));
    this.regenerateButton = element('button', 'small', 'Regenerate');
    this.regenerateButton.type = 'button';
    this.regenerateButton.setAttribute('aria-label', 'Regenerate this answer');
    this.regenerateButton.addEventListener('click', () => onRegenerate && onRegenerate(this));
    this.regenerateButton.hidden = !onRegenerate;
    this.actions.append(this.copyButton, this.regenerateButton);
    this.footer.append(this.stats, this.actions);
    this.root.append(this.badges, this.reasoningBox, this.tools, this.content, this.notices, this.citations, this.footer);
    parent.append(this.root);
  }

  // Text the typewriter revealed.
  appendText(more) {
    if (this.retracted) return;
    this.text += more;
    const stable = this.splitter.append(more);
    if (stable > this.renderedStable) this.keepStreamedFence(stable);
    if (stable > this.renderedStable) {
      const block = this.text.slice(this.renderedStable, stable);
      const rendered = element('div', 'block');
      rendered.append(renderMarkdownFragment(block));
      // A finished block's code can be copied while the rest of the answer streams.
      addCodeCopyButtons(rendered);
      this.appendBlock(rendered);
      this.renderedStable = stable;
      this.openFence = null;
      this.tail.replaceChildren();
      this.tailDrawnAt = -Infinity;
    }
    const splitter = this.splitter;
    if (splitter.fence && splitter.fenceStart >= this.renderedStable) {
      this.growFence(splitter.fenceStart, splitter.scanned);
      return;
    }
    this.openFence = null;
    const open = this.text.slice(this.renderedStable);
    const wait = this.tailDrawnAt + longBlockEveryMs - performance.now();
    if (open.length > longOpenBlock && wait > 0) {
      // Drawn soon, even if no more text comes meanwhile (the model may pause).
      this.redraw ??= setTimeout(() => this.drawTail(), wait);
      return;
    }
    this.drawTail();
  }

  // A long fence that just closed keeps the code streamed into it (highlighted piece by piece)
  // as its finished block: rendering it whole again, highlight.js over all of it, would be one
  // long task (~4 ms per 1,000 characters). A short one is rendered whole, as markdown-it does.
  keepStreamedFence(stable) {
    const fence = this.openFence;
    const closed = this.splitter.closed;
    if (!fence || !closed || closed.start !== fence.start || closed.end > stable) return;
    if (closed.end - fence.start < keepFenceLength) return;
    if (closed.closingLine > fence.done) {
      const lines = element('span', 'code-lines');
      lines.append(highlightFragment(this.text.slice(fence.done, closed.closingLine), fence.info));
      fence.code.insertBefore(lines, fence.partial);
    }
    fence.partial.remove();
    addCodeCopyButtons(this.tail);
    // Left in place, not moved into `stable` (out of the document and back in, thousands of
    // line boxes): the tail becomes the block, and a new stable part and tail follow it.
    this.tail.className = 'block';
    this.stable = element('div', 'stable');
    const tail = element('div', 'tail');
    this.tail.after(this.stable, tail);
    this.tail = tail;
    this.renderedStable = closed.end;
    this.openFence = null;
    this.tailDrawnAt = -Infinity;
  }

  // Finished blocks go in groups of `blocksPerGroup`: a full group is skipped whole while off
  // screen, and its blocks stop being watched one by one (code_blocks.css), so the per-frame
  // check of content-visibility boxes against the viewport does not grow with the answer.
  appendBlock(block) {
    if (!this.blockGroup || this.blockGroup.parentNode !== this.stable || this.blockGroup.childElementCount >= blocksPerGroup) {
      this.blockGroup?.classList.add('sealed');
      this.blockGroup = element('div', 'block-group');
      this.stable.append(this.blockGroup);
    }
    this.blockGroup.append(block);
  }

  drawTail() {
    clearTimeout(this.redraw);
    this.redraw = null;
    if (this.openFence || this.finished) return;
    this.tailDrawnAt = performance.now();
    const open = this.text.slice(this.renderedStable);
    if (open.trim()) this.tail.replaceChildren(renderMarkdownFragment(closeOpen(open)));
    else this.tail.replaceChildren();
  }

  // The open fence starting at `start`; its lines before `complete` are finished.
  growFence(start, complete) {
    let fence = this.openFence;
    if (!fence || fence.start !== start) {
      // Prose before the fence in the same block is finished (a fence interrupts a paragraph).
      const prose = this.text.slice(this.renderedStable, start);
      const opened = this.text.indexOf('\n', start) + 1;
      const info = this.text.slice(start, opened).trim().replace(/^(`+|~+)/, '');
      const pre = element('pre');
      const code = element('code', `${codeClass(info)} streaming`.trim());
      pre.append(code);
      this.tail.replaceChildren();
      if (prose.trim()) this.tail.append(renderMarkdownFragment(prose));
      this.tail.append(pre);
      fence = { start, code, done: opened, partial: null, info };
      this.openFence = fence;
    }
    if (!fence.partial) {
      fence.partial = element('span', 'code-lines partial-line');
      fence.code.append(fence.partial);
    }
    if (complete > fence.done) {
      // Each piece of lines its own block box (chat.css): the browser lays out the new lines
      // only, where one growing run of text in the <code> would be laid out whole each frame.
      const lines = element('span', 'code-lines');
      lines.append(highlightFragment(this.text.slice(fence.done, complete), fence.info));
      // Pieces go in groups of `linesPerGroup`: the <code> box then has a few children, not
      // thousands, and laying it out each frame while the pane follows it stays flat.
      if (!fence.group || fence.group.childElementCount >= linesPerGroup) {
        // A full group is skipped whole when off screen; its pieces need not be watched one by
        // one any more (code_blocks.css): Chromium checks every content-visibility: auto box
        // against the viewport each frame, a cost that would grow with the block.
        fence.group?.classList.add('sealed');
        fence.group = element('span', 'code-group');
        fence.code.insertBefore(fence.group, fence.partial);
      }
      fence.group.append(lines);
      fence.done = complete;
    }
    const rest = this.text.slice(fence.done);
    fence.partial.replaceChildren(closingSoon.test(rest) ? '' : highlightFragment(rest, fence.info));
  }

  // The content filter withdrew the answer after it was shown: its text (and reasoning, tool
  // calls and citations, which belong to it) goes, and `message` stands in its place. Copy and
  // the conversation sent with the next question no longer hold it.
  retract(message) {
    clearTimeout(this.redraw);
    this.redraw = null;
    this.retracted = true;
    this.text = '';
    this.reasoning = '';
    this.openFence = null;
    this.reasoningBox.hidden = true;
    this.reasoningText.textContent = '';
    this.tools.hidden = true;
    this.tools.replaceChildren();
    this.citations.hidden = true;
    this.citations.replaceChildren();
    this.root.classList.add('retracted');
    const notice = element('p', 'retracted-notice', message);
    notice.setAttribute('role', 'status');
    this.content.replaceChildren(notice);
  }

  appendReasoning(more) {
    this.reasoning += more;
    this.reasoningBox.hidden = false;
    this.reasoningText.textContent = this.reasoning;
  }

  setToolCalls(calls) {
    this.tools.hidden = calls.length === 0;
    this.tools.replaceChildren();
    for (const call of calls) {
      const box = element('details', 'tool-call');
      box.open = true;
      box.append(element('summary', '', `Tool call: ${call.name || '(unnamed)'}`));
      let args = call.arguments;
      try {
        args = JSON.stringify(JSON.parse(call.arguments), null, 2);
      } catch {
        // still streaming, or not JSON: shown as it is
      }
      box.append(element('pre', 'tool-arguments', args));
      this.tools.append(box);
    }
  }

  setCitations(citations) {
    this.citations.replaceChildren();
    for (const citation of citations) this.citations.append(citationItem(citation));
    this.citations.hidden = citations.length === 0;
  }

  badge(text, kind, label) {
    const node = element('span', `badge ${kind}`, text);
    if (label) node.setAttribute('aria-label', label);
    node.dataset.kind = kind;
    this.badges.append(node);
  }

  notice(text, kind = 'info') {
    const node = element('p', `answer-notice ${kind}`, text);
    node.setAttribute('role', kind === 'error' ? 'alert' : 'status');
    this.notices.append(node);
  }

  setStats(text) {
    this.stats.textContent = text;
  }

  // The whole answer once more, as one document (a link reference or a loose list may span
  // blocks). A very long answer keeps its blocks instead: rendering ~10k characters again
  // would be one long task, a visible stall after the last token.
  finish() {
    this.finished = true;
    clearTimeout(this.redraw);
    this.root.setAttribute('aria-busy', 'false');
    if (this.retracted) return;
    if (this.text.length <= wholeRenderLimit || this.renderedStable === 0) {
      this.content.innerHTML = this.text.trim() ? renderMarkdown(this.text) : '';
      addCodeCopyButtons(this.content);
      return;
    }
    const open = this.text.slice(this.renderedStable);
    const last = element('div', 'block');
    last.innerHTML = open.trim() ? renderMarkdown(open) : '';
    addCodeCopyButtons(last);
    this.tail.replaceWith(last);
  }
}

export function userMessage(parent, text) {
  const node = element('article', 'message user');
  node.setAttribute('aria-label', 'Your message');
  node.append(element('div', 'content', text));
  parent.append(node);
  return node;
}
