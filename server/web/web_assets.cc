#include "server/web/web_assets.h"

// Kept short and dependency-free on purpose: the page must work offline,
// behind a strict Content-Security-Policy (no inline script or style), and
// draw every number from /api/ so scripts see exactly what the page shows.

namespace summon::server::web {

const char kIndexHtml[] = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>summon</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/web/style.css">
<script src="/web/app.js" defer></script>
</head>
<body>
<header><a href="#/">summon</a> <span id="crumbs"></span>
<span id="status"></span></header>
<main id="main">loading…</main>
</body>
</html>
)html";

const char kLoginHtml[] = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>summon: log in</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/web/style.css">
</head>
<body>
<header>summon</header>
<main>
<h2>Viewer token required</h2>
<p>This daemon runs with <code>--tokens</code>: present a token with the
viewer role.</p>
<form method="post" action="/login">
<input type="password" name="token" id="token" placeholder="token"
 autocomplete="off">
<button type="submit" id="login">Log in</button>
</form>
</main>
</body>
</html>
)html";

const char kStyleCss[] = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; }
header { background: #1d2330; color: #fff; padding: 8px 16px; }
header a { color: #9cf; text-decoration: none; font-weight: bold; }
#status { float: right; color: #f88; }
main { padding: 8px 16px; }
h2 { font-size: 16px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin-bottom: 8px; }
th, td { border-bottom: 1px solid #dde; padding: 3px 10px; text-align: left; }
th { background: #f2f4f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #197a2d; } .bad { color: #b3261e; font-weight: bold; }
svg { background: #fafbfd; border: 1px solid #dde; }
rect.bin { fill: #4a7bd0; } rect.bin:hover { fill: #f29d38; }
text { font-size: 11px; fill: #555; }
polyline.series { fill: none; stroke: #4a7bd0; stroke-width: 2; }
circle.nonfinite { fill: #b3261e; }
circle.point { fill: #4a7bd0; } circle.point:hover { fill: #f29d38; r: 5; }
.watched { color: #197a2d; }
)css";

const char kAppJs[] = R"js('use strict';
// summon web view: hash routes #/, #/model/NAME, #/param/MODEL/FQN; every
// number comes from /api/ (docs/api.md "Web view").
const $ = (tag, attrs = {}, ...kids) => {
  const svg = ['svg', 'rect', 'line', 'text', 'g', 'polyline', 'circle', 'title']
    .includes(tag);
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag)
                 : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const kid of kids) el.append(kid instanceof Node ? kid : String(kid));
  return el;
};
const api = async (path) => {
  const response = await fetch(path, {credentials: 'same-origin'});
  const body = await response.json();
  if (!response.ok) {
    const error = new Error(body.error ? body.error.message : path);
    error.code = body.error ? body.error.code : String(response.status);
    throw error;
  }
  return body;
};
const table = (id, heads, rows) => $('table', {id},
  $('tr', {}, ...heads.map((h) => $('th', {}, h))),
  ...rows.map((cells) => $('tr', {}, ...cells.map((c) =>
    typeof c === 'number' ? $('td', {class: 'num'}, c) : $('td', {}, c)))));
const link = (href, text) => $('a', {href}, text);
const enc = encodeURIComponent;
const fmt = (x) => typeof x === 'number' ? x.toPrecision(6) : String(x);
const ageOf = (ms) => Math.round((Date.now() - Number(ms)) / 1000) + ' s';
const leftOf = (ms) => Math.max(0, Math.round((Number(ms) - Date.now()) / 1000)) +
  ' s';
const scopeOf = (o) => o.params ? o.params.fqns.join(', ')
  : 'module "' + ((o.module && o.module.fqn) || '') + '"';

async function overview(main) {
  const [cluster, models, sessions, watches] = await Promise.all([
    api('/api/cluster'), api('/api/models'), api('/api/sessions'),
    api('/api/watches')]);
  // GetClusterStatus as the node serving the page sees it: a node down
  // shows DOWN here while the listings below answer from what it knows.
  main.replaceChildren(
    $('h2', {}, 'Cluster'),
    table('cluster', ['leader', 'epoch', 'ready', 'models', 'answered by'],
      [['node ' + cluster.leader, cluster.epoch,
        $('span', {class: cluster.ready ? 'ok' : 'bad'},
          cluster.ready ? 'yes' : 'no: ' + cluster.detail),
        cluster.models.length ? cluster.models.join(', ') : '—',
        'node ' + cluster.answered_by]]),
    table('nodes', ['node', 'address', 'state', 'role', 'ranks'],
      cluster.nodes.map((n) => [n.node, n.address || '—',
        $('span', {class: n.state === 'NODE_STATE_UP' ? 'ok' : 'bad'},
          n.state.replace('NODE_STATE_', '')),
        n.leader ? 'leader' : 'follower',
        n.local_ranks === 0 ? '—' : n.local_ranks === 1 ? String(n.first_rank)
          : n.first_rank + '–' + (n.first_rank + n.local_ranks - 1)])),
    $('h2', {}, 'Models'),
    table('models', ['model', 'state', 'strategy', 'world', 'units',
      'params', 'elements', 'open sessions'],
      models.models.map((m) => [link('#/model/' + enc(m.name), m.name),
        $('span', {class: m.state === 'MODEL_STATE_READY' ? 'ok' : 'bad'},
          m.state.replace('MODEL_STATE_', '') +
          (m.state_detail ? ': ' + m.state_detail : '')),
        m.strategy.replace('SHARDING_STRATEGY_', ''), m.world_size,
        m.unit_count, m.param_count, Number(m.numel), m.open_sessions])),
    $('h2', {}, 'Open sessions'),
    table('sessions', ['session', 'model', 'held by', 'scope', 'writeback',
      'state', 'open for', 'lease left'], sessions.sessions.map((s) => [s.id,
      s.model, s.owner, scopeOf(s.options), String(s.options.writeback),
      s.state.replace('SESSION_STATE_', ''), ageOf(s.created_at_unix_ms),
      leftOf(s.expires_at_unix_ms)])),
    $('h2', {}, 'Watches'),
    table('watches', ['model', 'parameters', 'every', 'last step', 'by'],
      watches.watches.map((w) => [link('#/model/' + enc(w.model), w.model),
        $('span', {}, ...w.watched.flatMap((fqn, i) => [i ? ', ' : '',
          link('#/param/' + enc(w.model) + '/' + enc(fqn), fqn)])),
        w.every, Number(w.last_step) < 0 ? '—' : Number(w.last_step),
        w.created_by])));
}

async function model(main, name) {
  const [m, watches] = await Promise.all([api('/api/models/' + enc(name)),
    api('/api/watches')]);
  const watched = new Set(watches.watches.filter((w) => w.model === name)
    .flatMap((w) => w.watched));
  const params = [];
  for (const u of m.units) {
    for (const p of u.params) params.push([u.fqn || '(root)', p]);
  }
  main.replaceChildren(
    $('h2', {}, 'Model ' + m.name + ' — ' + m.state.replace('MODEL_STATE_', '')),
    $('h2', {}, 'Ranks'),
    table('ranks', ['rank', 'phase', 'step', 'grads', 'last event'],
      m.ranks.map((r) => [r.rank, r.phase.replace('TRAINING_PHASE_', ''),
        r.step === undefined ? '—' : Number(r.step), String(r.has_grads),
        r.last_event])),
    $('h2', {}, 'Units'),
    table('units', ['unit', 'generation', 'external writes', 'elements'],
      m.units.map((u) => [u.fqn || '(root)', Number(u.generation),
        Number(u.external_writes), Number(u.unpadded_numel)])),
    $('h2', {}, 'Parameters'),
    table('params', ['parameter', 'unit', 'shape', 'dtype', 'watched'],
      params.map(([unit, p]) => [
        link('#/param/' + enc(name) + '/' + enc(p.info.fqn), p.info.fqn), unit,
        '[' + p.info.shape.join(', ') + ']',
        p.info.dtype.replace('DTYPE_', '').toLowerCase(),
        watched.has(p.info.fqn) ? $('span', {class: 'watched'}, 'watched')
          : ''])));
}

function histogram(h) {
  const width = 640, height = 200, pad = 24, left = 56;
  const counts = h.counts.map(Number);
  const top = Math.max(1, ...counts);
  const w = (width - left - pad) / Math.max(1, counts.length);
  const svg = $('svg', {id: 'histogram', width, height,
    viewBox: `0 0 ${width} ${height}`});
  counts.forEach((c, i) => {
    const barHeight = (height - 2 * pad) * c / top;
    const bar = $('rect', {class: 'bin', 'data-count': c, x: left + i * w,
      y: height - pad - barHeight, width: Math.max(1, w - 1),
      height: barHeight});
    bar.append($('title', {}, c + ' in bin ' + i));
    svg.append(bar);
  });
  svg.append($('text', {x: left, y: height - 6}, fmt(h.lower)),
    $('text', {x: width - pad, y: height - 6, 'text-anchor': 'end'},
      fmt(h.upper)),
    ...axis(left, pad, height - pad, 0, top, 'count'));
  return svg;
}

// A value axis at x = `left` from y0 (the value `lo`) up to y1 (`hi`):
// the line, three ticks with their values (g.tick, the value in
// data-value) and the axis's name.
function axis(left, y1, y0, lo, hi, name) {
  const ticks = [lo, (lo + hi) / 2, hi].map((v) => {
    const y = y0 - (y0 - y1) * (v - lo) / ((hi - lo) || 1);
    return $('g', {class: 'tick', 'data-value': v},
      $('line', {x1: left - 4, x2: left, y1: y, y2: y, stroke: '#999'}),
      $('text', {x: left - 6, y: y + 4, 'text-anchor': 'end'}, fmt(v)));
  });
  return [$('line', {class: 'axis', x1: left, x2: left, y1, y2: y0,
    stroke: '#999'}), ...ticks,
  $('text', {class: 'axis-name', x: 2, y: y1 - 8}, name)];
}

// One watched series over steps: a line, and a red marker (circle.nonfinite,
// its step in data-step) at every record with a NaN or Inf.
function plot(id, records, value, label) {
  const width = 640, height = 180, pad = 28, left = 64;
  const steps = records.map((r) => Number(r.step));
  const values = records.map((r) => value(r)).filter(Number.isFinite);
  const lo = Math.min(...steps), hi = Math.max(lo + 1, ...steps);
  const bottom = Math.min(0, ...values), top = Math.max(bottom + 1e-30, ...values);
  const x = (s) => left + (width - left - pad) * (s - lo) / (hi - lo);
  const y = (v) => height - pad - (height - 2 * pad) * (v - bottom) / (top - bottom);
  const svg = $('svg', {id, width, height, viewBox: `0 0 ${width} ${height}`});
  const points = records.filter((r) => Number.isFinite(value(r)))
    .map((r) => x(Number(r.step)) + ',' + y(value(r))).join(' ');
  svg.append($('polyline', {class: 'series', points,
    'data-points': records.length}));
  // Hover: every finite record is a point whose title is its step and value.
  for (const r of records.filter((r) => Number.isFinite(value(r)))) {
    const point = $('circle', {class: 'point', 'data-step': r.step,
      cx: x(Number(r.step)), cy: y(value(r)), r: 3});
    point.append($('title', {}, 'step ' + r.step + ': ' + label + ' ' +
      fmt(value(r))));
    svg.append(point);
  }
  for (const r of records) {
    if (Number(r.nan_count) + Number(r.inf_count) > 0) {
      const marker = $('circle', {class: 'nonfinite', 'data-step': r.step,
        cx: x(Number(r.step)), cy: pad / 2, r: 5});
      marker.append($('title', {}, 'step ' + r.step + ': ' + r.nan_count +
        ' NaN, ' + r.inf_count + ' Inf'));
      svg.append(marker);
    }
  }
  svg.append($('line', {class: 'axis', x1: left, x2: width - pad,
    y1: height - pad, y2: height - pad, stroke: '#999'}),
  $('text', {x: left, y: height - 8}, 'step ' + lo),
  $('text', {x: width - pad, y: height - 8, 'text-anchor': 'end'},
    'step ' + Math.max(...steps)),
  ...axis(left, pad, height - pad, bottom, top, label));
  return svg;
}

// The parameter's watch (ShowWatch's answer), or null when it is not
// watched (asked only then: a 404 would be a console error).
async function watchOf(name, fqn) {
  const watches = (await api('/api/watches')).watches;
  if (!watches.some((w) => w.model === name && w.watched.includes(fqn))) {
    return null;
  }
  return api('/api/watch?model=' + enc(name) + '&param=' + enc(fqn));
}

function history(watch) {
  if (!watch) return [$('p', {id: 'watch'}, 'Not watched (summonctl watch add).')];
  if (!watch.records.length) return [$('p', {id: 'watch'}, 'No record yet.')];
  const first = Number(watch.first_nonfinite_step);
  return [
    $('h2', {}, 'Watched history (' + watch.records.length + ' records' +
      (first >= 0 ? ', first NaN/Inf at step ' + first : '') + ')'),
    plot('norm-plot', watch.records, (r) => r.l2_norm, 'L2 norm'),
    plot('absmax-plot', watch.records, (r) => r.abs_max, 'abs max')];
}

// A rank in FORWARD, BACKWARD or OPTIMIZER refuses sessions (R1), and so
// /api/stats: a watched parameter shows its last record instead.
const MID_STEP = ['TRAINING_PHASE_FORWARD', 'TRAINING_PHASE_BACKWARD',
  'TRAINING_PHASE_OPTIMIZER'];

async function param(main, name, fqn) {
  const bins = new URLSearchParams(location.hash.split('?')[1] || '')
    .get('bins') || 32;
  const [m, watch] = await Promise.all([api('/api/models/' + enc(name)),
    watchOf(name, fqn)]);
  const last = watch && watch.records.length ?
    watch.records[watch.records.length - 1] : null;
  let t, note = [];
  if (last && m.ranks.some((r) => MID_STEP.includes(r.phase))) {
    // The statistics of the last record, in TensorStats' shape.
    let info = {fqn, shape: []};
    for (const u of m.units) {
      for (const p of u.params) if (p.info.fqn === fqn) info = p.info;
    }
    t = Object.assign({info}, last);
    note = [$('p', {id: 'midstep'}, 'mid-step, showing step ' + last.step +
      ' (the last watch record)')];
  } else {
    t = (await api('/api/stats?model=' + enc(name) + '&param=' + enc(fqn) +
      '&bins=' + enc(bins))).tensors[0];
  }
  const h = t.histogram && t.histogram.counts ? t.histogram : null;
  main.replaceChildren(
    $('h2', {}, link('#/model/' + enc(name), name), ' / ' + t.info.fqn),
    ...note,
    table('stats', ['shape', 'min', 'max', 'mean', 'L2 norm', 'NaN', 'Inf'],
      [['[' + t.info.shape.join(', ') + ']', fmt(t.min), fmt(t.max),
        fmt(t.mean), fmt(t.l2_norm),
        $('span', {class: Number(t.nan_count) ? 'bad' : 'ok'}, t.nan_count),
        $('span', {class: Number(t.inf_count) ? 'bad' : 'ok'}, t.inf_count)]]),
    ...(h ? [$('h2', {}, 'Histogram (' + h.counts.length + ' bins)'),
      histogram(h)] : []),
    ...history(watch));
}

async function route() {
  const main = document.getElementById('main');
  const status = document.getElementById('status');
  const parts = location.hash.replace(/^#\/?/, '').split('?')[0].split('/')
    .map(decodeURIComponent);
  try {
    if (parts[0] === 'model') await model(main, parts[1]);
    else if (parts[0] === 'param') await param(main, parts[1],
      parts.slice(2).join('/'));
    else await overview(main);
    status.textContent = '';
    delete document.body.dataset.error;
    document.body.dataset.loaded = location.hash || '#/';
  } catch (error) {
    // A trainer mid-step refuses sessions (R1): show it and try again.
    status.textContent = error.message;
    document.body.dataset.error = error.code;
    // A page that never drew, or one that names nothing that exists, says
    // why in place of "loading…" (a drawn page keeps its last numbers).
    if (error.code === 'NOT_FOUND' ||
        document.body.dataset.loaded !== (location.hash || '#/')) {
      main.replaceChildren($('p', {id: 'error', class: 'bad'}, error.message));
    }
  }
}
window.addEventListener('hashchange', route);
route();
setInterval(route, 5000);
)js";

}  // namespace summon::server::web
