// The caller's documents for retrieval (the server's /v1/documents) and the passages answers
// cite. A "Documents" button beside Send opens a dialog listing the caller's uploads (name,
// size, chunks) with Remove, and an Upload… button; files dropped onto the composer upload too.
// The button shows only when the pipeline takes uploads (GET /v1/documents is not a 404).
// Every failure is said as text in the dialog (and above the message box for a drop).
// A citation under an answer is a button: it opens a dialog with the cited passage, and for an
// uploaded document "Show in document" loads the whole text with the passage marked and
// scrolled into view.
import './documents.css';
import { apiFetch, errorMessage } from './api.js';

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(text, label, className = 'small') {
  const node = element('button', className, text);
  node.type = 'button';
  if (label) node.setAttribute('aria-label', label);
  return node;
}

export function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

// A dialog shell like the page's others: a heading, a close button, a body.
function dialogShell(id, title) {
  const dialog = element('dialog', 'dialog documents-dialog');
  dialog.id = id;
  dialog.setAttribute('aria-labelledby', `${id}-title`);
  const body = element('div', 'dialog-body');
  const head = element('div', 'dialog-head');
  const heading = element('h2', '', title);
  heading.id = `${id}-title`;
  const close = button('✕', `Close ${title.toLowerCase()}`, 'icon-button');
  close.addEventListener('click', () => dialog.close());
  head.append(heading, close);
  body.append(head);
  dialog.append(body);
  dialog.addEventListener('click', (event) => {
    if (event.target === dialog) dialog.close();
  });
  document.body.append(dialog);
  return { dialog, body, heading, close };
}

// Opens `dialog` modally and gives the focus back where it was when it closes.
function openModal(dialog, focus) {
  const returnTo = document.activeElement;
  dialog.addEventListener('close', () => {
    if (returnTo && returnTo.isConnected && !returnTo.closest('[inert]')) returnTo.focus();
  }, { once: true });
  if (!dialog.open) dialog.showModal();
  focus.focus();
}

// --- Citations ---

let passageDialog = null;

function passageView() {
  if (passageDialog) return passageDialog;
  const shell = dialogShell('passage-dialog', 'Cited passage');
  const source = element('p', 'hint passage-source');
  const passage = element('blockquote', 'passage-text');
  passage.tabIndex = 0;
  const whole = element('div', 'passage-document');
  whole.tabIndex = 0;
  whole.hidden = true;
  const status = element('p', 'documents-error');
  status.setAttribute('role', 'alert');
  status.hidden = true;
  const show = button('Show in document', 'Show the passage in its whole document');
  const actions = element('div', 'dialog-actions');
  actions.append(show);
  shell.body.append(source, passage, actions, status, whole);
  passageDialog = { ...shell, source, passage, whole, status, show, citation: null };
  show.addEventListener('click', () => showInDocument(passageDialog));
  return passageDialog;
}

// The passage's place in the whole text: the citation's text found in it (chunks are exact
// substrings of the document).
export function passageRange(text, passage) {
  if (!passage) return null;
  const start = text.indexOf(passage);
  return start < 0 ? null : { start, end: start + passage.length };
}

async function showInDocument(view) {
  const { citation } = view;
  view.status.hidden = true;
  try {
    const response = await apiFetch(`/v1/documents/${encodeURIComponent(citation.document)}`);
    if (!response.ok) throw new Error(await errorMessage(response));
    const document = await response.json();
    const range = passageRange(document.text, citation.text);
    view.whole.replaceChildren();
    if (range) {
      const mark = element('mark', 'cited', document.text.slice(range.start, range.end));
      view.whole.append(document.text.slice(0, range.start), mark, document.text.slice(range.end));
      view.whole.hidden = false;
      mark.scrollIntoView({ block: 'center' });
    } else {
      view.whole.append(document.text);
      view.whole.hidden = false;
      view.status.textContent = 'The passage is no longer in this document as cited.';
      view.status.hidden = false;
    }
    view.whole.focus();
  } catch (error) {
    view.status.textContent = `Could not open ${citation.title || citation.document}: ${error.message}`;
    view.status.hidden = false;
  }
}

export function openCitation(citation) {
  const view = passageView();
  view.citation = citation;
  const title = citation.title || citation.document || `document ${citation.index}`;
  view.heading.textContent = `[${citation.index}] ${title}`;
  view.source.textContent = `${citation.document}${citation.chunk !== undefined ? `, passage ${citation.chunk + 1}` : ''}`;
  view.passage.textContent = citation.text || 'The server sent no text for this passage.';
  view.whole.hidden = true;
  view.whole.replaceChildren();
  view.status.hidden = true;
  // Only uploaded documents can be read back whole (the shared corpus has no API).
  view.show.hidden = !/^doc-[0-9a-f]+$/.test(citation.document || '');
  openModal(view.dialog, view.passage);
}

// One entry of an answer's reference list: a button that opens the passage.
export function citationItem(citation) {
  const item = element('li', 'citation');
  item.value = citation.index;
  const title = citation.title || citation.document || `document ${citation.index}`;
  const link = button(title, `Open the cited passage ${citation.index}: ${title}`, 'citation-link');
  link.addEventListener('click', () => openCitation(citation));
  item.append(link);
  if (citation.document && citation.document !== title) item.append(element('span', 'hint', ` (${citation.document})`));
  return item;
}

// --- The caller's documents ---

export class DocumentsPanel {
  constructor({ composer, sendButton, notify }) {
    this.notify = notify;
    this.limits = null;
    this.documents = [];
    this.button = button('Documents', 'Your documents for retrieval', 'documents-button');
    this.button.setAttribute('aria-haspopup', 'dialog');
    this.button.hidden = true;
    composer.insertBefore(this.button, sendButton);
    this.input = element('input');
    this.input.type = 'file';
    this.input.multiple = true;
    this.input.hidden = true;
    this.input.accept = '.txt,.md,.markdown,.csv,.html,.htm,.json,text/plain,text/markdown,text/csv,text/html,application/json';
    composer.append(this.input);

    const shell = dialogShell('documents-dialog', 'Your documents');
    this.dialog = shell.dialog;
    this.intro = element('p', 'hint');
    this.error = element('p', 'documents-error');
    this.error.setAttribute('role', 'alert');
    this.error.hidden = true;
    this.status = element('p', 'hint');
    this.status.setAttribute('role', 'status');
    this.list = element('ul', 'documents-list');
    this.list.setAttribute('aria-label', 'Uploaded documents');
    this.upload = button('Upload…', 'Upload documents', 'primary');
    const actions = element('div', 'dialog-actions');
    actions.append(this.upload);
    shell.body.append(this.intro, actions, this.error, this.status, this.list);

    this.button.addEventListener('click', () => this.open());
    this.upload.addEventListener('click', () => this.input.click());
    this.input.addEventListener('change', () => {
      const files = [...this.input.files];
      this.input.value = '';
      this.uploadFiles(files);
    });
    composer.addEventListener('dragover', (event) => {
      if (this.button.hidden || !event.dataTransfer || ![...event.dataTransfer.types].includes('Files')) return;
      event.preventDefault();
      composer.classList.add('dropping');
    });
    composer.addEventListener('dragleave', () => composer.classList.remove('dropping'));
    composer.addEventListener('drop', (event) => {
      composer.classList.remove('dropping');
      if (this.button.hidden || !event.dataTransfer || event.dataTransfer.files.length === 0) return;
      event.preventDefault();
      this.uploadFiles([...event.dataTransfer.files]);
    });
  }

  // Reads the list; the button shows only where the pipeline takes uploads.
  async load() {
    try {
      const response = await apiFetch('/v1/documents');
      if (response.status === 404) {
        this.button.hidden = true;
        this.button.dataset.state = 'off';
        return;
      }
      if (!response.ok) throw new Error(await errorMessage(response));
      const body = await response.json();
      this.documents = body.data;
      this.limits = body.limits;
      this.button.hidden = false;
      this.button.dataset.state = 'on';
      this.render();
    } catch (error) {
      // A credential without documents (403) or a server that is down: no button, said once.
      this.button.hidden = true;
      this.button.dataset.state = 'off';
      if (error.status !== 403) this.notify(`Could not read your documents: ${error.message}`, 'error');
    }
  }

  render() {
    const count = this.documents.length;
    // On a phone the word gives way to "Docs" (documents.css); the label keeps the words.
    const word = element('span', 'documents-word', 'Documents');
    this.button.replaceChildren(word, count ? ` (${count})` : '');
    this.button.setAttribute('aria-label', `Your documents for retrieval${count ? `: ${count}` : ''}`);
    if (this.limits) {
      this.intro.textContent = `Answers may quote these; only you can retrieve them. Text files only `
        + `(${this.limits.accepted_types.join(', ')}), at most ${formatBytes(this.limits.max_bytes)} each, `
        + `${this.limits.max_documents_per_owner} documents. You can also drop files onto the message box.`;
    }
    this.list.replaceChildren();
    if (count === 0) this.list.append(element('li', 'hint', 'No documents yet.'));
    for (const document of this.documents) {
      const item = element('li', 'document');
      const name = element('span', 'document-name', document.name);
      const facts = element('span', 'hint', `${formatBytes(document.bytes)}, ${document.chunks} ${document.chunks === 1 ? 'passage' : 'passages'}`);
      const remove = button('Remove', `Remove ${document.name}`);
      remove.addEventListener('click', () => this.remove(document, remove));
      item.append(name, facts, remove);
      this.list.append(item);
    }
  }

  open() {
    this.error.hidden = true;
    this.status.textContent = '';
    this.render();
    openModal(this.dialog, this.upload);
  }

  showError(message) {
    this.error.textContent = message;
    this.error.hidden = false;
  }

  async uploadFiles(files) {
    this.error.hidden = true;
    const failures = [];
    let done = 0;
    for (const file of files) {
      this.status.textContent = `Uploading ${file.name}…`;
      try {
        const form = new FormData();
        form.append('file', file, file.name);
        const response = await apiFetch('/v1/documents', { method: 'POST', body: form });
        if (!response.ok) throw new Error(await errorMessage(response));
        this.documents.unshift(await response.json());
        done += 1;
      } catch (error) {
        failures.push(`${file.name}: ${error.message}`);
      }
    }
    this.status.textContent = done ? `Uploaded ${done} ${done === 1 ? 'document' : 'documents'}.` : '';
    this.render();
    if (failures.length) {
      const message = `Not uploaded: ${failures.join(' ')}`;
      this.showError(message);
      if (!this.dialog.open) this.notify(message, 'error');
    } else if (done && !this.dialog.open) {
      this.notify(`Uploaded ${files.map((file) => file.name).join(', ')}: answers may now quote it.`, 'info');
    }
  }

  async remove(document, control) {
    this.error.hidden = true;
    control.disabled = true;
    try {
      const response = await apiFetch(`/v1/documents/${encodeURIComponent(document.id)}`, { method: 'DELETE' });
      if (!response.ok && response.status !== 404) throw new Error(await errorMessage(response));
      this.documents = this.documents.filter((candidate) => candidate.id !== document.id);
      this.status.textContent = `Removed ${document.name}.`;
      this.render();
      this.upload.focus();
    } catch (error) {
      control.disabled = false;
      this.showError(`Could not remove ${document.name}: ${error.message}`);
    }
  }
}

export function mountDocuments(options) {
  const panel = new DocumentsPanel(options);
  panel.load();
  return panel;
}
