// Text arrives in bursts (network chunks); the page shows it at an even pace instead, one
// animation frame at a time. Whatever arrived is due within `catchUpMs`: each frame reveals the
// backlog's share that keeps to that deadline, a straight line to it, so a long backlog is
// caught up within that long and a steady stream is shown at its own pace. After the stream
// ends the rest is due within `finishMs`. Nothing is held back for show. With `everyMs`, text is
// revealed at most that often (a frame in between reveals nothing): each reveal costs the page
// a render of the open block, a layout and a paint whatever its size, so revealing every other
// or every third frame at 60 Hz halves or thirds that cost per token.
export class Typewriter {
  constructor(onReveal, { catchUpMs = 400, finishMs = 150, minCharsPerSecond = 90, everyMs = 0, now, frame } = {}) {
    this.everyMs = everyMs;
    this.onReveal = onReveal;
    this.pending = '';
    this.ended = false;
    this.catchUpMs = catchUpMs;
    this.finishMs = finishMs;
    this.minCharsPerSecond = minCharsPerSecond;
    this.now = now ?? (() => performance.now());
    this.frame = frame ?? ((callback) => requestAnimationFrame(callback));
    this.scheduled = false;
    this.last = 0;
    this.carry = 0;
    this.deadline = null;
    this.onDrained = null;
  }

  push(text) {
    if (!text) return;
    this.pending += text;
    this.deadline = this.now() + this.catchUpMs;
    this.schedule();
  }

  // No more text: resolves once everything was revealed.
  end() {
    this.ended = true;
    this.deadline = Math.min(this.deadline ?? Infinity, this.now() + this.finishMs);
    return new Promise((resolve) => {
      this.onDrained = resolve;
      if (!this.pending) this.finish();
      else this.schedule();
    });
  }

  // Shows the rest at once (Stop, or a hidden tab where frames do not run).
  flush() {
    if (this.pending) {
      const text = this.pending;
      this.pending = '';
      this.onReveal(text);
    }
    if (this.ended) this.finish();
  }

  // Drops what was not shown yet (the answer was retracted): nothing more is revealed.
  discard() {
    this.pending = '';
    if (this.ended) this.finish();
  }

  finish() {
    const done = this.onDrained;
    this.onDrained = null;
    if (done) done();
  }

  schedule() {
    if (this.scheduled) return;
    if (typeof document !== 'undefined' && document.hidden) {
      this.flush();
      return;
    }
    this.scheduled = true;
    this.frame((time) => this.tick(time ?? this.now()));
  }

  tick(time) {
    this.scheduled = false;
    // 2 ms of slack: frames 16.7 ms apart are not held back a third one for 33 ms.
    if (this.pending && this.last && time - this.last < this.everyMs - 2 && !(this.ended && this.now() >= this.deadline)) {
      this.schedule();
      return;
    }
    const elapsed = this.last ? Math.min(time - this.last, 100) : 16;
    this.last = time;
    if (!this.pending) {
      if (this.ended) this.finish();
      return;
    }
    const left = Math.max(elapsed, (this.deadline ?? time) - time);
    const share = (this.pending.length * elapsed) / left;
    const wanted = Math.max(share, (this.minCharsPerSecond * elapsed) / 1000) + this.carry;
    let count = Math.min(this.pending.length, Math.max(1, Math.floor(wanted)));
    this.carry = wanted - Math.floor(wanted);
    // Never split a surrogate pair (an emoji would flash as U+FFFD).
    const code = this.pending.charCodeAt(count - 1);
    if (code >= 0xd800 && code <= 0xdbff && count < this.pending.length) count += 1;
    const text = this.pending.slice(0, count);
    this.pending = this.pending.slice(count);
    this.onReveal(text);
    if (this.pending || this.ended) this.schedule();
  }
}
