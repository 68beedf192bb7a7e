// Searching the caller's conversations from the sidebar. With a history store the server
// searches every saved conversation, titles and messages (GET /v1/sessions?q=); without one the
// page has only the conversation on screen, and searches its messages itself. Either way a
// result shows its match in context, marked, and opens (or scrolls to) where it was found.
// Matching ignores case, accents and width, as the server's does (near enough: NFKD without
// marks, lower-cased, each character of the original mapped to what it became).
import { apiJson } from './api.js';

// `text` folded for matching, with where each folded UTF-16 unit came from in `text`.
export function foldWithOrigin(text) {
  let folded = '';
  const origin = [];
  let offset = 0;
  for (const character of text) {
    const plain = character.normalize('NFKD').replace(/\p{M}/gu, '').toLowerCase();
    folded += plain;
    for (let i = 0; i < plain.length; i += 1) origin.push(offset);
    offset += character.length;
  }
  origin.push(text.length);
  return { folded, origin };
}

export const foldQuery = (query) => foldWithOrigin(query.trim().replace(/\s+/g, ' ')).folded;

// Where `query` (folded by foldQuery) first appears in `text`: { start, end } in `text`, or null.
export function findMatch(text, query) {
  if (!query) return null;
  const { folded, origin } = foldWithOrigin(text.replace(/\s/g, ' '));
  const at = folded.indexOf(query);
  if (at < 0) return null;
  // The end: just past the original character the match's last folded unit came from.
  const last = origin[at + query.length - 1];
  const end = last + (text.codePointAt(last) > 0xffff ? 2 : 1);
  return { start: origin[at], end };
}

const contextBefore = 40;
const contextAfter = 80;
const oneLine = (text) => text.replace(/\s+/g, ' ');

// The match in its context, for a result: { before, text, after } on one line.
export function snippetOf(text, { start, end }) {
  let from = Math.max(0, start - contextBefore);
  let to = Math.min(text.length, end + contextAfter);
  // Not half a surrogate pair at either edge.
  if (from > 0 && /[\udc00-\udfff]/.test(text[from])) from -= 1;
  if (to < text.length && /[\udc00-\udfff]/.test(text[to])) to += 1;
  return {
    before: (from > 0 ? '…' : '') + oneLine(text.slice(from, start)).trimStart(),
    text: oneLine(text.slice(start, end)),
    after: oneLine(text.slice(end, to)).trimEnd() + (to < text.length ? '…' : ''),
  };
}

// Wraps each match of `query` in the text under `root` in <mark class="search-mark">.
export function markMatches(root, query) {
  if (!query) return 0;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let marked = 0;
  for (let node of nodes) {
    if (node.parentElement.closest('button, .code-head')) continue;
    for (let match = findMatch(node.data, query); match; match = findMatch(node.data, query)) {
      const hit = node.splitText(match.start);
      node = hit.splitText(match.end - match.start);
      const mark = document.createElement('mark');
      mark.className = 'search-mark';
      hit.replaceWith(mark);
      mark.append(hit);
      marked += 1;
    }
  }
  return marked;
}

export function clearMarks(root) {
  for (const mark of root.querySelectorAll('mark.search-mark')) mark.replaceWith(...mark.childNodes);
  root.normalize();
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const where = { title: 'in the title', user: 'you wrote', assistant: 'in an answer' };

export class ConversationSearch {
  // `hooks`: serverSide() → whether the server keeps conversations (search it); local() → the
  // conversation on screen, { title, messages: [{ role, content }] }; openResult(result) with
  // { id, title, in, turn, query } or, for the conversation on screen, { message, query };
  // guard(promise) (a 401 goes back to the sign-in).
  constructor({ input, results, note, list }, hooks) {
    Object.assign(this, { input, results, note, list, hooks });
    this.generation = 0;
    this.timer = null;
    input.addEventListener('input', () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), 250);
    });
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Escape' && input.value) {
        event.preventDefault();
        this.clear();
      } else if (event.key === 'Enter' && !event.isComposing) {
        event.preventDefault();
        clearTimeout(this.timer);
        this.run().then(() => this.results.querySelector('button')?.click());
      } else if (event.key === 'ArrowDown') {
        const first = this.results.querySelector('button');
        if (first) {
          event.preventDefault();
          first.focus();
        }
      }
    });
    results.addEventListener('keydown', (event) => {
      if (!['ArrowDown', 'ArrowUp'].includes(event.key)) return;
      const buttons = [...results.querySelectorAll('button')];
      const at = buttons.indexOf(document.activeElement);
      if (at < 0) return;
      event.preventDefault();
      const next = at + (event.key === 'ArrowDown' ? 1 : -1);
      if (next < 0) input.focus();
      else buttons[Math.min(next, buttons.length - 1)].focus();
    });
  }

  get query() {
    return this.input.value.trim();
  }

  clear() {
    this.input.value = '';
    this.show(false);
  }

  show(searching) {
    this.results.hidden = !searching;
    this.list.hidden = searching;
    if (!searching) {
      this.results.replaceChildren();
      this.setNote('');
    }
  }

  setNote(text) {
    this.note.hidden = !text;
    this.note.textContent = text;
  }

  // Searches for what the box holds now; a slower earlier search that answers later is dropped.
  async run() {
    const query = this.query;
    const generation = ++this.generation;
    if (!query) {
      this.show(false);
      return;
    }
    const folded = foldQuery(query);
    let found;
    try {
      found = this.hooks.serverSide() ? await this.searchServer(query) : this.searchLocal(folded);
    } catch (error) {
      if (generation !== this.generation) return;
      this.show(true);
      this.results.replaceChildren();
      this.setNote(`Search failed: ${error.message}`);
      return;
    }
    if (generation !== this.generation || found === undefined) return;
    this.render(found, query, folded);
  }

  async searchServer(query) {
    const answer = await this.hooks.guard(apiJson(`/v1/sessions?q=${encodeURIComponent(query)}&limit=50`));
    if (!answer) return undefined;
    return { items: answer.data.map((session) => ({ ...session, snippet: session.match, in: session.match?.in, turn: session.match?.turn })), more: answer.has_more, scope: 'server' };
  }

  searchLocal(folded) {
    const conversation = this.hooks.local();
    const items = [];
    for (const [index, message] of (conversation?.messages || []).entries()) {
      const match = findMatch(message.content, folded);
      if (match) items.push({ message: index, role: message.role, title: conversation.title || 'This conversation', snippet: snippetOf(message.content, match) });
    }
    return { items, more: false, scope: 'local' };
  }

  render({ items, more, scope }, query, folded) {
    this.show(true);
    this.results.replaceChildren();
    const local = scope === 'local';
    if (!items.length) {
      this.setNote(local
        ? `Nothing in this conversation matches “${query}”. (This pipeline keeps no conversations, so only the one on screen is searched.)`
        : `No conversation matches “${query}”.`);
      return;
    }
    this.setNote(local
      ? 'This pipeline keeps no conversations: only the one on screen is searched.'
      : more ? `The first ${items.length} matches.` : '');
    for (const item of items) {
      const li = element('li', 'search-result');
      const open = element('button', 'open');
      open.type = 'button';
      const role = local ? (item.role === 'user' ? 'you wrote' : 'in an answer') : where[item.in] || '';
      open.append(element('span', 'result-title', item.title || item.id));
      const snippet = element('span', 'result-snippet');
      if (role) snippet.append(element('span', 'result-where', `${role}: `));
      if (item.snippet) snippet.append(item.snippet.before, element('mark', 'search-mark', item.snippet.text), item.snippet.after);
      open.append(snippet);
      open.setAttribute('aria-label', `Open ${item.title || item.id}, ${role}: ${item.snippet ? `${item.snippet.before}${item.snippet.text}${item.snippet.after}` : ''}`);
      if (!local) li.dataset.id = item.id;
      open.addEventListener('click', () => this.hooks.openResult(local
        ? { message: item.message, query: folded }
        : { id: item.id, title: item.title, in: item.in, turn: item.turn, query: folded }));
      li.append(open);
      this.results.append(li);
    }
  }
}
