// The queue form's hint: before submitting, what queueing the chosen recipe on the chosen
// host would meet — the refusal run admission would answer (busy host, reserved host,
// image, "does not fit") or what the job will do. The data is rendered by the server
// (benchmarks/partials/queue_hint.html); submitting is still judged by the server.
(function () {
  "use strict";

  function hints() {
    var node = document.getElementById("queue-hints-data");
    if (!node) return [];
    try {
      return JSON.parse(node.textContent) || [];
    } catch (e) {
      return [];
    }
  }

  function update() {
    var form = document.getElementById("queue-form");
    var out = document.getElementById("queue-hint-text");
    if (!form || !out) return;
    var recipe = form.querySelector("[name=recipe]");
    var host = form.querySelector("[name=host]");
    if (!recipe || !host) return;
    var entry = hints().filter(function (h) { return h.id === host.value; })[0];
    var hint = entry && entry.recipes[recipe.value];
    if (!hint) {
      out.hidden = true;
      return;
    }
    out.textContent = (hint.ok ? "" : "Would be refused: ") + hint.text;
    out.className = "msg " + (hint.ok ? "msg-info" : "msg-error");
    out.dataset.ok = hint.ok ? "true" : "false";
    out.hidden = false;
  }

  function bind() {
    var form = document.getElementById("queue-form");
    if (!form || form.dataset.hintBound) {
      update();
      return;
    }
    form.dataset.hintBound = "1";
    form.addEventListener("change", update);
    update();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", bind);
  } else {
    bind();
  }
  // A re-rendered hint (live update) brings fresh data: show it.
  document.addEventListener("htmx:afterSwap", bind);
})();
