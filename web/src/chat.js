// The chat page: sign-in, model picker, conversations kept by the server (/v1/sessions), and
// streamed answers read from fetch's body with our own SSE parser (EventSource cannot POST).
import './chat.css';

import { AnswerView, userMessage } from './answer_view.js';
import { Branches } from './branches.js';
import {
  apiFetch, apiJson, askForKey, AuthError, authHeaders, currentKey, errorMessage, NetworkError, probeOpen, reach, storeKey,
} from './api.js';
import { applySettings, ChatSettings, settingsFrom } from './chat_settings.js';
import { copyText } from './clipboard.js';
import { handleCodeCopy } from './code_blocks.js';
import { mountDocuments } from './documents.js';
import {
  download, exportDocument, fileName, ImportError, importToSessions, maxImportBytes, parseImport, sessionConversation, toMarkdown,
} from './conversation_exchange.js';
import { readCompletion, retractMessage } from './completion_stream.js';
import {
  clearMarks, ConversationSearch, findMatch, markMatches,
} from './conversation_search.js';
import { warmUp } from './render.js';
import { LocalConversations } from './local_conversations.js';
import { SessionsSidebar } from './sessions_sidebar.js';
import { fillShortcutTable, shortcutFor } from './shortcuts.js';
import { setupTheme } from './theme.js';
import { Typewriter } from './typewriter.js';

const $ = (id) => document.getElementById(id);
const ui = {
  signin: $('signin'), form: $('signin-form'), input: $('api-key'), messageElement: $('signin-message'),
  app: $('app'), model: $('model'), sessions: $('sessions'), sessionsNote: $('sessions-note'),
  newChat: $('new-chat'), messages: $('messages'), notice: $('notice'), composer: $('composer'),
  prompt: $('prompt'), send: $('send'), signout: $('signout'), title: $('conversation-title'),
  menu: $('menu'), closeSidebar: $('close-sidebar'), scrim: $('scrim'), sidebar: $('sidebar'),
  search: $('search'), searchResults: $('search-results'), searchNote: $('search-note'),
  developerView: $('developer-view'), showShortcuts: $('show-shortcuts'),
  shortcutsDialog: $('shortcuts-dialog'), shortcutsList: $('shortcuts-list'), shortcutsClose: $('shortcuts-close'),
  localSection: $('local-section'), localSessions: $('local-sessions'), exportJson: $('export-json'),
  exportMarkdown: $('export-markdown'), exportAll: $('export-all'), importButton: $('import'), importFile: $('import-file'),
  showSettings: $('show-settings'), settingsDialog: $('settings-dialog'), settingsForm: $('settings-form'),
  settingsClose: $('settings-close'), settingsScope: $('settings-scope'), settingsSystem: $('settings-system'),
  settingsTemperature: $('settings-temperature'), settingsTopP: $('settings-top-p'),
  settingsMaxTokens: $('settings-max-tokens'), settingsContext: $('settings-context'), settingsError: $('settings-error'),
  settingsSaveDefault: $('settings-save-default'), settingsUseDefaults: $('settings-use-defaults'),
};

const state = {
  needsKey: false,
  conversation: null, // { id, title, created, messages: [{ role, content }], isNew, local }
  generating: null,   // { controller, view }
  retryTimer: null,
  contextLengths: new Map(), // model id → max_model_len, where /v1/models gives it
};
const chatSettings = new ChatSettings();

function randomId() {
  if (crypto.randomUUID) return `web-${crypto.randomUUID()}`;
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `web-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

function showNotice(text, kind = 'info') {
  ui.notice.hidden = !text;
  ui.notice.textContent = text || '';
  ui.notice.className = `notice ${kind}`;
}

// Several calls failing with 401 at once share one form and one start() afterwards.
let signingIn = null;
function signIn(message) {
  storeKey('');
  ui.app.hidden = true;
  const entered = askForKey(ui, message);
  if (!signingIn) {
    signingIn = entered.then(() => {
      signingIn = null;
      return start();
    });
  }
  return signingIn;
}

// Any call that got a 401 or 403 ends here: back to the sign-in form.
async function guard(promise) {
  try {
    return await promise;
  } catch (error) {
    if (error instanceof AuthError && error.status === 401) {
      signIn('That key was not accepted; enter another.');
      return undefined;
    }
    throw error;
  }
}

// --- The sidebar as a drawer (phones: the CSS shows the menu button below 720 px). ---

// While it is open the page behind is inert: Tab and a screen reader stay in the drawer.
const drawerOpen = () => ui.app.classList.contains('drawer-open');
const main = document.querySelector('.main');
function openDrawer() {
  ui.app.classList.add('drawer-open');
  ui.scrim.hidden = false;
  main.inert = true;
  ui.menu.setAttribute('aria-expanded', 'true');
  ui.newChat.focus();
}
function closeDrawer({ focusMenu = false } = {}) {
  if (!drawerOpen()) return;
  ui.app.classList.remove('drawer-open');
  ui.scrim.hidden = true;
  main.inert = false;
  ui.menu.setAttribute('aria-expanded', 'false');
  if (focusMenu) ui.menu.focus();
}

// --- The developer view: cache and A/B badges are for whoever runs the server, not for
// people chatting; a switch in the sidebar shows them (kept in localStorage). ---

const developerViewKey = 'chatflow.developer_view';
function setDeveloperView(on) {
  ui.app.classList.toggle('developer-view', on);
  ui.developerView.checked = on;
  try {
    if (on) localStorage.setItem(developerViewKey, '1');
    else localStorage.removeItem(developerViewKey);
  } catch {
    // Storage may be off: the switch then lasts until the page reloads.
  }
}
function storedDeveloperView() {
  try {
    return localStorage.getItem(developerViewKey) === '1';
  } catch {
    return false;
  }
}

// --- Models and conversations. ---

const sidebar = new SessionsSidebar(ui.sessions, ui.sessionsNote, {
  currentId: () => state.conversation && state.conversation.id,
  open: (id, title) => openSession(id, title),
  renamed: (id, title) => {
    if (state.conversation && state.conversation.id === id) setTitle(title);
  },
  deleted: (id) => {
    if (state.conversation && state.conversation.id === id) newConversation();
  },
  failed: (message) => showNotice(message, 'error'),
  guard,
});

// Conversations held by the page (imported ones): they are not on the server.
const localList = new LocalConversations(ui.localSection, ui.localSessions, {
  currentId: () => state.conversation && state.conversation.id,
  open: (conversation) => openLocal(conversation),
  deleted: (id) => {
    if (state.conversation && state.conversation.id === id) newConversation();
  },
  warn: (message) => showNotice(message, 'warning'),
});

// Whether the open conversation is a session the server keeps (the request then carries only
// the new message and its session_id).
const onServer = (conversation) => sidebar.enabled && !conversation.local;

// Edit, Regenerate and ‹ n/m › over the conversation's branches (branches.js).
const branches = new Branches(ui.messages, {
  conversation: () => state.conversation,
  onServer,
  busy: () => Boolean(state.generating),
  ask: (text, options) => ask(text, options),
  copyAnswer: (view) => copyAnswer(view),
  notice: (message, kind) => showNotice(message, kind),
  fetch: (path, options) => guard(apiFetch(path, options)),
});

// Search over the caller's conversations (the server's, or the one on screen without a store).
const search = new ConversationSearch({
  input: ui.search, results: ui.searchResults, note: ui.searchNote, list: ui.sessions,
}, {
  serverSide: () => sidebar.enabled,
  local: () => state.conversation,
  openResult: (result) => openSearchResult(result),
  guard,
});

// The message a result points at: a saved conversation's turn (user, then answer, per turn), or
// the n-th message of that role on screen.
function resultMessage(result) {
  if (result.id !== undefined) {
    if (result.in !== 'user' && result.in !== 'assistant') return null;
    return ui.messages.children[2 * result.turn + (result.in === 'assistant' ? 1 : 0)] ?? null;
  }
  const messages = state.conversation.messages;
  const role = messages[result.message]?.role;
  if (!role) return null;
  const nth = messages.slice(0, result.message).filter((message) => message.role === role).length;
  return ui.messages.querySelectorAll(`.message.${role}`)[nth] ?? null;
}

async function openSearchResult(result) {
  if (result.id !== undefined && (!state.conversation || state.conversation.id !== result.id || state.conversation.isNew)) {
    await openSession(result.id, result.title);
    if (!state.conversation || state.conversation.id !== result.id) return;
  }
  closeDrawer();
  clearMarks(ui.messages);
  for (const old of ui.messages.querySelectorAll('.search-hit')) old.classList.remove('search-hit');
  // A title's match (or a turn no longer there): the first message that holds the words.
  const target = resultMessage(result)
    ?? [...ui.messages.querySelectorAll('.message')].find((message) => findMatch(message.textContent, result.query));
  if (!target) return;
  markMatches(target, result.query);
  target.classList.add('search-hit');
  target.scrollIntoView({ block: 'center' });
}

async function loadModels() {
  const models = await apiJson('/v1/models');
  const previous = ui.model.value;
  ui.model.replaceChildren();
  state.contextLengths.clear();
  for (const model of models.data || []) {
    if (Number.isInteger(model.max_model_len)) state.contextLengths.set(model.id, model.max_model_len);
    const option = document.createElement('option');
    option.value = model.id;
    option.textContent = model.id;
    ui.model.append(option);
  }
  if (previous && [...ui.model.options].some((option) => option.value === previous)) ui.model.value = previous;
}

function setTitle(title) {
  if (state.conversation) state.conversation.title = title;
  ui.title.textContent = title || 'New conversation';
}

function newConversation() {
  if (state.generating) stop();
  state.conversation = { id: randomId(), title: '', created: new Date().toISOString(), messages: [], isNew: true };
  ui.messages.replaceChildren();
  setTitle('');
  showNotice('');
  sidebar.markCurrent(null);
  localList.markCurrent(null);
  closeDrawer();
  ui.prompt.focus();
}

async function openSession(id, title) {
  if (state.generating) stop();
  let session;
  try {
    session = await guard(apiJson(`/v1/sessions/${encodeURIComponent(id)}`));
  } catch (error) {
    showNotice(`Could not open the conversation: ${error.message}`, 'error');
    return;
  }
  if (!session) return;
  state.conversation = { id, title: session.title || title, created: session.created_at, messages: [], isNew: false };
  ui.messages.replaceChildren();
  setTitle(state.conversation.title);
  showNotice('');
  branches.render(session.turns || []);
  sidebar.markCurrent(id);
  localList.markCurrent(null);
  closeDrawer();
  ui.prompt.focus();
}

// Opens a conversation of the page's own list. A conversation on screen that exists nowhere
// else (no history store) goes into that list first, so opening another never loses it.
function openLocal(conversation) {
  if (state.generating) stop();
  const current = state.conversation;
  if (current && !current.local && !sidebar.enabled && current.messages.length) {
    localList.add([{ id: current.id, title: current.title, created: current.created, messages: current.messages }]);
  }
  state.conversation = { ...conversation, messages: conversation.messages.slice(), isNew: false, local: true };
  ui.messages.replaceChildren();
  setTitle(conversation.title);
  showNotice('');
  if (!branches.showLocal(state.conversation)) for (const message of conversation.messages) {
    if (message.role === 'user') {
      userMessage(ui.messages, message.content);
    } else if (message.role === 'assistant') {
      const view = new AnswerView(ui.messages, { onCopy: copyAnswer });
      view.text = message.content;
      view.finish();
    } else {
      const note = document.createElement('p');
      note.className = 'message system hint';
      note.textContent = `System: ${message.content}`;
      ui.messages.append(note);
    }
  }
  sidebar.markCurrent(null);
  localList.markCurrent(conversation.id);
  closeDrawer();
  ui.prompt.focus();
}

// --- Sending and streaming. ---

function setGenerating(generating) {
  ui.prompt.readOnly = generating;
  ui.prompt.setAttribute('aria-busy', generating ? 'true' : 'false');
  ui.send.textContent = generating ? 'Stop' : 'Send';
  ui.send.setAttribute('aria-label', generating ? 'Stop generating' : 'Send message');
  ui.send.classList.toggle('stop', generating);
}

function stop() {
  if (!state.generating) return;
  state.generating.stopped = true;
  state.generating.controller.abort();
}

function copyAnswer(view) {
  return copyText(view.text, view.copyButton, { selectNode: view.content });
}

function retryCountdown(seconds, { givenBack = false } = {}) {
  clearInterval(state.retryTimer);
  let left = Math.max(1, Math.ceil(seconds));
  const after = givenBack ? ' Your message is back in the box.' : '';
  const show = () => {
    if (left <= 0) {
      clearInterval(state.retryTimer);
      ui.notice.dataset.retryAfter = '0';
      ui.send.disabled = false;
      showNotice('You can send again.', 'info');
      return;
    }
    ui.send.disabled = true;
    showNotice(`Rate limited: you can send again in ${left} s.${after}`, 'warning');
    ui.notice.dataset.retryAfter = String(left);
    left -= 1;
  };
  show();
  state.retryTimer = setInterval(show, 1000);
}

function submit() {
  const text = ui.prompt.value;
  if (state.generating || !text.trim() || ui.send.disabled) return;
  ui.prompt.value = '';
  ask(text, { fresh: true });
}

async function ask(text, { fresh, parentTurn }) {
  const conversation = state.conversation;
  let question = null;
  if (fresh) {
    question = userMessage(ui.messages, text);
    conversation.messages.push({ role: 'user', content: text });
    if (!conversation.title) setTitle(text.slice(0, 60));
  }
  const view = new AnswerView(ui.messages, {
    onCopy: copyAnswer,
    onRegenerate: (answer) => regenerate(answer, text),
  });
  view.root.scrollIntoView({ block: 'end' });
  const controller = new AbortController();
  const run = { controller, view, stopped: false };
  state.generating = run;
  setGenerating(true);
  showNotice('');

  // With server-side sessions the server holds the earlier turns: only the new message goes.
  const body = {
    model: ui.model.value || undefined,
    stream: true,
    stream_options: { include_usage: true },
    messages: onServer(conversation) ? [{ role: 'user', content: text }] : conversation.messages.slice(),
  };
  if (onServer(conversation)) body.session_id = conversation.id;
  // An edit or a regeneration: a new turn beside the one it replaces (branches.js).
  if (onServer(conversation) && parentTurn !== undefined) body.parent_turn = parentTurn;
  applySettings(body, chatSettings.effective(conversation.id));

  // A request the server refused, or never got, left nothing behind on it: the question
  // leaves the conversation and goes back into the box to be sent again, and `why` is said
  // above the box. (A regenerated answer has no question of its own to give back: the
  // reason stays on the answer.) Returns whether the question was given back.
  const giveBack = (why, kind) => {
    if (!fresh) {
      if (why) view.notice(why, kind);
      return false;
    }
    view.root.remove();
    question.remove();
    const last = conversation.messages.at(-1);
    if (last && last.role === 'user' && last.content === text) conversation.messages.pop();
    if (!conversation.messages.length && conversation === state.conversation) setTitle('');
    if (!ui.prompt.value) ui.prompt.value = text;
    // The server's messages often end without a full stop.
    if (why) showNotice(`${/[.!?]$/.test(why) ? why : `${why}.`} Your message was not sent; it is back in the box.`, kind);
    return true;
  };

  const started = performance.now();
  let firstToken = 0;
  let lastToken = 0;
  let contentChunks = 0;
  let usage = null;
  let finishReason = null;
  let retracted = null;
  // Follows the answer down while the reader is at the bottom; scrolling up stops that.
  const follow = () => ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 80;
  const typewriter = new Typewriter((more) => {
    const atBottom = follow();
    view.appendText(more);
    if (atBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
    // 20 reveals a second still reads as streaming; each costs a layout and a paint (web.md).
  }, { everyMs: 50 });
  try {
    const response = await reach('/v1/chat/completions', {
      method: 'POST',
      headers: authHeaders({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (response.status === 401) {
      if (!giveBack('')) view.root.remove();
      signIn('That key was not accepted; enter another.');
      return;
    }
    if (response.status === 429) {
      const retry = Number(response.headers.get('retry-after')) || 1;
      const message = await errorMessage(response);
      retryCountdown(retry, { givenBack: giveBack(fresh ? '' : message, 'warning') });
      return;
    }
    if (!response.ok) {
      giveBack(await errorMessage(response), 'error');
      return;
    }
    const cache = response.headers.get('x-chatflow-cache');
    if (cache) view.badge(cache === 'miss' || cache === 'bypass' ? `cache ${cache}` : `cached (${cache})`, `cache-${cache}`, `Cache: ${cache}`);
    const arm = response.headers.get('x-chatflow-arm');
    if (arm) view.badge(`arm ${arm}`, 'arm', `A/B arm: ${arm}`);

    const failed = await readCompletion(response.body, {
      content(text) {
        const now = performance.now();
        if (!firstToken) firstToken = now;
        lastToken = now;
        contentChunks += 1;
        typewriter.push(text);
      },
      reasoning: (text) => view.appendReasoning(text),
      toolCalls: (calls) => view.setToolCalls(calls),
      citations: (list) => view.setCitations(list),
      usage: (value) => { usage = value; },
      retract: (info) => {
        retracted = info;
        typewriter.discard();
        view.retract(retractMessage(info));
      },
      finish: (reason) => { finishReason = reason; },
    });
    await typewriter.end();
    if (failed) view.notice(`The answer stopped with an error: ${failed.message || JSON.stringify(failed)}`, 'error');
    if (finishReason === 'content_filter' && !retracted) view.notice('The rest of this answer was withheld by the content filter.', 'warning');
    if (finishReason === 'length') view.notice('The answer reached its length limit.', 'info');
  } catch (error) {
    typewriter.flush();
    if (error.name === 'AbortError' || run.stopped) {
      view.notice('Stopped.', 'info');
    } else if (error instanceof NetworkError) {
      giveBack(error.message, 'error');
    } else if (error instanceof TypeError) {
      // The answer's body broke off: the connection dropped or the server went away mid-answer.
      view.notice('The connection to the server was lost during this answer.'
        + (fresh ? ' Your message is back in the box to send again.' : ''), 'error');
      if (fresh && !ui.prompt.value) ui.prompt.value = text;
    } else {
      view.notice(`The request failed: ${error.message}`, 'error');
    }
  } finally {
    view.finish();
    const parts = [];
    if (firstToken) parts.push(`first token ${((firstToken - started) / 1000).toFixed(2)} s`);
    const tokens = (usage && usage.completion_tokens) || contentChunks;
    // Over a burst (a cached answer) a rate says nothing.
    if (firstToken && lastToken - firstToken > 50 && tokens > 1) {
      parts.push(`${((tokens - 1) / ((lastToken - firstToken) / 1000)).toFixed(1)} tokens/s`);
    }
    if (tokens) parts.push(`${tokens} tokens`);
    view.setStats(parts.join(' · '));
    if (view.text) conversation.messages.push({ role: 'assistant', content: view.text });
    if (conversation.local) localList.update(conversation);
    if (state.generating === run) {
      state.generating = null;
      setGenerating(false);
    }
    if (onServer(conversation) && conversation === state.conversation) {
      conversation.isNew = false;
      sidebar.reload();
    }
    branches.answered(conversation, { question: text, view, parentTurn });
  }
}

function regenerate(view, text) {
  branches.regenerate(view, text);
}

// --- Wiring. ---

ui.prompt.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' || event.shiftKey) return;
  // An IME is composing (Japanese, Chinese...): Enter picks a candidate, it does not send.
  if (event.isComposing || event.keyCode === 229) return;
  event.preventDefault();
  submit();
});
ui.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  if (state.generating) stop();
  else submit();
});
ui.newChat.addEventListener('click', newConversation);
ui.signout.addEventListener('click', () => signIn('Signed out. Enter a key to sign in again.'));
ui.menu.addEventListener('click', () => (drawerOpen() ? closeDrawer() : openDrawer()));
ui.closeSidebar.addEventListener('click', () => closeDrawer({ focusMenu: true }));
ui.scrim.addEventListener('click', () => closeDrawer());
// A window widened past the phone layout shows the sidebar in place: no drawer to leave open.
matchMedia('(max-width: 720px)').addEventListener('change', (event) => {
  if (!event.matches) closeDrawer();
});
handleCodeCopy(ui.messages);
ui.developerView.addEventListener('change', () => setDeveloperView(ui.developerView.checked));

// --- Export and import (conversation_exchange.js has the format and its checks). ---

function exportOpen(kind) {
  const conversation = state.conversation;
  if (!conversation || !conversation.messages.length) {
    showNotice('This conversation has no messages yet: nothing to export.', 'info');
    return;
  }
  if (kind === 'markdown') {
    download(fileName(conversation.title, 'md'), toMarkdown(conversation), 'text/markdown;charset=utf-8');
  } else {
    download(fileName(conversation.title, 'json'), `${JSON.stringify(exportDocument([conversation]), null, 2)}\n`, 'application/json');
  }
}

// Every conversation of the caller: the server's sessions (GET /v1/sessions:export) with a
// history store, else the one on screen; then the page's own list.
async function exportAll() {
  const conversations = [];
  if (sidebar.enabled) {
    let response;
    try {
      response = await guard(apiFetch('/v1/sessions:export'));
      if (!response) return;
      if (!response.ok) throw new Error(await errorMessage(response));
      const lines = (await response.text()).split('\n').filter((line) => line.trim());
      conversations.push(...lines.map((line) => sessionConversation(JSON.parse(line))));
    } catch (error) {
      showNotice(`Export failed: ${error.message}. Nothing was exported.`, 'error');
      return;
    }
  } else if (state.conversation && !state.conversation.local && state.conversation.messages.length) {
    conversations.push(state.conversation);
  }
  conversations.push(...localList.conversations);
  if (!conversations.length) {
    showNotice('You have no conversations yet: nothing to export.', 'info');
    return;
  }
  download(`chatflow-conversations-${new Date().toISOString().slice(0, 10)}.json`,
    `${JSON.stringify(exportDocument(conversations), null, 2)}\n`, 'application/json');
}

// With a history store each conversation a session can hold becomes one of the caller's sessions
// (POST /v1/sessions); the others go into the page's own list, each with why.
async function importConversations(conversations) {
  if (!sidebar.enabled) {
    localList.add(conversations);
    return { saved: [], kept: conversations.map((conversation) => ({ conversation, why: '' })) };
  }
  const result = await importToSessions(conversations, (body) => guard(apiFetch('/v1/sessions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  })));
  if (result.kept.length) localList.add(result.kept.map(({ conversation }) => conversation));
  if (result.saved.length) sidebar.reload();
  return result;
}

function importedNotice(name, { saved, kept }) {
  const count = (n) => (n === 1 ? '1 conversation' : `${n} conversations`);
  const parts = [];
  if (saved.length) parts.push(`Imported ${count(saved.length)} from ${name} into your saved conversations.`);
  if (kept.length && !saved.length && kept.every(({ why }) => !why)) {
    return `Imported ${count(kept.length)} from ${name} into the list “In this tab, not on the server”: `
      + 'this server keeps no conversations, so they stay in this tab (export them to keep them).';
  }
  if (kept.length) {
    const reasons = kept.map(({ conversation, why }) => `“${conversation.title || 'Untitled'}”: ${why || 'not saved'}`).join('; ');
    const one = kept.length === 1;
    const who = saved.length ? count(kept.length) : (one ? 'It' : 'They');
    if (!saved.length) parts.push(`Imported ${count(kept.length)} from ${name}.`);
    parts.push(`${who} ${one ? 'stays' : 'stay'} in the list “In this tab, not on the server” (${reasons}).`);
  }
  return parts.join(' ');
}

// The chosen file, checked whole before anything changes: a bad file imports nothing, and the
// open conversation stays open either way.
async function importFile(file) {
  closeDrawer();
  try {
    if (file.size > maxImportBytes) {
      throw new ImportError(`the file is ${(file.size / 1048576).toFixed(1)} MiB; at most ${maxImportBytes / 1048576} MiB can be imported`);
    }
    const conversations = parseImport(await file.text());
    showNotice(importedNotice(file.name, await importConversations(conversations)), 'info');
  } catch (error) {
    showNotice(`Import of ${file.name} failed: ${error.message}. Nothing was imported.`, 'error');
  }
}

ui.exportJson.addEventListener('click', () => exportOpen('json'));
ui.exportMarkdown.addEventListener('click', () => exportOpen('markdown'));
ui.exportAll.addEventListener('click', () => exportAll());
ui.importButton.addEventListener('click', () => ui.importFile.click());
ui.importFile.addEventListener('change', () => {
  const [file] = ui.importFile.files;
  ui.importFile.value = '';
  if (file) importFile(file);
});

// --- Settings: defaults in localStorage, a chat's own by its id (chat_settings.js). ---

const settingsFields = () => ({
  systemPrompt: ui.settingsSystem.value,
  temperature: ui.settingsTemperature.value,
  topP: ui.settingsTopP.value,
  maxTokens: ui.settingsMaxTokens.value,
});

function fillSettings(settings) {
  ui.settingsSystem.value = settings.systemPrompt;
  ui.settingsTemperature.value = settings.temperature ?? '';
  ui.settingsTopP.value = settings.topP ?? '';
  ui.settingsMaxTokens.value = settings.maxTokens ?? '';
  const own = Boolean(chatSettings.own(state.conversation.id));
  ui.settingsScope.textContent = own
    ? 'This chat has its own settings.'
    : 'This chat uses the defaults (they apply to every chat without its own).';
  ui.settingsUseDefaults.hidden = !own;
  ui.settingsError.hidden = true;
}

function showContext() {
  const model = ui.model.value;
  const length = state.contextLengths.get(model);
  ui.settingsContext.textContent = length
    ? `${model}: a context of ${length.toLocaleString('en-US')} tokens (the conversation and the answer together).`
    : `The server does not give ${model ? `${model}'s` : 'this model\'s'} context length.`;
}

function showSettings() {
  if (ui.settingsDialog.open) return;
  const returnTo = document.activeElement;
  fillSettings(chatSettings.effective(state.conversation.id));
  showContext();
  ui.settingsDialog.addEventListener('close', () => {
    if (returnTo && returnTo.isConnected && !returnTo.closest('[inert]')) returnTo.focus();
  }, { once: true });
  ui.settingsDialog.showModal();
  ui.settingsSystem.focus();
}

// Saves the form (for this chat, or as the defaults, which this chat then uses); a field that
// does not read is said in the dialog and nothing is saved.
function saveSettings(scope) {
  const { settings, error } = settingsFrom(settingsFields());
  if (error) {
    ui.settingsError.textContent = error;
    ui.settingsError.hidden = false;
    return;
  }
  const id = state.conversation.id;
  const stored = scope === 'chat'
    ? chatSettings.saveOwn(id, settings)
    : chatSettings.saveDefaults(settings) && chatSettings.dropOwn(id);
  ui.settingsDialog.close();
  showNotice(stored
    ? (scope === 'chat' ? 'Saved for this chat.' : 'Saved as the default settings; this chat uses them.')
    : 'Saved until the page reloads: this browser does not let the page store them.', stored ? 'info' : 'warning');
}

ui.showSettings.addEventListener('click', showSettings);
ui.settingsClose.addEventListener('click', () => ui.settingsDialog.close());
ui.settingsDialog.addEventListener('click', (event) => {
  if (event.target === ui.settingsDialog) ui.settingsDialog.close();
});
ui.settingsForm.addEventListener('submit', (event) => {
  event.preventDefault();
  saveSettings('chat');
});
ui.settingsSaveDefault.addEventListener('click', () => saveSettings('default'));
ui.settingsUseDefaults.addEventListener('click', () => {
  chatSettings.dropOwn(state.conversation.id);
  fillSettings(chatSettings.defaults);
  ui.settingsSystem.focus();
});
ui.model.addEventListener('change', showContext);

// --- Keyboard shortcuts (shortcuts.js has the table and the rule) and their help dialog. ---

function showShortcuts() {
  if (ui.shortcutsDialog.open) return;
  const returnTo = document.activeElement;
  fillShortcutTable(ui.shortcutsList, new Set(Object.keys(shortcutActions)));
  ui.shortcutsDialog.addEventListener('close', () => {
    if (returnTo && returnTo.isConnected && !returnTo.closest('[inert]')) returnTo.focus();
  }, { once: true });
  ui.shortcutsDialog.showModal();
  ui.shortcutsClose.focus();
}

// Each returns false when it did nothing (the key then keeps its usual meaning).
const shortcutActions = {
  'new-chat': () => newConversation(),
  'focus-prompt': () => {
    closeDrawer();
    ui.prompt.focus();
  },
  escape: () => {
    if (drawerOpen()) closeDrawer({ focusMenu: true });
    else if (state.generating) stop();
    else return false;
    return true;
  },
  help: () => showShortcuts(),
  export: () => exportOpen('json'),
  settings: () => showSettings(),
  import: () => ui.importFile.click(),
  search: () => {
    if (matchMedia('(max-width: 720px)').matches && !drawerOpen()) openDrawer();
    ui.search.focus();
    ui.search.select();
  },
};

document.addEventListener('keydown', (event) => {
  // Not while signing in, not under a modal dialog (it has its own keys), and not a key a
  // control already used (Escape cancelling a rename).
  if (event.defaultPrevented || ui.app.hidden || document.querySelector('dialog[open]')) return;
  const action = shortcutFor(event);
  if (!action || !shortcutActions[action]) return;
  if (shortcutActions[action]() === false) return;
  event.preventDefault();
});
ui.showShortcuts.addEventListener('click', showShortcuts);
ui.shortcutsClose.addEventListener('click', () => ui.shortcutsDialog.close());
ui.shortcutsDialog.addEventListener('click', (event) => {
  if (event.target === ui.shortcutsDialog) ui.shortcutsDialog.close();
});

let documents = null;  // the caller's uploads (documents.js), once the page opens
async function start() {
  try {
    await guard((async () => {
      await loadModels();
      await sidebar.load();
    })());
  } catch (error) {
    showNotice(error instanceof NetworkError ? error.message : `Could not load the page's data: ${error.message}`, 'error');
  }
  if (state.needsKey && !currentKey()) return;
  ui.signout.hidden = !state.needsKey;
  ui.app.hidden = false;
  if (documents) documents.load();
  else documents = mountDocuments({ composer: ui.composer, sendButton: ui.send, notify: showNotice });
  if (!state.conversation) newConversation();
}

setupTheme($('theme'));
setDeveloperView(storedDeveloperView());
warmUp();
(async () => {
  // A server that cannot be reached says nothing about keys: the page opens and says so,
  // with the sign-in only where a key was already in use.
  state.needsKey = !(await probeOpen().catch((error) => (error instanceof NetworkError ? !currentKey() : false)));
  if (state.needsKey && !currentKey()) {
    await askForKey(ui, 'This server needs an API key.');
  }
  await start();
})();
