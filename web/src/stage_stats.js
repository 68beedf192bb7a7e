// What the dashboard writes on each stage: p50 latency and requests per second over the last
// interval (the whole history when nothing ran in it), and a colour for the p50.
import { bucketDelta, buckets, quantile, rate } from './prometheus.js';

const stageMetric = 'chatflow:stage_duration_seconds';

export function latencyColour(seconds) {
  if (seconds === undefined) return '';
  if (seconds < 0.001) return '#7fd1a0';
  if (seconds < 0.1) return '#f3d27a';
  return '#f28b82';
}

function formatSeconds(seconds) {
  if (seconds < 0.001) return `${(seconds * 1e6).toFixed(0)} µs`;
  if (seconds < 1) return `${Number((seconds * 1000).toFixed(1))} ms`;
  return `${seconds.toFixed(2)} s`;
}

export function describeStage(stage, before, after, seconds) {
  const want = { stage };
  const now = buckets(after, stageMetric, want);
  const window = before ? bucketDelta(buckets(before, stageMetric, want), now) : now;
  let used = window;
  let p50 = quantile(0.5, window);
  if (p50 === undefined) {
    used = now;
    p50 = quantile(0.5, now);
  }
  const perSecond = rate(before, after, `${stageMetric}_count`, want, seconds) ?? 0;
  if (p50 === undefined) return { p50, text: 'no requests yet', colour: '' };
  // Within the first bucket the histogram knows only "below its bound": say that, rather than
  // the half-way value interpolation would make up.
  const first = used.find((bucket) => bucket.count > 0);
  const shown = first && p50 <= first.le && first === used[0] ? `< ${formatSeconds(first.le)}` : formatSeconds(p50);
  return { p50, text: `p50 ${shown} · ${perSecond.toFixed(1)} req/s`, colour: latencyColour(p50) };
}

// The stage and arm names, from the server's summary when it has them.
export class ArmsAndStages {
  constructor(summary) {
    const names = (list) => {
      if (Array.isArray(list)) return list.map((item) => (typeof item === 'string' ? item : item && item.name)).filter(Boolean);
      return list && typeof list === 'object' ? Object.keys(list) : [];
    };
    this.stages = names(summary && summary.stages);
    this.arms = names(summary && summary.arms);
  }
}
