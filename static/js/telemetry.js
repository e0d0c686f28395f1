// SparkPanel live telemetry: uPlot time-series charts for one host or one run, back-filled
// from the page (the last 15 minutes of 10-second history) and extended by the host
// agent's 1 Hz samples over /ws/telemetry/... . The agent sends a run's samples from its
// first phase (queued, loading, ...), so the run page's charts move during a load.
//
// - The x axis is always the window ending now (the server's clock), from the first
//   sample: at least two minutes, at most the back-fill window — never an autoscale of a
//   single point to years.
// - The back-fill is fetched again on every (re)connect of the telemetry socket and of the
//   page's events socket ("sparkpanel:socket-open", static/js/events.js), so a gap while
//   the socket was down is filled from the server's history.
// - "stale: no sample for N s" only when the agent really is silent: no sample on the
//   socket for STALE_MS *and* the server says the agent has not reported (it is asked
//   then); a socket that is down says "reconnecting", a run that ended says so.
// - Legends show the latest value without hovering; axes are compact (1.2k); the KV cache
//   axis is 0–100 %.
//
// Markup: <div data-telemetry data-ws="/ws/telemetry/host/NAME/" data-backfill="ID">
//   <span data-telemetry-state></span>
//   <div data-telemetry-chart="memory|kv|requests|tokens|ttft|itl"></div> ...
// </div>
// The back-fill URL is the socket's path without "/ws" plus "backfill.json"
// (data-backfill-url overrides it).
(function () {
  "use strict";
  const STALE_MS = 10000; // samples come each second; a busy machine may skip a few
  const POLL_MS = 5000; // while the socket is quiet: how often the server is asked
  const MIN_SPAN_S = 120;
  const HEIGHT = 180;
  const GB = 1e9;
  const FORECAST_S = 10;
  const ENDED = new Set(["stopped", "failed"]);

  const CHARTS = {
    memory: {
      title: "Memory (GB)",
      series: [
        ["used", (s) => (s.mem_total != null && s.mem_available != null ? (s.mem_total - s.mem_available) / GB : null), "#2563eb"],
        ["available", (s) => (s.mem_available != null ? s.mem_available / GB : null), "#16a34a"],
        ["freeze line (act)", (s, ctx) => (ctx.act_bytes ? ctx.act_bytes / GB : null), "#dc2626", [6, 4]],
        // The watchdog's forecast (apps/guard/watchdog.py): where MemAvailable would be in
        // FORECAST_S seconds at its recent fall; drawn only while memory is falling.
        [`available in ${FORECAST_S} s at this trend`, (s) => (s.mem_available != null && s.mem_fall_bytes_s ? Math.max(s.mem_available - s.mem_fall_bytes_s * FORECAST_S, 0) / GB : null), "#ea580c", [2, 3]],
      ],
    },
    kv: { title: "KV cache (%)", range: [0, 100], unit: " %", series: [["KV cache used", (s) => s.kv_usage_pct, "#7c3aed"]] },
    requests: {
      title: "Requests",
      integer: true,
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
    // Speculative decoding, from vLLM's vllm:spec_decode_* counters over the window.
    spec: {
      title: "Draft tokens accepted (%)",
      range: [0, 100],
      unit: " %",
      series: [["accepted", (s) => (s.spec_acceptance_rate != null ? s.spec_acceptance_rate * 100 : null), "#7c3aed"]],
    },
    spec_len: {
      title: "Mean acceptance length (tokens a step)",
      series: [["tokens a step", (s) => s.spec_acceptance_length, "#16a34a"]],
    },
  };
  const INTEGER_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];

  // 1234 → "1.23k", 0.0421 → "0.042", 12.5 → "12.5": short enough for an axis.
  function compact(v) {
    if (v == null || !isFinite(v)) return "—";
    const a = Math.abs(v);
    const trim = (x, d) => String(+x.toFixed(d));
    if (a >= 1e9) return trim(v / 1e9, 2) + "G";
    if (a >= 1e6) return trim(v / 1e6, 2) + "M";
    if (a >= 1e3) return trim(v / 1e3, 2) + "k";
    if (a >= 100) return String(Math.round(v));
    if (a >= 10) return trim(v, 1);
    if (a >= 1) return trim(v, 2);
    if (a === 0) return "0";
    return trim(v, 3);
  }

  const pad = (n) => String(n).padStart(2, "0");
  function clock(t, seconds) {
    const d = new Date(t * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (seconds ? ":" + pad(d.getSeconds()) : "");
  }

  function rowsFromHistory(h) {
    const rows = [];
    for (let i = 0; i < (h.t || []).length; i++) {
      const s = { t: h.t[i] };
      for (const key of Object.keys(h)) if (key !== "t") s[key] = h[key][i];
      rows.push(s);
    }
    return rows;
  }

  function lastValue(column) {
    for (let i = column.length - 1; i >= 0; i--) if (column[i] != null) return column[i];
    return null;
  }

  // The width the y axis needs for its longest label (a fixed width clipped "10000").
  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce((acc, v) => (v.length > acc.length ? v : acc), "");
    if (longest) {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.ceil(size) + 4;
  }

  function Panel(root) {
    this.root = root;
    this.ctx = { act_bytes: 0, warn_bytes: 0, window_s: 900, active: true, agent_live: null };
    this.history = []; // 10-second rows from the server
    this.live = []; // 1 Hz samples (the socket, or the server's latest while it is quiet)
    this.rows = [];
    this.charts = [];
    this.lastSample = 0; // Date.now() of the last sample that arrived
    this.socketSamples = 0;
    this.lastSocketSample = 0;
    this.offset = 0; // server clock − this browser's clock, in seconds
    this.socketOpen = false;
    this.everOpen = false;
    this.lastPoll = 0;
    this.stateEl = root.querySelector("[data-telemetry-state]");
    const ws = root.dataset.ws || "";
    const match = ws.match(/\/run\/(\d+)\/$/);
    this.runId = match ? match[1] : null;
    this.backfillUrl = root.dataset.backfillUrl || ws.replace(/^\/ws\//, "/") + "backfill.json";
    const el = document.getElementById(root.dataset.backfill || "");
    if (el) {
      try {
        this.apply(JSON.parse(el.textContent), false);
      } catch (e) {
        console.error("telemetry backfill", e);
      }
    }
    this.build();
    this.connect();
    document.addEventListener("sparkpanel:socket-open", () => this.refetch());
    this.timer = setInterval(() => this.tick(), 1000);
    this.updateState();
  }

  Panel.prototype.now = function () {
    return Date.now() / 1000 + this.offset;
  };

  Panel.prototype.ended = function () {
    const progress = this.runId && document.getElementById("run-" + this.runId + "-progress");
    if (progress && progress.dataset.state) return ENDED.has(progress.dataset.state);
    return this.ctx.active === false;
  };

  // A back-fill from the page or the server: its history replaces ours; its latest sample
  // joins the live ones.
  Panel.prototype.apply = function (data, redraw) {
    for (const key of ["act_bytes", "warn_bytes", "window_s", "active", "agent_live"]) {
      if (data[key] != null) this.ctx[key] = data[key];
    }
    if (data.now) this.offset = data.now - Date.now() / 1000;
    if (data.history) this.history = rowsFromHistory(data.history);
    if (data.latest && data.latest.t) this.push(data.latest, false, "server");
    this.merge();
    if (redraw !== false) this.redraw();
  };

  Panel.prototype.refetch = function () {
    this.lastPoll = Date.now();
    return fetch(this.backfillUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status))))
      .then((data) => {
        this.apply(data);
        this.root.dispatchEvent(new CustomEvent("telemetry:backfill", { bubbles: true }));
        this.updateState();
      })
      .catch((e) => console.warn("telemetry backfill", e));
  };

  // History rows (10 s buckets starting at t) where live samples exist are left out.
  Panel.prototype.merge = function () {
    const cutoff = this.now() - this.ctx.window_s;
    this.live = this.live.filter((r) => r.t >= cutoff);
    const live = this.live;
    const rows = [];
    let j = 0;
    for (const h of this.history) {
      if (h.t < cutoff) continue;
      while (j < live.length && live[j].t < h.t) j++;
      if (j < live.length && live[j].t < h.t + 10) continue;
      rows.push(h);
    }
    this.rows = rows.concat(live).sort((a, b) => a.t - b.t);
  };

  Panel.prototype.xRange = function () {
    const last = this.rows.length ? this.rows[this.rows.length - 1].t : null;
    const hi = this.ended() && last != null ? last : this.now();
    const first = this.rows.length ? this.rows[0].t : hi;
    const lo = Math.max(hi - this.ctx.window_s, Math.min(first, hi - MIN_SPAN_S));
    return [lo, hi];
  };

  Panel.prototype.build = function () {
    for (const el of this.root.querySelectorAll("[data-telemetry-chart]")) {
      const spec = CHARTS[el.dataset.telemetryChart];
      if (!spec || !window.uPlot) continue;
      el.innerHTML = "";
      const color = getComputedStyle(el).color || "#333";
      const grid = { stroke: "rgba(127,127,127,.15)" };
      const unit = spec.unit || "";
      const yRange = spec.range
        ? spec.range
        : (u, min, max) => {
            const top = max != null && isFinite(max) && max > 0 ? max * 1.1 : 1;
            return [min != null && isFinite(min) && min < 0 ? min * 1.1 : 0, spec.integer ? Math.max(1, Math.ceil(top)) : top];
          };
      const opts = {
        title: spec.title,
        width: Math.max(el.clientWidth, 240),
        height: HEIGHT,
        scales: {
          x: { time: true, range: () => this.xRange() },
          y: { range: yRange },
        },
        axes: [
          {
            stroke: color,
            grid,
            space: 80, // "14:05:30" never runs into its neighbour
            values: (u, splits, axisIdx, space, incr) => splits.map((t) => clock(t, incr < 60)),
          },
          Object.assign(
            { stroke: color, grid, size: axisSize, values: (u, splits) => splits.map(compact) },
            spec.integer ? { incrs: INTEGER_INCRS } : {}
          ),
        ],
        series: [
          {
            label: "time",
            // No cursor: the latest sample's time, not "--".
            value: (u, v, sidx, idx) => {
              const t = idx == null ? lastValue(u.data[0]) : v;
              return t == null ? "—" : clock(t, true);
            },
          },
        ].concat(
          spec.series.map(([label, , stroke, dash]) => ({
            label,
            stroke,
            width: 2,
            dash,
            spanGaps: false,
            // No cursor: the latest value, not "--".
            value: (u, v, sidx, idx) => {
              const value = idx == null ? lastValue(u.data[sidx]) : v;
              return value == null ? "—" : compact(value) + unit;
            },
          }))
        ),
      };
      const chart = new window.uPlot(opts, this.columns(spec), el);
      chart._spec = spec;
      this.charts.push(chart);
      this.showLatest(chart);
      if (window.ResizeObserver) {
        new ResizeObserver(() => chart.setSize({ width: Math.max(el.clientWidth, 240), height: HEIGHT })).observe(el);
      }
    }
  };

  Panel.prototype.showLatest = function (chart) {
    if (chart.cursor.idx == null) chart.setLegend({ idx: null });
  };

  Panel.prototype.columns = function (spec) {
    const cols = [this.rows.map((r) => r.t)];
    for (const [, get] of spec.series) {
      cols.push(this.rows.map((r) => { const v = get(r, this.ctx); return v == null ? null : v; }));
    }
    return cols;
  };

  Panel.prototype.redraw = function () {
    for (const chart of this.charts) {
      chart.setData(this.columns(chart._spec));
      this.showLatest(chart);
    }
  };

  // source: "socket" (pushed by the agent), or "server" (its latest, read back).
  Panel.prototype.push = function (sample, redraw, source) {
    const last = this.live.length ? this.live[this.live.length - 1].t : -Infinity;
    if (sample.t <= last) return false; // already have it
    this.lastSample = Date.now();
    if (source === "socket") {
      this.lastSocketSample = Date.now();
      this.offset = sample.t - Date.now() / 1000;
      this.root.dataset.telemetrySocketSamples = String(++this.socketSamples);
    }
    if (sample.warn_bytes) this.ctx.warn_bytes = sample.warn_bytes;
    if (sample.act_bytes) this.ctx.act_bytes = sample.act_bytes;
    this.live.push(sample);
    this.latest = sample;
    if (redraw !== false) {
      this.merge();
      this.redraw();
      this.root.dispatchEvent(new CustomEvent("telemetry:sample", { detail: sample, bubbles: true }));
    }
    return true;
  };

  Panel.prototype.tick = function () {
    // The socket quiet while it is open: ask the server whether the agent is reporting
    // (it may be: then its latest sample is shown; if not, the panel says stale).
    if (this.socketOpen && !this.ended() && Date.now() - this.lastSample >= STALE_MS && Date.now() - this.lastPoll >= POLL_MS) {
      this.refetch();
    }
    this.merge();
    this.redraw(); // the window moves on with the clock
    this.updateState();
  };

  Panel.prototype.updateState = function () {
    if (!this.stateEl) return;
    const age = Date.now() - this.lastSample;
    const fresh = this.lastSample && age < STALE_MS;
    let state, text;
    if (this.ended()) {
      state = "ended";
      text = "the run has ended: its recorded history";
    } else if (!this.socketOpen) {
      state = "reconnecting";
      text = this.everOpen ? "reconnecting to the live feed…" : "connecting…";
    } else if (fresh) {
      state = "live";
      const s = this.latest || {};
      const phase = this.runId && s.run_state && s.run_state !== "ready" ? ` · ${s.run_state}` : "";
      const level = s.mem_level && s.mem_level !== "ok" ? ` · memory ${s.mem_level}` : "";
      const eta = s.mem_eta_s != null && s.mem_fall_bytes_s && s.mem_eta_s < 120
        ? ` · memory falling ${(s.mem_fall_bytes_s / GB).toFixed(2)} GB/s: the act line in ${s.mem_eta_s < 1 ? "under a second" : `~${Math.round(s.mem_eta_s)} s`}`
        : "";
      const via = this.lastSocketSample && Date.now() - this.lastSocketSample >= STALE_MS ? " · read from the server (the socket is quiet)" : "";
      text = "live" + phase + level + eta + (s.scrape_error ? ` · ${s.scrape_error}` : "") + via;
    } else if (this.ctx.agent_live === false || (this.lastSample && age >= 2 * STALE_MS)) {
      state = "stale";
      text = this.lastSample
        ? `stale: no sample for ${Math.round(age / 1000)} s (is the host agent running?)`
        : "no live data: the host agent is not running";
    } else {
      state = "waiting";
      text = "waiting for the host agent's first sample…";
    }
    this.stateEl.classList.toggle("stale", state === "stale");
    this.root.dataset.telemetryLive = state;
    this.stateEl.textContent = text;
  };

  Panel.prototype.connect = function () {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let delay = 1000;
    const open = () => {
      const ws = new WebSocket(scheme + "//" + location.host + this.root.dataset.ws);
      ws.addEventListener("open", () => {
        delay = 1000;
        this.socketOpen = true;
        // Whatever happened while the socket was down (or since the page was rendered).
        this.everOpen = true;
        this.refetch();
        this.updateState();
      });
      ws.addEventListener("message", (event) => {
        try {
          const message = JSON.parse(event.data);
          if (message.type === "sample") this.push(message.sample, true, "socket");
        } catch (e) {
          console.error("telemetry message", e);
        }
      });
      ws.addEventListener("close", (event) => {
        this.socketOpen = false;
        this.updateState();
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
