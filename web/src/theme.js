// Light and dark: the system's preference unless the user picked one with the toggle (kept in
// localStorage). The choice is a data-theme attribute the CSS reads.
const storageKey = 'chatflow.theme';

function systemTheme() {
  return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

export function setupTheme(button) {
  let chosen = null;
  try {
    chosen = localStorage.getItem(storageKey);
  } catch {
    chosen = null;
  }
  const apply = (theme) => {
    document.documentElement.dataset.theme = theme;
    // An icon for narrow top bars (the page's CSS shows one or the other), the words otherwise.
    const icon = document.createElement('span');
    icon.className = 'icon';
    icon.setAttribute('aria-hidden', 'true');
    icon.textContent = theme === 'dark' ? '☀' : '☾';
    const label = document.createElement('span');
    label.className = 'label';
    label.textContent = theme === 'dark' ? 'Light theme' : 'Dark theme';
    button.replaceChildren(icon, label);
    button.setAttribute('aria-label', theme === 'dark' ? 'Switch to the light theme' : 'Switch to the dark theme');
  };
  apply(chosen || systemTheme());
  if (window.matchMedia) {
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      if (!chosen) apply(systemTheme());
    });
  }
  button.addEventListener('click', () => {
    chosen = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    try {
      localStorage.setItem(storageKey, chosen);
    } catch {
      // not kept across reloads then
    }
    apply(chosen);
  });
}
