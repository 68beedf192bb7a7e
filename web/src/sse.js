// A Server-Sent Events parser fed with decoded text as it arrives. Events may be split across
// chunks or come several per chunk; lines end in LF, CRLF or CR; `data:` may or may not have its
// space; comment lines (":") are skipped. The browser has EventSource for this, but it cannot
// POST or send an Authorization header, so the page reads the fetch body itself.
export class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.data = [];
    this.event = '';
    this.pendingCr = false;
  }

  // Feeds text (already decoded with TextDecoder's {stream: true}, so no code point is split).
  push(text) {
    // A CR at the end of the last chunk may be the first half of a CRLF.
    if (this.pendingCr && text.startsWith('\n')) text = text.slice(1);
    this.pendingCr = false;
    this.buffer += text;
    let start = 0;
    for (;;) {
      const lf = this.buffer.indexOf('\n', start);
      const cr = this.buffer.indexOf('\r', start);
      let end;
      let next;
      if (cr >= 0 && (lf < 0 || cr < lf)) {
        end = cr;
        if (cr + 1 === this.buffer.length) {
          this.pendingCr = true;
          next = cr + 1;
        } else {
          next = this.buffer[cr + 1] === '\n' ? cr + 2 : cr + 1;
        }
      } else if (lf >= 0) {
        end = lf;
        next = lf + 1;
      } else {
        break;
      }
      this.line(this.buffer.slice(start, end));
      start = next;
    }
    this.buffer = this.buffer.slice(start);
  }

  // The stream ended: an event without its blank line still counts.
  end() {
    if (this.buffer) this.line(this.buffer);
    this.buffer = '';
    this.line('');
  }

  line(line) {
    if (line === '') {
      if (this.data.length) this.onEvent({ event: this.event || 'message', data: this.data.join('\n') });
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
  }
}

// What one OpenAI-style stream event means to the page: a parsed chunk, the end, or an error
// object sent mid-stream.
export function interpretEvent(data) {
  if (data === '[DONE]') return { done: true };
  let json;
  try {
    json = JSON.parse(data);
  } catch {
    return { error: { message: `the server sent an event that is not JSON: ${data.slice(0, 80)}` } };
  }
  if (json && json.error) return { error: json.error };
  return { chunk: json };
}
