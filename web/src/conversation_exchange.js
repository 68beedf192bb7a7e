// Export and import of conversations. The JSON file is a documented, versioned format
// (docs/web.md): {format: "chatflow-conversations", version: 1, conversations: [{title,
// created, messages: [{role, content}]}]}; the open conversation also exports as Markdown.
// An import is read whole and checked before anything changes, and says what is wrong in words
// that point at the place ("conversation 2: message 5 has no content").

export const exportFormat = 'chatflow-conversations';
export const exportVersion = 1;
const roles = ['system', 'user', 'assistant'];
// A file larger than this is refused before it is read: the page keeps imports in localStorage.
export const maxImportBytes = 20 * 1024 * 1024;

export class ImportError extends Error {}

// An ISO 8601 time from a session's created_at (seconds since the epoch) or a Date/string.
export function isoTime(value) {
  if (typeof value === 'number' && Number.isFinite(value)) {
    return new Date(value < 1e12 ? value * 1000 : value).toISOString();
  }
  if (typeof value === 'string' && !Number.isNaN(Date.parse(value))) return new Date(value).toISOString();
  return new Date().toISOString();
}

// A conversation of the page ({title, created, messages}) as the format writes it.
function exported(conversation) {
  return {
    title: conversation.title || '',
    created: isoTime(conversation.created),
    messages: conversation.messages
      .filter((message) => typeof message.content === 'string')
      .map((message) => ({ role: message.role, content: message.content })),
  };
}

export function exportDocument(conversations) {
  return { format: exportFormat, version: exportVersion, conversations: conversations.map(exported) };
}

// A session of GET /v1/sessions:export (one JSON line) as a conversation: each turn is the
// question and its answer.
export function sessionConversation(session) {
  const messages = [];
  for (const turn of session.turns || []) {
    messages.push({ role: 'user', content: turn.user ?? '' });
    if (typeof turn.assistant === 'string') messages.push({ role: 'assistant', content: turn.assistant });
  }
  return { title: session.title || '', created: session.created_at, messages };
}

const roleHeading = { system: 'System', user: 'You', assistant: 'Assistant' };

export function toMarkdown(conversation) {
  const title = conversation.title || 'Conversation';
  const parts = [`# ${title.replace(/\s+/g, ' ')}`, '', `_Exported from chatflow on ${new Date().toISOString()}; started ${isoTime(conversation.created)}._`];
  for (const message of conversation.messages) {
    parts.push('', `## ${roleHeading[message.role] || message.role}`, '', message.content);
  }
  return `${parts.join('\n')}\n`;
}

// A name for a downloaded file: the title's letters and digits, else "conversation".
export function fileName(title, extension) {
  const stem = (title || '').normalize('NFKD').replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 60);
  return `${stem || 'conversation'}.${extension}`;
}

const describe = (value) => (value === null ? 'null' : Array.isArray(value) ? 'a list' : typeof value);

// The conversations of an export file's text, checked: throws ImportError saying what is wrong
// and where (conversations and messages counted from 1).
export function parseImport(text) {
  let document;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new ImportError(`not a chatflow export: the file is not JSON (${error.message})`);
  }
  if (!document || typeof document !== 'object' || Array.isArray(document)) {
    throw new ImportError(`not a chatflow export: the file holds ${describe(document)}, not an object`);
  }
  if (!('format' in document)) throw new ImportError("not a chatflow export: missing 'format'");
  if (document.format !== exportFormat) {
    throw new ImportError(`not a chatflow export: 'format' is ${JSON.stringify(document.format)}, expected "${exportFormat}"`);
  }
  if (!('version' in document)) throw new ImportError("missing 'version' (this page reads version 1)");
  if (document.version !== exportVersion) {
    throw new ImportError(`unsupported version ${JSON.stringify(document.version)}: this page reads version ${exportVersion}`);
  }
  if (!Array.isArray(document.conversations)) {
    throw new ImportError(`'conversations' must be a list, got ${describe(document.conversations)}`);
  }
  if (!document.conversations.length) throw new ImportError('the file holds no conversations');
  return document.conversations.map((conversation, index) => checkedConversation(conversation, index + 1));
}

function checkedConversation(conversation, number) {
  const where = `conversation ${number}`;
  if (!conversation || typeof conversation !== 'object' || Array.isArray(conversation)) {
    throw new ImportError(`${where} is ${describe(conversation)}, not an object`);
  }
  if (conversation.title !== undefined && typeof conversation.title !== 'string') {
    throw new ImportError(`${where}: 'title' must be text, got ${describe(conversation.title)}`);
  }
  if (conversation.created !== undefined && (typeof conversation.created !== 'string' || Number.isNaN(Date.parse(conversation.created)))) {
    throw new ImportError(`${where}: 'created' must be a date such as "2026-01-31T12:00:00Z", got ${JSON.stringify(conversation.created)}`);
  }
  if (!Array.isArray(conversation.messages)) {
    throw new ImportError(`${where}: 'messages' must be a list, got ${describe(conversation.messages)}`);
  }
  const messages = conversation.messages.map((message, index) => {
    const at = `${where}: message ${index + 1}`;
    if (!message || typeof message !== 'object' || Array.isArray(message)) {
      throw new ImportError(`${at} is ${describe(message)}, not an object`);
    }
    if (!roles.includes(message.role)) {
      throw new ImportError(message.role === undefined
        ? `${at} has no role`
        : `${at} has role ${JSON.stringify(message.role)}; expected one of ${roles.join(', ')}`);
    }
    if (message.content === undefined || message.content === null) throw new ImportError(`${at} has no content`);
    if (typeof message.content !== 'string') {
      throw new ImportError(`${at}: 'content' must be text, got ${describe(message.content)}`);
    }
    return { role: message.role, content: message.content };
  });
  const firstQuestion = messages.find((message) => message.role === 'user');
  return {
    title: conversation.title?.trim() || (firstQuestion ? firstQuestion.content.replace(/\s+/g, ' ').trim().slice(0, 60) : ''),
    created: conversation.created ? new Date(conversation.created).toISOString() : new Date().toISOString(),
    messages,
  };
}

// Offers `text` as a downloaded file.
export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// Why a session cannot hold `conversation` as it is, or '' when it can: a session keeps
// questions and their answers (POST /v1/sessions), a user message then an assistant message
// from the first, the last one answered.
export function sessionMisfit(conversation) {
  const { messages } = conversation;
  if (messages.some((message) => message.role === 'system')) return 'it has a system message';
  if (messages.length % 2 !== 0) return 'its last question has no answer';
  const paired = messages.every((message, index) => message.role === (index % 2 === 0 ? 'user' : 'assistant'));
  return paired ? '' : 'its messages do not alternate question and answer';
}

// Writes each conversation a session can hold into the caller's sessions (POST /v1/sessions,
// newest first on the server as in the file: the last written first); the others, and any the
// server refused, are returned with why, for the page to keep. `post(body)` answers the
// Response, or undefined (signed out).
export async function importToSessions(conversations, post) {
  const saved = [];
  const kept = [];
  for (const conversation of conversations.slice().reverse()) {
    const misfit = sessionMisfit(conversation);
    if (misfit) {
      kept.unshift({ conversation, why: misfit });
      continue;
    }
    const body = { messages: conversation.messages.map(({ role, content }) => ({ role, content })) };
    if (conversation.title && conversation.title.trim()) body.title = conversation.title.trim().slice(0, 200);
    let why = '';
    try {
      const response = await post(body);
      if (!response) why = 'you were signed out';
      else if (response.ok) saved.unshift(await response.json());
      else why = (await response.json().catch(() => null))?.error?.message || `the server answered ${response.status}`;
    } catch (error) {
      why = error.message;
    }
    if (why) kept.unshift({ conversation, why });
  }
  return { saved, kept };
}
