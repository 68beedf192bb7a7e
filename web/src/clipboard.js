// Copying text for the page's Copy buttons: the clipboard API where the page may use it (a
// secure origin: https or localhost), else the text is selected for the user's own Ctrl+C. The
// button says which happened for two seconds, then reads as before.
const resetAfterMs = 2000;

export async function copyText(text, button, { selectNode } = {}) {
  const label = button.dataset.label ?? button.textContent;
  button.dataset.label = label;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  } catch {
    if (selectNode) {
      const range = document.createRange();
      range.selectNodeContents(selectNode);
      const selection = getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = 'Selected: press Ctrl+C';
    } else {
      button.textContent = 'Copy failed';
    }
  }
  clearTimeout(Number(button.dataset.resetTimer));
  button.dataset.resetTimer = String(setTimeout(() => {
    button.textContent = label;
  }, resetAfterMs));
}
