// SparkPanel chat: one WebSocket per conversation, /ws/chat/<id>/. The panel relays the
// model's stream in small batches with sequence numbers. The raw text of an answer is
// kept as text ([data-content], textContent only); what is shown is its Markdown, rendered
// by static/js/markdown.js (sanitised, inert), unless "Raw text" is on. A missed batch (a
// gap in the sequence) is repaired by re-fetching the saved message when the answer ends.
//
// ChatColumn drives one conversation's log and socket; the conversation page has one, the
// side-by-side page (Compare) one per run, all sent the same prompt at once.
(function () {
  "use strict";
  const MD = window.SparkMarkdown;

  function stats(data) {
    const parts = [];
    if (data.ttft_s != null) parts.push(`TTFT ${data.ttft_s.toFixed(2)} s`);
    if (data.tok_s) parts.push(`${data.tok_s.toFixed(1)} tok/s`);
    // On a simulated Spark both figures are in its time (apps/hosts/clock.py), and say so.
    if (data.clock_label && (data.ttft_s != null || data.tok_s)) parts.push(data.clock_label);
    // grouped as the pages group every count ("8,749,963"; apps/core/templatetags/sparkpanel.py)
    const count = (n) => Number(n).toLocaleString("en-US");
    if (data.prompt_tokens != null) parts.push(`${count(data.prompt_tokens)} prompt + ${count(data.completion_tokens)} completion tokens`);
    if (data.finish_reason) parts.push(`finish: ${data.finish_reason}`);
    if (data.status === "stopped") parts.push("stopped");
    return parts.join(" · ");
  }

  function button(label, attr) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "link small";
    b.textContent = label;
    b.setAttribute(attr, "");
    return b;
  }

  class ChatColumn {
    constructor(log, wsPath, options) {
      this.log = log;
      this.wsPath = wsPath;
      this.options = options || {};
      this.ws = null;
      this.current = null; // {id, el, seq, gap, text, stream}
      this.delay = 1000;
      this.raw = false;
      for (const el of log.querySelectorAll(".chat-msg")) this.dress(el);
      this.scroll();
    }

    emit(name, detail) { if (this.options[name]) this.options[name](detail, this); }

    scroll() { this.log.scrollTop = this.log.scrollHeight; }

    // Markdown view and tools for one message element (saved or new).
    dress(el) {
      const tools = el.querySelector("[data-tools]");
      const assistant = el.classList.contains("chat-assistant");
      if (assistant) {
        const content = el.querySelector("[data-content]");
        let view = el.querySelector("[data-rendered]");
        if (!view && MD) {
          view = document.createElement("div");
          view.className = "chat-md";
          view.setAttribute("data-rendered", "");
          content.after(view);
        }
        if (view && !el.classList.contains("status-streaming")) view.replaceChildren(MD.render(content.textContent));
        this.showRaw(el, this.raw);
        if (tools && window.SparkPanel && !tools.querySelector("[data-copy-answer]")) {
          // the whole answer as the model wrote it (its Markdown), static/js/copy.js
          const copy = button("Copy", "data-copy-answer");
          copy.addEventListener("click", () => window.SparkPanel.copyText(content.textContent, copy));
          tools.append(copy);
        }
        if (tools && MD && !tools.querySelector("[data-raw-toggle]")) {
          const toggle = button("Raw text", "data-raw-toggle");
          toggle.addEventListener("click", () => this.showRaw(el, !el.classList.contains("show-raw")));
          tools.append(toggle);
        }
        if (tools && this.options.writable && !tools.querySelector("[data-regenerate]")) {
          const again = button("Regenerate", "data-regenerate");
          again.addEventListener("click", () => this.regenerate());
          tools.append(again);
        }
      } else if (tools && this.options.writable && !tools.querySelector("[data-edit]")) {
        const edit = button("Edit", "data-edit");
        edit.addEventListener("click", () => this.edit(el));
        tools.append(edit);
      }
      this.tools();
    }

    showRaw(el, on) {
      const view = el.querySelector("[data-rendered]");
      if (!view) return;
      el.classList.toggle("show-raw", on);
      view.hidden = on;
      el.querySelector("[data-content]").hidden = !on;
      const toggle = el.querySelector("[data-raw-toggle]");
      if (toggle) toggle.textContent = on ? "Formatted" : "Raw text";
    }

    // Only the last answer can be regenerated; nothing can be edited while one streams.
    tools() {
      const busy = this.current !== null;
      const answers = this.log.querySelectorAll(".chat-assistant [data-regenerate]");
      answers.forEach((b, i) => { b.hidden = busy || i !== answers.length - 1; });
      this.log.querySelectorAll("[data-edit]").forEach((b) => { b.hidden = busy; });
    }

    clone(templateId) {
      const el = document.getElementById(templateId).content.firstElementChild.cloneNode(true);
      const empty = this.log.querySelector(".chat-empty");
      if (empty) empty.remove();
      this.log.appendChild(el);
      return el;
    }

    dropFrom(id) {
      // An edit or a regeneration replaces message `id` and everything after it.
      const first = this.log.querySelector(`.chat-msg[data-message="${Number(id)}"]`);
      if (!first) return;
      let el = first;
      while (el) { const next = el.nextElementSibling; el.remove(); el = next; }
    }

    onMessage(data) {
      if (data.type === "start") {
        if (data.replaced_from) this.dropFrom(data.replaced_from);
        if (data.user_message) {
          const user = this.clone(this.options.userTemplate || "chat-user-template");
          user.dataset.message = data.user_message.id;
          user.querySelector("[data-content]").textContent = data.user_message.content;
          this.dress(user);
        }
        const el = this.clone(this.options.answerTemplate || "chat-message-template");
        el.dataset.message = data.message;
        this.current = { id: data.message, el, seq: 0, gap: false, text: "", stream: null };
        this.dress(el);
        const view = el.querySelector("[data-rendered]");
        if (view && MD) this.current.stream = new MD.MarkdownStream(view);
        this.tools();
        this.emit("onStart", data);
        this.scroll();
      } else if (data.type === "delta" && this.current && data.message === this.current.id) {
        const cur = this.current;
        if (data.seq !== cur.seq + 1) cur.gap = true;
        cur.seq = data.seq;
        if (data.reasoning) {
          const r = cur.el.querySelector("[data-reasoning]");
          r.textContent += data.reasoning;
          r.closest("details").hidden = false;
        }
        if (data.content) {
          cur.text += data.content;
          cur.el.querySelector("[data-content]").textContent = cur.text;
          if (cur.stream) cur.stream.update(cur.text);
        }
        this.scroll();
      } else if (data.type === "done" && this.current && data.message === this.current.id) {
        const cur = this.current;
        const el = cur.el;
        el.classList.remove("status-streaming");
        el.classList.add("status-" + data.status);
        el.querySelector("[data-stats]").textContent = stats(data);
        if (data.error) {
          const err = el.querySelector("[data-error]");
          err.textContent = data.error;
          err.hidden = false;
        }
        if (cur.gap || data.seq !== cur.seq) this.refetch(cur.id, el);
        else if (cur.stream) cur.stream.finish(cur.text);
        this.current = null;
        this.tools();
        this.emit("onDone", data);
        this.scroll();
      } else if (data.type === "error") {
        this.emit("onState", data.error);
        this.emit("onRefused", data.error);
      }
    }

    refetch(id, el) {
      const url = this.log.dataset.messageUrl.replace(/0\.json$/, id + ".json");
      fetch(url, { credentials: "same-origin" })
        .then((r) => r.json())
        .then((message) => {
          el.querySelector("[data-content]").textContent = message.content || "";
          const reasoning = el.querySelector("[data-reasoning]");
          if (reasoning) {
            reasoning.textContent = message.reasoning || "";
            reasoning.closest("details").hidden = !message.reasoning;
          }
          const view = el.querySelector("[data-rendered]");
          if (view && MD) view.replaceChildren(MD.render(message.content || ""));
        })
        .catch((e) => console.error("chat refetch", e));
    }

    connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const ws = this.ws = new WebSocket(scheme + "//" + location.host + this.wsPath);
      ws.addEventListener("open", () => { this.delay = 1000; this.emit("onOpen"); });
      ws.addEventListener("message", (event) => {
        try { this.onMessage(JSON.parse(event.data)); } catch (e) { console.error("chat message", e); }
      });
      ws.addEventListener("close", (event) => {
        this.emit("onClose");
        if (this.current) {
          // The answer is saved server-side whatever happened to this socket.
          this.refetch(this.current.id, this.current.el);
          this.current = null;
          this.tools();
          this.emit("onDone", { status: "closed" });
        }
        if (event.code === 4401 || event.code === 4403 || event.code === 4404) {
          this.emit("onState", "not allowed");
          return;
        }
        this.emit("onState", "reconnecting…");
        setTimeout(() => this.connect(), this.delay);
        this.delay = Math.min(this.delay * 2, 15000);
      });
    }

    get open() { return this.ws && this.ws.readyState === WebSocket.OPEN; }

    send(payload) {
      if (!this.open || this.current) return false;
      this.ws.send(JSON.stringify(payload));
      return true;
    }

    stop() { if (this.open) this.ws.send(JSON.stringify({ type: "stop" })); }

    regenerate() { this.send({ type: "regenerate" }); }

    edit(el) {
      if (this.current || el.querySelector("[data-editor]")) return;
      const content = el.querySelector("[data-content]");
      const editor = document.createElement("div");
      editor.setAttribute("data-editor", "");
      editor.className = "chat-editor";
      const area = document.createElement("textarea");
      area.rows = 3;
      area.value = content.textContent;
      area.setAttribute("aria-label", "Edit message");
      const save = button("Save & send", "data-edit-send");
      save.className = "primary small";
      const cancel = button("Cancel", "data-edit-cancel");
      editor.append(area, save, cancel);
      content.hidden = true;
      content.after(editor);
      area.focus();
      const close = () => { editor.remove(); content.hidden = false; };
      cancel.addEventListener("click", close);
      area.addEventListener("keydown", (event) => {
        if (event.key === "Escape") close();
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) save.click();
      });
      save.addEventListener("click", () => {
        if (!area.value.trim()) return;
        const id = Number(el.dataset.message);
        if (this.send({ type: "send", content: area.value, edit: id })) close();
      });
    }
  }

  window.SparkChat = { ChatColumn };

  // --- the conversation page ------------------------------------------------------------
  const form = document.getElementById("chat-form");
  const log = document.getElementById("chat-log");
  if (!log || log.dataset.compare !== undefined) return;
  if (!form) {
    new ChatColumn(log, null, {}); // read-only: rendered, never connected
    return;
  }
  const textarea = form.querySelector("textarea");
  const sendButton = form.querySelector("button[type=submit]");
  const stopButton = form.querySelector("[data-stop]");
  const stateEl = form.querySelector("[data-chat-state]");
  const setState = (text) => { if (stateEl) stateEl.textContent = text; };
  // The conversation's run is a live element (#chat-run-<id>, apps/chat/live.py): every
  // state change of the run is pushed to the page, and events.js swaps the element in, so
  // it is looked up afresh each time. Its data-state is the run's; data-not-ready says why
  // Send is off.
  const runEl = () => document.querySelector("[data-chat-run]");
  const runReady = () => { const el = runEl(); return !!el && el.dataset.state === "ready"; };
  let runState = runEl() ? runEl().dataset.state || "" : ""; // the state last acted on
  // An on-demand model (#chat-load): while it loads, its progress is polled and a message
  // typed meanwhile waits in the box until the model is ready, then goes. The panel is
  // hidden while the model's run is ready, and shown again when that run stops.
  const load = document.getElementById("chat-load");
  let loading = !!load && !load.hidden;
  let queued = false;
  let answering = false;
  let pending = "";
  // Send and the line under the box say where things stand whenever no answer streams.
  const settle = () => {
    stopButton.hidden = !answering;
    sendButton.disabled = answering || textarea.disabled || (!loading && !runReady());
    if (answering || !column.open) return;
    if (loading) setState("waiting for the model…");
    else if (runReady()) setState("ready");
    else {
      const el = runEl();
      setState((el && el.dataset.notReady) || "Send is off: this conversation's model is not ready.");
    }
  };
  const column = new ChatColumn(log, form.dataset.ws, {
    writable: true,
    onOpen: () => {
      form.dataset.connected = "1";
      settle();
      if (queued && !loading) { queued = false; send(); }
    },
    onClose: () => { form.dataset.connected = ""; },
    onState: setState,
    onStart: () => { pending = ""; answering = true; settle(); setState("answering…"); },
    onDone: () => { answering = false; settle(); },
    onRefused: () => { if (pending && !textarea.value) textarea.value = pending; pending = ""; },
  });
  const send = () => {
    const content = textarea.value;
    if (!content.trim()) return;
    if (loading) {
      queued = true;
      load.querySelector("[data-load-queued]").hidden = false;
      setState("waiting for the model…");
      return;
    }
    if (!runReady()) { settle(); return; } // Ctrl+Enter while Send is off
    if (column.send({ type: "send", content })) {
      pending = content; // given back to the box if the panel refuses it
      textarea.value = "";
    }
  };
  // The load panel's answer names the run once the model is ready: the page's run line
  // becomes that run's, and follows it from then on.
  const placeRun = (html) => {
    const tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    const fresh = tpl.content.firstElementChild;
    const old = runEl();
    if (!fresh || !old || old.id === fresh.id) return;
    old.replaceWith(fresh);
    runState = fresh.dataset.state || "";
    // A push about it between that answer and now went to no element: fetch it again.
    if (window.SparkEvents) window.SparkEvents.refreshAll();
  };
  let poll = () => {};
  if (load) {
    const message = load.querySelector("[data-load-message]");
    const bar = load.querySelector("[data-load-bar]");
    const start = load.querySelector("[data-load-start]");
    const csrf = () => {
      const input = document.querySelector("input[name=csrfmiddlewaretoken]");
      return input ? input.value : "";
    };
    const show = (data) => {
      message.textContent = data.message || "";
      load.dataset.state = data.state || "";
      if (typeof data.percent === "number") bar.value = data.percent;
      else bar.removeAttribute("value");
      start.hidden = data.state !== "can_load";
      if (data.ready) {
        loading = false;
        if (data.run_html) placeRun(data.run_html);
        load.classList.replace("msg-info", "msg-success");
        bar.value = 100;
        load.querySelector("[data-load-queued]").hidden = true;
        settle();
        if (queued && column.open) { queued = false; send(); }
      }
    };
    const ask = (method) => fetch(load.dataset.loadUrl, {
      method, credentials: "same-origin",
      headers: method === "POST" ? { "X-CSRFToken": csrf() } : {},
    }).then((r) => r.json()).then(show).catch(() => {});
    poll = () => {
      if (!loading) return;
      ask("GET").finally(() => { if (loading) setTimeout(poll, 2000); });
    };
    start.addEventListener("click", () => ask("POST"));
    poll();
  }
  // The run changed state (an operator stopped it, the watchdog, an idle unload): Send
  // goes off with the reason, or an on-demand model's load panel comes back.
  document.addEventListener("spark:fragment", () => {
    const el = runEl();
    const state = el ? el.dataset.state || "" : "";
    if (state === runState) return;
    runState = state;
    if (state !== "ready" && load && !loading) {
      loading = true;
      load.hidden = false;
      load.classList.replace("msg-success", "msg-info");
      poll();
    }
    settle();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  stopButton.addEventListener("click", () => column.stop());
  column.connect();
})();
