// SparkPanel live events: one WebSocket per page to /ws/events/ (docs/live-updates.md).
//
// Live elements: every element with data-live-src can be rendered again by the server
// from its current state (a GET to that URL answers the element's HTML and its version in
// the X-Live-Seq header). Each time the socket opens — the first connect and every
// reconnect — the page fetches all its live elements BEFORE it applies any push, so what
// changed while it was not listening is shown at once.
//
// Versions: pushes arrive as {"seq": N, "html": "...", "changed": [ids]}. An element
// remembers the version it shows (data-live-seq) and is never replaced by an older one;
// a pushed child inserted into a container (data-swap="beforeend:<id>") is skipped when
// the container already shows that version or a newer one. `changed` names personal
// elements (buttons with CSRF tokens, a Cancel only some may use): each page fetches its
// own copy. Plain-HTML pushes (no version) are still swapped as before. A fetch or push whose
// HTML is the one the element was built from keeps the element (focus, charts) as it is.
//
// On every open the page dispatches "sparkpanel:socket-open" on document, so other live
// parts (the telemetry charts) can fetch what they missed too. The badge in the top bar
// says whether the page is live, so stale numbers are never mistaken for live ones.
(function () {
  "use strict";
  const PLACES = new Set(["afterbegin", "beforeend"]);
  let delay = 1000;
  let socket = null;
  let wanted = true; // false after disconnect(): no automatic reconnect
  let syncing = false; // fetching on open: pushes wait in `held`
  let held = [];
  let openCount = 0;

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

  function shownSeq(el) {
    const value = el && el.dataset ? Number(el.dataset.liveSeq || 0) : 0;
    return Number.isFinite(value) ? value : 0;
  }

  // The HTML each live element on the page was built from, before any script (a chart, htmx)
  // changed it: the server's page for those it rendered, a fetch or push for the others.
  // A fetch that answers the same HTML is the same state, so the element is kept as it is —
  // keyboard focus, a hover, an open <details>, a drawn chart survive every socket open.
  // CSRF tokens are masked anew on every render and say nothing about state: ignored.
  const builtFrom = new Map();
  // A version says nothing about state either.
  const CSRF_VALUE = /(name="csrfmiddlewaretoken" value=")[^"]*"/g;
  const SEQ_ATTR = / data-live-seq="[^"]*"/g;
  function stateOf(html) {
    return html.replace(CSRF_VALUE, '$1"').replace(SEQ_ATTR, "");
  }
  // An htmx swap changes the page without telling this map: forget it all, so the next
  // fetch replaces (as it always did) instead of trusting a stale record.
  document.addEventListener("htmx:afterSwap", function () {
    builtFrom.clear();
  });
  // Deferred scripts run in document order once the page is parsed and events.js is the
  // first of them: nothing has changed the page's live elements yet.
  document.querySelectorAll("[data-live-src][id]").forEach(function (el) {
    builtFrom.set(el.id, stateOf(el.outerHTML));
  });

  // Put `el` (parsed from the server) in place of the element with its id, or into its
  // data-swap container. `seq` is its version (null: an unversioned push).
  function place(el, seq) {
    const existing = el.id ? document.getElementById(el.id) : null;
    if (existing) {
      if (seq !== null && shownSeq(existing) >= seq) return false;
      const state = stateOf(el.outerHTML);
      if (seq !== null && builtFrom.get(el.id) === state) {
        existing.dataset.liveSeq = String(seq); // newer version, same state: keep the DOM
        return false;
      }
      builtFrom.set(el.id, state);
      if (seq !== null) el.dataset.liveSeq = String(seq);
      carryOver(existing, el, seq);
      existing.replaceWith(el);
      activate(el);
      scheduleExpiry(el);
      return true;
    }
    const spec = el.getAttribute("data-swap");
    if (!spec) return false;
    const [where, targetId] = spec.split(":");
    const target = document.getElementById(targetId);
    if (!target || !PLACES.has(where)) return false;
    // A child is part of its container's state: a container fetched at this version or
    // later already holds it.
    if (seq !== null && shownSeq(target) >= seq) return false;
    target.insertAdjacentElement(where, el);
    activate(el);
    return true;
  }

  // A live element that holds others (the Runs list's rows, each with its live state): the
  // ones inside a fresh copy are as new as it is, unless the page already shows a newer
  // version of one (a push that came first), which is kept. Boxes the user ticked stay
  // ticked (the finished jobs' Compare boxes) when the list around them changes.
  function carryOver(existing, el, seq) {
    el.querySelectorAll("[data-live-src][id]").forEach(function (inner) {
      const shown = existing.querySelector("#" + CSS.escape(inner.id));
      if (seq !== null && shown && shownSeq(shown) > seq) {
        inner.replaceWith(shown);
        return;
      }
      builtFrom.set(inner.id, stateOf(inner.outerHTML));
      if (seq !== null) inner.dataset.liveSeq = String(seq);
    });
    const ticked = new Set();
    existing.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
      ticked.add(box.name + "=" + box.value);
    });
    el.querySelectorAll("input[type=checkbox]").forEach(function (box) {
      if (ticked.has(box.name + "=" + box.value)) box.checked = true;
    });
  }

  // An element that says when its state runs out (data-live-expires: a notice's expiry) is
  // fetched again then, so an expired notice leaves open pages too.
  const expiryTimers = new Map();
  function scheduleExpiry(el) {
    if (!el || !el.id) return;
    clearTimeout(expiryTimers.get(el.id));
    expiryTimers.delete(el.id);
    const at = Date.parse(el.getAttribute("data-live-expires") || "");
    if (!Number.isFinite(at)) return;
    const wait = Math.max(at - Date.now(), 0) + 1000;
    if (wait > 2147483000) return; // beyond setTimeout's range: a later fetch reschedules
    const id = el.id;
    expiryTimers.set(id, setTimeout(function () {
      expiryTimers.delete(id);
      const current = document.getElementById(id);
      if (current) refresh(current);
    }, wait));
  }

  function swapFragments(html, seq) {
    const version = seq === undefined ? null : seq;
    const tpl = document.createElement("template");
    tpl.innerHTML = (html || "").trim();
    let swapped = 0;
    for (const el of Array.from(tpl.content.children)) {
      if (place(el, version)) swapped++;
    }
    document.dispatchEvent(new CustomEvent("spark:fragment", { detail: { swapped } }));
    dismissStartBanners();
    return swapped;
  }

  // "Starting “X” on spark-1." is news until the run is up: once the run's live progress
  // on this page says it is ready (or over), the banner goes (apps/runs/views.py tags it).
  const OVER_STARTING = new Set(["ready", "stopping", "stopped", "failed"]);
  function dismissStartBanners() {
    document.querySelectorAll(".msg[data-tags]").forEach((msg) => {
      const tagged = /(?:^|\s)run-start-(\d+)(?:\s|$)/.exec(msg.dataset.tags);
      const progress = tagged && document.getElementById(`run-${tagged[1]}-progress`);
      if (progress && OVER_STARTING.has(progress.dataset.state)) msg.remove();
    });
  }
  document.addEventListener("DOMContentLoaded", dismissStartBanners);

  // Fetch one live element's current state; applied only if newer than what is shown.
  function refresh(el) {
    const url = el.getAttribute("data-live-src");
    const id = el.id;
    if (!url || !id) return Promise.resolve(true);
    return fetch(url, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "text/html", "X-Live-Fetch": "1" },
    })
      .then(function (response) {
        const seq = Number(response.headers.get("X-Live-Seq"));
        // A redirect to the login page, a 404 (deleted) or a 503 (Redis down) is no state.
        if (!response.ok || response.redirected || !seq) return response.ok || response.status === 404;
        return response.text().then(function (html) {
          const tpl = document.createElement("template");
          tpl.innerHTML = html.trim();
          const fresh = tpl.content.firstElementChild;
          if (fresh && fresh.id === id && place(fresh, seq)) {
            document.dispatchEvent(new CustomEvent("spark:fragment", { detail: { swapped: 1 } }));
          }
          return true;
        });
      })
      .catch(function () {
        return false;
      });
  }

  function refreshAll() {
    const elements = Array.from(document.querySelectorAll("[data-live-src][id]"));
    return Promise.all(elements.map(refresh)).then(function (results) {
      return results.every(Boolean);
    });
  }

  function apply(message) {
    if (message.html) swapFragments(message.html, message.seq);
    for (const id of message.changed || []) {
      const el = document.getElementById(id);
      if (el && el.hasAttribute("data-live-src") && shownSeq(el) < message.seq) refresh(el);
    }
  }

  function receive(data) {
    if (typeof data !== "string") return;
    let message = null;
    if (data.charAt(0) === "{") {
      try {
        message = JSON.parse(data);
      } catch (e) {
        message = null;
      }
    }
    if (!message || typeof message.seq !== "number") {
      swapFragments(data); // an unversioned fragment
      return;
    }
    if (syncing) held.push(message);
    else apply(message);
  }

  function onOpen(ws) {
    delay = 1000;
    openCount++;
    syncing = true;
    held = [];
    setStatus("syncing", "syncing…");
    // What the server answers now is the truth, whatever version the page saw before (a
    // Redis whose clock went back could otherwise hold a page on its old versions).
    document.querySelectorAll("[data-live-src][data-live-seq]").forEach(function (el) {
      el.dataset.liveSeq = "0";
    });
    document.dispatchEvent(new CustomEvent("sparkpanel:socket-open", { detail: { count: openCount } }));
    refreshAll().then(function (complete) {
      if (socket !== ws) return; // closed meanwhile: the next open syncs again
      syncing = false;
      const pending = held;
      held = [];
      pending.sort(function (a, b) {
        return a.seq - b.seq;
      });
      pending.forEach(apply);
      document.body.dataset.liveSynced = String(openCount);
      if (complete) setStatus("live", "live");
      else retrySync(ws, 5000);
    });
  }

  // A part could not be fetched (Redis down: a 503): say so, and try again while the
  // socket stays open.
  function retrySync(ws, wait) {
    setStatus("stale", "live · some parts not current");
    setTimeout(function () {
      if (socket !== ws) return;
      refreshAll().then(function (complete) {
        if (socket !== ws) return;
        if (complete) setStatus("live", "live");
        else retrySync(ws, Math.min(wait * 2, 30000));
      });
    }, wait);
  }

  function connect() {
    wanted = true;
    if (socket && socket.readyState <= 1) return;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(scheme + "//" + location.host + "/ws/events/");
    socket = ws;
    ws.addEventListener("open", function () {
      onOpen(ws);
    });
    ws.addEventListener("message", function (event) {
      if (socket === ws) receive(event.data);
    });
    ws.addEventListener("close", function (event) {
      if (socket !== ws) return;
      socket = null;
      syncing = false;
      held = [];
      if (event.code === 4401 || event.code === 4403) {
        setStatus("off", event.code === 4401 ? "signed out" : "no access");
        return;
      }
      if (!wanted) {
        setStatus("off", "offline");
        return;
      }
      setStatus("reconnecting", "reconnecting…");
      setTimeout(function () {
        if (wanted) connect();
      }, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }

  // Close the socket and stay offline until connect() (the console, and the tests that
  // show a page catches up on reconnect).
  function disconnect() {
    wanted = false;
    if (socket) socket.close();
  }

  window.SparkEvents = {
    swapFragments: swapFragments,
    refreshAll: refreshAll,
    connect: connect,
    disconnect: disconnect,
  };
  // Back online (a laptop waking up, Wi-Fi back): reconnect now rather than at the end of
  // the backoff. A page restored from the back/forward cache syncs again as well.
  window.addEventListener("online", function () {
    if (wanted && !socket && document.getElementById("live-status")) {
      delay = 1000;
      connect();
    }
  });
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted || !wanted || !document.getElementById("live-status")) return;
    if (socket && socket.readyState === 1) onOpen(socket);
    else connect();
  });

  // A form with data-confirm asks first (no inline onsubmit: the Content-Security-Policy
  // runs no inline script). Delegated, so forms swapped in later ask too.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    const question = form && form.getAttribute ? form.getAttribute("data-confirm") : null;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live-expires][id]").forEach(scheduleExpiry);
    if (document.getElementById("live-status")) connect();
  });
})();
