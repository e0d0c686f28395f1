// SparkPanel live events: one WebSocket per page to /ws/events/.
// The server pushes HTML fragments. A fragment whose root id matches an element on the
// page replaces it; a root with data-swap="afterbegin:<id>" or "beforeend:<id>" is
// inserted into that container instead. Reconnects with backoff; the badge in the top
// bar says whether the page is live, so stale numbers are never mistaken for live ones.
(function () {
  "use strict";
  const PLACES = new Set(["afterbegin", "beforeend"]);
  let delay = 1000;

  function setStatus(state, text) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.className = "live live-" + state;
    el.textContent = text;
    document.body.dataset.live = state;
  }

  function activate(el) {
    if (window.htmx) window.htmx.process(el);
  }

  function swapFragments(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    let swapped = 0;
    for (const el of Array.from(tpl.content.children)) {
      const existing = el.id ? document.getElementById(el.id) : null;
      if (existing) {
        existing.replaceWith(el);
        activate(el);
        swapped++;
        continue;
      }
      const spec = el.getAttribute("data-swap");
      if (!spec) continue;
      const [place, targetId] = spec.split(":");
      const target = document.getElementById(targetId);
      if (target && PLACES.has(place)) {
        target.insertAdjacentElement(place, el);
        activate(el);
        swapped++;
      }
    }
    document.dispatchEvent(new CustomEvent("spark:fragment", { detail: { swapped } }));
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(scheme + "//" + location.host + "/ws/events/");
    ws.addEventListener("open", function () {
      delay = 1000;
      setStatus("live", "live");
    });
    ws.addEventListener("message", function (event) {
      if (typeof event.data === "string") swapFragments(event.data);
    });
    ws.addEventListener("close", function (event) {
      if (event.code === 4401 || event.code === 4403) {
        setStatus("off", event.code === 4401 ? "signed out" : "no access");
        return;
      }
      setStatus("reconnecting", "reconnecting…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }

  window.SparkEvents = { swapFragments: swapFragments };
  document.addEventListener("DOMContentLoaded", function () {
    if (document.getElementById("live-status")) connect();
  });
})();
