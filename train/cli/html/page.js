// Draws the dtsim --html page from the JSON embedded in it (script#dtsim-data: a title, an
// optional comparison table, and one panel per run holding that run's --report object):
// per run the loss curve (and the reference's when --check ran), memory per rank stacked by
// category, a rank x rank traffic matrix per communicator group (bytes and messages), and
// the time each rank spent in each collective, for a pipeline each stage's phases, sends
// and receives over one step (pipeline.timeline and the panel's p2p), all as inline SVG,
// and the mesh (the panel's mesh: per rank what it holds); several runs share one memory
// scale. Every mark carries its number in data-* attributes and a <title>;
// tests/html/check_html.py compares them with the --report JSON of the same run. No
// network, no third-party code.
'use strict';
(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const CATEGORIES = ['weights', 'gradients', 'master_weights', 'adam_m', 'adam_v', 'activations'];
  const COLORS = {
    weights: '#4e79a7', gradients: '#f28e2b', master_weights: '#76b7b2',
    adam_m: '#59a14f', adam_v: '#edc948', activations: '#b07aa1',
  };
  // What the world communicator is to each strategy (its only group but for dp-tp).
  const WORLD_ROLE = {
    single: 'one rank', accum: 'one rank', ddp: 'the data-parallel (dp) group',
    zero1: 'the data-parallel (dp) group', zero2: 'the data-parallel (dp) group',
    zero3: 'the data-parallel (dp) group', tp: 'the tensor-parallel (tp) group',
    ep: 'both the expert-parallel group (the token all_to_alls) and the data-parallel group of the replicated weights (their all_reduce)', 'dp-tp': 'only for setting up the dp and tp groups',
  };

  function svg(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function node(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    const t = svg('text', Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function tip(e, s) { svg('title', {}, e).textContent = s; }
  function bytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? String(Math.round(b)) : b.toPrecision(3)) + ' ' + units[i];
  }
  // Axis labels for byte values up to `most`: one binary unit for the whole axis.
  function byteAxis(most) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0, scale = 1;
    while (most / scale >= 1024 && i < units.length - 1) { scale *= 1024; i++; }
    return { scale: scale, fmt: (v) => (v === 0 ? '0' : String(+(v).toPrecision(3))) + ' ' + units[i] };
  }
  function seconds(s) {
    if (s === 0) return '0';
    if (s < 1e-3) return (s * 1e6).toPrecision(3) + ' us';
    if (s < 1) return (s * 1e3).toPrecision(3) + ' ms';
    return s.toPrecision(3) + ' s';
  }
  // About n round tick values covering [lo, hi].
  function ticks(lo, hi, n) {
    if (!(hi > lo)) hi = lo + 1;
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }
  function chartBox(parent, heading, name, w, h) {
    const box = node('div', { class: 'chart' }, parent);
    node('h3', {}, box, heading);
    const root = svg('svg', { width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, 'data-chart': name }, box);
    return { box: box, root: root };
  }
  function legend(box, items) {
    const l = node('div', { class: 'legend' }, box);
    for (const [label, color, dashed] of items) {
      const s = node('span', {}, l);
      node('i', { style: dashed ? 'background: repeating-linear-gradient(90deg,' + color + ' 0 4px, transparent 4px 7px); height: 3px; vertical-align: 2px'
        : 'background:' + color }, s);
      s.appendChild(document.createTextNode(label));
    }
  }
  // Y axis with grid lines for a value range mapped onto [y0 (bottom), y1 (top)].
  function yAxis(g, lo, hi, x0, x1, y0, y1, fmt) {
    const ys = (v) => y0 - (v - lo) / (hi - lo) * (y0 - y1);
    for (const v of ticks(lo, hi, 5)) {
      svg('line', { class: 'grid', x1: x0, x2: x1, y1: ys(v), y2: ys(v) }, g);
      text(g, x0 - 4, ys(v) + 4, fmt(v), { 'text-anchor': 'end' });
    }
    svg('line', { class: 'axis', x1: x0, x2: x0, y1: y0, y2: y1 }, g);
    svg('line', { class: 'axis', x1: x0, x2: x1, y1: y0, y2: y0 }, g);
    return ys;
  }

  function lossChart(parent, r) {
    const W = 440, H = 250, L = 58, R = 12, T = 10, B = 34;
    const c = chartBox(parent, 'Loss per step', 'loss', W, H);
    const series = [['run (' + r.config.strategy + ')', 'run', r.losses, '#1f4e79', false]];
    if (r.check && r.check.reference_losses) {
      series.push(['reference (' + r.check.reference + ')', 'reference', r.check.reference_losses, '#e15759', true]);
    }
    const finite = [];
    for (const s of series) for (const v of s[2]) if (v !== null && isFinite(v)) finite.push(v);
    let lo = Math.min.apply(null, finite.concat([Infinity])), hi = Math.max.apply(null, finite.concat([-Infinity]));
    if (!finite.length) { lo = 0; hi = 1; }
    const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
    lo -= pad; hi += pad;
    const n = Math.max(r.losses.length, 2);
    const xs = (i) => L + i / (n - 1) * (W - L - R);
    const ys = yAxis(c.root, lo, hi, L, W - R, H - B, T, (v) => v.toPrecision(3));
    for (const v of ticks(0, n - 1, 5)) {
      if (v !== Math.round(v)) continue;
      text(c.root, xs(v), H - B + 14, String(v), { 'text-anchor': 'middle' });
    }
    text(c.root, (L + W - R) / 2, H - 4, 'step', { 'text-anchor': 'middle' });
    for (const [label, key, values, color, dashed] of series) {
      let d = '', pen = 'M';
      values.forEach((v, i) => {
        if (v === null || !isFinite(v)) { pen = 'M'; return; }
        d += pen + xs(i).toFixed(2) + ' ' + ys(v).toFixed(2) + ' ';
        pen = 'L';
      });
      const p = svg('path', {
        d: d.trim() || 'M0 0', fill: 'none', stroke: color, 'stroke-width': 2,
        'data-series': key, 'data-values': values.map(String).join(','),
      }, c.root);
      if (dashed) p.setAttribute('stroke-dasharray', '6 4');
      const last = values[values.length - 1];
      tip(p, label + ': final loss ' + String(last));
    }
    legend(c.box, series.map((s) => [s[0], s[3], s[4]]));
  }

  // The largest stack of a run's ranks: the memory chart's scale, shared across a page's runs.
  function memoryMost(r) {
    let most = 1;
    for (const rk of r.ranks) {
      let s = 0;
      for (const k of CATEGORIES) s += rk.memory_bytes[k] || 0;
      most = Math.max(most, s);
    }
    return most;
  }

  function memoryChart(parent, r, shared) {
    const n = r.ranks.length, bw = Math.max(8, Math.min(44, 320 / n)), gap = Math.max(3, bw / 3);
    const L = 70, R = 10, T = 10, B = 34;
    const W = Math.max(300, L + R + n * (bw + gap) + gap), H = 250;
    const c = chartBox(parent, 'Memory per rank by category (peak)' + (shared ? ', one scale for every run' : ''), 'memory', W, H);
    const most = shared || memoryMost(r);
    c.root.setAttribute('data-scale-bytes', most);
    const u = byteAxis(most);
    const ya = yAxis(c.root, 0, most * 1.05 / u.scale, L, W - R, H - B, T, u.fmt);
    const ys = (v) => ya(v / u.scale);
    r.ranks.forEach((rk, i) => {
      const x = L + gap + i * (bw + gap);
      let base = 0;
      for (const k of CATEGORIES) {
        const v = rk.memory_bytes[k] || 0;
        const rect = svg('rect', {
          x: x, y: ys(base + v), width: bw, height: ys(base) - ys(base + v), fill: COLORS[k],
          'data-rank': rk.rank, 'data-category': k, 'data-bytes': v,
        }, c.root);
        tip(rect, 'rank ' + rk.rank + ' ' + k + ': ' + bytes(v) + ' (' + v + ' B)');
        base += v;
      }
      if (n <= 16 || i % Math.ceil(n / 16) === 0) text(c.root, x + bw / 2, H - B + 14, String(rk.rank), { 'text-anchor': 'middle' });
    });
    text(c.root, (L + W - R) / 2, H - 4, 'rank', { 'text-anchor': 'middle' });
    legend(c.box, CATEGORIES.map((k) => [k, COLORS[k], false]));
  }

  // One matrix (bytes or messages) of group g at (x0, y0); cells colored by sqrt(value / max).
  function matrix(root, g, metric, x0, y0, cell, hue) {
    const m = g[metric], n = m.length;
    let most = 0;
    for (const row of m) for (const v of row) most = Math.max(most, v);
    text(root, x0 + n * cell / 2, y0 - 22, metric === 'bytes' ? 'bytes sent' : 'messages sent', { 'text-anchor': 'middle', 'font-weight': 600 });
    for (let j = 0; j < n; j++) text(root, x0 + (j + 0.5) * cell, y0 - 6, String(j), { 'text-anchor': 'middle' });
    for (let i = 0; i < n; i++) {
      text(root, x0 - 5, y0 + (i + 0.5) * cell + 4, String(i), { 'text-anchor': 'end' });
      for (let j = 0; j < n; j++) {
        const v = m[i][j], f = most > 0 ? Math.sqrt(v / most) : 0;
        const rect = svg('rect', {
          x: x0 + j * cell, y: y0 + i * cell, width: cell - 1, height: cell - 1,
          fill: v > 0 ? 'hsl(' + hue + ', 70%, ' + (92 - 55 * f).toFixed(1) + '%)' : '#f4f4f4',
          'data-group': g.group, 'data-metric': metric, 'data-src': i, 'data-dst': j, 'data-value': v,
        }, root);
        tip(rect, g.group + ': rank ' + i + ' -> rank ' + j + ': ' + (metric === 'bytes' ? bytes(v) + ' (' + v + ' B)' : v + ' messages'));
        if (v > 0 && cell >= 34) {
          const label = metric === 'bytes' ? bytes(v).replace(' ', '') : String(v);
          text(root, x0 + (j + 0.5) * cell, y0 + (i + 0.5) * cell + 4, label, {
            'text-anchor': 'middle', style: 'font-size: ' + (cell >= 44 ? 10 : 8) + 'px; fill: ' + (f > 0.55 ? '#fff' : '#222'),
          });
        }
      }
    }
  }

  function trafficCharts(parent, r) {
    for (const g of r.traffic) {
      const n = g.bytes.length, cell = Math.max(6, Math.min(48, 300 / n));
      const L = 30, T = 34, gap = 46, W = L + 2 * n * cell + gap + 10, H = T + n * cell + 26;
      const c = chartBox(parent, 'Traffic in group "' + g.group + '" (row sends to column)', 'traffic', W, H);
      c.root.setAttribute('data-group', g.group);
      matrix(c.root, g, 'bytes', L, T, cell, 215);
      matrix(c.root, g, 'messages', L + n * cell + gap, T, cell, 150);
      text(c.root, L + n * cell + gap / 2, T + n * cell + 20, 'from rank (rows) to rank (columns)', { 'text-anchor': 'middle' });
      const names = g.communicators.map((x) => x.name).join(', ');
      const role = g.group === 'world' ? ' The world communicator is ' + (WORLD_ROLE[r.config.strategy] || 'every rank') + ' here.' : '';
      node('p', { class: 'note' }, c.box, 'Communicators: ' + names + '.' + role);
    }
  }

  function timeChart(parent, r) {
    const ops = [];
    for (const rk of r.ranks) {
      for (const op in rk.collectives) if (rk.collectives[op].seconds > 0 && ops.indexOf(op) < 0) ops.push(op);
    }
    const n = r.ranks.length, bh = Math.max(3, Math.min(12, 96 / n)), L = 96, R = 70, T = 8;
    const groupH = n * bh + 10, W = 440, H = T + Math.max(1, ops.length) * groupH + 30;
    const c = chartBox(parent, 'Time in collectives per rank (whole run)', 'time', W, H);
    let most = 0;
    for (const rk of r.ranks) for (const op of ops) most = Math.max(most, rk.collectives[op].seconds);
    if (!(most > 0)) most = 1;
    const xs = (v) => L + v / most * (W - L - R);
    for (const v of ops.length ? ticks(0, most, 4) : []) {
      svg('line', { class: 'grid', x1: xs(v), x2: xs(v), y1: T, y2: H - 24 }, c.root);
      text(c.root, xs(v), H - 10, seconds(v), { 'text-anchor': 'middle' });
    }
    ops.forEach((op, k) => {
      const y0 = T + k * groupH;
      text(c.root, L - 6, y0 + (n * bh) / 2 + 4, op, { 'text-anchor': 'end' });
      r.ranks.forEach((rk, i) => {
        const o = rk.collectives[op], s = o ? o.seconds : 0;
        const rect = svg('rect', {
          x: L, y: y0 + i * bh, width: Math.max(0, xs(s) - L), height: bh - 1,
          fill: 'hsl(' + (i * 360 / n).toFixed(0) + ', 55%, 55%)',
          'data-op': op, 'data-rank': rk.rank, 'data-seconds': s,
        }, c.root);
        tip(rect, 'rank ' + rk.rank + ' ' + op + ': ' + seconds(s) + ' in ' + (o ? o.calls : 0) + ' calls');
      });
    });
    svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - 24 }, c.root);
    if (!ops.length) {
      // Say why: one rank has no peers; a pipeline's stages may only send point to point.
      const why = n === 1 ? 'no collectives (one rank)'
        : r.pipeline ? 'no collectives: the stages only sent point to point' : 'no collectives';
      text(c.root, W / 2, T + 20, why, { 'text-anchor': 'middle', 'data-empty': why });
    }
    if (n <= 16) legend(c.box, r.ranks.map((rk, i) => ['rank ' + rk.rank, 'hsl(' + (i * 360 / n).toFixed(0) + ', 55%, 55%)', false]));
    node('p', { class: 'note' }, c.box, 'Wall time inside the calls over the whole run, waits for slower ranks included.');
  }

  function summary(r) {
    const c = r.config;
    // As train's header says it: single and accum run on one rank whatever config.ranks is.
    const ranks = c.strategy === 'single' ? '1 rank'
      : c.strategy === 'accum' ? '1 rank accumulating as ' + c.ranks + ' would' : c.ranks + ' ranks';
    const parts = [c.model + ' (' + r.num_params + ' params)', ranks, r.steps + ' steps',
      'batch ' + c.batch, c.optimizer + ' lr ' + c.lr, c.precision, 'algo ' + c.algo,
      'final loss ' + (r.final_loss === null ? 'NaN' : r.final_loss.toPrecision(4)), bytes(Math.round(r.bytes_sent_per_step)) + ' sent/step (max rank)',
      seconds(r.seconds_per_step) + '/step'];
    if (c.tp_size) parts.splice(2, 0, 'dp ' + c.ranks / c.tp_size + ' x tp ' + c.tp_size);
    if (r.check) parts.push('check ' + r.check.verdict + ' (' + r.check.criterion + ' vs ' + r.check.reference + ')');
    return parts.join(' · ');
  }

  // A pipeline run's stages over the step whose wall-time bubble is the run's
  // (pipeline.timeline): forward, backward (input gradient under zb-h1) and weight-gradient
  // phases as bars, and from the ranks' timelines (the panel's p2p) each send and receive,
  // thinner; the rest is idle. The share not computing, 1 - busy / (stages x span), is the
  // bubble train prints.
  function timelineChart(parent, r, p2p) {
    const t = r.pipeline.timeline, p = t.stages.length;
    const L = 60, R = 12, T = 8, rowH = 22, W = 640, H = T + p * rowH + 34;
    const c = chartBox(parent, 'Pipeline timeline (step ' + t.step + (t.replica ? ', replica ' + t.replica : '') +
      ', ' + p + ' stages x ' + seconds(t.span_seconds) + ')', 'timeline', W, H);
    const xs = (v) => L + v / t.span_seconds * (W - L - R);
    const KINDS = { F: ['forward', '#4e79a7'], B: ['backward', '#f28e2b'], W: ['weight gradient', '#59a14f'] };
    const P2P = { send: '#e15759', receive: '#b9a99b' };
    let busy = 0;
    const inP2p = { send: 0, receive: 0 };
    for (const st of t.stages) {
      const y = T + st.stage * rowH;
      text(c.root, L - 6, y + rowH / 2 + 3, 'stage ' + st.stage, { 'text-anchor': 'end' });
      svg('rect', { x: L, y: y + 2, width: W - L - R, height: rowH - 4, fill: '#eee', 'data-kind': 'idle' }, c.root);
      for (const ph of st.phases) {
        const [kind, color] = KINDS[ph.name[0]];
        busy += ph.end - ph.start;
        const rect = svg('rect', {
          x: xs(ph.start), y: y + 2, width: Math.max(0.5, xs(ph.end) - xs(ph.start)), height: rowH - 4,
          fill: color, 'data-stage': st.stage, 'data-rank': st.rank, 'data-kind': kind,
          'data-name': ph.name, 'data-start': ph.start, 'data-end': ph.end,
        }, c.root);
        tip(rect, 'stage ' + st.stage + ' (rank ' + st.rank + ') ' + ph.name + ' (' + kind + '): ' + seconds(ph.end - ph.start));
        if (xs(ph.end) - xs(ph.start) > 22) {
          text(c.root, (xs(ph.start) + xs(ph.end)) / 2, y + rowH / 2 + 3, ph.name, { 'text-anchor': 'middle', style: 'font-size: 9px; fill: #fff' });
        }
      }
    }
    for (const st of p2p ? p2p.stages : []) {
      const y = T + st.stage * rowH;
      for (const ev of st.events) {
        inP2p[ev.kind] += ev.end - ev.start;
        const rect = svg('rect', {
          x: xs(ev.start), y: y + 6, width: Math.max(0.5, xs(ev.end) - xs(ev.start)), height: rowH - 12,
          fill: P2P[ev.kind], 'data-p2p-stage': st.stage, 'data-rank': st.rank, 'data-kind': ev.kind,
          'data-start': ev.start, 'data-end': ev.end, 'data-bytes': ev.bytes,
        }, c.root);
        tip(rect, 'stage ' + st.stage + ' (rank ' + st.rank + ') ' + ev.kind + ': ' + seconds(ev.end - ev.start) +
          (ev.kind === 'send' ? ', ' + bytes(ev.bytes) : ''));
      }
    }
    const idle = 1 - busy / (p * t.span_seconds);
    const share = (v) => v / (p * t.span_seconds);
    const pct = (v) => (100 * v).toFixed(1) + '%';
    for (const v of ticks(0, t.span_seconds, 5)) text(c.root, xs(v), H - 18, seconds(v), { 'text-anchor': 'middle' });
    text(c.root, (L + W - R) / 2, H - 4, 'not computing ' + pct(idle) + ' (the run\'s wall-time bubble)' +
      (p2p ? ': receive ' + pct(share(inP2p.receive)) + ', send ' + pct(share(inP2p.send)) +
        ', idle ' + pct(idle - share(inP2p.receive) - share(inP2p.send)) : ''),
    { 'text-anchor': 'middle', 'data-idle': idle, 'data-bubble': t.bubble, 'data-send': share(inP2p.send),
      'data-receive': share(inP2p.receive) });
    legend(c.box, Object.values(KINDS).filter(([k]) => k !== 'weight gradient' || r.pipeline.schedule === 'zb-h1')
      .map(([k, color]) => [k, color, false])
      .concat(p2p ? [['send', P2P.send, false], ['receive (waiting included)', P2P.receive, false]] : [])
      .concat([['idle', '#eee', false]]));
  }

  // The mesh, one card per rank: pipeline stages as rows, data-parallel replicas as boxes,
  // the tensor-parallel ranks of a replica side by side; each card gives the rank's
  // coordinates and what it holds: its layers (its pipeline chunks'), its block of each
  // tensor-parallel tensor, its experts, and under ZeRO its shard of the optimizer state.
  function meshChart(parent, m) {
    const box = node('div', { class: 'chart mesh', 'data-chart': 'mesh', 'data-ranks': m.ranks.length }, parent);
    const cp = m.cp || 1;
    const axes = ['dp ' + m.dp, 'tp ' + m.tp + (m.sequence_parallel ? ' sp' : ''), 'pp ' + m.pp]
      .concat(cp > 1 ? ['cp ' + cp] : []).concat(m.ep > 1 ? ['ep ' + m.ep] : []).join(' x ')
      .replace(' x ep', ', ep');
    box.setAttribute('data-cp', cp);
    if ('seq' in m) box.setAttribute('data-sequence-parallel', m.sequence_parallel ? 1 : 0);
    node('h3', {}, box, 'Mesh: ' + m.ranks.length + (m.ranks.length === 1 ? ' rank' : ' ranks') + ' (' + axes +
      (m.zero ? ', ZeRO-' + m.zero : '') + '); what each rank holds');
    const num = (v) => v.toLocaleString('en-US');
    const range = (first, count, full) => first + '\u2013' + (first + count - 1) + ' of ' + full;
    const dims = (s) => [s.rows < s.full_rows ? 'rows ' + range(s.row0, s.rows, s.full_rows) : '',
      s.cols < s.full_cols ? 'cols ' + range(s.col0, s.cols, s.full_cols) : ''].filter((x) => x).join(', ');
    const ZERO = ['', 'optimizer state', 'optimizer state and gradients', 'optimizer state, gradients and weights'];
    for (let s = 0; s < m.pp; s++) {
      const row = node('div', { class: 'mesh-stage' }, box);
      if (m.pp > 1) node('div', { class: 'mesh-axis' }, row, 'stage ' + s);
      for (let d = 0; d < m.dp; d++) {
        const rep = node('div', { class: 'mesh-replica' }, row);
        if (m.dp > 1) node('div', { class: 'mesh-axis' }, rep, 'replica ' + d);
        for (const rk of m.ranks.filter((x) => x.pp === s && x.dp === d)) {
          const card = node('div', {
            class: 'mesh-rank', 'data-rank': rk.rank, 'data-dp': rk.dp, 'data-tp': rk.tp, 'data-pp': rk.pp,
            'data-ep': rk.ep, 'data-layers': rk.layers.join(','), 'data-params': rk.params,
            'data-tp-shards': rk.tp_shards.map((x) => x.tensor + ' ' + dims(x)).join(';'),
            'data-experts': rk.experts.map((e) => e.layer + ':' + e.ids.join(',')).join(';'), 'data-cp': rk.cp || 0,
            style: 'background: hsl(' + (rk.tp * 360 / m.tp + 200).toFixed(0) + ', 55%, ' + (m.tp > 1 ? 94 : 97) + '%)',
          }, rep);
          if ('zero_owned' in rk) card.setAttribute('data-zero-owned', rk.zero_owned);
          if ('tokens' in rk) card.setAttribute('data-tokens', rk.tokens);
          node('b', {}, card, 'rank ' + rk.rank);
          node('span', { class: 'coord' }, card, ' dp ' + rk.dp + ' \u00b7 tp ' + rk.tp + ' \u00b7 pp ' + rk.pp +
            (cp > 1 ? ' \u00b7 cp ' + rk.cp : '') + (m.ep > 1 ? ' \u00b7 ep ' + rk.ep : ''));
          // Its tokens between the blocks: its cp chunks, under sp its tp rank's slice of them.
          if ('tokens' in rk) node('div', { class: 'tokens' }, card, 'tokens ' + rk.tokens + ' of ' + m.seq);
          node('div', {}, card, 'layers: ' + rk.layers.join(', '));
          node('div', {}, card, num(rk.params) + ' of ' + num(m.params) + ' params');
          // The tensor-parallel blocks, one line per block shape: "rows 0-31 of 64: block0.w1, ...".
          const byDims = new Map();
          for (const x of rk.tp_shards) {
            const k = dims(x);
            byDims.set(k, (byDims.get(k) || []).concat([x.tensor]));
          }
          for (const [k, tensors] of byDims) node('div', { class: 'tp-shard', 'data-shard': k }, card, 'tp ' + k + ': ' + tensors.join(', '));
          for (const e of rk.experts) node('div', {}, card, 'experts of ' + e.layer + ': ' + e.ids.join(', '));
          if ('zero_owned' in rk) {
            node('div', {}, card, 'ZeRO-' + m.zero + ' ' + ZERO[m.zero] + ' of ' + num(rk.zero_owned) + ' params (' +
              (100 * rk.zero_owned / Math.max(1, rk.params)).toFixed(1) + '% of its ' + num(rk.params) + ')');
          }
        }
      }
    }
    node('p', { class: 'note' }, box, (cp > 1 ? 'Rank = ((stage x dp + replica) x cp + cp rank) x tp + tp rank'
      : 'Rank = (stage x dp + replica) x tp + tp rank') + ': tensor-parallel ranks are consecutive.' +
      (m.ep > 1 ? ' Expert parallelism shards the experts over groups of ' + m.ep + ' consecutive replicas.' : '') +
      (cp > 1 ? ' Context parallelism: cp rank r holds sequence chunks r and ' + (2 * cp - 1) + '-r of ' + 2 * cp +
        ' (ring attention).' : '') +
      (m.sequence_parallel ? ' Sequence parallelism: between the blocks each tp rank holds 1/' + m.tp +
        ' of those tokens.' : ''));
  }

  function panel(parent, p, index, shared) {
    const sec = node('section', { class: 'panel', id: 'run-' + index, 'data-panel': index }, parent);
    node('h2', {}, sec, p.title);
    node('p', { class: 'summary' }, sec, summary(p.report));
    const charts = node('div', { class: 'charts' }, sec);
    lossChart(charts, p.report);
    memoryChart(charts, p.report, shared);
    timeChart(charts, p.report);
    if (p.report.pipeline && p.report.pipeline.timeline) timelineChart(charts, p.report, p.p2p);
    if (p.mesh) meshChart(charts, p.mesh);
    trafficCharts(charts, p.report);
  }

  function table(parent, t) {
    const tab = node('table', { class: 'compare', 'data-chart': 'table' }, parent);
    const head = node('tr', {}, node('thead', {}, tab));
    for (const h of t.header) node('th', {}, head, h);
    const body = node('tbody', {}, tab);
    t.rows.forEach((row, i) => {
      const tr = node('tr', { 'data-row': i }, body);
      if (row.some((cell) => /UNEXPECTED|^FAIL/.test(cell)) && !row.some((cell) => /expected FAIL/.test(cell))) tr.className = 'fail';
      row.forEach((cell, j) => {
        const td = node('td', { class: /^[-+0-9.]/.test(cell) ? 'num' : '' }, tr);
        if (j === 0 && t.links) node('a', { href: '#run-' + i }, td, cell);
        else td.textContent = cell;
      });
    });
  }

  // The demo's lesson across its runs, on one scale each: model state per rank by category
  // (the largest over the ranks, as the table's KiB column; activations apart, they would
  // dwarf what ZeRO shards) and the bytes one rank sends per step.
  function compareCharts(parent, panels) {
    const STATE = CATEGORIES.filter((k) => k !== 'activations');
    const rows = panels.map((p, i) => {
      const m = {};
      for (const k of STATE) m[k] = Math.max.apply(null, p.report.ranks.map((rk) => rk.memory_bytes[k] || 0));
      return { i: i, title: p.title, memory: m, sent: p.report.bytes_sent_per_step };
    });
    const charts = node('div', { class: 'charts' }, node('section', { class: 'compare-charts' }, parent));
    const L = 190, R = 70, T = 8, bh = 14, W = 620, H = T + rows.length * bh + 30;
    const draw = (heading, name, value, parts) => {
      const c = chartBox(charts, heading, name, W, H);
      const most = Math.max(1, Math.max.apply(null, rows.map(value)));
      const u = byteAxis(most), xs = (v) => L + v / most * (W - L - R);
      for (const v of ticks(0, most / u.scale, 4)) {
        svg('line', { class: 'grid', x1: xs(v * u.scale), x2: xs(v * u.scale), y1: T, y2: H - 24 }, c.root);
        text(c.root, xs(v * u.scale), H - 10, u.fmt(v), { 'text-anchor': 'middle' });
      }
      rows.forEach((row) => {
        const y = T + row.i * bh;
        text(c.root, L - 6, y + bh - 4, row.title, { 'text-anchor': 'end' });
        let base = 0;
        for (const [key, v, color] of parts(row)) {
          const rect = svg('rect', {
            x: xs(base), y: y + 1, width: Math.max(0, xs(base + v) - xs(base)), height: bh - 2, fill: color,
            'data-run': row.i, 'data-category': key, 'data-bytes': v,
          }, c.root);
          tip(rect, row.title + ' ' + key + ': ' + bytes(v) + ' (' + v + ' B)');
          base += v;
        }
        text(c.root, xs(base) + 4, y + bh - 4, bytes(base), {});
      });
      svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - 24 }, c.root);
      return c;
    };
    const mem = draw('Model state per rank by strategy (largest rank; one scale)', 'compare-memory',
      (row) => STATE.reduce((a, k) => a + row.memory[k], 0), (row) => STATE.map((k) => [k, row.memory[k], COLORS[k]]));
    legend(mem.box, STATE.map((k) => [k, COLORS[k], false]));
    node('p', { class: 'note' }, mem.box, 'Activations are left out here (each panel has them): they depend on the batch, not on the strategy.');
    draw('Bytes one rank sends per step, by strategy (largest rank; one scale)', 'compare-sent',
      (row) => row.sent, (row) => [['sent', row.sent, '#4e79a7']]);
  }

  const app = document.getElementById('app');
  try {
    const data = JSON.parse(document.getElementById('dtsim-data').textContent);
    if (data.table) table(app, data.table);
    if (data.panels.length > 1) compareCharts(app, data.panels);
    // Several runs (the demo) share one memory scale, so that their bars compare.
    const shared = data.panels.length > 1 ? Math.max.apply(null, data.panels.map((p) => memoryMost(p.report))) : 0;
    data.panels.forEach((p, i) => panel(app, p, i, shared));
    document.body.setAttribute('data-rendered', document.querySelectorAll('[data-chart]').length);
  } catch (e) {
    node('p', { class: 'error' }, app, 'dtsim: the page could not be drawn: ' + e);
    document.body.setAttribute('data-error', String(e));
  }
})();
