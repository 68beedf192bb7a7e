// What each chat request asks for besides its messages: a system prompt, temperature, top-p and
// max tokens. Defaults are kept in localStorage; a chat may have its own, kept there too by the
// conversation's id. An empty field means "the server's default": nothing is sent for it.
const defaultsKey = 'chatflow.chat_settings';
const perChatKey = 'chatflow.chat_settings.per_chat';
// Per-chat settings kept at most: the oldest go first.
const perChatLimit = 200;

export const emptySettings = Object.freeze({ systemPrompt: '', temperature: null, topP: null, maxTokens: null });

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key) || 'null');
    return value && typeof value === 'object' ? value : fallback;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false; // Storage off or full: the settings last until the page reloads.
  }
}

// Only the known fields, with the right types (what storage holds may be old or edited).
function clean(settings) {
  const number = (value) => (typeof value === 'number' && Number.isFinite(value) ? value : null);
  return {
    systemPrompt: typeof settings?.systemPrompt === 'string' ? settings.systemPrompt : '',
    temperature: number(settings?.temperature),
    topP: number(settings?.topP),
    maxTokens: number(settings?.maxTokens),
  };
}

export class ChatSettings {
  constructor() {
    this.defaults = clean(read(defaultsKey, emptySettings));
    this.perChat = read(perChatKey, {});
  }

  saveDefaults(settings) {
    this.defaults = clean(settings);
    return write(defaultsKey, this.defaults);
  }

  // The chat's own settings, or null when it uses the defaults.
  own(id) {
    const entry = id && this.perChat[id];
    return entry ? clean(entry.settings) : null;
  }

  effective(id) {
    return this.own(id) ?? this.defaults;
  }

  saveOwn(id, settings) {
    this.perChat[id] = { settings: clean(settings), at: Date.now() };
    const ids = Object.keys(this.perChat);
    if (ids.length > perChatLimit) {
      ids.sort((a, b) => this.perChat[a].at - this.perChat[b].at);
      for (const old of ids.slice(0, ids.length - perChatLimit)) delete this.perChat[old];
    }
    return write(perChatKey, this.perChat);
  }

  dropOwn(id) {
    if (!this.perChat[id]) return true;
    delete this.perChat[id];
    return write(perChatKey, this.perChat);
  }
}

// The settings a form's fields hold, or { error } naming the field. The server has the last
// word (a max_tokens beyond what it allows is refused by it, and said as any refusal is).
export function settingsFrom({ systemPrompt, temperature, topP, maxTokens }) {
  const number = (text) => (text.trim() === '' ? null : Number(text));
  const settings = {
    systemPrompt, temperature: number(temperature), topP: number(topP), maxTokens: number(maxTokens),
  };
  if (settings.temperature !== null && !(settings.temperature >= 0 && settings.temperature <= 2)) {
    return { error: `Temperature must be a number from 0 to 2 (or empty for the server's default), not "${temperature}".` };
  }
  if (settings.topP !== null && !(settings.topP > 0 && settings.topP <= 1)) {
    return { error: `Top-p must be a number above 0 and at most 1 (or empty for the server's default), not "${topP}".` };
  }
  if (settings.maxTokens !== null && !(Number.isInteger(settings.maxTokens) && settings.maxTokens >= 1)) {
    return { error: `Max tokens must be a whole number of at least 1 (or empty for the server's default), not "${maxTokens}".` };
  }
  return { settings };
}

// What the settings add to a /v1/chat/completions body: the system prompt as the first message
// (unless the messages already start with one), temperature, top_p and max_tokens.
export function applySettings(body, settings) {
  if (settings.systemPrompt.trim() && body.messages[0]?.role !== 'system') {
    body.messages.unshift({ role: 'system', content: settings.systemPrompt });
  }
  if (settings.temperature !== null) body.temperature = settings.temperature;
  if (settings.topP !== null) body.top_p = settings.topP;
  if (settings.maxTokens !== null) body.max_tokens = settings.maxTokens;
  return body;
}
