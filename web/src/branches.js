// Editing a sent message and regenerating an answer, with every version kept as a branch and
// ‹ n/m › to move between them. A conversation is a tree of turns (a question and its answer);
// an edit or a regeneration is a new turn beside the one it replaces (a sibling under the same
// parent). The screen shows one path. With a history store the tree is the server's
// (GET /v1/sessions/{id} gives the path with each turn's siblings; a request names its parent
// with `parent_turn`; PATCH {"active_turn"} switches the path). Without one, the page keeps the
// tree of the conversation on screen in memory (LocalTree), in the same shape.
import './branches.css';
import { AnswerView, userMessage } from './answer_view.js';

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The page's own tree, for a conversation the server does not keep. Ids from 1 in the order
// turns were added; 0 is the root. Gives paths in the server's shape.
export class LocalTree {
  constructor() {
    this.turns = [];
    this.active = 0;
  }

  // A tree holding `messages` as one chain: leading system messages, then user/assistant pairs
  // (a last question without an answer is left out). Null when they do not pair up so.
  static fromMessages(messages) {
    const tree = new LocalTree();
    let at = 0;
    while (at < messages.length && messages[at].role === 'system') at += 1;
    let parent = 0;
    for (; at < messages.length; at += 2) {
      const question = messages[at];
      const answer = messages[at + 1];
      if (question.role !== 'user' || !answer || answer.role !== 'assistant') return null;
      parent = tree.add(parent, question.content, answer.content);
    }
    return tree;
  }

  add(parent, user, assistant, status = 'completed') {
    const id = this.turns.length + 1;
    this.turns.push({ id, parent, user, assistant, status });
    this.active = id;
    return id;
  }

  has(id) { return id >= 1 && id <= this.turns.length; }
  children(id) { return this.turns.filter((turn) => turn.parent === id).map((turn) => turn.id); }

  pathTo(id) {
    const path = [];
    for (let at = id; at > 0; at = this.turns[at - 1].parent) path.unshift(at);
    return path;
  }

  // To the active turn, then down through the newest child: as the server shows a session.
  shownPath() {
    const path = this.pathTo(this.active);
    for (let next = this.children(this.active); next.length; next = this.children(path.at(-1))) path.push(next.at(-1));
    return path;
  }

  show(id) { if (this.has(id)) this.active = id; }

  // The shown path as GET /v1/sessions/{id} gives it.
  session() {
    return this.shownPath().map((id) => {
      const turn = this.turns[id - 1];
      const siblings = this.children(turn.parent);
      return { ...turn, siblings, sibling_index: siblings.indexOf(id) };
    });
  }
}

// Leading system messages, then the path's questions and answers: what a request without a
// history store sends before a new question.
export function messagesOf(prefix, turns) {
  const messages = prefix.slice();
  for (const turn of turns) messages.push({ role: 'user', content: turn.user ?? '' }, { role: 'assistant', content: turn.assistant ?? '' });
  return messages;
}

const leadingSystem = (messages) => {
  const prefix = [];
  for (const message of messages) {
    if (message.role !== 'system') break;
    prefix.push(message);
  }
  return prefix;
};

export class Branches {
  // hooks: conversation() the one on screen, onServer(conversation), busy(), ask(text,
  // { fresh, parentTurn }), copyAnswer(view), showSession(turns) after the server switched
  // branches, notice(message, kind), fetch (apiFetch).
  constructor(messagesElement, hooks) {
    this.messages = messagesElement;
    this.hooks = hooks;
    this.shownPath = [];  // the turns on screen, in order, as the server (or LocalTree) gives them
    this.pathOf = null;   // the conversation they belong to
    // The page's trees, by conversation object: never a property of it, which the page's own
    // list would save with the conversation.
    this.trees = new WeakMap();
  }

  // The turns on screen (none before the conversation on screen was decorated).
  get path() {
    return this.pathOf === this.hooks.conversation() ? this.shownPath : [];
  }

  // Shows a conversation the page keeps (an imported one) with its controls; false when its
  // messages are not turns (the caller shows them as they are).
  showLocal(conversation) {
    const tree = this.localTree(conversation);
    if (!tree) return false;
    this.render(tree.session());
    return true;
  }

  // The tree of a conversation the server does not keep (made from its messages when first
  // needed); null when its messages do not pair up as turns.
  localTree(conversation) {
    if (!this.trees.has(conversation)) this.trees.set(conversation, LocalTree.fromMessages(conversation.messages));
    return this.trees.get(conversation);
  }

  // Shows `turns` (a path in the server's shape): every message of it, with its controls.
  render(turns) {
    const conversation = this.hooks.conversation();
    this.messages.replaceChildren();
    const prefix = leadingSystem(conversation.messages);
    for (const message of prefix) this.messages.append(element('p', 'message system hint', `System: ${message.content}`));
    for (const turn of turns) {
      userMessage(this.messages, turn.user ?? '');
      const view = new AnswerView(this.messages, {
        onCopy: this.hooks.copyAnswer,
        onRegenerate: (answer) => this.regenerate(answer, turn.user ?? ''),
      });
      view.text = turn.assistant ?? '';
      view.finish();
      if (turn.status && turn.status !== 'completed') view.notice(`This answer was ${turn.status}.`, 'warning');
    }
    conversation.messages = messagesOf(prefix, turns);
    this.decorate(turns);
  }

  // Puts Edit and ‹ n/m › on the messages of `turns`, the path on screen.
  decorate(turns) {
    this.shownPath = turns;
    this.pathOf = this.hooks.conversation();
    const questions = this.messages.querySelectorAll('.message.user');
    turns.forEach((turn, index) => {
      const question = questions[index];
      if (!question) return;
      question.querySelector('.branch-actions')?.remove();
      const actions = element('div', 'branch-actions');
      const edit = element('button', 'small', 'Edit');
      edit.type = 'button';
      edit.setAttribute('aria-label', 'Edit this message');
      edit.addEventListener('click', () => this.edit(question, index));
      actions.append(edit);
      const siblings = turn.siblings || [];
      if (siblings.length > 1) actions.append(this.navigation(turn, siblings));
      question.append(actions);
    });
  }

  navigation(turn, siblings) {
    const index = turn.sibling_index;
    const nav = element('span', 'branch-nav');
    nav.setAttribute('role', 'group');
    nav.setAttribute('aria-label', 'Versions of this message');
    const previous = element('button', 'small', '‹');
    previous.type = 'button';
    previous.setAttribute('aria-label', 'Previous version');
    previous.disabled = index <= 0;
    previous.addEventListener('click', () => this.showTurn(siblings[index - 1]));
    const position = element('span', 'branch-position', `${index + 1}/${siblings.length}`);
    position.setAttribute('aria-label', `Version ${index + 1} of ${siblings.length}`);
    const next = element('button', 'small', '›');
    next.type = 'button';
    next.setAttribute('aria-label', 'Next version');
    next.disabled = index >= siblings.length - 1;
    next.addEventListener('click', () => this.showTurn(siblings[index + 1]));
    nav.append(previous, position, next);
    return nav;
  }

  // Another version of a turn: the server's (PATCH), or the page's tree.
  async showTurn(id) {
    if (this.hooks.busy() || id === undefined) return;
    const conversation = this.hooks.conversation();
    const focusAfter = document.activeElement?.getAttribute('aria-label');
    if (this.hooks.onServer(conversation)) {
      let session;
      try {
        const response = await this.hooks.fetch(`/v1/sessions/${encodeURIComponent(conversation.id)}`, {
          method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ active_turn: id }),
        });
        if (!response) return;  // signed out
        if (!response.ok) throw new Error((await response.json().catch(() => null))?.error?.message || `${response.status}`);
        session = await response.json();
      } catch (error) {
        this.hooks.notice(`Could not show that version: ${error.message}`, 'error');
        return;
      }
      this.render(session.turns || []);
    } else {
      const tree = this.localTree(conversation);
      if (!tree) return;
      tree.show(id);
      this.render(tree.session());
    }
    // The focus stays on the arrow pressed (on the turn now shown), for the next press; at the
    // last version, on the other arrow.
    const index = this.path.findIndex((turn) => turn.id === id);
    const question = this.messages.querySelectorAll('.message.user')[index];
    const arrows = [...(question?.querySelectorAll('.branch-nav button') ?? [])];
    const again = arrows.find((arrow) => arrow.getAttribute('aria-label') === focusAfter && !arrow.disabled)
      ?? arrows.find((arrow) => !arrow.disabled);
    again?.focus();
  }

  // The path before turn `index`, for a request that replaces that turn; removes the messages
  // from `from` on.
  truncate(from, index) {
    const conversation = this.hooks.conversation();
    const prefix = leadingSystem(conversation.messages);
    let node = from;
    while (node) {
      const next = node.nextElementSibling;
      node.remove();
      node = next;
    }
    conversation.messages = messagesOf(prefix, this.path.slice(0, index));
    const parentTurn = index < this.path.length ? this.path[index].parent : undefined;
    return parentTurn;
  }

  // The inline editor of a sent message: Save & submit asks the new text as a sibling of the
  // turn; Cancel (or Escape) puts the message back as it was.
  edit(question, index) {
    if (this.hooks.busy() || question.querySelector('.branch-editor')) return;
    const content = question.querySelector('.content');
    const actions = question.querySelector('.branch-actions');
    const original = this.path[index]?.user ?? content.textContent;
    const form = element('form', 'branch-editor');
    const field = element('textarea');
    field.value = original;
    field.rows = Math.min(8, Math.max(2, original.split('\n').length));
    field.setAttribute('aria-label', 'Edit your message');
    const save = element('button', 'small primary', 'Save & submit');
    save.type = 'submit';
    const cancel = element('button', 'small', 'Cancel');
    cancel.type = 'button';
    const buttons = element('div', 'branch-editor-buttons');
    buttons.append(save, cancel);
    form.append(field, buttons);
    content.hidden = true;
    if (actions) actions.hidden = true;
    question.classList.add('editing');
    question.append(form);
    const close = () => {
      form.remove();
      content.hidden = false;
      if (actions) actions.hidden = false;
      question.classList.remove('editing');
      question.querySelector('button[aria-label="Edit this message"]')?.focus();
    };
    cancel.addEventListener('click', close);
    field.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') {
        event.preventDefault();
        event.stopPropagation();
        close();
      } else if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const text = field.value;
      if (!text.trim() || this.hooks.busy()) return;
      const parentTurn = this.truncate(question, index);
      this.hooks.ask(text, { fresh: true, parentTurn });
    });
    field.focus();
    field.setSelectionRange(field.value.length, field.value.length);
  }

  // Asks turn `view`'s question again: a new answer beside the old one.
  regenerate(view, text) {
    if (this.hooks.busy()) return;
    const answers = [...this.messages.querySelectorAll('.message.assistant')];
    const index = answers.indexOf(view.root);
    if (index < 0 || index >= this.path.length) {
      // A turn the tree does not know (its messages are not turns): the answer is replaced.
      const { messages } = this.hooks.conversation();
      if (messages.at(-1)?.role === 'assistant') messages.pop();
      view.root.remove();
      this.hooks.ask(text, { fresh: false });
      return;
    }
    const question = this.path[index].user;
    const parentTurn = this.truncate(view.root, index);
    this.hooks.conversation().messages.push({ role: 'user', content: question });
    this.hooks.ask(question, { fresh: false, parentTurn });
  }

  // After an answer: the tree learns the new turn (the server's, read again; or the page's).
  async answered(conversation, { question, view, parentTurn }) {
    if (conversation !== this.hooks.conversation()) return;
    if (this.hooks.onServer(conversation)) {
      let session;
      try {
        const response = await this.hooks.fetch(`/v1/sessions/${encodeURIComponent(conversation.id)}`);
        if (!response || !response.ok) return;
        session = await response.json();
      } catch {
        return;  // the controls come with the next answer or a reload
      }
      if (conversation !== this.hooks.conversation() || this.hooks.busy()) return;
      this.decorate(session.turns || []);
      return;
    }
    if (!view.root.isConnected || !view.text) return;  // given back, or refused: no new turn
    let tree = this.trees.get(conversation);
    if (!tree) {
      this.trees.delete(conversation);  // a conversation that was not turns may be now
      tree = this.localTree(conversation);
    } else {
      const parent = parentTurn ?? (this.path.length ? this.path.at(-1).id : 0);
      tree.add(parent, question, view.text);
    }
    if (tree) this.decorate(tree.session());
  }
}
