// How the dashboard writes numbers: one unit per axis, chosen from the largest value shown (a
// latency axis reads 120 ms, 240 ms, not 0.12 s, 0.24 s), and as many decimals as it takes for
// neighbouring tick labels to differ (never "0.00 / 0.00 / 0.00").

// Units a chart's values come in: seconds (shown as µs, ms or s), per second, a share (0..1,
// shown as %), a percentage, or a plain count.
const scales = {
  s: [[1e-3, 1e-6, 'µs'], [1, 1e-3, 'ms'], [Infinity, 1, 's']],
  '/s': [[1e3, 1, '/s'], [1e6, 1e3, 'k/s'], [Infinity, 1e6, 'M/s']],
  share: [[Infinity, 0.01, '%']],
  '%': [[Infinity, 1, '%']],
  '': [[1e3, 1, ''], [1e6, 1e3, 'k'], [Infinity, 1e6, 'M']],
};

// The unit to show values of `unit` up to `largest` in: { divisor, suffix }.
export function displayUnit(unit, largest) {
  const steps = scales[unit] ?? scales[''];
  const magnitude = Math.abs(largest);
  for (const [below, divisor, suffix] of steps) {
    if (magnitude < below) return { divisor, suffix };
  }
  const [, divisor, suffix] = steps[steps.length - 1];
  return { divisor, suffix };
}

const join = (number, suffix) => (!suffix ? number : suffix.startsWith('/') ? `${number}${suffix}` : `${number} ${suffix}`);

// Labels for an axis' ticks: all in the unit of the largest, with the fewest decimals (0 to 6)
// that write each tick as it is (1.5 k, not 2 k) and so keep distinct values distinct.
export function tickLabels(values, unit) {
  const shown = values.filter((value) => value !== null && value !== undefined && Number.isFinite(value));
  if (!shown.length) return values.map(() => '');
  const largest = Math.max(...shown.map(Math.abs));
  const { divisor, suffix } = displayUnit(unit, largest);
  const scaled = shown.map((value) => value / divisor);
  const tolerance = 1e-6 * Math.max(...scaled.map(Math.abs));
  const distinct = new Set(shown).size;
  let decimals = 0;
  for (; decimals < 6; decimals += 1) {
    const texts = scaled.map((value) => value.toFixed(decimals));
    const faithful = texts.every((text, i) => Math.abs(Number(text) - scaled[i]) <= tolerance);
    if (faithful && new Set(texts).size === distinct) break;
  }
  return values.map((value) => (value === null || value === undefined || !Number.isFinite(value)
    ? '' : join((value / divisor).toFixed(decimals), suffix)));
}

// One value on its own (a caption, a counter): three significant digits in its own unit.
export function formatValue(value, unit) {
  if (value === undefined || value === null || Number.isNaN(value)) return '–';
  const { divisor, suffix } = displayUnit(unit, value);
  // 0.00004 / 1e-6 is 40.00000000000001: rounded to what a double can say of it.
  const scaled = Number((value / divisor).toPrecision(12));
  const magnitude = Math.abs(scaled);
  const decimals = magnitude === 0 || magnitude >= 100 || Number.isInteger(scaled) ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 ? 2 : 3;
  return join(scaled.toFixed(decimals), suffix);
}

// A count as people read it: 1,234,567.
export function formatCount(value) {
  if (value === undefined || value === null || Number.isNaN(value)) return '–';
  return Math.round(value).toLocaleString('en-US');
}

// Sixteen colours of distinct hue and lightness, readable on the light and the dark theme: up to
// 16 series on one chart without two alike (a chart with more lets its legend hide lines).
export const palette = [
  '#2f6fde', '#e8710a', '#1e8e3e', '#d93025', '#9334e6', '#12b5cb', '#f9ab00', '#795548',
  '#e52592', '#7cb342', '#3949ab', '#00897b', '#c0ca33', '#8d6e63', '#5f6368', '#ff8a65',
];
