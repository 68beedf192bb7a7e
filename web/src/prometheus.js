// The Prometheus text format as /metrics writes it, and the few sums the dashboard needs:
// a counter's rate between two scrapes, a histogram's quantile (over the whole history or over
// the interval between two scrapes), the series of one metric grouped by a label.

// One line's label block `{a="1",b="x\"y"}` → { a: '1', b: 'x"y' }; returns [labels, rest].
function parseLabels(text, start) {
  const labels = {};
  let i = start + 1;
  while (i < text.length && text[i] !== '}') {
    while (text[i] === ' ' || text[i] === ',') i += 1;
    if (text[i] === '}') break;
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`bad label in: ${text}`);
    const name = text.slice(i, eq).trim();
    if (text[eq + 1] !== '"') throw new Error(`unquoted label value in: ${text}`);
    let value = '';
    let j = eq + 2;
    for (; j < text.length && text[j] !== '"'; j += 1) {
      if (text[j] === '\\' && j + 1 < text.length) {
        j += 1;
        value += text[j] === 'n' ? '\n' : text[j];
      } else {
        value += text[j];
      }
    }
    if (j >= text.length) throw new Error(`unterminated label value in: ${text}`);
    labels[name] = value;
    i = j + 1;
  }
  return [labels, i + 1];
}

function parseValue(text) {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  return Number(text);
}

// → { samples: [{ name, labels, value }], types: { name: 'counter' | 'gauge' | 'histogram' ... },
//     help: { name: text } }. Malformed lines are skipped (a dashboard should not go blank over
//     one), and counted in `skipped`.
export function parsePrometheus(text) {
  const samples = [];
  const types = {};
  const help = {};
  let skipped = 0;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line) continue;
    if (line.startsWith('#')) {
      const parts = /^#\s*(TYPE|HELP)\s+(\S+)\s*(.*)$/.exec(line);
      if (parts && parts[1] === 'TYPE') types[parts[2]] = parts[3].trim();
      if (parts && parts[1] === 'HELP') help[parts[2]] = parts[3];
      continue;
    }
    try {
      const brace = line.search(/[{\s]/);
      if (brace < 0) throw new Error('no value');
      const name = line.slice(0, brace);
      let labels = {};
      let rest = brace;
      if (line[brace] === '{') [labels, rest] = parseLabels(line, brace);
      const fields = line.slice(rest).trim().split(/\s+/);
      const value = parseValue(fields[0]);
      if (fields[0] === undefined || fields[0] === '' || (Number.isNaN(value) && fields[0] !== 'NaN')) throw new Error('bad value');
      samples.push({ name, labels, value });
    } catch {
      skipped += 1;
    }
  }
  return { samples, types, help, skipped };
}

const matches = (labels, want) => Object.entries(want).every(([key, value]) => labels[key] === value);

// The sum of `name`'s samples whose labels include `want`; undefined when there is none.
export function sum(parsed, name, want = {}) {
  let total;
  for (const sample of parsed.samples) {
    if (sample.name === name && matches(sample.labels, want)) total = (total ?? 0) + sample.value;
  }
  return total;
}

// The distinct values of `label` among `name`'s samples.
export function labelValues(parsed, name, label) {
  const values = new Set();
  for (const sample of parsed.samples) {
    if (sample.name === name && label in sample.labels) values.add(sample.labels[label]);
  }
  return [...values];
}

// A counter's increase per second between two scrapes taken `seconds` apart; a reset (the
// server restarted) counts from zero.
export function rate(before, after, name, want = {}, seconds) {
  const now = sum(after, name, want);
  if (now === undefined || !before || !(seconds > 0)) return undefined;
  const then = sum(before, name, want) ?? 0;
  return (now >= then ? now - then : now) / seconds;
}

// A histogram's cumulative buckets [{ le, count }] (summed over series matching `want`), sorted.
export function buckets(parsed, name, want = {}) {
  const byBound = new Map();
  for (const sample of parsed.samples) {
    if (sample.name !== `${name}_bucket` || !matches(sample.labels, want)) continue;
    const le = parseValue(sample.labels.le);
    byBound.set(le, (byBound.get(le) ?? 0) + sample.value);
  }
  return [...byBound.entries()].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
}

// The buckets' increase from `before` to `after` (what was observed in between).
export function bucketDelta(before, after) {
  const then = new Map(before.map((bucket) => [bucket.le, bucket.count]));
  const delta = after.map(({ le, count }) => ({ le, count: count - (then.get(le) ?? 0) }));
  // A reset: the new counts alone.
  return delta.some((bucket) => bucket.count < 0) ? after : delta;
}

// histogram_quantile as Prometheus computes it: linear within the bucket that holds the rank;
// the +Inf bucket answers its lower bound. undefined with no observations.
export function quantile(q, cumulative) {
  if (!cumulative.length) return undefined;
  const total = cumulative[cumulative.length - 1].count;
  if (!(total > 0)) return undefined;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const { le, count } of cumulative) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound;
      const inBucket = count - lowerCount;
      if (inBucket <= 0) return le;
      return lowerBound + (le - lowerBound) * ((rank - lowerCount) / inBucket);
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}
