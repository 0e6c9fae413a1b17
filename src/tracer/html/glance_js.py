"""Heads at a glance, the script part (spliced into live_js.LIVE_SCRIPT, whose helpers and state it uses):
a long prompt's maps as small multiples on canvases, from the float16 weights of the page data, one head
large with its labels; hover reads a weight, a click on the large map opens that row in the row panel."""

GLANCE_SCRIPT = r"""
  // ---------- heads at a glance (long prompts): small multiples and one head large, on canvases ----------
  var RAMP = [[0, [247, 251, 255]], [0.25, [198, 219, 239]], [0.5, [107, 174, 214]], [0.75, [33, 113, 181]], [1, [8, 48, 107]]];
  function ramp(t) {
    t = Math.min(1, Math.max(0, t || 0));
    for (var i = 1; i < RAMP.length; i++) {
      if (t <= RAMP[i][0]) {
        var a = RAMP[i - 1], b = RAMP[i], f = (t - a[0]) / (b[0] - a[0]);
        return 'rgb(' + [0, 1, 2].map(function (c) { return Math.round(a[1][c] + (b[1][c] - a[1][c]) * f); }).join(',') + ')';
      }
    }
    return 'rgb(8,48,107)';
  }
  function mapOf(node) {
    var stack = node.getAttribute('data-stack') || '', part = node.getAttribute('data-part'), layer = Number(node.getAttribute('data-layer'));
    for (var i = 0; i < M.length; i++) { if (M[i].stack === stack && M[i].part === part && M[i].layer === layer) { return M[i]; } }
    return null;
  }
  function weightsOf(m) {
    if (!m._w) { var h = decode(m.w16, Uint16Array); m._w = new Float32Array(h.length); for (var i = 0; i < h.length; i++) { m._w[i] = half(h[i]); } }
    return m._w;
  }
  function offsets(index, size) {
    var out = [], at = 0;
    for (var k = 0; k < index.length; k++) { if (k && index[k] !== index[k - 1] + 1) { at += 8; } out.push(at); at += size; }
    return out;
  }
  var LUT = null;  // 256 steps of the ramp, as bytes
  function lut() {
    if (!LUT) {
      LUT = new Uint8Array(256 * 3);
      for (var i = 0; i < 256; i++) {
        var rgb = ramp(i / 255).slice(4, -1).split(',');
        LUT[3 * i] = +rgb[0]; LUT[3 * i + 1] = +rgb[1]; LUT[3 * i + 2] = +rgb[2];
      }
    }
    return LUT;
  }
  function paint(ctx, m, hi, size, left, top) {  // one ImageData for every cell: fast for thousands of cells
    var w = weightsOf(m), nr = m.rows.length, nc = m.cols.length, xs = offsets(m.cols, size), ys = offsets(m.rows, size);
    var W = xs[nc - 1] + size, H = ys[nr - 1] + size, img = ctx.createImageData(W, H), px = img.data, L = lut();
    for (var r = 0; r < nr; r++) {
      for (var c = 0; c < nc; c++) {
        var R0, G0, B0;
        if (m.blocked.charCodeAt(r * nc + c) === 49) { R0 = 236; G0 = 239; B0 = 241; }
        else {
          var t = Math.round(255 * Math.sqrt(Math.min(1, Math.max(0, w[(hi * nr + r) * nc + c])))) * 3;
          R0 = L[t]; G0 = L[t + 1]; B0 = L[t + 2];
        }
        for (var y = ys[r]; y < ys[r] + size; y++) {
          for (var x = xs[c], at = (y * W + x) * 4; x < xs[c] + size; x++, at += 4) {
            px[at] = R0; px[at + 1] = G0; px[at + 2] = B0; px[at + 3] = 255;
          }
        }
      }
    }
    ctx.putImageData(img, left, top);
    return {xs: xs, ys: ys};
  }
  function drawBig(canvas) {
    var m = mapOf(canvas);
    if (!m) { return; }
    var head = Number(canvas.getAttribute('data-head')), hi = Math.max(0, m.heads.indexOf(head));
    var size = Math.max(8, Math.min(14, Math.floor(640 / m.cols.length))), ctx = canvas.getContext('2d');
    ctx.font = '11px system-ui, sans-serif';
    var clip = function (t) { return t.length > 18 ? t.slice(0, 17) + '…' : t; };
    var rl = m.rows.map(function (p, i) { return p + ' ' + clip(m.row_labels[i]); });
    var cl = m.cols.map(function (p, i) { return p + ' ' + clip(m.col_labels[i]); });
    var left = 10 + Math.max.apply(null, rl.map(function (t) { return ctx.measureText(t).width; }));
    var top = 16 + 0.82 * Math.max.apply(null, cl.map(function (t) { return ctx.measureText(t).width; }));
    var xs = offsets(m.cols, size), ys = offsets(m.rows, size);
    canvas.width = Math.ceil(left + xs[xs.length - 1] + size + 10); canvas.height = Math.ceil(top + ys[ys.length - 1] + size + 6);
    ctx.font = '11px system-ui, sans-serif'; ctx.fillStyle = '#1b1f24';
    ctx.textAlign = 'right';
    rl.forEach(function (t, r) { ctx.fillText(t, left - 6, top + ys[r] + size / 2 + 4); });
    ctx.textAlign = 'left';
    cl.forEach(function (t, c) {
      ctx.save(); ctx.translate(left + xs[c] + size / 2 + 3, top - 5); ctx.rotate(-55 * Math.PI / 180); ctx.fillText(t, 0, 0); ctx.restore();
    });
    paint(ctx, m, hi, size, left, top);
    canvas._geom = {m: m, hi: hi, size: size, left: left, top: top, xs: xs, ys: ys};
    canvas.setAttribute('data-drawn', canvas.width + 'x' + canvas.height);
  }
  function cellAt(canvas, ev) {
    var g = canvas._geom;
    if (!g) { return null; }
    var box = canvas.getBoundingClientRect(), x = ev.clientX - box.left - g.left, y = ev.clientY - box.top - g.top, r = -1, c = -1;
    for (var i = 0; i < g.xs.length; i++) { if (x >= g.xs[i] && x < g.xs[i] + g.size) { c = i; } }
    for (i = 0; i < g.ys.length; i++) { if (y >= g.ys[i] && y < g.ys[i] + g.size) { r = i; } }
    return r < 0 || c < 0 ? null : {r: r, c: c};
  }
  function setupGlance() {
    document.querySelectorAll('canvas.thumb').forEach(function (canvas) {
      var m = mapOf(canvas);
      if (!m) { return; }
      paint(canvas.getContext('2d'), m, Math.max(0, m.heads.indexOf(Number(canvas.getAttribute('data-head')))), 3, 0, 0);
      canvas.addEventListener('click', function () {
        var body = canvas.closest('.body'), big = body.querySelector('canvas.big');
        big.setAttribute('data-head', canvas.getAttribute('data-head'));
        body.querySelectorAll('canvas.thumb').forEach(function (t) { t.classList.toggle('chosen', t === canvas); });
        drawBig(big);
        var v = viewFor(canvas.getAttribute('data-stack'), canvas.getAttribute('data-part'));
        if (v) {
          useView(v); S.layer = m.layer; S.head = Number(canvas.getAttribute('data-head')); S.off = []; update();
        }
      });
    });
    document.querySelectorAll('canvas.big').forEach(function (canvas) {
      drawBig(canvas);
      var out = canvas.closest('.body, .readable').querySelector('.glance-readout');
      canvas.addEventListener('mousemove', function (ev) {
        var at = cellAt(canvas, ev), g = canvas._geom;
        if (!at) { return; }
        var nr = g.m.rows.length, nc = g.m.cols.length, q = g.m.rows[at.r], k = g.m.cols[at.c];
        var blocked = g.m.blocked.charAt(at.r * nc + at.c) === '1';
        var where = 'q ' + q + ' ' + g.m.row_labels[at.r] + ' → k ' + k + ' ' + g.m.col_labels[at.c] + ': ';
        out.textContent = g.m.kind === 'mask' ? where + (blocked ? 'blocked' : 'keep') :
          'layer ' + g.m.layer + ' head ' + g.m.heads[g.hi] + ' · ' + where +
          (blocked ? 'blocked' : '≈' + weightsOf(g.m)[(g.hi * nr + at.r) * nc + at.c].toFixed(4) + ' (float16)');
      });
      canvas.addEventListener('click', function (ev) {
        var at = cellAt(canvas, ev), g = canvas._geom;
        var v = at ? viewFor(g.m.stack, g.m.part) : null;
        if (!v) { return; }
        useView(v); S.layer = g.m.layer; S.head = g.m.heads[g.hi]; S.q = g.m.rows[at.r]; S.off = []; update();
        document.getElementById('row-panel').scrollIntoView({block: 'nearest'});
      });
    });
  }

"""
