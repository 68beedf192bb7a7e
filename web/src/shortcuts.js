// The chat page's keyboard shortcuts: one table (what the help dialog lists) and the rule that
// turns a keydown into one of its actions. Keys that type a character ("/", "?") act only when
// no text field has the focus, so typing them in the message box types them; chords with Ctrl
// (⌘ on a Mac) work everywhere. Escape belongs to whatever is open: a dialog closes itself,
// then the drawer, then a generation stops.

// `keys`: the ways to press it, each a list of key names; "Mod" is Ctrl, or ⌘ on a Mac.
export const shortcuts = [
  { action: 'new-chat', keys: [['Mod', 'Shift', 'O']], description: 'New chat' },
  { action: 'search', keys: [['Mod', 'K'], ['/']], description: 'Search conversations' },
  { action: 'focus-prompt', keys: [['Shift', 'Escape']], description: 'Go to the message box' },
  { action: 'escape', keys: [['Escape']], description: 'Stop generating; close a dialog or the conversation list' },
  { action: 'help', keys: [['Mod', '/'], ['?']], description: 'Show these shortcuts' },
  { action: 'settings', keys: [['Mod', ',']], description: 'Chat settings' },
  { action: 'export', keys: [['Mod', 'Shift', 'E']], description: 'Export this conversation (JSON)' },
  { action: 'import', keys: [['Mod', 'Shift', 'L']], description: 'Import conversations from a JSON export' },
  { action: null, keys: [['Enter']], description: 'Send (in the message box)' },
  { action: null, keys: [['Shift', 'Enter']], description: 'New line (in the message box)' },
];

export const isMac = () => /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent || '');

// How a key is written in the dialog.
export function keyLabel(key, mac = isMac()) {
  if (key === 'Mod') return mac ? '⌘' : 'Ctrl';
  if (key === 'Escape') return 'Esc';
  return key;
}

// Whether the focus is somewhere that takes typed text.
export function typingIn(target) {
  if (!target || !target.closest) return false;
  if (target.isContentEditable) return true;
  const field = target.closest('textarea, select, input');
  if (!field) return false;
  return field.tagName !== 'INPUT' || !['checkbox', 'radio', 'button', 'submit', 'reset'].includes(field.type);
}

// The action of a keydown, or null. `mac`: ⌘ is the modifier instead of Ctrl.
export function shortcutFor(event, { mac = isMac() } = {}) {
  if (event.isComposing || event.keyCode === 229 || event.altKey) return null;
  const mod = mac ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
  const plain = !event.ctrlKey && !event.metaKey;
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  if (mod) {
    if (key === 'o' && event.shiftKey) return 'new-chat';
    if (key === 'e' && event.shiftKey) return 'export';
    if (key === 'l' && event.shiftKey) return 'import';
    if (key === 'k' && !event.shiftKey) return 'search';
    if (key === '/' && !event.shiftKey) return 'help';
    if (key === ',' && !event.shiftKey) return 'settings';
    return null;
  }
  if (!plain) return null;
  if (key === 'Escape') return event.shiftKey ? 'focus-prompt' : 'escape';
  if (typingIn(event.target)) return null;
  if (key === '/' && !event.shiftKey) return 'search';
  if (key === '?') return 'help';
  return null;
}

// Fills the help dialog's table with the shortcuts that have a handler here.
export function fillShortcutTable(tbody, handled, mac = isMac()) {
  tbody.replaceChildren();
  for (const shortcut of shortcuts) {
    if (shortcut.action && !handled.has(shortcut.action)) continue;
    const row = document.createElement('tr');
    const keys = document.createElement('td');
    shortcut.keys.forEach((combination, index) => {
      if (index) keys.append(' or ');
      combination.forEach((key, at) => {
        if (at) keys.append('+');
        const kbd = document.createElement('kbd');
        kbd.textContent = keyLabel(key, mac);
        keys.append(kbd);
      });
    });
    const what = document.createElement('td');
    what.textContent = shortcut.description;
    row.append(keys, what);
    tbody.append(row);
  }
}
