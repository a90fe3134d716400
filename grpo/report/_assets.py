"""The report page's stylesheet, its script, and the page template (static text, no data).

The script does two things, both without a server: it sorts a ``table.sortable`` by the clicked column
(a cell's ``[data-sort]`` value wins over its text), and it drives the learning curves' controls (a
``div.curve-controls`` next to the plot): "colour by" re-colours every trace from the colours the
figure carries in ``layout.meta`` (see ``grpo.report.curves``), and "smoothing" replaces each curve by
its debiased exponential moving average (TensorBoard's smoothing) computed from the original points.
"""

from __future__ import annotations

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 2rem 3rem;color:#222;line-height:1.4}
nav{position:sticky;top:0;background:#fff;padding:.5rem 0;border-bottom:1px solid #ddd;z-index:10;font-size:.9rem}
nav a{margin-right:.8rem;color:#1f5fa8;text-decoration:none}
h1{margin:.8rem 0}h2{margin-top:2.2rem;border-bottom:1px solid #ddd}h3{margin:1.4rem 0 .4rem}
section.group>h2{font-size:1.5rem}section.panel h3{font-size:1.1rem}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dl.facts dt{font-weight:600;color:#555}
dl.facts dd{margin:0}
.note{color:#8a6d3b;background:#fcf8e3;padding:.4rem .6rem;border-radius:4px;display:inline-block}
.caption{color:#666;font-size:.85rem}.big{font-size:1.2rem}
.winner{font-weight:600}.interval{white-space:nowrap}
.verdict{padding:.4rem .6rem;border-radius:4px;display:inline-block}
.verdict.distinct{background:#e6f4ea;color:#1e5631}.verdict.tied{background:#fdecea;color:#8a1c1c}
.compute b{font-weight:600}
table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ddd;padding:.2rem .45rem;text-align:left;
vertical-align:top}
th{background:#f5f5f5}table.sortable th{cursor:pointer;user-select:none}
th.asc::after{content:" ▲"}th.desc::after{content:" ▼"}
tr.chosen td{background:#fff3cd;font-weight:600}
.scroll{max-height:70vh;overflow:auto}table.trials td{white-space:nowrap}
.state.COMPLETE{color:#2a7a2a}.state.PRUNED{color:#888}.state.FAIL{color:#c0392b}.state.RUNNING{color:#1f5fa8}
.flags{color:#c0392b;white-space:nowrap}
.reason{display:inline-block;vertical-align:bottom;max-width:26rem;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
section.trial{border-left:3px solid #ddd;padding-left:1rem;margin:1.5rem 0}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;max-height:24rem;font-size:.8rem}
pre.text{background:none;padding:0;margin:0;max-height:12rem;max-width:36rem;white-space:pre-wrap;word-break:break-word}
pre.command{font-size:.9rem}
tr.right td:last-child{color:#2a7a2a}tr.wrong td:last-child{color:#c0392b}
summary{cursor:pointer;margin:.4rem 0}
.curve-controls{display:flex;flex-wrap:wrap;gap:.4rem 1.4rem;align-items:center;margin:.4rem 0;font-size:.9rem}
.curve-controls select{font-size:.9rem}
.colour-key span.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin:0 .25rem 0 .6rem;
vertical-align:middle}
"""

JS = r"""
(function () {  // click a header of a table.sortable to sort by that column; a [data-sort] value wins
  function key(cell) {
    var tagged = cell.querySelector('[data-sort]');
    var raw = tagged ? tagged.getAttribute('data-sort') : cell.textContent;
    var n = parseFloat(raw);
    return raw.trim() === '' ? null : (isNaN(n) || !/^\s*[-+]?[\d.]/.test(raw) ? raw.toLowerCase() : n);
  }
  function sortBy(table, col, th) {
    var asc = th.className !== 'asc';
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.className = ''; });
    th.className = asc ? 'asc' : 'desc';
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (r) { return [key(r.cells[col]), r]; });
    rows.sort(function (a, b) {
      if (a[0] === null) return b[0] === null ? 0 : 1;
      if (b[0] === null) return -1;
      if (typeof a[0] !== typeof b[0]) return typeof a[0] === 'number' ? -1 : 1;
      var d = a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
      return asc ? d : -d;
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r[1]); });
    body.appendChild(frag);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.title = 'click to sort';
      th.addEventListener('click', function () { sortBy(table, i, th); });
    });
  });
})();
(function () {  // learning curves: colour by a parameter, smooth
  function rgba(hex, alpha) {
    var h = hex.replace('#', '');
    return 'rgba(' + parseInt(h.slice(0, 2), 16) + ',' + parseInt(h.slice(2, 4), 16) + ',' +
      parseInt(h.slice(4, 6), 16) + ',' + alpha + ')';
  }
  function ema(y, w) {  // debiased exponential moving average; gaps stay gaps
    var out = [], num = 0, den = 0;
    for (var i = 0; i < y.length; i++) {
      var v = y[i];
      if (v === null || !isFinite(v)) { out.push(null); continue; }
      num = w * num + (1 - w) * v; den = w * den + (1 - w);
      out.push(num / den);
    }
    return out;
  }
  function showKey(box, key) {
    box.textContent = '';
    (key || []).forEach(function (entry) {
      var swatch = document.createElement('span');
      swatch.className = 'swatch'; swatch.style.background = entry[1];
      box.appendChild(swatch); box.appendChild(document.createTextNode(entry[0]));
    });
  }
  document.querySelectorAll('.curve-controls').forEach(function (controls) {
    var gd = document.getElementById(controls.getAttribute('data-plot'));
    if (!gd || !window.Plotly) return;
    var select = controls.querySelector('select.colour-by');
    var slider = controls.querySelector('input.smoothing');
    var shown = controls.querySelector('output');
    var box = controls.querySelector('.colour-key');
    var raw = null;
    function meta() { return (gd.layout && gd.layout.meta) || {colours: {}, keys: {}}; }
    function recolour() {
      var colours = meta().colours[select.value] || {}, lines = [], lineIdx = [], fills = [], fillIdx = [];
      gd.data.forEach(function (tr, i) {
        var m = tr.meta, c = m && colours[m.t];
        if (!c) return;
        if (m.k === 'line') { lines.push(c); lineIdx.push(i); }
        else if (m.k === 'band') { fills.push(rgba(c, 0.18)); fillIdx.push(i); }
      });
      if (lineIdx.length) Plotly.restyle(gd, {'line.color': lines}, lineIdx);
      if (fillIdx.length) Plotly.restyle(gd, {fillcolor: fills}, fillIdx);
      showKey(box, meta().keys[select.value]);
    }
    function smooth() {
      var w = parseFloat(slider.value);
      shown.textContent = w.toFixed(2);
      if (raw === null) raw = gd.data.map(function (tr) { return tr.meta && tr.meta.s ? tr.y.slice() : null; });
      var ys = [], idx = [];
      raw.forEach(function (y, i) { if (y) { ys.push(w > 0 ? ema(y, w) : y); idx.push(i); } });
      if (idx.length) Plotly.restyle(gd, {y: ys}, idx);
    }
    select.addEventListener('change', recolour);
    slider.addEventListener('input', smooth);
    showKey(box, meta().keys[select.value]);
  });
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{css}</style>
<script>{plotly}</script>
</head><body>
<nav>{nav}</nav>
{body}
<script>{js}</script>
</body></html>
"""
