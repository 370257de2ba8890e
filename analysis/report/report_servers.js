// The server x time heat maps (figure.servers): a row per server, a column per step, each
// cell the server's median over the op's expected value on a log colour scale; few-probe
// cells hatched, the rows the rule names slow over the range marked. A script of its own,
// inlined after the main one only into pages that have these figures.
(function () {
  "use strict";
  var R = window.slowdownReport;  // the main script's helpers (report.js)
  var fmtTime = R.fmtTime, fmtSpan = R.fmtSpan, fmtRatio = R.fmtRatio, setup = R.setup;
  var M = {left: 8, right: 16, top: 8, bottom: 26, legend: 70};
  var MAX_LABEL = 240;
  // Slowdown -> colour: blue below 1, near white at 1, red above (log scale, 0.25x .. 32x).
  var STOPS = [[0.25, [33, 102, 172]], [0.5, [146, 197, 222]], [1, [247, 247, 247]],
               [1.5, [253, 219, 199]], [2, [244, 165, 130]], [4, [214, 96, 77]],
               [10, [178, 24, 43]], [32, [103, 0, 31]]];
  var FEW = "#c9ced4", FEW_RGB = [201, 206, 212], SLOW = "#b2182b";
  // Tick steps from 10 minutes on (the main script's from 1 minute).
  var TIME_STEPS = [600, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
                    1209600, 2592000];

  function fmtLatency(s) { return R.fmtLatency(s, true); }

  function colour(v) {
    var lv = Math.log(v), i;
    if (!(lv > Math.log(STOPS[0][0]))) return STOPS[0][1];
    for (i = 1; i < STOPS.length; i++) {
      var a = STOPS[i - 1], b = STOPS[i];
      if (v <= b[0]) {
        var f = (lv - Math.log(a[0])) / (Math.log(b[0]) - Math.log(a[0]));
        return [0, 1, 2].map(function (k) { return Math.round(a[1][k] + (b[1][k] - a[1][k]) * f); });
      }
    }
    return STOPS[STOPS.length - 1][1];
  }
  function rgb(c) { return "rgb(" + c[0] + ", " + c[1] + ", " + c[2] + ")"; }

  // The representative value of bucket `index` at `scale` (null: the zero bucket), as the
  // histograms' mapping gives it: 2 l u / (l + u) of its edges, base = 2^(2^-scale).
  function bucketValue(index, scale) {
    if (index === null) return 0;
    var base = Math.pow(2, Math.pow(2, -scale)), lower = Math.pow(base, index);
    var upper = lower * base;
    return 2 * lower * upper / (lower + upper);
  }
  // Each cell with probes: the map's dense rows (probes, the median's bucket less `lowest`;
  // -1: the zero bucket, -2: at the cell's own scale, in `other`), sparse errors.
  function cellsOf(d) {
    var other = {}, errors = {}, out = [];
    d.other.forEach(function (o) { other[o[0] + ":" + o[1]] = o; });
    d.errors.forEach(function (e) { errors[e[0] + ":" + e[1]] = e[2]; });
    d.probes.forEach(function (counts, r) {
      counts.forEach(function (n, c) {
        if (!n) return;
        var b = d.median[r][c], key = r + ":" + c, median;
        if (b === -1) median = 0;
        else if (b === -2) median = bucketValue(other[key][3], other[key][2]);
        else median = bucketValue(b + d.lowest, d.scale);
        out.push({row: r, col: c, probes: n, errors: errors[key] || 0, median: median,
                  slowdown: d.expected ? median / d.expected : null, few: n < d.few});
      });
    });
    return out;
  }

  function hatch(ctx) {
    var tile = document.createElement("canvas");
    tile.width = 6;
    tile.height = 6;
    var t = tile.getContext("2d");
    t.fillStyle = "#eef0f2";
    t.fillRect(0, 0, 6, 6);
    t.strokeStyle = FEW;
    t.lineWidth = 1.5;
    t.beginPath(); t.moveTo(0, 6); t.lineTo(6, 0); t.stroke();
    return ctx.createPattern(tile, "repeat");
  }

  function drawLegend(ctx, x, y, h) {
    var lo = Math.log(STOPS[0][0]), hi = Math.log(STOPS[STOPS.length - 1][0]);
    for (var py = 0; py < h; py++) {
      ctx.fillStyle = rgb(colour(Math.exp(hi - (hi - lo) * py / h)));
      ctx.fillRect(x, y + py, 12, 1);
    }
    ctx.fillStyle = "#5b6570";
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    [0.25, 0.5, 1, 2, 4, 10, 32].forEach(function (v) {
      ctx.fillText(v + "x", x + 16, y + (hi - Math.log(v)) / (hi - lo) * h);
    });
  }

  function drawServers(fig, d) {
    var rows = d.servers.length, ROW = rows <= 8 ? 22 : 14;
    var height = M.top + Math.max(rows * ROW, 110) + M.bottom;
    var c = setup(fig, height), ctx = c.ctx, i;
    var label = 0;
    ctx.font = "bold 11px sans-serif";
    d.servers.forEach(function (name, k) {
      var w = ctx.measureText(name + (d.words[k] === "slow" ? "  slow" : "")).width;
      if (w > label) label = w;
    });
    ctx.font = "11px sans-serif";
    label = Math.min(MAX_LABEL, Math.ceil(label) + 10);
    var box = {x: M.left + label, y: M.top, w: c.width - M.left - label - M.right - M.legend,
               h: rows * ROW};
    var cw = box.w / d.columns, counted = {cells: 0, few: 0}, byKey = {}, few = [];
    // One pixel per cell on a canvas of its own, drawn scaled (thousands of columns).
    var off = document.createElement("canvas");
    off.width = d.columns;
    off.height = rows;
    var octx = off.getContext("2d"), img = octx.createImageData(d.columns, rows);
    for (i = 0; i < img.data.length; i += 4) {
      img.data[i] = 247; img.data[i + 1] = 248; img.data[i + 2] = 249; img.data[i + 3] = 255;
    }
    cellsOf(d).forEach(function (f) {
      var p = (f.row * d.columns + f.col) * 4;
      var shade = f.few || f.slowdown === null ? FEW_RGB : colour(f.slowdown);
      img.data[p] = shade[0]; img.data[p + 1] = shade[1]; img.data[p + 2] = shade[2];
      byKey[f.row + ":" + f.col] = f;
      if (f.few) { counted.few++; few.push(f); }
      counted.cells++;
    });
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, box.x, box.y, box.w, box.h);
    if (cw >= 4) {  // hatched where a cell is wide enough to show it
      ctx.fillStyle = hatch(ctx);
      few.forEach(function (f) {
        ctx.fillRect(box.x + f.col * cw, box.y + f.row * ROW, cw, ROW);
      });
    }
    if (rows <= 60) {  // a hairline between rows
      ctx.fillStyle = "#ffffff";
      for (i = 1; i < rows; i++) ctx.fillRect(box.x, box.y + i * ROW - 0.5, box.w, 1);
    }
    // Labels; the rows the rule names slow over the range in red, framed.
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    d.servers.forEach(function (name, k) {
      var slow = d.words[k] === "slow", py = box.y + k * ROW + ROW / 2;
      ctx.font = slow ? "bold 11px sans-serif" : "11px sans-serif";
      ctx.fillStyle = slow ? SLOW : (name === "unknown" ? "#8a939c" : "#1d232a");
      ctx.fillText(name + (slow ? "  slow" : ""), box.x - 6, py, label - 8);
      if (slow) {
        ctx.strokeStyle = SLOW;
        ctx.lineWidth = 1.5;
        ctx.strokeRect(box.x + 0.75, box.y + k * ROW + 0.75, box.w - 1.5, ROW - 2.5);
      }
    });
    ctx.font = "11px sans-serif";
    ctx.strokeStyle = "#9aa3ad";
    ctx.lineWidth = 1;
    ctx.strokeRect(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1);
    var t1 = d.t0 + d.columns * d.step, tt = R.timeTicks(d.t0, t1, box.w, TIME_STEPS);
    ctx.fillStyle = "#5b6570";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (i = 0; i < tt.ticks.length; i++) {
      var tx = box.x + (tt.ticks[i] - d.t0) / (t1 - d.t0) * box.w;
      ctx.fillRect(Math.round(tx), box.y + box.h, 1, 4);
      ctx.fillText(R.timeLabel(tt.ticks[i], tt.step), tx, box.y + box.h + 5);
    }
    drawLegend(ctx, box.x + box.w + 24, box.y + 4, Math.max(100, Math.min(box.h, 200)) - 8);
    R.hover(fig, c.canvas, null, function (px, py) {
      var col = Math.floor((px - box.x) / cw), row = Math.floor((py - box.y) / ROW);
      if (col < 0 || col >= d.columns || row < 0 || row >= rows) return "";
      var f = byKey[row + ":" + col], when = fmtTime(d.t0 + col * d.step) + " UTC (" +
        fmtSpan(d.step) + ")";
      return d.servers[row] + " (" + d.words[row] + " over the range), " + when + ": " +
        (f ? "slowdown " + fmtRatio(f.slowdown) + ", " + f.probes + " probes" +
         (f.few ? " (few)" : "") + ", median " + fmtLatency(f.median) +
         (f.errors ? ", errors " + f.errors : "") : "no probes");
    });
    fig.dataset.cells = counted.cells;
    fig.dataset.few = counted.few;
    fig.dataset.slow = d.slow.length;
  }

  R.drawFigures("figure.servers", {servers: drawServers}, "serverFigures",
                "serversRendered");
})();
