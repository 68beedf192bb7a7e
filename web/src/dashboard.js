// The dashboard: the pipeline drawn by the server (/v1/dashboard/graph.svg), its stages
// coloured by p50 latency and labelled with p50 and req/s from /metrics scraped every 2 s; the
// counters since the server started (/metrics), its health (/health) and each tenant's usage
// and quota (/v1/usage); charts over the time range the server keeps (15 min, 1 h, 6 h: GET
// /v1/dashboard/history, so a reload keeps them). All need an admin key when the pipeline
// authenticates.
import './dashboard.css';

import { apiFetch, AuthError, askForKey, currentKey, errorMessage, storeKey } from './api.js';
import { ArmsAndStages, describeStage } from './stage_stats.js';
import { apiStatuses, armsOf, ChartBoard, stagesOf } from './charts.js';
import { describeHealth, renderCounters, renderUsage } from './dashboard_panels.js';
import { parsePrometheus } from './prometheus.js';
import { sanitizeSvg } from './svg_sanitize.js';
import { setupTheme } from './theme.js';

const $ = (id) => document.getElementById(id);
const ui = {
  signin: $('signin'), form: $('signin-form'), input: $('api-key'), messageElement: $('signin-message'),
  app: $('app'), graph: $('graph'), charts: $('charts'), notice: $('notice'), pipeline: $('pipeline-name'),
  updated: $('updated'), pause: $('pause'), signout: $('signout'), health: $('health'),
  counters: $('counters'), usage: $('usage'), ranges: [...document.querySelectorAll('#ranges button[data-range]')],
  rangeNote: $('range-note'),
};
const intervalMs = 2000;
const board = new ChartBoard(ui.charts);
const rangeKey = 'chatflow.dashboard.range';
const rangeSeconds = { '15m': 900, '1h': 3600, '6h': 21600 };
let range = ['15m', '1h', '6h'].includes(localStorage.getItem(rangeKey)) ? localStorage.getItem(rangeKey) : '15m';
// The server's samples of the chosen range, oldest first: [{ time (s), parsed }].
let history = { range: null, points: [], last: 0, capacity: 180, step: 5, receivedAt: 0 };
let previous = null;
let previousTime = 0;
let paused = false;
let timer = null;
let summary = null;
let graphShown = false; // false until a drawing loaded: the next scrape asks again (503 while loading)
// Each scrape chain carries the run it belongs to; signing in again or resuming starts a new
// run, and an older chain stops at its next step instead of scheduling a second timer.
let run = 0;
let signingIn = null;

function showNotice(text, kind = 'info') {
  ui.notice.hidden = !text;
  ui.notice.textContent = text || '';
  ui.notice.className = `notice ${kind}`;
}

function stopScraping() {
  run += 1;
  clearTimeout(timer);
  timer = null;
}

// Back to the form until a key is entered. Nothing is scheduled meanwhile (a scrape would
// clear what is being typed); a second call while the form waits only updates its message.
function signIn(status) {
  stopScraping();
  storeKey('');
  ui.app.hidden = true;
  const message = status === 403
    ? 'That key is not an admin key: the dashboard needs an admin key.'
    : status === 401 ? 'That key was not accepted; the dashboard needs an admin key.' : 'The dashboard needs an admin key.';
  const entered = askForKey(ui, message);
  if (!signingIn) {
    signingIn = entered.then(() => {
      signingIn = null;
      return start();
    });
  }
  return signingIn;
}

async function loadSummary() {
  const response = await apiFetch('/v1/dashboard/summary');
  if (!response.ok) return null;
  summary = await response.json();
  const name = (summary.pipeline && (summary.pipeline.name ?? summary.pipeline)) ?? summary.name;
  if (typeof name === 'string') {
    ui.pipeline.textContent = `chatflow · ${name}`;
    document.title = `chatflow dashboard · ${name}`;
  }
  return summary;
}

async function loadGraph() {
  graphShown = false;
  const response = await apiFetch('/v1/dashboard/graph.svg');
  if (!response.ok) {
    ui.graph.textContent = `The pipeline drawing is not available: ${await errorMessage(response)}`;
    return;
  }
  ui.graph.innerHTML = sanitizeSvg(await response.text());
  graphShown = true;
}

// A reloaded pipeline (its `created` moved) has other stages: summary and drawing again. A
// drawing that failed (503 while the server was loading) is asked for again too.
async function refreshShape() {
  const created = summary && summary.created;
  const fresh = await loadSummary();
  if (!fresh) return;
  if (!graphShown || fresh.created !== created) await loadGraph();
}

// Colours and labels each stage of the drawing from the interval's numbers.
function paintStages(before, after, seconds) {
  for (const group of ui.graph.querySelectorAll('g.stage[data-stage]')) {
    const stage = group.dataset.stage;
    const stats = describeStage(stage, before, after, seconds);
    const rect = group.querySelector('rect');
    // Through CSSOM (allowed by the CSP, unlike a style attribute), over the stylesheet's fill.
    if (rect && stats.colour) rect.style.fill = stats.colour;
    group.classList.toggle('painted', Boolean(stats.colour));
    const text = group.querySelector('text.stage-stats') || ui.graph.querySelector(`text.stage-stats[data-stage="${CSS.escape(stage)}"]`);
    if (text) text.textContent = stats.text;
    group.dataset.p50 = stats.p50 === undefined ? '' : String(stats.p50);
    const title = group.querySelector('title') || group.appendChild(document.createElementNS('http://www.w3.org/2000/svg', 'title'));
    title.textContent = `${stage}: ${stats.text || 'no requests yet'}`;
  }
}

// The server's samples since the last one held (all of them after a range switch), as parsed
// scrapes; the oldest beyond the range's capacity go.
async function loadHistory(mine) {
  const wanted = range;
  const fresh = history.range !== wanted;
  // The server samples every `step` s: no need to ask before one has passed since the last new
  // point came (timed by this page's clock, whatever the server's says).
  if (!fresh && performance.now() - history.receivedAt < history.step * 1000) return;
  const after = fresh ? '' : `&after=${history.last}`;
  const response = await apiFetch(`/v1/dashboard/history?range=${wanted}${after}`);
  if (!response.ok) throw new Error(`could not read the history: ${await errorMessage(response)}`);
  const body = await response.json();
  if (mine !== run || wanted !== range) return;
  if (fresh) history = { range: wanted, points: [], last: 0, receivedAt: 0 };
  if (body.samples.length) history.receivedAt = performance.now();
  history.capacity = body.capacity;
  history.step = body.step_s;
  for (const sample of body.samples) {
    const samples = [];
    sample.values.forEach((value, index) => {
      if (value !== null) samples.push({ name: body.series[index].name, labels: body.series[index].labels, value });
    });
    history.points.push({ time: sample.t / 1000, parsed: { samples } });
    history.last = sample.t;
  }
  if (history.points.length > history.capacity) history.points.splice(0, history.points.length - history.capacity);
}

function drawHistory(parsed) {
  const shape = new ArmsAndStages(summary);
  const latest = history.points.length ? history.points[history.points.length - 1].parsed : parsed;
  board.configure({
    stages: shape.stages.length ? shape.stages : stagesOf(parsed),
    arms: shape.arms.length ? shape.arms : armsOf(parsed),
    statuses: apiStatuses(latest),
  });
  board.render(history.points, rangeSeconds[history.range] ?? 900);
  ui.charts.dataset.samples = String(history.points.length);
  ui.charts.dataset.first = history.points.length ? String(history.points[0].time * 1000) : '';
  const span = history.points.length > 1 ? history.points[history.points.length - 1].time - history.points[0].time : 0;
  const spanText = span >= 120 ? `${Math.round(span / 60)} min` : `${Math.round(span)} s`;
  ui.rangeNote.textContent = `${history.points.length} samples, one every ${history.step} s` +
    (span > 0 ? `, over the last ${spanText}` : '') + ' (kept by the server since it started)';
}

async function loadHealth() {
  const response = await fetch('/health').catch(() => null);
  const body = response ? await response.json().catch(() => ({})) : null;
  const health = describeHealth(response && response.status, body);
  ui.health.textContent = health.text;
  ui.health.dataset.state = health.state;
}

async function loadUsage() {
  if (!summary || !summary.features || !summary.features.usage) {
    renderUsage(ui.usage, null);
    return;
  }
  const response = await apiFetch('/v1/usage');
  renderUsage(ui.usage, response.ok ? await response.json() : { error: await errorMessage(response) });
}

async function scrape() {
  if (paused) return;
  stopScraping();
  const mine = run;
  try {
    await refreshShape();
    const response = await apiFetch('/metrics');
    if (mine !== run) return;
    if (!response.ok) throw new Error(await errorMessage(response));
    const parsed = parsePrometheus(await response.text());
    const now = Date.now();
    const seconds = previous ? (now - previousTime) / 1000 : 0;
    renderCounters(ui.counters, parsed);
    await loadHealth();
    await loadUsage();
    await loadHistory(mine);
    if (mine !== run) return;
    drawHistory(parsed);
    paintStages(previous, parsed, seconds);
    previous = parsed;
    previousTime = now;
    ui.updated.textContent = `updated ${new Date(now).toLocaleTimeString()}`;
    if (ui.notice.classList.contains('error')) showNotice('');
  } catch (error) {
    if (mine !== run) return;
    // The form waits for a key; start() schedules again once one is entered.
    if (error instanceof AuthError) {
      signIn(error.status);
      return;
    }
    showNotice(`Could not read the server's numbers: ${error.message}`, 'error');
  }
  if (mine !== run || paused) return;
  timer = setTimeout(scrape, intervalMs);
}

async function start() {
  try {
    summary = null;
    await loadSummary();
    await loadGraph();
  } catch (error) {
    if (error instanceof AuthError) return signIn(error.status);
    showNotice(`Could not reach the server: ${error.message}`, 'error');
  }
  ui.signout.hidden = !currentKey();
  ui.app.hidden = false;
  previous = null;
  await scrape();
}

ui.pause.addEventListener('click', () => {
  paused = !paused;
  ui.pause.textContent = paused ? 'Resume' : 'Pause';
  ui.pause.setAttribute('aria-pressed', String(paused));
  ui.pause.setAttribute('aria-label', paused ? 'Resume live updates' : 'Pause live updates');
  if (!paused) scrape();
});
ui.signout.addEventListener('click', () => signIn(0));
function showRange() {
  for (const button of ui.ranges) button.setAttribute('aria-pressed', String(button.dataset.range === range));
}
for (const button of ui.ranges) {
  button.addEventListener('click', () => {
    if (button.dataset.range === range) return;
    range = button.dataset.range;
    localStorage.setItem(rangeKey, range);
    showRange();
    if (!paused) scrape();
  });
}
showRange();
setupTheme($('theme'));

(async () => {
  // No key yet: does the server want one? /metrics answers 401 (a key is needed) or 403 (an
  // admin key is needed) when the pipeline authenticates.
  if (!currentKey()) {
    const probe = await fetch('/metrics').catch(() => null);
    if (probe && (probe.status === 401 || probe.status === 403)) {
      await askForKey(ui, 'The dashboard needs an admin key.');
    }
  }
  await start();
})();
