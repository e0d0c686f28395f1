// SparkPanel benchmark charts, drawn with the vendored uPlot (static/vendor/uplot, 1.6.x).
// Plain ES2017, no build step. Load after uPlot.iife.min.js:
//
//   <link rel="stylesheet" href="{% static 'vendor/uplot/uPlot.min.css' %}">
//   <link rel="stylesheet" href="{% static 'css/bench.css' %}">
//   <script src="{% static 'vendor/uplot/uPlot.iife.min.js' %}" defer></script>
//   <script src="{% static 'js/bench-charts.js' %}" defer></script>
//
// Markup:
//
//   <div class="bench-chart" data-bench-chart="scenarios|curve|lines" data-bench-data="ID"
//        [data-metric="ttft_s"] [data-height="240"] [data-log-x="false"]></div>
//   <script type="application/json" id="ID">{...}</script>   (Django: {{ value|json_script:"ID" }})
//
// Data shapes (numbers may be null where a value is missing):
//
//   scenarios  {"scenarios": ["58/2", ...], "unit": "s", "y_label"?: "TTFT",
//               "x_label"?: "day" (default "scenario (input/output tokens)"),
//               "x_legend"?: the legend's x entry (default x_label, else "scenario"),
//               "series": [{"label": "measured", "values": [..]},
//                          {"label": "seed (Nemotron, SPEC)", "values": [.. or null]}]}
//              a y label that already names its unit as a word is not followed by it again
//              ("tokens" in tokens reads "tokens", not "tokens (tokens)")
//              a series may carry "notes": [.. or null], shown in the legend where its value
//              is null (e.g. "too short to time": no bar, and the hover says why)
//              or several metrics in one blob, chosen by data-metric:
//              {"scenarios": [...], "metrics": {"ttft_s": {"unit": "s", "y_label"?: ..., "series": [...]},
//                                                "decode_tps": {...}}}
//   curve      {"x_label": "per-user tok/s", "y_label": "aggregate output tok/s",
//               "series": [{"label": "job 12", "points": [{"concurrency": 1, "x": 23.1, "y": 23.1}, ...]}]}
//   lines      {"x": [1, 2, 4, 8], "x_label": "concurrent requests", "unit": "s", "y_label"?: "TTFT",
//               "series": [{"label": "TTFT p50", "values": [...]}, {"label": "TTFT p99", "values": [...]}]}
//
// Charts (re)render on page load, on htmx swaps (htmx:afterSwap / htmx:oobAfterSwap /
// htmx:historyRestore), on "sparkpanel:swapped" (detail.elt, detail.target or the event target
// is the swapped element) and on events.js's "spark:fragment". Charts whose element left the
// page are destroyed; charts whose JSON <script> was replaced or changed are redrawn.
// window.SparkCharts.render(root) force-redraws every chart inside root (or root itself).
(function () {
  "use strict";

  const SELECTOR = "[data-bench-chart]";
  const DEFAULT_HEIGHT = 240;
  const MAX_BAR_PX = 56;
  const FALLBACK_PALETTE = ["#76b900", "#8b98a9", "#3b82f6", "#f59e0b", "#a855f7", "#ef4444", "#14b8a6", "#ec4899"];
  const METRIC_LABELS = {
    ttft_s: "TTFT", tpot_s: "TPOT", itl_s: "inter-token latency", e2e_s: "end-to-end latency",
    decode_tps: "decode tok/s", prefill_tps: "prefill tok/s", output_tps: "output tok/s",
  };

  const charts = new Map(); // element -> state {plot, ro, dataEl, dataText, width, build}

  // ---------------------------------------------------------------- helpers

  function fmt(v) {
    if (v == null || !isFinite(v)) return "—";
    const a = Math.abs(v);
    const digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits });
  }

  function withUnit(v, unit) {
    const s = fmt(v);
    return s === "—" || !unit ? s : s + " " + unit;
  }

  function num(v) {
    return typeof v === "number" && isFinite(v) ? v : null;
  }

  // "TTFT" + "s" reads "TTFT (s)"; a label that already names its unit as a word
  // ("tokens" in tokens, "decode tok/s" in tok/s) is not followed by it again.
  function axisLabel(label, unit) {
    if (label && unit && !(" " + label.replace(/[()]/g, " ") + " ").includes(" " + unit + " ")) {
      return label + " (" + unit + ")";
    }
    return label || unit || "";
  }

  function rgba(color, alpha) {
    const m = /rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)/.exec(color || "");
    return m ? "rgba(" + m[1] + "," + m[2] + "," + m[3] + "," + alpha + ")" : "rgba(127,127,127," + alpha + ")";
  }

  // Colours come from the page: axes/text follow the element's computed text colour, so the
  // chart matches whatever scheme (light or dark) the surrounding CSS applies. Series colours
  // are --chart-1 … --chart-8 (bench.css), mid-tones that read on both backgrounds.
  function theme(el) {
    const cs = getComputedStyle(el);
    const fg = cs.color || "rgb(28,36,48)";
    const palette = [];
    for (let i = 1; i <= FALLBACK_PALETTE.length; i++) {
      palette.push(cs.getPropertyValue("--chart-" + i).trim() || FALLBACK_PALETTE[i - 1]);
    }
    const family = cs.fontFamily || "system-ui, sans-serif";
    return {
      fg: fg,
      muted: rgba(fg, 0.72),
      grid: rgba(fg, 0.12),
      ticks: rgba(fg, 0.3),
      font: "12px " + family,
      labelFont: "600 12px " + family,
      smallFont: "11px " + family,
      palette: palette,
    };
  }

  // y-axis width that fits its longest tick label (uPlot's axis-autosize recipe).
  function autoAxisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce((acc, v) => (String(v).length > acc.length ? String(v) : acc), "");
    if (longest !== "") {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.ceil(size);
  }

  function axis(th, extra) {
    return Object.assign({
      stroke: th.fg,
      font: th.font,
      labelFont: th.labelFont,
      labelSize: 20,
      gap: 4,
      grid: { stroke: th.grid, width: 1 },
      ticks: { stroke: th.ticks, width: 1, size: 5 },
    }, extra);
  }

  function xAxis(th, extra) {
    return axis(th, Object.assign({ size: 30 }, extra));
  }

  function yAxis(th, label) {
    return axis(th, { label: label, size: autoAxisSize });
  }

  // Range from zero to a "nice" maximum (all these metrics are non-negative).
  function zeroRange(u, min, max) {
    if (max == null || !isFinite(max) || max <= 0) return [0, 1];
    return [0, uPlot.rangeNum(0, max, 0.1, true)[1]];
  }

  function noDrag() {
    return { x: false, y: false, setScale: false };
  }

  function legendValue(fn) {
    // uPlot calls value(u, rawValue, seriesIdx, dataIdx); dataIdx is null when not hovering.
    return function (u, v, si, idx) {
      return idx == null ? "" : fn(u, v, si, idx);
    };
  }

  // ---------------------------------------------------------------- chart kinds
  // Each builder returns {empty: true} or {opts, data} for new uPlot(opts, data, el).

  // Grouped bars, one group per scenario. x is the scenario index 0..n-1 on a linear scale
  // spanning [-0.5, n-0.5]; uPlot.paths.bars places each series' bars with disp.x0/size in
  // x-scale units so the group is centred on its index (bars capped at MAX_BAR_PX wide).
  function buildScenarios(el, raw, th) {
    let d = raw;
    const metric = el.getAttribute("data-metric") || "";
    if (raw && raw.metrics && typeof raw.metrics === "object") {
      if (!metric || !raw.metrics[metric]) throw new Error("data-metric '" + metric + "' not in data.metrics");
      d = Object.assign({ scenarios: raw.scenarios }, raw.metrics[metric]);
    }
    const cats = Array.isArray(d.scenarios) ? d.scenarios.map(String) : [];
    const n = cats.length;
    const series = (Array.isArray(d.series) ? d.series : []).map((s) => ({
      label: String(s.label || ""),
      values: cats.map((_, i) => num(Array.isArray(s.values) ? s.values[i] : null)),
      notes: cats.map((_, i) => (Array.isArray(s.notes) && s.notes[i] ? String(s.notes[i]) : null)),
    }));
    if (!n || !series.some((s) => s.values.some((v) => v != null))) return { empty: true };

    const m = series.length;
    const unit = d.unit || "";
    const yLabel = axisLabel(d.y_label || d.label || METRIC_LABELS[metric] || metric, unit);
    const xs = cats.map((_, i) => i);

    function barUnits(u) {
      const pxPerUnit = u.bbox.width / n; // canvas px per scenario
      const maxUnits = (MAX_BAR_PX * uPlot.pxRatio) / pxPerUnit;
      return Math.min(0.8 / m, maxUnits);
    }

    // The x axis is the benchmark's scenarios unless the data names it (the Usage page's
    // hours or days); the legend's x entry follows the axis unless named too.
    const xLabel = d.x_label || "scenario (input/output tokens)";
    const uSeries = [{
      label: d.x_legend || d.x_label || "scenario",
      value: legendValue((u, v) => cats[v] || ""),
    }];
    series.forEach((s, k) => {
      const color = th.palette[k % th.palette.length];
      uSeries.push({
        label: s.label,
        stroke: color,
        fill: color,
        width: 0,
        points: { show: false },
        value: legendValue((u, v, si, idx) => (v == null && s.notes[idx] ? s.notes[idx] : withUnit(v, unit))),
        paths: uPlot.paths.bars({
          disp: {
            x0: {
              unit: 1,
              values: (u) => {
                const w = barUnits(u);
                return xs.map((i) => i - (m * w) / 2 + k * w + w * 0.06);
              },
            },
            size: { unit: 1, values: (u) => xs.map(() => barUnits(u) * 0.88) },
          },
        }),
      });
    });

    const hover = document.createElement("div");
    hover.className = "bench-hover-col";

    const opts = {
      title: d.title || undefined,
      series: uSeries,
      scales: {
        x: { time: false, range: () => [-0.5, n - 0.5] },
        y: { range: zeroRange },
      },
      axes: [
        xAxis(th, {
          label: xLabel,
          grid: { show: false },
          splits: () => xs,
          values: (u, splits) => {
            // Thin out labels that would overlap.
            u.ctx.font = u.axes[0].font[0];
            const widest = cats.reduce((w, c) => Math.max(w, u.ctx.measureText(c).width), 0) / uPlot.pxRatio;
            const per = u.bbox.width / uPlot.pxRatio / n;
            const step = Math.max(1, Math.ceil((widest + 10) / Math.max(per, 1)));
            return splits.map((i) => (i % step === 0 ? cats[i] : ""));
          },
        }),
        yAxis(th, yLabel),
      ],
      cursor: { drag: noDrag(), x: false, y: false, points: { show: false } },
      legend: { live: true },
      hooks: {
        ready: [(u) => u.over.appendChild(hover)],
        setCursor: [(u) => {
          const idx = u.cursor.idx;
          if (idx == null || u.cursor.left < 0) {
            hover.style.display = "none";
            return;
          }
          const l = u.valToPos(idx - 0.5, "x");
          const r = u.valToPos(idx + 0.5, "x");
          hover.style.display = "block";
          hover.style.left = l + "px";
          hover.style.width = r - l + "px";
        }],
      },
    };
    return { opts: opts, data: [xs].concat(series.map((s) => s.values)) };
  }

  // Throughput-latency curve: x = per-user tok/s, y = aggregate tok/s, one point per
  // concurrency level, one series per job. x is not monotone across (or even within) series,
  // so this uses uPlot's faceted mode (mode: 2, uPlot >= 1.6): data is
  // [null, [xs1, ys1], [xs2, ys2], ...], each series with its own x/y arrays. The default
  // linear path builder connects points in array order when there are only a few points, so
  // points are sorted by concurrency and the line follows rising load. Mode 2 has no built-in
  // hover lookup, so cursor.dataIdx picks the single nearest point (within 28 px) across
  // series; the legend and a small tooltip show its concurrency and values, and every point is
  // labelled "c<N>" on the canvas.
  function buildCurve(el, d, th) {
    const series = (Array.isArray(d.series) ? d.series : []).map((s) => {
      const pts = (Array.isArray(s.points) ? s.points : [])
        .map((p) => ({ c: p && p.concurrency, x: num(p && p.x), y: num(p && p.y) }))
        .filter((p) => p.x != null && p.y != null)
        .sort((a, b) => (Number(a.c) || 0) - (Number(b.c) || 0));
      return { label: String(s.label || ""), pts: pts };
    }).filter((s) => s.pts.length);
    if (!series.length) return { empty: true };

    const xLabel = d.x_label || "per-user output tok/s";
    const yLabel = d.y_label || "aggregate output tok/s";
    let hit = null; // {si, idx} of the hovered point
    const tip = document.createElement("div");
    tip.className = "bench-tip";

    function nearest(u) {
      const cl = u.cursor.left;
      const ct = u.cursor.top;
      let best = null;
      let bestDist = 28 * 28;
      if (cl == null || cl < 0) return null;
      series.forEach((s, k) => {
        const si = k + 1;
        if (!u.series[si].show) return;
        s.pts.forEach((p, idx) => {
          const dx = u.valToPos(p.x, "x") - cl;
          const dy = u.valToPos(p.y, "y") - ct;
          const dist = dx * dx + dy * dy;
          if (dist < bestDist) {
            bestDist = dist;
            best = { si: si, idx: idx };
          }
        });
      });
      return best;
    }

    const pointsPath = uPlot.paths.points();
    const uSeries = [{}];
    series.forEach((s, k) => {
      const color = th.palette[k % th.palette.length];
      uSeries.push({
        label: s.label,
        stroke: color,
        width: 2,
        facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        // In mode 2 uPlot hands the points builder the x-series window (i0/i1), which is
        // meaningless here; draw every point of this series instead.
        points: {
          show: true, size: 7, width: 1.5, stroke: color, fill: color,
          paths: (u, si, i0, i1, filtIdxs) => pointsPath(u, si, 0, s.pts.length - 1, filtIdxs),
        },
        value: legendValue((u, v, si, idx) => {
          const p = s.pts[idx];
          return p ? "c=" + p.c + ": " + fmt(p.x) + " / " + fmt(p.y) + " tok/s" : "";
        }),
      });
    });

    const opts = {
      mode: 2,
      title: d.title || undefined,
      series: uSeries,
      scales: {
        x: { time: false, auto: true, range: zeroRange },
        y: { auto: true, range: zeroRange },
      },
      axes: [xAxis(th, { label: xLabel }), yAxis(th, yLabel)],
      legend: { live: true },
      cursor: {
        drag: noDrag(),
        x: false,
        y: false,
        points: { size: 11, width: 2 },
        dataIdx: (u, si) => {
          if (si === 1) hit = nearest(u);
          return hit && hit.si === si ? hit.idx : null;
        },
      },
      hooks: {
        ready: [(u) => u.over.appendChild(tip)],
        setCursor: [(u) => {
          if (!hit) {
            tip.style.display = "none";
            return;
          }
          const p = series[hit.si - 1].pts[hit.idx];
          tip.textContent = "";
          const head = document.createElement("strong");
          head.textContent = series[hit.si - 1].label;
          tip.appendChild(head);
          [["concurrency", String(p.c)], [xLabel, fmt(p.x)], [yLabel, fmt(p.y)]].forEach((row) => {
            const line = document.createElement("div");
            line.textContent = row[0] + ": " + row[1];
            tip.appendChild(line);
          });
          const left = u.valToPos(p.x, "x");
          const top = u.valToPos(p.y, "y");
          tip.style.display = "block";
          const w = tip.offsetWidth;
          const overW = u.over.clientWidth;
          tip.style.left = (left + 12 + w > overW ? Math.max(0, left - w - 12) : left + 12) + "px";
          tip.style.top = Math.max(0, top - tip.offsetHeight - 10) + "px";
        }],
        draw: [(u) => {
          // Label each point with its concurrency (skipped when too crowded).
          const total = series.reduce((a, s) => a + s.pts.length, 0);
          if (total > 60) return;
          const ctx = u.ctx;
          const r = uPlot.pxRatio;
          ctx.save();
          ctx.beginPath();
          ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
          ctx.clip();
          ctx.font = th.smallFont.replace(/^(\d+)px/, (_, px) => Math.round(px * r) + "px");
          ctx.fillStyle = th.muted;
          ctx.textBaseline = "bottom";
          series.forEach((s, k) => {
            if (!u.series[k + 1].show) return;
            s.pts.forEach((p) => {
              if (p.c == null) return;
              ctx.fillText("c" + p.c, u.valToPos(p.x, "x", true) + 5 * r, u.valToPos(p.y, "y", true) - 4 * r);
            });
          });
          ctx.restore();
        }],
      },
    };
    const data = [null].concat(series.map((s) => [s.pts.map((p) => p.x), s.pts.map((p) => p.y)]));
    return { opts: opts, data: data };
  }

  // y vs concurrency, one line per series; log2 x axis when the x values span >= 4x
  // (disable with data-log-x="false").
  function buildLines(el, d, th) {
    const rawX = Array.isArray(d.x) ? d.x : [];
    const order = rawX.map((x, i) => i).filter((i) => num(rawX[i]) != null).sort((a, b) => rawX[a] - rawX[b]);
    const xs = order.map((i) => rawX[i]);
    const series = (Array.isArray(d.series) ? d.series : []).map((s) => ({
      label: String(s.label || ""),
      values: order.map((i) => num(Array.isArray(s.values) ? s.values[i] : null)),
    }));
    if (!xs.length || !series.some((s) => s.values.some((v) => v != null))) return { empty: true };

    const unit = d.unit || "";
    const logX = el.getAttribute("data-log-x") !== "false" && xs[0] > 0 && xs[xs.length - 1] / xs[0] >= 4;
    const xLabel = d.x_label || "concurrent requests";

    const uSeries = [{ label: xLabel, value: legendValue((u, v) => fmt(v)) }];
    series.forEach((s, k) => {
      const color = th.palette[k % th.palette.length];
      uSeries.push({
        label: s.label,
        stroke: color,
        width: 2,
        spanGaps: true,
        points: { show: true, size: 6, fill: color, stroke: color },
        value: legendValue((u, v) => withUnit(v, unit)),
      });
    });

    const opts = {
      title: d.title || undefined,
      series: uSeries,
      scales: {
        x: logX ? { time: false, distr: 3, log: 2 } : { time: false },
        y: { range: zeroRange },
      },
      axes: [
        xAxis(th, logX ? { label: xLabel, values: (u, splits) => splits.map((v) => fmt(v)) } : { label: xLabel }),
        yAxis(th, axisLabel(d.y_label || "", unit)),
      ],
      legend: { live: true },
      cursor: { drag: noDrag(), y: false, points: { size: 9 } },
    };
    return { opts: opts, data: [xs].concat(series.map((s) => s.values)) };
  }

  const BUILDERS = { scenarios: buildScenarios, curve: buildCurve, lines: buildLines };

  // ---------------------------------------------------------------- mounting

  function message(el, text, cls) {
    const p = document.createElement("p");
    p.className = "bench-chart-msg " + cls;
    p.textContent = text;
    el.appendChild(p);
  }

  function heightFor(el, width) {
    const h = parseInt(el.getAttribute("data-height"), 10);
    if (h > 0) return h;
    return Math.round(Math.max(180, Math.min(DEFAULT_HEIGHT, width * 0.62)));
  }

  function destroy(el) {
    const st = charts.get(el);
    if (!st) return;
    if (st.ro) st.ro.disconnect();
    if (st.plot) st.plot.destroy();
    if (el._plot === st.plot) delete el._plot;
    charts.delete(el);
  }

  function sweep() {
    Array.from(charts.keys()).forEach((el) => {
      if (!el.isConnected) destroy(el);
    });
  }

  function mount(el) {
    destroy(el);
    if (!el.isConnected) return;
    el.textContent = "";
    el.classList.add("bench-chart");
    const id = el.getAttribute("data-bench-data") || "";
    const dataEl = id ? document.getElementById(id) : null;
    const st = { plot: null, ro: null, dataEl: dataEl, dataText: dataEl ? dataEl.textContent : null, width: 0 };
    charts.set(el, st);

    let spec;
    try {
      if (typeof window.uPlot !== "function") throw new Error("uPlot is not loaded");
      const kind = el.getAttribute("data-bench-chart");
      const builder = BUILDERS[kind];
      if (!builder) throw new Error("unknown chart kind '" + kind + "'");
      if (!dataEl) throw new Error("no JSON element with id '" + id + "'");
      const raw = JSON.parse(dataEl.textContent);
      if (raw == null) {
        message(el, "No data yet", "bench-chart-empty");
        return;
      }
      if (typeof raw !== "object") throw new Error("chart data is not an object");
      const th = theme(el);
      spec = builder(el, raw, th);
    } catch (err) {
      console.error("bench-charts: chart unavailable", el, err);
      message(el, "Chart unavailable", "bench-chart-error");
      return;
    }
    if (spec.empty) {
      message(el, "No data yet", "bench-chart-empty");
      return;
    }

    function build(width) {
      st.width = width;
      const opts = Object.assign({}, spec.opts, { width: width, height: heightFor(el, width) });
      try {
        st.plot = new uPlot(opts, spec.data, el);
        el._plot = st.plot; // the uPlot instance, for browser tests (its canvas text is unreadable)
      } catch (err) {
        console.error("bench-charts: chart unavailable", el, err);
        el.textContent = "";
        message(el, "Chart unavailable", "bench-chart-error");
        if (st.ro) st.ro.disconnect();
      }
    }

    let pending = 0;
    st.ro = new ResizeObserver(() => {
      if (pending) return;
      pending = requestAnimationFrame(() => {
        pending = 0;
        if (charts.get(el) !== st) return;
        const width = Math.floor(el.clientWidth);
        if (width <= 0 || Math.abs(width - st.width) < 1) return;
        if (!st.plot) build(width);
        else {
          st.width = width;
          st.plot.setSize({ width: width, height: heightFor(el, width) });
        }
      });
    });
    st.ro.observe(el);
    const width = Math.floor(el.clientWidth);
    if (width > 0) build(width); // else wait until it becomes visible
  }

  function chartsIn(root) {
    const out = [];
    if (!root) return out;
    if (root.nodeType === 1 && root.matches(SELECTOR)) out.push(root);
    if (root.querySelectorAll) out.push.apply(out, root.querySelectorAll(SELECTOR));
    return out;
  }

  // Force-(re)draw every chart inside root (default: the whole document).
  function render(root) {
    sweep();
    chartsIn(root || document).forEach(mount);
  }

  // Cheap pass after any swap: drop charts that left the page, redraw charts whose JSON
  // <script> was replaced or edited, and draw charts that are new.
  function refresh() {
    sweep();
    Array.from(charts.entries()).forEach(([el, st]) => {
      const id = el.getAttribute("data-bench-data") || "";
      const dataEl = id ? document.getElementById(id) : null;
      if (dataEl !== st.dataEl || (dataEl && dataEl.textContent !== st.dataText)) mount(el);
    });
    chartsIn(document).forEach((el) => {
      if (!charts.has(el)) mount(el);
    });
  }

  function swappedElement(event) {
    const d = event.detail || {};
    const cand = [d.elt, d.target, d.element, event.target];
    for (let i = 0; i < cand.length; i++) {
      if (cand[i] && cand[i].nodeType === 1) return cand[i];
    }
    return null;
  }

  function onSwap(event) {
    const el = swappedElement(event);
    if (el && el.isConnected && el !== document.body && el !== document.documentElement) render(el);
    refresh();
  }

  function init() {
    render(document);
    // Capture phase on document: sees events dispatched on any element even when they don't bubble.
    ["htmx:afterSwap", "htmx:oobAfterSwap", "sparkpanel:swapped"].forEach((name) => {
      document.addEventListener(name, onSwap, true);
    });
    ["htmx:historyRestore", "spark:fragment"].forEach((name) => {
      document.addEventListener(name, refresh, true);
    });
    // Colours are baked into the canvas: redraw when the OS colour scheme flips.
    if (window.matchMedia) {
      const mq = window.matchMedia("(prefers-color-scheme: dark)");
      const redraw = () => render(document);
      if (mq.addEventListener) mq.addEventListener("change", redraw);
      else if (mq.addListener) mq.addListener(redraw);
    }
  }

  window.SparkCharts = { render: render, refresh: refresh };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
