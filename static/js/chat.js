// SparkPanel chat: one WebSocket to /ws/chat/<id>/. The panel relays the model's stream in
// small batches with sequence numbers. Model output is only ever inserted as text
// (textContent), never as HTML, so nothing it writes can run here. A missed batch (a gap
// in the sequence) is repaired by re-fetching the saved message when the answer ends.
(function () {
  "use strict";
  const form = document.getElementById("chat-form");
  const log = document.getElementById("chat-log");
  if (!form || !log) return;
  const textarea = form.querySelector("textarea");
  const sendButton = form.querySelector("button[type=submit]");
  const stopButton = form.querySelector("[data-stop]");
  const stateEl = form.querySelector("[data-chat-state]");
  let ws = null;
  let current = null; // {id, el, seq, gap}
  let delay = 1000;

  function setState(text) { if (stateEl) stateEl.textContent = text; }

  function streaming(on) {
    stopButton.hidden = !on;
    sendButton.disabled = on || textarea.disabled;
  }

  function scroll() { log.scrollTop = log.scrollHeight; }

  function clone(id) {
    const el = document.getElementById(id).content.firstElementChild.cloneNode(true);
    const empty = log.querySelector(".chat-empty");
    if (empty) empty.remove();
    log.appendChild(el);
    return el;
  }

  function stats(data) {
    const parts = [];
    if (data.ttft_s != null) parts.push(`TTFT ${data.ttft_s.toFixed(2)} s`);
    if (data.tok_s) parts.push(`${data.tok_s.toFixed(1)} tok/s`);
    // On a simulated Spark both figures are in its time (apps/hosts/clock.py), and say so.
    if (data.clock_label && (data.ttft_s != null || data.tok_s)) parts.push(data.clock_label);
    if (data.prompt_tokens != null) parts.push(`${data.prompt_tokens} prompt + ${data.completion_tokens} completion tokens`);
    if (data.finish_reason) parts.push(`finish: ${data.finish_reason}`);
    if (data.status === "stopped") parts.push("stopped");
    return parts.join(" · ");
  }

  function fill(el, message) {
    el.querySelector("[data-content]").textContent = message.content || "";
    const reasoning = el.querySelector("[data-reasoning]");
    if (reasoning) {
      reasoning.textContent = message.reasoning || "";
      reasoning.closest("details").hidden = !message.reasoning;
    }
  }

  function onMessage(data) {
    if (data.type === "start") {
      const user = clone("chat-user-template");
      user.dataset.message = data.user_message.id;
      user.querySelector("[data-content]").textContent = data.user_message.content;
      const el = clone("chat-message-template");
      el.dataset.message = data.message;
      current = { id: data.message, el, seq: 0, gap: false };
      streaming(true);
      setState("answering…");
      scroll();
    } else if (data.type === "delta" && current && data.message === current.id) {
      if (data.seq !== current.seq + 1) current.gap = true;
      current.seq = data.seq;
      if (data.reasoning) {
        const r = current.el.querySelector("[data-reasoning]");
        r.textContent += data.reasoning;
        r.closest("details").hidden = false;
      }
      if (data.content) current.el.querySelector("[data-content]").textContent += data.content;
      scroll();
    } else if (data.type === "done" && current && data.message === current.id) {
      const el = current.el;
      el.classList.remove("status-streaming");
      el.classList.add("status-" + data.status);
      el.querySelector("[data-stats]").textContent = stats(data);
      if (data.error) {
        const err = el.querySelector("[data-error]");
        err.textContent = data.error;
        err.hidden = false;
      }
      if (current.gap || data.seq !== current.seq) refetch(current.id, el);
      current = null;
      streaming(false);
      setState("ready");
      scroll();
    } else if (data.type === "error") {
      setState(data.error);
    }
  }

  function refetch(id, el) {
    const url = log.dataset.messageUrl.replace(/0\.json$/, id + ".json");
    fetch(url, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((message) => fill(el, message))
      .catch((e) => console.error("chat refetch", e));
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(scheme + "//" + location.host + form.dataset.ws);
    ws.addEventListener("open", () => { delay = 1000; setState("ready"); form.dataset.connected = "1"; });
    ws.addEventListener("message", (event) => {
      try { onMessage(JSON.parse(event.data)); } catch (e) { console.error("chat message", e); }
    });
    ws.addEventListener("close", (event) => {
      form.dataset.connected = "";
      if (current) {
        // The answer is saved server-side whatever happened to this socket.
        refetch(current.id, current.el);
        current = null;
        streaming(false);
      }
      if (event.code === 4401 || event.code === 4403 || event.code === 4404) {
        setState("not allowed");
        return;
      }
      setState("reconnecting…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    });
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const content = textarea.value;
    if (!content.trim() || !ws || ws.readyState !== WebSocket.OPEN || current) return;
    ws.send(JSON.stringify({ type: "send", content }));
    textarea.value = "";
  });
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  stopButton.addEventListener("click", () => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "stop" }));
  });
  connect();
  scroll();
})();
