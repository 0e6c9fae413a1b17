"""The page's only stylesheet and script, inlined: the file opens offline, from anywhere."""

CSS = """
:root { --ink:#1b1f24; --dim:#5c6670; --line:#d6dbe1; --bg:#ffffff; --panel:#f6f8fa; --bad:#c62828; --ok:#2e7d32;
        --accent:#2171b5; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC",
       "PingFang SC", "Microsoft YaHei", sans-serif; color:var(--ink); background:var(--bg); }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { margin: 0 0 4px; font-size: 20px; }
header .prompt { margin: 4px 0; font-size: 16px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1500px; }
section { margin-top: 26px; }
h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.dim, .note { color: var(--dim); }
.note { margin: 4px 0 8px; }
.warn { color: #8a5a00; }
.bad { color: var(--bad); font-weight: 600; }
.ok { color: var(--ok); font-weight: 600; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; background: var(--panel); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.flow td:nth-child(1), table.flow td:nth-child(4) { white-space: nowrap; }
table.flow td:nth-child(5) { min-width: 190px; }
table.flow td { font-size: 12.5px; }
table.flow td:nth-child(2) { min-width: 160px; max-width: 260px; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.card { display: grid; grid-template-columns: max-content minmax(180px, 1fr) max-content minmax(180px, 1fr); gap: 2px 18px; max-width: 1100px; }
.card dt { color: var(--dim); }
.card dd { margin: 0; }
details { margin: 4px 0; border: 1px solid var(--line); border-radius: 4px; background: #fff; }
details > summary { cursor: pointer; padding: 4px 10px; background: var(--panel); }
details[open] > summary { border-bottom: 1px solid var(--line); }
details > .body { padding: 4px 10px; overflow-x: auto; }
.heads { display: flex; flex-wrap: wrap; gap: 10px 22px; align-items: flex-start; }
.head { display: inline-block; }
.head .label { font-size: 12px; color: var(--dim); }
svg text { font-size: 11px; fill: var(--ink); }
svg text.v { font-size: 10px; pointer-events: none; }
svg.small text { font-size: 10.5px; }
svg text.v.on-dark { fill: #ffffff; }
svg rect.cell { stroke: #ffffff; stroke-width: 0.5; }
svg rect.cell:hover { stroke: #e6550d; stroke-width: 2; }
svg rect.blocked { fill: #eceff1; }
svg line.gap { stroke: #9aa4ad; stroke-dasharray: 2 2; }
.readout { min-height: 1.5em; color: var(--dim); font-size: 12.5px; }
.legend { display: inline-flex; align-items: center; gap: 6px; font-size: 12px; margin: 4px 0; }
.legend .bar { display: inline-block; width: 140px; height: 10px; border: 1px solid #999; }
.bars td.bar { width: 340px; }
.bars .fill { height: 14px; background: var(--accent); border-radius: 2px; }
.bars tr.target td { background: #fff4e5; }
.tokens td.piece { font-size: 15px; }
.pill { display: inline-block; padding: 0 6px; border-radius: 9px; background: #e8eef5; font-size: 12px; }
.chart { max-width: 100%; height: auto; }
.chart text { font-size: 11px; }
.chart .axis { stroke: #777; }
.chart .grid { stroke: #e3e7eb; }
.chart .tol { stroke: #8a5a00; stroke-dasharray: 5 3; }
.chart .first { stroke: var(--bad); stroke-width: 2; }
.chart text.first-label { fill: var(--bad); font-weight: 600; }
.chart .series { fill: none; stroke: var(--accent); stroke-width: 1.3; }
.chart circle.pass { fill: var(--ok); }
.chart circle.fail { fill: var(--bad); }
.chart circle.exact { fill: #ffffff; stroke: var(--ok); }
pre.json { max-height: 420px; overflow: auto; background: var(--panel); padding: 8px; }
footer { padding: 10px 28px 30px; color: var(--dim); font-size: 12px; }
"""

# Hover readout: the tooltip (<title>) also shows in a line under each heatmap, and a button opens every block.
SCRIPT = """
(function () {
  document.querySelectorAll('.readable').forEach(function (wrap) {
    var out = wrap.querySelector('.readout');
    if (!out) { return; }
    wrap.addEventListener('mouseover', function (ev) {
      var el = ev.target.closest('rect.cell, circle');
      if (!el) { return; }
      var t = el.querySelector('title');
      var svg = el.closest('svg');
      var what = svg ? (svg.getAttribute('aria-label') || '') : '';
      if (t) { out.textContent = (what ? what + ' · ' : '') + t.textContent; }
    });
  });
  var btn = document.getElementById('toggle-all');
  if (btn) {
    btn.addEventListener('click', function () {
      var all = document.querySelectorAll('details.block');
      var open = Array.prototype.some.call(all, function (d) { return !d.open; });
      all.forEach(function (d) { d.open = open; });
      btn.textContent = open ? 'fold all blocks' : 'open all blocks';
    });
  }
  // What the browser laid out, for anyone checking the page: each drawn heatmap's size, and a ready mark.
  document.querySelectorAll('svg.heatmap, svg.chart').forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    svg.setAttribute('data-drawn', Math.round(box.width) + 'x' + Math.round(box.height));
  });
  document.documentElement.setAttribute('data-ready', String(document.querySelectorAll('svg.heatmap').length));
})();
"""

LIVE_CSS = """
.rowpanel { border: 1px solid var(--line); border-radius: 4px; padding: 6px 10px; background: #fbfcfd; }
.controls { display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: center; margin: 4px 0; }
.controls input[type=number] { width: 5em; }
.rp-wrap { max-height: 460px; overflow: auto; }
.rowtable tr.blocked td { color: var(--dim); }
.rowtable td, .rowtable th { white-space: nowrap; }
.rowtable button { font-size: 12px; padding: 0 6px; }
.rowtable .wbar { display: inline-block; width: 80px; height: 10px; margin-right: 6px; vertical-align: middle; background: #eef2f6; }
.rowtable .wbar .fill { height: 10px; }
.pill[data-pos] { cursor: pointer; }
svg.heatmap[data-layer] rect.cell { cursor: pointer; }
.glance { display: flex; flex-wrap: wrap; gap: 8px 14px; }
figure.thumb { margin: 0; font-size: 12px; color: var(--dim); text-align: center; }
canvas.thumb { display: block; border: 1px solid var(--line); cursor: pointer; }
canvas.thumb.chosen { outline: 2px solid #e6550d; }
canvas.big { display: block; margin-top: 6px; cursor: pointer; }
table.kv td { width: 18px; min-width: 18px; height: 18px; padding: 0; border: 1px solid #fff; }
table.kv td.empty { background: transparent; }
table.kv td.added { outline: 2px solid #e6550d; outline-offset: -2px; }
table.kv th { font-size: 11px; font-weight: 400; padding: 1px 3px; text-align: center; }
table.kv thead th.prompt { background: #e3e7eb; color: var(--dim); }
table.kv thead th.new { background: #fff4e5; }
ol.explained { margin: 6px 0; padding-left: 0; list-style: none; max-width: 1100px; }
li.explain { margin: 4px 0; padding: 4px 8px; border-left: 3px solid var(--accent); background: #fbfcfd; }
a.step-link { color: var(--accent); text-decoration: none; margin-right: 6px; }
svg.heatmap.chosen { outline: 2px solid #e6550d; outline-offset: 2px; }
tr.step-focus td { background: #fff4e5; }
#row-readout, #dist-readout { color: var(--ink); }
"""
CSS += LIVE_CSS
