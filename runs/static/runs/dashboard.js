/* The operators' dashboard (templates/dashboard/index.html): renders the snapshot embedded
 * in the page, then fetches data.json every few seconds and renders again, so figures move
 * without a reload. Charts are plain SVG; no library, nothing fetched from elsewhere.
 * Every text goes through textContent (never innerHTML), so names from the database
 * cannot inject markup. */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var root = document.getElementById("scheduler-dashboard");
  if (!root) { return; }
  var url = root.dataset.url;
  var refreshMs = Number(root.dataset.refreshMs) || 3000;

  function el(tag, text, attrs) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  function svgEl(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  function seconds(value) {
    if (value === null || value === undefined) { return "-"; }
    if (value < 10) { return value.toFixed(3) + " s"; }
    if (value < 120) { return value.toFixed(1) + " s"; }
    return Math.round(value / 60) + " min";
  }

  function replaceRows(tbody, rows, emptyText, columns) {
    tbody.replaceChildren();
    if (!rows.length) {
      var tr = el("tr");
      tr.appendChild(el("td", emptyText, { colspan: String(columns), class: "quiet" }));
      tbody.appendChild(tr);
      return;
    }
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (cell) {
        var td = el("td");
        if (cell instanceof Node) { td.appendChild(cell); } else { td.textContent = cell; }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
  }

  function niceMax(value) {
    if (!(value > 0)) { return 1; }
    var exp = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * exp >= value) { return steps[i] * exp; }
    }
    return 10 * exp;
  }

  /* A line chart of several series over the same minutes; null values leave a gap. */
  function lineChart(svg, legend, minutes, series, unit) {
    var W = 640, H = 200, left = 52, right = 10, top = 10, bottom = 24;
    var plotW = W - left - right, plotH = H - top - bottom;
    var max = 0;
    series.forEach(function (s) {
      s.values.forEach(function (v) { if (v !== null && v > max) { max = v; } });
    });
    max = niceMax(max);
    var n = Math.max(minutes.length - 1, 1);
    function x(i) { return left + (plotW * i) / n; }
    function y(v) { return top + plotH - (plotH * v) / max; }

    svg.replaceChildren();
    [0, 0.5, 1].forEach(function (f) {
      var v = max * f, yy = y(v);
      svg.appendChild(svgEl("line", { x1: left, x2: W - right, y1: yy, y2: yy, class: "grid" }));
      var label = svgEl("text", { x: left - 6, y: yy + 4, class: "axis", "text-anchor": "end" });
      label.textContent = (max < 1 ? v.toFixed(3) : +v.toFixed(2)) + (unit || "");
      svg.appendChild(label);
    });
    [[0, "-60 min"], [Math.floor(n / 2), "-30 min"], [n, "now"]].forEach(function (p) {
      var t = svgEl("text", { x: x(p[0]), y: H - 6, class: "axis",
        "text-anchor": p[0] === 0 ? "start" : (p[0] === n ? "end" : "middle") });
      t.textContent = p[1];
      svg.appendChild(t);
    });
    series.forEach(function (s) {
      var d = "", pen = false;
      s.values.forEach(function (v, i) {
        if (v === null) { pen = false; return; }
        d += (pen ? " L" : " M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      if (d) {
        svg.appendChild(svgEl("path", { d: d, class: "line " + s.cls, fill: "none" }));
      }
      // A dot on the latest value, so a single point is visible too.
      for (var i = s.values.length - 1; i >= 0; i--) {
        if (s.values[i] !== null) {
          var dot = svgEl("circle", { cx: x(i), cy: y(s.values[i]), r: 2.5, class: "dot " + s.cls });
          var title = svgEl("title");
          title.textContent = s.label + ": " + s.values[i];
          dot.appendChild(title);
          svg.appendChild(dot);
          break;
        }
      }
    });
    legend.replaceChildren();
    series.forEach(function (s) {
      var item = el("span", null, { class: "legend-item" });
      item.appendChild(el("span", null, { class: "swatch " + s.cls }));
      var last = null;
      for (var i = s.values.length - 1; i >= 0; i--) {
        if (s.values[i] !== null) { last = s.values[i]; break; }
      }
      item.appendChild(document.createTextNode(
        s.label + (last === null ? "" : " (latest " + last + (unit || "") + ")")));
      legend.appendChild(item);
    });
  }

  function link(href, text) {
    var a = el("a", text, { href: href });
    return a;
  }

  function render(s) {
    document.getElementById("dash-updated").textContent =
      new Date(s.now).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    Object.keys(s.totals).forEach(function (key) {
      root.querySelectorAll('[data-total="' + key + '"]').forEach(function (node) {
        node.textContent = String(s.totals[key]);
      });
    });

    var c = s.series;
    lineChart(document.getElementById("chart-throughput"),
      document.getElementById("legend-throughput"), c.minutes, [
        { label: "started/s", values: c.started_per_s, cls: "s-started" },
        { label: "succeeded/s", values: c.succeeded_per_s, cls: "s-succeeded" },
        { label: "dead/s", values: c.dead_per_s, cls: "s-dead" }
      ], "");
    lineChart(document.getElementById("chart-lag"), document.getElementById("legend-lag"),
      c.minutes, [
        { label: "p50", values: c.lag_p50_s, cls: "s-p50" },
        { label: "p99", values: c.lag_p99_s, cls: "s-p99" }
      ], " s");

    replaceRows(document.getElementById("dash-queues"), s.queues.map(function (q) {
      return [q.queue, String(q.ready), String(q.delayed), String(q.leased),
        seconds(q.oldest_ready_age_s), String(q.live_workers)];
    }), "No queue has runs in the broker.", 6);

    replaceRows(document.getElementById("dash-workers"), s.workers.map(function (w) {
      var runs = el("span");
      if (!w.runs.length) { runs.appendChild(el("span", "idle", { class: "quiet" })); }
      w.runs.forEach(function (r, i) {
        if (i) { runs.appendChild(document.createTextNode(", ")); }
        runs.appendChild(link(r.url, "run " + r.id));
        runs.appendChild(document.createTextNode(" " + r.job + " (attempt " + r.attempt + ")"));
      });
      return [w.worker_id, w.hostname + " / " + w.pid, w.queues.join(", "),
        w.runs.length + " of " + w.concurrency, seconds(w.heartbeat_age_s) + " ago", runs];
    }), "No live worker: runs will wait in the queue.", 6);

    replaceRows(document.getElementById("dash-partitions"), s.partitions.map(function (p) {
      return [p.owner || "nobody (lease expired or never taken)", p.partitions.join(" "),
        String(p.partitions.length),
        p.lease_expires_in_s === null ? "-" : seconds(p.lease_expires_in_s)];
    }), "No partition yet: start runscheduler.", 4);

    replaceRows(document.getElementById("dash-ownership"), s.ownership.map(function (t) {
      var how = t.ended_how;
      if (how === "expired") {
        how = t.taken_by ? "lease expired, taken over by " + t.taken_by : "lease expired";
      }
      return [t.kind, String(t.number), t.owner, t.started_at, t.ended_at || "still held",
        how || "-"];
    }), "No ownership change recorded yet.", 6);
  }

  function setError(failed) {
    document.getElementById("dash-error").hidden = !failed;
    document.getElementById("dash-live").classList.toggle("dash-stale", failed);
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (s) { render(s); setError(false); })
      .catch(function () { setError(true); })
      .finally(function () { window.setTimeout(poll, refreshMs); });
  }

  render(JSON.parse(document.getElementById("dashboard-snapshot").textContent));
  window.setTimeout(poll, refreshMs);
})();
