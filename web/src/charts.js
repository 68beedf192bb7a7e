// The dashboard's time series: each chart is a list of named series, each value computed from
// two consecutive samples of the server's metrics (the one before and the one after, `seconds`
// apart: a rate, or a percentile of what the histogram saw in between), drawn with uPlot over
// the time range the server kept (GET /v1/dashboard/history).
import uPlot from 'uplot';

import { formatValue, palette, tickLabels } from './chart_format.js';
import { bucketDelta, buckets, labelValues, quantile, rate, sum } from './prometheus.js';

// p-quantile of a histogram over the interval; undefined when nothing was observed in it.
export function windowQuantile(q, before, after, name, want = {}) {
  const now = buckets(after, name, want);
  const window = before ? bucketDelta(buckets(before, name, want), now) : now;
  return quantile(q, window);
}

const ratio = (part, whole) => (whole > 0 && part !== undefined ? part / whole : undefined);

// The endpoints the dashboard itself reads (and the page's files): left out of the request
// and error rates, which are about the API's callers.
export const dashboardEndpoints = new Set([
  '/metrics', '/health', '/v1/usage', '/v1/dashboard/summary', '/v1/dashboard/history', '/v1/dashboard/graph.svg', 'static',
]);

const httpMetric = 'chatflow:http_requests_total';

// The sum of http_requests_total over the API's endpoints whose status `matches`.
export function apiRequests(parsed, matches = () => true) {
  let total;
  for (const sample of parsed.samples) {
    if (sample.name !== httpMetric || dashboardEndpoints.has(sample.labels.endpoint)) continue;
    if (!matches(sample.labels.status)) continue;
    total = (total ?? 0) + sample.value;
  }
  return total;
}

// The same over an interval, per second (0 before the API's first answer of that status).
function apiRate(before, after, seconds, matches) {
  if (!before || !(seconds > 0)) return undefined;
  const now = apiRequests(after, matches) ?? 0;
  const then = apiRequests(before, matches) ?? 0;
  return (now >= then ? now - then : now) / seconds;
}

// The HTTP statuses the API answered with, in order.
export function apiStatuses(parsed) {
  const statuses = new Set();
  for (const sample of parsed.samples) {
    if (sample.name === httpMetric && !dashboardEndpoints.has(sample.labels.endpoint)) statuses.add(sample.labels.status);
  }
  return [...statuses].sort();
}

const percentiles = (metric) => [0.5, 0.95, 0.99].map((q) => ({
  label: `p${Math.round(q * 100)}`,
  value: (b, a) => windowQuantile(q, b, a, metric),
}));

// The charts for this pipeline; `stages`, `arms` and `statuses` name the labelled series.
export function chartSpecs({ stages = [], arms = [], statuses = [] } = {}) {
  const errors = statuses.filter((status) => Number(status) >= 400);
  const specs = [
    {
      id: 'status', title: 'API requests per second, by status', unit: '/s',
      series: [
        { label: 'all', value: (b, a, s) => apiRate(b, a, s, () => true) },
        ...statuses.map((status) => ({ label: status, value: (b, a, s) => apiRate(b, a, s, (x) => x === status) })),
      ],
    },
    {
      id: 'errors', title: 'API errors per second, by status', unit: '/s',
      empty: 'No API errors yet.',
      series: [
        { label: '4xx', value: (b, a, s) => apiRate(b, a, s, (x) => x >= '400' && x < '500') },
        { label: '5xx', value: (b, a, s) => apiRate(b, a, s, (x) => x >= '500') },
        ...errors.map((status) => ({ label: status, value: (b, a, s) => apiRate(b, a, s, (x) => x === status) })),
      ],
    },
    {
      id: 'tokens', title: 'Tokens delivered per second', unit: '/s',
      series: [
        { label: 'delivered (all answers)', value: (b, a, s) => rate(b, a, 'chatflow:generation_tokens_total', {}, s) },
        { label: 'from caches', value: (b, a, s) => rate(b, a, 'chatflow:cache_served_tokens_total', {}, s) ?? (rate(b, a, 'chatflow:generation_tokens_total', {}, s) === undefined ? undefined : 0) },
        { label: 'engine generated', value: (b, a, s) => rate(b, a, 'chatflow:engine_generated_tokens_total', {}, s) },
        { label: 'engine prompt computed', value: (b, a, s) => rate(b, a, 'chatflow:engine_prompt_tokens_computed_total', {}, s) },
      ],
    },
    { id: 'e2e', title: 'End-to-end request latency', unit: 's', series: percentiles('chatflow:e2e_request_latency_seconds') },
    { id: 'ttft', title: 'Time to first token', unit: 's', series: percentiles('chatflow:time_to_first_token_seconds') },
    { id: 'tpot', title: 'Time per output token (TPOT)', unit: 's', series: percentiles('chatflow:request_time_per_output_token_seconds') },
    {
      id: 'queue', title: 'Time queued for the engine', unit: 's',
      empty: 'Nothing queued for an engine in this range.',
      series: percentiles('chatflow:request_queue_time_seconds'),
    },
    {
      id: 'itl', title: 'Inter-token latency', unit: 's',
      series: [0.5, 0.99].map((q) => ({
        label: `p${Math.round(q * 100)}`, value: (b, a) => windowQuantile(q, b, a, 'chatflow:inter_token_latency_seconds'),
      })),
    },
    {
      id: 'requests', title: 'Requests running and waiting', unit: '',
      series: [
        { label: 'running', value: (b, a) => sum(a, 'chatflow:num_requests_running') },
        { label: 'waiting', value: (b, a) => sum(a, 'chatflow:num_requests_waiting') },
        { label: 'in flight', value: (b, a) => sum(a, 'chatflow:requests_in_flight') },
      ],
    },
    {
      id: 'stages', title: 'Stage latency p50', unit: 's',
      series: stages.map((stage) => ({
        label: stage,
        value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:stage_duration_seconds', { stage }),
      })),
    },
    {
      // Over the requests answered (finished with a reason): a request refused before the
      // caches (401, 403, 429, a moderation 400) was never a lookup.
      id: 'cache', title: 'Cache hit rate', unit: 'share',
      series: [
        {
          label: 'answer cache (share of answered requests)',
          value: (b, a, s) => ratio(rate(b, a, 'chatflow:request_annotations_total', { name: 'cache' }, s) ?? 0,
            rate(b, a, 'chatflow:request_success_total', {}, s)),
        },
        {
          label: 'prefix cache (share of prompt tokens)',
          value: (b, a, s) => ratio(rate(b, a, 'chatflow:prefix_cache_hits_total', {}, s), rate(b, a, 'chatflow:prefix_cache_queries_total', {}, s)),
        },
      ],
    },
    {
      id: 'kv', title: 'KV cache in use', unit: '%',
      empty: 'No model engine in this pipeline.',
      series: [{ label: 'used', value: (b, a) => { const v = sum(a, 'chatflow:kv_cache_usage_perc'); return v === undefined ? v : v * 100; } }],
    },
    {
      id: 'preemptions', title: 'Preemptions per second', unit: '/s',
      empty: 'No model engine in this pipeline.',
      series: [{ label: 'preempted', value: (b, a, s) => rate(b, a, 'chatflow:num_preemptions_total', {}, s) }],
    },
  ];
  if (arms.length) {
    specs.push({
      id: 'arms', title: 'A/B arms: requests per second', unit: '/s',
      series: arms.map((arm) => ({ label: `${arm} req/s`, value: (b, a, s) => rate(b, a, 'chatflow:arm_requests_total', { arm }, s) ?? 0 })),
    });
    specs.push({
      id: 'arms_ttft', title: 'A/B arms: time to first token p50', unit: 's',
      series: arms.map((arm) => ({ label: `${arm} TTFT p50`, value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:arm_time_to_first_token_seconds', { arm }) })),
    });
  }
  return specs;
}

export function armsOf(parsed) {
  return labelValues(parsed, 'chatflow:arm_requests_total', 'arm').sort();
}

export function stagesOf(parsed) {
  return labelValues(parsed, 'chatflow:stage_duration_seconds', 'stage');
}

const plotHeight = 170;

export class ChartBoard {
  constructor(container) {
    this.container = container;
    this.charts = new Map();
    this.rangeSeconds = 900;
    // Plots have a fixed pixel size: follow their boxes when the window changes.
    this.resizer = new ResizeObserver(() => {
      for (const chart of this.charts.values()) {
        const width = Math.max(240, chart.box.clientWidth - 12);
        if (Math.abs(width - chart.plot.width) > 4) chart.plot.setSize({ width, height: plotHeight });
      }
    });
    this.resizer.observe(container);
  }

  // Rebuilds the charts when the series they name changed (a reload, a new status).
  configure(shape) {
    const key = JSON.stringify(shape);
    if (key === this.key) return;
    this.key = key;
    for (const chart of this.charts.values()) chart.plot.destroy();
    this.charts.clear();
    this.container.replaceChildren();
    for (const spec of chartSpecs(shape)) this.addChart(spec);
  }

  addChart(spec) {
    const box = document.createElement('figure');
    box.className = 'chart';
    box.dataset.chart = spec.id;
    box.setAttribute('aria-label', spec.title);
    const title = document.createElement('h3');
    title.textContent = spec.title;
    const empty = document.createElement('p');
    empty.className = 'empty hint';
    const plotArea = document.createElement('div');
    const latest = document.createElement('figcaption');
    latest.className = 'latest';
    latest.setAttribute('aria-live', 'off');
    box.append(title, empty, plotArea, latest);
    this.container.append(box);
    const width = Math.max(240, (box.clientWidth || 420) - 12);
    const plot = new uPlot({
      width,
      height: plotHeight,
      series: [{}, ...spec.series.map((series, index) => ({
        label: series.label, stroke: palette[index % palette.length], width: 2, spanGaps: true,
        value: (u, v) => formatValue(v, spec.unit),
        // A lone value (the first interval, or one between gaps) has no line to draw: dots
        // while a series has few values.
        points: { show: (u, seriesIndex) => u.data[seriesIndex].filter((v) => v !== null).length <= 40, size: 5 },
      }))],
      // Times as the clock reads them (hours and minutes; a range is 6 h at most).
      axes: [{
        stroke: '#888',
        values: (u, ticks) => ticks.map((tick) => new Date(tick * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })),
      }, {
        stroke: '#888',
        size: 70,
        // Every tick in the unit of the largest, with the decimals that keep them apart; kept
        // on the figure too (the canvas has no text to read back).
        values: (u, ticks) => {
          const labels = tickLabels(ticks, spec.unit);
          box.dataset.ticks = JSON.stringify(labels);
          return labels;
        },
      }],
      // From zero, and never a flat line at the top of an empty range.
      // The whole time range chosen, ending at the latest sample (or now, before there is one).
      scales: {
        x: {
          time: true,
          range: (u, min, max) => {
            const end = Number.isFinite(max) && max !== null ? max : Date.now() / 1000;
            return [end - this.rangeSeconds, end];
          },
        },
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.15 : 1] },
      },
      // The caption under the plot has each series' latest value in the range; a click on a
      // legend entry hides or shows its line.
      legend: { live: false },
    }, [[], ...spec.series.map(() => [])], plotArea);
    this.charts.set(spec.id, { spec, plot, box, latest, empty });
  }

  // Draws `points` ([{ time (s), parsed }], oldest first) over the last `rangeSeconds`: one
  // value per consecutive pair.
  render(points, rangeSeconds = this.rangeSeconds) {
    this.rangeSeconds = rangeSeconds;
    for (const chart of this.charts.values()) {
      const times = [];
      const columns = chart.spec.series.map(() => []);
      const last = chart.spec.series.map(() => null);
      for (let i = 1; i < points.length; i += 1) {
        const before = points[i - 1];
        const after = points[i];
        const seconds = after.time - before.time;
        times.push(after.time);
        chart.spec.series.forEach((series, index) => {
          const value = series.value(before.parsed, after.parsed, seconds);
          const shown = value === undefined || Number.isNaN(value) ? null : value;
          columns[index].push(shown);
          // The caption keeps each series' latest value: a latency is undefined over an
          // interval without requests, and '–' would hide the last one seen.
          if (shown !== null) last[index] = shown;
        });
      }
      chart.plot.setData([times, ...columns]);
      const hasData = columns.some((column) => column.some((value) => value !== null));
      chart.box.dataset.hasData = hasData ? 'yes' : 'no';
      chart.empty.hidden = hasData;
      chart.empty.textContent = hasData ? '' : points.length < 2
        ? 'Waiting for the server\'s next sample (every 5 s).'
        : (chart.spec.empty ?? 'Nothing to show in this range yet.');
      chart.latest.textContent = chart.spec.series.length
        ? chart.spec.series.map((series, index) => `${series.label}: ${formatValue(last[index], chart.spec.unit)}`).join(' · ')
        : 'No series.';
    }
  }
}
