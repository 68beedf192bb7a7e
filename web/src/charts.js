// The dashboard's time series: each chart is a list of named series computed from two scrapes
// of /metrics (the one before and the latest, `seconds` apart), drawn with uPlot over the last
// few minutes.
import uPlot from 'uplot';

import { bucketDelta, buckets, labelValues, quantile, rate, sum } from './prometheus.js';

const keep = 180; // points: six minutes at one scrape every 2 s

// p-quantile of a histogram over the interval; undefined when nothing was observed in it.
export function windowQuantile(q, before, after, name, want = {}) {
  const now = buckets(after, name, want);
  const window = before ? bucketDelta(buckets(before, name, want), now) : now;
  return quantile(q, window);
}

const ratio = (part, whole) => (whole > 0 && part !== undefined ? part / whole : undefined);

// The charts for this pipeline; `stages` and `arms` name the labelled series.
export function chartSpecs(stages, arms) {
  const specs = [
    {
      id: 'requests', title: 'Requests running and waiting', unit: '',
      series: [
        { label: 'running', value: (b, a) => sum(a, 'chatflow:num_requests_running') },
        { label: 'waiting', value: (b, a) => sum(a, 'chatflow:num_requests_waiting') },
        { label: 'in flight', value: (b, a) => sum(a, 'chatflow:requests_in_flight') },
      ],
    },
    {
      id: 'ttft', title: 'Time to first token (s)', unit: 's',
      series: [
        { label: 'p50', value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:time_to_first_token_seconds') },
        { label: 'p99', value: (b, a) => windowQuantile(0.99, b, a, 'chatflow:time_to_first_token_seconds') },
      ],
    },
    {
      id: 'itl', title: 'Inter-token latency (s)', unit: 's',
      series: [
        { label: 'p50', value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:inter_token_latency_seconds') },
        { label: 'p99', value: (b, a) => windowQuantile(0.99, b, a, 'chatflow:inter_token_latency_seconds') },
      ],
    },
    {
      id: 'tokens', title: 'Tokens per second', unit: '/s',
      series: [
        { label: 'generated', value: (b, a, s) => rate(b, a, 'chatflow:engine_generated_tokens_total', {}, s) },
        { label: 'prompt computed', value: (b, a, s) => rate(b, a, 'chatflow:engine_prompt_tokens_computed_total', {}, s) },
      ],
    },
    {
      id: 'stages', title: 'Stage latency p50 (s)', unit: 's',
      series: stages.map((stage) => ({
        label: stage,
        value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:stage_duration_seconds', { stage }),
      })),
    },
    {
      id: 'cache', title: 'Cache hit rate (share of requests)', unit: '',
      series: [
        {
          label: 'answer cache',
          value: (b, a, s) => ratio(rate(b, a, 'chatflow:request_annotations_total', { name: 'cache' }, s) ?? 0,
            (rate(b, a, 'chatflow:request_success_total', {}, s) ?? 0) + (rate(b, a, 'chatflow:request_failure_total', {}, s) ?? 0)),
        },
        {
          label: 'prefix cache (tokens)',
          value: (b, a, s) => ratio(rate(b, a, 'chatflow:prefix_cache_hits_total', {}, s), rate(b, a, 'chatflow:prefix_cache_queries_total', {}, s)),
        },
      ],
    },
    {
      id: 'kv', title: 'KV cache use (%)', unit: '%',
      series: [{ label: 'used', value: (b, a) => { const v = sum(a, 'chatflow:kv_cache_usage_perc'); return v === undefined ? v : v * 100; } }],
    },
    {
      id: 'rejections', title: 'Rejections per second', unit: '/s',
      series: [
        { label: 'rate limited (429)', value: (b, a, s) => rate(b, a, 'chatflow:http_requests_total', { status: '429' }, s) ?? 0 },
        {
          label: 'moderation',
          value: (b, a, s) => (rate(b, a, 'chatflow:request_annotations_total', { name: 'moderation' }, s) ?? 0) +
            (rate(b, a, 'chatflow:request_annotations_total', { name: 'output_moderation' }, s) ?? 0),
        },
        { label: 'quota / auth (401, 403)', value: (b, a, s) => (rate(b, a, 'chatflow:http_requests_total', { status: '401' }, s) ?? 0) + (rate(b, a, 'chatflow:http_requests_total', { status: '403' }, s) ?? 0) },
      ],
    },
  ];
  if (arms.length) {
    specs.push({
      id: 'arms', title: 'A/B arms: requests per second and TTFT p50 (s)', unit: '',
      series: arms.flatMap((arm) => [
        { label: `${arm} req/s`, value: (b, a, s) => rate(b, a, 'chatflow:arm_requests_total', { arm }, s) ?? 0 },
        { label: `${arm} TTFT p50`, value: (b, a) => windowQuantile(0.5, b, a, 'chatflow:arm_time_to_first_token_seconds', { arm }) },
      ]),
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

const palette = ['#2f6fde', '#e8710a', '#1e8e3e', '#d93025', '#9334e6', '#12b5cb', '#f9ab00', '#5f6368'];

function format(value, unit) {
  if (value === undefined || value === null || Number.isNaN(value)) return '–';
  if (unit === 's') return value < 1 ? `${(value * 1000).toFixed(value < 0.01 ? 2 : 0)} ms` : `${value.toFixed(2)} s`;
  if (unit === '%') return `${value.toFixed(1)} %`;
  return Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2);
}

export class ChartBoard {
  constructor(container) {
    this.container = container;
    this.charts = new Map();
    this.times = [];
    // Plots have a fixed pixel size: follow their boxes when the window changes.
    this.resizer = new ResizeObserver(() => {
      for (const chart of this.charts.values()) {
        const width = Math.max(280, chart.box.clientWidth - 12);
        if (Math.abs(width - chart.plot.width) > 4) chart.plot.setSize({ width, height: 170 });
      }
    });
    this.resizer.observe(container);
  }

  // Rebuilds the charts when the stages or arms changed (a reload may change both).
  configure(stages, arms) {
    const key = JSON.stringify([stages, arms]);
    if (key === this.key) return;
    this.key = key;
    for (const chart of this.charts.values()) chart.plot.destroy();
    this.charts.clear();
    this.container.replaceChildren();
    this.times = [];
    for (const spec of chartSpecs(stages, arms)) {
      const box = document.createElement('figure');
      box.className = 'chart';
      box.dataset.chart = spec.id;
      box.setAttribute('aria-label', spec.title);
      const title = document.createElement('h3');
      title.textContent = spec.title;
      const latest = document.createElement('figcaption');
      latest.className = 'latest';
      latest.setAttribute('aria-live', 'off');
      const plotArea = document.createElement('div');
      box.append(title, plotArea, latest);
      this.container.append(box);
      const width = Math.max(280, (box.clientWidth || 420) - 12);
      const plot = new uPlot({
        width,
        height: 170,
        series: [{}, ...spec.series.map((series, index) => ({
          label: series.label, stroke: palette[index % palette.length], width: 2, spanGaps: true,
          value: (u, v) => format(v, spec.unit),
        }))],
        axes: [{ stroke: '#888' }, { stroke: '#888', size: 70, values: (u, values) => values.map((v) => format(v, spec.unit)) }],
        // From zero, and never a flat line at the top of an empty range.
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.15 : 1] } },
        // The caption under the plot has the latest values; the legend only names the lines.
        legend: { live: false },
      }, [[], ...spec.series.map(() => [])], plotArea);
      this.charts.set(spec.id, { spec, plot, box, data: spec.series.map(() => []), latest });
    }
  }

  add(time, before, after, seconds) {
    this.times.push(time);
    if (this.times.length > keep) this.times.shift();
    for (const chart of this.charts.values()) {
      const values = chart.spec.series.map((series) => {
        const value = series.value(before, after, seconds);
        return value === undefined || Number.isNaN(value) ? null : value;
      });
      values.forEach((value, index) => {
        chart.data[index].push(value);
        if (chart.data[index].length > keep) chart.data[index].shift();
      });
      chart.plot.setData([this.times.slice(), ...chart.data.map((column) => column.slice())]);
      chart.latest.textContent = chart.spec.series.map((series, index) => `${series.label}: ${format(values[index], chart.spec.unit)}`).join(' · ');
      chart.box.dataset.hasData = values.some((value) => value !== null) ? 'yes' : 'no';
    }
  }
}
