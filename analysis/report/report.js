// The report page's script (analysis/report/page.py), inlined first into every report: draws
// every figure.chart, and lends its helpers to the page's other scripts (slowdownReport).
(function () {
  "use strict";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  var PCT_COLORS = {median: "#1f77b4", q90: "#2ca02c", q95: "#ff7f0e", q99: "#d62728",
                    max: "#7f7f7f"};
  var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
                 [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44],
                 [253, 231, 37]];
  var MARGIN = {left: 62, right: 16, top: 10, bottom: 26};

  function viridis(x) {
    var p = Math.max(0, Math.min(1, x)) * (VIRIDIS.length - 1);
    var i = Math.min(Math.floor(p), VIRIDIS.length - 2), f = p - i;
    var a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [Math.round(a[0] + (b[0] - a[0]) * f), Math.round(a[1] + (b[1] - a[1]) * f),
            Math.round(a[2] + (b[2] - a[2]) * f)];
  }

  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function fmtTime(t) {
    var d = new Date(t * 1000);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) +
      " " + pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
  }
  function fmtSpan(s) {
    if (s % 86400 === 0) return s / 86400 + "d";
    if (s % 3600 === 0) return s / 3600 + "h";
    return s / 60 + "m";
  }
  function fmtNum(v) {
    if (v === null || v === undefined) return "-";
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a >= 100) return v.toFixed(0);
    return String(Number(v.toPrecision(3)));
  }
  // Seconds as us, ms or s to three significant digits, from 100 s on in whole seconds
  // unless `significant` (1234.5 s: "1235s", or "1230s").
  function fmtLatency(s, significant) {
    if (s === null || s === undefined) return "-";
    if (s < 1e-3) return (s * 1e6).toFixed(0) + "us";
    if (s < 1) return Number((s * 1e3).toPrecision(3)) + "ms";
    if (s < 100 || significant) return Number(s.toPrecision(3)) + "s";
    return Math.round(s) + "s";
  }
  function fmtRatio(v) {
    if (v === null || v === undefined) return "-";
    return v < 100 ? v.toFixed(1) : v.toFixed(0);
  }

  function linear(lo, hi, a, b) {
    if (!(hi > lo)) { hi = lo + 1; }
    return {lo: lo, hi: hi, log: false,
            map: function (v) { return a + (v - lo) / (hi - lo) * (b - a); },
            inv: function (p) { return lo + (p - a) / (b - a) * (hi - lo); }};
  }
  function logscale(lo, hi, a, b) {
    if (!(lo > 0)) lo = 1e-9;
    if (!(hi > lo)) hi = lo * 10;
    var l0 = Math.log(lo), l1 = Math.log(hi);
    return {lo: lo, hi: hi, log: true,
            map: function (v) { return a + (Math.log(v) - l0) / (l1 - l0) * (b - a); },
            inv: function (p) { return Math.exp(l0 + (p - a) / (b - a) * (l1 - l0)); }};
  }
  function logTicks(lo, hi) {
    var out = [], k, m, mults = [1];
    var decades = Math.log10(hi / lo);
    if (decades < 1.5) mults = [1, 2, 5];
    if (decades < 0.6) mults = [1, 1.5, 2, 3, 5, 7];
    for (k = Math.floor(Math.log10(lo)) - 1; k <= Math.ceil(Math.log10(hi)); k++) {
      for (m = 0; m < mults.length; m++) {
        var v = mults[m] * Math.pow(10, k);
        if (v >= lo && v <= hi) out.push(v);
      }
    }
    return out;
  }
  function linTicks(lo, hi, n) {
    var span = hi - lo, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (x) { return x * mag; })
      .filter(function (s) { return span / s <= n; })[0] || raw;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push(v);
    return out;
  }
  var TIME_STEPS = [60, 300, 600, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
                    604800, 1209600, 2592000];
  // Ticks over [t0, t1] about 90 px apart on `width` px, at the first of `steps` (seconds;
  // TIME_STEPS if not given) that is coarse enough.
  function timeTicks(t0, t1, width, steps) {
    steps = steps || TIME_STEPS;
    var most = Math.max(2, Math.floor(width / 90)), step = steps[steps.length - 1];
    for (var i = 0; i < steps.length; i++) {
      if ((t1 - t0) / steps[i] <= most) { step = steps[i]; break; }
    }
    var out = [];
    for (var t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
    return {ticks: out, step: step};
  }
  function timeLabel(t, step) {
    var s = fmtTime(t);
    if (step >= 86400) return s.slice(5, 10);
    if (t % 86400 === 0 || step >= 21600) return s.slice(5, 16);
    return s.slice(11, 16);
  }

  function setup(fig, height) {
    var canvas = fig.querySelector("canvas");
    var width = Math.max(320, Math.floor(fig.clientWidth - 18));
    var ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px sans-serif";
    return {canvas: canvas, ctx: ctx, width: width, height: height};
  }

  // A panel: a box on the canvas with an x (time or linear) and a y scale, grid and labels.
  function panel(ctx, box, x, y, opts) {
    var i, ticks;
    ctx.save();
    ctx.strokeStyle = "#e3e7eb";
    ctx.fillStyle = "#5b6570";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    ticks = y.log ? logTicks(y.lo, y.hi) : linTicks(y.lo, y.hi, Math.max(2, box.h / 30));
    for (i = 0; i < ticks.length; i++) {
      var py = Math.round(y.map(ticks[i])) + 0.5;
      ctx.beginPath(); ctx.moveTo(box.x, py); ctx.lineTo(box.x + box.w, py); ctx.stroke();
      ctx.fillText(opts.yfmt(ticks[i]), box.x - 4, py);
    }
    if (opts.xtime) {
      var tt = timeTicks(x.lo, x.hi, box.w);
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      for (i = 0; i < tt.ticks.length; i++) {
        var px = Math.round(x.map(tt.ticks[i])) + 0.5;
        ctx.beginPath(); ctx.moveTo(px, box.y); ctx.lineTo(px, box.y + box.h); ctx.stroke();
        if (opts.xlabels !== false) ctx.fillText(timeLabel(tt.ticks[i], tt.step), px,
                                                  box.y + box.h + 4);
      }
    } else if (opts.xticks) {
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      for (i = 0; i < opts.xticks.length; i++) {
        var qx = Math.round(x.map(opts.xticks[i])) + 0.5;
        ctx.beginPath(); ctx.moveTo(qx, box.y); ctx.lineTo(qx, box.y + box.h); ctx.stroke();
        ctx.fillText(opts.xfmt(opts.xticks[i]), qx, box.y + box.h + 4);
      }
    }
    ctx.strokeStyle = "#9aa3ad";
    ctx.strokeRect(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1);
    if (opts.label) {
      ctx.save();
      ctx.translate(12, box.y + box.h / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(opts.label, 0, 0);
      ctx.restore();
    }
    ctx.restore();
  }

  // Draws values[i] at the middle of [t0 + i * step, t0 + (i + 1) * step), or across it
  // with `steps`; nulls break the line. Returns the number of points drawn.
  function series(ctx, box, x, y, t0, step, values, color, width, steps) {
    var drawn = 0, open = false, lastX = 0, lastY = 0, alone = false;
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.x, box.y, box.w, box.h);
    ctx.clip();
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = width || 1.3;
    ctx.lineJoin = "round";
    ctx.beginPath();
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v === null || (y.log && !(v > 0))) {
        if (alone) ctx.fillRect(lastX - 1.5, lastY - 1.5, 3, 3);
        open = false; alone = false;
        continue;
      }
      var px = x.map(t0 + (i + 0.5) * step), py = y.map(v);
      if (steps) {
        var ax = x.map(t0 + i * step), bx = x.map(t0 + (i + 1) * step);
        if (open) ctx.lineTo(ax, py); else ctx.moveTo(ax, py);
        ctx.lineTo(bx, py);
        open = true;
        px = bx;
      } else if (open) { ctx.lineTo(px, py); alone = false; }
      else { ctx.moveTo(px, py); open = true; alone = true; }
      lastX = px; lastY = py;
      drawn++;
    }
    if (alone) ctx.fillRect(lastX - 1.5, lastY - 1.5, 3, 3);
    ctx.stroke();
    ctx.restore();
    return drawn;
  }

  function extent(arrays, positive) {
    var lo = Infinity, hi = -Infinity;
    for (var a = 0; a < arrays.length; a++) {
      var values = arrays[a];
      for (var i = 0; i < values.length; i++) {
        var v = values[i];
        if (v === null || (positive && !(v > 0))) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    return lo <= hi ? [lo, hi] : null;
  }

  function legend(fig, items) {
    var div = fig.querySelector(".legend");
    div.textContent = "";
    items.forEach(function (item) {
      var span = document.createElement("span"), mark = document.createElement("i");
      mark.style.background = item[1];
      span.appendChild(mark);
      span.appendChild(document.createTextNode(item[0]));
      div.appendChild(span);
    });
  }

  // The figure's readout says text(px, py) while the pointer is over the canvas (and, given
  // a `box`, within its x range), nothing otherwise.
  function hover(fig, canvas, box, text) {
    var out = fig.querySelector(".readout");
    canvas.onmousemove = function (ev) {
      var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      if (box && (px < box.x || px > box.x + box.w)) { out.textContent = ""; return; }
      out.textContent = text(px, py) || "";
    };
    canvas.onmouseleave = function () { out.textContent = ""; };
  }
  function at(values, t0, step, t) {
    var i = Math.floor((t - t0) / step);
    return i >= 0 && i < values.length ? values[i] : null;
  }

  // -- timeline: slowdown per window and statistic, events, node context -----------------
  function drawTimeline(fig, d) {
    var nodeFields = d.node.fields, strips = ["errors", "skipped", "stuck"];
    var top = 230, stripH = 16, nodeH = 44;
    var height = MARGIN.top + top + 8 + strips.length * stripH + 6 +
      nodeFields.length * (nodeH + 6) + MARGIN.bottom;
    var c = setup(fig, height), ctx = c.ctx;
    var box = {x: MARGIN.left + 40, y: MARGIN.top, w: c.width - MARGIN.left - 40 - MARGIN.right,
               h: top};
    var x = linear(d.start, d.end, box.x, box.x + box.w);
    var range = extent(d.series.map(function (s) { return s.values; }), true) || [1, 1];
    var y = logscale(Math.min(0.5, range[0] * 0.8), Math.max(2, range[1] * 1.25),
                     box.y + box.h, box.y);
    var i, points = 0;
    // Stuck columns shaded behind everything.
    ctx.fillStyle = "rgba(214, 39, 40, 0.10)";
    for (i = 0; i < d.events.stuck.length; i++) {
      if (d.events.stuck[i] > 0) {
        var sx = x.map(Math.max(d.start, d.t0 + i * d.step)),
            ex = x.map(Math.min(d.end, d.t0 + (i + 1) * d.step));
        ctx.fillRect(sx, box.y, Math.max(1, ex - sx), box.h);
      }
    }
    panel(ctx, box, x, y, {xtime: true, xlabels: false, yfmt: fmtNum, label: "slowdown"});
    ctx.save();
    ctx.strokeStyle = "#1d232a";
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(box.x, y.map(1)); ctx.lineTo(box.x + box.w, y.map(1));
    ctx.stroke();
    ctx.restore();
    var items = [];
    d.series.forEach(function (s, k) {
      var color = COLORS[k % COLORS.length];
      points += series(ctx, box, x, y, s.t0, s.step, s.values, color, 1.3, s.step > d.step);
      items.push([fmtSpan(s.window) + " " + s.statistic + (s.reduced ? " (worst per " +
                  fmtSpan(d.step) + ")" : ""), color]);
    });
    ctx.save();
    ctx.strokeStyle = "#6a3d9a";
    ctx.fillStyle = "#6a3d9a";
    ctx.setLineDash([2, 2]);
    d.baselines.forEach(function (b) {
      var bx = Math.round(x.map(b.time)) + 0.5;
      ctx.beginPath(); ctx.moveTo(bx, box.y); ctx.lineTo(bx, box.y + box.h); ctx.stroke();
      ctx.fillText("baseline: " + (b.reason || ""), bx + 3, box.y + 10);
    });
    ctx.restore();
    if (d.baselines.length) items.push(["baseline change", "#6a3d9a"]);
    items.push(["stuck", "rgba(214, 39, 40, 0.35)"]);
    legend(fig, items);
    // Event strips: errors and skipped ticks (count) and the longest stuck age per column.
    var yy = box.y + box.h + 8;
    var stripColors = {errors: "#ff7f0e", skipped: "#9467bd", stuck: "#d62728"};
    strips.forEach(function (name) {
      var values = d.events[name], most = 0;
      for (i = 0; i < values.length; i++) if (values[i] > most) most = values[i];
      ctx.fillStyle = "#f4f6f8";
      ctx.fillRect(box.x, yy, box.w, stripH - 2);
      ctx.fillStyle = stripColors[name];
      for (i = 0; i < values.length; i++) {
        if (values[i] > 0) {
          var a = x.map(Math.max(d.start, d.t0 + i * d.step)),
              b = x.map(Math.min(d.end, d.t0 + (i + 1) * d.step)),
              h = Math.max(3, (stripH - 2) * values[i] / most);
          ctx.fillRect(a, yy + stripH - 2 - h, Math.max(1.5, b - a), h);
        }
      }
      ctx.fillStyle = "#5b6570";
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      ctx.fillText(name + (most ? " (max " + (name === "stuck" ? fmtLatency(most) : most) +
                   ")" : ""), box.x - 4, yy + stripH / 2);
      yy += stripH;
    });
    yy += 6;
    nodeFields.forEach(function (f, k) {
      var nb = {x: box.x, y: yy, w: box.w, h: nodeH};
      var r = extent([f.values], false) || [0, 1];
      var ny = linear(Math.min(0, r[0]), r[1] > 0 ? r[1] * 1.1 : 1, nb.y + nb.h, nb.y);
      panel(ctx, nb, x, ny, {xtime: true, xlabels: k === nodeFields.length - 1,
                             yfmt: fmtNum});
      series(ctx, nb, x, ny, d.t0, d.step, f.values, "#17becf", 1.2);
      ctx.fillStyle = "rgba(255, 255, 255, 0.8)";
      ctx.fillRect(nb.x + 2, nb.y + 2, ctx.measureText(f.label).width + 8, 14);
      ctx.fillStyle = "#1d232a";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText(f.label, nb.x + 6, nb.y + 3);
      yy += nodeH + 6;
    });
    if (!nodeFields.length) {
      ctx.fillStyle = "#5b6570";
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      var tt = timeTicks(x.lo, x.hi, box.w);
      tt.ticks.forEach(function (t) { ctx.fillText(timeLabel(t, tt.step), x.map(t), yy); });
    }
    hover(fig, c.canvas, box, function (px) {
      var t = x.inv(px), col = Math.floor((t - d.t0) / d.step);
      var lines = [fmtTime(d.t0 + col * d.step) + " UTC (" + fmtSpan(d.step) + ")"];
      d.series.forEach(function (s) {
        var j = Math.floor((t - s.t0) / s.step), v = j >= 0 ? s.values[j] : null,
            w = j >= 0 ? s.worst[j] : -1;
        lines.push(fmtSpan(s.window) + " " + s.statistic + ": " + fmtRatio(v) +
                   (w >= 0 ? " (" + d.ops[w] + ")" : ""));
      });
      lines.push("errors " + (at(d.events.errors, d.t0, d.step, t) || 0) + ", skipped " +
                 (at(d.events.skipped, d.t0, d.step, t) || 0) + ", stuck " +
                 fmtLatency(at(d.events.stuck, d.t0, d.step, t) || null));
      if (nodeFields.length) {
        lines.push(nodeFields.map(function (f) {
          return f.label + " " + fmtNum(at(f.values, d.t0, d.step, t));
        }).join(", "));
      }
      return lines.join("\n");
    });
    fig.dataset.points = points;
  }

  // -- percentiles over time ----------------------------------------------------------------
  function drawPercentiles(fig, d) {
    var c = setup(fig, 240), ctx = c.ctx;
    var box = {x: MARGIN.left, y: MARGIN.top, w: c.width - MARGIN.left - MARGIN.right,
               h: c.height - MARGIN.top - MARGIN.bottom};
    var names = Object.keys(d.stats);
    var t1 = d.t0 + d.columns * d.step;
    var x = linear(d.t0, t1, box.x, box.x + box.w);
    var r = extent(names.map(function (n) { return d.stats[n]; }), true) || [1e-3, 1];
    var y = logscale(r[0] / 1.3, r[1] * 1.3, box.y + box.h, box.y);
    panel(ctx, box, x, y, {xtime: true, yfmt: fmtLatency, label: "latency"});
    var points = 0;
    names.forEach(function (n) {
      points += series(ctx, box, x, y, d.t0, d.step, d.stats[n], PCT_COLORS[n] || "#000", 1.2);
    });
    legend(fig, names.map(function (n) { return [n, PCT_COLORS[n] || "#000"]; }));
    hover(fig, c.canvas, box, function (px) {
      var t = x.inv(px), i = Math.floor((t - d.t0) / d.step);
      if (i < 0 || i >= d.columns) return "";
      return fmtTime(d.t0 + i * d.step) + " UTC  n=" + d.count[i] + "  " + names.map(function (n) {
        return n + " " + fmtLatency(d.stats[n][i]);
      }).join("  ") + (d.errors[i] ? "  errors " + d.errors[i] : "") +
        (d.stuck[i] ? "  stuck " + fmtLatency(d.stuck[i]) : "");
    });
    fig.dataset.points = points;
  }

  // -- heat map: time x latency, colour = count ---------------------------------------------
  function drawHeatmap(fig, d) {
    var c = setup(fig, 240), ctx = c.ctx;
    var box = {x: MARGIN.left, y: MARGIN.top, w: c.width - MARGIN.left - MARGIN.right - 56,
               h: c.height - MARGIN.top - MARGIN.bottom};
    var base = Math.pow(2, Math.pow(2, -d.scale));
    var lo = Math.pow(base, d.lowest), hi = Math.pow(base, d.lowest + d.rows);
    var t1 = d.t0 + d.columns * d.step;
    var x = linear(d.t0, t1, box.x, box.x + box.w);
    var y = logscale(lo, hi, box.y + box.h, box.y);
    var i, j, most = 0, total = 0, cells = 0;
    d.cells.forEach(function (cell) {
      for (j = 2; j < cell.length; j++) if (cell[j] > most) most = cell[j];
    });
    var off = document.createElement("canvas");
    off.width = d.columns;
    off.height = d.rows;
    var octx = off.getContext("2d"), img = octx.createImageData(d.columns, d.rows);
    var scale = Math.log(most + 1);
    d.cells.forEach(function (cell) {
      var col = cell[0], first = cell[1];
      for (j = 2; j < cell.length; j++) {
        var n = cell[j];
        if (!n) continue;
        var rgb = viridis(scale > 0 ? Math.log(n + 1) / scale : 1);
        var row = d.rows - 1 - (first + j - 2), p = (row * d.columns + col) * 4;
        img.data[p] = rgb[0]; img.data[p + 1] = rgb[1]; img.data[p + 2] = rgb[2];
        img.data[p + 3] = 255;
        total += n;
        cells++;
      }
    });
    octx.putImageData(img, 0, 0);
    panel(ctx, box, x, y, {xtime: true, yfmt: fmtLatency, label: "latency"});
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, box.x, box.y, box.w, box.h);
    ctx.strokeStyle = "#9aa3ad";
    ctx.strokeRect(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1);
    // Colour bar: 1 .. most ops per cell, on the same log scale.
    var bar = {x: box.x + box.w + 14, y: box.y, w: 12, h: box.h};
    for (i = 0; i < bar.h; i++) {
      var rgb2 = viridis(1 - i / bar.h);
      ctx.fillStyle = "rgb(" + rgb2.join(",") + ")";
      ctx.fillRect(bar.x, bar.y + i, bar.w, 1.5);
    }
    ctx.fillStyle = "#5b6570";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(String(most), bar.x + bar.w + 3, bar.y);
    ctx.textBaseline = "bottom";
    ctx.fillText("1", bar.x + bar.w + 3, bar.y + bar.h);
    var lookup = {};
    d.cells.forEach(function (cell) { lookup[cell[0]] = cell; });
    hover(fig, c.canvas, box, function (px, py) {
      var t = x.inv(px), col = Math.floor((t - d.t0) / d.step);
      var row = Math.floor((Math.log(y.inv(py)) - Math.log(lo)) / Math.log(base));
      if (col < 0 || col >= d.columns || row < 0 || row >= d.rows) return "";
      var cell = lookup[col], n = 0;
      if (cell && row >= cell[1] && row - cell[1] + 2 < cell.length) n = cell[row - cell[1] + 2];
      var idx = d.lowest + row;
      return fmtTime(d.t0 + col * d.step) + " UTC  " + fmtLatency(Math.pow(base, idx)) +
        " .. " + fmtLatency(Math.pow(base, idx + 1)) + ": " + n + " ops";
    });
    fig.dataset.total = total;
    fig.dataset.cells = cells;
  }

  // -- "X or better": per-minute throughput reached or beaten in a fraction of minutes ------
  function drawXorBetter(fig, d) {
    var c = setup(fig, 240), ctx = c.ctx;
    var box = {x: MARGIN.left, y: MARGIN.top, w: c.width - MARGIN.left - MARGIN.right,
               h: c.height - MARGIN.top - MARGIN.bottom};
    var x = linear(0, 1, box.x, box.x + box.w);
    var best = d.points.length ? d.points[0][1] : 1;
    var y = linear(0, best > 0 ? best * 1.05 : 1, box.y + box.h, box.y);
    panel(ctx, box, x, y, {xticks: [0, 0.25, 0.5, 0.75, 0.9, 1],
                           xfmt: function (v) { return Math.round(v * 100) + "%"; },
                           yfmt: fmtNum, label: d.unit});
    ctx.save();
    ctx.strokeStyle = "#1f77b4";
    ctx.lineWidth = 1.6;
    ctx.beginPath();
    var prev = 0;
    d.points.forEach(function (p, k) {
      var px = x.map(p[0]), py = y.map(p[1]);
      if (k === 0) { ctx.moveTo(x.map(prev), py); }
      ctx.lineTo(px, py);
    });
    ctx.stroke();
    ctx.fillStyle = "#d62728";
    d.table.forEach(function (row) {
      ctx.fillRect(x.map(row.fraction) - 2.5, y.map(row.value) - 2.5, 5, 5);
    });
    ctx.restore();
    hover(fig, c.canvas, box, function (px) {
      var f = x.inv(px), found = null;
      for (var k = 0; k < d.points.length; k++) {
        if (d.points[k][0] >= f) { found = d.points[k]; break; }
      }
      if (!found) return "";
      return (found[0] * 100).toFixed(1) + "% of " + d.minutes + " minutes reached " +
        fmtNum(found[1]) + " " + d.unit + " or better (mean latency " +
        fmtLatency(found[1] > 0 ? 1 / found[1] : null) + " or better)";
    });
    fig.dataset.points = d.points.length;
  }

  var DRAW = {timeline: drawTimeline, percentiles: drawPercentiles, heatmap: drawHeatmap,
              x_or_better: drawXorBetter};

  // Draws every figure matching `selector` with draw[its data-kind], marks each drawn or not
  // (data-drawn), counts the drawn ones on <body data-COUNT> and the time since navigation
  // start on <body data-TIME> (tests read them), and draws them again once the window has
  // not been resized for 150 ms.
  function drawFigures(selector, draw, count, time) {
    function drawAll() {
      var figures = document.querySelectorAll(selector), failed = 0;
      for (var i = 0; i < figures.length; i++) {
        var fig = figures[i];
        try {
          var d = JSON.parse(fig.querySelector("script[type='application/json']").textContent);
          draw[fig.dataset.kind](fig, d);
          fig.dataset.drawn = "1";
        } catch (err) {
          failed++;
          fig.dataset.drawn = "0";
          console.error("slowdown report: figure " + fig.id + " not drawn: " + err);
        }
      }
      document.body.dataset[count] = figures.length - failed;
    }
    drawAll();
    document.body.dataset[time] = Math.round(performance.now());
    var pending = null;
    window.addEventListener("resize", function () {
      if (pending) clearTimeout(pending);
      pending = setTimeout(drawAll, 150);
    });
  }

  // The helpers of the page's other scripts (the long-period figures', the server maps'),
  // inlined after this one: one copy of each on the page.
  window.slowdownReport = {COLORS: COLORS, pad: pad, fmtTime: fmtTime, fmtSpan: fmtSpan,
                           fmtLatency: fmtLatency, fmtRatio: fmtRatio, logTicks: logTicks,
                           timeTicks: timeTicks, timeLabel: timeLabel, extent: extent,
                           setup: setup, legend: legend, hover: hover,
                           drawFigures: drawFigures};
  drawFigures("figure.chart", DRAW, "figures", "rendered");
})();
