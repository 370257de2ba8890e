// The long-period figures (figure.long): slowdown over the range, the week's rhythm, boxes
// per op and per host, timelines of the step's statistics with change points. A script of
// its own, inlined after the main one only into pages that have these figures.
(function () {
  "use strict";
  var R = window.slowdownReport;  // the main script's helpers (report.js)
  var COLORS = R.COLORS, pad = R.pad, fmtTime = R.fmtTime, logTicks = R.logTicks,
      setup = R.setup, legend = R.legend;
  var STAT_COLORS = {median: "#1f77b4", q95: "#ff7f0e", q99: "#d62728", max: "#7f7f7f"};
  var DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  var M = {left: 62, right: 16, top: 10, bottom: 26};
  var BAND = "rgba(44, 160, 44, 0.10)", RUN = "rgba(44, 160, 44, 0.28)";

  function fmtDay(t) {
    var d = new Date(t * 1000);
    return pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
  }
  function fmtLatency(s) { return R.fmtLatency(s, true); }
  function fmtRatio(v) {  // three significant digits, unlike the main script's
    return v === null || v === undefined ? "-" : String(Number(v.toPrecision(3)));
  }

  function scale(lo, hi, a, b, log) {
    if (log) { lo = Math.log(lo); hi = Math.log(hi); }
    if (!(hi > lo)) hi = lo + 1;
    return {log: log, lo: log ? Math.exp(lo) : lo, hi: log ? Math.exp(hi) : hi,
            map: function (v) { return a + ((log ? Math.log(v) : v) - lo) / (hi - lo) * (b - a); },
            inv: function (p) {
              var v = lo + (p - a) / (b - a) * (hi - lo);
              return log ? Math.exp(v) : v;
            }};
  }
  function extent(arrays) { return R.extent(arrays, true) || [1e-3, 1]; }

  // A box with a y scale (grid, labels) and x ticks given as [value, label] pairs.
  function frame(ctx, box, y, yfmt, xticks, x, label) {
    ctx.save();
    ctx.strokeStyle = "#e3e7eb";
    ctx.fillStyle = "#5b6570";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    logTicks(y.lo, y.hi).forEach(function (v) {
      var py = Math.round(y.map(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(box.x, py); ctx.lineTo(box.x + box.w, py); ctx.stroke();
      ctx.fillText(yfmt(v), box.x - 4, py);
    });
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    xticks.forEach(function (tick) {
      var px = Math.round(x.map(tick[0])) + 0.5;
      ctx.beginPath(); ctx.moveTo(px, box.y); ctx.lineTo(px, box.y + box.h); ctx.stroke();
      if (tick[1]) ctx.fillText(tick[1], px, box.y + box.h + 4);
    });
    ctx.strokeStyle = "#9aa3ad";
    ctx.strokeRect(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1);
    if (label) {
      ctx.translate(12, box.y + box.h / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(label, 0, -6);
    }
    ctx.restore();
  }
  function dayTicks(t0, t1, width) {
    var every = 1, out = [];
    while ((t1 - t0) / (86400 * every) > width / 70) every = every < 7 ? every + 1 : every + 7;
    var first = Math.ceil(t0 / 86400) * 86400;
    for (var t = first; t <= t1; t += 86400 * every) out.push([t, fmtDay(t)]);
    return out;
  }
  function line(ctx, box, x, y, xs, values, color, width) {
    var open = false, drawn = 0;
    ctx.save();
    ctx.beginPath(); ctx.rect(box.x, box.y, box.w, box.h); ctx.clip();
    ctx.strokeStyle = color;
    ctx.lineWidth = width || 1.2;
    ctx.beginPath();
    values.forEach(function (v, i) {
      if (v === null || !(v > 0)) { open = false; return; }
      var px = x.map(xs(i)), py = y.map(v);
      if (open) ctx.lineTo(px, py); else ctx.moveTo(px, py);
      open = true;
      drawn++;
    });
    ctx.stroke();
    ctx.restore();
    return drawn;
  }
  function hline(ctx, box, y, v) {
    var py = Math.round(y.map(v)) + 0.5;
    ctx.save();
    ctx.strokeStyle = "#1d232a";
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(box.x, py); ctx.lineTo(box.x + box.w, py); ctx.stroke();
    ctx.restore();
  }
  function band(ctx, box, y) {  // values below 1: unusual (caching)
    var top = Math.max(box.y, Math.min(box.y + box.h, y.map(1)));
    ctx.fillStyle = BAND;
    ctx.fillRect(box.x, top, box.w, box.y + box.h - top);
  }
  function hover(fig, canvas, text) { R.hover(fig, canvas, null, text); }
  function ratioScale(values, box) {
    var r = extent(values);
    return scale(Math.min(0.5, r[0] * 0.8), Math.max(2, r[1] * 1.25), box.y + box.h, box.y,
                 true);
  }

  // -- slowdown over the range ------------------------------------------------------------
  function drawSlowdown(fig, d) {
    var c = setup(fig, 260), ctx = c.ctx, points = 0;
    var box = {x: M.left, y: M.top, w: c.width - M.left - M.right, h: 260 - M.top - M.bottom};
    var x = scale(d.start, d.end, box.x, box.x + box.w, false);
    var y = ratioScale(d.ops.map(function (o) { return o.values; }), box);
    band(ctx, box, y);
    ctx.fillStyle = RUN;
    d.ops.forEach(function (o) {
      o.runs.forEach(function (r) {
        ctx.fillRect(x.map(r[0]), box.y, Math.max(1, x.map(r[1]) - x.map(r[0])), box.h);
      });
    });
    frame(ctx, box, y, fmtRatio, dayTicks(d.start, d.end, box.w), x, "slowdown");
    hline(ctx, box, y, 1);
    d.ops.forEach(function (o, k) {
      points += line(ctx, box, x, y, function (i) { return d.t0 + (i + 0.5) * d.step; },
                     o.values, COLORS[k % COLORS.length]);
    });
    legend(fig, d.ops.map(function (o, k) { return [o.op, COLORS[k % COLORS.length]]; })
      .concat([["below 1", RUN]]));
    hover(fig, c.canvas, function (px) {
      var i = Math.floor((x.inv(px) - d.t0) / d.step);
      if (i < 0 || i >= d.columns) return "";
      return fmtTime(d.t0 + i * d.step) + " UTC  " + d.ops.map(function (o) {
        return o.op + " " + fmtRatio(o.values[i]);
      }).join("  ");
    });
    fig.dataset.points = points;
    fig.dataset.runs = d.ops.reduce(function (n, o) { return n + o.runs.length; }, 0);
  }

  // -- the week's rhythm: by hour of the day, by day of the week ---------------------------
  function drawRhythm(fig, d) {
    var c = setup(fig, 240), ctx = c.ctx, points = 0, gap = 50;
    var w = (c.width - M.left - M.right - gap) / 2, h = 240 - M.top - M.bottom;
    var all = [];
    d.ops.forEach(function (o) { all.push(o.by_hour, o.by_weekday); });
    var left = {x: M.left, y: M.top, w: w * 1.3, h: h};
    var right = {x: M.left + w * 1.3 + gap, y: M.top, w: w * 0.7, h: h};
    var y = ratioScale(all, left);
    var xh = scale(-0.5, 23.5, left.x, left.x + left.w, false);
    var xd = scale(-0.5, 6.5, right.x, right.x + right.w, false);
    [[left, xh, [0, 3, 6, 9, 12, 15, 18, 21].map(function (v) { return [v, pad(v) + ":00"]; })],
     [right, xd, DAYS.map(function (n, i) { return [i, n]; })]].forEach(function (p) {
      band(ctx, p[0], y);
      frame(ctx, p[0], y, fmtRatio, p[2], p[1], p[0] === left ? "slowdown" : null);
      hline(ctx, p[0], y, 1);
    });
    d.ops.forEach(function (o, k) {
      var color = COLORS[k % COLORS.length];
      points += line(ctx, left, xh, y, function (i) { return i; }, o.by_hour, color, 1.6);
      points += line(ctx, right, xd, y, function (i) { return i; }, o.by_weekday, color, 1.6);
    });
    legend(fig, d.ops.map(function (o, k) { return [o.op, COLORS[k % COLORS.length]]; }));
    hover(fig, c.canvas, function (px) {
      var i, name, key;
      if (px >= left.x && px <= left.x + left.w) {
        i = Math.round(xh.inv(px)); name = pad(i) + ":00 UTC"; key = "by_hour";
      } else if (px >= right.x && px <= right.x + right.w) {
        i = Math.round(xd.inv(px)); name = DAYS[i]; key = "by_weekday";
      } else return "";
      return name + "  " + d.ops.map(function (o) { return o.op + " " + fmtRatio(o[key][i]); })
        .join("  ");
    });
    fig.dataset.points = points;
  }

  // -- boxes ---------------------------------------------------------------------------------
  function drawBox(ctx, x0, width, y, b, color) {
    var mid = x0 + width / 2;
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.moveTo(mid, y.map(b.low)); ctx.lineTo(mid, y.map(b.q1));
    ctx.moveTo(mid, y.map(b.q3)); ctx.lineTo(mid, y.map(b.high));
    ctx.stroke();
    ctx.globalAlpha = 0.25;
    ctx.fillRect(x0, y.map(b.q3), width, y.map(b.q1) - y.map(b.q3));
    ctx.globalAlpha = 1;
    ctx.strokeRect(x0, y.map(b.q3), width, y.map(b.q1) - y.map(b.q3));
    ctx.fillRect(x0, y.map(b.median) - 1, width, 2);
    if (b.max > b.high) ctx.fillRect(mid - 1.5, y.map(b.max) - 1.5, 3, 3);
    if (b.min < b.low) ctx.fillRect(mid - 1.5, y.map(b.min) - 1.5, 3, 3);
  }
  function boxText(b) {
    return b ? "median " + fmtLatency(b.median) + ", quartiles " + fmtLatency(b.q1) + " .. " +
      fmtLatency(b.q3) + ", " + fmtLatency(b.min) + " .. " + fmtLatency(b.max) + " (" + b.n +
      ")" : "-";
  }
  function boxValues(boxes) {
    var out = [];
    boxes.forEach(function (b) { if (b) out.push(b.min, b.max); });
    return out;
  }

  function drawOpBoxes(fig, d) {
    var c = setup(fig, 260), ctx = c.ctx, drawn = 0, all = [];
    var box = {x: M.left, y: M.top, w: c.width - M.left - M.right, h: 260 - M.top - M.bottom};
    d.ops.forEach(function (o) {
      all = all.concat(boxValues(d.stats.map(function (s) { return o.boxes[s]; })));
    });
    var r = extent([all]);
    var y = scale(r[0] / 1.3, r[1] * 1.3, box.y + box.h, box.y, true);
    var x = scale(0, d.ops.length, box.x, box.x + box.w, false);
    frame(ctx, box, y, fmtLatency, d.ops.map(function (o, i) { return [i + 0.5, o.op]; }), x,
          "latency");
    var slot = (x.map(1) - x.map(0)) / (d.stats.length + 1);
    d.ops.forEach(function (o, i) {
      d.stats.forEach(function (s, j) {
        if (!o.boxes[s]) return;
        drawBox(ctx, x.map(i) + slot * (j + 0.5), slot * 0.8, y, o.boxes[s], STAT_COLORS[s]);
        drawn++;
      });
    });
    legend(fig, d.stats.map(function (s) { return [s, STAT_COLORS[s]]; }));
    hover(fig, c.canvas, function (px) {
      var i = Math.floor(x.inv(px)), o = d.ops[i];
      if (!o) return "";
      return o.op + "\n" + d.stats.map(function (s) { return s + ": " + boxText(o.boxes[s]); })
        .join("\n");
    });
    fig.dataset.boxes = drawn;
  }

  function drawHostBoxes(fig, d) {
    var rowH = 110, height = M.top + d.ops.length * (rowH + 24) + 4;
    var c = setup(fig, height), ctx = c.ctx, drawn = 0, rows = [];
    d.ops.forEach(function (o, k) {
      var box = {x: M.left, y: M.top + k * (rowH + 24), w: c.width - M.left - M.right, h: rowH};
      var r = extent([boxValues(o.hosts.map(function (h) { return h.box; }))]);
      var y = scale(r[0] / 1.2, r[1] * 1.2, box.y + box.h, box.y, true);
      var n = Math.max(1, o.hosts.length), x = scale(0, n, box.x, box.x + box.w, false);
      var every = Math.max(1, Math.ceil(n / (box.w / 48)));
      frame(ctx, box, y, fmtLatency, o.hosts.map(function (h, i) {
        return [i + 0.5, i % every ? "" : h.host];
      }), x, o.op);
      var width = Math.max(1, (x.map(1) - x.map(0)) * 0.7);
      o.hosts.forEach(function (h, i) {
        if (!h.box) return;
        drawBox(ctx, x.map(i + 0.5) - width / 2, width, y, h.box, COLORS[k % COLORS.length]);
        drawn++;
      });
      rows.push({box: box, x: x, op: o});
    });
    hover(fig, c.canvas, function (px, py) {
      for (var k = 0; k < rows.length; k++) {
        var b = rows[k].box;
        if (py < b.y || py > b.y + b.h + 20) continue;
        var h = rows[k].op.hosts[Math.floor(rows[k].x.inv(px))];
        return h ? rows[k].op.op + " " + h.host + ": " + boxText(h.box) : "";
      }
      return "";
    });
    fig.dataset.boxes = drawn;
  }

  // -- timelines of the step's statistics, change points and episodes ----------------------
  function drawLongTimeline(fig, d) {
    var c = setup(fig, 240), ctx = c.ctx, points = 0;
    var box = {x: M.left, y: M.top, w: c.width - M.left - M.right, h: 240 - M.top - M.bottom};
    var names = Object.keys(d.stats);
    var x = scale(d.start, d.end, box.x, box.x + box.w, false);
    var r = extent(names.map(function (n) { return d.stats[n]; }));
    var y = scale(r[0] / 1.3, r[1] * 1.3, box.y + box.h, box.y, true);
    ctx.fillStyle = "rgba(148, 103, 189, 0.15)";
    d.episodes.forEach(function (e) {
      ctx.fillRect(x.map(e.at), box.y, Math.max(1, x.map(e.until) - x.map(e.at)), box.h);
    });
    frame(ctx, box, y, fmtLatency, dayTicks(d.start, d.end, box.w), x, "latency");
    names.forEach(function (n) {
      points += line(ctx, box, x, y, function (i) { return d.t0 + (i + 0.5) * d.step; },
                     d.stats[n], STAT_COLORS[n] || "#000");
    });
    ctx.save();
    ctx.strokeStyle = "#1d232a";
    ctx.fillStyle = "#1d232a";
    ctx.lineWidth = 1.5;
    ctx.setLineDash([5, 3]);
    ctx.textBaseline = "top";
    d.changes.forEach(function (ch) {
      var px = Math.round(x.map(ch.at)) + 0.5;
      ctx.beginPath(); ctx.moveTo(px, box.y); ctx.lineTo(px, box.y + box.h); ctx.stroke();
      ctx.textAlign = px > box.x + box.w - 60 ? "right" : "left";
      ctx.fillText(ch.factor.toFixed(2) + "x", px + (ctx.textAlign === "left" ? 3 : -3),
                   box.y + 3);
    });
    ctx.restore();
    legend(fig, names.map(function (n) { return [n, STAT_COLORS[n] || "#000"]; })
      .concat(d.changes.length ? [["change point", "#1d232a"]] : []));
    hover(fig, c.canvas, function (px) {
      var i = Math.floor((x.inv(px) - d.t0) / d.step);
      if (i < 0 || i >= d.columns) return "";
      return fmtTime(d.t0 + i * d.step) + " UTC  " + names.map(function (n) {
        return n + " " + fmtLatency(d.stats[n][i]);
      }).join("  ");
    });
    fig.dataset.points = points;
    fig.dataset.changes = d.changes.length;
  }

  var DRAW = {long_slowdown: drawSlowdown, rhythm: drawRhythm, long_boxes: drawOpBoxes,
              host_boxes: drawHostBoxes, long_timeline: drawLongTimeline};

  R.drawFigures("figure.long", DRAW, "longFigures", "longRendered");
})();
