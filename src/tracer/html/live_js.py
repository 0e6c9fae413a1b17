"""The live views' script: the row by hand, the distribution under a temperature, deep links.

It reads the numbers the page holds (`<script type="application/json" id="tracer-live">`, see
tracer.report.interactive) and does only the article's arithmetic on them. What it shows it also writes
into data attributes (the contract in the man page, ATTRIBUTES OF THE PAGE):
  #row-readout  data-attn data-layer data-head data-q data-off data-weights (+ data-wrong, data-wrong-sum, data-dropped)
  #dist-readout data-pos data-temp data-topk data-topp data-n data-probs
and keeps the URL fragment in step with the view (#layer=1&head=0&q=2&off=1,3&causal=off&temp=0.7...). An
encoder-decoder page holds three attention kinds (attn=encoder, decoder, cross); one-stack pages have one (self).
"""

from tracer.html.glance_js import GLANCE_SCRIPT

LIVE_SCRIPT = r"""
(function () {
  var started = performance.now();  // the script's own time, written to data-live-ms when it is ready
  var holder = document.getElementById('tracer-live');
  var D = holder ? JSON.parse(holder.textContent) : {};
  var R = D.rows || null, P = D.dist || null, M = D.maps || [];
  var RV = R ? [R].concat(D.row_views || []) : [];  // the attention kinds the panel can work (self, or encoder/decoder/cross)
  function decode(text, Kind) {
    var raw = atob(text), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    return new Kind(bytes.buffer);
  }
  function half(h) {  // IEEE float16 bits -> number (display only)
    var sign = (h & 0x8000) ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
    if (e === 0) { return sign * Math.pow(2, -14) * (f / 1024); }
    if (e === 31) { return f ? NaN : sign * Infinity; }
    return sign * Math.pow(2, e - 15) * (1 + f / 1024);
  }
  function el(tag, attrs, text) {
    var n = document.createElement(tag);
    for (var k in attrs || {}) { n.setAttribute(k, attrs[k]); }
    if (text !== undefined) { n.textContent = text; }
    return n;
  }
  function esc(t) { return String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;'); }
  function f4(x) { return x === 0 ? '0' : (Math.abs(x) >= 1e-4 && Math.abs(x) < 1e5 ? x.toFixed(4) : x.toExponential(2)); }

  // ---------- state, from and to the URL fragment ----------
  var PARTS = ['causal', 'window', 'padding', 'custom'];
  var S = {off: [], parts: {}, temp: 1, topp: 1, step: null, decode: null};
  if (R) { S.layer = R.layer; S.head = R.head || 0; S.q = R.q; }
  function kindOf(v) { return v.attn || 'self'; }
  function viewFor(stack, part) {  // the panel's view of a heatmap's (data-stack, data-part), or null
    for (var i = 0; i < RV.length; i++) { if ((RV[i].stack || '') === (stack || '') && (RV[i].part || 'attn') === (part || 'attn')) { return RV[i]; } }
    return null;
  }
  function useView(v) {  // switch the panel to another attention kind (its keys, its mask parts)
    if (v && v !== R) { R = v; S.decode = null; S.off = []; }
  }
  if (P) { S.pos = P.pos; S.topk = P.k; }
  function readHash() {
    var h = (location.hash || '').replace(/^#/, ''), seen = {}, kind = RV.length ? kindOf(RV[0]) : null;
    h.split('&').forEach(function (kv) {
      if (!kv) { return; }
      var i = kv.indexOf('='), k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i)), v = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1));
      var n = Number(v);
      seen[k] = true;
      if (k === 'attn') { kind = v; }
      else if (k === 'layer' || k === 'head' || k === 'q' || k === 'pos' || k === 'topk') { if (v !== '' && isFinite(n)) { S[k] = Math.round(n); } }
      else if (k === 'temp') { if (isFinite(n) && n > 0) { S.temp = Math.min(2, Math.max(0.1, n)); } }
      else if (k === 'topp') { if (isFinite(n) && n > 0) { S.topp = Math.min(1, n); } }
      else if (k === 'off') { S.off = v.split(',').filter(function (x) { return x !== '' && isFinite(Number(x)); }).map(Number); }
      else if (PARTS.indexOf(k) >= 0) { S.parts[k] = v !== 'off'; }
      else if (k === 'step') { S.step = v; }
      else if (k === 'decode') { S.decode = v !== '' && isFinite(n) ? Math.round(n) : null; }
    });
    var want = RV.filter(function (v) { return kindOf(v) === kind; })[0];
    if (want && want !== R) {  // attn=cross: that view, at its own defaults unless the fragment says
      R = want;
      if (!seen.layer) { S.layer = R.layer; }
      if (!seen.q) { S.q = R.q; }
      if (!seen.head) { S.head = R.head || 0; }
    }
  }
  function writeHash() {
    var out = [];
    if (R) {
      if (RV.length > 1) { out.push('attn=' + kindOf(R)); }
      out.push('layer=' + S.layer, 'head=' + S.head, 'q=' + S.q);
      if (S.decode) { out.push('decode=' + S.decode); }
      if (S.off.length) { out.push('off=' + S.off.join(',')); }
      PARTS.forEach(function (p) { if (S.parts[p] === false) { out.push(p + '=off'); } });
    }
    if (P) {
      if (S.temp !== 1) { out.push('temp=' + S.temp); }
      if (S.topk !== P.k) { out.push('topk=' + S.topk); }
      if (S.topp < 1) { out.push('topp=' + S.topp); }
      if (S.pos !== P.pos) { out.push('pos=' + S.pos); }
    }
    if (S.step) { out.push('step=' + encodeURIComponent(S.step)); }
    var h = '#' + out.join('&');
    try { history.replaceState(null, '', h); } catch (e) {
      try { location.hash = h; } catch (e2) { /* a sandboxed frame (a notebook cell) keeps no fragment */ }
    }
  }

  // ---------- the row, by hand ----------
  function layerEntry(layer, decode) {  // decode: a generation's decoding step (its own row), else the prefill
    var want = decode === undefined ? (S.decode || null) : decode;
    for (var i = 0; i < R.layers.length; i++) {
      var e = R.layers[i];
      if (e.layer === layer && (e.decode || null) === want) { return e; }
    }
    return null;
  }
  function rowsOf(e) { return e.rows || R.rows; }
  function rowOf(e, field, head, qi) {
    var key = '_' + field;
    if (!e[key]) { e[key] = decode(e[field], e.dtype === 'float64' ? Float64Array : Float32Array); }
    var start = (head * rowsOf(e).length + qi) * e.keys;
    return e[key].subarray(start, start + e.keys);
  }
  function workRow(e, qi) {
    var s = rowOf(e, 'scores', S.head, qi), K = e.keys, off = {};
    S.off.forEach(function (j) { off[j] = true; });
    var keep = [], why = [];
    for (var j = 0; j < K; j++) {
      var blocked = [], ignored = [];
      for (var name in e.parts) {
        if (e.parts[name].charAt(qi * K + j) === '0') { (S.parts[name] === false ? ignored : blocked).push(name); }
      }
      keep.push(!blocked.length && !off[j]);
      why.push({blocked: blocked, ignored: ignored, off: !!off[j]});
    }
    var m = -Infinity, all = -Infinity;
    for (j = 0; j < K; j++) { all = Math.max(all, s[j]); if (keep[j]) { m = Math.max(m, s[j]); } }
    var exps = [], total = 0, wide = [], wideTotal = 0;
    for (j = 0; j < K; j++) {
      exps.push(keep[j] ? Math.exp(s[j] - m) : 0); total += exps[j];
      wide.push(Math.exp(s[j] - all)); wideTotal += wide[j];
    }
    var w = [], wrong = [], wrongSum = 0, dropped = 0;
    for (j = 0; j < K; j++) {
      w.push(total > 0 ? exps[j] / total : 0);
      var p = wide[j] / wideTotal;
      wrong.push(keep[j] ? p : 0);
      if (keep[j]) { wrongSum += p; } else { dropped += p; }
    }
    return {s: s, keep: keep, why: why, max: m, exps: exps, total: total, w: w, wrong: wrong, wrongSum: wrongSum, dropped: dropped};
  }
  function drawRow() {
    var panel = document.getElementById('row-panel');
    if (!panel || !R) { return; }
    var out = document.getElementById('row-readout'), table = document.getElementById('rp-table');
    var e = layerEntry(S.layer);
    if (!e) { S.decode = null; e = layerEntry(S.layer) || R.layers.filter(function (x) { return !x.decode; }).pop(); }
    if (!e) { out.textContent = 'no layer of this page holds its scores'; return; }
    S.layer = e.layer;
    S.head = Math.min(Math.max(0, S.head), e.heads - 1);
    var rows = rowsOf(e), qi = rows.indexOf(S.q), note = '';
    if (qi < 0) {
      note = e.decode ? '' : 'query ' + S.q + ' is not held by this page (it holds rows ' + rows[0] + '..' + rows[rows.length - 1] + ' as listed); showing ' + rows[rows.length - 1] + '. ';
      qi = rows.length - 1; S.q = rows[qi];
    }
    if (e.decode) { note += 'decoding step ' + e.decode + ': the new query against the ' + e.keys + ' cached keys. '; }
    S.off = S.off.filter(function (j) { return j >= 0 && j < e.keys; });
    var r = workRow(e, qi);
    syncControls(e);
    out.setAttribute('data-attn', kindOf(R));
    out.setAttribute('data-layer', String(S.layer));
    out.setAttribute('data-head', String(S.head));
    out.setAttribute('data-q', String(S.q));
    if (e.decode) { out.setAttribute('data-decode', String(e.decode)); } else { out.removeAttribute('data-decode'); }
    out.setAttribute('data-off', JSON.stringify(S.off));
    out.setAttribute('data-weights', JSON.stringify(r.w));
    out.setAttribute('data-wrong', JSON.stringify(r.wrong));
    out.setAttribute('data-wrong-sum', String(r.wrongSum));
    out.setAttribute('data-dropped', String(r.dropped));
    out.setAttribute('data-parts', JSON.stringify(Object.keys(e.parts).filter(function (p) { return S.parts[p] !== false; })));
    var kept = r.keep.filter(Boolean).length;
    var label = R.labels[S.q] !== undefined ? ' ' + R.labels[S.q] : '', keys = R.key_labels || R.labels;
    out.textContent = note + (RV.length > 1 ? (KIND_TEXT[kindOf(R)] || kindOf(R)) + ', ' : '') +
      (R.layers.length > 1 || e.heads > 1 ? 'layer ' + S.layer + ' head ' + S.head + ', ' : '') +
      'query ' + S.q + label + ': ' + kept + ' of ' + e.keys + ' keys kept; max ' + f4(r.max) + ', Σ exp = ' + f4(r.total) +
      (kept ? ', the kept weights sum to 1.' : ': every key is blocked, the weights are all 0.') +
      ' The wrong way (softmax over every key, then the blocked weights deleted) sums to ' + f4(r.wrongSum) +
      ' = 1 − ' + f4(r.dropped) + ' dropped.';
    var body = table.querySelector('tbody');
    body.textContent = '';
    var raw = e.raw ? rowOf(e, 'raw', S.head, qi) : null, bias = e.bias ? rowOf(e, 'bias', S.head, qi) : null;
    table.querySelectorAll('.c-raw').forEach(function (c) { c.hidden = !raw; });
    table.querySelectorAll('.c-bias').forEach(function (c) { c.hidden = !bias; });
    var html = [], hideRaw = raw ? '' : ' hidden', hideBias = bias ? '' : ' hidden';
    for (var j = 0; j < e.keys; j++) {  // one string: a long row has hundreds of keys
      var why = r.why[j], reason = why.blocked.map(function (p) { return R.reasons[p] || p; });
      if (why.off) { reason.push('switched off'); }
      var text = reason.length ? 'blocked: ' + reason.join(', ') : 'keep';
      if (why.ignored.length) { text += ' (' + why.ignored.join(', ') + ' switched off)'; }
      html.push('<tr data-key="' + j + '" class="' + (r.keep[j] ? 'kept' : 'blocked') + '"><td class="num">' + j +
        '</td><td class="piece">' + esc(keys[j] !== undefined ? keys[j] : '') + '</td><td class="num c-raw"' + hideRaw + '>' +
        (raw ? f4(raw[j]) : '') + '</td><td class="num c-bias"' + hideBias + '>' + (bias ? f4(bias[j]) : '') +
        '</td><td class="num">' + f4(r.s[j]) + '</td><td class="' + (reason.length ? 'warn' : '') + '">' + esc(text) +
        '</td><td class="num dim">' + (r.keep[j] ? f4(r.s[j] - r.max) : '−∞') + '</td><td class="num">' + f4(r.exps[j]) +
        '</td><td class="num"><div class="wbar"><div class="fill" style="width:' + (100 * r.w[j]).toFixed(1) + '%"></div></div>' +
        f4(r.w[j]) + '</td><td class="num dim">' + f4(r.wrong[j]) + '</td><td><button type="button" class="key-toggle" data-key="' +
        j + '">' + (why.off ? 'switch on' : 'switch off') + '</button></td></tr>');
    }
    body.innerHTML = html.join('');
    var foot = table.querySelector('tfoot');
    foot.textContent = '';
    var ft = el('tr');
    ft.appendChild(el('th', {colspan: '2'}, 'Σ'));
    var fc = el('th', {'class': 'c-raw'}); fc.hidden = !raw; ft.appendChild(fc);
    fc = el('th', {'class': 'c-bias'}); fc.hidden = !bias; ft.appendChild(fc);
    ft.appendChild(el('th')); ft.appendChild(el('th')); ft.appendChild(el('th'));
    ft.appendChild(el('th', {'class': 'num'}, f4(r.total)));
    ft.appendChild(el('th', {'class': 'num'}, f4(r.w.reduce(function (a, b) { return a + b; }, 0))));
    ft.appendChild(el('th', {'class': 'num'}, f4(r.wrongSum)));
    ft.appendChild(el('th'));
    foot.appendChild(ft);
    document.querySelectorAll('svg.heatmap[data-layer]').forEach(function (svg) {
      var on = Number(svg.getAttribute('data-layer')) === S.layer && Number(svg.getAttribute('data-head')) === S.head &&
        (svg.getAttribute('data-stack') || '') === (R.stack || '') && svg.getAttribute('data-part') === (R.part || 'attn');
      svg.classList.toggle('chosen', on);
    });
  }
  var KIND_TEXT = {self: 'self-attention', encoder: 'encoder self-attention', decoder: 'decoder self-attention',
                   cross: 'cross-attention (decoder queries, encoder keys)'};
  var shownView = null;
  function syncControls(e) {
    var ls = document.getElementById('rp-layer'), hs = document.getElementById('rp-head'), qs = document.getElementById('rp-q');
    var ks = document.getElementById('rp-attn');
    if (shownView !== R) {  // another attention kind: its layers, its query rows, what the page holds of it
      shownView = R;
      if (ks) { ks.value = kindOf(R); }
      if (ls) {
        ls.textContent = '';
        R.layers.forEach(function (x) { if (!x.decode) { ls.appendChild(el('option', {value: String(x.layer)}, String(x.layer))); } });
      }
      if (qs) {
        qs.textContent = '';
        R.rows.forEach(function (q) { qs.appendChild(el('option', {value: String(q)}, q + ' ' + (R.labels[q] !== undefined ? R.labels[q] : ''))); });
      }
      var held = document.getElementById('rp-held');
      if (held && R.held) { held.textContent = R.held; }
    }
    if (ls) { ls.value = String(S.layer); }
    if (hs) {
      if (hs.options.length !== e.heads) {
        hs.textContent = '';
        for (var h = 0; h < e.heads; h++) { hs.appendChild(el('option', {value: String(h)}, String(h))); }
      }
      hs.value = String(S.head);
    }
    if (qs) { qs.value = String(S.q); }
    document.querySelectorAll('#row-panel input[data-part]').forEach(function (box) {
      var p = box.getAttribute('data-part');
      box.parentNode.hidden = !(p in e.parts);
      box.checked = S.parts[p] !== false;
    });
  }
  function cellQuery(svg, cell) {  // the query position of a heatmap cell, from its <title> ("q 3 ...")
    var t = cell.querySelector('title'), m = t && /^q (\d+)/.exec(t.textContent);
    return m ? Number(m[1]) : null;
  }
  function setupRow() {
    var panel = document.getElementById('row-panel');
    if (!panel || !R) { return; }
    var ls = document.getElementById('rp-layer'), hs = document.getElementById('rp-head'), qs = document.getElementById('rp-q');
    if (ls) { ls.addEventListener('change', function () { S.layer = Number(ls.value); S.off = []; S.decode = null; update(); }); }
    if (hs) { hs.addEventListener('change', function () { S.head = Number(hs.value); update(); }); }
    if (qs) { qs.addEventListener('change', function () { S.q = Number(qs.value); S.off = []; S.decode = null; update(); }); }
    var ks = document.getElementById('rp-attn');
    if (ks) {
      ks.addEventListener('change', function () {
        var v = RV.filter(function (x) { return kindOf(x) === ks.value; })[0];
        if (v && v !== R) { useView(v); S.layer = R.layer; S.q = R.q; update(); }
      });
    }
    document.querySelectorAll('table.kv tr[data-t]').forEach(function (tr) {
      tr.addEventListener('click', function () {
        var t = Number(tr.getAttribute('data-t'));
        S.decode = t || null; S.layer = Number(tr.closest('table').getAttribute('data-layer')); S.off = [];
        S.q = Number(tr.getAttribute('data-q'));
        update();
        panel.scrollIntoView({block: 'nearest'});
      });
    });
    panel.addEventListener('change', function (ev) {
      var p = ev.target.getAttribute && ev.target.getAttribute('data-part');
      if (p) { S.parts[p] = ev.target.checked; update(); }
    });
    panel.addEventListener('click', function (ev) {
      var b = ev.target.closest('button.key-toggle');
      if (b) {
        var j = Number(b.getAttribute('data-key')), at = S.off.indexOf(j);
        if (at >= 0) { S.off.splice(at, 1); } else { S.off.push(j); S.off.sort(function (a, c) { return a - c; }); }
        update();
      } else if (ev.target.id === 'rp-reset') { S.off = []; S.parts = {}; update(); }
    });
    document.querySelectorAll('svg.heatmap[data-layer]').forEach(function (svg) {
      var v = viewFor(svg.getAttribute('data-stack'), svg.getAttribute('data-part'));
      if (!v) { return; }
      svg.addEventListener('click', function (ev) {
        var cell = ev.target.closest('rect.cell'), q = cell ? cellQuery(svg, cell) : null;
        if (q === null) { return; }
        useView(v);
        S.layer = Number(svg.getAttribute('data-layer')); S.head = Number(svg.getAttribute('data-head'));
        S.q = q; S.off = []; S.decode = null;
        update();
        panel.scrollIntoView({block: 'nearest'});
      });
    });
  }

  // ---------- the distribution, live ----------
  function distAt(pos) {
    if (!P._ids) { P._ids = decode(P.ids, Int32Array); P._lg = decode(P.logits, Float32Array); }
    var i = P.positions.indexOf(pos);
    return {ids: P._ids.subarray(i * P.n, (i + 1) * P.n), lg: P._lg.subarray(i * P.n, (i + 1) * P.n)};
  }
  function drawDist() {
    var out = document.getElementById('dist-readout');
    if (!out || !P) { return; }
    if (P.positions.indexOf(S.pos) < 0) { S.pos = P.pos; }
    S.topk = Math.min(Math.max(1, S.topk), P.n);
    var d = distAt(S.pos), n = P.n, z = [], m = -Infinity, total = 0;
    for (var i = 0; i < n; i++) { z.push(d.lg[i] / S.temp); if (z[i] > m) { m = z[i]; } }
    var p = z.map(function (x) { var e = Math.exp(x - m); total += e; return e; });
    var entropy = 0;
    p = p.map(function (e) { var q = e / total; if (q > 0) { entropy -= q * Math.log2(q); } return q; });
    var shown = S.topk, cum = 0;  // the stored logits are in descending order, so are the probabilities
    if (S.topp < 1) { for (i = 0; i < shown; i++) { cum += p[i]; if (cum >= S.topp) { shown = i + 1; break; } } }
    var probs = p.slice(0, shown);
    out.setAttribute('data-pos', String(S.pos));
    out.setAttribute('data-temp', String(S.temp));
    out.setAttribute('data-topk', String(S.topk));
    out.setAttribute('data-topp', String(S.topp));
    out.setAttribute('data-n', String(n));
    out.setAttribute('data-probs', JSON.stringify(probs));
    out.setAttribute('data-ids', JSON.stringify(Array.prototype.slice.call(d.ids, 0, shown)));
    var tgt = '';
    if (P.target !== null && P.target !== undefined) {
      var rank = Array.prototype.indexOf.call(d.ids, P.target);
      tgt = rank < 0 ? '; target ' + P.names[P.target] + ' is not among the ' + n + ' stored logits (rank > ' + n + ')'
        : '; target ' + P.names[P.target] + ': rank ' + (rank + 1) + ', p ' + f4(p[rank]);
      out.setAttribute('data-target-rank', rank < 0 ? '' : String(rank + 1));
    }
    out.textContent = (P.kind === 'fill' ? 'in place of' : 'after') + ' position ' + S.pos + ' at temperature ' + S.temp +
      ': entropy ' + entropy.toFixed(3) + ' bits over the ' + n + ' stored logits' + tgt + '; showing ' + shown + ' bar(s)' +
      (S.topp < 1 ? ' (top-p ' + S.topp + ')' : '') + '.';
    var body = document.getElementById('dist-live').querySelector('tbody');
    body.textContent = '';
    cum = 0;
    for (i = 0; i < shown; i++) {
      cum += p[i];
      var tr = el('tr', {'class': d.ids[i] === P.target ? 'target' : ''});
      tr.appendChild(el('td', {'class': 'num'}, String(i + 1)));
      tr.appendChild(el('td', {'class': 'piece'}, P.names[d.ids[i]]));
      tr.appendChild(el('td', {'class': 'num dim'}, String(d.ids[i])));
      var bc = el('td', {'class': 'bar'});
      bc.appendChild(el('div', {'class': 'fill', style: 'width:' + (100 * p[i]).toFixed(1) + '%'}));
      tr.appendChild(bc);
      tr.appendChild(el('td', {'class': 'num'}, p[i].toFixed(4)));
      tr.appendChild(el('td', {'class': 'num dim'}, d.lg[i].toFixed(2)));
      tr.appendChild(el('td', {'class': 'num dim'}, cum.toFixed(4)));
      body.appendChild(tr);
    }
    var t = document.getElementById('dl-temp'), tv = document.getElementById('dl-temp-value');
    if (t) { t.value = String(S.temp); }
    if (tv) { tv.textContent = S.temp.toFixed(2); }
    var k = document.getElementById('dl-topk'); if (k) { k.value = String(S.topk); }
    var pp = document.getElementById('dl-topp'); if (pp) { pp.value = String(S.topp); }
    var ps = document.getElementById('dl-pos'); if (ps) { ps.value = String(S.pos); }
  }
  function setupDist() {
    if (!P || !document.getElementById('dist-readout')) { return; }
    var fixed = document.querySelector('.static-bars');
    if (fixed) { fixed.hidden = true; }
    var t = document.getElementById('dl-temp');
    if (t) { t.addEventListener('input', function () { S.temp = Number(t.value); update(); }); }
    var k = document.getElementById('dl-topk');
    if (k) { k.addEventListener('change', function () { S.topk = Math.round(Number(k.value)) || 1; update(); }); }
    var pp = document.getElementById('dl-topp');
    if (pp) { pp.addEventListener('change', function () { var v = Number(pp.value); S.topp = v > 0 && v <= 1 ? v : 1; update(); }); }
    var ps = document.getElementById('dl-pos');
    if (ps) { ps.addEventListener('change', function () { S.pos = Number(ps.value); update(); }); }
  }

""" + GLANCE_SCRIPT + r"""
  // ---------- tokens, steps ----------
  function setupTokens() {
    document.querySelectorAll('.pill[data-pos]').forEach(function (chip) {
      chip.addEventListener('click', function () {
        var pos = Number(chip.getAttribute('data-pos')), stack = chip.getAttribute('data-stack');
        // an encoder-decoder page: an encoder chip works the encoder's row; a decoder chip a decoder row
        if (stack === 'encoder' && R && kindOf(R) !== 'encoder') { useView(viewFor('encoder', 'attn')); S.layer = R.layer; }
        if (stack === 'decoder' && R && kindOf(R) === 'encoder') { useView(viewFor('decoder', 'attn')); S.layer = R.layer; }
        if (R && R.rows.indexOf(pos) >= 0) { S.q = pos; S.off = []; }
        if (P && P.positions.indexOf(pos) >= 0 && stack !== 'encoder') { S.pos = pos; }
        update();
      });
    });
  }
  function showStep() {
    document.querySelectorAll('.step-focus').forEach(function (n) { n.classList.remove('step-focus'); });
    if (!S.step) { return; }
    var cell = document.querySelector('table.flow td[title="' + S.step.replace(/"/g, '') + '"]');
    if (!cell) { return; }
    var row = cell.parentNode;
    row.classList.add('step-focus');
    var box = row.closest('details');
    if (box) { box.open = true; }
    row.scrollIntoView({block: 'center'});
  }
  function setupGuided() {
    var start = document.getElementById('guided'), next = document.getElementById('guided-next');
    if (!start) { return; }
    var cards = document.querySelectorAll('li.explain'), shown = cards.length;
    function reveal() {
      cards.forEach(function (c, i) { c.hidden = i >= shown; });
      next.hidden = shown >= cards.length;
      var last = cards[shown - 1], link = last && last.querySelector('a.step-link');
      if (link && shown < cards.length + 1) { S.step = link.getAttribute('data-step'); showStep(); writeHash(); last.scrollIntoView({block: 'nearest'}); }
    }
    start.addEventListener('click', function (ev) { ev.preventDefault(); shown = 1; reveal(); });
    next.addEventListener('click', function (ev) { ev.preventDefault(); shown = Math.min(cards.length, shown + 1); reveal(); });
  }
  function setupSteps() {
    document.querySelectorAll('a.step-link').forEach(function (a) {
      a.addEventListener('click', function (ev) { ev.preventDefault(); S.step = a.getAttribute('data-step'); showStep(); writeHash(); });
    });
    document.querySelectorAll('table.flow td[title]').forEach(function (cell) {
      cell.addEventListener('click', function () { S.step = cell.getAttribute('title'); showStep(); writeHash(); });
    });
  }

  var ready = false;
  function update() { drawRow(); drawDist(); if (ready) { writeHash(); } }
  readHash();
  setupRow(); setupDist(); setupTokens(); setupSteps(); setupGlance(); setupGuided();
  drawRow(); drawDist(); showStep();
  ready = true;
  window.addEventListener('hashchange', function () { S.off = []; S.parts = {}; readHash(); drawRow(); drawDist(); showStep(); });
  document.documentElement.setAttribute('data-live-ms', (performance.now() - started).toFixed(1));
  document.documentElement.setAttribute('data-live', 'ready');
})();
"""
