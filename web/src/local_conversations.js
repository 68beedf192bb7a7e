// Conversations the page holds itself: imported ones without a history store, or that a session
// cannot hold (a system message, a last question without an answer; with a store the others
// become the caller's sessions through POST /v1/sessions). They are kept
// in the tab's sessionStorage, as the key is: a reload keeps them, closing the tab or another
// person signing in elsewhere does not see them. A request in one of them carries the whole
// conversation and no session_id, so the server stores nothing of it.
import { button } from './sessions_sidebar.js';

const storageKey = 'chatflow.local_conversations';

export class LocalConversations {
  // `hooks`: currentId(); open(conversation); deleted(id); warn(message).
  constructor(section, list, hooks) {
    this.section = section;
    this.list = list;
    this.hooks = hooks;
    this.conversations = [];
    try {
      const stored = JSON.parse(sessionStorage.getItem(storageKey) || '[]');
      if (Array.isArray(stored)) this.conversations = stored.filter((c) => c && c.id && Array.isArray(c.messages));
    } catch {
      // Unreadable or off: start empty.
    }
    this.render();
  }

  get(id) {
    return this.conversations.find((conversation) => conversation.id === id);
  }

  // Newest first; each becomes a local conversation with its own id.
  add(conversations) {
    // A conversation that had an id on screen keeps it (its own settings are kept by id).
    const added = conversations.map((conversation) => ({
      ...conversation, id: conversation.id || `local-${crypto.getRandomValues(new Uint32Array(2)).join('-')}`, local: true,
    }));
    this.conversations.unshift(...added);
    this.save();
    this.render();
    return added;
  }

  // After a conversation changed (a new turn): write it back.
  update(conversation) {
    const index = this.conversations.findIndex((c) => c.id === conversation.id);
    if (index < 0) return;
    this.conversations[index] = conversation;
    this.save();
  }

  remove(id) {
    this.conversations = this.conversations.filter((conversation) => conversation.id !== id);
    this.save();
    this.render();
  }

  save() {
    try {
      sessionStorage.setItem(storageKey, JSON.stringify(this.conversations));
    } catch {
      this.hooks.warn('The imported conversations are too large for this tab\'s storage: they last until the page reloads. Export them to keep them.');
    }
  }

  markCurrent(id) {
    for (const item of this.list.children) item.classList.toggle('current', item.dataset.id === id);
  }

  render() {
    this.section.hidden = !this.conversations.length;
    this.list.replaceChildren();
    const current = this.hooks.currentId();
    for (const conversation of this.conversations) {
      const title = conversation.title || 'Untitled conversation';
      const item = document.createElement('li');
      item.className = 'session local';
      item.dataset.id = conversation.id;
      item.classList.toggle('current', conversation.id === current);
      const open = button('open', title, `Open imported conversation: ${title}`, () => this.hooks.open(conversation));
      open.title = title;
      const remove = button('small icon danger', '✕', `Remove imported conversation: ${title}`, () => this.confirmRemove(remove, conversation.id, title));
      item.append(open, remove);
      this.list.append(item);
    }
  }

  // Removing takes a second press within 4 s, as deleting a saved conversation does.
  confirmRemove(remove, id, title) {
    if (remove.dataset.armed !== 'yes') {
      remove.dataset.armed = 'yes';
      remove.textContent = 'Remove?';
      remove.setAttribute('aria-label', `Press again to remove imported conversation: ${title}`);
      setTimeout(() => {
        if (!remove.isConnected) return;
        remove.dataset.armed = '';
        remove.textContent = '✕';
        remove.setAttribute('aria-label', `Remove imported conversation: ${title}`);
      }, 4000);
      return;
    }
    this.remove(id);
    this.hooks.deleted(id);
  }
}
