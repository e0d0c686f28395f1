// SparkPanel live telemetry: uPlot time-series charts for one host or one run, back-filled
// from the page (the last 15 minutes of 10-second history) and extended by the host
// agent's 1 Hz samples over /ws/telemetry/... . When no sample has arrived for 3 s the
// panel says "stale" instead of letting old numbers pass for live ones.
//
// Markup: <div data-telemetry data-ws="/ws/telemetry/host/NAME/" data-backfill="ID">
//   <span data-telemetry-state></span>
//   <div data-telemetry-chart="memory|kv|requests|tokens|ttft|itl"></div> ...
// </div>
(function () {
  "use strict";
  const STALE_MS = 3000;
  const GB = 1e9;

  const CHARTS = {
    memory: {
      title: "Memory (GB)",
      series: [
        ["used", (s) => (s.mem_total != null && s.mem_available != null ? (s.mem_total - s.mem_available) / GB : null), "#2563eb"],
        ["available", (s) => (s.mem_available != null ? s.mem_available / GB : null), "#16a34a"],
        ["freeze line (act)", (s, ctx) => ctx.act_bytes / GB, "#dc2626", [6, 4]],
      ],
    },
    kv: { title: "KV cache (%)", series: [["KV cache used", (s) => s.kv_usage_pct, "#7c3aed"]] },
    requests: {
      title: "Requests",
      series: [
        ["running", (s) => s.running, "#0891b2"],
        ["waiting", (s) => s.waiting, "#ea580c"],
      ],
    },
    tokens: {
      title: "Tokens per second",
      series: [
        ["prompt", (s) => s.prompt_tps, "#2563eb"],
        ["generation", (s) => s.generation_tps, "#16a34a"],
      ],
    },
    ttft: {
      title: "Time to first token (s)",
      series: [
        ["p50", (s) => s.ttft_p50, "#0d9488"],
        ["p95", (s) => s.ttft_p95, "#b45309"],
      ],
    },
    itl: {
      title: "Inter-token latency (ms)",
      series: [
        ["p50", (s) => (s.itl_p50 != null ? s.itl_p50 * 1000 : null), "#0d9488"],
        ["p95", (s) => (s.itl_p95 != null ? s.itl_p95 * 1000 : null), "#b45309"],
      ],
    },
  };

  function rowsFromHistory(h) {
    const rows = [];
    for (let i = 0; i < h.t.length; i++) {
      const s = { t: h.t[i] };
      for (const key of Object.keys(h)) if (key !== "t") s[key] = h[key][i];
      rows.push(s);
    }
    return rows;
  }

  function Panel(root) {
    this.root = root;
    this.ctx = { act_bytes: 0, warn_bytes: 0, window_s: 900 };
    this.rows = [];
    this.charts = [];
    this.lastSample = 0;
    this.stateEl = root.querySelector("[data-telemetry-state]");
    const el = document.getElementById(root.dataset.backfill || "");
    if (el) {
      try {
        const data = JSON.parse(el.textContent);
        this.ctx = Object.assign(this.ctx, data);
        this.rows = rowsFromHistory(data.history || { t: [] });
        if (data.latest && data.latest.t) this.push(data.latest, false);
      } catch (e) {
        console.error("telemetry backfill", e);
      }
    }
    this.build();
    this.connect();
    this.timer = setInterval(() => this.updateState(), 1000);
    this.updateState();
  }

  Panel.prototype.build = function () {
    for (const el of this.root.querySelectorAll("[data-telemetry-chart]")) {
      const spec = CHARTS[el.dataset.telemetryChart];
      if (!spec || !window.uPlot) continue;
      el.innerHTML = "";
      const color = getComputedStyle(el).color || "#333";
      const opts = {
        title: spec.title,
        width: Math.max(el.clientWidth, 240),
        height: 180,
        scales: { x: { time: true } },
        axes: [
          { stroke: color, grid: { stroke: "rgba(127,127,127,.15)" } },
          { stroke: color, grid: { stroke: "rgba(127,127,127,.15)" }, size: 50 },
        ],
        series: [{}].concat(
          spec.series.map(([label, , stroke, dash]) => ({ label, stroke, width: 2, dash, spanGaps: false }))
        ),
      };
      const chart = new window.uPlot(opts, this.columns(spec), el);
      chart._spec = spec;
      this.charts.push(chart);
      if (window.ResizeObserver) {
        new ResizeObserver(() => chart.setSize({ width: Math.max(el.clientWidth, 240), height: 180 })).observe(el);
      }
    }
  };

  Panel.prototype.columns = function (spec) {
    const cols = [this.rows.map((r) => r.t)];
    for (const [, get] of spec.series) cols.push(this.rows.map((r) => { const v = get(r, this.ctx); return v == null ? null : v; }));
    return cols;
  };

  Panel.prototype.push = function (sample, redraw) {
    this.lastSample = Date.now();
    if (sample.warn_bytes) this.ctx.warn_bytes = sample.warn_bytes;
    if (sample.act_bytes) this.ctx.act_bytes = sample.act_bytes;
    this.rows.push(sample);
    const cutoff = sample.t - this.ctx.window_s;
    while (this.rows.length && this.rows[0].t < cutoff) this.rows.shift();
    this.latest = sample;
    if (redraw !== false) {
      for (const chart of this.charts) chart.setData(this.columns(chart._spec));
      this.root.dispatchEvent(new CustomEvent("telemetry:sample", { detail: sample, bubbles: true }));
    }
  };

  Panel.prototype.updateState = function () {
    if (!this.stateEl) return;
    const age = Date.now() - this.lastSample;
    const live = this.lastSample && age < STALE_MS;
    this.stateEl.classList.toggle("stale", !live);
    this.root.dataset.telemetryLive = live ? "live" : "stale";
    if (live) {
      const s = this.latest || {};
      const level = s.mem_level && s.mem_level !== "ok" ? ` · memory ${s.mem_level}` : "";
      this.stateEl.textContent = "live" + level + (s.scrape_error ? ` · ${s.scrape_error}` : "");
    } else {
      this.stateEl.textContent = this.lastSample
        ? `stale: no sample for ${Math.round(age / 1000)} s (is the host agent running?)`
        : "no live data: the host agent is not running";
    }
  };

  Panel.prototype.connect = function () {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let delay = 1000;
    const open = () => {
      const ws = new WebSocket(scheme + "//" + location.host + this.root.dataset.ws);
      ws.addEventListener("open", () => { delay = 1000; });
      ws.addEventListener("message", (event) => {
        try {
          const message = JSON.parse(event.data);
          if (message.type === "sample") this.push(message.sample);
        } catch (e) {
          console.error("telemetry message", e);
        }
      });
      ws.addEventListener("close", (event) => {
        if (event.code === 4401 || event.code === 4403 || event.code === 4404) return;
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 15000);
      });
    };
    open();
  };

  function start() {
    for (const root of document.querySelectorAll("[data-telemetry]")) {
      if (!root._panel) root._panel = new Panel(root);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
