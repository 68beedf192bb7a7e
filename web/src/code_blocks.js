// A Copy button on every finished code block of an answer. Model output goes through DOMPurify,
// which lets no <button> in, so the button is added afterwards, beside the sanitised <pre>: a
// head just before the block names its language and holds the button. (Beside, not around: a
// long streamed block holds thousands of line boxes, and moving it into a wrapper would lay
// them all out again.) Only finished blocks get one: a
// fence still streaming is decorated once it closes (answer_view.js calls this on each block it
// finishes). One click listener on the conversation serves every button.
import { copyText } from './clipboard.js';

// The language markdown-it or the streaming fence wrote into the <code>'s class, if any.
function languageOf(code) {
  const match = code && /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
  return match ? match[1] : '';
}

// The text a block's Copy button copies: its code without the last line's newline.
export function codeText(pre) {
  return pre.textContent.replace(/\n$/, '');
}

export function addCodeCopyButtons(root) {
  for (const pre of root.querySelectorAll('pre')) {
    if (pre.previousElementSibling?.classList.contains('code-head') || pre.closest('.tool-call')) continue;
    const code = pre.querySelector(':scope > code');
    const language = languageOf(code);
    const head = document.createElement('div');
    head.className = 'code-head';
    const name = document.createElement('span');
    name.className = 'code-language';
    name.textContent = language;
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'small code-copy';
    button.textContent = 'Copy';
    button.setAttribute('aria-label', language ? `Copy this ${language} code` : 'Copy this code');
    head.append(name, button);
    pre.before(head);
  }
}

// Clicks on any code block's Copy button under `container`.
export function handleCodeCopy(container) {
  container.addEventListener('click', (event) => {
    const button = event.target.closest?.('button.code-copy');
    if (!button || !container.contains(button)) return;
    const pre = button.closest('.code-head')?.nextElementSibling;
    if (pre?.tagName === 'PRE') copyText(codeText(pre), button, { selectNode: pre });
  });
}
