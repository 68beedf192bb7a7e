// The key and the requests both pages make. The key lives in sessionStorage (this tab only,
// gone when it closes) and goes out as `Authorization: Bearer`. A 401 means the key is wrong or
// gone: the page returns to its sign-in form.
const storageKey = 'chatflow.api_key';

export class AuthError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function storedKey() {
  try {
    return sessionStorage.getItem(storageKey) || '';
  } catch {
    return '';
  }
}

export function storeKey(key) {
  try {
    if (key) sessionStorage.setItem(storageKey, key);
    else sessionStorage.removeItem(storageKey);
  } catch {
    // Storage may be off (private mode): the key then lasts until the page reloads.
  }
  memoryKey = key;
}

let memoryKey = '';
export function currentKey() {
  return storedKey() || memoryKey;
}

export function authHeaders(extra = {}) {
  const key = currentKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : { ...extra };
}

// fetch rejected without an answer: the server is down or the network is. The browser's own
// words for this ("Failed to fetch", "NetworkError when attempting to fetch resource") say
// neither, so the message names the server.
export class NetworkError extends Error {
  constructor() {
    super(`Cannot reach the server at ${location.host}: it is not running, or the network is down.`);
    this.name = 'NetworkError';
  }
}

// fetch, with a rejection that is not an abort turned into NetworkError.
export async function reach(path, options) {
  try {
    return await fetch(path, options);
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new NetworkError();
  }
}

// The error message of an OpenAI-style error body, or the status line.
export async function errorMessage(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch {
    // not JSON
  }
  return `${response.status} ${response.statusText}`;
}

// fetch with the key; 401 and 403 become AuthError, no answer NetworkError.
export async function apiFetch(path, options = {}) {
  const response = await reach(path, { ...options, headers: authHeaders(options.headers) });
  if (response.status === 401 || response.status === 403) {
    throw new AuthError(response.status, await errorMessage(response));
  }
  return response;
}

export async function apiJson(path, options = {}) {
  const response = await apiFetch(path, options);
  if (!response.ok) {
    const error = new Error(await errorMessage(response));
    error.status = response.status;
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

// Whether the server wants a key at all: /v1/models without one. 401: it does.
export async function probeOpen() {
  const response = await reach('/v1/models');
  return response.ok;
}

// Wires a sign-in form: resolves once a key was entered. `message` explains why it is shown.
// While the form already waits, another call only updates the message and shares the same
// promise: what the user is typing is kept and one submit signs in once.
let pendingKey = null;
export function askForKey({ signin, form, input, messageElement }, message) {
  signin.hidden = false;
  if (message) messageElement.textContent = message;
  if (pendingKey) return pendingKey;
  input.value = '';
  input.focus();
  pendingKey = new Promise((resolve) => {
    form.addEventListener('submit', function submit(event) {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      form.removeEventListener('submit', submit);
      pendingKey = null;
      storeKey(key);
      signin.hidden = true;
      resolve(key);
    });
  });
  return pendingKey;
}
