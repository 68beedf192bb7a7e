// The conversations the server keeps for the caller (GET /v1/sessions): open, rename (PATCH)
// and delete (DELETE), all from the keyboard. Without a history store the server has no list,
// and the sidebar says conversations last only until the page reloads; a server that cannot be
// reached leaves the list as it was.
import { apiFetch, apiJson, AuthError, errorMessage, NetworkError } from './api.js';

const sessionPath = (id) => `/v1/sessions/${encodeURIComponent(id)}`;

// A list row's button: its class, visible text, accessible name and click handler.
export function button(className, text, label, onClick) {
  const node = document.createElement('button');
  node.type = 'button';
  node.className = className;
  node.textContent = text;
  node.setAttribute('aria-label', label);
  node.addEventListener('click', onClick);
  return node;
}

export class SessionsSidebar {
  // `hooks`: currentId() → the open conversation's id; open(id, title); renamed(id, title);
  // deleted(id); failed(message); guard(promise) (a 401 goes back to the sign-in).
  constructor(list, note, hooks) {
    this.list = list;
    this.note = note;
    this.hooks = hooks;
    this.enabled = false;
  }

  // Reads the list; resolves to whether the server keeps sessions. A 401 is thrown. Only the
  // server's 404 means it has no history store: a server that cannot be reached, or fails,
  // says nothing about that, so the list shown stays (with a note that it may be stale).
  async load() {
    let response;
    try {
      response = await apiFetch('/v1/sessions?limit=100');
    } catch (error) {
      if (error instanceof AuthError && error.status === 401) throw error;
      this.showNote(this.staleNote(error instanceof NetworkError ? 'cannot reach the server' : error.message));
      return this.enabled;
    }
    if (response.status === 404) {
      this.enabled = false;
      this.showNote('This pipeline keeps no conversations (no history store): they last until the page reloads.');
      this.list.replaceChildren();
      return false;
    }
    if (!response.ok) {
      const message = await errorMessage(response);
      if (response.status >= 500) {
        this.showNote(this.staleNote(`the server answered: ${message}`));
        return this.enabled;
      }
      // The server refuses this caller a list (a credential without a user has no sessions).
      this.enabled = false;
      this.showNote(`No saved conversations: ${message}`);
      this.list.replaceChildren();
      return false;
    }
    const body = await response.json();
    this.enabled = true;
    this.showNote('');
    this.render(body.data || []);
    return true;
  }

  staleNote(why) {
    return this.list.children.length
      ? `The list could not be read again (${why}); it is as it was.`
      : `The list could not be read (${why}).`;
  }

  showNote(text) {
    this.note.hidden = !text;
    this.note.textContent = text;
  }

  reload() {
    return this.load().catch(() => false);
  }

  markCurrent(id) {
    for (const item of this.list.children) item.classList.toggle('current', item.dataset.id === id);
  }

  render(sessions) {
    this.list.replaceChildren();
    const current = this.hooks.currentId();
    for (const session of sessions) {
      const title = session.title || session.id;
      const item = document.createElement('li');
      item.className = 'session';
      item.dataset.id = session.id;
      item.classList.toggle('current', session.id === current);
      const open = button('open', title, `Open conversation: ${title}`, () => this.hooks.open(session.id, title));
      open.title = title;
      const rename = button('small icon', '✎', `Rename conversation: ${title}`, () => this.startRename(item, session.id, title));
      rename.title = 'Rename';
      const remove = button('small icon danger', '✕', `Delete conversation: ${title}`, () => this.confirmDelete(remove, session.id, title));
      remove.title = 'Delete';
      item.append(open, rename, remove);
      this.list.append(item);
    }
  }

  startRename(item, id, title) {
    const input = document.createElement('input');
    input.type = 'text';
    input.value = title;
    input.setAttribute('aria-label', `New title for ${title} (Enter saves, Escape cancels)`);
    item.replaceChildren(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const value = input.value.trim();
      if (save && value && value !== title) {
        try {
          await this.hooks.guard(apiJson(sessionPath(id), {
            method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ title: value }),
          }));
          this.hooks.renamed(id, value);
        } catch (error) {
          this.hooks.failed(`Renaming failed: ${error.message}`);
        }
      }
      await this.reload();
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.isComposing) {
        event.preventDefault();
        finish(true);
      } else if (event.key === 'Escape') {
        event.preventDefault();
        finish(false);
      }
    });
    input.addEventListener('blur', () => finish(true));
  }

  // Deleting takes a second press within 4 s: one stray key must not lose a conversation.
  confirmDelete(remove, id, title) {
    if (remove.dataset.armed !== 'yes') {
      remove.dataset.armed = 'yes';
      remove.textContent = 'Delete?';
      remove.setAttribute('aria-label', `Press again to delete conversation: ${title}`);
      setTimeout(() => {
        if (!remove.isConnected) return;
        remove.dataset.armed = '';
        remove.textContent = '✕';
        remove.setAttribute('aria-label', `Delete conversation: ${title}`);
      }, 4000);
      return;
    }
    (async () => {
      try {
        await this.hooks.guard(apiJson(sessionPath(id), { method: 'DELETE' }));
        this.hooks.deleted(id);
      } catch (error) {
        this.hooks.failed(`Deleting failed: ${error.message}`);
      }
      await this.reload();
    })();
  }
}
